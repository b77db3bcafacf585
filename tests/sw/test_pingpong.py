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
    result, reports = run_kernel("pingpong", backend("pysim"), preset="tiny",
                                 topology=MACHINE["topology"])
    assert result["correct"], result["problems"]
    assert result["kernel"] == "pingpong" and result["preset"] == "tiny"
    assert result["backend"] == "pysim" and len(reports) == 1
    (run,) = result["runs"]
    assert run["config"]["topology"] == list(MACHINE["topology"])
    assert run["cycles"] == reports[0].cycles > 0
    fabric = get_preset("tiny").latency_ns()["intra"]
    assert run["fabric_latency_ns"] == {"intra": fabric}
    assert run["core_overhead_ns"] > 0
    assert run["latency_ns"]["intra"] == pytest.approx(fabric + run["core_overhead_ns"], rel=0.03)
    assert run["expected_latency_ns"] == {"intra": fabric + run["core_overhead_ns"]}
    assert abs(run["error_pct"]["intra"]) <= 3.0


@pytest.mark.slow
def test_cm384_all_classes_within_three_percent():
    result, _ = run_kernel("pingpong", backend("verilator"))
    assert result["correct"], result["problems"]
    (run,) = result["runs"]
    assert set(run["latency_ns"]) == {"intra", "one_hop", "two_hop"}
    for cls, err in run["error_pct"].items():
        assert abs(err) <= 3.0, (cls, result)
