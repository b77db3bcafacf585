"""INC and ring endpoints and AgrsSystem (hw/inc_endpoint.py): AG and RS equal numpy.

N in {2, 4, 8}, random int32 data, uneven per-rank token counts, three
operations back to back in one simulation (counters never reset). The
``tiny`` preset's short links keep these on Amaranth's simulator fast; the
bandwidth figures use ``incmoe-testbed`` (test_agrs.py).
"""

import pytest

from epfabric.hw.inc_endpoint import AgrsSystem, IncEndpoint, RingEndpoint
from epfabric.sim.agrs import agrs_intent, make_case, system_spec
from utils import run

LANES = 1


def cases(ranks, tmax, n_ops, seed):
    import numpy as np
    rng = np.random.default_rng(seed)
    out = []
    for k in range(n_ops):
        counts = rng.integers(0 if k else 1, tmax + 1, size=ranks).tolist()
        counts[k % ranks] = tmax  # Tmax = max_r T_r
        out.append(make_case(ranks=ranks, tmax=tmax, lanes=LANES, counts=counts, seed=seed + k))
    return out


@pytest.mark.parametrize("mode", ["inc", "ring"])
@pytest.mark.parametrize("ranks, tmax, concurrent", [(2, 3, True), (4, 3, False), (8, 2, True)])
def test_ag_rs_equal_numpy_back_to_back(mode, ranks, tmax, concurrent):
    cs = cases(ranks, tmax, 3, seed=ranks)
    spec = system_spec(preset="tiny", ranks=ranks, mode=mode, tmax=tmax, lanes=LANES,
                       slots=32)
    result, _ = run(spec, agrs_intent, {"ranks": ranks, "tmax": tmax, "lanes": LANES,
                                        "cases": cs, "concurrent": concurrent,
                                        "timeout": 20_000})
    assert [op["errors"] for op in result["ops"]] == [0, 0, 0]
    assert all(op["correct"] for op in result["ops"])
    # cumulative counters: everything received over the three operations
    for r in range(ranks):
        assert result["counters"]["ag"][r] == sum(sum(c["counts"]) - c["counts"][r] for c in cs)
        assert result["counters"]["rs"][r] == sum(c["counts"][r] for c in cs)


def test_barrier_costs_a_round_trip():
    cs = cases(4, 2, 2, seed=5)
    spec = system_spec(preset="tiny", ranks=4, mode="inc", tmax=2, lanes=LANES, slots=32)
    args = {"ranks": 4, "tmax": 2, "lanes": LANES, "cases": cs, "concurrent": True}
    plain, _ = run(spec, agrs_intent, args)
    fenced, _ = run(spec, agrs_intent, {**args, "barrier": True})
    assert all(op["correct"] for op in fenced["ops"])
    # a barrier is one message up and one multicast down: >= one one-hop latency
    for a, b in zip(plain["ops"], fenced["ops"]):
        assert b["cycles"] - a["cycles"] >= 16


@pytest.mark.parametrize("cls, params, match", [
    (IncEndpoint, {"rank": 4, "ranks": 4, "tmax": 2}, r"rank must be an integer in range\(4\), not 4"),
    (RingEndpoint, {"rank": 0, "ranks": 1, "tmax": 2}, r"ranks must be an integer >= 2, not 1"),
    (AgrsSystem, {"ranks": 4, "mode": "tree"}, r"mode must be one of inc, ring, not 'tree'"),
    (AgrsSystem, {"ranks": 0}, r"ranks must be an integer >= 2, not 0"),
    (AgrsSystem, {"ranks": 4, "tmax": 0}, r"tmax must be an integer >= 1, not 0"),
    (AgrsSystem, {"ranks": 4, "slots": 3}, r"slots must be a power of two, not 3"),
    (AgrsSystem, {"preset": "nope"}, r"unknown preset 'nope'"),
])
def test_validation(cls, params, match):
    with pytest.raises(ValueError, match=match):
        cls(**params)
