"""numpy references of the in-network lane sums (sw/lane_sums.py): ordered sums and the bound."""

import numpy as np
import pytest

from epfabric.sw.lane_sums import (compare, error_bound, exact_sum, ordered_sum, to_bits,
                                   to_float, ulp)


def test_an_ordered_sum_is_the_order_s():
    """1e8 + 1 - 1e8 in fp32: 1e8 + 1 rounds back to 1e8 (its ulp is 8), so that order gives
    0; 1e8 - 1e8 + 1 gives 1. bf16: accumulated in fp32, rounded once."""
    t = to_bits(np.array([1e8, 1.0, -1e8], dtype=np.float32), "fp32")
    assert to_float(ordered_sum(t, "fp32"), "fp32") == 0.0
    assert to_float(ordered_sum(t[[0, 2, 1]], "fp32"), "fp32") == 1.0
    assert ordered_sum(t[[0, 2, 1]], "fp32", start=-0.0) == 0x3F80_0000
    # -0 from the identity stays -0; +0 would not
    assert ordered_sum(np.array([0x8000_0000]), "fp32", start=-0.0) == 0x8000_0000
    assert ordered_sum(np.array([0x8000_0000]), "fp32", start=0.0) == 0
    # bf16: 1 + 2**-9 + 2**-9 = 1 + 2**-8 exactly in fp32, a tie, rounded to even once
    assert ordered_sum(np.array([0x3F80, 0x3B00, 0x3B00]), "bf16") == 0x3F80
    assert ordered_sum(np.array([0x7FC1_2345, 0x3F80_0000]), "fp32") == 0x7FC0_0000


def test_the_bound_and_the_exact_sum():
    t = to_bits(np.array([[1.0, 3.0], [-2.0, 2.0**-30], [0.5, 1.0]], dtype=np.float32), "fp32")
    assert exact_sum(t, "fp32").tolist() == [-0.5, 4.0 + 2.0**-30]
    u = 2.0 ** -24
    assert error_bound(t, "fp32") == pytest.approx([((1 + u) ** 2 - 1) * 3.5,
                                                    ((1 + u) ** 2 - 1) * (4 + 2.0**-30)])
    b = error_bound(to_bits(np.float32([[1.0], [1.0]]), "bf16"), "bf16", roundings=2)
    assert b[0] == pytest.approx(((1 + u) * (1 + 2.0**-8) ** 2 - 1) * 2)
    assert ulp([1.0, 3.0, 0.0], "fp32").tolist() == [2.0**-23, 2.0**-22, 2.0**-149]
    assert ulp([1.0], "bf16").tolist() == [2.0**-7]
    with pytest.raises(ValueError, match=r"roundings=1: fp32 sums are never rounded to bf16"):
        error_bound(t, "fp32", roundings=1)
    with pytest.raises(ValueError, match=r"dtype must be one of 'fp32', 'bf16', not 'int32'"):
        error_bound(t, "int32")


def test_compare_accepts_any_order_and_refuses_a_wrong_sum():
    """Every order of 6 spread values is within the bound; a result one bound away is not."""
    rng = np.random.default_rng(2)
    x = (rng.choice([-1, 1], (6, 50)) * 2.0 ** rng.integers(-20, 20, (6, 50))).astype(np.float32)
    t = to_bits(x, "fp32")
    worst = 0.0
    for _ in range(10):
        got = ordered_sum(t[rng.permutation(6)], "fp32")
        verdict = compare(got, t, "fp32")
        assert verdict["ok"] and verdict["elements"] == 50
        worst = max(worst, verdict["max_error_over_bound"])
    assert 0 < worst <= 1
    exact = exact_sum(t, "fp32")
    wrong = to_bits((exact + 2 * error_bound(t, "fp32") + 2 * ulp(exact, "fp32"))
                    .astype(np.float32), "fp32")
    assert not compare(wrong, t, "fp32")["ok"]
    with pytest.raises(ValueError, match=r"the bound is for finite terms"):
        compare(t[0], np.array([[0x7F80_0000]] * 2), "fp32")
