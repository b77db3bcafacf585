"""Pipelined floating-point vector lanes: fp32 and bf16 add, scalar multiply, multiply-add, casts.

A standalone unit for the AIV's vector arithmetic on real numbers (the integer
:class:`~epfabric.hw.vector_unit.VectorUnit` adds and multiplies modulo 2**16).
Every operation is the one datapath of :mod:`epfabric.hw.fp_lanes`, ``a*s + b``
in fp32, with the operands the operation does not use replaced by exact
constants (:data:`OP_FORMS`), bf16 operands widened exactly, and a bf16 result
rounded from the fp32 one.

Model choices, and what Ascend documents about them (the full addresses of the
sources are on docs/api/fp_unit.md):

* **Subnormals are kept** (gradual underflow, inputs and results). CANN's
  subnormal example states that Atlas A2/A3 hardware "supports Subnormal by
  default" while the Ascend 950 ("3510" architecture) flushes them to zero unless
  told otherwise:
  https://gitcode.com/lizq15/asc-devkit/tree/master/examples/01_simd_cpp_api/06_compatibility_guide/subnormal
  (a fork of cann/asc-devkit).
* **Rounding** is to nearest, ties to even: Ascend's ``RINT`` mode
  ("四舍六入五成双"), the mode of the A2/A3 vector cast ``asc_float2bfloat16``
  (its page in github.com/cannmirror/asc-devkit, a mirror of CANN's asc-devkit).
* **NaN results are canonical**: ``0x7FC00000`` (bf16 ``0x7FC0``), whatever the
  input payloads. What the vector unit does with payloads is not documented;
  these are the quiet NaNs Ascend C itself uses (``NumericLimits::QuietNaN``,
  and ``F32_NAN`` in ``impl/basic_api/utils/kernel_utils_constants.h`` of the same
  repository). Overflow gives infinity (Ascend's Inf/NaN mode, the default on
  A2/A3).
* **Multiply-add: two roundings unless** ``fused=True``. For Ascend 950 the Reg
  API's ``MulAddDst`` is documented as one fused instruction, more precise than
  ``Mul`` then ``Add`` (its page, "关键特性说明"). For A2/A3 the ``Axpy``,
  ``FusedMulAdd`` and ``MulAddDst`` pages say nothing about rounding, and the
  high-level ``Axpy`` page says it computes with ``Muls`` and ``Add`` "to give
  better precision" than the basic ``Axpy``, which a once-rounded fp32
  multiply-add could not be worse than. So the default models A2/A3 as ``Muls``
  then ``Add`` (the product rounded to fp32, then the sum); ``fused=True`` rounds
  once.

Timing. One 256 B repeat is 64 elements (every operation has an fp32 side;
Ascend's ``Axpy`` table gives 64 per repeat for fp32 and for half→fp32), so
``64 // lanes`` beats; ``repeat_cycles`` is the cycles one repeat occupies the
unit (``64 // lanes`` = one beat a cycle). Ascend's ``FusedMulAdd`` page notes
that three source operands at distinct addresses run at half the repeat rate
(bank conflicts): a preset can give that as a larger ``repeat_cycles``.
"""

from typing import NamedTuple

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, enum, stream, wiring
from amaranth.lib.wiring import In, Out

from . import fp_lanes as fp
from .validate import check_bool, check_int, check_pow2

__all__ = ["FpOp", "OpForm", "OP_FORMS", "FpLane", "FpUnit", "check_unit_params",
           "lane_steps", "register_points", "request_layout", "response_layout",
           "REPEAT_ELEMENTS", "ONE", "MINUS_ZERO"]

#: Elements in one 256-byte repeat (64 fp32 elements).
REPEAT_ELEMENTS = 64
#: fp32 bits of 1.0 and of -0.0: the exact stand-ins for an unused operand.
ONE, MINUS_ZERO = 0x3F80_0000, 0x8000_0000


class FpOp(enum.Enum, shape=4):
    """Operation of a request beat (``y`` per lane; ``s`` is the beat's scalar)."""
    ADD = 0            #: ``y = a + b``, fp32
    MULS = 1           #: ``y = a * s``, fp32 (Ascend's ``Muls``)
    AXPY = 2           #: ``y = a * s + b``, fp32 (fused or not, see :class:`FpUnit`)
    CAST_BF16_F32 = 3  #: ``y = a``: bf16 to fp32, exact
    CAST_F32_BF16 = 4  #: ``y = a``: fp32 to bf16, rounded
    ADD_BF16 = 5       #: ``y = a + b``, bf16 operands and result
    MULS_BF16 = 6      #: ``y = a * s``, bf16 operands and result
    AXPY_BF16 = 7      #: ``y = a * s + b``, bf16 operands; the fp32 result rounded to bf16
    AXPY_MIX = 8       #: ``y = a * s + b``: ``a``, ``s`` bf16, ``b`` and ``y`` fp32


class OpForm(NamedTuple):
    """How an operation maps onto ``a*s + b`` in fp32."""
    a_bf16: bool    #: ``a`` (and ``s``) are bf16
    b_bf16: bool    #: ``b`` is bf16
    use_s: bool     #: else ``s`` is 1.0
    use_b: bool     #: else ``b`` is -0.0
    out_bf16: bool  #: the fp32 result is rounded to bf16


#: The one table hardware decoding and the reference model share.
OP_FORMS = {
    FpOp.ADD: OpForm(False, False, False, True, False),
    FpOp.MULS: OpForm(False, False, True, False, False),
    FpOp.AXPY: OpForm(False, False, True, True, False),
    FpOp.CAST_BF16_F32: OpForm(True, False, False, False, False),
    FpOp.CAST_F32_BF16: OpForm(False, False, False, False, True),
    FpOp.ADD_BF16: OpForm(True, True, False, True, True),
    FpOp.MULS_BF16: OpForm(True, False, True, False, True),
    FpOp.AXPY_BF16: OpForm(True, True, True, True, True),
    FpOp.AXPY_MIX: OpForm(True, False, True, True, False),
}


def request_layout(lanes):
    """One request beat: ``op``, the scalar ``s``, operands ``a`` and ``b`` (32 bits a lane;
    a bf16 operand is in a lane's low 16 bits), ``last`` passed through to the result."""
    return data.StructLayout({"op": FpOp, "last": 1, "s": 32,
                              "a": data.ArrayLayout(32, lanes), "b": data.ArrayLayout(32, lanes)})


def response_layout(lanes):
    """One result beat: ``y`` per lane (a bf16 result in the low 16 bits, the high 16 zero)."""
    return data.StructLayout({"last": 1, "y": data.ArrayLayout(32, lanes)})


# --- one lane: the datapath as a chain of steps, registers between some of them --------

def _with(m, x, name, drop=(), **new):
    """A struct of ``x``'s fields but ``drop``, and the ``new`` values (views or values)."""
    kept = {k: v for k, v in x.shape().members.items() if k not in drop and k not in new}
    out = Signal(data.StructLayout({**kept, **{k: v.shape() for k, v in new.items()}}), name=name)
    m.d.comb += [getattr(out, k).eq(getattr(x, k)) for k in kept]
    m.d.comb += [getattr(out, k).eq(v) for k, v in new.items()]
    return out


def _step_multiply(m, x, *, name):
    a, s, b = (fp.unpack(m, fp.F32, getattr(x, k), name=f"{name}_{k}") for k in "asb")
    return _with(m, x, name, drop=("a", "s"), p=fp.multiply(m, a, s, name=f"{name}_p"), b=b)


def _point(field):
    def step(m, x, *, name):
        v = getattr(x, field)
        return _with(m, x, name, r=fp.rounding_point(m, fp.F32, mag=v.mag, e_lsb=v.e_lsb,
                                                     name=f"{name}_r"))
    return step


def _step_product_cut(m, x, *, name):
    norm = fp.cut(m, fp.F32, mag=x.p.mag, e_lsb=x.p.e_lsb, r=x.r, name=f"{name}_norm")
    return _with(m, x, name, drop=("r",), norm=norm)


def _step_product_round(m, x, *, name):
    return _with(m, x, name, drop=("norm",), p=fp.round_product(m, x.p, x.norm, name=f"{name}_p"))


def _step_align(m, x, *, name):
    return _with(m, x, name, drop=("p", "b"), aligned=fp.align(m, x.p, x.b, name=f"{name}_x"))


def _step_add(m, x, *, name):
    return _with(m, x, name, drop=("aligned",), sum=fp.add(m, x.aligned, name=f"{name}_x"))


def _step_cut(m, x, *, name):
    s = x.sum
    norm = fp.cut(m, fp.F32, mag=s.mag, e_lsb=s.e_lsb, r=x.r, name=f"{name}_norm")
    return _with(m, x, name, drop=("sum", "r"), norm=norm, sign=s.sign, zero=s.mag == 0,
                 zero_sign=s.zero_sign, special=s.special)


def _step_round(m, x, *, name):
    rounded = fp.round_pack(m, fp.F32, sign=x.sign, norm=x.norm, name=f"{name}_rounded")
    y = fp.finish(m, sign=x.sign, zero=x.zero, zero_sign=x.zero_sign, special=x.special,
                  rounded=rounded, name=f"{name}_y")
    return _with(m, x, name, drop=("norm", "sign", "zero", "zero_sign", "special"), y=y)


def _step_bf16(m, x, *, name):
    return _with(m, x, name, drop=("out_bf16",),
                 y=Mux(x.out_bf16, fp.f32_to_bf16(m, x.y, name=f"{name}_y"), x.y))


def lane_steps(fused):
    """The lane's steps, in order: ``(name, function)``. Each finding of a rounding point
    (a leading-zero count) and each cut (a wide shift) is a step of its own."""
    steps = [("multiply", _step_multiply)]
    if not fused:
        steps += [("product_point", _point("p")), ("product_cut", _step_product_cut),
                  ("product_round", _step_product_round)]
    return steps + [("align", _step_align), ("add", _step_add), ("point", _point("sum")),
                    ("cut", _step_cut), ("round", _step_round), ("bf16", _step_bf16)]


def register_points(steps, latency):
    """``(after, extra)``: the steps followed by a register, and the registers after the last.

    With at least one register per step, every step gets one and the rest delay
    the result; with fewer, they are spread evenly (the last step always has one).
    """
    if latency >= steps:
        return set(range(steps)), latency - steps
    return {-(-(i + 1) * steps // latency) - 1 for i in range(latency)}, 0


def check_unit_params(*, lanes, latency, repeat_cycles, fused):
    """:class:`FpUnit`'s parameters, checked, with ``None`` resolved (a dict of the four)."""
    check_pow2("lanes", lanes, 1, REPEAT_ELEMENTS)
    check_bool("fused", fused)
    latency = len(lane_steps(fused)) if latency is None else check_int("latency", latency, 1, 64)
    per_repeat = REPEAT_ELEMENTS // lanes
    repeat_cycles = (per_repeat if repeat_cycles is None else
                     check_int("repeat_cycles", repeat_cycles, per_repeat, 4096))
    return {"lanes": lanes, "latency": latency, "repeat_cycles": repeat_cycles, "fused": fused}


class FpLane(wiring.Component):
    """One lane of :class:`FpUnit`: ``y = a*s + b`` in fp32, optionally rounded to bf16.

    ``latency`` registers, all enabled by ``advance``: a value presented in a
    cycle in which ``advance`` is 1 appears on ``y`` once ``advance`` has been 1
    in ``latency`` cycles.

    Parameters
    ----------
    fused : bool
        Round ``a*s + b`` once (else the product is rounded to fp32 first).
    latency : int or None
        Register stages, 1..64 (see :func:`register_points`); ``None``: one per step.

    Attributes
    ----------
    advance : In(1)
        Every register of the lane loads.
    a, s, b : In(32)
        fp32 operands.
    out_bf16 : In(1)
        Round the result to bf16 (``y[:16]``; ``y[16:]`` is 0).
    y : Out(32)
        The result.
    """

    advance: In(1)
    a: In(32)
    s: In(32)
    b: In(32)
    out_bf16: In(1)
    y: Out(32)

    def __init__(self, *, fused=False, latency=None):
        self.fused = check_bool("fused", fused)
        self.latency = (len(lane_steps(fused)) if latency is None else
                        check_int("latency", latency, 1, 64))
        super().__init__()

    def elaborate(self, platform):
        m = Module()
        x = Signal(data.StructLayout({"a": 32, "s": 32, "b": 32, "out_bf16": 1}), name="operands")
        m.d.comb += [x.a.eq(self.a), x.s.eq(self.s), x.b.eq(self.b),
                     x.out_bf16.eq(self.out_bf16)]
        steps = lane_steps(self.fused)
        after, extra = register_points(len(steps), self.latency)
        for i, (name, step) in enumerate(steps):
            x = step(m, x, name=name)
            if i in after:
                x = self._register(m, x, f"{name}_q")
        for i in range(extra):
            x = self._register(m, x, f"delay{i}")
        m.d.comb += self.y.eq(x.y)
        return m

    def _register(self, m, value, name):
        reg = Signal(value.shape(), name=name)
        with m.If(self.advance):
            m.d.sync += reg.eq(value)
        return reg


class FpUnit(wiring.Component):
    """Pipelined fp32/bf16 vector lanes behind a valid/ready handshake.

    A beat on ``i_stream`` carries ``lanes`` operand pairs ``a[j]``, ``b[j]``, one
    scalar ``s`` and an operation (:class:`FpOp`); its ``lanes`` results leave on
    ``o_stream`` in order, with the beat's ``last``. The arithmetic and the model
    choices (subnormals kept, canonical NaN, ties to even, one or two roundings
    of a multiply-add) are in the module docstring.

    **Timing.** A beat accepted in cycle ``t`` (``valid`` and ``ready`` high) has
    its result valid on ``o_stream`` in cycle ``t + latency``. The unit accepts
    ``64 // lanes`` beats (one 256 B repeat) per ``repeat_cycles`` cycles: beat
    ``n`` of a gap-free stream is accepted in cycle ``n * repeat_cycles // (64 //
    lanes)`` (:meth:`cycles`). Backpressure on ``o_stream`` stalls the whole
    pipeline, as in :class:`~epfabric.hw.vector_unit.VectorUnit`.

    Parameters
    ----------
    lanes : int
        Elements per beat: a power of two, 1..64 (it divides the 64 elements of a repeat).
    latency : int or None
        Cycles from a beat to its result, 1..64; ``None`` gives one register per
        datapath step (:func:`lane_steps`: 7 fused, 10 with two roundings). Fewer
        merge steps between registers, more delay the result.
    repeat_cycles : int or None
        Cycles per 256 B repeat, ``64 // lanes``..4096; ``None`` is ``64 // lanes``
        (one beat a cycle).
    fused : bool
        Round a multiply-add once (Ascend 950's ``MulAddDst``) instead of rounding
        the product and then the sum (A2/A3, the default).

    Attributes
    ----------
    i_stream : In(stream.Signature(request_layout(lanes)))
        Request beats.
    o_stream : Out(stream.Signature(response_layout(lanes)))
        Result beats.

    Raises
    ------
    TypeError
        A parameter of the wrong type.
    ValueError
        A parameter out of range.
    """

    def __init__(self, *, lanes=4, latency=None, repeat_cycles=None, fused=False):
        params = check_unit_params(lanes=lanes, latency=latency, repeat_cycles=repeat_cycles,
                                   fused=fused)
        self.lanes, self.latency = params["lanes"], params["latency"]
        self.repeat_cycles, self.fused = params["repeat_cycles"], params["fused"]
        self.beats_per_repeat = REPEAT_ELEMENTS // lanes
        super().__init__({
            "i_stream": In(stream.Signature(request_layout(lanes))),
            "o_stream": Out(stream.Signature(response_layout(lanes))),
        })

    def cycles(self, beats):
        """Cycle in which the last of ``beats`` gap-free beats has its result valid
        (the first accepted in cycle 0, no backpressure)."""
        return (beats - 1) * self.repeat_cycles // self.beats_per_repeat + self.latency

    def elaborate(self, platform):
        m = Module()
        req, rsp = self.i_stream.payload, self.o_stream.payload
        advance = Signal()          # the whole pipeline moves this cycle
        m.d.comb += advance.eq(~self.o_stream.valid | self.o_stream.ready)
        m.d.comb += self.i_stream.ready.eq(advance & self._rate(m))
        take = self.i_stream.valid & self.i_stream.ready

        form = {field: Signal(name=field) for field in OpForm._fields}
        for field, flag in form.items():
            m.d.comb += flag.eq(Cat(req.op == op for op, f in OP_FORMS.items()
                                    if getattr(f, field)).any())
        s = Mux(form["use_s"], Mux(form["a_bf16"], fp.bf16_to_f32(req.s), req.s), ONE)
        for j in range(self.lanes):
            lane = m.submodules[f"lane{j}"] = FpLane(fused=self.fused, latency=self.latency)
            m.d.comb += [
                lane.advance.eq(advance),
                lane.a.eq(Mux(form["a_bf16"], fp.bf16_to_f32(req.a[j]), req.a[j])),
                lane.s.eq(s),
                lane.b.eq(Mux(form["use_b"],
                              Mux(form["b_bf16"], fp.bf16_to_f32(req.b[j]), req.b[j]),
                              MINUS_ZERO)),
                lane.out_bf16.eq(form["out_bf16"]),
                rsp.y[j].eq(lane.y),
            ]

        valid, last = take, req.last    # the beat's valid bit and last, alongside the lanes
        for i in range(self.latency):
            valid_q, last_q = Signal(name=f"valid{i}"), Signal(name=f"last{i}")
            with m.If(advance):
                m.d.sync += [valid_q.eq(valid), last_q.eq(last)]
            valid, last = valid_q, last_q
        m.d.comb += [self.o_stream.valid.eq(valid), rsp.last.eq(last)]
        return m

    def _rate(self, m):
        """1 while a beat may be accepted: a credit counter gains ``64 // lanes`` a cycle
        (up to ``repeat_cycles + 64 // lanes - 1``) and a beat costs ``repeat_cycles``."""
        gain, cost = self.beats_per_repeat, self.repeat_cycles
        if cost == gain:
            return Const(1)
        cap = cost + gain - 1
        credit = Signal(range(cap + 1), init=cap)
        ok = Signal()
        m.d.comb += ok.eq(credit >= cost)
        after = credit + gain - Mux(self.i_stream.valid & self.i_stream.ready, cost, 0)
        m.d.sync += credit.eq(Mux(after > cap, cap, after))
        return ok


VERILOG_EXPORTS = {
    "fp_unit": (FpUnit, {"lanes": 2, "latency": None, "repeat_cycles": None, "fused": False}),
}
