"""The 512 B atomic Unified Bus write port of a die (UBEP §2.3 Insight 2, §3.4).

UBEP's Data-as-Flag synchronization is correct because the UB fabric writes a
512 B DataBlock atomically: "A 512B DataBlock is written atomically and
observed by remote NPUs as a single transaction" (§3.4, *Correctness and
safety assumptions*). This port is where that guarantee lives in the model.

Design: commit the whole block in one write cycle
-------------------------------------------------
The HBM slice (:class:`~epfabric.hw.hbm.HBMSlice`) keeps one memory row per
DataBlock. In the default (atomic) mode a ``BLOCK_WRITE`` enables every lane
of that row at a single clock edge, so a reader samples the row either before
or after the edge: whole old block or whole new block, never a mix. No
double buffering or versioning is needed, and there is no window at all.

Throughput: one 512 B block committed per cycle = 512 B/cycle (512 GB/s at
``cycle_ns = 1``), above the 392 B/cycle a CM384 die link delivers (one block
every ~1.31 cycles), so the port never limits the link.

``non_atomic=True`` instead commits the block beat by beat, ``beat_bytes`` per
cycle, in address order (flag field first): ``512 // beat_bytes`` cycles per
block whatever ``data_bytes`` is (beats beyond the modelled bytes still take
their cycle). A reader that samples between beats sees a torn block. This
mode exists to show the race; it commits ``beat_bytes`` B/cycle.

Request layout (:func:`request_layout`) — what the fabric's flit will carry
----------------------------------------------------------------------------
===========  ==========================  ==========================================
field        shape                       meaning
===========  ==========================  ==========================================
``op``       :class:`UBOp` (2 bits)      BLOCK_WRITE, WORD_WRITE or FETCH_ADD
``addr``     ``ceil_log2(blocks)`` bits  DataBlock index in the destination slice
``word``     7 bits                      32-bit word offset in the 512 B block
``data``     ``8 * data_bytes`` bits     BLOCK_WRITE: the modelled block (little
                                         endian, byte 0 = bits 0..7);
                                         WORD_WRITE / FETCH_ADD: value / addend
                                         in bits 0..31
===========  ==========================  ==========================================

Every request is answered on ``o_resp`` (:func:`response_layout`: ``op``,
``addr``, ``old``) once it is committed, i.e. visible to every later read:
the answer is the write acknowledgement a sender fences on, and for
FETCH_ADD ``old`` is the value before the add. Word operations on a word
beyond ``data_bytes`` are dropped (FETCH_ADD answers 0); callers keep flags and
counters in the always-modelled leading 32 B.

Cycle costs (HBM read latency *L*): BLOCK_WRITE 1 cycle atomic,
``512 // beat_bytes`` non-atomic; WORD_WRITE 1; FETCH_ADD *L* + 1 (read, then
write; the port accepts nothing else meanwhile, which is what makes the add
atomic). The answer appears the cycle after the commit.
"""

from amaranth.lib import enum

from amaranth.hdl import Module, Signal, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from .hbm import (BLOCK_BYTES, WORD_BYTES, HBMSlice, ReadPortSignature, WritePortSignature,
                  addr_shape, check_blocks, check_data_bytes, word_shape)
from .validate import UserError, UserTypeError, check_bool, check_int, check_multiple

__all__ = ["UBOp", "request_layout", "response_layout", "UBPort", "UBMemory"]


class UBOp(enum.Enum, shape=2):
    """Operation of a UB request."""
    BLOCK_WRITE = 0  #: write a whole DataBlock (atomically unless ``non_atomic``)
    WORD_WRITE = 1   #: write one 32-bit word (flags, counts)
    FETCH_ADD = 2    #: atomically add to a 32-bit word, answer the old value


class _State(enum.Enum, shape=2):
    IDLE = 0
    BEAT = 1   # non-atomic: committing beats 1 .. beats-1
    RMW = 2    # fetch-add: waiting for the old value


def request_layout(*, blocks, data_bytes):
    """Layout of a UB request (see the module docstring table)."""
    return data.StructLayout({
        "op": UBOp,
        "addr": addr_shape(blocks),
        "word": word_shape(),
        "data": unsigned(data_bytes * 8),
    })


def response_layout(*, blocks):
    """Layout of a UB answer: the request's ``op`` and ``addr``, FETCH_ADD's ``old``."""
    return data.StructLayout({"op": UBOp, "addr": addr_shape(blocks), "old": unsigned(32)})


def _check_port_params(blocks, data_bytes, non_atomic, beat_bytes):
    check_blocks(blocks)
    check_data_bytes(data_bytes)
    check_bool("non_atomic", non_atomic)
    check_multiple("beat_bytes", beat_bytes, WORD_BYTES, WORD_BYTES, BLOCK_BYTES)
    if BLOCK_BYTES % beat_bytes:
        raise UserError(f"beat_bytes must divide {BLOCK_BYTES}, not {beat_bytes!r}")


class UBPort(wiring.Component):
    """512 B atomic UB write port (UBEP §3.4; docs/spec/design.md block 2).

    Accepts requests from the fabric on ``i_req`` and commits them into an
    HBM slice through ``mem_w`` (and ``mem_r`` for fetch-add). See the module
    docstring for the request layout, the commit design and cycle costs.

    Parameters
    ----------
    blocks : int
        DataBlocks in the HBM slice behind the port.
    data_bytes : int
        Modelled bytes per block (multiple of 32, >= 32); never changes cycles.
    non_atomic : bool
        Commit a block beat by beat instead of in one cycle (shows torn reads).
    beat_bytes : int
        Bytes committed per cycle when ``non_atomic``; a multiple of 4 that
        divides 512. Ignored in atomic mode.

    Attributes
    ----------
    i_req : In(stream.Signature(request_layout))
        Requests from the fabric.
    o_resp : Out(stream.Signature(response_layout))
        One answer per request once committed; back-pressure stalls ``i_req``.
    mem_w : Out(WritePortSignature)
        To the HBM slice's write port.
    mem_r : Out(ReadPortSignature)
        To one HBM read port (fetch-add reads the old value through it).
    commit_valid, commit_beat : Out
        A lane group is being written this cycle, and which beat (0 in atomic
        mode); for waveforms and counters.
    busy : Out(1)
        A multi-cycle operation is in progress.

    Raises
    ------
    ValueError, TypeError
        On a parameter out of range or of the wrong type.
    """

    def __init__(self, *, blocks=16, data_bytes=64, non_atomic=False, beat_bytes=64):
        _check_port_params(blocks, data_bytes, non_atomic, beat_bytes)
        self.blocks = blocks
        self.data_bytes = data_bytes
        self.non_atomic = non_atomic
        self.beat_bytes = beat_bytes if non_atomic else BLOCK_BYTES
        self.beats = BLOCK_BYTES // self.beat_bytes
        self.words = data_bytes // WORD_BYTES
        super().__init__({
            "i_req": In(stream.Signature(request_layout(blocks=blocks, data_bytes=data_bytes))),
            "o_resp": Out(stream.Signature(response_layout(blocks=blocks))),
            "mem_w": Out(WritePortSignature(blocks=blocks, data_bytes=data_bytes)),
            "mem_r": Out(ReadPortSignature(blocks=blocks, data_bytes=data_bytes)),
            "commit_valid": Out(1),
            "commit_beat": Out(range(max(2, self.beats))),
            "busy": Out(1),
        })

    def beat_mask(self, beat):
        """Lane-enable mask (one bit per modelled word) of commit beat ``beat``."""
        per = self.beat_bytes // WORD_BYTES
        full = (1 << self.words) - 1
        return (((1 << per) - 1) << (beat * per)) & full

    def elaborate(self, platform):
        m = Module()
        req = self.i_req.payload
        held = Signal.like(req)                 # request being committed / fetch-added
        beat = Signal(range(max(2, self.beats)))
        resp_free = ~self.o_resp.valid | self.o_resp.ready
        word_lane = Signal(self.words)          # one-hot lane of a word op, 0 if unmodelled
        held_lane = Signal(self.words)
        for k in range(self.words):
            m.d.comb += [word_lane[k].eq(req.word == k), held_lane[k].eq(held.word == k)]

        with m.If(self.o_resp.ready):
            m.d.sync += self.o_resp.valid.eq(0)

        def answer(op, addr, old=0):
            m.d.sync += [self.o_resp.valid.eq(1), self.o_resp.payload.op.eq(op),
                         self.o_resp.payload.addr.eq(addr), self.o_resp.payload.old.eq(old)]

        # An explicit state register (not m.FSM): ready/busy then become
        # continuous assignments, which Icarus evaluates from time 0 (an
        # `always @*` whose inputs never change stays X there).
        state = Signal(_State)
        idle = state == _State.IDLE
        m.d.comb += [
            self.busy.eq(~idle),
            self.i_req.ready.eq(idle & resp_free & self.mem_r.req.ready),
        ]
        accept = self.i_req.valid & self.i_req.ready
        added = Signal(32)
        m.d.comb += added.eq(self.mem_r.resp.payload.word + held.data[:32])

        with m.Switch(state):
            with m.Case(_State.IDLE):
                with m.If(accept):
                    m.d.comb += self.mem_w.addr.eq(req.addr)
                    m.d.sync += held.eq(req)
                    with m.Switch(req.op):
                        with m.Case(UBOp.BLOCK_WRITE):
                            m.d.comb += [self.mem_w.data.eq(req.data),
                                         self.mem_w.en.eq(self.beat_mask(0)),
                                         self.commit_valid.eq(1)]
                            if self.beats == 1:
                                answer(req.op, req.addr)
                            else:
                                m.d.sync += [beat.eq(1), state.eq(_State.BEAT)]
                        with m.Case(UBOp.WORD_WRITE):
                            m.d.comb += [self.mem_w.data.eq(req.data[:32].replicate(self.words)),
                                         self.mem_w.en.eq(word_lane),
                                         self.commit_valid.eq(word_lane.any())]
                            answer(req.op, req.addr)
                        with m.Case(UBOp.FETCH_ADD):
                            m.d.comb += [self.mem_r.req.valid.eq(1),
                                         self.mem_r.req.payload.addr.eq(req.addr),
                                         self.mem_r.req.payload.word.eq(req.word)]
                            m.d.sync += state.eq(_State.RMW)
            if self.beats > 1:
                with m.Case(_State.BEAT):
                    m.d.comb += [self.mem_w.addr.eq(held.addr), self.mem_w.data.eq(held.data),
                                 self.commit_valid.eq(1), self.commit_beat.eq(beat)]
                    with m.Switch(beat):
                        for k in range(1, self.beats):
                            with m.Case(k):
                                m.d.comb += self.mem_w.en.eq(self.beat_mask(k))
                    m.d.sync += beat.eq(beat + 1)
                    with m.If(beat == self.beats - 1):
                        answer(held.op, held.addr)
                        m.d.sync += [beat.eq(0), state.eq(_State.IDLE)]
            with m.Case(_State.RMW):
                with m.If(self.mem_r.resp.valid):
                    m.d.comb += [self.mem_w.addr.eq(held.addr),
                                 self.mem_w.data.eq(added.replicate(self.words)),
                                 self.mem_w.en.eq(held_lane),
                                 self.commit_valid.eq(held_lane.any())]
                    answer(held.op, held.addr, self.mem_r.resp.payload.word)
                    m.d.sync += state.eq(_State.IDLE)
        return m


class UBMemory(wiring.Component):
    """A die's UB-visible memory: :class:`UBPort` in front of an :class:`HBMSlice`.

    The port owns the slice's write port and read port 0; read ports
    ``1 .. read_ports`` of the slice are exposed as ``read[0 .. read_ports-1]``
    for local loads and polls (AIV cores, UBEP §3.4 receivers).

    Parameters
    ----------
    blocks, data_bytes, non_atomic, beat_bytes
        As for :class:`UBPort`.
    latency : int
        HBM read latency in cycles (see :class:`HBMSlice`).
    read_ports : int
        Local load/poll ports exposed.
    init : sequence of int, optional
        Initial block contents (see :class:`HBMSlice`).
    port : UBPort or None
        The port to put in front of the slice instead of building ``UBPort`` of these
        parameters: a variant of it (a formal harness's broken port). Default ``None``.

    Attributes
    ----------
    i_req, o_resp, commit_valid, commit_beat, busy
        The port's (see :class:`UBPort`).
    read : In(ReadPortSignature) array of ``read_ports``
        Local load/poll ports.
    idle : Out(1)
        No request offered or held, no answer pending and the slice idle: the next
        clock edge changes nothing (:attr:`epfabric.hw.die.Die.idle`).
    """

    def __init__(self, *, blocks=16, data_bytes=64, non_atomic=False, beat_bytes=64, latency=2,
                 read_ports=1, init=None, port=None):
        _check_port_params(blocks, data_bytes, non_atomic, beat_bytes)
        check_int("read_ports", read_ports, 1)
        if port is not None and not isinstance(port, UBPort):
            raise UserTypeError(f"port must be a UBPort or None, not {port!r}")
        self.port = port if port is not None else UBPort(
            blocks=blocks, data_bytes=data_bytes, non_atomic=non_atomic, beat_bytes=beat_bytes)
        self.hbm = HBMSlice(blocks=blocks, data_bytes=data_bytes, latency=latency,
                            read_ports=read_ports + 1, init=init)
        super().__init__({
            "i_req": In(stream.Signature(request_layout(blocks=blocks, data_bytes=data_bytes))),
            "o_resp": Out(stream.Signature(response_layout(blocks=blocks))),
            "read": In(ReadPortSignature(blocks=blocks, data_bytes=data_bytes)).array(read_ports),
            "commit_valid": Out(1),
            "commit_beat": Out(range(max(2, self.port.beats))),
            "busy": Out(1),
            "idle": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.port = port = self.port
        m.submodules.hbm = hbm = self.hbm
        wiring.connect(m, wiring.flipped(self.i_req), port.i_req)
        wiring.connect(m, port.o_resp, wiring.flipped(self.o_resp))
        wiring.connect(m, port.mem_w, hbm.w)
        wiring.connect(m, port.mem_r, hbm.read[0])
        for i in range(len(self.read)):
            wiring.connect(m, wiring.flipped(self.read[i]), hbm.read[i + 1])
        m.d.comb += [self.commit_valid.eq(port.commit_valid), self.commit_beat.eq(port.commit_beat),
                     self.busy.eq(port.busy),
                     self.idle.eq(~port.busy & ~port.o_resp.valid & ~self.i_req.valid & hbm.idle)]
        return m


VERILOG_EXPORTS = {
    "ub_port": (UBPort, {"blocks": 16, "data_bytes": 64, "non_atomic": False, "beat_bytes": 64}),
    "ub_memory": (UBMemory, {"blocks": 16, "data_bytes": 64, "non_atomic": False,
                             "beat_bytes": 64, "latency": 2, "read_ports": 1}),
}
