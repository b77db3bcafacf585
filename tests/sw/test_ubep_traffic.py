"""Data blocks per link class (sw/ubep/traffic.py): exact counts and the closed form.

The machine's own counters against these counts are tested with the kernels
(tests/sw/test_dispatch.py, tests/sw/test_combine.py); here the calculators are checked
against a hand count, a slot-by-slot loop over :func:`path_links`, and a Monte-Carlo of
the workload's routing.
"""

import numpy as np
import pytest

from epfabric.hw.validate import UserError
from epfabric.sw.ubep.traffic import (LINK_KINDS, exact_link_blocks, expected_link_blocks,
                                      link_blocks_per_token, path_links,
                                      per_token_expectation)
from epfabric.sw.ubep.workload import Workload


def routed(ranks, experts, rows, hidden_blocks=1):
    """A workload of one token a rank, routed to ``rows[s]``."""
    idx = np.array([[row] for row in rows])
    x = np.zeros((ranks, 1, hidden_blocks, 1), dtype=np.uint64)
    return Workload.from_arrays(x, idx, np.ones_like(idx), experts)


def test_paths_follow_the_superpod():
    shape = ("superpod", 2, 2, 2)             # 8 dies: NPUs {0,1} {2,3} | {4,5} {6,7}
    assert path_links(3, 3, shape) == ()
    assert path_links(2, 3, shape) == ("direct",)
    assert path_links(0, 3, shape) == ("up", "down")
    assert path_links(6, 1, shape) == ("up", "t2_up", "t2_down", "down")
    assert path_links(1, 0, (1, 2, 2)) == ("up", "down")     # one die an NPU: no direct link


def test_a_hand_counted_routing():
    """8 dies (NPUs {0,1} {2,3} on board 0, {4,5} {6,7} on board 1), one token a rank of 2
    blocks. Rank 0's goes to its own die, its sibling, die 2 (its board) and die 5 (the other
    board); rank r > 0's to r, its sibling r ^ 1, (r + 2) % 8 and (r + 4) % 8."""
    rows = [[0, 1, 2, 5]] + [[r, r ^ 1, (r + 2) % 8, (r + 4) % 8] for r in range(1, 8)]
    w = routed(8, 8, rows, hidden_blocks=2)
    got = exact_link_blocks(w, ("superpod", 2, 2, 2), "cann")
    # direct: rank 0's sibling + 7 siblings = 8 slots. (r + 2) % 8 is on r's board for
    # r = 1, 4, 5 (one hop: up, down) and on the other for r = 2, 3, 6, 7 (two hops); (r + 4) % 8
    # is always two hops. up = down = 2 (rank 0) + 7 + 7 = 16 slots; tier-2 = 1 + 4 + 7 = 12.
    assert got == {"direct": 16, "up": 32, "down": 32, "t2_up": 24, "t2_down": 24}
    assert exact_link_blocks(w, (2, 2, 2), "ubep", "combine") == got   # the same, reversed


def loop_reference(w, shape, system, kernel):
    """A slot-by-slot (UBEP, CANN) or set-by-set (ubep-inc) count over path_links."""
    n, npb, nb = shape
    D, R = n * npb, n * npb * nb
    out = dict.fromkeys(LINK_KINDS, 0)
    for s in range(R):
        for t in range(w.batch):
            dies = [int(e) // w.epr for e in w.topk_idx[s][t]]
            if system != "ubep-inc":
                for d in dies:
                    for kind in path_links(*((s, d) if kernel == "dispatch" else (d, s)), shape):
                        out[kind] += w.hidden_blocks
                continue
            far = {d for d in dies if d // n != s // n}
            links = [("direct",) for d in set(dies) if d // n == s // n and d != s]
            if kernel == "dispatch":            # copied where the paths part
                boards = {d // D for d in far} - {s // D}
                links += [("up",)] * bool(far) + [("t2_up",)] * bool(boards)
                links += [("t2_down",)] * len(boards) + [("down",)] * len(far)
            else:           # contributions reduced where paths meet on the way down
                links += [("up",)] * len(far)
                other = [d for d in far if d // D != s // D]   # tier-1 does not sum them
                links += [("t2_up",)] * len(other) + [("t2_down",)] * bool(other)
                links += [("down",)] * bool(far)
            for path in links:
                for kind in path:
                    out[kind] += w.hidden_blocks
    return out


@pytest.mark.parametrize("shape, experts, topk", [((2, 2, 2), 16, 3), ((1, 2, 2), 8, 2),
                                                  ((2, 1, 2), 8, 4)])
@pytest.mark.parametrize("system", ["cann", "ubep-inc"])
@pytest.mark.parametrize("kernel", ["dispatch", "combine"])
def test_exact_counts_equal_a_slot_by_slot_count(shape, experts, topk, system, kernel):
    n, npb, nb = shape
    w = Workload(ranks=n * npb * nb, batch=6, topk=topk, experts=experts, hidden_blocks=2,
                 words=1, seed=5)
    got = exact_link_blocks(w, shape, system, kernel)
    want = loop_reference(w, shape, system, kernel)
    assert got == want


#: Monte-Carlo shapes: (superpod shape, experts, topk); every class is used at least once and
#: none is so rare that the normal approximation of 3 sigma fails
MC_CASES = [((2, 2, 2), 16, 4), ((1, 2, 2), 8, 2), ((2, 2, 2), 32, 2)]


def monte_carlo(shape, experts, topk, system, kernel, tokens=24_000, seed=11):
    """``{kind: (mean per token block, sigma of the mean)}`` over a drawn workload."""
    n, npb, nb = shape
    R = n * npb * nb
    w = Workload(ranks=R, batch=tokens // R, topk=topk, experts=experts, words=1, seed=seed)
    per = link_blocks_per_token(w, shape, system, kernel)
    return {k: (v.mean(), v.std(ddof=1) / np.sqrt(v.size)) for k, v in per.items()}


@pytest.mark.parametrize("shape, experts, topk", MC_CASES)
@pytest.mark.parametrize("system, kernel", [("cann", "dispatch"), ("ubep", "combine"),
                                            ("ubep-inc", "dispatch"), ("ubep-inc", "combine")])
def test_the_closed_form_is_the_monte_carlo_mean_within_3_sigma(shape, experts, topk, system,
                                                                kernel):
    mc = monte_carlo(shape, experts, topk, system, kernel)
    closed = per_token_expectation(shape, system, kernel, experts=experts, topk=topk)
    for kind in LINK_KINDS:
        mean, sigma = mc[kind]
        assert abs(mean - closed[kind]) <= 3 * sigma + 1e-12, (kind, mean, closed[kind], sigma)


def test_the_monte_carlo_check_sees_a_wrong_formula():
    """Negative control: the per-slot closed form of CANN is far outside 3 sigma of ubep-inc's
    dispatch (which crosses tier-2 once a token), and so is the `up` of a shape with one die an
    NPU."""
    shape, experts, topk = MC_CASES[0]
    mc = monte_carlo(shape, experts, topk, "ubep-inc", "dispatch")
    wrong = per_token_expectation(shape, "cann", "dispatch", experts=experts, topk=topk)
    assert abs(mc["t2_up"][0] - wrong["t2_up"]) > 3 * mc["t2_up"][1]
    mc = monte_carlo(shape, experts, topk, "cann", "dispatch")
    wrong = per_token_expectation((1, 4, 2), "cann", "dispatch", experts=experts, topk=topk)
    assert abs(mc["up"][0] - wrong["up"]) > 3 * mc["up"][1]


def test_the_run_expectation_scales_the_table():
    per = per_token_expectation((2, 2, 2), "ubep", experts=16, topk=4)
    run = expected_link_blocks((2, 2, 2), "ubep", experts=16, topk=4, batch=3, hidden_blocks=2)
    assert run == {k: 8 * 3 * 2 * per[k] for k in LINK_KINDS}
    assert per == {"direct": 0.5, "up": 3.0, "down": 3.0, "t2_up": 2.0, "t2_down": 2.0}
    # UBEP-INC sends no metadata blocks (each slot's t and weight are word stores)
    inc = expected_link_blocks((2, 2, 2), "ubep-inc", experts=16, topk=4, batch=3)
    per = per_token_expectation((2, 2, 2), "ubep-inc", experts=16, topk=4)
    assert inc == pytest.approx({k: 24 * per[k] for k in LINK_KINDS})


@pytest.mark.parametrize("call, message", [
    (lambda w: exact_link_blocks(w, ("star", 4), "cann"), "link classes are a superpod's"),
    (lambda w: exact_link_blocks(w, (2, 2, 2), "cann"), "shape (2, 2, 2) has 8 dies; the "
                                                         "workload has 4 ranks"),
    (lambda w: exact_link_blocks(w, (2, 2, 1), "deepep"), "system must be one of"),
    (lambda w: exact_link_blocks(w, (2, 2, 1), "cann", "alltoall"), "kernel must be one of"),
    (lambda w: expected_link_blocks((2, 2, 1), "cann", experts=6, topk=2, batch=1),
     "experts (6) must be a multiple of the 4 ranks"),
])
def test_bad_input_is_one_line_naming_it(call, message):
    w = Workload(ranks=4, batch=2, topk=2, experts=8, words=1)
    with pytest.raises(UserError, match=message.replace("(", r"\(").replace(")", r"\)")):
        call(w)


def test_measured_bytes_are_blocks_and_control_packets():
    from epfabric.sw.presets import get_preset
    from epfabric.sw.ubep.traffic import link_report, measured_links
    counters = {f"link_{what}.{kind}": [n] for n, (what, kind) in enumerate(
        (w, k) for w in ("blocks", "small") for k in LINK_KINDS)}
    got = measured_links(counters, control_bytes=32)
    assert got["up"] == {"blocks": 1, "small": 6, "bytes": 512 + 6 * 32}
    assert got["t2_down"] == {"blocks": 4, "small": 9, "bytes": 4 * 512 + 9 * 32}
    assert measured_links({"tx_blocks": [1, 2]}, 32) is None              # a star has none
    w = Workload(ranks=4, batch=2, topk=2, experts=8, words=1)
    report = link_report(counters, w, (2, 2, 1), "cann", "dispatch", get_preset("tiny"))
    assert report["exact"] == exact_link_blocks(w, (2, 2, 1), "cann")
    assert report["closed_form"] == expected_link_blocks((2, 2, 1), "cann", experts=8, topk=2,
                                                         batch=2)
    assert link_report(counters, w, (2, 2, 1), "cann", "dispatch", get_preset("tiny"),
                       uniform=False)["closed_form"] is None            # a replayed routing
