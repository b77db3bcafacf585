"""Lane arithmetic of the in-network reductions: the one lane-wise sum every INC block uses.

Both in-network features reduce data the same way, lane by lane: the INC-MoE engine and
its endpoints (:mod:`epfabric.hw.inc_engine`, :mod:`epfabric.hw.inc_endpoint`,
:mod:`epfabric.hw.inc_nic`) add the int32 lanes of a flit (INC-MoE §3.1, ReduceScatter);
the in-network EP reduction unit (:mod:`epfabric.hw.inc_reduce`) adds the 16-bit lanes of
a block after its Data-as-Flag header (docs/spec/kernels.md §1.7), which it does not sum.
:func:`add_lanes` is that sum, once.

Lane types (``dtype``)
----------------------
``"intN"``
    N-bit two's-complement integers (N >= 1), added with wrap-around: the carry out of a
    lane is dropped, so a sum is bit-identical to numpy's ``intN`` sum in any order.

A floating-point type (``"bf16"``, ``"fp32"``) would be one more name in :func:`lane_bits`
and one more adder in :func:`add_lanes`; none is modelled yet, and every caller names its
type, so adding one changes no caller that does not ask for it.
"""

import re

from amaranth.hdl import Cat

from .validate import UserError

__all__ = ["lane_bits", "add_lanes"]

_INT = re.compile(r"int([1-9][0-9]*)")


def lane_bits(dtype):
    """The width of one lane of ``dtype`` (``"int32"``: 32).

    Raises
    ------
    ValueError
        If ``dtype`` is not a lane type (see the module docstring).
    """
    match = _INT.fullmatch(dtype) if isinstance(dtype, str) else None
    if match is None:
        raise UserError(f"dtype must be an integer lane type 'intN' such as 'int32' or 'int16' "
                        f"(floating-point lanes are not modelled yet), not {dtype!r}")
    return int(match[1])


def add_lanes(a, b, *, dtype, header_bits=0):
    """``b``'s first ``header_bits`` bits, then the lane-wise sum of ``a`` and ``b`` in lanes
    of ``dtype``, then ``b``'s bits past its last whole lane.

    Parameters
    ----------
    a, b : Value
        The operands, ``b`` as wide as the result; ``a`` at least as wide as ``b``'s lanes
        reach (its bits of the header and the tail are not read).
    dtype : str
        The lane type (see the module docstring).
    header_bits : int
        Leading bits taken from ``b`` unsummed (0: every bit is in a lane).

    Raises
    ------
    ValueError
        If ``dtype`` is not a lane type.
    """
    bits = lane_bits(dtype)
    a, b = Cat(a), Cat(b)
    width = len(b)
    lanes = (width - header_bits) // bits
    out = [b[:header_bits]]
    for k in range(lanes):
        lo = header_bits + k * bits
        # integer lanes: two's-complement addition, the carry out of the lane dropped
        out.append((a[lo:lo + bits] + b[lo:lo + bits])[:bits])
    tail = header_bits + lanes * bits
    if tail < width:
        out.append(b[tail:])
    return Cat(*out)
