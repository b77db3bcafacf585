"""The wait-for graph of the in-network superpod (hw/inc_waits.py): acyclic as built, and the
check sees the cyclic wait of docs/concepts/inc-deadlock.md when tier-1 units sum groups that
leave their board."""

import pytest

from epfabric.hw.inc_waits import find_cycle, wait_graph
from epfabric.hw.topology import subtrees, superpod

from utils import tiny_timing

TIMING = tiny_timing()

#: every shape class: one board (no tier-2), two, three and four boards, NPUs of 1 and 2 dies,
#: and 64 dies on two boards and on four (the adversarial soak's shape)
SHAPES = [(2, 2, 1), (1, 2, 2), (1, 4, 2), (2, 2, 2), (1, 8, 2), (2, 2, 3), (1, 2, 4),
          (2, 16, 2), (2, 8, 4)]


def routing(shape):
    return superpod(TIMING, *shape, data_bytes=64, inc={"window": 2}, routing_only=True)


@pytest.mark.parametrize("shape", SHAPES)
def test_the_in_network_superpod_has_no_cyclic_wait(shape):
    r = routing(shape)
    graph = wait_graph(r)
    assert find_cycle(graph) is None
    units = [n for n, outs in graph.items() if n[0] == "unit" and outs]
    # the check is about something: the die switches, the tier-1 and (with boards) the tier-2
    # units all sum groups
    assert any(n[1].startswith("die") for n in units)
    assert any(n[1].startswith("t1_") for n in units)
    if shape[2] > 1:
        assert any(n[1].startswith("t2_") for n in units)


@pytest.mark.parametrize("shape", [(1, 2, 2), (1, 4, 2), (2, 2, 3)])
def test_tier1_units_summing_groups_that_leave_the_board_close_a_cycle(shape):
    """Negative control: the reduction tables as the paths alone give them (tier-1 units sum
    every group whose paths meet there, as before the fix) have the plane ring: two tier-1
    units and one tier-2 plane."""
    r = routing(shape)
    r["tables"] = subtrees(r["ranks"], r["routes"], r["ends"])
    cycle = find_cycle(wait_graph(r))
    assert cycle is not None
    units = {n[1] for n in cycle if n[0] == "unit"}
    assert len(units) >= 2 and all(u.startswith("t1_") for u in units)
    planes = {r["ends"][n[1]][1][0] for n in cycle if n[0] == "link"
              if r["ends"][n[1]][1][0].startswith("t2_")}
    assert len(planes) == 1


def test_on_one_board_the_restriction_changes_no_table():
    """With one board, tier-1 releases only go down: the restricted tables are the paths'."""
    r = routing((2, 2, 1))
    assert r["tables"] == subtrees(r["ranks"], r["routes"], r["ends"])


def test_a_route_to_a_port_without_a_link_is_named():
    r = routing((1, 2, 2))
    r["routes"] = dict(r["routes"], t1_0=(0, 9, 2, 3))
    with pytest.raises(ValueError, match="switch 't1_0' routes to port 9"):
        wait_graph(r)


def test_find_cycle_on_small_graphs():
    assert find_cycle({1: {2}, 2: {3}, 3: set()}) is None
    assert find_cycle({1: {2}, 2: {3}, 3: {1}}) == [1, 2, 3, 1]
    assert find_cycle({1: {2, 3}, 2: {3}, 3: set(), 4: {4}}) == [4, 4]
