"""Lane arithmetic of the in-network reductions: the one lane-wise sum every INC block uses.

Both in-network features reduce data the same way, lane by lane: the INC-MoE engine and
its endpoints (:mod:`epfabric.hw.inc_engine`, :mod:`epfabric.hw.inc_endpoint`,
:mod:`epfabric.hw.inc_nic`) add the lanes of a flit (INC-MoE §3.1, ReduceScatter);
the in-network EP reduction unit (:mod:`epfabric.hw.inc_reduce`) adds the lanes of
a block after its Data-as-Flag header (docs/spec/kernels.md §1.7), which it does not sum.
This module is that sum, once.

Lane types (``dtype``)
----------------------
``"intN"``
    N-bit two's-complement integers (N >= 1), added with wrap-around: the carry out of a
    lane is dropped, so a sum is bit-identical to numpy's ``intN`` sum in any order.
``"fp32"``
    IEEE 754 binary32 lanes (32 bits), each sum rounded to nearest, ties to even, with
    the conventions of :mod:`~epfabric.hw.fp_lanes` (subnormals kept, overflow to
    infinity, the canonical NaN ``0x7FC00000`` for any NaN result, an exact zero sum
    ``+0`` unless both addends are ``-0``): numpy's ``float32`` ``a + b`` bit for bit,
    NaNs aside (:func:`add_f32`).
``"bf16"``
    bfloat16 lanes (16 bits) on the wire, **accumulated in fp32**: a reduction keeps an
    fp32 partial sum per lane (:func:`accumulator_bits` = 32), adds each contribution
    widened exactly to fp32, and rounds to bf16 (to nearest even, NaN ``0x7FC0``) once,
    when the sum leaves (:func:`round_lanes`). This is what the in-switch reductions
    of NVLink SHARP do: NCCL's NVLS path loads bf16 and fp16 sums from the switch with
    ``multimem.ld_reduce...add.acc::f32`` (``PtxAcc_for_bf16`` in ``src/device/reduce_kernel.h``
    of github.com/NVIDIA/nccl), i.e. with fp32 accumulation and one rounding of the result.
    The price is storage: a partial sum takes twice the bits of its lanes. Summing
    bf16 + bf16 -> bf16 at every step would round ``n - 1`` times at bf16's precision
    (``2**-8``), an error bound ``(n - 1) * 2**-8 * sum|x|`` against ``2**-8 * |s|``
    plus ``(n - 2) * 2**-24 * sum|x|`` with fp32 accumulation (docs/concepts/inc-numerics.md).
    :func:`add_lanes` of two bf16 words (the INC-MoE root's own partial added to a
    received sum) is the fp32 sum rounded once to bf16: for a sum of two values, fp32's
    24 bits (>= 2 * 8 + 2) make that the correctly rounded bf16 sum.

Forms. A block's data travels in the *wire* form (lanes of :func:`lane_bits`) and a
partial sum is kept in the *accumulator* form (lanes of :func:`accumulator_bits`; the same
for every type but bf16); :func:`widen_lanes` and :func:`round_lanes` convert, and
:func:`accumulate_lanes` adds a wire word to an accumulator. A header (``header_bits``,
taken from the wire word unsummed) and a tail past the last whole lane ride along.

Floating-point lanes add logic to a module, so their functions take it (``m``); the
integer ones build an expression and need none.
"""

import re

from amaranth.hdl import Cat, Const, Mux, Shape, Signal

from . import fp_lanes as fp
from .fp_unit import register_points
from .validate import UserError

__all__ = ["FLOAT_TYPES", "ADD_STEPS", "FLOAT_ADD_LATENCY", "lane_bits", "accumulator_bits",
           "is_float", "add_latency", "accumulator_width", "identity_lanes", "widen_lanes",
           "round_lanes", "accumulate_lanes", "add_lanes", "add_f32", "delay", "pipeline"]

_INT = re.compile(r"int([1-9][0-9]*)")

#: Floating-point lane types: ``{dtype: (wire bits, accumulator bits)}``.
FLOAT_TYPES = {"fp32": (32, 32), "bf16": (16, 32)}

#: Guard bits kept below the larger addend's last bit in :func:`add_f32` (guard, round, sticky).
_GUARD = 3


def _check(dtype):
    if isinstance(dtype, str) and (dtype in FLOAT_TYPES or _INT.fullmatch(dtype)):
        return dtype
    raise UserError(f"dtype must be a lane type: an integer 'intN' such as 'int32' or 'int16', "
                    f"or one of {', '.join(map(repr, FLOAT_TYPES))}, not {dtype!r}")


def lane_bits(dtype):
    """The width of one lane of ``dtype`` on the wire (``"int32"``: 32, ``"bf16"``: 16).

    Raises
    ------
    ValueError
        If ``dtype`` is not a lane type (see the module docstring).
    """
    _check(dtype)
    return FLOAT_TYPES[dtype][0] if dtype in FLOAT_TYPES else int(_INT.fullmatch(dtype)[1])


def accumulator_bits(dtype):
    """The width of one lane of a partial sum of ``dtype`` (bf16: 32, fp32 accumulation)."""
    _check(dtype)
    return FLOAT_TYPES[dtype][1] if dtype in FLOAT_TYPES else lane_bits(dtype)


def is_float(dtype):
    """Whether ``dtype`` is a floating-point lane type."""
    return _check(dtype) in FLOAT_TYPES


def _shape(width, dtype, header_bits):
    bits = lane_bits(dtype)
    lanes = (width - header_bits) // bits
    return bits, lanes, width - header_bits - lanes * bits


def accumulator_width(width, *, dtype, header_bits=0):
    """Bits of the accumulator form of a ``width``-bit wire word: the header, the lanes
    at :func:`accumulator_bits`, the tail."""
    _bits, lanes, tail = _shape(width, dtype, header_bits)
    return header_bits + lanes * accumulator_bits(dtype) + tail


def identity_lanes(width, *, dtype, header_bits=0):
    """The accumulator form of "nothing yet": 0 in every integer lane, ``-0.0`` in every
    floating-point one (``-0 + x`` is ``x`` for every ``x`` but a NaN, which becomes the
    canonical NaN; ``+0`` would turn a ``-0`` contribution into ``+0``)."""
    _bits, lanes, _tail = _shape(width, dtype, header_bits)
    acc = accumulator_bits(dtype)
    sign = 1 << (acc - 1) if is_float(dtype) else 0
    value = sum(sign << (header_bits + k * acc) for k in range(lanes))
    return Const(value, accumulator_width(width, dtype=dtype, header_bits=header_bits))


def _split(word, width, dtype, header_bits, bits):
    """``(header, [lane], tail)`` of ``word``: the lanes of a ``width``-bit wire word of
    ``dtype``, each ``bits`` wide in ``word`` (the wire or the accumulator form)."""
    _b, lanes, tail = _shape(width, dtype, header_bits)
    word = Cat(word)
    body = [word[header_bits + k * bits:header_bits + (k + 1) * bits] for k in range(lanes)]
    end = header_bits + lanes * bits
    return word[:header_bits], body, word[end:end + tail]


def widen_lanes(x, *, dtype, header_bits=0):
    """The accumulator form of wire word ``x`` (bf16 lanes widened exactly to fp32)."""
    if accumulator_bits(dtype) == lane_bits(dtype):
        return Cat(x)
    width = len(Cat(x))
    head, body, tail = _split(x, width, dtype, header_bits, lane_bits(dtype))
    return Cat(head, *(fp.bf16_to_f32(v) for v in body), tail)


def round_lanes(m, acc, *, dtype, header_bits=0, width, name="round"):
    """The wire form (``width`` bits) of accumulator ``acc`` (bf16 lanes rounded to nearest
    even from fp32, a NaN becoming ``0x7FC0``); ``m`` may be ``None`` for other types."""
    if accumulator_bits(dtype) == lane_bits(dtype):
        return Cat(acc)
    head, body, tail = _split(acc, width, dtype, header_bits, accumulator_bits(dtype))
    return Cat(head, *(fp.f32_to_bf16(m, v, name=f"{name}{k}") for k, v in enumerate(body)),
               tail)


def accumulate_lanes(m, acc, x, *, dtype, header_bits=0, name="acc", latency=0, advance=None):
    """``x``'s header, then the lane-wise sum of accumulator ``acc`` and wire word ``x`` in
    the accumulator form, then ``x``'s tail (``m`` may be ``None`` for integer types);
    floating-point sums after ``latency`` register stages that load when ``advance`` is 1
    (the header and the tail delayed alike).

    Raises
    ------
    ValueError
        If ``dtype`` is not a lane type, ``m`` is ``None`` for a floating-point one, or
        ``latency`` is not 0 for an integer one.
    """
    x = Cat(x)
    width = len(x)
    bits, lanes, _tail = _shape(width, dtype, header_bits)
    if not is_float(dtype):
        if latency:
            raise UserError(f"dtype {dtype!r}: integer lanes add in the cycle, not after "
                            f"latency={latency}")
        a, b = Cat(acc), x
        if m is not None:
            # both operands named once (as below): a lane's slice of an unnamed wide operand
            # (the reduction unit's Mux of a fresh slot and the stored sum) re-emits all of it
            # per lane -- a 512 B block converted 248 copies of a 4096-bit Mux per operand
            a, b = _named(m, a, f"{name}_old"), _named(m, b, f"{name}_x")
        out = [b[:header_bits]]
        for k in range(lanes):
            lo = header_bits + k * bits
            # integer lanes: two's-complement addition, the carry out of the lane dropped
            out.append((a[lo:lo + bits] + b[lo:lo + bits])[:bits])
        tail = header_bits + lanes * bits
        if tail < width:
            out.append(b[tail:])
        return Cat(*out)
    if m is None:
        raise UserError(f"dtype {dtype!r}: floating-point lanes add logic to a module; give m")
    # both operands named once: a lane's slice of an unnamed wide expression (a Cat, a Mux)
    # re-emits the whole expression, so slicing it per lane grows as lanes squared
    wide_x = Signal(accumulator_width(width, dtype=dtype, header_bits=header_bits),
                    name=f"{name}_x")
    wide_acc = Signal(len(Cat(acc)), name=f"{name}_old")
    m.d.comb += [wide_x.eq(widen_lanes(x, dtype=dtype, header_bits=header_bits)),
                 wide_acc.eq(acc)]
    head, xs, tail = _split(wide_x, width, dtype, header_bits, 32)
    _head, sums, _tail = _split(wide_acc, width, dtype, header_bits, 32)
    return Cat(delay(m, head, latency, advance=advance, name=f"{name}_head"),
               *(add_f32(m, s, v, name=f"{name}{k}", latency=latency, advance=advance)
                 for k, (s, v) in enumerate(zip(sums, xs))),
               delay(m, tail, latency, advance=advance, name=f"{name}_tail"))


def _named(m, value, name):
    """``value`` as a signal of its width, driven in ``m``'s comb domain."""
    sig = Signal(len(value), name=name)
    m.d.comb += sig.eq(value)
    return sig


def add_lanes(a, b, *, dtype, header_bits=0, m=None, name="add"):
    """``b``'s first ``header_bits`` bits, then the lane-wise sum of ``a`` and ``b`` in lanes
    of ``dtype``, then ``b``'s bits past its last whole lane (both wire words).

    Parameters
    ----------
    a, b : Value
        The operands, ``b`` as wide as the result; ``a`` at least as wide as ``b``'s lanes
        reach (its bits of the header and the tail are not read).
    dtype : str
        The lane type (see the module docstring; bf16: summed in fp32, rounded once).
    header_bits : int
        Leading bits taken from ``b`` unsummed (0: every bit is in a lane).
    m : Module or None
        Where a floating-point sum's logic goes (integer sums need none).

    Raises
    ------
    ValueError
        If ``dtype`` is not a lane type, or ``m`` is ``None`` for a floating-point one.
    """
    width = len(Cat(b))
    if not is_float(dtype):
        return accumulate_lanes(None, a, b, dtype=dtype, header_bits=header_bits)
    acc = accumulate_lanes(m, widen_lanes(Cat(a)[:width], dtype=dtype, header_bits=header_bits),
                           b, dtype=dtype, header_bits=header_bits, name=name)
    return round_lanes(m, acc, dtype=dtype, header_bits=header_bits, width=width,
                       name=f"{name}_round")


def _step_align(m, d, name):
    """Unpack, order by exponent, place the larger at bits [3, 27), shift and jam the other."""
    x = fp.unpack(m, fp.F32, d["a"], name=f"{name}_a")
    y = fp.unpack(m, fp.F32, d["b"], name=f"{name}_b")
    layout = fp.unpacked_layout(fp.F32)
    big, small = Signal(layout, name=f"{name}_big"), Signal(layout, name=f"{name}_small")
    swap = y.e_lsb > x.e_lsb
    m.d.comb += [big.eq(Mux(swap, y, x)), small.eq(Mux(swap, x, y))]
    top = 24 + _GUARD                       # window bits below the carry
    diff = big.e_lsb - small.e_lsb          # >= 0
    shift = Signal(range(top + 1), name=f"{name}_shift")
    m.d.comb += shift.eq(Mux(diff > top, top, diff))
    moved = Signal(24 + top, name=f"{name}_moved")
    m.d.comb += moved.eq((small.sig << top) >> shift)
    special = Signal(fp.special_layout, name=f"{name}_special")
    m.d.comb += [special.nan.eq(x.nan | y.nan | (x.inf & y.inf & (x.sign ^ y.sign))),
                 special.inf.eq(x.inf | y.inf),
                 special.inf_sign.eq(Mux(x.inf, x.sign, y.sign))]
    return {"p": big.sig << _GUARD, "q": moved[24:] | moved[:24].any(),
            "big_sign": big.sign, "small_sign": small.sign, "e_lsb": big.e_lsb - _GUARD,
            "zero_sign": x.zero & y.zero & x.sign & y.sign, "special": special}


def _step_sum(m, d, name):
    """The exact (or jammed) sum of the window: one adder's delay for either sign."""
    p, q = d["p"], d["q"]
    sub = d["big_sign"] ^ d["small_sign"]
    negative = sub & (q > p)
    mag = Signal(24 + _GUARD + 1, name=f"{name}_mag")
    m.d.comb += mag.eq(Mux(sub, Mux(negative, q - p, p - q), p + q))
    e_lsb = Signal(fp.EXP, name=f"{name}_e")
    m.d.comb += e_lsb.eq(d["e_lsb"])
    return {"mag": mag, "e_lsb": e_lsb, "sign": Mux(negative, d["small_sign"], d["big_sign"]),
            "zero_sign": d["zero_sign"], "special": d["special"]}


def _step_point(m, d, name):
    """The rounding point (a leading-zero count)."""
    return {**d, "r": fp.rounding_point(m, fp.F32, mag=d["mag"], e_lsb=d["e_lsb"], name=name)}


def _step_cut(m, d, name):
    """The kept bits, guard and sticky (a wide shift)."""
    norm = fp.cut(m, fp.F32, mag=d["mag"], e_lsb=d["e_lsb"], r=d["r"], name=name)
    return {"norm": norm, "zero": d["mag"] == 0, "sign": d["sign"],
            "zero_sign": d["zero_sign"], "special": d["special"]}


def _step_round(m, d, name):
    """Round to nearest even, pack, and the special results."""
    rounded = fp.round_pack(m, fp.F32, sign=d["sign"], norm=d["norm"], name=f"{name}_rounded")
    return {"y": fp.finish(m, sign=d["sign"], zero=d["zero"], zero_sign=d["zero_sign"],
                           special=d["special"], rounded=rounded, name=name)}


#: The steps of :func:`add_f32`, in order; a pipelined sum puts registers between them.
ADD_STEPS = (("align", _step_align), ("sum", _step_sum), ("point", _step_point),
             ("cut", _step_cut), ("round", _step_round))

#: Register stages of a floating-point lane sum in the reduction blocks: one after each
#: step of :func:`add_f32` (the combinational sum misses the blocks' clock by far:
#: ``epfabric synth inc_switch --param dtype="'fp32'" --pnr``; docs/concepts/inc-numerics.md).
FLOAT_ADD_LATENCY = len(ADD_STEPS)


def add_latency(dtype):
    """Register stages of a lane sum of ``dtype`` in the reduction blocks: 0 for integers
    (combinational, as always), :data:`FLOAT_ADD_LATENCY` for floating point."""
    return FLOAT_ADD_LATENCY if is_float(dtype) else 0


def delay(m, value, stages, *, advance, name):
    """``value`` after ``stages`` registers that load when ``advance`` is 1."""
    if not Shape.cast(value.shape()).width:
        return value
    for k in range(stages):
        reg = Signal(value.shape(), name=f"{name}_d{k}")
        with m.If(advance):
            m.d.sync += reg.eq(value)
        value = reg
    return value


def pipeline(m, values, stages, *, advance):
    """The registers of ``values`` (a dict) through ``stages`` stages that load when
    ``advance`` is 1: a list of dicts, stage 1 first (the last is the pipeline's end)."""
    out = []
    for k in range(stages):
        values = {name: delay(m, v, 1, advance=advance, name=f"stage{k + 1}_{name}")
                  for name, v in values.items()}
        out.append(values)
    return out


def add_f32(m, a, b, *, name, latency=0, advance=None):
    """The fp32 sum of fp32 bits ``a`` and ``b``, rounded to nearest even (a 32-bit signal),
    after ``latency`` register stages that load when ``advance`` is 1 (0: combinational).

    A two-operand adder narrower than :mod:`~epfabric.hw.fp_lanes`'s multiply-add window:
    the addend of the larger exponent sits at bits ``[3, 27)`` of a 28-bit window, the
    other is shifted right by the exponent difference with every bit shifted out OR-ed
    into bit 0 (jammed). The sum is then exact unless the difference is 4 or more; then
    the larger addend is normal (a subnormal has the smallest exponent), so the result is
    above ``2**25`` and its rounding point at bit 2 or above, and the exact and the jammed
    sums lie strictly between the same two multiples of 2: they round the same
    (:mod:`~epfabric.hw.fp_lanes`' ``align`` makes the same argument). Rounding,
    specials and signed zeros are :mod:`~epfabric.hw.fp_lanes`' (``rounding_point``,
    ``cut``, ``round_pack``, ``finish``). The steps are :data:`ADD_STEPS`; registers
    are placed as :func:`~epfabric.hw.fp_unit.register_points` places them in the fp unit.
    """
    after, extra = register_points(len(ADD_STEPS), latency) if latency else (set(), 0)
    d = {"a": Cat(a), "b": Cat(b)}
    for i, (step, fn) in enumerate(ADD_STEPS):
        d = fn(m, d, f"{name}_{step}")
        if i in after:
            d = {k: delay(m, v, 1, advance=advance, name=f"{name}_{step}_{k}")
                 for k, v in d.items()}
    return delay(m, d["y"], extra, advance=advance, name=f"{name}_y")
