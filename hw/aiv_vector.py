"""The AIV core's vector sequencer: vector instructions streamed from the UBuf through its vector unit.

UBEP runs its mapper and its token-sending path on the AIV vector
instructions (UBEP §3.3 Algorithm 1, §4 "SIMD Vectorized Operation"); the
sequencer turns one such instruction into the beats of a
:class:`~epfabric.hw.vector_unit.VectorUnit` command, read from UBuf rows,
and writes the answer back to registers or UBuf rows.
"""

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2, exact_log2

from .aiv_units import MAX_UBUF_ROWS, WRITE_PORTS, Control, RegWrite, UBufRead, UBufWrite, \
    issue_layout, ubuf_row, ubuf_row_bits
from .isa import BLOCK_BYTES, INSTRUCTIONS, VALU_FNS, Cond, Opcode, VecOp
from .validate import UserError, check_choice, check_multiple, check_pow2
from .vector_unit import ELEMENTWISE, VectorUnit

__all__ = ["VECTOR_EXTRA_BITS", "MAX_LANES", "check_lanes", "vector_max_len", "VectorSequencer"]

#: Bits of the ``vector_extra`` input (cycles a vector instruction waits before its first beat)
VECTOR_EXTRA_BITS = 12
#: Widest vector unit: 128 lanes (Ascend's 256 B a repeat at 16-bit elements)
MAX_LANES = 128

#: ``{mnemonic: VecOp}`` of the vector instructions (``vcomp`` streams CMP masks).
VEC_OPS = {ins.mnemonic.upper(): ins.vop for ins in INSTRUCTIONS if ins.vop is not None}


def check_lanes(lanes, width, data_bytes):
    """Validate a vector unit of ``lanes`` elements of ``width`` bits on rows of ``data_bytes``:
    ``lanes`` a power of two up to :data:`MAX_LANES`, ``width`` 8, 16 or 32, and a beat
    (``lanes * width`` bits) a whole number of words that divides a row."""
    check_pow2("lanes", lanes, 1, MAX_LANES)
    check_choice("width", width, (8, 16, 32))
    if (lanes * width) % 32 or (data_bytes * 8) % (lanes * width):
        raise UserError(f"lanes * width must be a multiple of 32 that divides "
                        f"data_bytes * 8, not lanes={lanes}, width={width}, "
                        f"data_bytes={data_bytes}")


def vector_max_len(ubuf_rows, width):
    """Longest vector (elements) of a UBuf of ``ubuf_rows`` 512 B rows at ``width`` bits."""
    return ubuf_rows * (BLOCK_BYTES * 8 // width)


class VectorSequencer(wiring.Component):
    """Vector instructions of an AIV core: UBuf rows through the vector unit and back.

    A vector instruction (``vcount vcmp vfind vadd vsum vmuls vcomp valu``) on
    operand rows ``R[rs1]``/``R[rs3]`` (UBuf addresses) of length ``R[rs2]``
    (clipped to ``max_len``; pivots/scalars are the low ``width`` bits of
    ``R[rs3]``, ``R[rs3 + 1]``, ``R[rs3 + 2]``) enters the core's ``VEC``
    state (:class:`~epfabric.hw.aiv_units.Control`), waits ``vector_extra``
    cycles, then streams its ``max(1, ceil(L/lanes))`` beats into the
    :class:`~epfabric.hw.vector_unit.VectorUnit`, one a cycle, beat ``n``
    from UBuf row ``n // (4096 / (lanes * width))``. It leaves ``VEC`` with
    the answer: ``vcount`` writes ``R[rd]``, ``R[rd + 1]``, ``R[rd + 2]``;
    ``vfind`` ``R[rd]`` (``0xFFFFFFFF`` if none); ``vsum`` ``R[rd]``;
    ``vcmp``/``vadd``/``vmuls``/``valu`` write one beat a cycle to the rows from
    ``R[rd]`` on (a CMP mask as one 0/1 element a lane). Hence the core's
    :meth:`~epfabric.hw.aiv_core.AIVCore.vector_cycles`.

    ``vector_extra`` is the per-instruction cost of issuing a vector
    operation and draining the vector pipe after it (an Ascend C vector op is
    followed by ``PipeBarrier<PIPE_V>`` when the next one reads its result,
    as in CANN's open MoE dispatch kernel), separate from its width.

    **vcomp** (a compress, Ascend's GatherMask) streams CompareScalar masks
    like ``vcmp``; the write-back packs each beat's mask instead of storing
    it: one matching index per cycle, lowest lane first (a priority encoder
    over the beat's remaining matches), written as a 32-bit word to the next
    word of the output (word ``m`` at row ``(R[rd] >> 9) + m // 128``, word
    ``m % 128``; words beyond ``data_bytes`` are dropped like any UBuf write
    there). A beat with ``h > 1`` matches holds the vector unit's output for
    ``h - 1`` extra cycles (backpressure stalls its pipeline):
    :meth:`~epfabric.hw.aiv_core.AIVCore.vcomp_cycles`. At the end ``R[rd]``
    = the number of matches (dropped words included).

    Parameters
    ----------
    ubuf_rows : int
        UBuf rows (power of two, 1..:data:`~epfabric.hw.aiv_units.MAX_UBUF_ROWS`).
    data_bytes : int
        Modelled bytes of a row (multiple of 32, 32..512).
    lanes : int
        Vector-unit lanes (power of two, 1..:data:`MAX_LANES`).
    width : int
        Element width in bits: 8, 16 or 32 (``lanes * width`` a multiple of 32 that
        divides ``data_bytes * 8``).

    Attributes
    ----------
    issue : In(issue_layout)
        The instruction and its operands.
    ctl : Out(Control())
        Handshake with the core's FSM; the wait state is ``VEC``.
    reg_w : Out(RegWrite()).array(WRITE_PORTS)
        The answer's registers.
    ubuf_r : Out(UBufRead(...)).array(2)
        The rows of operands ``a`` and ``b``.
    ubuf_w : Out(UBufWrite(...))
        Result rows.
    vector_extra : In(VECTOR_EXTRA_BITS)
        Cycles every vector instruction waits before its first beat.

    Raises
    ------
    TypeError, ValueError
        A parameter has the wrong type or is out of range (the message names it).
    """

    def __init__(self, *, ubuf_rows=4, data_bytes=64, lanes=8, width=16):
        check_pow2("ubuf_rows", ubuf_rows, 1, MAX_UBUF_ROWS)
        check_multiple("data_bytes", data_bytes, 32, 32, 512)
        check_lanes(lanes, width, data_bytes)
        self.ubuf_rows, self.data_bytes, self.lanes, self.width = ubuf_rows, data_bytes, lanes, width
        self.max_len = vector_max_len(ubuf_rows, width)
        ubuf = dict(rows=ubuf_rows, data_bytes=data_bytes)
        super().__init__({
            "issue": In(issue_layout),
            "ctl": Out(Control()),
            "reg_w": Out(RegWrite()).array(WRITE_PORTS),
            "ubuf_r": Out(UBufRead(**ubuf)).array(2),
            "ubuf_w": Out(UBufWrite(**ubuf)),
            "vector_extra": In(VECTOR_EXTRA_BITS),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.vu = vu = VectorUnit(lanes=self.lanes, width=self.width, max_len=self.max_len)
        insn, ctl, uw = self.issue, self.ctl, self.ubuf_w
        ua, ub = self.ubuf_r
        lanes, width = self.lanes, self.width
        nwords = self.data_bytes // 4
        slot_bits = lanes * width
        slot_words = slot_bits // 32
        slots_mod = self.data_bytes * 8 // slot_bits          # modelled beats per row
        slots_full = BLOCK_BYTES * 8 // slot_bits              # beats per 512 B row
        row_w = ubuf_row_bits(self.ubuf_rows)

        def write_reg(idx, value, port=0):
            w = self.reg_w[port]
            m.d.comb += [w.en.eq(1), w.addr.eq(idx), w.data.eq(value)]

        def leave():
            m.d.comb += [ctl.leave.eq(1), ctl.advance.eq(1)]

        # --- the instruction in flight ---------------------------------------------------
        v_op = Signal(VecOp)
        v_cond = Signal(Cond)
        v_len = Signal(range(self.max_len + 1))
        v_wait = Signal(VECTOR_EXTRA_BITS, name="v_wait")   # vector_extra cycles still to wait
        v_s = [Signal(width, name=f"v_s{k}") for k in range(3)]
        v_arow, v_brow, v_drow = (Signal(row_w, name=n) for n in ("v_arow", "v_brow", "v_drow"))
        v_rd = Signal(4)
        beat_w = ceil_log2(self.max_len // lanes + 2)
        v_beats = Signal(beat_w)
        v_in = Signal(beat_w)
        v_out = Signal(beat_w)
        v_comp = Signal()                       # vcomp: pack the CMP masks into indices
        v_done = Signal(lanes)                  # matches of this beat already written
        v_cnt = Signal(range(self.max_len + 1))  # indices written so far

        # --- RUN: latch the instruction, enter VEC ------------------------------------------
        with m.If(ctl.run):
            with m.Switch(insn.op):
                with m.Case(*(Opcode[n] for n in VEC_OPS)):
                    m.d.comb += [ctl.hold.eq(1), ctl.enter.eq(1)]
                    m.d.sync += [
                        v_cond.eq(insn.cond), v_rd.eq(insn.rd),
                        v_arow.eq(ubuf_row(insn.a, self.ubuf_rows)),
                        v_brow.eq(ubuf_row(insn.c, self.ubuf_rows)),
                        v_drow.eq(ubuf_row(insn.d, self.ubuf_rows)),
                        v_in.eq(0), v_out.eq(0),
                        v_comp.eq(insn.op == Opcode.VCOMP), v_done.eq(0), v_cnt.eq(0),
                        v_wait.eq(self.vector_extra),
                    ]
                    clipped = Mux(insn.b > self.max_len, self.max_len, insn.b)
                    m.d.sync += v_len.eq(clipped)
                    nb = (clipped + lanes - 1) >> exact_log2(lanes)
                    m.d.sync += v_beats.eq(Mux(nb == 0, 1, nb))
                    m.d.sync += [v_s[k].eq(insn.s[k][:width]) for k in range(3)]
                    with m.Switch(insn.op):
                        for n, vop in VEC_OPS.items():
                            with m.Case(Opcode[n]):
                                if n == "VALU":          # the operation is its immediate's
                                    with m.Switch(insn.imm[:2]):
                                        for fn, op in enumerate(VALU_FNS):
                                            with m.Case(fn):
                                                m.d.sync += v_op.eq(op)
                                else:
                                    m.d.sync += v_op.eq(vop)

        # --- VEC: beats in from the UBuf -----------------------------------------------------
        with m.If(ctl.active):
            vin = vu.i_stream
            pa = vin.payload
            with m.If(v_wait != 0):
                m.d.sync += v_wait.eq(v_wait - 1)
            m.d.comb += [
                vin.valid.eq((v_in < v_beats) & (v_wait == 0)),
                pa.op.eq(v_op), pa.cond.eq(v_cond), pa.length.eq(v_len),
                vu.o_stream.ready.eq(1),
            ]
            m.d.comb += [pa.s[k].eq(v_s[k]) for k in range(3)]
            in_slot = v_in % slots_full
            in_row = v_in // slots_full
            m.d.comb += [ua.addr.eq(v_arow + in_row), ub.addr.eq(v_brow + in_row)]
            with m.If(in_slot < slots_mod):
                sel = in_slot[:max(1, ceil_log2(slots_mod))] if slots_mod > 1 else 0
                m.d.comb += [pa.a.eq(ua.data.word_select(sel, slot_bits)),
                             pa.b.eq(ub.data.word_select(sel, slot_bits))]
            with m.If(vin.valid & vin.ready):
                m.d.sync += v_in.eq(v_in + 1)

            # --- VEC: answers out, to registers or the UBuf ------------------------------
            out = vu.o_stream.payload
            # vcomp: the lowest remaining match of the beat, one per cycle
            rem = Signal(lanes, name="comp_rem")
            low = Signal(lanes, name="comp_low")      # its lane, one-hot
            more = Signal(name="comp_more")           # more matches after it
            m.d.comb += [rem.eq(out.mask & ~v_done), low.eq(rem & (~rem + 1)),
                         more.eq((rem & ~low).any())]
            lane_bits = exact_log2(lanes)
            lane = Cat(Cat(low[j] for j in range(lanes) if j >> bit & 1).any()
                       for bit in range(lane_bits))
            index = Signal(32, name="comp_index")     # element index of that match
            m.d.comb += index.eq(Cat(lane, v_out) if lane_bits else v_out)
            with m.If(vu.o_stream.valid & v_comp):
                m.d.comb += vu.o_stream.ready.eq(~more)
                with m.If(rem.any()):
                    word = v_cnt[:7]
                    m.d.comb += [uw.addr.eq(v_drow + (v_cnt >> 7)),
                                 uw.data.eq(index.replicate(nwords))]
                    with m.If(word < nwords):
                        m.d.comb += uw.en.eq(Const(1, nwords) << word[:ceil_log2(nwords)])
                    m.d.sync += v_cnt.eq(v_cnt + 1)
                with m.If(more):
                    m.d.sync += v_done.eq(v_done | low)
                with m.Else():
                    m.d.sync += [v_done.eq(0), v_out.eq(v_out + 1)]
                    with m.If(out.last):
                        write_reg(v_rd, v_cnt + rem.any())
                        leave()
            with m.Elif(vu.o_stream.valid):
                with m.Switch(v_op):
                    with m.Case(VecOp.COUNT):
                        for k in range(3):
                            write_reg((v_rd + k)[:4], out.count[k], port=k)
                    with m.Case(VecOp.FIND_FIRST):
                        write_reg(v_rd, Mux(out.none, 0xFFFFFFFF, out.index))
                    with m.Case(VecOp.REDUCE_SUM):
                        write_reg(v_rd, out.sum[:32])
                    with m.Case(*ELEMENTWISE):
                        o_slot = v_out % slots_full
                        sel = o_slot[:max(1, ceil_log2(slots_mod))] if slots_mod > 1 else 0
                        elems = Mux(v_op == VecOp.CMP,
                                    Cat(Cat(out.mask[j], Const(0, width - 1)) for j in range(lanes)),
                                    out.vec.as_value())
                        m.d.comb += [uw.addr.eq(v_drow + v_out // slots_full),
                                     uw.data.eq(elems.replicate(slots_mod))]
                        with m.If(o_slot < slots_mod):
                            m.d.comb += uw.en.eq(Const((1 << slot_words) - 1, nwords)
                                                 << (sel * slot_words))
                        m.d.sync += v_out.eq(v_out + 1)
                    with m.Default():
                        pass
                vector_out = Cat(v_op == op for op in ELEMENTWISE).any()
                with m.If(~vector_out | out.last):
                    leave()
        return m


VERILOG_EXPORTS = {
    "aiv_vector": (VectorSequencer, {"ubuf_rows": 2, "data_bytes": 32, "lanes": 4, "width": 16}),
}
