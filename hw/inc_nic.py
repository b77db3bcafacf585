"""Network interface of one die for INC-MoE posts: AG, RS, barrier (INC-MoE §3.1, docs/spec/kernels.md §2.2–2.6).

The die's AIV cores *post* collective operations on registered regions of the
die's HBM and wait on cumulative completion counters; the NIC reads and
writes the HBM itself through one memory request port (one more requester on
the die's :class:`~epfabric.hw.router.DieRouter`, always addressing its own
rank) and exchanges :func:`~epfabric.hw.inc_engine.inc_flit_layout` flits
with a ``star(..., attach=1)`` switch carrying the
:class:`~epfabric.hw.inc_engine.IncEngine` (address ``ranks``), wired like
:class:`~epfabric.hw.inc_endpoint.AgrsSystem` wires its endpoints.

Unlike :class:`~epfabric.hw.inc_endpoint.IncEndpoint` it has no memories of
its own and no host-started operations: work arrives as posts, one band at a
time (docs/spec/kernels.md §2.4), and AG and RS posts are issued by two independent
engines so that AG(j+1) and RS(j) share the link.
"""

from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal
from amaranth.lib import data, enum, stream, wiring
from amaranth.lib.fifo import SyncFIFO, SyncFIFOBuffered
from amaranth.lib.wiring import In, Out

from .aiv_core import ACK_COUNT_BITS, MemOp, mem_req_layout, mem_rsp_layout
from .arbiter import RoundRobin
from .inc_endpoint import MODES
from .inc_engine import EPOCH_BITS, Completion, IncOp, inc_flit_layout, reduce_lanes
from .isa import BLOCK_BITS, RANK_BITS, address_layout, block_bits, check_rank_bits
from .validate import UserError, check_choice, check_int, check_multiple, check_pow2

__all__ = ["PostOp", "post_layout", "IncNic", "IssueEngine", "VERILOG_EXPORTS"]

COUNTER_BITS = 32


class PostOp(enum.Enum, shape=2):
    """Operation of a post (``post.payload.op``)."""
    AG = 0   #: AllGather rows [a, a+b) of the own block (to the RS-independent AG engine)
    RS = 1   #: ReduceScatter rows [a, a+b) (RS engine)
    BAR = 2  #: cross-rank barrier (RS engine, in order after the RS posts before it)
    CNT = 3  #: ``counts[a] = b``: rows T_a of rank a


#: A post: operation and two operands (row0/rows for AG and RS, rank/rows for CNT).
post_layout = data.StructLayout({"op": PostOp, "a": 32, "b": 32})

# tx source select (0: nothing)
_NONE, _FWD, _AG, _RS = 0, 1, 2, 3


class IncNic(wiring.Component):
    """NIC of one rank: posted AG/RS/barrier on registered HBM regions (INC-MoE §3.1).

    Registered regions of the die's HBM (DataBlocks, one row = one block,
    padded layout of §3.1 "Data layout"):

    ====== ====================== ==============================================
    region blocks                 contents
    ====== ====================== ==============================================
    XG     ``ranks * tmax`` at    gather buffer: rank q's row c at
           ``xg_base``            ``xg_base + q*tmax + c``
    Z      ``ranks * tmax`` at    RS partials: this rank's partial of rank q's
           ``z_base``             row c at ``z_base + q*tmax + c``
    RSIN   ``tmax`` at            reduced rows for this rank: row c at
           ``rsin_base``          ``rsin_base + c``
    ====== ====================== ==============================================

    Posts (``post`` stream, :data:`post_layout`, ``me`` = ``rank``):

    * ``CNT(a, b)``: ``counts[a] = min(b, tmax)`` (ignored when ``a >= ranks``).
      It is accepted only when both issue engines are idle (queues empty, no
      post being issued), so it takes effect after every earlier post was
      issued and before any later one: ``post.ready`` stays low until then.
      Flits already built keep the counts they were built with; the receive
      side does not use the counts.
    * ``AG(a=row0, b=rows)`` (AG queue). INC: for c in [row0, min(row0+rows,
      T_me)) ascending, XG row ``me*tmax + c`` goes to the engine as one AG
      flit (root me, offset ``me*tmax + c``, length T_me, chunk c, compl AG).
      Ring: the same rows go to ``next = (me+1) % ranks`` as RING_AG flits.
    * ``RS(a=row0, b=rows)`` (RS queue). INC: for c in [row0, row0+rows),
      for q = 0..ranks-1, q != me, c < T_q (chunk-major, the order of the
      engine's slot pool), Z row ``q*tmax + c`` goes to the engine as an RS
      flit (root q, offset ``q*tmax + c``, length T_q, chunk c, compl RS).
      Ring: starts the chain of block ``p = (me-1) % ranks``: Z rows
      ``p*tmax + c``, c in [row0, min(row0+rows, T_p)), to ``next`` as RING_RS.
    * ``BAR`` (RS queue): one BARRIER flit to the engine, sent only after
      every flit of the RS posts before it was sent (both modes).

    The two queues (``post_depth`` entries each; ``post.ready`` is low while
    the target queue is full) feed two independent issue engines; when both
    have a flit ready, tx alternates between them (round-robin), so AG(j+1)
    and RS(j) of the band pipeline overlap on the link. The flit presented
    on ``tx`` is held until taken, so the round-robin choice only decides
    when both become eligible in the same cycle (ring mode, when the forward
    queue drains); otherwise flits leave in the order they became ready,
    which alternates too, as each engine holds one flit and the memory port
    reads one block at a time.

    Epochs: AG flits carry the number of AG posts issued so far, RS flits the
    number of RS posts (mod 256). The engine tags its aggregator slots with
    (epoch, root, chunk), so **every rank must post the same sequence of RS
    posts** (the same bands, also ranks with no rows in them: docs/spec/kernels.md
    §2.4 "Empty bands"), and ranks must not drift more than the engine's
    ``slots`` chunk positions apart (the per-band barrier before RS does that).

    Receive side and completion counters (cumulative, never reset: epochs of
    INC-MoE §3.1; waiters compare against increasing thresholds):

    * INC: an AG flit is written to XG block ``offset`` and ``ag_count`` += 1;
      an RS flit (the switch's sum, for root me) is written to RSIN block
      ``chunk`` and ``rs_count`` += 1; a BARRIER release bumps ``bar_count``.
      **RSIN holds the sum over the other ranks only**: the root's own
      partial (Z row ``me*tmax + c``) is added by the AIV cores (docs/spec/kernels.md
      §2.6), not here.
    * Ring: a RING_AG flit is written to XG block ``offset`` (``ag_count`` +=
      1) and forwarded to ``next`` unless ``next`` is its root. A RING_RS flit
      of root q, chunk c is added lane-wise (:func:`reduce_lanes`) to the own
      Z row ``q*tmax + c`` (read from HBM); for q != me the sum is forwarded,
      for q == me it is written to RSIN block c (``rs_count`` += 1). **In the
      ring RSIN holds the sum over all ranks, the own partial included**: the
      hop additions already include the root's. BARRIER releases as in INC.

    A counter is bumped at the clock edge where its WRITE_BLOCK request is
    accepted on ``mem_req`` (the router commits the block at that edge), so a
    core that sees the counter and then reads the block reads the new data.

    Memory port: one read outstanding at a time (a READ_BLOCK answer on
    ``mem_rsp`` goes to the reader that issued it); requesters — the receive
    side's write, the AG engine's read, the RS engine's read and (ring) the
    receive side's own-partial read — are served round-robin, a request once
    presented stays until it is accepted (payload stable). WRITE_BLOCK acks
    (count in ``data[0:16]``) are counted against the writes issued; ``idle``
    waits for them. ``mem_rsp.ready`` is always 1.

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

    Cycle costs (no contention, memory always ready; ``L`` = the memory's
    read latency, the router's ``hbm_latency``; cycle ``t`` = the cycle of the
    handshake on the first port named)
    -----------------------------------------------------------------------
    =====================================  ======================================
    path                                   cycles
    =====================================  ======================================
    ``post`` → first READ_BLOCK on         2: in the queue at the edge ending
    ``mem_req``                            ``t``, popped at the next, the read
                                           presented in ``t + 2``
    READ_BLOCK accepted → flit on ``tx``   ``L + 1`` (the answer is registered
                                           into the engine's flit buffer)
    successive flits of one engine         ``L + 2`` apart (the next read is
                                           presented the cycle after ``tx``
                                           took the flit)
    INC ``rx`` → WRITE_BLOCK               1 (registered write request)
    ring ``rx`` RING_AG → WRITE_BLOCK /    2 / 3 (receive register, then the
    forwarded on ``tx``                    write request; forward queue
                                           :class:`SyncFIFOBuffered`, 2 cycles)
    ring ``rx`` RING_RS → own-partial      1; the sum is registered ``L + 1``
    READ_BLOCK                             after the read is accepted, pushed
                                           to the forward queue in that cycle
                                           (on ``tx`` 2 later) or written (the
                                           request 1 later)
    WRITE_BLOCK accepted → counter         the counter is bumped at that edge
                                           (visible the next cycle)
    BARRIER release on ``rx`` →            at the edge it is accepted (always
    ``bar_count``                          accepted)
    CNT post                               applied at the edge it is accepted
    =====================================  ======================================

    Parameters
    ----------
    ranks : int
        Ranks on the switch (2 .. 256); the engine is address ``ranks``.
    tmax : int
        Rows per rank block of the padded layout (>= 1).
    data_bytes : int
        Modelled bytes of a block: a multiple of 32 in [32, 512]; a flit
        carries ``data_bytes // 4`` int32 lanes, every modelled word.
    mode : str
        ``"inc"`` (engine AG/RS) or ``"ring"`` (ring baseline; the switch only
        forwards, the engine serves barriers).
    xg_base, z_base, rsin_base : int
        First DataBlock of the XG, Z and RSIN regions in the die's HBM.
    hbm_blocks : int
        DataBlocks of the die's HBM (a power of two <= ``2**(23 - rank_bits)``); every
        region must fit and no two may overlap.
    rank_bits : int
        Width of an address's rank field (default 8; :func:`epfabric.hw.isa.address_layout`).
    post_depth : int
        Entries of each post queue (>= 2).

    Attributes
    ----------
    rank : In(8)
        This die's rank (a signal, so that one module serves every die).
    post : In(stream.Signature(post_layout))
        Posted operations (:class:`PostOp`).
    ag_count, rs_count, bar_count : Out(32)
        Cumulative completion counters (never reset).
    mem_req : Out(stream.Signature(mem_req_layout(data_bytes)))
        READ_BLOCK / WRITE_BLOCK requests at ``address(rank, block, 0)``.
    mem_rsp : In(stream.Signature(mem_rsp_layout(data_bytes)))
        Read answers and write acks (always ready).
    tx, rx : Out / In(stream.Signature(inc_flit_layout(ranks, tmax, data_bytes // 4)))
        Flits to / from the switch (tx payload stable while valid and not ready).
    idle : Out(1)
        No post queued or being issued, nothing buffered, no write awaiting
        its ack.

    Raises
    ------
    ValueError
        On an invalid parameter (named in the message).
    """

    #: Forward queue entries in ring mode (>= 2 for the bubble rule).
    FORWARD_DEPTH = 4

    def __init__(self, *, ranks, tmax, data_bytes, mode, xg_base, z_base, rsin_base, hbm_blocks,
                 post_depth=4, rank_bits=RANK_BITS):
        check_int("ranks", ranks, 2, 1 << RANK_BITS)
        self.rank_bits = check_rank_bits(rank_bits, ranks)
        check_int("tmax", tmax, 1)
        check_multiple("data_bytes", data_bytes, 32, 32, 512)
        check_choice("mode", mode, MODES)
        check_pow2("hbm_blocks", hbm_blocks, 1, 1 << block_bits(rank_bits))
        check_int("post_depth", post_depth, 2)
        regions = (("xg_base", xg_base, ranks * tmax), ("z_base", z_base, ranks * tmax),
                   ("rsin_base", rsin_base, tmax))
        for name, base, size in regions:
            check_int(name, base, 0)
            if base + size > hbm_blocks:
                raise UserError(f"{name}: region [{base}, {base + size}) does not fit in "
                                f"hbm_blocks={hbm_blocks}")
        for i, (n1, b1, s1) in enumerate(regions):
            for n2, b2, s2 in regions[i + 1:]:
                if b1 < b2 + s2 and b2 < b1 + s1:
                    raise UserError(f"{n1}: region [{b1}, {b1 + s1}) overlaps {n2}'s "
                                    f"[{b2}, {b2 + s2})")
        self.ranks, self.tmax, self.data_bytes, self.mode = ranks, tmax, data_bytes, mode
        self.xg_base, self.z_base, self.rsin_base = xg_base, z_base, rsin_base
        self.hbm_blocks, self.post_depth = hbm_blocks, post_depth
        self.lanes = data_bytes // 4
        self.layout = inc_flit_layout(ranks=ranks, tmax=tmax, lanes=self.lanes)
        flit = stream.Signature(self.layout)
        super().__init__({
            "rank": In(RANK_BITS),
            "post": In(stream.Signature(post_layout)),
            "ag_count": Out(COUNTER_BITS), "rs_count": Out(COUNTER_BITS),
            "bar_count": Out(COUNTER_BITS),
            "mem_req": Out(stream.Signature(mem_req_layout(data_bytes))),
            "mem_rsp": In(stream.Signature(mem_rsp_layout(data_bytes))),
            "tx": Out(flit), "rx": In(flit),
            "idle": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        n, tmax, lay = self.ranks, self.tmax, self.layout
        ring = self.mode == "ring"
        abits = lay["dst"].width
        me = Signal(RANK_BITS)
        nxt = Signal(RANK_BITS)
        prv = Signal(RANK_BITS)
        m.d.comb += [me.eq(self.rank), nxt.eq(Mux(me >= n - 1, 0, me + 1)),
                     prv.eq(Mux(me == 0, n - 1, me - 1))]

        # --- row counts and posts ---------------------------------------------------------
        counts = Array(Signal(range(tmax + 1), name=f"count{q}") for q in range(n))
        t_me = Signal(range(tmax + 1))
        t_prv = Signal(range(tmax + 1))
        m.d.comb += [t_me.eq(counts[me]), t_prv.eq(counts[prv])]
        pbits = len(Cat(self.post.payload))
        ag_q = m.submodules.ag_queue = SyncFIFO(width=pbits, depth=self.post_depth)
        rs_q = m.submodules.rs_queue = SyncFIFO(width=pbits, depth=self.post_depth)
        post = self.post.payload
        is_cnt = post.op == PostOp.CNT
        is_ag = post.op == PostOp.AG
        m.d.comb += [ag_q.w_data.eq(post.as_value()), rs_q.w_data.eq(post.as_value()),
                     ag_q.w_en.eq(self.post.valid & is_ag),
                     rs_q.w_en.eq(self.post.valid & ~is_ag & ~is_cnt)]
        engines_idle = Signal()
        m.d.comb += self.post.ready.eq(Mux(is_cnt, engines_idle,
                                           Mux(is_ag, ag_q.w_rdy, rs_q.w_rdy)))
        with m.If(self.post.valid & is_cnt & engines_idle):
            for q in range(n):
                with m.If(post.a == q):
                    m.d.sync += counts[q].eq(Mux(post.b > tmax, tmax, post.b))

        # --- memory port: one read outstanding, round-robin requesters ---------------------
        rd_busy = Signal()
        rd_owner = Signal(2)
        rsp = self.mem_rsp.payload
        m.d.comb += self.mem_rsp.ready.eq(1)
        rsp_read = self.mem_rsp.valid & (rsp.op == MemOp.READ_BLOCK)
        with m.If(rsp_read):
            m.d.sync += rd_busy.eq(0)
        # requesters: 0 receive write, 1 AG read, 2 RS read, 3 ring receive read
        reqs = [Signal(name=f"mreq{i}") for i in range(4)]
        blocks = [Signal(block_bits(self.rank_bits), name=f"mblock{i}") for i in range(4)]
        # round robin, the grant held while not ready (a request stays until accepted)
        mem_arb = m.submodules.mem_arb = RoundRobin(count=4, hold=True)
        grant = mem_arb.grant
        m.d.comb += [mem_arb.requests.eq(Cat(*reqs)), mem_arb.ready.eq(self.mem_req.ready)]
        wr_data = Signal(8 * self.data_bytes)
        mq = self.mem_req.payload
        mq_addr = data.View(address_layout(self.rank_bits), mq.addr)
        m.d.comb += [self.mem_req.valid.eq(mem_arb.valid),
                     mq.op.eq(Mux(grant == 0, MemOp.WRITE_BLOCK, MemOp.READ_BLOCK)),
                     mq_addr.rank.eq(me), mq_addr.block.eq(Array(blocks)[grant]),
                     mq_addr.word.eq(0), mq_addr.byte.eq(0),
                     mq.data.eq(Mux(grant == 0, wr_data, 0))]
        fire = self.mem_req.valid & self.mem_req.ready
        granted = [Signal(name=f"mgrant{i}") for i in range(4)]
        m.d.comb += [g.eq(fire & (grant == i)) for i, g in enumerate(granted)]
        for i in (1, 2, 3):
            with m.If(granted[i]):
                m.d.sync += [rd_busy.eq(1), rd_owner.eq(i)]
        rd_done = [Signal(name=f"mrsp{i}") for i in range(4)]
        m.d.comb += [d.eq(rsp_read & (rd_owner == i)) for i, d in enumerate(rd_done)]

        # write acks
        pend = Signal(COUNTER_BITS)
        acked = Signal(ACK_COUNT_BITS)
        m.d.comb += acked.eq(Mux(self.mem_rsp.valid & (rsp.op == MemOp.WRITE_BLOCK),
                                 rsp.data[:ACK_COUNT_BITS], 0))
        m.d.sync += pend.eq(pend + granted[0] - acked)

        # --- issue engines: AG reads as requester 1, RS as requester 2 --------------------
        engines = {}
        for idx, (kind, queue) in enumerate((("ag", ag_q), ("rs", rs_q)), start=1):
            eng = engines[kind] = m.submodules[f"{kind}_engine"] = IssueEngine(
                kind=kind, ranks=n, tmax=tmax, lanes=self.lanes, mode=self.mode,
                base=self.xg_base if kind == "ag" else self.z_base)
            m.d.comb += [eng.post.valid.eq(queue.r_rdy), eng.post.payload.eq(queue.r_data),
                         queue.r_en.eq(eng.post.ready & queue.r_rdy),
                         eng.me.eq(me), eng.nxt.eq(nxt), eng.prv.eq(prv),
                         eng.t_me.eq(t_me), eng.t_prv.eq(t_prv),
                         *(eng.counts[q].eq(counts[q]) for q in range(n)),
                         reqs[idx].eq(eng.read.valid), blocks[idx].eq(eng.read.payload),
                         eng.read.ready.eq(self.mem_req.ready & (grant == idx)),
                         eng.read_busy.eq(rd_busy), eng.read_done.eq(rd_done[idx]),
                         eng.read_data.eq(rsp.data)]
        ag, rs = engines["ag"], engines["rs"]
        m.d.comb += engines_idle.eq(~ag.busy & ~rs.busy)

        # --- receive side -----------------------------------------------------------------
        rx = self.rx.payload
        wr_valid = Signal()
        wr_kind = Signal(Completion)
        m.d.comb += [reqs[0].eq(wr_valid)]
        with m.If(granted[0]):
            m.d.sync += wr_valid.eq(0)
            with m.If(wr_kind == Completion.AG):
                m.d.sync += self.ag_count.eq(self.ag_count + 1)
            with m.Elif(wr_kind == Completion.RS):
                m.d.sync += self.rs_count.eq(self.rs_count + 1)
        rx_bar = rx.op == IncOp.BARRIER
        with m.If(self.rx.valid & self.rx.ready & rx_bar):
            m.d.sync += self.bar_count.eq(self.bar_count + 1)
        busy_parts = [wr_valid, pend != 0]
        wr_block = blocks[0]
        wr_next_block = Signal(block_bits(self.rank_bits))
        m.d.sync += wr_block.eq(wr_next_block)
        # wr_block is a register: loaded with wr_next_block whenever a new write is taken
        fwd = None
        if not ring:
            wr_free = ~wr_valid | granted[0]
            rx_ag = rx.op == IncOp.AG
            rx_rs = rx.op == IncOp.RS
            # BARRIER releases and stray (ring) flits need no write
            m.d.comb += self.rx.ready.eq(wr_free | ~(rx_ag | rx_rs))
            take = self.rx.valid & self.rx.ready & (rx_ag | rx_rs)
            m.d.comb += wr_next_block.eq(Mux(take, Mux(rx_ag, self.xg_base + rx.offset,
                                                       self.rsin_base + rx.chunk), wr_block))
            with m.If(take):
                m.d.sync += [wr_valid.eq(1), wr_data.eq(rx.data.as_value()),
                             wr_kind.eq(Mux(rx_ag, Completion.AG, Completion.RS))]
            m.d.comb += reqs[3].eq(0)
        else:
            depth = self.FORWARD_DEPTH
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
            m.d.comb += [reqs[3].eq(rcv_valid & rcv_read & ~rd_busy),
                         blocks[3].eq(self.z_base + rcv.offset)]
            with m.If(granted[3]):
                m.d.sync += [rcv_read.eq(0), rcv_wait.eq(1)]
            with m.If(rd_done[3]):
                m.d.sync += [rcv_wait.eq(0),
                             rcv.data.eq(reduce_lanes(rcv.data, rsp.data, lanes=self.lanes))]
            ready = rcv_valid & ~rcv_read & ~rcv_wait
            r_ag = rcv.op == IncOp.RING_AG
            needs_write = r_ag | ~rcv_fwd     # AG rows are always written; RS rows at the root
            finish = ready & (~needs_write | ~wr_valid)
            # the forwarded flit as ONE expression (hw/inc_endpoint.py RingEndpoint._receive)
            assert lay["dst"].offset == 0 and lay["src"].offset == abits
            bits = rcv.as_value()
            m.d.comb += [fwd.w_data.eq(Cat(nxt[:abits], me[:abits], bits[2 * abits:])),
                         fwd.w_en.eq(finish & rcv_fwd)]
            new_write = finish & needs_write
            m.d.comb += wr_next_block.eq(Mux(new_write, Mux(r_ag, self.xg_base + rcv.offset,
                                                            self.rsin_base + rcv.chunk), wr_block))
            with m.If(finish):
                m.d.sync += rcv_valid.eq(0)
            with m.If(new_write):
                m.d.sync += [wr_valid.eq(1), wr_data.eq(rcv.data.as_value()),
                             wr_kind.eq(Mux(r_ag, Completion.AG, Completion.RS))]
            busy_parts += [rcv_valid, fwd.level != 0]

        # --- transmit: forwards first, then AG and RS round-robin; the choice is held
        # while tx is not ready (payload stable) ---------------------------------------------
        if ring:
            used = fwd.level + (rcv_valid & rcv_fwd)
            inject = (fwd.level == 0) & (used <= self.FORWARD_DEPTH - 2)
            fwd_rdy = fwd.r_rdy
        else:
            inject = Const(1)
            fwd_rdy = Const(0)
        # own flits: 0 RS, 1 AG (RS first after reset), held until taken. A forward is
        # never ready while an own flit is eligible (inject needs an empty forward queue),
        # so the own flit's precedence here only keeps a held one presented.
        tx_arb = m.submodules.tx_arb = RoundRobin(count=2, hold=True)
        m.d.comb += [tx_arb.requests.eq(Cat(rs.flit.valid & inject, ag.flit.valid & inject)),
                     tx_arb.ready.eq(self.tx.ready)]
        sel = Signal(2)
        m.d.comb += sel.eq(Mux(tx_arb.valid, Mux(tx_arb.grant == 0, _RS, _AG),
                               Mux(fwd_rdy, _FWD, _NONE)))
        fwd_bits = fwd.r_data if ring else Const(0, len(Cat(rx)))
        m.d.comb += [self.tx.valid.eq(sel != _NONE),
                     self.tx.payload.eq(Mux(sel == _FWD, fwd_bits,
                                            Mux(sel == _AG, ag.flit.payload.as_value(),
                                                rs.flit.payload.as_value())))]
        sent = self.tx.valid & self.tx.ready
        if ring:
            m.d.comb += fwd.r_en.eq(sent & (sel == _FWD))
        m.d.comb += [ag.flit.ready.eq(sent & (sel == _AG)), rs.flit.ready.eq(sent & (sel == _RS))]

        busy_parts += [ag.busy, rs.busy, ag.flit.valid, rs.flit.valid, rd_busy]
        m.d.comb += self.idle.eq(~Cat(*busy_parts).any())
        return m


class IssueEngine(wiring.Component):
    """One issue engine of :class:`IncNic`: AG or RS/BAR posts → block reads → one flit buffer.

    Takes one post at a time from ``post`` and walks its rows (the order of
    :class:`IncNic`'s docstring): each row is one READ_BLOCK on ``read`` (one
    at a time, and only while the NIC's memory port has no read outstanding,
    ``read_busy``), its answer fills the flit buffer offered on ``flit``,
    and the next read is presented the cycle after ``flit`` took the flit.
    An RS engine also sends BAR posts: one BARRIER flit, in order after the
    flits of the posts before it. Epochs count this engine's AG (or RS) posts.

    Parameters
    ----------
    kind : str
        ``"ag"`` (AG posts) or ``"rs"`` (RS and BAR posts).
    ranks, tmax, lanes, mode
        As for :class:`IncNic` (``lanes`` = ``data_bytes // 4``).
    base : int
        First block of the region the engine reads: XG for AG, Z for RS.

    Attributes
    ----------
    post : In(stream.Signature(post_layout))
        The engine's post queue (``ready``: no post being issued).
    me, nxt, prv : In(RANK_BITS)
        This rank, the next and the previous one on the ring.
    t_me, t_prv : In(range(tmax + 1))
        Row counts of this rank and of ``prv``.
    counts : In(range(tmax + 1)).array(ranks)
        Every rank's row count (read by an INC RS engine).
    read : Out(stream.Signature(BLOCK_BITS))
        READ_BLOCK request: the block (payload stable until taken).
    read_busy : In(1)
        The memory port has a read outstanding.
    read_done, read_data : In(1), In(8 * 4 * lanes)
        The answer to this engine's read, in the cycle it arrives.
    flit : Out(stream.Signature(inc_flit_layout(ranks, tmax, lanes)))
        The flit buffer (held until taken).
    busy : Out(1)
        A post queued or being issued, or a read outstanding.
    """

    def __init__(self, *, kind, ranks, tmax, lanes, mode, base):
        check_choice("kind", kind, ("ag", "rs"))
        check_choice("mode", mode, MODES)
        self.kind, self.ranks, self.tmax, self.mode, self.base = kind, ranks, tmax, mode, base
        self.layout = inc_flit_layout(ranks=ranks, tmax=tmax, lanes=lanes)
        count = range(tmax + 1)
        super().__init__({
            "post": In(stream.Signature(post_layout)),
            "me": In(RANK_BITS), "nxt": In(RANK_BITS), "prv": In(RANK_BITS),
            "t_me": In(count), "t_prv": In(count), "counts": In(count).array(ranks),
            "read": Out(stream.Signature(BLOCK_BITS)),
            "read_busy": In(1), "read_done": In(1), "read_data": In(32 * lanes),
            "flit": Out(stream.Signature(self.layout)),
            "busy": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        n, tmax, lay = self.ranks, self.tmax, self.layout
        is_ag, ring = self.kind == "ag", self.mode == "ring"
        me, nxt, prv, t_me, t_prv = self.me, self.nxt, self.prv, self.t_me, self.t_prv
        entry = self.post.payload
        act = Signal()
        bar = Signal()
        c = Signal(32)
        end = Signal(33)
        q = Signal(range(n))
        epoch = Signal(EPOCH_BITS)
        buf_valid = Signal()
        buf = Signal(lay)
        reading = Signal()
        m.d.comb += [self.flit.valid.eq(buf_valid), self.flit.payload.eq(buf)]

        m.d.comb += self.post.ready.eq(~act)
        with m.If(~act & self.post.valid):
            m.d.sync += [act.eq(1), bar.eq(entry.op == PostOp.BAR), c.eq(entry.a),
                         end.eq(entry.a + entry.b), q.eq(0)]
            if is_ag:
                m.d.sync += epoch.eq(epoch + 1)
            else:
                with m.If(entry.op == PostOp.RS):
                    m.d.sync += epoch.eq(epoch + 1)

        # the current row (AG: own row c; RS: ring chain row c of block prv, or INC
        # contribution (c, q) of the chunk-major order)
        more = Signal()
        item = Signal()
        root = Signal(RANK_BITS)
        length = Signal(range(tmax + 1))
        if is_ag:
            m.d.comb += [more.eq((c < end) & (c < t_me)), item.eq(more),
                         root.eq(me), length.eq(t_me)]
            dst, op = (nxt, IncOp.RING_AG) if ring else (n, IncOp.AG)
            compl = Completion.AG
        elif ring:
            m.d.comb += [more.eq((c < end) & (c < t_prv)), item.eq(more),
                         root.eq(prv), length.eq(t_prv)]
            dst, op, compl = nxt, IncOp.RING_RS, Completion.RS
        else:
            t_q = Signal(range(tmax + 1))
            m.d.comb += [t_q.eq(Array(self.counts)[q]), more.eq((c < end) & (c < tmax)),
                         item.eq(more & (q != me) & (c < t_q)), root.eq(q), length.eq(t_q)]
            dst, op, compl = n, IncOp.RS, Completion.RS
        offset = Signal(lay["offset"].shape)
        m.d.comb += offset.eq(root * tmax + c)
        cbits = lay["chunk"].width

        def step():
            if is_ag or ring:
                return [c.eq(c + 1)]
            return [q.eq(Mux(q == n - 1, 0, q + 1)), c.eq(Mux(q == n - 1, c + 1, c))]

        run = act & ~bar
        m.d.comb += [self.read.valid.eq(run & item & ~buf_valid & ~reading & ~self.read_busy),
                     self.read.payload.eq(self.base + offset)]
        with m.If(run & ~more):
            m.d.sync += act.eq(0)
        with m.If(run & more & ~item):
            m.d.sync += step()
        with m.If(self.read.valid & self.read.ready):
            m.d.sync += step()
            m.d.sync += [reading.eq(1),
                         buf.dst.eq(dst), buf.src.eq(me[:lay["src"].width]), buf.op.eq(op),
                         buf.root.eq(root[:lay["root"].width]), buf.epoch.eq(epoch),
                         buf.offset.eq(offset), buf.length.eq(length),
                         buf.chunk.eq(c[:cbits]), buf.compl.eq(compl)]
        with m.If(self.read_done):
            m.d.sync += [reading.eq(0), buf_valid.eq(1), buf.data.eq(self.read_data)]
        if not is_ag:
            # BAR: sent after every flit of the posts before it left (in order)
            with m.If(act & bar & ~buf_valid & ~reading):
                m.d.sync += [act.eq(0), buf_valid.eq(1), buf.dst.eq(n),
                             buf.src.eq(me[:lay["src"].width]), buf.op.eq(IncOp.BARRIER),
                             buf.root.eq(0), buf.epoch.eq(epoch), buf.offset.eq(0),
                             buf.length.eq(0), buf.chunk.eq(0), buf.compl.eq(Completion.BARRIER),
                             buf.data.eq(0)]
        with m.If(self.flit.valid & self.flit.ready):
            m.d.sync += buf_valid.eq(0)
        m.d.comb += self.busy.eq(act | self.post.valid | reading)
        return m


VERILOG_EXPORTS = {
    "inc_nic": (IncNic, {"ranks": 4, "tmax": 4, "data_bytes": 32, "mode": "inc", "xg_base": 0,
                         "z_base": 16, "rsin_base": 32, "hbm_blocks": 64, "post_depth": 4}),
}
