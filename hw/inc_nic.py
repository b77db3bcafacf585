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

from amaranth.hdl import Array, Cat, Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from .aiv_core import mem_req_layout, mem_rsp_layout
from .inc_endpoint import MODES
from .inc_engine import EPOCH_BITS, Completion, IncOp, inc_flit_layout
from .inc_nic_memory import MemoryPort
from .inc_nic_posts import PostOp, PostQueues, post_layout
from .inc_nic_receive import COUNTER_BITS, Completions, IncReceiver, RingReceiver
from .inc_nic_tx import TxSelect
from .isa import BLOCK_BITS, RANK_BITS, block_bits, check_rank_bits
from .validate import UserError, check_choice, check_int, check_multiple, check_pow2

__all__ = ["PostOp", "post_layout", "IncNic", "IssueEngine", "VERILOG_EXPORTS"]


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

    Ring flow control: the bubble rule of
    :class:`~epfabric.hw.inc_endpoint.RingEndpoint` keeps the ring of FIFO
    buffers from filling (a new row only with the forward queue empty and
    two entries free on the forward path); the argument, and its caveat about
    BARRIER flits, is in :class:`~epfabric.hw.inc_nic_receive.RingReceiver`,
    beside the rule.

    Blocks (each a component with its own signature; ``elaborate`` wires them):
    :class:`~epfabric.hw.inc_nic_posts.PostQueues` (the queues, CNT),
    two :class:`IssueEngine` (AG, RS), :class:`~epfabric.hw.inc_nic_memory.MemoryPort`,
    :class:`~epfabric.hw.inc_nic_receive.Completions` (the write, the counters),
    :class:`~epfabric.hw.inc_nic_receive.IncReceiver` or
    :class:`~epfabric.hw.inc_nic_receive.RingReceiver`, and
    :class:`~epfabric.hw.inc_nic_tx.TxSelect`.

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
    FORWARD_DEPTH = RingReceiver.FORWARD_DEPTH

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
        n, tmax = self.ranks, self.tmax
        me = Signal(RANK_BITS)
        nxt = Signal(RANK_BITS)
        prv = Signal(RANK_BITS)
        m.d.comb += [me.eq(self.rank), nxt.eq(Mux(me >= n - 1, 0, me + 1)),
                     prv.eq(Mux(me == 0, n - 1, me - 1))]
        regions = {"xg_base": self.xg_base, "rsin_base": self.rsin_base, "z_base": self.z_base}
        receiver = RingReceiver if self.mode == "ring" else IncReceiver
        m.submodules.posts = posts = PostQueues(ranks=n, tmax=tmax, post_depth=self.post_depth)
        m.submodules.memory = mem = MemoryPort(data_bytes=self.data_bytes,
                                               rank_bits=self.rank_bits)
        m.submodules.completions = done = Completions(data_bytes=self.data_bytes,
                                                      rank_bits=self.rank_bits)
        m.submodules.receiver = rcv = receiver(ranks=n, tmax=tmax, data_bytes=self.data_bytes,
                                               rank_bits=self.rank_bits, **regions)
        m.submodules.tx_select = txs = TxSelect(ranks=n, tmax=tmax, lanes=self.lanes)

        # --- posts, and the issue engines: AG reads as reader 0, RS as reader 1 -------------
        wiring.connect(m, wiring.flipped(self.post), posts.post)
        m.d.comb += [posts.me.eq(me), posts.prv.eq(prv)]
        engines = []
        for k, (kind, queue, base) in enumerate((("ag", posts.ag, self.xg_base),
                                                 ("rs", posts.rs, self.z_base))):
            eng = m.submodules[f"{kind}_engine"] = IssueEngine(
                kind=kind, ranks=n, tmax=tmax, lanes=self.lanes, mode=self.mode, base=base)
            read = mem.reads[k]
            wiring.connect(m, queue, eng.post)
            m.d.comb += [eng.me.eq(me), eng.nxt.eq(nxt), eng.prv.eq(prv),
                         eng.t_me.eq(posts.t_me), eng.t_prv.eq(posts.t_prv),
                         *(eng.counts[q].eq(posts.counts[q]) for q in range(n)),
                         read.valid.eq(eng.read.valid), read.payload.eq(eng.read.payload),
                         eng.read.ready.eq(read.ready), eng.read_busy.eq(mem.read_busy),
                         eng.read_done.eq(mem.read_done[k]), eng.read_data.eq(mem.read_data)]
            engines.append(eng)
        ag, rs = engines
        m.d.comb += posts.engines_idle.eq(~ag.busy & ~rs.busy)

        # --- memory port: the receive side's write, the engines' and the receive side's reads --
        m.d.comb += mem.rank.eq(me)
        wiring.connect(m, mem.mem_req, wiring.flipped(self.mem_req))
        wiring.connect(m, wiring.flipped(self.mem_rsp), mem.mem_rsp)
        wiring.connect(m, done.write, mem.write)

        # --- receive side: rows written and counted (ring: summed, forwarded) ------------------
        wiring.connect(m, wiring.flipped(self.rx), rcv.rx)
        wiring.connect(m, rcv.take, done.take)
        wiring.connect(m, rcv.read, mem.reads[2])
        rx = self.rx
        m.d.comb += [rcv.me.eq(me), rcv.nxt.eq(nxt), rcv.write_busy.eq(done.busy),
                     rcv.read_busy.eq(mem.read_busy), rcv.read_done.eq(mem.read_done[2]),
                     rcv.read_data.eq(mem.read_data),
                     done.release.eq(rx.valid & rx.ready & (rx.payload.op == IncOp.BARRIER)),
                     self.ag_count.eq(done.ag_count), self.rs_count.eq(done.rs_count),
                     self.bar_count.eq(done.bar_count)]

        # --- transmit: forwards first, then AG and RS round-robin ------------------------------
        wiring.connect(m, rcv.forward, txs.forward)
        wiring.connect(m, ag.flit, txs.ag)
        wiring.connect(m, rs.flit, txs.rs)
        m.d.comb += txs.inject.eq(rcv.inject)
        wiring.connect(m, txs.tx, wiring.flipped(self.tx))

        m.d.comb += self.idle.eq(~Cat(done.busy, mem.busy, rcv.busy, ag.busy, rs.busy,
                                      ag.flit.valid, rs.flit.valid).any())
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
