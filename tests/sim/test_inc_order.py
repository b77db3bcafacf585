"""The order-of-accumulation measurement (sim/tb/inc_order.py): its cost model on a trace
worked by hand, and a small traced run whose takes obey the unit's hazard rule."""

import pytest

from epfabric.sim.tb.inc_order import costs, trace


def test_the_cost_model_on_a_hand_trace():
    """One group, sources 3, 1, 2 arriving in cycles 0, 1, 2, adds one cycle apart (latency
    0): in arrival order nothing waits and the sum is out at cycle 3; in source order
    source 3 waits from cycle 0 until the others are added (cycle 3), the sum is out at 4."""
    run = {"arrivals": [(0, "g", 3), (1, "g", 1), (2, "g", 2)], "latency": 0}
    got = costs(run)
    assert got["arrival"] == {"max_waiting": 0, "max_storage": 1, "mean_done": 3, "max_done": 3}
    assert got["canonical"] == {"max_waiting": 1, "max_storage": 2, "mean_done": 4,
                                "max_done": 4}


@pytest.mark.parametrize("dtype", ["int16", "fp32"])
def test_a_traced_run_takes_a_slot_only_once_its_sum_is_written(dtype):
    """Every contribution the unit takes for a group comes ``latency + 1`` cycles or more
    after the one before (one cycle for integers): replayed in arrival order, none waits."""
    run = trace(dtype=dtype, groups=8, seed=3)
    assert len(run["arrivals"]) >= 8 and run["max_open"] >= 1
    last = {}
    for cycle, group, _src in run["arrivals"]:
        assert group not in last or cycle - last[group] >= run["latency"] + 1
        last[group] = cycle
    assert costs(run)["arrival"]["max_waiting"] == 0
