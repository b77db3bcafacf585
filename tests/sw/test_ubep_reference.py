"""UBEP workload and numpy references (sw/ubep/workload.py, sw/ubep/reference.py)."""

import numpy as np
import pytest

from epfabric.sw.ubep.reference import (combine_out, counts, dispatch_order, dispatch_out,
                                        expert_outputs, slot_index)
from epfabric.sw.ubep.workload import MODELS, Workload, blocks_per_token


def test_slot_index_counts_earlier_slots_of_the_same_expert():
    idx = np.array([[3, 1], [1, 3], [3, 0]])
    assert slot_index(idx).tolist() == [[0, 0], [1, 1], [2, 0]]


@pytest.fixture(scope="module")
def small():
    return Workload(ranks=4, batch=6, topk=3, experts=8, hidden_blocks=2, words=4, seed=5)


def test_workload_shapes_and_distinct_experts(small):
    assert small.topk_idx.shape == (4, 6, 3) and small.topk_w.shape == (4, 6, 3)
    assert small.x.shape == (4, 6, 2, 4) and small.epr == 2 and small.slots == 18
    assert all(len(set(row)) == 3 for row in small.topk_idx.reshape(-1, 3).tolist())
    again = Workload(ranks=4, batch=6, topk=3, experts=8, hidden_blocks=2, words=4, seed=5)
    assert np.array_equal(again.topk_idx, small.topk_idx) and np.array_equal(again.x, small.x)


def test_every_slot_is_dispatched_once_in_cann_order(small):
    order = dispatch_order(small)
    every = sorted(slot for rows in order for slot in rows)
    assert every == sorted((s, t, i) for s in range(4) for t in range(6) for i in range(3))
    cnt = counts(small)
    for d, rows in enumerate(order):
        experts = [small.topk_idx[s][t, i] for s, t, i in rows]
        assert experts == sorted(experts)                     # grouped by local expert
        assert all(e // small.epr == d for e in experts)
        p = 0
        for e_l in range(small.epr):
            for s in range(4):
                block = rows[p:p + cnt[d, e_l, s]]
                assert [r[0] for r in block] == [s] * cnt[d, e_l, s]   # then by source rank
                j = slot_index(small.topk_idx[s])
                assert [j[t, i] for _s, t, i in block] == list(range(len(block)))  # then by j
                p += len(block)
    out, recv = dispatch_out(small)
    assert [len(o) for o in out] == [len(rows) for rows in order]
    assert recv.tolist() == cnt.sum(axis=2).tolist()
    s, t, _i = order[1][0]
    assert np.array_equal(out[1][0], small.x[s][t])


def test_combine_is_the_weighted_sum_in_16_bit_lanes(small):
    out, _ = dispatch_out(small)
    ones = expert_outputs(small, out, scale=lambda e: 1)
    y = combine_out(small, ones)
    # with identity experts: y = x * (sum of the token's weights), lane-wise mod 2^16
    for s in range(4):
        for t in range(6):
            wsum = int(small.topk_w[s][t].sum())
            x = small.x[s][t].astype(np.uint64)
            lo, hi = ((x & 0xFFFF) * wsum) & 0xFFFF, ((x >> 16 & 0xFFFF) * wsum) & 0xFFFF
            assert np.array_equal(y[s][t], (hi << 16) | lo)
    scaled = expert_outputs(small, out)
    d, p = 0, 0
    s, t, i = dispatch_order(small)[d][p]
    e = int(small.topk_idx[s][t, i])
    x = small.x[s][t].astype(np.uint64)
    f = np.uint64(e + 1)
    want = ((((x >> np.uint64(16)) * f) & np.uint64(0xFFFF)) << np.uint64(16)) \
        | (((x & np.uint64(0xFFFF)) * f) & np.uint64(0xFFFF))
    assert np.array_equal(scaled[d][p], want)


def test_model_shapes_and_blocks():
    assert sorted(MODELS) == ["deepseek-v3", "glm-4.7", "qwen3-30b"]     # the --model names
    assert blocks_per_token(MODELS["qwen3-30b"].hidden_bytes, tff=False) == 8
    assert blocks_per_token(MODELS["qwen3-30b"].hidden_bytes) == 9
    assert blocks_per_token(MODELS["glm-4.7"].hidden_bytes, tff=False) == 20
    assert blocks_per_token(MODELS["glm-4.7"].hidden_bytes) == 22
    assert blocks_per_token(MODELS["deepseek-v3"].hidden_bytes, tff=False) == 15
    assert blocks_per_token(MODELS["deepseek-v3"].hidden_bytes) == 16  # docs/spec/kernels.md §1.7
    assert [(m.experts, m.topk) for m in MODELS.values()] == [(256, 8), (128, 8), (160, 8)]


@pytest.mark.parametrize("kw, exc, match", [
    ({"experts": 9}, ValueError, r"experts \(9\) must be a multiple of ranks \(4\)"),
    ({"topk": 9}, ValueError, r"topk must be in \[1, 8\], not 9"),
    ({"batch": 0}, ValueError, "batch must be >= 1, not 0"),
    ({"hidden_blocks": 1.5}, TypeError, "hidden_blocks must be an integer"),
])
def test_bad_workload_names_the_parameter(kw, exc, match):
    with pytest.raises(exc, match=match):
        Workload(**{"ranks": 4, "batch": 2, "topk": 2, "experts": 8, **kw})
