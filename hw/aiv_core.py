"""AIV core: an in-order core running a kernel program (docs/spec/design.md block 5).

UBEP's dispatch and combine kernels run on the AIV vector cores of each die
(UBEP §3.3 Algorithm 1, §4): scalar bookkeeping, VectorCount-based mapping,
512 B DataBlock stores through the UB fabric and Data-as-Flag polling. This
core executes such programs, encoded in the ISA of :mod:`epfabric.hw.isa`,
whose table also generates this core's decoder (:class:`~epfabric.hw.decoder.Decoder`).
"""

from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal, unsigned
from amaranth.lib import data, enum, memory, stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import bits_for, ceil_log2, exact_log2

from .decoder import Decoder
from .switch import popcount
from .isa import (BLOCK_BYTES, INC_COUNTERS, INSTRUCTIONS, NUM_REGS, RANK_BITS, Cond, Csr, Opcode,
                  VecOp, insn_layout)
from .validate import UserError, check_choice, check_int, check_multiple, check_pow2
from .vector_unit import VectorUnit

__all__ = ["MAX_UBUF_ROWS", "MAX_LANES", "MemOp", "ep_mask_bits", "mem_req_layout", "mem_rsp_layout", "trace_layout", "AIVCore", "MAX_WINDOW",
           "VECTOR_EXTRA_BITS", "READ_EXTRA_BITS", "ACK_COUNT_BITS", "INC_POSTS", "inc_post_layout", "INC_WAIT_ADDR", "BAR_WAIT_ADDR"]

#: Largest store window (``max_outstanding``) of a core.
MAX_WINDOW = 4095
#: Bits of the ``vector_extra`` input (cycles a vector instruction waits before its first beat)
VECTOR_EXTRA_BITS = 12
#: Bits of the ``read_extra`` input (cycles a read request waits before it is issued)
READ_EXTRA_BITS = 12
#: Most rows (512 B each) of a core's Unified Buffer.
MAX_UBUF_ROWS = 1024
#: Widest vector unit: 128 lanes (Ascend's 256 B a repeat at 16-bit elements)
MAX_LANES = 128
#: Bits of an ack answer's count (``data[0:ACK_COUNT_BITS]``: stores acknowledged at once).
ACK_COUNT_BITS = 16


class MemOp(enum.Enum, shape=3):
    """Operation of a core memory request (``mem_req.payload.op``)."""
    READ_WORD = 0    #: answer: the 32-bit word in ``data[0:32]``
    WRITE_WORD = 1   #: ``data[0:32]`` to the word; answer: an ack (posted store)
    READ_BLOCK = 2   #: answer: the modelled bytes of the DataBlock in ``data``
    WRITE_BLOCK = 3  #: ``data`` to the DataBlock (one 512 B atomic write); answer: an ack
    FETCH_ADD = 4    #: word += ``data[0:32]`` atomically; answer: the old word
    WRITE_MCAST = 5  #: ``data`` to the DataBlock on every die of ``mask`` (``stbm``); an ack each
    WRITE_RED = 6    #: ``data`` contributed to the DataBlock's reduction group (``stbr``); no answer


def ep_mask_bits(ranks):
    """Bits of a ``stbm``/``stbr`` die set on a machine of ``ranks`` dies: 32 (``R[rs2]``) up
    to 32 dies, 64 (``R[rs3] << 32 | R[rs2]``) up to 64."""
    return 32 if ranks <= 32 else 64


def mem_req_layout(data_bytes, mask=False):
    """Memory request: ``op``, byte ``addr``, ``data`` (and, with ``mask``, the die set of a
    ``stbm``/``stbr``: ``True`` 32 bits, or a width, :func:`ep_mask_bits`).

    ``addr`` is the 32-bit byte address as the core computed it; the system splits it into
    rank, block and word by its ``rank_bits`` (:func:`epfabric.hw.isa.address_layout`).
    """
    return data.StructLayout({"op": MemOp, "addr": unsigned(32),
                              "data": unsigned(data_bytes * 8),
                              **({"mask": unsigned(32 if mask is True else mask)} if mask else {})})


def mem_rsp_layout(data_bytes):
    """Memory answer: the request's ``op`` and ``data`` (word in bits 0..31)."""
    return data.StructLayout({"op": MemOp, "data": unsigned(data_bytes * 8)})


#: ``inc_post.payload.op`` of each posting instruction (the NIC's ``PostOp`` values).
INC_POSTS = {"incag": 0, "incrs": 1, "incbar": 2, "inccnt": 3}

#: A core's post to its die's network interface: operation and two operands (R[rs1], R[rs2]).
inc_post_layout = data.StructLayout({"op": 2, "a": 32, "b": 32})

#: ``wait_addr`` of a core stalled in ``incwait`` on counter ``ctr``: ``INC_WAIT_ADDR | ctr``
#: (rank 255, block 0x7fff: not a memory address any kernel uses).
INC_WAIT_ADDR = 0xFFFFFF00

#: ``wait_addr`` of a core waiting at its die's barrier (``bar``): not a memory address
#: any kernel uses (rank 255, block 0x7fff, word 0x40 and up are beyond a 512 B block)
BAR_WAIT_ADDR = 0xFFFFFE00

#: One MARK event.
trace_layout = data.StructLayout({"core": 8, "cycle": 32, "event": 16})


class _State(enum.Enum, shape=3):
    IDLE = 0   # reset, waiting for ``start``
    RUN = 1    # executing the instruction at ``pc``
    MEM = 2    # waiting for the answer to a load / poll / fetch-add / block load
    VEC = 3    # streaming a vector instruction through the vector unit
    HALT = 4   # HALT executed or fault
    CUBE = 5   # waiting for the die's cube unit to finish this core's row


class AIVCore(wiring.Component):
    """In-order AIV core with a vector unit, a UBuf and a memory request port.

    Executes the ISA of :mod:`epfabric.hw.isa` from its own instruction
    memory (written by the host through ``imem_w``) after a ``start`` pulse,
    beginning at ``pc = 0``. There is no free memory access: every load,
    store, poll, fetch-add and DataBlock transfer is a request on ``mem_req``
    and (except posted stores) waits for its answer on ``mem_rsp``. The
    system decides from ``addr.rank`` whether a request goes to the local HBM
    slice or through the fabric to a remote rank's atomic UB port.

    **Cycle costs** (one instruction at a time, no overlap; *L* = cycles from
    the cycle a request is accepted on ``mem_req`` to the cycle its answer is
    valid on ``mem_rsp``, which the core always accepts at once):

    =========================================  ====================================
    instruction                                cycles
    =========================================  ====================================
    ALU, ``lui``, branches (taken or not),     1
    ``jal``, ``jalr``, ``csrr``, ``ulw``,
    ``usw``
    ``sw``, ``stb`` (posted)                   1 (+ stall while ``mem_req`` is not
                                               ready or ``max_outstanding`` stores
                                               are unacknowledged; an ``stb`` also
                                               while ``store_window`` are)
    ``lw``, ``ldb``, ``fadd``                  1 + *R* + *L*; *R* = ``read_extra``
                                               (0 unconnected)
    ``ldbc``                                   1 + *L* (a copy's next block: its
                                               start was paid)
    ``poll``                                   (1 + *R* + *L*) per read; reads
                                               repeat back to back until the
                                               condition holds
    ``fence``                                  1 once no store is outstanding
                                               (an ack is counted the cycle after
                                               it arrives)
    ``mark``                                   1 (+ stall while ``trace`` is not
                                               ready)
    vector (``vcount vcmp vfind vadd vsum      ``VectorUnit.cycles(L, lanes) + 2 + X``
    vmuls``)                                   = ``max(1, ceil(L/lanes)) + 3 + X``
                                               for vector length *L*; *X* =
                                               ``vector_extra`` (0 unconnected)
    ``vcomp``                                  the same + ``sum(max(0, h_n - 1))``
                                               over the beats, *h_n* = matches
                                               among elements ``n*lanes ..
                                               n*lanes + lanes - 1``
                                               (:meth:`vcomp_cycles`)
    ``bar``                                    1 once ``bar_go`` is high (stalls,
                                               ``bar_req`` high, until then)
    ``halt``                                   1, then the core stops
    ``incag incrs incbar inccnt`` (``inc``)    1 (+ stall while ``inc_post`` is not
                                               ready)
    ``incwait`` (``inc``)                      1 once the counter reaches the
                                               threshold (stalls until then)
    ``cube`` (``inc``)                         1 + the cube unit's answer: the
                                               core raises ``cube_req`` from the
                                               next cycle and continues the
                                               cycle after ``cube_done``
    =========================================  ====================================

    A request that is not accepted at once adds its wait cycles. Vector
    lengths are clipped to ``max_len = ubuf_rows * 4096 // width``; vector
    pivots/scalars are the low ``width`` bits of their registers. UBuf rows
    are ``(addr >> 9) % ubuf_rows``; a branch target is taken modulo
    ``imem_depth``. Executing an unassigned opcode halts the core with
    ``fault`` set.

    **vcomp** (a compress, Ascend's GatherMask) streams CompareScalar masks
    through the vector unit like ``vcmp``; the write-back packs each beat's
    mask instead of storing it: one matching index per cycle, lowest lane
    first (a priority encoder over the beat's remaining matches), written as
    a 32-bit word to the next word of the output (word ``m`` at row
    ``(R[rd] >> 9) + m // 128``, word ``m % 128``; words beyond
    ``data_bytes`` are dropped like any UBuf write there). A beat with
    ``h > 1`` matches holds the vector unit's output for ``h - 1`` extra
    cycles (backpressure stalls its pipeline), hence the table's cost. At the
    end ``R[rd]`` = the number of matches (dropped words included).

    Parameters
    ----------
    core_id : int or None
        This core's id (0..255), reported in MARK events and by ``csrr core_id``;
        ``None`` adds an input port ``core_id_in`` instead, so one Verilog
        module serves every core of a die (:class:`~epfabric.hw.die.Die`'s
        ``core_module``).
    imem_depth : int
        Instruction words (power of two, 2..65536).
    ubuf_rows : int
        UBuf rows of one 512 B DataBlock each (power of two, 1..1024).
    data_bytes : int
        Modelled bytes of each block (multiple of 32, 32..512); never changes
        a cycle count.
    lanes : int
        Vector-unit lanes (power of two, 1..128): elements a beat. 128 lanes of 16 bits are
        Ascend's 256 B a repeat (a preset's ``vector_lanes``).
    width : int
        Vector element width in bits: 8, 16 or 32.
    max_outstanding : int
        Posted stores that may await their ack before a store stalls
        (1..:data:`MAX_WINDOW`): the core's store window.
    inc : bool
        Build the INC-MoE units' ports and instructions (``incag incrs
        incbar inccnt incwait cube``, :mod:`epfabric.hw.isa`). Default
        ``False``: those opcodes fault and the ports below do not exist.

    Attributes
    ----------
    imem_w : In(en, addr, data)
        Host write port of the instruction memory (write when not running).
    start : In(1)
        Pulse (while idle or halted): set ``pc = 0`` and run.
    store_window : In(range(max_outstanding + 1), init=max_outstanding)
        Block stores (``stb``) issue only while fewer stores than this are
        unacknowledged (word stores keep the whole ``max_outstanding``): the
        sender's staging buffers, each freed when its block's remote write
        completes (the die's runtime knob, :data:`epfabric.hw.die.KNOBS`). The
        count is the core's one ``outstanding`` (its word stores in flight take
        window too). Unconnected, it is ``max_outstanding``: no extra limit.
    vector_extra : In(VECTOR_EXTRA_BITS)
        Cycles every vector instruction waits before its first beat (the
        die's runtime knob): the per-instruction cost of issuing a vector
        operation and draining the vector pipe after it (an Ascend C vector
        op is followed by ``PipeBarrier<PIPE_V>`` when the next one reads its
        result, as in CANN's open MoE dispatch kernel), separate from its
        width. Unconnected, 0.
    read_extra : In(READ_EXTRA_BITS)
        Cycles every read (``lw``, ``ldb``, ``fadd``, each read of a ``poll``)
        waits before its request is offered on ``mem_req`` (the die's runtime
        knob): what an Ascend AIV pays to start a copy from global memory into
        its Unified Buffer (an MTE2 ``DataCopy`` and its ``SetFlag``/``WaitFlag``
        pair, as CANN's open dispatch kernel reads its flags and counts) beyond
        the memory's own access time *L*. Stores are posted and do not pay it,
        and neither does ``ldbc``: the next block of a copy already started (one
        ``DataCopy`` moves a whole 7 KiB token, its start paid once).
        Unconnected, 0.
    rank : In(8)
        This core's rank (die), read by ``csrr rank``.
    mem_req : Out(stream.Signature(mem_req_layout(data_bytes)))
        Memory requests (see :class:`MemOp`).
    mem_rsp : In(stream.Signature(mem_rsp_layout(data_bytes)))
        One answer per request, acks included; ``ready`` is always 1.
    trace : Out(stream.Signature(trace_layout))
        MARK events (core, cycle, event).
    halted, fault, running : Out(1)
        HALT executed (or fault); unassigned opcode; executing a program.
    pc : Out(range(imem_depth))
        Program counter.
    waiting : Out(1)
        Blocked on memory: a load/poll/fetch-add answer, or a fence.
    wait_addr : Out(32)
        Address of the load or poll the core waits on (for the watchdog).
    outstanding : Out(bits_for(max_outstanding))
        Posted stores not yet acknowledged. An ack answer (op WRITE_WORD or
        WRITE_BLOCK on ``mem_rsp``) acknowledges ``data[0:16]`` stores at once:
        the die coalesces the acks of remote stores (:mod:`epfabric.hw.router`).
    bar_req : Out(1), bar_go : In(1)
        ``bar_req`` is high while the core executes ``bar`` (the die's barrier,
        :class:`~epfabric.hw.die.Die`); it moves on in a cycle with ``bar_go``
        high. Unconnected, ``bar_go`` is 1: a lone core's ``bar`` costs 1 cycle.
    cycle : Out(32)
        Cycles this core has run (out of ``IDLE`` and ``HALT``) since reset: what
        ``csrr cycle`` and the core's MARK events read. A halted core's clock is gated;
        the machine's MARK trace is stamped by the System's own counter.
    inc_post : Out(stream.Signature(inc_post_layout)) (``inc`` only)
        Posts to the die's network interface (op :data:`INC_POSTS`, ``a`` =
        R[rs1], ``b`` = R[rs2]).
    inc_counts : In(32).array(3) (``inc`` only)
        The interface's cumulative AG, RS and barrier counters (``incwait``).
    cube_req : Out(1), cube_done : In(1) (``inc`` only)
        ``cube_req`` is high while the core is in a ``cube`` (up to and
        including the ``cube_done`` cycle); the unit pulses ``cube_done`` in
        the last cycle of this core's row, and the core writes the row's
        result then.

    Raises
    ------
    TypeError, ValueError
        A parameter has the wrong type or is out of range (the message names it).
    """

    def __init__(self, *, core_id=0, imem_depth=256, ubuf_rows=4, data_bytes=64, lanes=8,
                 width=16, max_outstanding=15, inc=False, ep=False, ep_dies=32):
        if core_id is not None:
            check_int("core_id", core_id, 0, 255)
        check_pow2("imem_depth", imem_depth, 2, 65536)
        check_pow2("ubuf_rows", ubuf_rows, 1, MAX_UBUF_ROWS)
        check_multiple("data_bytes", data_bytes, 32, 32, 512)
        check_pow2("lanes", lanes, 1, MAX_LANES)
        check_choice("width", width, (8, 16, 32))
        if (lanes * width) % 32 or (data_bytes * 8) % (lanes * width):
            raise UserError(f"lanes * width must be a multiple of 32 that divides "
                            f"data_bytes * 8, not lanes={lanes}, width={width}, "
                            f"data_bytes={data_bytes}")
        check_int("max_outstanding", max_outstanding, 1, MAX_WINDOW)
        if not isinstance(inc, bool):
            raise UserError(f"inc must be True or False, not {inc!r}")
        self.inc = inc
        if not isinstance(ep, bool):
            raise UserError(f"ep must be True or False, not {ep!r}")
        self.ep = ep
        # the dies a stbm's mask can name (the router sends mask[:ranks]): acks are owed for those
        self.ep_dies = check_int("ep_dies", ep_dies, 1, 64)
        self.core_id, self.imem_depth, self.ubuf_rows = core_id, imem_depth, ubuf_rows
        self.data_bytes, self.lanes, self.width = data_bytes, lanes, width
        self.max_outstanding = max_outstanding
        self.max_len = ubuf_rows * (BLOCK_BYTES * 8 // width)
        super().__init__({
            "imem_w": In(wiring.Signature({"en": Out(1), "addr": Out(range(imem_depth)),
                                           "data": Out(32)})),
            "start": In(1),
            "store_window": In(range(max_outstanding + 1), init=max_outstanding),
            "vector_extra": In(VECTOR_EXTRA_BITS),
            "read_extra": In(READ_EXTRA_BITS),
            "rank": In(RANK_BITS),
            "mem_req": Out(stream.Signature(mem_req_layout(
                data_bytes, mask=ep and ep_mask_bits(self.ep_dies)))),
            "mem_rsp": In(stream.Signature(mem_rsp_layout(data_bytes))),
            "trace": Out(stream.Signature(trace_layout)),
            "halted": Out(1),
            "fault": Out(1),
            "running": Out(1),
            "pc": Out(range(imem_depth)),
            "waiting": Out(1),
            "wait_addr": Out(32),
            "outstanding": Out(bits_for(max_outstanding)),
            "cycle": Out(32),
            "bar_req": Out(1),
            "bar_go": In(1, init=1),
            **({"core_id_in": In(8)} if core_id is None else {}),
            **({"inc_post": Out(stream.Signature(inc_post_layout)),
                "inc_counts": In(32).array(len(INC_COUNTERS)),
                "cube_req": Out(1), "cube_done": In(1)} if inc else {}),
        })
        self.vu = VectorUnit(lanes=lanes, width=width, max_len=self.max_len)
        self.decoder = Decoder()
        self.state = Signal(_State, name="state")
        self.insn = Signal(insn_layout(), name="insn")

    @staticmethod
    def vector_cycles(length, lanes, extra=0):
        """Cycles of a vector instruction of length ``length`` (see the table), ``extra`` the
        ``vector_extra`` input."""
        return VectorUnit.cycles(length, lanes) + 2 + extra

    @staticmethod
    def vcomp_cycles(length, lanes, matches, extra=0):
        """Cycles of a ``vcomp`` of length ``length`` whose matching indices are ``matches``."""
        per_beat = {}
        for i in matches:
            if not 0 <= i < length:
                raise UserError(f"match {i} is not an index of a vector of length {length}")
            per_beat[i // lanes] = per_beat.get(i // lanes, 0) + 1
        return (AIVCore.vector_cycles(length, lanes, extra)
                + sum(h - 1 for h in per_beat.values()))

    def gtkw_traces(self):
        return [self.state, self.pc, self.insn.op, self.mem_req.valid, self.mem_req.ready,
                self.mem_req.payload.op, self.mem_req.payload.addr, self.mem_rsp.valid,
                self.mem_rsp.payload.op, self.outstanding, self.waiting, self.wait_addr,
                self.trace.valid, self.trace.payload.event, self.halted, self.fault]

    def elaborate(self, platform):
        m = Module()
        m.submodules.vu = vu = self.vu
        lanes, width = self.lanes, self.width
        row_bits = self.data_bytes * 8
        nwords = self.data_bytes // 4
        slot_bits = lanes * width
        slot_words = slot_bits // 32
        slots_mod = row_bits // slot_bits                      # modelled beats per row
        slots_full = BLOCK_BYTES * 8 // slot_bits              # beats per 512 B row
        row_w = max(1, ceil_log2(self.ubuf_rows))

        state = self.state
        cycle = self.cycle
        core_id = self.core_id_in if self.core_id is None else self.core_id
        # The counter runs while the core does: a halted or idle core's clock is gated
        # (nothing of it changes), so a die of halted cores is idle (Die.idle) and the native
        # backend skips its edges. The machine's time base is the System's own counter.
        with m.If((state != _State.HALT) & (state != _State.IDLE)):
            m.d.sync += cycle.eq(cycle + 1)

        # --- instruction memory (host writes, combinational fetch) -------------
        m.submodules.imem = imem = memory.Memory(shape=32, depth=self.imem_depth, init=[])
        iw = imem.write_port()
        ir = imem.read_port(domain="comb")
        m.d.comb += [iw.en.eq(self.imem_w.en), iw.addr.eq(self.imem_w.addr),
                     iw.data.eq(self.imem_w.data), ir.addr.eq(self.pc)]
        insn = self.insn
        m.d.comb += insn.eq(ir.data)

        # --- decoder: operand slots generated from the ISA table (hw/decoder.py) ---
        m.submodules.decoder = dec = self.decoder
        m.d.comb += dec.insn.eq(insn)
        legal = Signal(name="legal")
        has = {"inc": self.inc, "cube": self.inc, "ep": self.ep}
        unit_ops = [Opcode[ins.mnemonic.upper()] for ins in INSTRUCTIONS
                    if ins.unit and not has[ins.unit]]
        m.d.comb += legal.eq(dec.legal)
        if unit_ops:
            with m.Switch(insn.op):
                with m.Case(*unit_ops):
                    m.d.comb += legal.eq(0)
                with m.Default():
                    pass
        rd, rs1, rs2, rs3, ru = dec.rd, dec.rs1, dec.rs2, dec.rs3, dec.ru
        imm, cond, csr = dec.imm, dec.cond, dec.csr

        # --- register file -------------------------------------------------------
        regs = [Const(0, 32)] + [Signal(32, name=f"r{i}") for i in range(1, NUM_REGS)]
        rfile = Array(regs)
        a, b, c = rfile[rs1], rfile[rs2], rfile[rs3]

        # Three write ports (vcount writes three registers); the FSM drives them
        # combinationally and the registers are updated in one place below.
        wports = [(Signal(name=f"we{p}"), Signal(4, name=f"widx{p}"), Signal(32, name=f"wdata{p}"))
                  for p in range(3)]

        def write_reg(idx, value, port=0):
            en, widx, wdata = wports[port]
            m.d.comb += [en.eq(1), widx.eq(idx), wdata.eq(value)]

        # --- UBuf ------------------------------------------------------------------
        m.submodules.ubuf = ubuf = memory.Memory(shape=row_bits, depth=self.ubuf_rows, init=[])
        ua = ubuf.read_port(domain="comb")
        ub = ubuf.read_port(domain="comb")
        uw = ubuf.write_port(granularity=32)

        def row_of(addr):
            return (addr >> 9)[:row_w] if self.ubuf_rows > 1 else Const(0, 1)

        eff = Signal(32)      # rs1 + imm: memory or UBuf address
        m.d.comb += eff.eq(a + imm)
        word_of_eff = eff[2:9]

        # --- memory port, outstanding stores ------------------------------------------
        req, rsp = self.mem_req.payload, self.mem_rsp.payload
        m.d.comb += self.mem_rsp.ready.eq(1)
        rsp_ack = self.mem_rsp.valid & ((rsp.op == MemOp.WRITE_WORD) | (rsp.op == MemOp.WRITE_BLOCK))
        rsp_data = self.mem_rsp.valid & ~rsp_ack
        store_taken = Signal()
        outstanding = self.outstanding
        acked = Signal.like(outstanding)
        m.d.comb += acked.eq(Mux(rsp_ack, rsp.data[:ACK_COUNT_BITS], 0))
        # stores taken this cycle, in acks owed: 1 for sw/stb, a stbm one per die of its mask,
        # a stbr none
        store_count = Signal(range(self.ep_dies + 1) if self.ep else 1, name="store_count")
        m.d.sync += outstanding.eq(outstanding + store_count - acked)
        can_store = outstanding < self.max_outstanding
        can_block = can_store & (outstanding < self.store_window)

        # latched blocking request
        w_op = Signal(Opcode, init=Opcode.HALT)
        w_rd = Signal(4)
        w_row = Signal(row_w)
        w_cond = Signal(Cond)
        w_val = Signal(32)
        w_addr = Signal(32)
        r_wait = Signal(READ_EXTRA_BITS, name="r_wait")   # read_extra cycles this read waited

        m.d.comb += [
            self.halted.eq(state == _State.HALT),
            self.running.eq((state != _State.HALT) & (state != _State.IDLE)),
            self.trace.payload.core.eq(core_id),
            self.trace.payload.cycle.eq(cycle),
            self.trace.payload.event.eq(imm[:16]),
        ]

        pc_next = Signal.like(self.pc)
        m.d.comb += pc_next.eq(self.pc + 1)

        def branch(taken):
            with m.If(taken):
                m.d.sync += self.pc.eq(self.pc + imm)
            with m.Else():
                m.d.sync += self.pc.eq(pc_next)

        def cmp(op, x, y):
            return Mux(op == Cond.EQ, x == y, Mux(op == Cond.NE, x != y,
                   Mux(op == Cond.LT, x < y, Mux(op == Cond.LE, x <= y,
                   Mux(op == Cond.GT, x > y, x >= y)))))

        # --- vector sequencer state ------------------------------------------------------
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
        vec_ops = {ins.mnemonic.upper(): ins.vop for ins in INSTRUCTIONS if ins.vop is not None}

        inc_wait, cube = Const(0), None    # an incwait waiting, a cube's operands (_inc_run)

        # --- main FSM -------------------------------------------------------------------------
        with m.Switch(state):
            with m.Case(_State.IDLE, _State.HALT):
                with m.If(self.start):
                    m.d.sync += [state.eq(_State.RUN), self.pc.eq(0), self.fault.eq(0)]

            with m.Case(_State.RUN):
                m.d.sync += self.pc.eq(pc_next)   # default; stalls and jumps override
                with m.If(~legal):
                    m.d.sync += [state.eq(_State.HALT), self.fault.eq(1), self.pc.eq(self.pc)]
                alu = {
                    "ADD": a + b, "SUB": a - b, "AND": a & b, "OR": a | b, "XOR": a ^ b,
                    "SLL": (a << b[:5])[:32], "SRL": a >> b[:5],
                    "SRA": (a.as_signed() >> b[:5])[:32],
                    "SLT": a.as_signed() < b.as_signed(), "SLTU": a < b,
                    "MUL": (a * b)[:32],
                    "ADDI": a + imm, "ANDI": a & imm, "ORI": a | imm, "XORI": a ^ imm,
                    "SLLI": (a << imm[:5])[:32], "SRLI": a >> imm[:5],
                    "SRAI": (a.as_signed() >> imm[:5])[:32],
                    "LUI": imm << 12,
                }
                branches = {
                    "BEQ": a == b, "BNE": a != b,
                    "BLT": a.as_signed() < b.as_signed(), "BGE": a.as_signed() >= b.as_signed(),
                    "BLTU": a < b, "BGEU": a >= b,
                }
                with m.Switch(insn.op):
                    for name, value in alu.items():
                        with m.Case(Opcode[name]):
                            write_reg(rd, value[:32])
                    for name, taken in branches.items():
                        with m.Case(Opcode[name]):
                            branch(taken)
                    with m.Case(Opcode.JAL):
                        write_reg(rd, pc_next)
                        m.d.sync += self.pc.eq(self.pc + imm)
                    with m.Case(Opcode.JALR):
                        write_reg(rd, pc_next)
                        m.d.sync += self.pc.eq(eff)
                    with m.Case(Opcode.CSRR):
                        with m.Switch(csr):
                            with m.Case(Csr.CORE_ID):
                                write_reg(rd, core_id)
                            with m.Case(Csr.RANK):
                                write_reg(rd, self.rank)
                            with m.Case(Csr.CYCLE):
                                write_reg(rd, cycle)
                            with m.Default():
                                write_reg(rd, 0)
                    with m.Case(Opcode.ULW):
                        m.d.comb += ua.addr.eq(row_of(eff))
                        write_reg(rd, Mux(word_of_eff < nwords,
                                          ua.data.word_select(word_of_eff[:ceil_log2(nwords)], 32),
                                          0))
                    with m.Case(Opcode.USW):
                        m.d.comb += [uw.addr.eq(row_of(eff)), uw.data.eq(b.replicate(nwords))]
                        with m.If(word_of_eff < nwords):
                            m.d.comb += uw.en.eq(Const(1, nwords) << word_of_eff[:ceil_log2(nwords)])
                    with m.Case(Opcode.SW, Opcode.STB):
                        m.d.comb += [self.mem_req.valid.eq(Mux(insn.op == Opcode.SW,
                                                               can_store, can_block)),
                                     req.addr.eq(eff)]
                        with m.If(insn.op == Opcode.SW):
                            m.d.comb += [req.op.eq(MemOp.WRITE_WORD), req.data.eq(b)]
                        with m.Else():
                            m.d.comb += [req.op.eq(MemOp.WRITE_BLOCK), ua.addr.eq(row_of(rfile[ru])),
                                         req.data.eq(ua.data)]
                        m.d.comb += [store_taken.eq(self.mem_req.valid & self.mem_req.ready),
                                     store_count.eq(store_taken)]
                        with m.If(~store_taken):
                            m.d.sync += self.pc.eq(self.pc)
                    if self.ep:
                        self._ep_store(m, insn, a, b, c, ru, rfile, ua, row_of, req,
                                       outstanding, store_taken, store_count)
                    with m.Case(Opcode.LW, Opcode.LDB, Opcode.LDBC, Opcode.FADD, Opcode.POLL):
                        # the read_extra knob: offered once it waited that many cycles (and
                        # kept valid until taken); a poll's every read waits again; an ldbc
                        # continues a copy whose start was paid, so it does not wait
                        issue = (r_wait >= self.read_extra) | (insn.op == Opcode.LDBC)
                        with m.If(~issue):
                            m.d.sync += r_wait.eq(r_wait + 1)
                        m.d.comb += [self.mem_req.valid.eq(issue), req.addr.eq(eff)]
                        with m.Switch(insn.op):
                            with m.Case(Opcode.LDB, Opcode.LDBC):
                                m.d.comb += req.op.eq(MemOp.READ_BLOCK)
                            with m.Case(Opcode.FADD):
                                m.d.comb += [req.op.eq(MemOp.FETCH_ADD), req.data.eq(b)]
                            with m.Default():
                                m.d.comb += req.op.eq(MemOp.READ_WORD)
                        m.d.sync += self.pc.eq(self.pc)
                        with m.If(issue & self.mem_req.ready):
                            m.d.sync += [state.eq(_State.MEM), w_op.eq(insn.op), w_rd.eq(rd),
                                         r_wait.eq(0),
                                         w_row.eq(row_of(rfile[ru])), w_cond.eq(cond),
                                         w_val.eq(b), w_addr.eq(eff)]
                    with m.Case(Opcode.FENCE):
                        with m.If(outstanding != 0):
                            m.d.sync += self.pc.eq(self.pc)
                    with m.Case(Opcode.BAR):
                        m.d.comb += self.bar_req.eq(1)
                        with m.If(~self.bar_go):
                            m.d.sync += self.pc.eq(self.pc)
                    if self.inc:
                        inc_wait, cube = self._inc_run(m, a, b, c, rd, rfile, ru, dec, row_of,
                                                       write_reg, state)
                    with m.Case(Opcode.MARK):
                        m.d.comb += self.trace.valid.eq(1)
                        with m.If(~self.trace.ready):
                            m.d.sync += self.pc.eq(self.pc)
                    with m.Case(Opcode.HALT):
                        m.d.sync += [state.eq(_State.HALT), self.pc.eq(self.pc)]
                    with m.Case(*(Opcode[n] for n in vec_ops)):
                        m.d.sync += [
                            state.eq(_State.VEC), self.pc.eq(self.pc),
                            v_cond.eq(cond), v_rd.eq(rd),
                            v_arow.eq(row_of(a)), v_brow.eq(row_of(c)), v_drow.eq(row_of(rfile[rd])),
                            v_in.eq(0), v_out.eq(0),
                            v_comp.eq(insn.op == Opcode.VCOMP), v_done.eq(0), v_cnt.eq(0),
                            v_wait.eq(self.vector_extra),
                        ]
                        clipped = Mux(b > self.max_len, self.max_len, b)
                        m.d.sync += v_len.eq(clipped)
                        nb = (clipped + lanes - 1) >> exact_log2(lanes)
                        m.d.sync += v_beats.eq(Mux(nb == 0, 1, nb))
                        for k in range(3):
                            m.d.sync += v_s[k].eq(rfile[(rs3 + k)[:4]][:width])
                        with m.Switch(insn.op):
                            for n, vop in vec_ops.items():
                                with m.Case(Opcode[n]):
                                    m.d.sync += v_op.eq(vop)
                    with m.Default():
                        pass   # NOP-like: none assigned (illegal handled above)

            with m.Case(_State.MEM):
                m.d.comb += ua.addr.eq(w_row)
                with m.If(rsp_data):
                    word = rsp.data[:32]
                    with m.Switch(w_op):
                        with m.Case(Opcode.LDB, Opcode.LDBC):
                            m.d.comb += [uw.addr.eq(w_row), uw.data.eq(rsp.data),
                                         uw.en.eq((1 << nwords) - 1)]
                            m.d.sync += [state.eq(_State.RUN), self.pc.eq(pc_next)]
                        with m.Case(Opcode.POLL):
                            m.d.sync += state.eq(_State.RUN)   # re-issue unless satisfied
                            with m.If(cmp(w_cond, word, w_val)):
                                write_reg(w_rd, word)
                                m.d.sync += self.pc.eq(pc_next)
                        with m.Default():
                            write_reg(w_rd, word)
                            m.d.sync += [state.eq(_State.RUN), self.pc.eq(pc_next)]

            with m.Case(_State.VEC):
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
                            m.d.sync += [state.eq(_State.RUN), self.pc.eq(pc_next)]
                with m.Elif(vu.o_stream.valid):
                    with m.Switch(v_op):
                        with m.Case(VecOp.COUNT):
                            for k in range(3):
                                write_reg((v_rd + k)[:4], out.count[k], port=k)
                        with m.Case(VecOp.FIND_FIRST):
                            write_reg(v_rd, Mux(out.none, 0xFFFFFFFF, out.index))
                        with m.Case(VecOp.REDUCE_SUM):
                            write_reg(v_rd, out.sum[:32])
                        with m.Case(VecOp.CMP, VecOp.ADD, VecOp.MULS):
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
                    vector_out = (v_op == VecOp.CMP) | (v_op == VecOp.ADD) | (v_op == VecOp.MULS)
                    with m.If(~vector_out | out.last):
                        m.d.sync += [state.eq(_State.RUN), self.pc.eq(pc_next)]

            if self.inc:
                with m.Case(_State.CUBE):
                    self._cube_finish(m, cube, ua, uw, nwords, state, pc_next)

            with m.Default():
                pass

        for i in range(1, NUM_REGS):
            for en, widx, wdata in wports:
                with m.If(en & (widx == i)):
                    m.d.sync += regs[i].eq(wdata)

        # --- watchdog view -------------------------------------------------------------------
        run_poll = (state == _State.RUN) & legal & (insn.op == Opcode.POLL)
        run_fence = (state == _State.RUN) & legal & (insn.op == Opcode.FENCE) & (outstanding != 0)
        run_bar = self.bar_req & ~self.bar_go
        m.d.comb += [
            self.waiting.eq((state == _State.MEM) | run_poll | run_fence | inc_wait | run_bar),
            self.wait_addr.eq(Mux(state == _State.MEM, w_addr, Mux(run_poll, eff,
                                  Mux(inc_wait, INC_WAIT_ADDR | dec.ctr[:2],
                                      Mux(run_bar, BAR_WAIT_ADDR, 0))))),
        ]
        return m

    def _inc_run(self, m, a, b, c, rd, rfile, ru, dec, row_of, write_reg, state):
        """RUN-state cases of the INC posts, ``incwait`` and ``cube`` (``inc`` cores).

        Returns ``(waiting, cube)``: high while an ``incwait`` waits, and the
        operands a ``cube`` latches for the CUBE state (:meth:`_cube_finish`).
        """
        post = self.inc_post
        for name, op in INC_POSTS.items():
            with m.Case(Opcode[name.upper()]):
                m.d.comb += [post.valid.eq(1), post.payload.op.eq(op),
                             post.payload.a.eq(a), post.payload.b.eq(b)]
                with m.If(~post.ready):
                    m.d.sync += self.pc.eq(self.pc)
        counter = Signal(32, name="inc_counter")
        waiting = Signal(name="inc_waiting")
        with m.Case(Opcode.INCWAIT):
            m.d.comb += counter.eq(Array(self.inc_counts)[dec.ctr[:2]])
            with m.If(~(counter - b)[31]):          # wrap-safe counter >= threshold
                write_reg(rd, counter)
            with m.Else():
                m.d.comb += waiting.eq(1)
                m.d.sync += self.pc.eq(self.pc)
        row_w = max(1, ceil_log2(self.ubuf_rows))
        k = {"dst": Signal(row_w, name="cube_dst"), "src": Signal(row_w, name="cube_src"),
             "a": Signal(32, name="cube_a"), "b": Signal(32, name="cube_b")}
        with m.Case(Opcode.CUBE):
            m.d.sync += [state.eq(_State.CUBE), self.pc.eq(self.pc), k["dst"].eq(row_of(rfile[ru])),
                         k["src"].eq(row_of(a)), k["a"].eq(b), k["b"].eq(c)]
        return waiting, k

    def _ep_store(self, m, insn, a, b, c, ru, rfile, ua, row_of, req, outstanding, store_taken,
                  store_count):
        """RUN state, ``stbm``/``stbr`` (``ep=True``): the block of UBuf row R[ru] to address
        R[rs1] with the die set R[rs2] (and, past 32 dies, R[rs3] << 32 | R[rs2]). A ``stbm`` waits until the store window has room for
        an ack from every die of its mask (bits ``ep_dies`` and up name no die and are not
        counted); a ``stbr`` is posted (never acknowledged)."""
        n_acks = Signal(range(self.ep_dies + 1), name="stbm_acks")
        dies = Cat(b, c) if ep_mask_bits(self.ep_dies) > 32 else b
        with m.Case(Opcode.STBM, Opcode.STBR):
            m.d.comb += n_acks.eq(popcount(dies[k] for k in range(self.ep_dies)))
            is_m = insn.op == Opcode.STBM
            room = (outstanding + n_acks <= self.max_outstanding) & \
                (outstanding < self.store_window)
            m.d.comb += [self.mem_req.valid.eq(Mux(is_m, room, 1)), req.addr.eq(a),
                         req.mask.eq(dies), req.op.eq(Mux(is_m, MemOp.WRITE_MCAST, MemOp.WRITE_RED)),
                         ua.addr.eq(row_of(rfile[ru])), req.data.eq(ua.data)]
            m.d.comb += store_taken.eq(self.mem_req.valid & self.mem_req.ready)
            m.d.comb += store_count.eq(Mux(store_taken & is_m, n_acks, 0))
            with m.If(~store_taken):
                m.d.sync += self.pc.eq(self.pc)

    def _cube_finish(self, m, k, ua, uw, nwords, state, pc_next):
        """CUBE state: wait for the die's unit, then write ``a * x + b`` per word of the row.

        ``k``: the operands :meth:`_inc_run` latched (``dst``, ``src``, ``a``, ``b``).
        """
        # the request is the state alone (not ~cube_done): the die's unit answers in the
        # request's own cycle when a row costs one cycle, and a request that depended on
        # the answer would be a combinational loop
        m.d.comb += [self.cube_req.eq(1), ua.addr.eq(k["src"])]
        with m.If(self.cube_done):
            words = [(k["a"] * ua.data.word_select(i, 32) + k["b"])[:32] for i in range(nwords)]
            m.d.comb += [uw.addr.eq(k["dst"]), uw.data.eq(Cat(*words)), uw.en.eq((1 << nwords) - 1)]
            m.d.sync += [state.eq(_State.RUN), self.pc.eq(pc_next)]


VERILOG_EXPORTS = {
    "aiv_core": (AIVCore, {"core_id": 0, "imem_depth": 64, "ubuf_rows": 2, "data_bytes": 32,
                           "lanes": 4, "width": 16, "max_outstanding": 7}),
}
