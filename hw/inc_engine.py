"""In-network-computing (INC) engine: switch multicast (AllGather) and reduction (ReduceScatter).

INC-MoE §3.1 "In-Network AllGather and ReduceScatter with Message Semantics":
end hosts never write each other's memory; every transfer is a message between
an end host and the switch, and the switch replicates (AG) or reduces (RS)
message payloads. The engine sits inside the switch of a
:func:`~epfabric.hw.topology.star` fabric built with ``attach=1``: flits with
``dst = ranks`` are delivered to its ``i_stream`` and its ``o_stream`` feeds
the switch like any rank.

Every flit is one 512 B DataBlock of a message and carries the message header
(:func:`inc_flit_layout`): operation, root, epoch, byte range (block offset
and length in the padded buffer), chunk index and completion address, plus a
few 32-bit words of payload (docs/spec/design.md ``data_bytes``: cycle counts never
depend on how many lanes are simulated): int32 lanes by default, or fp32 lanes, or two
bf16 lanes a word (``dtype``, :func:`reduce_lanes`).

Order of accumulation. A ReduceScatter chunk's contributions are added to its slot in the
order they reach the engine: the order the star switch's arbiter delivers them (arrival
order; an int32 slot stores the first as it is, a floating-point one adds it to ``-0``).
Nothing is buffered beyond the one partial sum per slot. With floating-point lanes the
result depends on that order, which is cycle-deterministic in the simulators but changes
with timing; a bf16 slot keeps an fp32 partial sum and the result is rounded to bf16 once,
when it leaves. The root then adds its own partial
(:class:`~epfabric.hw.inc_endpoint.IncEndpoint`), last. docs/concepts/inc-numerics.md
derives the error bound a checker uses.
"""

from amaranth.hdl import Cat, Module, Mux, Signal, unsigned
from amaranth.lib import data, enum, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2

from .lane_arith import (accumulate_lanes, accumulator_width, add_lanes, add_latency,
                         identity_lanes, pipeline, round_lanes, widen_lanes)
from .validate import UserError, check_int, check_pow2

__all__ = ["IncOp", "Completion", "inc_flit_layout", "reduce_lanes", "check_dtype", "IncEngine",
           "EPOCH_BITS", "DTYPES", "VERILOG_EXPORTS"]

#: Width of the epoch (operation sequence number) carried in every header; it
#: only tags aggregator slots, so it may wrap.
EPOCH_BITS = 8

#: Lane types of the engine's 32-bit payload words (bf16: two lanes a word, low half first).
DTYPES = ("int32", "fp32", "bf16")


class IncOp(enum.Enum, shape=3):
    """Message operation (INC-MoE §3.1).

    ``AG``/``RS``/``BARRIER`` are processed by the INC engine; ``RING_AG`` and
    ``RING_RS`` are the point-to-point flits of the ring baseline, which the
    switch merely forwards.
    """
    AG = 0
    RS = 1
    BARRIER = 2
    RING_AG = 3
    RING_RS = 4


class Completion(enum.Enum, shape=2):
    """Completion address: which cumulative counter the receiver bumps."""
    AG = 0
    RS = 1
    BARRIER = 2


def _bits(count):
    return max(1, ceil_log2(count))


def inc_flit_layout(*, ranks, tmax, lanes):
    """Flit of an INC message: header fields and ``lanes`` int32 payload lanes.

    ``dst``/``src``/``root`` address ``ranks + 1`` endpoints (the engine is
    address ``ranks``); ``offset`` is the block index in the padded buffer of
    ``ranks`` blocks of ``tmax`` rows (INC-MoE §3.1 "Data layout"), ``length``
    the message length in blocks, ``chunk`` the row within the root's block.

    Raises
    ------
    ValueError
        If ``ranks`` < 2, ``tmax`` < 1 or ``lanes`` < 1 (the parameter is named).
    """
    check_int("ranks", ranks, 2)
    check_int("tmax", tmax, 1)
    check_int("lanes", lanes, 1)
    abits = _bits(ranks + 1)
    obits = _bits(ranks * tmax)
    return data.StructLayout({
        "dst": abits,
        "src": abits,
        "op": IncOp,
        "root": abits,
        "epoch": EPOCH_BITS,
        "offset": obits,
        "length": obits + 1,
        "chunk": _bits(tmax),
        "compl": Completion,
        "data": data.ArrayLayout(32, lanes),
    })


def check_dtype(dtype):
    """``dtype`` if it is one of :data:`DTYPES`, else ``UserError`` naming it."""
    if dtype not in DTYPES:
        raise UserError(f"dtype must be 'int32', 'fp32' or 'bf16' (the lane types of a 32-bit "
                        f"word), not {dtype!r}")
    return dtype


def reduce_lanes(a, b, *, lanes, dtype="int32", m=None):
    """The reduction operator of the engine: lane-wise ``a + b`` over a flit's ``lanes`` words.

    The sum is :func:`~epfabric.hw.lane_arith.add_lanes`, the one lane arithmetic of the INC
    blocks; ``int32`` is exact two's-complement (wrapping) addition, bit-identical to numpy
    ``int32`` sums; ``fp32`` and ``bf16`` (two lanes a word) are rounded to nearest even
    (bf16: summed in fp32, rounded once).

    Parameters
    ----------
    a, b : Value
        ``lanes`` x 32-bit packed operands.
    lanes : int
    dtype : str
        One of :data:`DTYPES`.
    m : Module or None
        Where a floating-point sum's logic goes.

    Raises
    ------
    ValueError
        If ``dtype`` is not supported.
    """
    check_dtype(dtype)
    width = 32 * lanes
    return add_lanes(Cat(a)[:width], Cat(b)[:width], dtype=dtype, m=m)


class _State(enum.Enum, shape=2):
    IDLE = 0
    MCAST = 1
    SEND = 2
    ADD = 3         # a floating-point contribution in the sum's pipeline


class IncEngine(wiring.Component):
    """INC engine of one switch: AG multicast, RS aggregation, barrier (INC-MoE §3.1).

    * ``AG`` from root ``q``: multicast to the other ``ranks - 1`` ranks, one
      copy per cycle (starting at ``q + 1``, so that successive messages spread
      over the outputs), header unchanged except ``dst``.
    * ``RS`` for root ``q``, chunk ``c``: summed into an aggregator slot
      (:func:`reduce_lanes`'s lanes, in arrival order; a bf16 slot holds fp32 sums).
      Slots are a pool of ``slots`` entries, direct-mapped by the chunk's
      position ``c * ranks + q`` in the chunk-major order in
      which every rank issues its contributions, and tagged with
      (epoch, root, chunk), so different chunks are reduced in parallel. When
      the ``ranks - 1``-th contribution arrives the sum goes to the root at
      once and the slot is freed. A contribution whose slot holds another
      chunk waits (backpressure to the switch) until that chunk completes.
    * ``BARRIER``: arrivals are counted cumulatively; every ``ranks``-th
      arrival releases the barrier by multicasting it to all ranks.

    One flit per cycle is accepted when the output is free (line rate: a
    rank's link delivers one 512 B block per ``block_bytes / bandwidth``
    cycles, ~41 at 100 Gb/s); an AG flit occupies the engine for ``ranks - 1``
    cycles. A floating-point RS contribution occupies it ``1 + latency`` cycles
    (:func:`~epfabric.hw.lane_arith.add_latency`: the sum's register stages; state
    ``ADD``), after which its slot is written and a completed chunk sent: the engine
    keeps up with the links while ``ranks * (1 + latency)`` is below the cycles of one
    block (the pipeline is not shared between contributions, which keeps the slot logic
    of the integer engine: no two sums of one slot are ever in flight).

    Backpressure caveat: the engine has one input from the switch, so a
    contribution held back by a full slot also holds back the flits queued
    behind it in the switch. The ranks must therefore issue RS contributions
    in the same (chunk-major) order with a skew smaller than ``slots`` chunks;
    larger skews deadlock (a run then hits the system's watchdog).

    Parameters
    ----------
    ranks : int
        Ranks on the switch (>= 2); the engine is address ``ranks``.
    tmax : int
        Largest rows per rank block (sizes the header fields).
    lanes : int
        32-bit payload words simulated per flit.
    slots : int
        Aggregator slots (a power of two >= 1).
    dtype : str
        Reduction lane type, one of :data:`DTYPES` (:func:`reduce_lanes`).

    Attributes
    ----------
    i_stream : In(stream.Signature(inc_flit_layout(...)))
        Flits from the switch (``dst == ranks``).
    o_stream : Out(stream.Signature(inc_flit_layout(...)))
        Multicast copies, reduced chunks and barrier releases to the switch.
    o_slots_busy : Out(range(slots + 1))
        Aggregator slots currently holding a partial sum.
    o_slot_stalls : Out(32)
        Cycles a contribution waited for its slot.

    Raises
    ------
    ValueError
        On an invalid parameter (named in the message).
    """

    def __init__(self, *, ranks, tmax, lanes=2, slots=16, dtype="int32"):
        self.layout = inc_flit_layout(ranks=ranks, tmax=tmax, lanes=lanes)
        self.ranks, self.tmax, self.lanes = ranks, tmax, lanes
        check_pow2("slots", slots)
        self.slots = slots
        self.dtype = check_dtype(dtype)
        #: register stages of the sum (0: int32, in the cycle the contribution is taken)
        self.latency = add_latency(self.dtype)
        super().__init__({
            "i_stream": In(stream.Signature(self.layout)),
            "o_stream": Out(stream.Signature(self.layout)),
            "o_slots_busy": Out(range(slots + 1)),
            "o_slot_stalls": Out(32),
        })

    def elaborate(self, platform):
        m = Module()
        n, lanes = self.ranks, self.lanes
        inp, out = self.i_stream, self.o_stream
        head = inp.payload
        abits = len(head.root)

        # --- output register -------------------------------------------------
        o_valid = Signal()
        o_data = Signal(self.layout)
        m.d.comb += [out.valid.eq(o_valid), out.payload.eq(o_data)]
        o_free = ~o_valid | out.ready
        with m.If(out.ready):
            m.d.sync += o_valid.eq(0)

        # --- aggregator slots ----------------------------------------------
        tag_shape = unsigned(EPOCH_BITS + len(head.root) + len(head.chunk))
        width = 32 * lanes
        slot_layout = data.StructLayout({
            "valid": 1, "tag": tag_shape, "count": range(n),
            "acc": accumulator_width(width, dtype=self.dtype)})
        pool = Memory(shape=slot_layout, depth=self.slots, init=[])
        m.submodules.pool = pool
        wp = pool.write_port()
        rp = pool.read_port(domain="comb")
        key_bits = _bits(self.slots)
        key = Signal(key_bits)
        m.d.comb += key.eq((head.chunk * n + head.root)[:key_bits] if self.slots > 1 else 0)
        m.d.comb += rp.addr.eq(key)
        slot = rp.data
        tag = Signal(tag_shape)
        m.d.comb += tag.eq(Cat(head.root, head.chunk, head.epoch))
        hit = slot.valid & (slot.tag == tag)
        last = Signal()
        m.d.comb += last.eq(Mux(hit, slot.count, 0) == n - 2)
        summed = Signal(len(slot.acc))        # the partial sum, in the accumulator form
        state = Signal(_State)
        lat = self.latency
        if lat:
            # a floating-point sum: the decisions travel with it down the pipeline, which
            # holds while the sum waits at its end (state ADD, ``left`` = 0) for the output
            left = Signal(range(lat))
            at_end = Signal()
            m.d.comb += at_end.eq((state == _State.ADD) & (left == 0))
            advance = ~at_end
            rs = pipeline(m, {"key": key, "tag": tag, "hit": hit, "last": last,
                              "count": Mux(hit, slot.count + 1, 1), "head": head.as_value()},
                          lat, advance=advance)[-1]
            start = Mux(hit, slot.acc, identity_lanes(width, dtype=self.dtype))
            m.d.comb += summed.eq(accumulate_lanes(m, start, head.data, dtype=self.dtype,
                                                   latency=lat, advance=advance))
            rs_head = Signal(self.layout)
            m.d.comb += rs_head.eq(rs["head"])
            rs["head"] = rs_head
        else:
            m.d.comb += summed.eq(Mux(hit, accumulate_lanes(m, slot.acc, head.data,
                                                            dtype=self.dtype),
                                      widen_lanes(head.data, dtype=self.dtype)))
            rs = {"key": key, "tag": tag, "hit": hit, "last": last,
                  "count": Mux(hit, slot.count + 1, 1), "head": head}
        m.d.comb += [wp.addr.eq(rs["key"]), wp.data.tag.eq(rs["tag"]), wp.data.acc.eq(summed),
                     wp.data.count.eq(rs["count"]), wp.data.valid.eq(~rs["last"])]

        # --- barrier ---------------------------------------------------------
        arrivals = Signal(range(n))

        # --- multicast state -------------------------------------------------
        mc = Signal(self.layout)      # flit being multicast
        mc_dst = Signal(abits)        # next destination
        mc_left = Signal(range(n + 1))

        def nxt(r):
            return Mux(r == n - 1, 0, r + 1)

        # If/Elif chains rather than m.Switch: Yosys splits a Switch per
        # signal and drops the default arms, which Verilator flags as
        # CASEINCOMPLETE.
        with m.If(state == _State.IDLE):
            with m.If(head.op == IncOp.AG):
                m.d.comb += inp.ready.eq(1)
                with m.If(inp.valid):
                    m.d.sync += [mc.eq(head), mc_dst.eq(nxt(head.root)),
                                 mc_left.eq(n - 1), state.eq(_State.MCAST)]
            with m.Elif(head.op == IncOp.RS):
                free = ~slot.valid | hit
                m.d.comb += inp.ready.eq(free & (o_free | ~last) if not lat else free)
                with m.If(inp.valid & ~free):
                    m.d.sync += self.o_slot_stalls.eq(self.o_slot_stalls + 1)
                with m.If(inp.valid & inp.ready):
                    if lat:
                        m.d.sync += [state.eq(_State.ADD), left.eq(lat - 1)]
                    else:
                        self._retire(m, wp, rs, summed, o_valid, o_data)
            with m.Elif(head.op == IncOp.BARRIER):
                m.d.comb += inp.ready.eq(1)
                with m.If(inp.valid):
                    with m.If(arrivals == n - 1):
                        m.d.sync += [arrivals.eq(0), mc.eq(head), mc_dst.eq(0),
                                     mc_left.eq(n), state.eq(_State.MCAST)]
                    with m.Else():
                        m.d.sync += arrivals.eq(arrivals + 1)
            with m.Else():
                # Not an engine message (misrouted): dropped, never stalls.
                m.d.comb += inp.ready.eq(1)
        with m.Elif(state == _State.MCAST):
            with m.If(o_free):
                m.d.sync += [o_valid.eq(1), o_data.eq(mc), o_data.dst.eq(mc_dst),
                             o_data.src.eq(n), mc_dst.eq(nxt(mc_dst)),
                             mc_left.eq(mc_left - 1)]
                with m.If(mc_left == 1):
                    m.d.sync += state.eq(_State.IDLE)
                with m.If(nxt(mc_dst) == mc.root):
                    # Skip the root (an AG root keeps its own contribution).
                    with m.If(mc.op == IncOp.AG):
                        m.d.sync += mc_dst.eq(nxt(nxt(mc_dst)))
        if lat:
            with m.Elif(state == _State.ADD):
                with m.If(left != 0):
                    m.d.sync += left.eq(left - 1)
                with m.Elif(o_free | ~rs["last"]):
                    self._retire(m, wp, rs, summed, o_valid, o_data)
                    m.d.sync += state.eq(_State.IDLE)
        with m.Else():
            m.d.sync += state.eq(_State.IDLE)
        return m

    def _retire(self, m, wp, rs, summed, o_valid, o_data):
        """An RS contribution's sum leaves the adder: its slot written, the chunk sent to its
        root when it was the last, the busy slots counted."""
        n, busy = self.ranks, self.o_slots_busy
        m.d.comb += wp.en.eq(1)
        with m.If(rs["last"]):
            m.d.sync += [o_valid.eq(1), o_data.eq(rs["head"]),
                         o_data.dst.eq(rs["head"].root), o_data.src.eq(n),
                         o_data.data.eq(round_lanes(m, summed, dtype=self.dtype,
                                                    width=32 * self.lanes))]
        with m.If(~rs["hit"] & ~rs["last"]):
            m.d.sync += busy.eq(busy + 1)
        with m.Elif(rs["hit"] & rs["last"]):
            m.d.sync += busy.eq(busy - 1)


VERILOG_EXPORTS = {
    "inc_engine": (IncEngine, {"ranks": 4, "tmax": 4, "lanes": 2, "slots": 8, "dtype": "int32"}),
}
