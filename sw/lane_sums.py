"""numpy references of the in-network lane sums, and the error bound their checkers use.

The INC blocks (:mod:`epfabric.hw.lane_arith`) add lanes of ``intN`` (wrapping: the same in
any order), ``fp32`` or ``bf16`` (accumulated in fp32, rounded to bf16 when a sum leaves a
block). A floating-point sum depends on the order of its additions, so a checker has two
rules (docs/concepts/inc-numerics.md):

* **the order is known** (a test that feeds a block in an order it chooses; the ring
  baseline, whose order is the ring's): the result is bit-exact against
  :func:`ordered_sum` of that order;
* **the order is not known** (the in-network reductions, which add in arrival order): the
  error against the exact sum is within :func:`error_bound`, the bound of recursive
  summation in any order (Higham, *Accuracy and Stability of Numerical Algorithms*, 2nd
  ed., §4.2): each term passes through at most ``n - 1`` fp32 additions and ``r`` roundings
  to bf16, each a factor ``(1 + d)`` with ``|d| <= u`` (fp32, ``u = 2**-24``) or ``u_bf16 =
  2**-8``, so ``|s_hat - s| <= ((1 + u)**(n - 1) * (1 + u_bf16)**r - 1) * sum|x_i|``, i.e.
  ``(n - 1) * u * sum|x_i|`` to first order for fp32.

Values are bits (``uint32`` fp32, ``uint16`` bf16 words); a NaN result is the canonical
one (``0x7FC00000``, bf16 ``0x7FC0``), as the hardware gives.
"""

import math

import numpy as np

from ..hw.lane_arith import FLOAT_TYPES, is_float
from ..hw.validate import UserError, check_int

__all__ = ["U", "ordered_sum", "exact_sum", "error_bound", "ulp", "to_float", "to_bits",
           "compare"]

#: Unit roundoff (half an ulp at 1) of each floating-point lane type.
U = {"fp32": 2.0 ** -24, "bf16": 2.0 ** -8}
_NAN = {"fp32": 0x7FC0_0000, "bf16": 0x7FC0}


def _float_type(dtype):
    if not is_float(dtype):
        raise UserError(f"dtype must be one of {', '.join(map(repr, FLOAT_TYPES))}, "
                        f"not {dtype!r}")
    return dtype


def to_float(bits, dtype):
    """float32 values of ``dtype`` bits (bf16 widened exactly)."""
    bits = np.asarray(bits, dtype=np.uint32)
    return (bits << 16).view(np.float32) if _float_type(dtype) == "bf16" else bits.view(np.float32)


def to_bits(values, dtype):
    """``dtype`` bits of float32 ``values`` (bf16 rounded to nearest even); NaN canonical."""
    values = np.asarray(values, dtype=np.float32)
    if _float_type(dtype) == "bf16":
        import ml_dtypes
        bits = values.astype(ml_dtypes.bfloat16).view(np.uint16).astype(np.uint32)
    else:
        bits = values.view(np.uint32).copy()
    return np.where(np.isnan(values), _NAN[dtype], bits).astype(np.uint32)


def ordered_sum(terms, dtype, *, start=None):
    """Bits of the sum of ``terms`` (bits, shape ``(n, ...)``) added in that order in fp32,
    rounded once to ``dtype`` at the end: what a block that accumulates them in that order
    releases. ``start`` (float) is the partial sum before the first term; ``None`` stores
    the first term as it is (the INC-MoE engine), ``-0.0`` is the identity the in-network
    EP unit starts from."""
    terms = np.asarray(terms, dtype=np.uint32)
    if len(terms) == 0:
        raise UserError("ordered_sum needs at least one term")
    x = to_float(terms, dtype)
    with np.errstate(all="ignore"):
        acc = x[0] if start is None else np.float32(start) + x[0]
        for v in x[1:]:
            acc = acc + v
    return to_bits(acc, dtype)


def exact_sum(terms, dtype):
    """The exact sums of ``terms`` (bits, shape ``(n, ...)``) as float64 (``math.fsum``
    rounded once to float64: its error, ``2**-53`` relative, is far below any bound here)."""
    x = to_float(np.asarray(terms, dtype=np.uint32), dtype).astype(np.float64)
    flat = x.reshape(len(x), -1)
    return np.array([math.fsum(flat[:, k]) for k in range(flat.shape[1])]).reshape(x.shape[1:])


def error_bound(terms, dtype, *, roundings=None):
    """The largest error the sum of ``terms`` (bits, shape ``(n, ...)``) may have in any
    order: ``((1 + u)**(n - 1) * (1 + u_bf16)**r - 1) * sum|x_i|`` per element (module
    docstring), ``r`` = ``roundings`` to bf16 on a term's way (default 1 for bf16, 0 fp32)."""
    terms = np.asarray(terms, dtype=np.uint32)
    n = check_int("terms", len(terms), 1)
    r = (1 if _float_type(dtype) == "bf16" else 0) if roundings is None else roundings
    check_int("roundings", r, 0)
    if dtype == "fp32" and r:
        raise UserError(f"roundings={r}: fp32 sums are never rounded to bf16")
    total = np.abs(to_float(terms, dtype).astype(np.float64)).sum(axis=0)
    return ((1 + U["fp32"]) ** (n - 1) * (1 + U["bf16"]) ** r - 1) * total


def ulp(values, dtype):
    """The ulp of ``dtype`` at each ``|value|`` (float64; the subnormal spacing near 0)."""
    e = np.floor(np.log2(np.maximum(np.abs(np.asarray(values, dtype=np.float64)), 2.0 ** -126)))
    return 2.0 ** (e - (23 if _float_type(dtype) == "fp32" else 7))


def compare(got, terms, dtype, *, roundings=None):
    """Check sums ``got`` (bits) of ``terms`` (bits, ``(n, ...)``) against the bound.

    Returns ``{"ok", "max_error_ulps", "max_bound_ulps", "max_error_over_bound", "elements"}``:
    the largest error and the largest bound in ulps of the exact sum, the largest ratio of an
    error to its bound (<= 1 when every element is within its bound). Every term must be
    finite (the bound is for finite sums).
    """
    terms = np.asarray(terms, dtype=np.uint32)
    if not np.isfinite(to_float(terms, dtype)).all():
        raise UserError("compare: the bound is for finite terms")
    exact = exact_sum(terms, dtype)
    value = to_float(np.asarray(got, dtype=np.uint32), dtype).astype(np.float64)
    err = np.abs(value - exact)
    bound = error_bound(terms, dtype, roundings=roundings)
    unit = ulp(exact, dtype)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(bound > 0, err / bound, np.where(err > 0, np.inf, 0.0))
    return {"ok": bool((err <= bound).all()), "max_error_ulps": float((err / unit).max()),
            "max_bound_ulps": float((bound / unit).max()),
            "max_error_over_bound": float(ratio.max()), "elements": int(err.size)}
