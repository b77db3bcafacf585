"""AIV core: an in-order core running a kernel program (docs/spec/design.md block 5).

UBEP's dispatch and combine kernels run on the AIV vector cores of each die
(UBEP §3.3 Algorithm 1, §4): scalar bookkeeping, VectorCount-based mapping,
512 B DataBlock stores through the UB fabric and Data-as-Flag polling. This
core executes such programs, encoded in the ISA of :mod:`epfabric.hw.isa`,
whose table also generates this core's decoder (:class:`~epfabric.hw.decoder.Decoder`).
"""

import functools
import operator

from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import data, enum, memory, stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import bits_for

from .aiv_fetch import FetchUnit, imem_write_signature
from .aiv_fp import FpSequencer, check_fp_params, fp_vector_cycles
from .aiv_inc import INC_POSTS, INC_WAIT_ADDR, IncUnit, inc_post_layout
from .aiv_lsu import (ACK_COUNT_BITS, MAX_WINDOW, POLL_EXTRA_BITS, READ_EXTRA_BITS,
                      LoadStoreUnit, MemOp, ep_mask_bits, mem_req_layout, mem_rsp_layout)
from .aiv_scalar import ScalarUnit
from .aiv_units import MAX_UBUF_ROWS
from .aiv_vector import MAX_LANES, VECTOR_EXTRA_BITS, VectorSequencer, check_lanes, vector_max_len
from .signature import ParamSignature, check_other_params
from .isa import INC_COUNTERS, RANK_BITS, Opcode, insn_layout
from .validate import UserError, check_bool, check_int, check_multiple, check_pow2
from .vector_unit import VectorUnit

__all__ = ["MAX_UBUF_ROWS", "MAX_LANES", "MemOp", "ep_mask_bits", "mem_req_layout", "mem_rsp_layout", "trace_layout", "AIVCore", "MAX_WINDOW",
           "VECTOR_EXTRA_BITS", "READ_EXTRA_BITS", "POLL_EXTRA_BITS", "ACK_COUNT_BITS", "INC_POSTS", "inc_post_layout", "INC_WAIT_ADDR", "BAR_WAIT_ADDR"]

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
    FVEC = 6   # streaming a floating-point vector instruction through the fp unit


def _join(m, port, unit_ports):
    """Drive ``port`` (of the register file or the UBuf) from the units' ``unit_ports``.

    Each unit drives its port only in the cycles it executes and 0 otherwise, one unit at a
    time, so the OR of what they drive is the executing unit's; what ``port`` answers (a
    read's ``data``) goes to every unit.
    """
    for name, member in unit_ports[0].signature.members.items():
        if member.flow == Out:
            value = functools.reduce(operator.or_, [getattr(u, name) for u in unit_ports])
            m.d.comb += getattr(port, name).eq(value)
        else:
            m.d.comb += [getattr(u, name).eq(getattr(port, name)) for u in unit_ports]


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
    ``lw``, ``fadd`` (scalar reads)            1 + *P* + *L*; *P* = ``poll_extra``
                                               (0 unconnected)
    ``ldb`` (a copy's start)                   1 + *R* + *L*; *R* = ``read_extra``
                                               (0 unconnected)
    ``ldbc``                                   1 + *L* (a copy's next block: its
                                               start was paid)
    ``poll``                                   (1 + *P* + *L*) per read; reads
                                               repeat back to back until the
                                               condition holds
    ``fence``                                  1 once no store is outstanding
                                               (an ack is counted the cycle after
                                               it arrives)
    ``mark``                                   1 (+ stall while ``trace`` is not
                                               ready)
    vector (``vcount vcmp vfind vadd vsum      ``VectorUnit.cycles(L, lanes) + 2 + X``
    vmuls valu``)                              = ``max(1, ceil(L/lanes)) + 3 + X``
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
    ``vfcastf vfcastb vfadd vfmuls vfaxpy``    ``(B - 1) * RC // (64 // FL) + FT +
    (``fp``)                                   2 + X`` with ``B = max(1,
                                               ceil(L/FL))`` beats, *FL* =
                                               ``fp_lanes``, *FT* = ``fp_latency``,
                                               *RC* = ``fp_repeat_cycles``; one
                                               beat a cycle (the default *RC*):
                                               ``B + FT + 1 + X``
                                               (:meth:`fp_vector_cycles`)
    =========================================  ====================================

    A request that is not accepted at once adds its wait cycles. Vector
    lengths are clipped to ``max_len = ubuf_rows * 4096 // width``; vector
    pivots/scalars are the low ``width`` bits of their registers. UBuf rows
    are ``(addr >> 9) % ubuf_rows``; a branch target is taken modulo
    ``imem_depth``. Executing an unassigned opcode halts the core with
    ``fault`` set.

    **Structure.** The core is its FSM (``state``, ``pc``) and units built
    as children: :class:`~epfabric.hw.aiv_fetch.FetchUnit` (instruction
    memory, decoder, register file) issues the instruction at ``pc`` with its
    operands to :class:`~epfabric.hw.aiv_scalar.ScalarUnit` (ALU, branches,
    jumps, CSRs), :class:`~epfabric.hw.aiv_lsu.LoadStoreUnit` (``mem_req``/
    ``mem_rsp``, the store window, ``ulw``/``usw``; state ``MEM``),
    :class:`~epfabric.hw.aiv_vector.VectorSequencer` (the vector unit; state
    ``VEC``, and ``vcomp``'s packing), with ``inc``
    :class:`~epfabric.hw.aiv_inc.IncUnit` (posts, ``incwait``, ``cube``; state
    ``CUBE``) and with ``fp`` :class:`~epfabric.hw.aiv_fp.FpSequencer` (the
    floating-point vector instructions; state ``FVEC``); the core itself executes
    ``bar``, ``mark`` and ``halt``. The
    units share the UBuf (two combinational read ports, one write port of
    32-bit words) and the register file's three write ports
    (:mod:`epfabric.hw.aiv_units`).

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
    ep : bool
        Build the expert-parallel stores ``stbm``/``stbr`` (``mem_req`` gets a
        die ``mask``). Default ``False``: those opcodes fault.
    ep_dies : int
        The dies a ``stbm``'s mask can name (1..64; the router sends
        ``mask[:ranks]``): acks are owed for those.
    fp : bool
        Build the floating-point vector instructions (``vfcastf vfcastb vfadd
        vfmuls vfaxpy``, :mod:`epfabric.hw.isa`) and their
        :class:`~epfabric.hw.fp_unit.FpUnit`. Default ``False``: those opcodes
        fault, and the core is what it was without them.
    fp_lanes : int
        The fp unit's elements a beat (power of two, 2..64; ``fp_lanes * 32``
        divides ``data_bytes * 8``). Checked whether or not ``fp`` is set.
    fp_latency : int or None
        Cycles from a beat to its result (1..64); ``None``: one register per step
        of the unit's datapath (10, or 7 with ``fp_fused``).
    fp_repeat_cycles : int or None
        Cycles the unit takes per 256 B repeat (``64 // fp_lanes`` beats), from
        ``64 // fp_lanes`` (``None``: one beat a cycle) to ``(fp_latency + 1) *
        (64 // fp_lanes) + 1`` (:func:`~epfabric.hw.aiv_fp.check_fp_params`).
    fp_fused : bool
        ``vfaxpy`` rounds once (Ascend 950's ``MulAddDst``) instead of rounding the
        product and then the sum (A2/A3's ``Muls`` then ``Add``, the default).

    Attributes
    ----------
    imem_w : In(en, addr, data)
        Host write port of the instruction memory (write when not running).
    start : In(1)
        Pulse (while idle or halted): set ``pc = 0`` and run.
    store_window : In(range(max_outstanding + 1), init=max_outstanding)
        Block stores (``stb``) issue only while fewer stores than this are
        unacknowledged (word stores keep the whole ``max_outstanding``): the
        sender's staging buffers (the die's runtime knob,
        :data:`epfabric.hw.die.KNOBS`; :class:`~epfabric.hw.aiv_lsu.LoadStoreUnit`).
        Unconnected, it is ``max_outstanding``: no extra limit.
    vector_extra : In(VECTOR_EXTRA_BITS)
        Cycles every vector instruction waits before its first beat (the
        die's runtime knob: the cost of issuing a vector operation and
        draining the pipe after it, :class:`~epfabric.hw.aiv_vector.VectorSequencer`).
        Unconnected, 0.
    read_extra : In(READ_EXTRA_BITS)
        Cycles a copy's first read (``ldb``) waits before its request is offered
        on ``mem_req`` (the die's runtime knob: an Ascend MTE2 copy's start,
        :class:`~epfabric.hw.aiv_lsu.LoadStoreUnit`); ``ldbc``, scalar reads and
        stores do not pay it. Unconnected, 0.
    poll_extra : In(POLL_EXTRA_BITS)
        Cycles a scalar read of global memory (``lw``, ``fadd``, each read of a
        ``poll``) waits before its request is offered (the die's runtime knob:
        Ascend's Scalar unit reading GM past its DataCache,
        :class:`~epfabric.hw.aiv_lsu.LoadStoreUnit`); copies and stores do not
        pay it. Unconnected, 0.
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
    state, insn : Signal (not ports)
        The FSM's state (``IDLE RUN MEM VEC HALT CUBE FVEC``) and the instruction at
        ``pc``, for waveforms (the machine's VCD view reads ``state``).

    Raises
    ------
    TypeError, ValueError
        A parameter has the wrong type or is out of range (the message names it).
    """

    def __init__(self, *, core_id=0, imem_depth=256, ubuf_rows=4, data_bytes=64, lanes=8,
                 width=16, max_outstanding=15, inc=False, ep=False, ep_dies=32, fp=False,
                 fp_lanes=4, fp_latency=None, fp_repeat_cycles=None, fp_fused=False):
        if core_id is not None:
            check_int("core_id", core_id, 0, 255)
        check_pow2("imem_depth", imem_depth, 2, 65536)
        check_pow2("ubuf_rows", ubuf_rows, 1, MAX_UBUF_ROWS)
        check_multiple("data_bytes", data_bytes, 32, 32, 512)
        check_lanes(lanes, width, data_bytes)
        check_int("max_outstanding", max_outstanding, 1, MAX_WINDOW)
        if not isinstance(inc, bool):
            raise UserError(f"inc must be True or False, not {inc!r}")
        self.inc = inc
        if not isinstance(ep, bool):
            raise UserError(f"ep must be True or False, not {ep!r}")
        self.ep = ep
        # the dies a stbm's mask can name (the router sends mask[:ranks]): acks are owed for those
        self.ep_dies = check_int("ep_dies", ep_dies, 1, 64)
        self.fp = check_bool("fp", fp)
        unit = check_fp_params(lanes=fp_lanes, latency=fp_latency, repeat_cycles=fp_repeat_cycles,
                               fused=fp_fused, data_bytes=data_bytes)
        self.fp_lanes, self.fp_latency = unit["lanes"], unit["latency"]
        self.fp_repeat_cycles, self.fp_fused = unit["repeat_cycles"], unit["fused"]
        self.core_id, self.imem_depth, self.ubuf_rows = core_id, imem_depth, ubuf_rows
        self.data_bytes, self.lanes, self.width = data_bytes, lanes, width
        self.max_outstanding = max_outstanding
        self.max_len = vector_max_len(ubuf_rows, width)
        super().__init__(self.signature_for(
            core_id=core_id, imem_depth=imem_depth, data_bytes=data_bytes,
            max_outstanding=max_outstanding, inc=inc, ep=ep, ep_dies=self.ep_dies))
        self.state = Signal(_State, name="state")
        self.insn = Signal(insn_layout(), name="insn")   # the instruction at pc, for waveforms

    @classmethod
    def signature_for(cls, *, core_id=0, imem_depth=256, data_bytes=64, max_outstanding=15,
                      inc=False, ep=False, ep_dies=32, **others):
        """The signature of a core of these parameters (the constructor's), without building
        it: what a die that instantiates a shared core module wires, so the core is built only
        when its Verilog is converted, and what a testbench of the core's Verilog drives. A
        :class:`~epfabric.hw.signature.ParamSignature` with ``data_bytes``,
        ``max_outstanding``, ``imem_depth``, ``inc`` and ``ep`` (what the core testbenches
        read). The
        parameters that shape no port are the constructor's to check."""
        check_other_params(cls, others)
        check_pow2("imem_depth", imem_depth, 2, 65536)
        check_int("max_outstanding", max_outstanding, 1, MAX_WINDOW)
        check_int("ep_dies", ep_dies, 1, 64)
        return ParamSignature({
            "imem_w": In(imem_write_signature(imem_depth)),
            "start": In(1),
            "store_window": In(range(max_outstanding + 1), init=max_outstanding),
            "vector_extra": In(VECTOR_EXTRA_BITS),
            "read_extra": In(READ_EXTRA_BITS),
            "poll_extra": In(POLL_EXTRA_BITS),
            "rank": In(RANK_BITS),
            "mem_req": Out(stream.Signature(mem_req_layout(
                data_bytes, mask=ep and ep_mask_bits(ep_dies)))),
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
        }, data_bytes=data_bytes, max_outstanding=max_outstanding, imem_depth=imem_depth,
           inc=inc, ep=ep)

    @staticmethod
    def vector_cycles(length, lanes, extra=0):
        """Cycles of a vector instruction of length ``length`` (see the table), ``extra`` the
        ``vector_extra`` input."""
        return VectorUnit.cycles(length, lanes) + 2 + extra

    @staticmethod
    def fp_vector_cycles(length, lanes, latency, repeat_cycles=None, extra=0):
        """Cycles of a floating-point vector instruction (see the table;
        :func:`~epfabric.hw.aiv_fp.fp_vector_cycles`)."""
        return fp_vector_cycles(length, lanes, latency, repeat_cycles, extra)

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
        state, pc, cycle = self.state, self.pc, self.cycle
        core_id = self.core_id_in if self.core_id is None else self.core_id
        # The counter runs while the core does: a halted or idle core's clock is gated
        # (nothing of it changes), so a die of halted cores is idle (Die.idle) and the native
        # backend skips its edges. The machine's time base is the System's own counter.
        with m.If((state != _State.HALT) & (state != _State.IDLE)):
            m.d.sync += cycle.eq(cycle + 1)

        # --- fetch, decode, register file; the UBuf --------------------------------------
        m.submodules.fetch = fetch = FetchUnit(imem_depth=self.imem_depth, inc=self.inc,
                                               ep=self.ep, fp=self.fp)
        wiring.connect(m, wiring.flipped(self.imem_w), fetch.imem_w)
        m.d.comb += [fetch.pc.eq(pc), self.insn.eq(fetch.insn)]
        insn = fetch.issue
        m.submodules.ubuf = ubuf = memory.Memory(shape=self.data_bytes * 8,
                                                 depth=self.ubuf_rows, init=[])
        ua = ubuf.read_port(domain="comb")
        ub = ubuf.read_port(domain="comb")
        uw = ubuf.write_port(granularity=32)
        ubuf_shape = dict(ubuf_rows=self.ubuf_rows, data_bytes=self.data_bytes)

        # --- execution units ----------------------------------------------------------------
        m.submodules.scalar = scalar = ScalarUnit(imem_depth=self.imem_depth)
        m.d.comb += [scalar.pc.eq(pc), scalar.core_id.eq(core_id), scalar.rank.eq(self.rank),
                     scalar.cycle.eq(cycle)]
        m.submodules.lsu = lsu = LoadStoreUnit(max_outstanding=self.max_outstanding, ep=self.ep,
                                               ep_dies=self.ep_dies, **ubuf_shape)
        wiring.connect(m, lsu.mem_req, wiring.flipped(self.mem_req))
        wiring.connect(m, wiring.flipped(self.mem_rsp), lsu.mem_rsp)
        m.d.comb += [lsu.store_window.eq(self.store_window), lsu.read_extra.eq(self.read_extra),
                     lsu.poll_extra.eq(self.poll_extra), self.outstanding.eq(lsu.outstanding)]
        m.submodules.vector = vector = VectorSequencer(lanes=self.lanes, width=self.width,
                                                       **ubuf_shape)
        m.d.comb += vector.vector_extra.eq(self.vector_extra)
        # the units with a wait state of their own, and that state
        waits = {lsu: _State.MEM, vector: _State.VEC}
        ports = {"reg": [scalar.reg_w, lsu.reg_w, vector.reg_w[0]],
                 "ua": [lsu.ubuf_r, vector.ubuf_r[0]], "uw": [lsu.ubuf_w, vector.ubuf_w]}
        inc_waiting, inc_wait_addr = 0, 0
        if self.inc:
            m.submodules.inc = inc = IncUnit(**ubuf_shape)
            wiring.connect(m, inc.inc_post, wiring.flipped(self.inc_post))
            m.d.comb += [*(inc.inc_counts[k].eq(v) for k, v in enumerate(self.inc_counts)),
                         self.cube_req.eq(inc.cube_req), inc.cube_done.eq(self.cube_done)]
            waits[inc] = _State.CUBE
            for name, port in (("reg", inc.reg_w), ("ua", inc.ubuf_r), ("uw", inc.ubuf_w)):
                ports[name].append(port)
            inc_waiting, inc_wait_addr = inc.waiting, inc.wait_addr
        ub_ports = [vector.ubuf_r[1]]
        if self.fp:
            m.submodules.fp = fp = FpSequencer(
                lanes=self.fp_lanes, latency=self.fp_latency,
                repeat_cycles=self.fp_repeat_cycles, fused=self.fp_fused, **ubuf_shape)
            m.d.comb += fp.vector_extra.eq(self.vector_extra)
            waits[fp] = _State.FVEC
            ports["ua"].append(fp.ubuf_r[0])
            ports["uw"].append(fp.ubuf_w)
            ub_ports.append(fp.ubuf_r[1])
        run = state == _State.RUN
        m.d.comb += [scalar.issue.eq(insn), scalar.run.eq(run)]
        for unit, wait_state in waits.items():
            m.d.comb += [unit.issue.eq(insn), unit.ctl.run.eq(run),
                         unit.ctl.active.eq(state == wait_state)]

        # --- the units' register and UBuf ports ---------------------------------------------
        _join(m, fetch.reg_w[0], ports["reg"])
        for k in (1, 2):                   # vcount's second and third registers
            _join(m, fetch.reg_w[k], [vector.reg_w[k]])
        _join(m, ua, ports["ua"])
        _join(m, ub, ub_ports)
        _join(m, uw, ports["uw"])

        m.d.comb += [
            self.halted.eq(state == _State.HALT),
            self.running.eq((state != _State.HALT) & (state != _State.IDLE)),
            self.trace.payload.core.eq(core_id),
            self.trace.payload.cycle.eq(cycle),
            self.trace.payload.event.eq(insn.imm[:16]),
        ]
        pc_next = Signal.like(pc)
        m.d.comb += pc_next.eq(pc + 1)

        # --- main FSM -------------------------------------------------------------------------
        with m.Switch(state):
            with m.Case(_State.IDLE, _State.HALT):
                with m.If(self.start):
                    m.d.sync += [state.eq(_State.RUN), pc.eq(0), self.fault.eq(0)]

            with m.Case(_State.RUN):
                m.d.sync += pc.eq(pc_next)   # default; stalls and jumps override
                with m.If(~fetch.legal):
                    m.d.sync += [state.eq(_State.HALT), self.fault.eq(1), pc.eq(pc)]
                with m.If(scalar.jump):
                    m.d.sync += pc.eq(scalar.target)
                for unit, wait_state in waits.items():
                    with m.If(unit.ctl.hold):
                        m.d.sync += pc.eq(pc)
                    with m.If(unit.ctl.enter):
                        m.d.sync += state.eq(wait_state)
                with m.Switch(insn.op):       # the core's own: the die's barrier, MARK, HALT
                    with m.Case(Opcode.BAR):
                        m.d.comb += self.bar_req.eq(1)
                        with m.If(~self.bar_go):
                            m.d.sync += pc.eq(pc)
                    with m.Case(Opcode.MARK):
                        m.d.comb += self.trace.valid.eq(1)
                        with m.If(~self.trace.ready):
                            m.d.sync += pc.eq(pc)
                    with m.Case(Opcode.HALT):
                        m.d.sync += [state.eq(_State.HALT), pc.eq(pc)]
                    with m.Default():
                        pass

            for unit, wait_state in waits.items():
                with m.Case(wait_state):
                    with m.If(unit.ctl.leave):
                        m.d.sync += state.eq(_State.RUN)
                        with m.If(unit.ctl.advance):
                            m.d.sync += pc.eq(pc_next)

            with m.Default():
                pass

        # --- watchdog view -------------------------------------------------------------------
        run_bar = self.bar_req & ~self.bar_go
        m.d.comb += [
            self.waiting.eq(lsu.waiting | inc_waiting | run_bar),
            self.wait_addr.eq(Mux(lsu.waiting, lsu.wait_addr,
                                  Mux(inc_waiting, inc_wait_addr, Mux(run_bar, BAR_WAIT_ADDR, 0)))),
        ]
        return m


VERILOG_EXPORTS = {
    "aiv_core": (AIVCore, {"core_id": 0, "imem_depth": 64, "ubuf_rows": 2, "data_bytes": 32,
                           "lanes": 4, "width": 16, "max_outstanding": 7}),
}
