"""The routing generator (sw/routing.py): distinct experts, seeded, hot experts, rank needs."""

from math import comb

import numpy as np
import pytest

from epfabric.sw.routing import expert_rank, hot_ids, hot_weight, remote_need, route


def test_rows_hold_distinct_experts_and_small_weights():
    idx, w = route(2000, 64, 8, seed=3)
    assert idx.shape == w.shape == (2000, 8)
    assert all(len(set(row)) == 8 for row in idx.tolist())
    assert idx.min() >= 0 and idx.max() < 64
    assert w.min() >= 1 and w.max() <= 7
    again, _ = route(2000, 64, 8, seed=3)
    other, _ = route(2000, 64, 8, seed=4)
    assert np.array_equal(idx, again) and not np.array_equal(idx, other)


def test_uniform_routing_matches_the_closed_form_of_incmoe_2_2():
    idx, _ = route(50_000, 64, 8, seed=0)
    need = remote_need(idx, 64, 4)
    no_expert = 1 - need.sum() / (need.shape[0] * 3)
    assert no_expert == pytest.approx(comb(48, 8) / comb(64, 8), abs=0.004)


def test_hot_experts_take_about_the_intended_share():
    experts, hot = 256, 8
    idx, _ = route(20_000, experts, 8, seed=1, hot=hot)
    share = np.isin(idx, [m * experts // hot for m in range(hot)]).mean()
    assert 0.22 < share < 0.35                 # docs/spec/kernels.md 1.6: "about 30 %"
    assert hot_weight(256, 8) == pytest.approx(0.3 * 248 / (8 * 0.7))


def test_remote_need_marks_hosting_ranks_but_not_the_owner():
    idx = np.array([[0, 1], [0, 63]])          # 64 experts on 4 ranks: 16 each
    assert expert_rank(idx, 64, 4).tolist() == [[0, 0], [0, 3]]
    need = remote_need(idx, 64, 4, token_rank=[0, 3])
    assert need.tolist() == [[False, False, False, False], [True, False, False, False]]


@pytest.mark.parametrize("kwargs, exc, message", [
    ({"tokens": 0, "experts": 8, "topk": 2}, ValueError, "tokens must be >= 1, not 0"),
    ({"tokens": 4, "experts": 8, "topk": 9}, ValueError, r"topk must be in \[1, 8\], not 9"),
    ({"tokens": 4, "experts": 8, "topk": 2.0}, TypeError, "topk must be an integer, not 2.0"),
    ({"tokens": 4, "experts": 8, "topk": 2, "hot": 8}, ValueError, r"hot must be in \[0, 7\]"),
    ({"tokens": 4, "experts": 8, "topk": 2, "zipf": -1.0}, ValueError, "zipf must be >= 0, not -1.0"),
    ({"tokens": 4, "experts": 8, "topk": 2, "hot": 2, "zipf": 1.0}, ValueError,
     r"hot=2 and zipf=1.0: choose hot experts or Zipf weights"),
    ({"tokens": 4, "experts": 8, "topk": 2, "hot": 2, "hot_layout": "left"}, ValueError,
     "hot_layout must be one of spread, consecutive, not 'left'"),
])
def test_bad_input_names_the_parameter(kwargs, exc, message):
    with pytest.raises(exc, match=message):
        route(**kwargs)
    with pytest.raises(ValueError, match="experts .* must be a multiple of ranks"):
        expert_rank([[0]], 10, 4)


def test_consecutive_hot_experts_sit_on_the_first_ranks():
    assert hot_ids(64, 4) == [0, 16, 32, 48] and hot_ids(64, 4, "consecutive") == [0, 1, 2, 3]
    idx, _ = route(4000, 64, 4, seed=1, hot=4, hot_layout="consecutive")
    share = np.isin(idx, [0, 1, 2, 3]).mean()
    assert 0.25 < share < 0.32                          # about the 30 % of w_hot
    assert np.isin(expert_rank(idx, 64, 8), [0]).mean() == pytest.approx(share + 4 / 60 * (1 - share),
                                                                       abs=0.02)


@pytest.mark.parametrize("s", [0.8, 1.2])
def test_zipf_weights_fall_as_a_power_of_the_id(s):
    """With k = 1 a token's expert is drawn with probability ~ (e + 1) ** -s: the log-log slope
    of the counts of the first experts is -s (within 0.1 over 2 * 10**5 draws)."""
    idx, _ = route(200_000, 64, 1, seed=5, zipf=s)
    counts = np.bincount(idx[:, 0], minlength=64)[:16]
    slope = np.polyfit(np.log(np.arange(1, 17)), np.log(counts), 1)[0]
    assert abs(slope + s) < 0.1, slope
    assert route(50, 64, 8, seed=5, zipf=0.0)[0].tolist() == route(50, 64, 8, seed=5)[0].tolist()
