"""The ``pingpong`` latency kernel (sw/kernels/pingpong.py), run through ``run_kernel``."""

import pytest

from epfabric.sim.backends.machine import backend
from epfabric.sw.kernels import pingpong, run_kernel
from epfabric.sw.presets import get_preset

from utils import MACHINE, machine


def test_peers_follow_the_topology():
    m = machine()
    assert pingpong.peers(m.config) == {"local": (0, 1), "intra": (1, 0)}
    big = machine(topology=("superpod", 2, 2, 2))
    assert pingpong.peers(big.config) == {"local": (0, 1), "intra": (1, 0), "one_hop": (2, 0),
                                          "two_hop": (4, 0)}


def test_default_shape_has_every_class_the_preset_allows():
    kernel = pingpong.KERNEL
    assert kernel.default_preset == "cm384"
    assert kernel.default_topology(get_preset("cm384")) == ("superpod", 2, 2, 2)
    assert kernel.default_topology(get_preset("incmoe-testbed")) == ("star", 2)


def test_one_way_latency_is_fabric_plus_core_overhead():
    result = run_kernel("pingpong", backend("pysim"), preset="tiny",
                        topology=MACHINE["topology"], max_cycles=2000)   # takes 141
    reports = result.reports
    assert result.correct, result.problems
    assert result.kernel == "pingpong" and result.preset == "tiny"
    assert result.backend == "pysim" and len(reports) == 1
    (run,) = result.runs
    assert run.config.topology == tuple(MACHINE["topology"])
    assert run.cycles == reports[0].cycles > 0
    # Measured on the simulated machine: the round trips of the MARK trace, halved. The
    # intra-NPU class minus the core's own overhead (the local round trip) is the preset's
    # 8 ns to the cycle, and the overhead is the core's 5 cycles; nothing here is read back
    # from the report's own fabric figure.
    tiny = get_preset("tiny")
    marks = {t["event"]: t["cycle"] for t in reports[0].marks(rank=0, core=0)}
    def one_way(k):
        seqs = [k * pingpong.ROUNDS + i + 1 for i in range(pingpong.ROUNDS)]
        return sum(marks[pingpong.END + s] - marks[pingpong.START + s] for s in seqs) / len(seqs) / 2
    assert run.config.aivs_per_die == 2            # core 1 of rank 0 measures the overhead
    assert list(pingpong.peers(machine().config)) == ["local", "intra"]
    overhead, intra = one_way(0), one_way(1)
    assert overhead == 5                                   # cycles, pinned
    assert (intra - overhead) * tiny.cycle_ns == tiny.latency_ns()["intra"] == 8.0
    assert run.check["core_overhead_ns"] == overhead * tiny.cycle_ns
    assert run.check["latency_ns"] == {"intra": intra * tiny.cycle_ns}
    assert run.check["error_pct"] == {"intra": 0.0}


@pytest.mark.slow
def test_cm384_all_classes_within_three_percent():
    result = run_kernel("pingpong", backend("verilator"))
    assert result.correct, result.problems
    (run,) = result.runs
    assert set(run.check["latency_ns"]) == {"intra", "one_hop", "two_hop"}
    for cls, err in run.check["error_pct"].items():
        assert abs(err) <= 3.0, (cls, result)
