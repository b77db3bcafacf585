"""AIV vector unit: VectorCount, CompareScalar, FindFirstValue, add, reduce-sum, and the
element-wise Duplicate, Sub, Abs and Mins CANN's open dispatch kernel counts with.

UBEP runs its hardware-accelerated mapper and its token-sending path on the
AIV vector instructions (UBEP §3.3 Algorithm 1, §4 "SIMD Vectorized
Operation"): ``VectorCount`` evaluates the three pivots of one quaternary-search
step in a single instruction, ``CompareScalar`` masks and validates, and
``FindFirstValue`` locates token indices. This block models that unit.
"""

from amaranth import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, enum, stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import bits_for

from .signature import ParamSignature
from .validate import check_int

__all__ = ["VecOp", "ELEMENTWISE", "Cond", "VectorUnit", "request_layout", "response_layout"]


class VecOp(enum.Enum, shape=4):
    """Vector-unit operation (``op`` field of a request beat)."""
    #: ``count[k] = #{i < L : cond(a[i], s[k])}`` for k = 0, 1, 2 in one pass.
    #: With ``cond=LT`` this is UBEP's VectorCount(E < P_k) for three pivots.
    COUNT = 0
    #: CompareScalar: per beat, ``mask[j] = cond(a[j], s[0])`` (0 beyond L).
    CMP = 1
    #: FindFirstValue: ``index`` of the first ``i < L`` with ``cond(a[i], s[0])``,
    #: or ``none=1``. For "first set lane of a mask" send the mask as ``a``
    #: with ``cond=NE, s[0]=0``.
    FIND_FIRST = 2
    #: Element-wise ``vec[j] = (a[j] + b[j]) mod 2**width`` per beat.
    ADD = 3
    #: ``sum = a[0] + ... + a[L-1]``, exact (``sum`` is wide enough for max_len).
    REDUCE_SUM = 4
    #: Element-wise ``vec[j] = (a[j] * s[0]) mod 2**width`` per beat (Ascend's Muls):
    #: the combine's weighting (UBEP §1.8 of docs/spec/kernels.md).
    MULS = 5
    #: Element-wise ``vec[j] = s[0]`` (Ascend's Duplicate).
    DUP = 6
    #: Element-wise ``vec[j] = (a[j] - b[j]) mod 2**width`` (Ascend's Sub).
    SUB = 7
    #: Element-wise ``vec[j] = |a[j]|``, ``a[j]`` read as a two's-complement ``width``-bit
    #: number (Ascend's Abs; ``-2**(width-1)`` stays itself, as in two's complement).
    ABS = 8
    #: Element-wise ``vec[j] = min(a[j], s[0])``, unsigned (Ascend's Mins on the non-negative
    #: values CANN's count gives it).
    MINS = 9

#: the element-wise operations: one response beat per request beat, ``vec`` (or ``mask``)
ELEMENTWISE = (VecOp.CMP, VecOp.ADD, VecOp.MULS, VecOp.DUP, VecOp.SUB, VecOp.ABS, VecOp.MINS)


class Cond(enum.Enum, shape=3):
    """CompareScalar condition, ``a OP s`` (unsigned)."""
    EQ = 0
    NE = 1
    LT = 2
    LE = 3
    GT = 4
    GE = 5


def request_layout(*, lanes, width, max_len):
    """Layout of one request beat (see :class:`VectorUnit`)."""
    return data.StructLayout({
        "op": VecOp,
        "cond": Cond,
        "length": bits_for(max_len),
        "s": data.ArrayLayout(width, 3),
        "a": data.ArrayLayout(width, lanes),
        "b": data.ArrayLayout(width, lanes),
    })


def response_layout(*, lanes, width, max_len):
    """Layout of one response beat (see :class:`VectorUnit`)."""
    return data.StructLayout({
        "op": VecOp,
        "last": 1,
        "mask": lanes,
        "vec": data.ArrayLayout(width, lanes),
        "count": data.ArrayLayout(bits_for(max_len), 3),
        "index": bits_for(max(max_len - 1, 1)),
        "none": 1,
        "sum": width + bits_for(max_len),
    })


class VectorUnit(wiring.Component):
    """SIMD vector unit of one AIV core.

    A command on a vector of length ``L`` arrives as ``B = max(1, ceil(L/lanes))``
    request beats on ``i_stream``; beat ``n`` carries elements
    ``n*lanes .. n*lanes+lanes-1`` in ``a`` (and ``b`` for ADD). Every beat of a
    command repeats the same ``op``, ``cond``, ``length`` and ``s``; the unit
    counts beats itself and ends the command after beat ``B-1``, so commands
    may follow each other back to back. Elements of the last beat at index
    ``>= L`` are ignored.

    Responses on ``o_stream``: the element-wise operations (CMP, ADD, MULS, DUP, SUB, ABS,
    MINS: :data:`ELEMENTWISE`) give one response beat per request
    beat (``mask`` / ``vec``; ``last`` marks the final one); COUNT, FIND_FIRST
    and REDUCE_SUM give one response (``count[0..2]`` / ``index``+``none`` /
    ``sum``) after the last beat.

    **Timing.** One beat is accepted per cycle. If the first beat of a command
    is presented in cycle 0 and the beats follow without gaps and without
    backpressure, the (last) response is valid in cycle
    ``ceil(L/lanes) + LATENCY`` with ``LATENCY = 1`` (cycle ``n`` = after ``n``
    rising edges). Backpressure on ``o_stream`` stalls the whole pipeline.

    Parameters
    ----------
    lanes : int
        Elements processed per cycle (>= 1).
    width : int
        Element width in bits (1..64); elements are unsigned.
    max_len : int
        Largest vector length ``L`` a command may have (>= 1).

    Attributes
    ----------
    i_stream : In(stream.Signature(request_layout(...)))
    o_stream : Out(stream.Signature(response_layout(...)))

    Raises
    ------
    TypeError
        A parameter is not an integer.
    ValueError
        A parameter is out of range.
    """

    LATENCY = 1

    def __init__(self, *, lanes=8, width=16, max_len=256):
        super().__init__(self.signature_for(lanes=lanes, width=width, max_len=max_len))
        self.lanes, self.width, self.max_len = lanes, width, max_len
        self.pos = Signal(bits_for(max_len + lanes), name="pos")

    @staticmethod
    def signature_for(*, lanes=8, width=16, max_len=256):
        """The signature of a vector unit of these (checked) parameters, without building one;
        it keeps them (``lanes``, ``width``, ``max_len``)."""
        check_int("lanes", lanes, 1, 256)
        check_int("width", width, 1, 64)
        check_int("max_len", max_len, 1, 1 << 20)
        kw = dict(lanes=lanes, width=width, max_len=max_len)
        return ParamSignature({
            "i_stream": In(stream.Signature(request_layout(**kw))),
            "o_stream": Out(stream.Signature(response_layout(**kw))),
        }, **kw)

    @staticmethod
    def cycles(length, lanes):
        """Cycles from the first beat to a valid (last) response, without stalls."""
        return max(1, -(-length // lanes)) + VectorUnit.LATENCY

    def gtkw_traces(self):
        return [self.i_stream.valid, self.i_stream.ready, self.i_stream.payload.op,
                self.i_stream.payload.length, self.pos, self.o_stream.valid,
                self.o_stream.ready, self.o_stream.payload.last,
                self.o_stream.payload.count, self.o_stream.payload.index,
                self.o_stream.payload.none, self.o_stream.payload.sum]

    def elaborate(self, platform):
        m = Module()
        lanes, width = self.lanes, self.width
        req = self.i_stream.payload
        rsp_layout = self.o_stream.payload.shape()

        advance = Signal()  # the whole pipeline moves this cycle
        m.d.comb += advance.eq(~self.o_stream.valid | self.o_stream.ready)
        m.d.comb += self.i_stream.ready.eq(advance)
        take = Signal()
        m.d.comb += take.eq(self.i_stream.valid & advance)

        # --- stage A (combinational, from the beat being accepted) -----------
        pos = self.pos
        lane_valid = Signal(lanes)
        for j in range(lanes):
            m.d.comb += lane_valid[j].eq(pos + j < req.length)
        last = Signal()
        m.d.comb += last.eq(pos + lanes >= req.length)

        def cond_of(a, s):
            return Mux(req.cond == Cond.EQ, a == s,
                   Mux(req.cond == Cond.NE, a != s,
                   Mux(req.cond == Cond.LT, a < s,
                   Mux(req.cond == Cond.LE, a <= s,
                   Mux(req.cond == Cond.GT, a > s, a >= s)))))

        hits = []
        for k in range(3):
            h = Signal(lanes, name=f"hit{k}")
            m.d.comb += h.eq(Cat(cond_of(req.a[j], req.s[k]) for j in range(lanes)) & lane_valid)
            hits.append(h)

        def popcount(v):
            return sum((v[j] for j in range(len(v))), Const(0, bits_for(lanes)))

        first_idx = Signal(range(max(lanes, 2)))
        for j in reversed(range(lanes)):
            with m.If(hits[0][j]):
                m.d.comb += first_idx.eq(j)
        beat_sum = sum((Mux(lane_valid[j], req.a[j], 0) for j in range(lanes)),
                       Const(0, width + bits_for(lanes)))

        # --- stage B registers -------------------------------------------------
        s1_valid = Signal()
        s1_op = Signal(VecOp)
        s1_last = Signal()
        s1_mask = Signal(lanes)
        s1_vec = Signal(data.ArrayLayout(width, lanes))
        s1_count = [Signal(bits_for(lanes), name=f"s1_count{k}") for k in range(3)]
        s1_found = Signal()
        s1_index = Signal(rsp_layout["index"].shape)
        s1_sum = Signal(width + bits_for(lanes))

        with m.If(advance):
            m.d.sync += s1_valid.eq(take)
            with m.If(take):
                m.d.sync += [
                    s1_op.eq(req.op),
                    s1_last.eq(last),
                    s1_mask.eq(hits[0]),
                    s1_found.eq(hits[0].any()),
                    s1_index.eq(pos + first_idx),
                    s1_sum.eq(beat_sum),
                ]
                m.d.sync += [s1_count[k].eq(popcount(hits[k])) for k in range(3)]
                for j in range(lanes):
                    a, b, s = req.a[j], req.b[j], req.s[0]
                    neg = a[width - 1]
                    with m.Switch(req.op):
                        with m.Case(VecOp.MULS):
                            m.d.sync += s1_vec[j].eq(a * s)
                        with m.Case(VecOp.DUP):
                            m.d.sync += s1_vec[j].eq(s)
                        with m.Case(VecOp.SUB):
                            m.d.sync += s1_vec[j].eq(a - b)
                        with m.Case(VecOp.ABS):
                            m.d.sync += s1_vec[j].eq(Mux(neg, -a, a))
                        with m.Case(VecOp.MINS):
                            m.d.sync += s1_vec[j].eq(Mux(a < s, a, s))
                        with m.Default():
                            m.d.sync += s1_vec[j].eq(a + b)
                m.d.sync += pos.eq(Mux(last, 0, pos + lanes))

        # --- accumulators and output register ---------------------------------
        count_w = rsp_layout["count"].shape.elem_shape
        acc_count = [Signal(count_w, name=f"acc_count{k}") for k in range(3)]
        acc_found = Signal()
        acc_index = Signal(rsp_layout["index"].shape)
        acc_sum = Signal(rsp_layout["sum"].shape)

        tot_count = [Signal(count_w, name=f"tot_count{k}") for k in range(3)]
        tot_found = Signal()
        tot_index = Signal(rsp_layout["index"].shape)
        tot_sum = Signal(rsp_layout["sum"].shape)
        m.d.comb += [tot_count[k].eq(acc_count[k] + s1_count[k]) for k in range(3)]
        m.d.comb += [
            tot_found.eq(acc_found | s1_found),
            tot_index.eq(Mux(acc_found, acc_index, s1_index)),
            tot_sum.eq(acc_sum + s1_sum),
        ]

        elementwise = Cat(s1_op == op for op in ELEMENTWISE).any()
        out = self.o_stream.payload
        with m.If(advance):
            m.d.sync += self.o_stream.valid.eq(s1_valid & (elementwise | s1_last))
            with m.If(s1_valid):
                with m.If(s1_last):
                    m.d.sync += [acc_count[k].eq(0) for k in range(3)]
                    m.d.sync += [acc_found.eq(0), acc_index.eq(0), acc_sum.eq(0)]
                with m.Else():
                    m.d.sync += [acc_count[k].eq(tot_count[k]) for k in range(3)]
                    m.d.sync += [acc_found.eq(tot_found), acc_index.eq(tot_index),
                                 acc_sum.eq(tot_sum)]
                m.d.sync += [
                    out.op.eq(s1_op),
                    out.last.eq(s1_last),
                    out.mask.eq(s1_mask),
                    out.vec.eq(s1_vec),
                    out.none.eq(~tot_found),
                    out.index.eq(Mux(tot_found, tot_index, 0)),
                    out.sum.eq(tot_sum),
                ]
                m.d.sync += [out.count[k].eq(tot_count[k]) for k in range(3)]
        return m


VERILOG_EXPORTS = {
    "vector_unit": (VectorUnit, {"lanes": 8, "width": 16, "max_len": 256}),
}
