"""The ``pingpong`` latency kernel (sw/kernels/pingpong.py) and ``epfabric run pingpong``."""

import pytest

from epfabric.sim.machine import backend
from epfabric.sim.run import run_pingpong
from epfabric.sw.kernels import pingpong
from epfabric.sw.presets import get_preset

from utils import MACHINE, machine


def test_peers_follow_the_topology():
    m = machine()
    assert pingpong.peers(m.config) == {"local": (0, 1), "intra": (1, 0)}
    big = machine(topology=("superpod", 2, 2, 2))
    assert pingpong.peers(big.config) == {"local": (0, 1), "intra": (1, 0), "one_hop": (2, 0),
                                          "two_hop": (4, 0)}


def test_one_way_latency_is_fabric_plus_core_overhead():
    result, _ = run_pingpong("tiny", backend("pysim"), topology=MACHINE["topology"])
    assert result["correct"], result["problems"]
    fabric = get_preset("tiny").latency_ns()["intra"]
    assert result["fabric_latency_ns"] == {"intra": fabric}
    assert result["core_overhead_ns"] > 0
    assert result["latency_ns"]["intra"] == pytest.approx(fabric + result["core_overhead_ns"],
                                                          rel=0.03)


@pytest.mark.slow
def test_cm384_all_classes_within_three_percent():
    result, _ = run_pingpong("cm384", backend("verilator"))
    assert result["correct"], result["problems"]
    assert set(result["latency_ns"]) == {"intra", "one_hop", "two_hop"}
    for cls, err in result["error_pct"].items():
        assert abs(err) <= 3.0, (cls, result)
