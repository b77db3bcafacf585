"""Endpoint traffic engines for AllGather/ReduceScatter, INC and ring.

INC-MoE §3.1: an end host posts an AG or RS on a region of a registered
buffer; its network interface reads the payload, sends it to the switch and
writes incoming payloads into registered memory, signalling completion. The
buffers use the padded layout of §3.1 "Data layout": ``ranks`` blocks of
``tmax`` rows, rank ``r``'s ``T_r`` rows at the start of block ``r``. One row
is one 512 B DataBlock (one flit).

* :class:`IncEndpoint` issues in-network AG (its own rows, once, to the
  engine) and RS (its partials of every other rank's block, chunk-major) and,
  as the root, adds its own partial to each reduced chunk it receives.
* :class:`RingEndpoint` is the baseline (INC-MoE §3.2, Fig. 4): ring AG and
  ring RS in ``ranks - 1`` steps to the next rank through the switch (which
  only forwards), pipelined per chunk, the reduction at the endpoints.
* :class:`~epfabric.hw.agrs_system.AgrsSystem`, the system top, wires a ``star``
  fabric, the engine and ``ranks`` endpoints behind the shared host port
  (:mod:`epfabric.hw.host`).

Completion is cumulative (§3.1 "Concurrent operation"): every endpoint counts
received AG blocks, reduced RS chunks and barrier releases forever, and each
operation raises per-counter thresholds by what it expects; nothing is reset
between operations.
"""

from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal, signed
from amaranth.lib import enum, stream, wiring
from amaranth.lib.fifo import SyncFIFOBuffered
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out
from amaranth.utils import bits_for

from .inc_engine import Completion, IncOp, check_dtype, inc_flit_layout, reduce_lanes
from .validate import check_int

__all__ = ["Buffer", "IncEndpoint", "RingEndpoint", "MODES", "COUNTER_BITS", "agrs_memory_map",
           "agrs_control_map"]

MODES = ("inc", "ring")
COUNTER_BITS = 32


class Buffer(enum.Enum, shape=2):
    """Host-port buffer select: ``AG`` gather buffer, ``RS`` partials, ``OUT`` reduced shard."""
    AG = 0
    RS = 1
    OUT = 2


class _Phase(enum.Enum, shape=2):
    IDLE = 0
    BARRIER = 1
    WAIT = 2
    RUN = 3


def _ge(count, threshold):
    """``count >= threshold`` for cumulative wrapping counters (their distance is < 2**31)."""
    return ~(count - threshold)[COUNTER_BITS - 1]


class _Endpoint(wiring.Component):
    """Common part of the endpoints: memories, host port, counters, phases, AG issue.

    Parameters
    ----------
    rank : int
    ranks : int
    tmax : int
        Rows per rank block of the padded layout (capacity).
    lanes : int
        32-bit payload words per flit.
    dtype : str
        Lane type of the RS sums (:data:`~epfabric.hw.inc_engine.DTYPES`; default ``"int32"``).

    Attributes
    ----------
    tx, rx : streams of :func:`~epfabric.hw.inc_engine.inc_flit_layout`
    start : In(1)
        One-cycle pulse: begin one AG and one RS (and a barrier first if
        ``barrier``), with ``counts[q]`` rows for rank ``q``.
    concurrent : In(1)
        AG and RS at once (else RS after the AG completed here).
    barrier : In(1)
    counts : In(range(tmax + 1)).array(ranks)
    idle : Out(1)
    ag_count, rs_count, barrier_count : Out(32)
        Cumulative completion counters (never reset).
    host_buf, host_addr, host_wdata, host_lanes, host_we, host_rdata
        Host access to the buffers: ``host_we`` writes the lanes of row
        ``host_addr`` of ``host_buf`` enabled in ``host_lanes`` (only while
        idle); ``host_rdata`` is that row (combinational).
    """

    def __init__(self, *, rank, ranks, tmax, lanes=2, dtype="int32"):
        check_int("ranks", ranks, 2)
        check_int("rank", rank, 0, ranks - 1)
        self.dtype = check_dtype(dtype)
        self.layout = inc_flit_layout(ranks=ranks, tmax=tmax, lanes=lanes)
        self.rank, self.ranks, self.tmax, self.lanes = rank, ranks, tmax, lanes
        self._all_lanes = (1 << lanes) - 1
        flit = stream.Signature(self.layout)
        super().__init__({
            "tx": Out(flit), "rx": In(flit),
            "start": In(1), "concurrent": In(1), "barrier": In(1),
            "counts": In(range(tmax + 1)).array(ranks),
            "idle": Out(1, init=1),
            "ag_count": Out(COUNTER_BITS), "rs_count": Out(COUNTER_BITS),
            "barrier_count": Out(COUNTER_BITS),
            "host_buf": In(Buffer), "host_addr": In(bits_for(ranks * tmax - 1)),
            "host_wdata": In(32 * lanes), "host_lanes": In(lanes), "host_we": In(1),
            "host_rdata": Out(32 * lanes),
        })

    def _next(self):
        return (self.rank + 1) % self.ranks

    def elaborate(self, platform):
        m = Module()
        n, r, tmax, lanes = self.ranks, self.rank, self.tmax, self.lanes
        width = 32 * lanes
        mems = {}
        for name, depth in (("ag", n * tmax), ("rs", n * tmax), ("out", tmax)):
            mems[name] = m.submodules[f"{name}_mem"] = Memory(shape=width, depth=depth, init=[])

        phase = Signal(_Phase)
        epoch = Signal(8)
        ag_thr = Signal(COUNTER_BITS)
        rs_thr = Signal(COUNTER_BITS)
        bar_thr = Signal(COUNTER_BITS)
        conc = Signal()
        m.d.comb += self.idle.eq(phase == _Phase.IDLE)

        # Host port: reads always, writes only while idle (the receive path
        # owns the write ports during an operation).
        host_reads = {}
        for name, mem in mems.items():
            rp = mem.read_port(domain="comb")
            m.d.comb += rp.addr.eq(self.host_addr)
            host_reads[name] = rp.data
        with m.Switch(self.host_buf):
            with m.Case(Buffer.AG):
                m.d.comb += self.host_rdata.eq(host_reads["ag"])
            with m.Case(Buffer.RS):
                m.d.comb += self.host_rdata.eq(host_reads["rs"])
            with m.Default():
                m.d.comb += self.host_rdata.eq(host_reads["out"])
        # 32-bit lanes: the host writes one word at a time, the receive path whole rows
        writes = {name: mem.write_port(granularity=32) for name, mem in mems.items() if name != "rs"}
        rs_w = mems["rs"].write_port(granularity=32)
        m.d.comb += [rs_w.addr.eq(self.host_addr), rs_w.data.eq(self.host_wdata),
                     rs_w.en.eq(Mux(self.idle & self.host_we & (self.host_buf == Buffer.RS),
                                    self.host_lanes, 0))]
        for name, wp in writes.items():
            sel = Buffer.AG if name == "ag" else Buffer.OUT
            with m.If(self.idle):
                m.d.comb += [wp.addr.eq(self.host_addr), wp.data.eq(self.host_wdata),
                             wp.en.eq(Mux(self.host_we & (self.host_buf == sel), self.host_lanes, 0))]

        # --- AG issue: own rows r*tmax .. r*tmax + T_r - 1 ------------------
        ag_i = Signal(range(tmax + 1))
        ag_left = Signal()
        m.d.comb += ag_left.eq((phase == _Phase.RUN) & (ag_i < self.counts[r]))
        ag_rp = mems["ag"].read_port(domain="comb")
        m.d.comb += ag_rp.addr.eq(r * tmax + ag_i)
        ag_flit = Signal(self.layout)
        m.d.comb += [ag_flit.src.eq(r), ag_flit.root.eq(r), ag_flit.epoch.eq(epoch),
                     ag_flit.offset.eq(r * tmax + ag_i), ag_flit.length.eq(self.counts[r]),
                     ag_flit.chunk.eq(ag_i), ag_flit.compl.eq(Completion.AG),
                     ag_flit.data.eq(ag_rp.data)]

        # --- RS issue (mode-specific) ----------------------------------------
        rs_go = Signal()
        m.d.comb += rs_go.eq((phase == _Phase.RUN) & (conc | _ge(self.ag_count, ag_thr)))
        rs_flit, rs_left, rs_valid, rs_taken, rs_restart = self._rs_issue(m, mems["rs"], epoch, rs_go)

        # --- receive (mode-specific) ----------------------------------------
        fwd, bubble = self._receive(m, mems["rs"], writes)

        # --- transmit arbitration: forwards first; AG and RS rows interleaved in
        # proportion to their sizes (T_r : RS rows), so that both finish
        # together and the receive side sees the mix it has to carry
        # (Bresenham: bal = rs_sent * T_r - ag_sent * rs_rows).
        bal = Signal(signed(COUNTER_BITS))
        turn = Signal()
        m.d.comb += turn.eq(bal < 0)
        sel_fwd, sel_ag, sel_rs, sel_bar = Signal(), Signal(), Signal(), Signal()
        fwd_valid = fwd.r_rdy if fwd is not None else Const(0)
        # New rows enter only when no forward waits and (ring) the bubble
        # rule allows it (RingEndpoint docstring).
        inject = Signal()
        m.d.comb += inject.eq(~fwd_valid & bubble)
        m.d.comb += [
            sel_fwd.eq(fwd_valid),
            sel_ag.eq(inject & ag_left & (~rs_valid | ~turn)),
            sel_rs.eq(inject & rs_valid & (~ag_left | turn)),
            sel_bar.eq(phase == _Phase.BARRIER),
        ]
        with m.If(sel_bar):
            m.d.comb += [self.tx.valid.eq(1), self.tx.payload.dst.eq(n),
                         self.tx.payload.src.eq(r), self.tx.payload.op.eq(IncOp.BARRIER),
                         self.tx.payload.epoch.eq(epoch),
                         self.tx.payload.compl.eq(Completion.BARRIER)]
        if fwd is not None:
            with m.Elif(sel_fwd):
                m.d.comb += [self.tx.valid.eq(1), self.tx.payload.eq(fwd.r_data),
                             fwd.r_en.eq(self.tx.ready)]
        with m.Elif(sel_ag):
            m.d.comb += [self.tx.valid.eq(1), self.tx.payload.eq(ag_flit)]
            self._ag_route(m, self.tx.payload)
        with m.Elif(sel_rs):
            m.d.comb += [self.tx.valid.eq(1), self.tx.payload.eq(rs_flit)]
        sent = self.tx.valid & self.tx.ready
        rs_rows = self._rs_rows()
        with m.If(sent & sel_ag):
            m.d.sync += [ag_i.eq(ag_i + 1), bal.eq(bal - rs_rows)]
        with m.If(sent & sel_rs):
            m.d.sync += bal.eq(bal + self.counts[r])
        m.d.comb += rs_taken.eq(sent & sel_rs)

        # --- phases and thresholds ------------------------------------------
        others = 0
        for q in range(n):
            if q != r:
                others = others + self.counts[q]
        drained = fwd.level == 0 if fwd is not None else Const(1)
        with m.Switch(phase):
            with m.Case(_Phase.IDLE):
                with m.If(self.start):
                    m.d.sync += [epoch.eq(epoch + 1), ag_thr.eq(ag_thr + others),
                                 rs_thr.eq(rs_thr + self.counts[r]), conc.eq(self.concurrent),
                                 ag_i.eq(0), bal.eq(0), *rs_restart]
                    with m.If(self.barrier):
                        m.d.sync += [bar_thr.eq(bar_thr + 1), phase.eq(_Phase.BARRIER)]
                    with m.Else():
                        m.d.sync += phase.eq(_Phase.RUN)
            with m.Case(_Phase.BARRIER):
                with m.If(self.tx.ready):
                    m.d.sync += phase.eq(_Phase.WAIT)
            with m.Case(_Phase.WAIT):
                with m.If(_ge(self.barrier_count, bar_thr)):
                    m.d.sync += phase.eq(_Phase.RUN)
            with m.Case(_Phase.RUN):
                with m.If(~ag_left & ~rs_left & drained & _ge(self.ag_count, ag_thr)
                          & _ge(self.rs_count, rs_thr)):
                    m.d.sync += phase.eq(_Phase.IDLE)
            with m.Default():
                m.d.sync += phase.eq(_Phase.IDLE)
        return m

    def _bump(self, m, compl):
        with m.Switch(compl):
            with m.Case(Completion.AG):
                m.d.sync += self.ag_count.eq(self.ag_count + 1)
            with m.Case(Completion.RS):
                m.d.sync += self.rs_count.eq(self.rs_count + 1)
            with m.Default():
                m.d.sync += self.barrier_count.eq(self.barrier_count + 1)

    def _root_add(self, m, rs_mem, flit):
        """Root: OUT[chunk] = received sum + own partial RS[r*tmax + chunk] (read from ``rs_mem``)."""
        rp = rs_mem.read_port(domain="comb")
        m.d.comb += rp.addr.eq(flit.root * self.tmax + flit.chunk)
        total = Signal(32 * self.lanes)
        m.d.comb += total.eq(reduce_lanes(flit.data, rp.data, lanes=self.lanes, dtype=self.dtype,
                                          m=m))
        return total


class IncEndpoint(_Endpoint):
    """Endpoint of the in-network AG and RS (INC-MoE §3.1).

    AG: sends rows ``0 .. T_r-1`` of its own block once, to the engine
    (address ``ranks``); each AG flit received is written at its ``offset``.
    RS: for every row ``c`` and every other root ``q`` (chunk-major, the order
    the engine's slot pool relies on) with ``c < T_q``, sends its partial
    ``RS[q*tmax + c]`` to the engine; each reduced chunk it receives as the
    root is added to its own partial and written to ``OUT[chunk]``.
    Parameters and attributes as :class:`_Endpoint`.
    """

    def _ag_route(self, m, payload):
        m.d.comb += [payload.dst.eq(self.ranks), payload.op.eq(IncOp.AG)]

    def _rs_rows(self):
        return sum(self.counts[q] for q in range(self.ranks) if q != self.rank)

    def _rs_issue(self, m, rs_mem, epoch, go):
        """RS flits from ``rs_mem``: ``(flit, left, valid, taken, restart)``.

        ``taken`` is driven by the caller (the flit was sent); ``restart``
        are the statements that rewind the issue at an operation's start.
        """
        n, r, tmax = self.ranks, self.rank, self.tmax
        c = Signal(range(tmax + 1))
        q = Signal(range(n))
        left = Signal()
        valid = Signal()
        taken = Signal()
        count_q = Signal(range(tmax + 1))
        m.d.comb += count_q.eq(Array(self.counts)[q])
        m.d.comb += [left.eq(c < tmax), valid.eq(go & left & (q != r) & (c < count_q))]
        rp = rs_mem.read_port(domain="comb")
        m.d.comb += rp.addr.eq(q * tmax + c)
        flit = Signal(self.layout)
        m.d.comb += [flit.dst.eq(n), flit.src.eq(r), flit.op.eq(IncOp.RS), flit.root.eq(q),
                     flit.epoch.eq(epoch), flit.offset.eq(q * tmax + c), flit.length.eq(count_q),
                     flit.chunk.eq(c), flit.compl.eq(Completion.RS), flit.data.eq(rp.data)]
        with m.If(go & left & (taken | ~valid)):
            m.d.sync += [q.eq(Mux(q == n - 1, 0, q + 1)), c.eq(Mux(q == n - 1, c + 1, c))]
        return flit, left, valid, taken, [c.eq(0), q.eq(0)]

    def _receive(self, m, rs_mem, writes):
        """Receive into the ``writes`` ports: ``(forward queue or None, bubble rule holds)``."""
        rx = self.rx.payload
        m.d.comb += self.rx.ready.eq(1)
        got = self.rx.valid
        total = self._root_add(m, rs_mem, rx)
        with m.If(got):
            self._bump(m, rx.compl)
            with m.Switch(rx.op):
                with m.Case(IncOp.AG):
                    wp = writes["ag"]
                    m.d.comb += [wp.addr.eq(rx.offset), wp.data.eq(rx.data), wp.en.eq(self._all_lanes)]
                with m.Case(IncOp.RS):
                    wp = writes["out"]
                    m.d.comb += [wp.addr.eq(rx.chunk), wp.data.eq(total), wp.en.eq(self._all_lanes)]
                with m.Default():
                    pass
        return None, Const(1)     # no forward queue: new rows are always allowed


class RingEndpoint(_Endpoint):
    """Endpoint of the ring baseline (INC-MoE §3.2, Fig. 4), on the star's switch.

    Ring AG: sends its own rows to rank ``r+1``; every AG row received is
    written at its offset and, unless ``r+1`` is its root, forwarded to
    ``r+1`` (``ranks - 1`` steps, pipelined per row). Ring RS: starts the
    chain of block ``r-1`` by sending its partials of it to ``r+1``; a partial
    of block ``q`` received is added to its own partial of ``q`` and either
    forwarded (``q != r``) or, at the root, written to ``OUT``.

    Flow control (bubble rule, after Carrión et al. 1997 / Puente et al. 1999
    for rings of FIFOs): the ring is a cycle of FIFO buffers — the forward
    queue of rank ``r``, its up-link, the switch input FIFO and output
    register for ``r+1`` (used by this flow only), the down-link, the forward
    queue of ``r+1``, and so on. A row moves into the next buffer when that
    has one free entry; a row that ends at this rank (an AG row whose root is
    ``r+1``, an RS row of block ``r``) is consumed without needing any. A
    rank puts a *new* row (its own AG row or the start of an RS chain) on the
    link only when no forward is waiting and its forward queue has at least
    two free entries. Why it cannot deadlock: before an injection the ring
    then has >= 2 free entries (the link's and the queue's spare one), so
    after it >= 1; moves keep the number of rows and consumption lowers it,
    hence the ring is never completely full. In a cycle of FIFOs that is not
    full and not empty some non-empty buffer is followed by one with room,
    so its head moves after a bounded time (link latency and rate credit;
    the switch output has a single requester), and every move brings a row
    one hop closer to its last rank. No constant is tuned: the rule holds for
    any :attr:`FORWARD_DEPTH` >= 2 and any link depth. Forwards also have
    priority on the link, which keeps the chains pipelined at line rate.
    Parameters and attributes as :class:`_Endpoint`.
    """

    #: Forward queue entries (>= 2 for the bubble rule; 4 covers the links'
    #: two-block rate bursts so forwards rarely stall the down-link).
    FORWARD_DEPTH = 4

    def _ag_route(self, m, payload):
        m.d.comb += [payload.dst.eq(self._next()), payload.op.eq(IncOp.RING_AG)]

    def _rs_rows(self):
        return self.counts[(self.rank - 1) % self.ranks]

    def _rs_issue(self, m, rs_mem, epoch, go):
        """As :meth:`IncEndpoint._rs_issue`, for the chain of block ``r - 1``."""
        n, r, tmax = self.ranks, self.rank, self.tmax
        q = (r - 1) % n
        c = Signal(range(tmax + 1))
        left = Signal()
        taken = Signal()
        m.d.comb += left.eq(c < self.counts[q])
        rp = rs_mem.read_port(domain="comb")
        m.d.comb += rp.addr.eq(q * tmax + c)
        flit = Signal(self.layout)
        m.d.comb += [flit.dst.eq(self._next()), flit.src.eq(r), flit.op.eq(IncOp.RING_RS),
                     flit.root.eq(q), flit.epoch.eq(epoch), flit.offset.eq(q * tmax + c),
                     flit.length.eq(self.counts[q]), flit.chunk.eq(c),
                     flit.compl.eq(Completion.RS), flit.data.eq(rp.data)]
        with m.If(taken):
            m.d.sync += c.eq(c + 1)
        return flit, left, go & left, taken, [c.eq(0)]

    def _receive(self, m, rs_mem, writes):
        """As :meth:`IncEndpoint._receive`; the bubble rule is the class docstring's."""
        r, nxt = self.rank, self._next()
        layout = self.layout
        width = len(Cat(self.rx.payload))
        fwd = m.submodules.forward = SyncFIFOBuffered(width=width, depth=self.FORWARD_DEPTH)
        rx = self.rx.payload
        total = self._root_add(m, rs_mem, rx)
        is_ag = rx.op == IncOp.RING_AG
        is_rs = rx.op == IncOp.RING_RS
        # A row ends here when this rank is the last of its chain: an AG row
        # whose root is the next rank, an RS row of this rank's own block.
        forward = Signal()
        m.d.comb += forward.eq((is_ag & (rx.root != nxt)) | (is_rs & (rx.root != r)))
        # Terminal rows never need queue space (flow-control rule, class docstring).
        m.d.comb += self.rx.ready.eq(fwd.w_rdy | ~forward)
        got = self.rx.valid & self.rx.ready
        # The forwarded flit as ONE expression (dst and src are the layout's
        # first fields): constant field overrides of a copied struct become
        # `always @*` blocks with no inputs, which Verilator never runs
        # (ALWNEVER: dst stayed 0, every forward went to rank 0) and Icarus
        # leaves X — the ring hang of both cocotb simulators.
        abits = layout["dst"].width
        assert layout["dst"].offset == 0 and layout["src"].offset == abits
        d_off = layout["data"].offset
        bits = rx.as_value()
        m.d.comb += fwd.w_data.eq(Cat(Const(nxt, abits), Const(r, abits), bits[2 * abits:d_off],
                                      Mux(is_rs, total, rx.data.as_value())))
        m.d.comb += fwd.w_en.eq(got & forward)
        with m.If(got):
            with m.If(is_ag):
                wp = writes["ag"]
                m.d.comb += [wp.addr.eq(rx.offset), wp.data.eq(rx.data), wp.en.eq(self._all_lanes)]
                m.d.sync += self.ag_count.eq(self.ag_count + 1)
            with m.Elif(is_rs):
                with m.If(rx.root == r):
                    wp = writes["out"]
                    m.d.comb += [wp.addr.eq(rx.chunk), wp.data.eq(total), wp.en.eq(self._all_lanes)]
                    m.d.sync += self.rs_count.eq(self.rs_count + 1)
            with m.Else():
                self._bump(m, rx.compl)
        bubble = Signal()
        m.d.comb += bubble.eq(fwd.level <= self.FORWARD_DEPTH - 2)
        return fwd, bubble

    # _root_add: the base's — on a ring every hop adds its own partial of the
    # block the flit belongs to, the same sum the INC root adds at the end.


def agrs_memory_map(ranks, tmax):
    """First DataBlock of each buffer in the host's view of one rank's memory.

    ``{"ag": 0, "out": ranks*tmax, "rs": ranks*tmax + tmax, "end": 2*ranks*tmax + tmax}``:
    the gather buffer (``ranks`` blocks of ``tmax`` rows, padded layout), the
    reduced shard (``tmax`` rows), then the RS partials (``ranks * tmax`` rows).
    One row is one 512 B DataBlock; word ``k < lanes`` of a block is lane ``k``.
    """
    check_int("ranks", ranks, 2)
    check_int("tmax", tmax, 1)
    out = ranks * tmax
    return {"ag": 0, "out": out, "rs": out + tmax, "end": 2 * out + tmax}


def agrs_control_map(ranks):
    """Control registers (host target CTRL, register ``addr``) of an
    :class:`~epfabric.hw.agrs_system.AgrsSystem`.

    ``counts`` + q (q < ranks): rows ``T_q`` of rank q in the next operation;
    ``concurrent``: AG and RS at once (else RS after AG); ``barrier``: a
    cross-rank barrier first (INC mode only).
    """
    check_int("ranks", ranks, 2)
    return {"counts": 0, "concurrent": ranks, "barrier": ranks + 1}
