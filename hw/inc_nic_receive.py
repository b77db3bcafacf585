"""The INC NIC's receive side: rows written to HBM and counted; in the ring, summed and forwarded.

INC-MoE §3.1, docs/spec/kernels.md §2.2–2.6. The behaviour and the ring's flow-control
argument are specified in :class:`~epfabric.hw.inc_nic.IncNic`'s docstring;
:class:`IncReceiver` and :class:`RingReceiver` implement its two modes and
:class:`Completions` the write and the counters both share.
"""

from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.fifo import SyncFIFOBuffered
from amaranth.lib.wiring import In, Out

from .inc_engine import Completion, IncOp, inc_flit_layout, reduce_lanes
from .inc_nic_memory import write_layout
from .isa import RANK_BITS, block_bits, check_rank_bits
from .validate import check_int, check_multiple

__all__ = ["COUNTER_BITS", "row_layout", "Completions", "Receiver", "IncReceiver",
           "RingReceiver"]

#: Width of the completion counters.
COUNTER_BITS = 32


def row_layout(rank_bits, data_bytes):
    """A received row to write: HBM ``block``, its ``data`` and the counter it completes."""
    return data.StructLayout({"block": block_bits(rank_bits), "data": 8 * data_bytes,
                              "compl": Completion})


class Completions(wiring.Component):
    """The receive side's one write request, and the completion counters it bumps.

    A row taken on ``take`` is held as a WRITE_BLOCK request on ``write``
    until accepted; at the edge it is accepted (the router commits the block
    at that edge) ``ag_count`` or ``rs_count`` is bumped, so a core that sees
    the counter and then reads the block reads the new data. ``take`` is
    ready when no write is held or the held one is accepted in this cycle.
    ``release`` bumps ``bar_count``. The counters are cumulative, never reset.

    Parameters
    ----------
    data_bytes : int
        Modelled bytes of a block: a multiple of 32 in [32, 512].
    rank_bits : int
        Width of an address's rank field (default 8): sizes ``block``.

    Attributes
    ----------
    take : In(stream.Signature(row_layout(rank_bits, data_bytes)))
        A row to write.
    write : Out(stream.Signature(write_layout(rank_bits, data_bytes)))
        The write request (:class:`~epfabric.hw.inc_nic_memory.MemoryPort` ``write``).
    release : In(1)
        A BARRIER release was received.
    ag_count, rs_count, bar_count : Out(COUNTER_BITS)
        Cumulative completion counters.
    busy : Out(1)
        A write is held.

    Raises
    ------
    TypeError, ValueError
        On a parameter of the wrong type or out of range (named in the message).
    """

    def __init__(self, *, data_bytes, rank_bits=RANK_BITS):
        check_multiple("data_bytes", data_bytes, 32, 32, 512)
        check_rank_bits(rank_bits)
        super().__init__({
            "take": In(stream.Signature(row_layout(rank_bits, data_bytes))),
            "write": Out(stream.Signature(write_layout(rank_bits, data_bytes))),
            "release": In(1),
            "ag_count": Out(COUNTER_BITS), "rs_count": Out(COUNTER_BITS),
            "bar_count": Out(COUNTER_BITS),
            "busy": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        wr_valid = Signal()
        wr_kind = Signal(Completion)
        wr = self.write.payload
        m.d.comb += [self.write.valid.eq(wr_valid), self.busy.eq(wr_valid)]
        accepted = self.write.valid & self.write.ready
        with m.If(accepted):
            m.d.sync += wr_valid.eq(0)
            with m.If(wr_kind == Completion.AG):
                m.d.sync += self.ag_count.eq(self.ag_count + 1)
            with m.Elif(wr_kind == Completion.RS):
                m.d.sync += self.rs_count.eq(self.rs_count + 1)
        with m.If(self.release):
            m.d.sync += self.bar_count.eq(self.bar_count + 1)
        m.d.comb += self.take.ready.eq(~wr_valid | accepted)
        row = self.take.payload
        with m.If(self.take.valid & self.take.ready):
            m.d.sync += [wr_valid.eq(1), wr.block.eq(row.block), wr.data.eq(row.data),
                         wr_kind.eq(row.compl)]
        return m


class Receiver(wiring.Component):
    """The receive side of an :class:`~epfabric.hw.inc_nic.IncNic`: the ports both modes share.

    Parameters
    ----------
    ranks, tmax, data_bytes, xg_base, rsin_base, z_base, rank_bits
        As for :class:`~epfabric.hw.inc_nic.IncNic`.

    Attributes
    ----------
    me, nxt : In(RANK_BITS)
        This rank and the next one on the ring.
    rx : In(stream.Signature(inc_flit_layout(ranks, tmax, data_bytes // 4)))
        Flits from the switch.
    take : Out(stream.Signature(row_layout(rank_bits, data_bytes)))
        Rows to write (:class:`Completions`).
    write_busy : In(1)
        :class:`Completions` holds a write.
    read : Out(stream.Signature(block_bits(rank_bits)))
        Ring: the own partial's READ_BLOCK (INC: never valid).
    read_busy, read_done, read_data : In(1), In(1), In(8 * data_bytes)
        The memory port has a read outstanding; the answer to ``read``.
    forward : Out(stream.Signature(inc_flit_layout(...)))
        Ring: the forward queue's head (INC: never valid).
    inject : Out(1)
        A new row (own AG row, start of an RS chain, BARRIER) may be presented on ``tx``
        (ring: the bubble rule; INC: always).
    busy : Out(1)
        A row held or queued for forwarding.

    Raises
    ------
    TypeError, ValueError
        On a parameter of the wrong type or out of range (named in the message).
    """

    def __init__(self, *, ranks, tmax, data_bytes, xg_base, rsin_base, z_base,
                 rank_bits=RANK_BITS):
        check_multiple("data_bytes", data_bytes, 32, 32, 512)
        for name, base in (("xg_base", xg_base), ("rsin_base", rsin_base), ("z_base", z_base)):
            check_int(name, base, 0)
        check_rank_bits(rank_bits, ranks)
        self.xg_base, self.rsin_base, self.z_base = xg_base, rsin_base, z_base
        self.lanes = data_bytes // 4
        self.layout = inc_flit_layout(ranks=ranks, tmax=tmax, lanes=self.lanes)
        flit = stream.Signature(self.layout)
        super().__init__({
            "me": In(RANK_BITS), "nxt": In(RANK_BITS),
            "rx": In(flit),
            "take": Out(stream.Signature(row_layout(rank_bits, data_bytes))),
            "write_busy": In(1),
            "read": Out(stream.Signature(block_bits(rank_bits))),
            "read_busy": In(1), "read_done": In(1), "read_data": In(8 * data_bytes),
            "forward": Out(flit),
            "inject": Out(1),
            "busy": Out(1),
        })


class IncReceiver(Receiver):
    """INC receive side: an AG flit to XG block ``offset``, an RS flit (the switch's sum) to RSIN
    block ``chunk``, counted when written; BARRIER releases (and stray flits) need no write.

    A flit is taken in the cycle :class:`Completions` can take its row (the
    write request is registered: on ``mem_req`` one cycle later). Nothing is
    read or forwarded; ``inject`` is always 1. See :class:`Receiver` for the
    ports.
    """

    def elaborate(self, platform):
        m = Module()
        rx, take = self.rx.payload, self.take
        rx_ag = rx.op == IncOp.AG
        rx_rs = rx.op == IncOp.RS
        m.d.comb += [take.valid.eq(self.rx.valid & (rx_ag | rx_rs)),
                     take.payload.block.eq(Mux(rx_ag, self.xg_base + rx.offset,
                                               self.rsin_base + rx.chunk)),
                     take.payload.data.eq(rx.data.as_value()),
                     take.payload.compl.eq(Mux(rx_ag, Completion.AG, Completion.RS)),
                     # BARRIER releases and stray (ring) flits need no write
                     self.rx.ready.eq(take.ready | ~(rx_ag | rx_rs)),
                     self.inject.eq(1)]
        return m


class RingReceiver(Receiver):
    """Ring receive side: a row written, summed with the own partial, and/or forwarded to ``nxt``.

    A RING_AG row is written to XG block ``offset`` and forwarded unless
    ``nxt`` is its root. A RING_RS row of root q, chunk c is added lane-wise
    (:func:`~epfabric.hw.inc_engine.reduce_lanes`) to the own Z row
    ``q*tmax + c`` (``read``); for q != me the sum is forwarded, for q == me
    written to RSIN block c. ``inject`` is the bubble rule below. See
    :class:`Receiver` for the ports.

    Ring flow control (the bubble rule of
    :class:`~epfabric.hw.inc_endpoint.RingEndpoint`): the ring is a cycle of
    FIFO buffers — this NIC's forward path, its tx slot, its up-link, the
    switch input FIFO and output register towards ``next``, the down-link,
    the next NIC's forward path, and so on. The forward path is the receive
    register plus the forward queue (:attr:`FORWARD_DEPTH` entries): a row
    received that must be forwarded is accepted only when the receive
    register is free and the forward queue has a free entry, which is then
    reserved for it (nothing else writes the queue), so the pair acts as one
    FIFO of ``FORWARD_DEPTH`` entries. A row that ends here (a RING_AG row
    whose root is ``next``, a RING_RS row of root me) needs no entry. The tx
    slot holds the flit presented on ``tx`` until it is taken (forwards
    first, then own rows); a *new* row (own AG row, start of an RS chain, or
    a BARRIER flit) is presented only when the forward queue is empty and the
    forward path has at least two free entries. Deadlock freedom: before an
    injection the ring has >= 2 free entries, so after it >= 1; moves keep the
    number of rows and consumption lowers it, hence the ring is never full.
    In a cycle of FIFOs that is neither full nor empty some non-empty buffer
    is followed by one with room, so its head moves after a bounded time
    (link latency and rate credit); the receive register holds a row only a
    bounded time (its HBM read and write always complete: the memory port is
    round-robin and does not depend on the network), and every move brings a
    row one hop closer to its last rank. Caveat: BARRIER flits and releases
    share the links with the ring rows; the argument counts them as rows
    (they are consumed without needing space), but a release the engine is
    multicasting can wait behind ring rows on a full down-link while the
    engine's input holds the next barrier flit; with a ring nearly full this
    head-of-line wait is not covered by the argument, so in ring mode a BAR
    is safest posted when the ring traffic of earlier posts has drained (the
    INC-MoE pipeline of the ring baseline needs no barrier).
    """

    #: Forward queue entries (>= 2 for the bubble rule).
    FORWARD_DEPTH = 4

    def elaborate(self, platform):
        m = Module()
        lay, depth = self.layout, self.FORWARD_DEPTH
        abits = lay["dst"].width
        me, nxt, rx = self.me, self.nxt, self.rx.payload
        fwd = m.submodules.forward = SyncFIFOBuffered(width=len(Cat(rx)), depth=depth)
        rcv_valid = Signal()
        rcv = Signal(lay)
        rcv_fwd = Signal()       # will be forwarded (an entry of the queue is reserved)
        rcv_read = Signal()      # RING_RS: own-partial read not yet issued
        rcv_wait = Signal()      # RING_RS: own-partial read outstanding
        rx_ag = rx.op == IncOp.RING_AG
        rx_rs = rx.op == IncOp.RING_RS
        forward = Signal()
        m.d.comb += forward.eq((rx_ag & (rx.root != nxt)) | (rx_rs & (rx.root != me)))
        room = fwd.level < depth
        m.d.comb += self.rx.ready.eq(Mux(rx_ag | rx_rs, ~rcv_valid & (room | ~forward), 1))
        take = self.rx.valid & self.rx.ready & (rx_ag | rx_rs)
        with m.If(take):
            m.d.sync += [rcv_valid.eq(1), rcv.eq(rx), rcv_fwd.eq(forward),
                         rcv_read.eq(rx_rs), rcv_wait.eq(0)]
        # own partial of the flit's block: Z row offset (= root*tmax + chunk)
        m.d.comb += [self.read.valid.eq(rcv_valid & rcv_read & ~self.read_busy),
                     self.read.payload.eq(self.z_base + rcv.offset)]
        with m.If(self.read.valid & self.read.ready):
            m.d.sync += [rcv_read.eq(0), rcv_wait.eq(1)]
        with m.If(self.read_done):
            m.d.sync += [rcv_wait.eq(0),
                         rcv.data.eq(reduce_lanes(rcv.data, self.read_data, lanes=self.lanes))]
        ready = rcv_valid & ~rcv_read & ~rcv_wait
        r_ag = rcv.op == IncOp.RING_AG
        needs_write = r_ag | ~rcv_fwd     # AG rows are always written; RS rows at the root
        finish = ready & (~needs_write | ~self.write_busy)
        # the forwarded flit as ONE expression (hw/inc_endpoint.py RingEndpoint._receive)
        assert lay["dst"].offset == 0 and lay["src"].offset == abits
        bits = rcv.as_value()
        m.d.comb += [fwd.w_data.eq(Cat(nxt[:abits], me[:abits], bits[2 * abits:])),
                     fwd.w_en.eq(finish & rcv_fwd)]
        m.d.comb += [self.take.valid.eq(finish & needs_write),
                     self.take.payload.block.eq(Mux(r_ag, self.xg_base + rcv.offset,
                                                    self.rsin_base + rcv.chunk)),
                     self.take.payload.data.eq(rcv.data.as_value()),
                     self.take.payload.compl.eq(Mux(r_ag, Completion.AG, Completion.RS))]
        with m.If(finish):
            m.d.sync += rcv_valid.eq(0)
        m.d.comb += [self.forward.valid.eq(fwd.r_rdy), self.forward.payload.eq(fwd.r_data),
                     fwd.r_en.eq(self.forward.ready)]
        # the bubble rule: a new row only with the queue empty and >= 2 entries free
        used = fwd.level + (rcv_valid & rcv_fwd)
        m.d.comb += [self.inject.eq((fwd.level == 0) & (used <= depth - 2)),
                     self.busy.eq(rcv_valid | (fwd.level != 0))]
        return m
