"""RoundRobin (hw/arbiter.py): grant order, priority moves only when served, the hold option."""

import pytest

from epfabric.hw.arbiter import RoundRobin
from rejected import rejected
from utils import ComponentSpec, run


def spec(**params):
    return ComponentSpec("epfabric.hw.arbiter:RoundRobin", {"count": 3, **params})


async def script_intent(bench, steps):
    """Each step ``[requests, ready]`` is one cycle; returns ``[valid, grant]`` seen in each."""
    seen = []
    for requests, ready in steps:
        bench.set("requests", requests)
        bench.set("ready", ready)
        seen.append([await bench.get("valid"), await bench.get("grant")])
        await bench.tick()
    return seen


def grants(seen):
    return [grant if valid else None for valid, grant in seen]


def test_every_requester_in_turn_from_the_one_after_the_last_served():
    steps = [[0b111, 1]] * 6 + [[0b101, 1]] * 3 + [[0b000, 1], [0b010, 1], [0b110, 1]]
    seen, _ = run(spec(), script_intent, {"steps": steps})
    assert grants(seen) == [0, 1, 2, 0, 1, 2, 0, 2, 0, None, 1, 2]


def test_priority_moves_only_when_the_grantee_is_served():
    steps = [[0b111, 0], [0b111, 0], [0b111, 1], [0b111, 0], [0b110, 1], [0b111, 1]]
    seen, _ = run(spec(), script_intent, {"steps": steps})
    assert grants(seen) == [0, 0, 0, 1, 1, 2]


def test_without_hold_the_grant_follows_the_requests():
    steps = [[0b011, 1], [0b110, 0], [0b011, 0], [0b011, 1]]
    seen, _ = run(spec(), script_intent, {"steps": steps})
    assert grants(seen) == [0, 1, 1, 1]


def test_hold_keeps_an_unserved_grant_whatever_the_requests():
    steps = [[0b110, 0], [0b001, 0], [0b000, 0], [0b111, 1], [0b111, 1], [0b101, 0], [0b111, 1]]
    seen, _ = run(spec(hold=True), script_intent, {"steps": steps})
    # 1 is granted and not served: held (valid) through requests that change or vanish
    assert grants(seen) == [1, 1, 1, 1, 2, 0, 0]


def test_one_requester():
    # with hold (alone, without it, the arbiter has no register and no clock domain to simulate)
    steps = [[0, 1], [1, 0], [0, 0], [1, 1], [0, 1]]
    seen, _ = run(spec(count=1, hold=True), script_intent, {"steps": steps})
    assert grants(seen) == [None, 0, 0, 0, None]


@pytest.mark.parametrize("params, exc, match", [
    ({"count": 0}, ValueError, r"count must be >= 1, not 0"),
    ({"count": 2.0}, TypeError, r"count must be an integer, not 2.0"),
])
def test_bad_parameters(params, exc, match):
    with pytest.raises(exc, match=match):
        rejected(RoundRobin, **params)
