"""Floating-point lane arithmetic (fp32, bf16) as combinational steps over Amaranth values.

Every function here adds combinational logic to a module ``m`` and returns a
signal (a ``data.View`` where the result has fields); none holds state, so a
pipelined block chooses where the registers go (:class:`~epfabric.hw.fp_unit.FpLane`)
and another block (a switch's reduction) can reuse the same pieces.

Numbers are IEEE 754 binary32 (fp32) and bfloat16 (bf16: fp32's sign and 8-bit
exponent, 7 fraction bits). Inside, a finite value is *unpacked* as
``(-1)**sign * sig * 2**e_lsb``: ``sig`` the significand with its hidden bit
(none for a subnormal), ``e_lsb`` the weight of its last bit
(:func:`unpack`). Rounding is to nearest, ties to even, everywhere.

The multiply-add is one datapath, ``a*s + b`` (:func:`multiply`, :func:`align`,
:func:`add`, :func:`rounding_point`, :func:`cut`, :func:`round_pack`): multiply and add alone are
``a*s + (-0)`` and ``a*1 + b``, which are exact rewrites (``x + (-0) = x``
for every ``x``, ``+0`` included, under ties-to-even). Fused, the 48-bit product
is added exactly and rounded once; with :func:`round_product` between
:func:`multiply` and :func:`align` the product is rounded to fp32 first
(two roundings, as a ``Muls`` followed by an ``Add``).

Why the adder is exact (:func:`align`). The product's 48 bits sit at bits
``[G, G+48)`` of a ``W``-bit window (``G`` = :data:`GUARD` = 26); the addend's 24
bits go to bit ``k`` (its weight relative to the product's last bit, plus
``G``). Three cases:

* ``0 <= k < K`` (``K`` = :data:`B_TOP` = ``G + 50``): both fit; the sum is exact.
* ``k >= K`` (or the product is zero): the addend's last bit is at least 4 times
  the product, which then only matters as a *sticky* bit (1 at bit 0 if the product
  is not zero). The rounding point of the result is at bit ``K - 1`` or above, so
  a 1 at bit 0 stands for any value in ``(0, 2)`` there: the result rounds the same
  (an exact tie cannot occur, and the borrow of a subtraction only turns the bits
  between into ones).
* ``k < 0``: the addend's bits below bit 0 are OR-ed into bit 0 (jammed). The
  addend is then below ``2**24``, the product at least ``2**26``, so the result has
  its top bit at 25 or above and its rounding point at bit 2 or above: it depends
  only on ``floor(x / 2)`` and on whether ``x`` is a multiple of 2, which the jam
  keeps (the product's part is a multiple of ``2**G``; the exact addend and the
  jammed one lie strictly between the same two multiples of 2).

Special values: a NaN result is the canonical quiet NaN (:data:`F32` ``.nan``,
``0x7FC00000``; bf16 ``0x7FC0``) whatever the inputs' payloads; ``inf * 0`` and
``inf - inf`` are NaN; finite results beyond the largest finite value become
infinity; subnormal inputs and results are kept (gradual underflow); an exact
zero sum is ``+0`` unless both addends are ``-0``.
"""

from typing import NamedTuple

from amaranth.hdl import Cat, Const, Mux, Signal, signed
from amaranth.lib import data

__all__ = ["FloatFormat", "F32", "BF16", "GUARD", "B_TOP", "WINDOW", "unpacked_layout",
           "product_layout", "special_layout", "aligned_layout", "sum_layout",
           "normalized_layout", "unpack", "bf16_to_f32", "leading_zeros", "multiply",
           "round_product", "align", "add", "rounding_point", "cut", "normalize", "round_pack",
           "f32_to_bf16", "finish"]


class FloatFormat(NamedTuple):
    """An IEEE 754 binary format: exponent and fraction widths."""
    name: str
    exp_bits: int
    man_bits: int

    @property
    def width(self):
        return 1 + self.exp_bits + self.man_bits

    @property
    def bias(self):
        return (1 << (self.exp_bits - 1)) - 1

    @property
    def precision(self):
        """Significand bits, the hidden one included."""
        return self.man_bits + 1

    @property
    def sub_lsb(self):
        """Weight exponent of the last bit of a subnormal (fp32: -149)."""
        return 1 - self.bias - self.man_bits

    @property
    def inf(self):
        """Bits of +infinity."""
        return ((1 << self.exp_bits) - 1) << self.man_bits

    @property
    def nan(self):
        """Bits of the canonical quiet NaN: positive, top fraction bit set, no payload."""
        return self.inf | (1 << (self.man_bits - 1))


F32 = FloatFormat("fp32", 8, 23)
BF16 = FloatFormat("bf16", 8, 7)

#: Weight exponents, signed: an fp32 product's last bit is 2**-298 at the least.
EXP = signed(11)
#: Bits of the window below the product's last bit (see the module docstring).
GUARD = 26
#: The addend's position when it dominates the product.
B_TOP = GUARD + 48 + 2
#: Width of the sum: the addend at :data:`B_TOP`, 24 bits, and a carry.
WINDOW = B_TOP + 24 + 1

special_layout = data.StructLayout({"nan": 1, "inf": 1, "inf_sign": 1})


def unpacked_layout(fmt):
    """``sign``, ``sig`` (hidden bit included), ``e_lsb`` and the class of a value."""
    return data.StructLayout({"sign": 1, "sig": fmt.precision, "e_lsb": EXP,
                              "zero": 1, "inf": 1, "nan": 1})


#: An fp32 product: 48 bits of magnitude at weight ``2**e_lsb``, and its class
#: (``nan`` covers a NaN factor and ``inf * 0``).
product_layout = data.StructLayout({"sign": 1, "mag": 48, "e_lsb": EXP,
                                    "zero": 1, "inf": 1, "nan": 1})

#: The product and the addend placed in the window (:func:`align`).
aligned_layout = data.StructLayout({"sub": 1, "p": WINDOW, "b": WINDOW, "e_lsb": EXP,
                                    "p_sign": 1, "b_sign": 1, "zero_sign": 1,
                                    "special": special_layout})

#: An exact sum: ``(-1)**sign * mag * 2**e_lsb`` (:func:`add`); ``zero_sign`` is the
#: sign of a zero ``mag``.
sum_layout = data.StructLayout({"sign": 1, "mag": WINDOW, "e_lsb": EXP, "zero_sign": 1,
                                "special": special_layout})


def normalized_layout(fmt):
    """A value cut at its rounding point (:func:`normalize`): the ``fmt.precision`` bits
    kept, the guard bit below them, the OR of all bits below that, and ``e_base``,
    the exponent field minus one that the kept bits have when the top one is set."""
    return data.StructLayout({"sig": fmt.precision, "guard": 1, "sticky": 1, "e_base": EXP})


def unpack(m, fmt, bits, *, name):
    """``bits`` of format ``fmt`` as a view of :func:`unpacked_layout`."""
    out = Signal(unpacked_layout(fmt), name=name)
    man = bits[:fmt.man_bits]
    exp = bits[fmt.man_bits:fmt.man_bits + fmt.exp_bits]
    top = exp.all()
    m.d.comb += [
        out.sign.eq(bits[fmt.width - 1]),
        out.sig.eq(Cat(man, exp.any())),
        # a subnormal has the exponent of the smallest normal, without its hidden bit
        out.e_lsb.eq(Mux(exp.any(), exp, 1) - (fmt.bias + fmt.man_bits)),
        out.zero.eq(~exp.any() & ~man.any()),
        out.inf.eq(top & ~man.any()),
        out.nan.eq(top & man.any()),
    ]
    return out


def bf16_to_f32(bits):
    """The fp32 bits of bf16 ``bits[:16]`` (exact: the same value, NaNs included)."""
    return Cat(Const(0, 16), bits[:16])


def leading_zeros(m, value, *, name):
    """Count of zero bits above the top set bit of ``value`` (``len(value)`` if zero).

    A tree of ``log2`` levels: the value is padded with ones below to a power of
    two, so every half the tree selects is non-zero.
    """
    width = len(value)
    size = 1
    while size < width + 1:
        size *= 2
    padded = Cat(Const((1 << (size - width)) - 1, size - width), value)

    def count(v):
        if len(v) == 2:
            return ~v[1]
        half = len(v) // 2
        lo, hi = v[:half], v[half:]
        upper_zero = ~hi.any()
        return Cat(Mux(upper_zero, count(lo), count(hi)), upper_zero)

    out = Signal(range(size), name=name)
    m.d.comb += out.eq(count(padded))
    return out


def multiply(m, a, s, *, name):
    """The exact product of two unpacked fp32 values (a view of :data:`product_layout`)."""
    out = Signal(product_layout, name=name)
    m.d.comb += [
        out.sign.eq(a.sign ^ s.sign),
        out.mag.eq(a.sig * s.sig),
        out.e_lsb.eq(a.e_lsb + s.e_lsb),
        out.zero.eq(a.zero | s.zero),
        out.inf.eq(a.inf | s.inf),
        out.nan.eq(a.nan | s.nan | (a.inf & s.zero) | (a.zero & s.inf)),
    ]
    return out


def rounding_point(m, fmt, *, mag, e_lsb, name):
    """The bit ``r`` of ``mag`` that becomes the last kept bit of ``mag * 2**e_lsb`` in ``fmt``.

    ``precision`` bits below the top set bit, or on the subnormal grid when that is
    higher; clamped at ``len(mag) + 1`` (past the top of ``mag`` everything is below
    half an ulp: the value rounds to zero).
    """
    width = len(mag)
    lz = leading_zeros(m, mag, name=f"{name}_lz")
    top = Signal(EXP, name=f"{name}_top")
    m.d.comb += top.eq(width - 1 - lz)
    by_top = top - fmt.man_bits
    by_grid = fmt.sub_lsb - e_lsb
    r_max = Mux(by_top > by_grid, by_top, by_grid)
    r = Signal(EXP, name=name)
    m.d.comb += r.eq(Mux(r_max > width + 1, width + 1, r_max))
    return r


def cut(m, fmt, *, mag, e_lsb, r, name):
    """``mag * 2**e_lsb`` cut at bit ``r`` (:func:`rounding_point`): :func:`normalized_layout`."""
    width = len(mag)
    # shift so that bit r of mag lands at bit width + 1: the kept bits are then
    # [width + 1, width + 1 + precision), the guard bit is `width`, the rest below
    shift = Signal(range(width + 3 + fmt.man_bits), name=f"{name}_shift")
    m.d.comb += shift.eq(width + 1 - r)
    moved = Signal(width + 1 + fmt.precision, name=f"{name}_moved")
    m.d.comb += moved.eq(mag << shift)
    out = Signal(normalized_layout(fmt), name=name)
    m.d.comb += [
        out.sig.eq(moved[width + 1:]),
        out.guard.eq(moved[width]),
        out.sticky.eq(moved[:width].any()),
        out.e_base.eq(r + e_lsb + (fmt.bias + fmt.man_bits - 1)),
    ]
    return out


def normalize(m, fmt, *, mag, e_lsb, name):
    """:func:`cut` at the :func:`rounding_point`, in one step."""
    r = rounding_point(m, fmt, mag=mag, e_lsb=e_lsb, name=f"{name}_r")
    return cut(m, fmt, mag=mag, e_lsb=e_lsb, r=r, name=name)


def round_pack(m, fmt, *, sign, norm, name):
    """``fmt`` bits of a :func:`normalize` d value of sign ``sign``, rounded to nearest even.

    Adding the rounded significand to ``e_base`` shifted into the exponent field
    gives the right field in every case: a carry out of the significand raises the
    exponent, a subnormal rounding up to the smallest normal gets exponent 1.
    Beyond the largest finite value the result is infinity; a value that rounds
    to zero is a zero of sign ``sign``.
    """
    up = norm.guard & (norm.sticky | norm.sig[0])
    sig = Signal(fmt.precision + 1, name=f"{name}_sig")
    m.d.comb += sig.eq(norm.sig + up)
    packed = Signal(signed(fmt.exp_bits + fmt.man_bits + 4), name=f"{name}_packed")
    m.d.comb += packed.eq((norm.e_base << fmt.man_bits) + sig)
    out = Signal(fmt.width, name=name)
    with m.If(sig == 0):
        m.d.comb += out.eq(Cat(Const(0, fmt.width - 1), sign))
    with m.Elif(packed >= fmt.inf):
        m.d.comb += out.eq(Cat(Const(fmt.inf, fmt.width - 1), sign))
    with m.Else():
        m.d.comb += out.eq(Cat(packed[:fmt.width - 1], sign))
    return out


def round_product(m, p, norm, *, name):
    """Product ``p`` rounded to fp32, from its :func:`normalize` d magnitude ``norm``,
    again as a :data:`product_layout` view.

    The 24-bit significand is placed at the top of the 48-bit magnitude; an
    overflow becomes an infinite product, an underflow a zero one (of the
    product's sign). NaN and infinite products pass unchanged.
    """
    bits = round_pack(m, F32, sign=p.sign, norm=norm, name=f"{name}_bits")
    rounded = unpack(m, F32, bits, name=f"{name}_f32")
    out = Signal(product_layout, name=name)
    m.d.comb += [
        out.sign.eq(p.sign),
        out.mag.eq(rounded.sig << 24),
        out.e_lsb.eq(rounded.e_lsb - 24),
        out.zero.eq(rounded.zero & ~p.inf & ~p.nan),
        out.inf.eq(p.inf | rounded.inf),
        out.nan.eq(p.nan),
    ]
    return out


def align(m, p, b, *, name):
    """Place product ``p`` and unpacked fp32 addend ``b`` in the window (:data:`aligned_layout`).

    See the module docstring for the three cases and why the sum stays exact.
    Also decides the special result: NaN, infinity (and its sign), and the sign
    of an exact zero.
    """
    k = Signal(EXP, name=f"{name}_k")
    m.d.comb += k.eq(b.e_lsb - p.e_lsb + GUARD)
    dominant = Signal(name=f"{name}_dominant")        # the product is only a sticky bit
    m.d.comb += dominant.eq(p.zero | (~b.zero & (k >= B_TOP)))
    # b with 24 fraction bits below the window: shift by k + 24, clamped at 0 (all sticky)
    shift = Signal(range(B_TOP + 25), name=f"{name}_shift")
    with m.If(dominant):
        m.d.comb += shift.eq(B_TOP + 24)
    with m.Elif(k + 24 > 0):
        m.d.comb += shift.eq(k + 24)
    placed = Signal(WINDOW + 24, name=f"{name}_placed")
    m.d.comb += placed.eq(b.sig << shift)
    out = Signal(aligned_layout, name=name)
    sub = p.sign ^ b.sign
    m.d.comb += [
        out.sub.eq(sub),
        out.p.eq(Mux(dominant, p.mag.any(), p.mag << GUARD)),
        out.b.eq(placed[24:] | placed[:24].any()),
        out.e_lsb.eq(Mux(dominant, b.e_lsb - B_TOP, p.e_lsb - GUARD)),
        out.p_sign.eq(p.sign),
        out.b_sign.eq(b.sign),
        # zero + zero keeps a common sign; an exact cancellation is +0
        out.zero_sign.eq(p.zero & b.zero & p.sign & b.sign),
        out.special.nan.eq(p.nan | b.nan | (p.inf & b.inf & sub)),
        out.special.inf.eq(p.inf | b.inf),
        out.special.inf_sign.eq(Mux(p.inf, p.sign, b.sign)),
    ]
    return out


def add(m, x, *, name):
    """The exact sum of an :func:`align` ed pair (:data:`sum_layout`).

    For a subtraction both differences are computed and the non-negative one
    kept, so the result needs one adder's delay, not a subtraction and a negation.
    """
    total = Signal(WINDOW, name=f"{name}_total")
    p_minus_b = Signal(signed(WINDOW + 1), name=f"{name}_p_minus_b")
    b_minus_p = Signal(WINDOW, name=f"{name}_b_minus_p")
    m.d.comb += [total.eq(x.p + x.b), p_minus_b.eq(x.p - x.b), b_minus_p.eq(x.b - x.p)]
    negative = x.sub & (p_minus_b < 0)
    out = Signal(sum_layout, name=name)
    m.d.comb += [
        out.mag.eq(Mux(x.sub, Mux(negative, b_minus_p, p_minus_b[:WINDOW]), total)),
        out.sign.eq(Mux(negative, x.b_sign, x.p_sign)),
        out.e_lsb.eq(x.e_lsb),
        out.zero_sign.eq(x.zero_sign),
        out.special.eq(x.special),
    ]
    return out


def finish(m, *, sign, zero, zero_sign, special, rounded, name):
    """The fp32 result: the canonical NaN, a signed infinity, a signed zero, or ``rounded``."""
    out = Signal(32, name=name)
    with m.If(special.nan):
        m.d.comb += out.eq(F32.nan)
    with m.Elif(special.inf):
        m.d.comb += out.eq(Cat(Const(F32.inf, 31), special.inf_sign))
    with m.Elif(zero):
        m.d.comb += out.eq(Cat(Const(0, 31), zero_sign))
    with m.Else():
        m.d.comb += out.eq(rounded)
    return out


def f32_to_bf16(m, bits, *, name):
    """bf16 bits (16) of fp32 ``bits``, rounded to nearest even; a NaN becomes ``0x7FC0``.

    bf16 keeps fp32's exponent field, so cutting 16 fraction bits rounds normal and
    subnormal values alike, and a carry into the exponent field (up to infinity)
    is the right result.
    """
    upper, lower = bits[16:32], bits[:16]
    up = lower[15] & (lower[:15].any() | upper[0])
    nan = bits[23:31].all() & bits[:23].any()
    out = Signal(16, name=name)
    m.d.comb += out.eq(Mux(nan, BF16.nan, upper + up))
    return out
