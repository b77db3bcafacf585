"""The AIV core's floating-point sequencer: fp32/bf16 vector instructions through an FpUnit.

A combine kernel on Ascend sums a token's expert rows per element in fp32: it casts
each bf16 row to fp32, multiplies it by the token's top-k weight (``Muls``), adds it
into an fp32 sum (``Add``) in a fixed order, and casts the sum back to bf16
(``CAST_RINT``; docs/spec/kernels.md §1.4). The sequencer turns one such vector
instruction (``vfcastf vfcastb vfadd vfmuls vfaxpy``, :mod:`epfabric.hw.isa`) into
beats of a :class:`~epfabric.hw.fp_unit.FpUnit` command read from UBuf rows and
writes the results back to UBuf rows, as :class:`~epfabric.hw.aiv_vector.VectorSequencer`
does for the integer vector unit.
"""

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2, exact_log2

from .aiv_units import MAX_UBUF_ROWS, Control, UBufRead, UBufWrite, issue_layout, ubuf_row, \
    ubuf_row_bits
from .aiv_vector import VECTOR_EXTRA_BITS
from .fp_unit import OP_FORMS, REPEAT_ELEMENTS, FpOp, FpUnit, check_unit_params
from .isa import BLOCK_BYTES, INSTRUCTIONS, Opcode
from .validate import UserError, check_bool, check_int, check_multiple, check_pow2

__all__ = ["FP_OPS", "fp_max_len", "check_fp_params", "fp_vector_cycles", "FpSequencer"]

#: ``{mnemonic: FpOp}`` of the floating-point vector instructions.
FP_OPS = {ins.mnemonic.upper(): ins.fop for ins in INSTRUCTIONS if ins.fop is not None}


def fp_max_len(ubuf_rows):
    """Longest floating-point vector: the fp32 elements of a UBuf of ``ubuf_rows`` rows."""
    return ubuf_rows * (BLOCK_BYTES // 4)


def check_fp_params(*, lanes, latency, repeat_cycles, fused, data_bytes):
    """A core's ``fp_lanes``, ``fp_latency``, ``fp_repeat_cycles`` and ``fp_fused`` checked for
    rows of ``data_bytes``: the :class:`~epfabric.hw.fp_unit.FpUnit` parameters, ``None``
    resolved (:func:`~epfabric.hw.fp_unit.check_unit_params`), as a dict; ``UserError`` or
    ``UserTypeError`` naming the bad one.

    ``lanes`` is at least 2 (a beat of bf16 elements is whole 32-bit words) and a beat of
    fp32 elements (``lanes * 32`` bits) divides a row's modelled bits. ``repeat_cycles`` is at
    most ``(latency + 1) * (64 // lanes) + 1``: then the unit's rate credit is full again when
    the next instruction's first beat comes (see :class:`FpSequencer`), so every instruction
    costs :func:`fp_vector_cycles` whatever ran before it.
    """
    check_pow2("fp_lanes", lanes, 2, REPEAT_ELEMENTS)
    if (data_bytes * 8) % (lanes * 32):
        raise UserError(f"fp_lanes * 32 must divide data_bytes * 8, not fp_lanes={lanes}, "
                        f"data_bytes={data_bytes}")
    check_bool("fp_fused", fused)
    if latency is not None:
        check_int("fp_latency", latency, 1, 64)
    per_repeat = REPEAT_ELEMENTS // lanes
    if repeat_cycles is not None:
        check_int("fp_repeat_cycles", repeat_cycles, per_repeat, 4096)
    params = check_unit_params(lanes=lanes, latency=latency, repeat_cycles=repeat_cycles,
                               fused=fused)
    most = (params["latency"] + 1) * per_repeat + 1
    if params["repeat_cycles"] > most:
        raise UserError(f"fp_repeat_cycles must be at most (fp_latency + 1) * (64 // fp_lanes) "
                        f"+ 1 = {most}, not {params['repeat_cycles']}")
    return params


def fp_vector_cycles(length, lanes, latency, repeat_cycles=None, extra=0):
    """Cycles of a floating-point vector instruction of ``length`` elements on a unit of
    ``lanes`` lanes, ``latency`` cycles and ``repeat_cycles`` a 256 B repeat (``None``: one beat
    a cycle), ``extra`` the ``vector_extra`` input: ``(B - 1) * repeat_cycles // (64 // lanes)
    + latency + 2 + extra`` with ``B = max(1, ceil(length / lanes))`` beats."""
    per_repeat = REPEAT_ELEMENTS // lanes
    repeat_cycles = per_repeat if repeat_cycles is None else repeat_cycles
    beats = max(1, -(-length // lanes))
    return (beats - 1) * repeat_cycles // per_repeat + latency + 2 + extra


class FpSequencer(wiring.Component):
    """Floating-point vector instructions of an AIV core: UBuf rows through an FpUnit and back.

    An instruction (``F`` an fp32 and ``H`` a bf16 vector, laid out in UBuf rows as the
    module docstring of :mod:`epfabric.hw.isa` says) of length ``L = R[rs2]`` (clipped to
    :func:`fp_max_len`) enters the core's ``FVEC`` state
    (:class:`~epfabric.hw.aiv_units.Control`), waits ``vector_extra`` cycles, then streams
    its ``B = max(1, ceil(L/lanes))`` beats into the :class:`~epfabric.hw.fp_unit.FpUnit`,
    beat ``n`` holding elements ``n*lanes ..`` of operand ``a`` (``R[rs1]``) and ``b``, and
    the scalar ``R[rs3]``. Operand ``b`` is the vector at ``R[rs3]`` for an operation
    without a scalar (``vfadd``) and the destination ``R[rd]`` for one with (``vfaxpy``: the
    accumulator). Each result beat is written, as it leaves the unit, to the destination
    rows: only the words holding elements below ``L``. The instruction leaves ``FVEC`` with
    its last result beat. A destination may be a source when every element is read before
    it is overwritten: the same vector (``vfadd``, ``vfmuls``, ``vfaxpy`` in place) or a
    ``vfcastb`` onto its source; a ``vfcastf`` onto its source overwrites bf16 elements it
    has not read yet.

    **Cycles.** The unit accepts beat ``n`` ``n * repeat_cycles // (64 // lanes)`` cycles
    after the first and returns each ``latency`` cycles later, so an instruction takes
    :func:`fp_vector_cycles`: the cycle it is issued in, ``vector_extra``, the beats, the
    latency and the cycle the core returns to ``RUN`` in. That holds only if the unit's
    rate credit is full when the first beat comes. It is: after a beat the credit is at
    least ``64 // lanes`` and grows by that every cycle, and the next instruction's first
    beat comes at least ``latency + 2`` cycles after the last one (its result, the return
    to ``RUN``, the issue), by which time the credit has grown by ``(latency + 1) * (64 //
    lanes)`` and reached its cap ``repeat_cycles + 64 // lanes - 1``
    (:func:`check_fp_params` bounds ``repeat_cycles`` so).

    Parameters
    ----------
    ubuf_rows : int
        UBuf rows (power of two, 1..:data:`~epfabric.hw.aiv_units.MAX_UBUF_ROWS`).
    data_bytes : int
        Modelled bytes of a row (multiple of 32, 32..512).
    lanes, latency, repeat_cycles, fused
        The :class:`~epfabric.hw.fp_unit.FpUnit`'s parameters (:func:`check_fp_params`).

    Attributes
    ----------
    issue : In(issue_layout)
        The instruction and its operands.
    ctl : Out(Control())
        Handshake with the core's FSM; the wait state is ``FVEC``.
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

    def __init__(self, *, ubuf_rows=4, data_bytes=64, lanes=4, latency=None, repeat_cycles=None,
                 fused=False):
        check_pow2("ubuf_rows", ubuf_rows, 1, MAX_UBUF_ROWS)
        check_multiple("data_bytes", data_bytes, 32, 32, 512)
        self.unit = check_fp_params(lanes=lanes, latency=latency, repeat_cycles=repeat_cycles,
                                    fused=fused, data_bytes=data_bytes)
        self.ubuf_rows, self.data_bytes, self.lanes = ubuf_rows, data_bytes, lanes
        self.max_len = fp_max_len(ubuf_rows)
        ubuf = dict(rows=ubuf_rows, data_bytes=data_bytes)
        super().__init__({
            "issue": In(issue_layout),
            "ctl": Out(Control()),
            "ubuf_r": Out(UBufRead(**ubuf)).array(2),
            "ubuf_w": Out(UBufWrite(**ubuf)),
            "vector_extra": In(VECTOR_EXTRA_BITS),
        })

    def cycles(self, length, extra=0):
        """Cycles of one instruction of ``length`` elements (:func:`fp_vector_cycles`)."""
        return fp_vector_cycles(min(length, self.max_len), self.lanes, self.unit["latency"],
                                self.unit["repeat_cycles"], extra)

    def _place(self, beat, width):
        """Where beat ``beat`` of a vector of ``width``-bit elements is: its row after the
        vector's first, its slot among the row's modelled slots, and whether it is modelled."""
        bits = self.lanes * width
        full = BLOCK_BYTES * 8 // bits                      # beats a 512 B row holds
        modelled = self.data_bytes * 8 // bits              # of which the row models
        slot = beat[:exact_log2(full)] if full > 1 else Const(0, 1)
        sel = slot[:ceil_log2(modelled)] if modelled > 1 else Const(0, 1)
        return beat >> exact_log2(full), sel, slot < modelled

    def _read(self, m, port, row, beat, bf16, name):
        """Drive read ``port`` for beat ``beat`` of the vector at ``row``; its ``lanes`` elements
        (32 bits a lane, a bf16 element in the low half), from bf16 or fp32 elements."""
        lanes = Signal(32 * self.lanes, name=name)
        offsets, values = [], []
        for width in (16, 32):
            offset, sel, modelled = self._place(beat, width)
            chunk = port.data.word_select(sel, self.lanes * width)
            value = Cat(Cat(chunk[j * width:(j + 1) * width], Const(0, 32 - width))
                        for j in range(self.lanes))
            offsets.append(offset)
            values.append(Mux(modelled, value, 0))
        m.d.comb += [port.addr.eq(row + Mux(bf16, *offsets)), lanes.eq(Mux(bf16, *values))]
        return lanes

    def _write(self, m, row, beat, bf16, y, length):
        """Write result beat ``beat`` (lane values ``y``) of the vector at ``row``: the words
        that hold elements below ``length``, as bf16 or fp32 elements."""
        uw, lanes, nwords = self.ubuf_w, self.lanes, self.data_bytes // 4
        index = Cat(Const(0, exact_log2(lanes)), beat)        # element of lane 0
        valid = Signal(lanes, name="w_valid")
        m.d.comb += valid.eq(Cat(index + j < length for j in range(lanes)))
        kept = [Mux(valid[j], y[j], 0) for j in range(lanes)]
        addrs, datas, ens = [], [], []
        for width, words in ((16, valid[::2]), (32, valid)):
            offset, sel, modelled = self._place(beat, width)
            elems = Cat(k[:width] for k in kept)
            addrs.append(row + offset)
            datas.append(elems.replicate(self.data_bytes * 8 // len(elems)))
            ens.append(Mux(modelled, (words << (sel * len(words)))[:nwords], 0))
        m.d.comb += [uw.addr.eq(Mux(bf16, *addrs)), uw.data.eq(Mux(bf16, *datas)),
                     uw.en.eq(Mux(bf16, *ens))]

    def elaborate(self, platform):
        m = Module()
        m.submodules.fpu = fpu = FpUnit(**self.unit)
        insn, ctl = self.issue, self.ctl
        rows = self.ubuf_rows
        row_w = ubuf_row_bits(rows)

        # --- the instruction in flight ---------------------------------------------------
        f_op = Signal(FpOp)
        f_len = Signal(range(self.max_len + 1))
        f_wait = Signal(VECTOR_EXTRA_BITS)          # vector_extra cycles still to wait
        f_s = Signal(32)
        f_arow, f_brow, f_drow = (Signal(row_w, name=n) for n in ("f_arow", "f_brow", "f_drow"))
        f_a16, f_b16, f_o16 = Signal(), Signal(), Signal()    # a, b, the result are bf16
        beat_w = ceil_log2(self.max_len // self.lanes + 2)
        f_beats, f_in, f_out = (Signal(beat_w, name=n) for n in ("f_beats", "f_in", "f_out"))

        # --- RUN: latch the instruction, enter FVEC ------------------------------------------
        with m.If(ctl.run):
            with m.Switch(insn.op):
                with m.Case(*(Opcode[n] for n in FP_OPS)):
                    m.d.comb += [ctl.hold.eq(1), ctl.enter.eq(1)]
                    clipped = Mux(insn.b > self.max_len, self.max_len, insn.b)
                    nb = (clipped + self.lanes - 1) >> exact_log2(self.lanes)
                    m.d.sync += [
                        f_len.eq(clipped), f_beats.eq(Mux(nb == 0, 1, nb)),
                        f_in.eq(0), f_out.eq(0), f_wait.eq(self.vector_extra), f_s.eq(insn.c),
                        f_arow.eq(ubuf_row(insn.a, rows)), f_drow.eq(ubuf_row(insn.d, rows)),
                    ]
                    with m.Switch(insn.op):
                        for n, fop in FP_OPS.items():
                            form = OP_FORMS[fop]
                            with m.Case(Opcode[n]):
                                # with a scalar in R[rs3], b is the destination (the accumulator)
                                b_row = insn.d if form.use_s else insn.c
                                m.d.sync += [f_op.eq(fop), f_a16.eq(form.a_bf16),
                                             f_b16.eq(form.b_bf16), f_o16.eq(form.out_bf16),
                                             f_brow.eq(ubuf_row(b_row, rows))]

        # --- FVEC: beats in from the UBuf, results out to it ---------------------------------
        with m.If(ctl.active):
            fin, fout = fpu.i_stream, fpu.o_stream
            with m.If(f_wait != 0):
                m.d.sync += f_wait.eq(f_wait - 1)
            m.d.comb += [
                fin.valid.eq((f_in < f_beats) & (f_wait == 0)),
                fin.payload.op.eq(f_op), fin.payload.s.eq(f_s),
                fin.payload.last.eq(f_in == f_beats - 1),
                fin.payload.a.eq(self._read(m, self.ubuf_r[0], f_arow, f_in, f_a16, "a_lanes")),
                fin.payload.b.eq(self._read(m, self.ubuf_r[1], f_brow, f_in, f_b16, "b_lanes")),
                fout.ready.eq(1),
            ]
            with m.If(fin.valid & fin.ready):
                m.d.sync += f_in.eq(f_in + 1)
            with m.If(fout.valid):
                self._write(m, f_drow, f_out, f_o16, fout.payload.y, f_len)
                m.d.sync += f_out.eq(f_out + 1)
                with m.If(fout.payload.last):
                    m.d.comb += [ctl.leave.eq(1), ctl.advance.eq(1)]
        return m


VERILOG_EXPORTS = {
    "aiv_fp": (FpSequencer, {"ubuf_rows": 2, "data_bytes": 32, "lanes": 2, "latency": None,
                             "repeat_cycles": None, "fused": False}),
}
