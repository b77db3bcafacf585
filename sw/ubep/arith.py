"""Division by a shape constant in an AIV program: a shift for a power of two, else multiply-shift.

The kernels split an expert id ``e`` into its rank ``e // epr`` and local index
``e % epr``, and a token slot ``n`` into its token ``n // k`` and k-slot ``n % k``.
The divisors are shapes (known when the program is generated); the dividends
are routing data (computed by the simulated core). The ISA has ``mul`` (the low
32 bits of the product, one cycle) but no divide and no multiply-high, so:

* ``d`` a power of two: ``srli`` and ``andi`` — 2 instructions, the kernels'
  original sequence, kept exactly (the cycle counts of power-of-two shapes do
  not change);
* any other ``d``: ``q = (x · M) >> s`` with the reciprocal ``M = ⌈2^s / d⌉``
  chosen when the program is generated for every ``x`` below a known bound
  (:func:`reciprocal`), then ``r = x − q · d`` — 6 instructions (``li``,
  ``mul``, ``srli``, ``li``, ``mul``, ``sub``; 7 if ``M`` needs ``lui``), i.e.
  4 cycles more per quotient-and-remainder, 2 more per quotient alone.

:func:`reciprocal` takes the smallest ``s`` for which ``(bound − 1) · (M·d − 2^s)
< 2^s`` — then ``x/d ≤ x·M/2^s < x/d + 1/d`` for every ``x < bound``, so the
floor is exact — and for which ``(bound − 1) · M`` fits in 32 bits (``mul``
keeps the low half). The kernels' bounds are an expert id (``< E``) and a slot
index (``< BS·k``), far below the 2^16 where no such ``s`` exists for some ``d``.
"""

from ...hw.validate import UserError, check_int

__all__ = ["reciprocal", "divmod_const", "is_pow2"]


def is_pow2(d):
    """``d`` is a power of two (1 included)."""
    return d >= 1 and not d & (d - 1)


def reciprocal(d, bound):
    """``(M, s)``: ``x // d == (x * M) >> s`` and ``x * M < 2**32`` for every ``0 <= x < bound``.

    Raises
    ------
    ValueError
        When no shift fits 32 bits (``bound`` too large for this ``d``), naming both.
    """
    check_int("d", d, 1)
    check_int("bound", bound, 1)
    top = bound - 1
    for s in range(d.bit_length() - 1, 33):
        m = -(-(1 << s) // d)
        if top * m >= 1 << 32:
            break
        if top * (m * d - (1 << s)) < 1 << s:
            return m, s
    raise UserError(f"no 32-bit multiply-shift divides every value below {bound} by {d}")


def divmod_const(p, q, r, x, d, bound, tmp, shift=0):
    """Emit ``R[q] = (R[x] // d) << shift`` and, unless ``r`` is None, ``R[r] = R[x] % d``.

    ``0 <= R[x] < bound``. A power of two ``d`` emits ``srli q, x``, ``slli q``
    (when ``shift``) and ``andi r, x`` in that order (the kernels' original
    sequence); any other ``d`` multiplies by :func:`reciprocal` ``(d, bound)``
    and takes the remainder as ``x − q·d`` through ``tmp`` (``tmp`` must differ
    from ``q`` and ``x``; ``q`` from ``x``).
    """
    if is_pow2(d):
        p.srli(q, x, d.bit_length() - 1)
        if shift:
            p.slli(q, q, shift)
        if r is not None:
            p.andi(r, x, d - 1)
        return
    if len({q, x, tmp}) != 3:
        raise ValueError(f"divmod_const needs distinct q, x and tmp, not r{q}, r{x}, r{tmp}")
    m, s = reciprocal(d, bound)
    p.li(tmp, m)
    p.mul(q, x, tmp)
    p.srli(q, q, s)                                # q = x // d
    if r is not None:
        p.li(tmp, d)
        p.mul(tmp, q, tmp)
        p.sub(r, x, tmp)                           # r = x - q·d
    if shift:
        p.slli(q, q, shift)
