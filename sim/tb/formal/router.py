"""Formal harness of the router's store-ack accounting (:class:`~epfabric.hw.router_answers.AckCoalescer`).

A die acknowledges remote stores coalesced (hw/router_answers.py, "Store
acknowledgements"): a table ``owed`` counts the acks owed per requesting
(rank, core) entry and a FIFO lists the entries that became non-zero. The
harness drives arbitrary committed stores (any cycle, any entry, within the
cores' store window: an entry never has more than ``max_outstanding`` stores
un-acknowledged, as :class:`~epfabric.hw.aiv_core.AIVCore` guarantees) and
arbitrary back-pressure on ``ack``, and keeps per entry the stores it
committed minus the stores acknowledged (``out``). The property, for every
entry:

* an ack acknowledges at least one store and never more than are owed
  (no ack from nowhere, no double acknowledgement);
* nothing is lost: while stores of an entry are un-acknowledged, the entry
  waits in the ack FIFO with exactly that count in the table, so the next
  ack of it acknowledges them all.

``router.acks`` is proved by k-induction (no bound): the harness elaborates
the coalescer itself (:class:`~epfabric.sim.tb.formal.Elaborated`) and adds
read ports of its own to the table and to the FIFO's storage (the router's
Verilog is untouched) to assert that the FIFO's pointers agree with its
level and that the FIFO holds each entry at most once (the invariants that
rule out the unreachable start states).

Negative control: ``lose_restart=True`` puts :class:`RestartLoser` in front
of the coalescer — a broken one that drops a store committed in the cycle
its entry's ack is sent (the count that should restart at 1).

The router's data answers (hw/router_answers.py, "Request/response deadlock"):
:class:`AnswerAccounting` harnesses a whole :class:`~epfabric.hw.router.DieRouter`
(the admission rule, the tag pipeline of the shared read port and the RSP
queue of its :class:`~epfabric.hw.router_answers.AnswerQueue`, the UB answer
tags of its :class:`~epfabric.hw.router_ub.UBArbiter` and the
:class:`~epfabric.hw.router_tx.TxMux` that drains the queue), with
arbitrary core requests, ``rx`` flits, host accesses and ``tx``
back-pressure, and models its memory: a read
port answering exactly ``hbm_latency`` cycles after a request (it cannot
stall), a UB port with one request outstanding, answered after any delay and
held until taken (:class:`~epfabric.hw.ub_port.UBPort`'s contract). From the
ports alone it knows which answers are the router's to send: a read answer of
a load REQ it took from ``rx``, and a fetch-add answer of an ``rx`` REQ that
the router took from the UB port. ``router.answers`` claims, proved by
k-induction:

* no overflow: an answer is never admitted while the queue holds
  ``rsp_depth`` answers (a read answer cannot wait, so space was reserved
  when its REQ was taken, counting a UB answer entering in that cycle);
* every data answer that leaves on ``tx`` (an RSP flit that is not a store
  ack) was admitted and has not left before (no duplication, nothing from
  nowhere);
* in order and unchanged: an answer chosen by the solver leaves exactly as
  the one after all answers admitted before it, with its ``dst``, ``core``,
  ``op`` and ``data`` (``src`` the die's rank, ``small`` unless a block);
* nothing lost: the answers admitted and not yet sent are exactly the
  queue's entries (its level), the chosen one at its place.

The invariants (``invariants=True``) tie the router's registers to the
harness's models: the RSP queue's pointers agree with its level and its
entries are data answers, the read-tag pipeline equals the model's in-flight
reads, the UB answer tags name the outstanding request's requester, and
queued answers plus remote loads in flight never exceed ``rsp_depth`` (the
reservation).

Negative controls: ``ignore_entering=True`` builds :class:`OverAdmitter`, a
router whose admission rule forgets the UB answer entering the queue in the
same cycle (the queue overflows, an answer is lost); ``drop_on_stall=True``
puts :class:`StallDropper` after ``tx``, a broken drain that pops a data
answer while ``tx`` is back-pressured.

Bounded response (nothing starves), each under a consumer that is ready at
least once every *M* cycles (:func:`~epfabric.sim.tb.formal.fairness.fair_ready`)
and proved by k-induction with a budget invariant; each has a ``_tight``
(one cycle less must fail) and an ``_unfair`` (no fairness must fail) control:

* ``router.ack_response`` -- every remote store is acknowledged within
  *E* x *M* cycles (*E*: the remote cores; :meth:`AckAccounting.response`);
* ``router.tx_response`` -- every flit the RSP queue, the acks or a core
  offers ``tx`` is taken within *S* x *M* - 1 cycles (*S* sources;
  :class:`TxResponse`);
* ``router.answer_response`` -- in the whole router, every data answer
  admitted to the RSP queue leaves on ``tx`` within ``rsp_depth`` x *S* x *M*
  - 1 cycles (:meth:`AnswerAccounting.response_invariants`); an upper bound,
  not shown tight; its ``_unfair`` control keeps the invariants and finds
  the budget broken (a BMC of the whole router deep enough to break the
  claim itself does not finish in the default timeout).
"""

from amaranth.asserts import AnyConst, AnySeq
from amaranth.hdl import Assert, Assume, Const, Cover, Fragment, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2

from ....hw.aiv_core import MemOp
from ....hw.router import DieRouter, FlitKind
from ....hw.router_answers import AckCoalescer
from ....hw.router_flit import answer_layout
from ....hw.router_tx import TxMux
from ....hw.ub_port import UBOp
from . import Elaborated, FormalProperty, FragmentSignals, Harness
from .fairness import fair_ready, response_age

__all__ = ["AckAccounting", "RestartLoser", "AnswerAccounting", "OverAdmitter", "StallDropper",
           "TxResponse", "PROPERTIES"]


class RestartLoser(wiring.Component):
    """A broken coalescer: a store committed while its entry's ack is sent is dropped."""

    def __init__(self, coalescer, block):
        self.coalescer, self.block = coalescer, block
        super().__init__({"store": In(coalescer.store.signature),
                          "ack": Out(coalescer.ack.signature)})

    def elaborate(self, platform):
        m = Module()
        m.submodules.coalescer = self.block
        c = self.coalescer
        wiring.connect(m, c.ack, wiring.flipped(self.ack))
        core_bits = len(c.store.payload.core)
        idx = (self.store.payload.src << core_bits) | self.store.payload.core
        pop = (c.ack.payload.dst << core_bits) | c.ack.payload.core
        clash = c.ack.valid & c.ack.ready & (idx == pop)
        m.d.comb += [c.store.payload.eq(self.store.payload),
                     c.store.valid.eq(self.store.valid & ~clash)]
        return m


class AckAccounting(Harness):
    """Harness: arbitrary stores within the window, arbitrary ack back-pressure; every entry's accounts.

    Parameters
    ----------
    ranks, aivs, max_outstanding
        Of the coalescer under test (small: a table of 6 entries).
    rank
        The die's own rank: its stores never come through the fabric (a
        local store goes to the UB port directly), so it owes itself no ack.
    lose_restart : bool
        Check the broken :class:`RestartLoser` instead.
    invariants : bool
        Also assert the invariants that make the property inductive.
    patience : int or None
        Also claim the bounded response (:meth:`response`): ``ack`` is taken
        at least once in every ``patience`` cycles, and every store is
        acknowledged within ``bound`` cycles. ``None``: no such claim, any
        back-pressure.
    bound : int or None
        The response claimed (default (``ranks`` - 1) x ``aivs`` x ``patience``).
    unfair : bool
        With ``patience``: drop the fairness assumption (the negative control).
    claim_only : bool
        With ``patience``: assert the bounded response only, not the
        accounting (``router.acks`` proves it; a deep BMC of it is slow).
    """

    def __init__(self, *, ranks=3, aivs=2, max_outstanding=3, rank=0, lose_restart=False,
                 invariants=True, patience=None, bound=None, unfair=False, claim_only=False):
        super().__init__()
        self.ranks, self.aivs, self.max_outstanding = ranks, aivs, max_outstanding
        self.rank = rank
        self.patience, self.unfair, self.claim_only = patience, unfair, claim_only
        self.bound = bound if bound is not None or patience is None else \
            (ranks - 1) * aivs * patience
        self.coalescer = AckCoalescer(ranks=ranks, aivs=aivs, max_outstanding=max_outstanding)
        self.lose_restart, self.invariants = lose_restart, invariants

    def check(self, m):
        c = self.coalescer
        blk = Elaborated(c)
        if self.lose_restart:
            dut = RestartLoser(c, blk)
            m.submodules.dut = dut
        else:
            dut = c
            m.submodules.dut = blk
        core_bits = len(c.store.payload.core)
        idx_bits = len(blk["ack_inc_idx"])
        entries = (1 << core_bits) * max(2, self.ranks)     # AckCoalescer's table
        window = self.max_outstanding
        store, ack = dut.store, dut.ack
        m.d.comb += [store.valid.eq(AnySeq(1)),
                     store.payload.src.eq(AnySeq(len(store.payload.src))),
                     store.payload.core.eq(AnySeq(core_bits))]
        if self.patience is None:
            m.d.comb += ack.ready.eq(AnySeq(1))
        else:
            waited = fair_ready(m, ack.ready, patience=None if self.unfair else self.patience,
                                name="ack")
        # remote stores come from the cores of the other ranks (UBArbiter:
        # store.valid = remote & store & ~tag_noack)
        used = [(i >> core_bits) < self.ranks and (i >> core_bits) != self.rank
                and (i & ((1 << core_bits) - 1)) < self.aivs for i in range(entries)]
        with m.If(store.valid):
            m.d.comb += [Assume(store.payload.src < self.ranks),
                         Assume(store.payload.src != self.rank),
                         Assume(store.payload.core < self.aivs)]
        st_idx = (store.payload.src << core_bits) | store.payload.core
        ack_idx = (ack.payload.dst << core_bits) | ack.payload.core
        sent = ack.valid & ack.ready
        # un-acknowledged stores per entry (the window keeps them <= window)
        out = [Signal(range(window + 1), name=f"out{i}") for i in range(entries)]
        for i in range(entries):
            st = store.valid & (st_idx == i)
            ak = sent & (ack_idx == i)
            with m.If(st):
                # the cores' store window: no more than `window` stores un-acked
                m.d.comb += Assume(out[i] < window)
            with m.If(ak & (not self.claim_only)):
                m.d.comb += [Assert(ack.payload.count >= 1, f"entry {i}: empty ack"),
                             Assert(ack.payload.count <= out[i],
                                    f"entry {i}: more stores acked than were committed")]
            m.d.sync += out[i].eq(out[i] + st - Mux(ak, ack.payload.count, 0))
        # non-vacuity: an ack of 2 stores at once
        m.d.comb += Cover(sent & (ack.payload.count == 2))
        if self.patience is not None:
            pending, age, tracked = self.response(m, store, st_idx, sent, ack_idx)
        if self.claim_only:
            return

        # read ports of the harness's own on the elaborated table and FIFO
        owed = []
        table = blk.sub("owed").fragment
        for i in range(entries):
            v = Signal(len(ack.payload.count), name=f"owed{i}")
            table.read_port(domain="comb", addr=Const(i, idx_bits), data=v, en=Const(1),
                            transparent_for=())
            owed.append(v)
        pend = blk.sub("ack_pending")
        depth = entries
        store_mem = pend.sub("storage").fragment
        slots = []
        for j in range(depth):
            v = Signal(idx_bits, name=f"pending{j}")
            store_mem.read_port(domain="comb", addr=Const(j, ceil_log2(depth)), data=v,
                                en=Const(1), transparent_for=())
            slots.append(v)
        produce, consume, level = pend["produce"], pend["consume"], pend["level"]
        off = _offset(depth)

        live = [off(j, consume) < level for j in range(depth)]
        queued = [sum(live[j] & (slots[j] == i) for j in range(depth)) for i in range(entries)]
        for i in range(entries):
            # no loss: what is owed is in the table and the entry is queued
            # for an ack (this is the property's "nothing is lost")
            m.d.comb += Assert(owed[i] == out[i], f"entry {i}: table count is not what is owed")
            m.d.comb += Assert((out[i] != 0) == (queued[i] != 0),
                               f"entry {i}: owed but not queued (or queued for nothing)")
        if not self.invariants:
            return
        m.d.comb += _fifo_invariants(produce, consume, level, depth, "FIFO")
        # an entry is pushed only when its count leaves 0 (or restarts in the
        # cycle its ack pops it), so it is queued at most once
        for i in range(entries):
            m.d.comb += Assert(queued[i] <= 1, f"inv: entry {i} queued twice")
            if not used[i]:
                # never stored to (the assumptions above)
                m.d.comb += Assert(out[i] == 0, f"inv: entry {i} is not a remote core's")
        # every queued slot names an entry owed something (none holds an index
        # past the table): the FIFO holds the owed entries, once each. As the
        # other ranks' cores are fewer than the table's entries, it never
        # fills, so a re-push in the cycle of a pop always has room.
        m.d.comb += Assert(level == sum(q for q in queued), "inv: FIFO holds only owed entries")
        if self.patience is not None:
            self.response_invariants(m, pending, age, tracked, out, live, slots, consume, waited)

    def response(self, m, store, st_idx, sent, ack_idx):
        """The bounded response: a store chosen by the solver is acknowledged within ``bound``.

        Why (*E* = (``ranks`` - 1) x ``aivs``, the remote cores; *M* =
        ``patience``): a store of entry *e* committed in cycle *t* is
        acknowledged by the first ack of *e* after *t* (an ack sent in cycle
        *t* carries the count from before it). From *t* + 1 on, *e* is queued
        (owed, so in the FIFO, once), at most *E* - 1 entries ahead of it; each
        cycle in which ``ack`` is taken pops the head. The worst: *e*'s own
        previous ack leaves in cycle *t* (the store re-queues *e* behind the
        *E* - 1 others), then ``ack`` is taken only every *M*-th cycle: *e*'s
        ack is the *E*-th, *E* x *M* cycles after *t*.
        """
        tracked = Signal(len(st_idx), name="tracked_entry")
        pick = Signal(name="pick")
        done = Signal(name="tracked_acked")
        pending, age = response_age(m, start=store.valid & pick, done=done, bound=self.bound,
                                    name="store")
        m.d.comb += [pick.eq(AnySeq(1) & ~pending), done.eq(pending & sent & (ack_idx == tracked))]
        with m.If(store.valid & pick):
            m.d.sync += tracked.eq(st_idx)
        m.d.comb += [Assert(~pending | (age <= self.bound), "a store not acknowledged in time"),
                     Cover(done & (age == self.bound))]
        return pending, age, tracked

    def response_invariants(self, m, pending, age, tracked, out, live, slots, consume, waited):
        """The tracked entry's budget: ``age`` + (*M* - 1 - ``waited``) + *M* x its place <= ``bound``.

        While the tracked store is un-acknowledged its entry is owed (so
        queued, once: :meth:`check`'s invariants) at place *q* from the
        FIFO's head; it is acked in the (*q* + 1)-th cycle that takes ``ack``
        from now, the first at most *M* - 1 - ``waited`` cycles away and each
        next within *M*. A taken ack lowers *q* (``waited`` restarts at 0: *M*
        - 1 < *M* - ``waited``); a refusal raises ``waited``; an entry queued
        later goes behind. On the store's cycle (*t*), the entry's place at
        *t* + 1 is at most *E* - 1, and *E* - 1 only if an ack left at *t*
        (the entry was the head, acked and re-queued): then ``waited`` = 0
        and the budget is exactly *E* x *M*.
        """
        M, N = self.patience, self.bound
        depth = len(slots)
        off = _offset(depth)
        owed = Signal(len(out[0]), name="tracked_out")
        for i, o in enumerate(out):
            with m.If(tracked == i):
                m.d.comb += owed.eq(o)
        place = Signal(range(depth), name="tracked_place")
        for j in range(depth):
            with m.If(live[j] & (slots[j] == tracked)):
                m.d.comb += place.eq(off(j, consume))
        with m.If(pending):
            m.d.comb += [Assert(age >= 1, "inv: age of a tracked store"),
                         Assert(owed != 0, "inv: the tracked store is owed"),
                         Assert(age + M - 1 - waited + place * M <= N,
                                "inv: the tracked entry's budget")]


def _offset(depth):
    """``off(j, base)``: ``(j - base) mod depth``, for a FIFO's slot ``j`` from its ``base``."""
    def off(j, base):
        return Mux(base <= j, j - base, j + depth - base)
    return off


def _fifo_invariants(produce, consume, level, depth, what):
    """Asserts that an ``amaranth.lib.fifo.SyncFIFO``'s pointers agree with its level: produce
    and consume move by one (mod depth) on a write and a read, level counts the difference,
    from all-zero at reset (invariants of the induction proofs; ``what`` names the FIFO)."""
    return [Assert(level <= depth, f"inv: {what} level"),
            Assert(produce < depth, f"inv: {what} produce"),
            Assert(consume < depth, f"inv: {what} consume"),
            Assert(_offset(depth)(produce, consume) == Mux(level == depth, 0, level),
                   f"inv: {what} produce = consume + level")]


def _is_load(op):
    """The router's reading of a REQ's ``op``: anything not a store or fetch-add is a load."""
    return ~((op == MemOp.WRITE_WORD) | (op == MemOp.WRITE_BLOCK) | (op == MemOp.FETCH_ADD))


def _data_answer(flit):
    """A flit on ``tx`` is a data answer: an RSP that is not a store ack (acks are WRITE_BLOCK)."""
    return (flit.kind == FlitKind.RSP) & (flit.op != MemOp.WRITE_BLOCK)


class OverAdmitter(DieRouter):
    """A broken router: an incoming load is admitted without counting the UB answer entering the queue.

    The real router elaborated, then the admission signal ``rx_rd_ok`` of its
    answer queue driven again (the later assignment wins) with
    ``used < rsp_depth`` in place of ``used + ub_wr < rsp_depth``.
    """

    def elaborate(self, platform):
        frag = Fragment.get(super().elaborate(platform), platform)
        sig = FragmentSignals(frag, self).sub("answers")
        rx = self.rx.payload
        sig.fragment.add_statements("comb", sig["rx_rd_ok"].eq(
            self.rx.valid & (rx.kind == FlitKind.REQ) & _is_load(rx.op) & ~self.host.re
            & (sig["used"] < self.rsp_depth)))
        return frag


class StallDropper(wiring.Component):
    """A broken drain: the router's data answer is taken from it even while ``tx`` is not ready."""

    def __init__(self, router, block):
        self.router, self.block = router, block
        super().__init__({"tx": Out(router.tx.signature)})

    def elaborate(self, platform):
        m = Module()
        m.submodules.router = self.block
        tx = self.router.tx
        m.d.comb += [self.tx.valid.eq(tx.valid), self.tx.payload.eq(tx.payload),
                     tx.ready.eq(self.tx.ready | _data_answer(tx.payload))]
        return m


class AnswerAccounting(Harness):
    """Harness: a whole DieRouter, arbitrary traffic and back-pressure; its RSP queue's accounts.

    See the module docstring. The solver picks (``AnySeq``) one admitted
    answer to follow; ``cnt`` counts the answers admitted and not yet sent.

    Parameters
    ----------
    ranks, aivs, hbm_blocks, data_bytes, hbm_latency, rsp_depth, max_outstanding
        Of the :class:`~epfabric.hw.router.DieRouter` under test (small).
    ignore_entering : bool
        Check the broken :class:`OverAdmitter` instead.
    drop_on_stall : bool
        Put the broken :class:`StallDropper` after ``tx``.
    invariants : bool
        Also assert the invariants that make the property inductive.
    patience : int or None
        Also claim the bounded response (:meth:`response_invariants`): ``tx``
        is ready at least once every ``patience`` cycles and the followed
        answer leaves within ``bound`` cycles of its admission. ``None``: no
        such claim, any back-pressure.
    bound : int or None
        The response claimed (default ``rsp_depth`` x *S* x ``patience`` - 1,
        *S* = 2 + ``aivs`` sources of ``tx``).
    unfair : bool
        With ``patience``: drop the fairness assumption (the negative control).
    """

    def __init__(self, *, ranks=2, aivs=1, hbm_blocks=2, data_bytes=32, hbm_latency=2,
                 rsp_depth=2, max_outstanding=1, ignore_entering=False, drop_on_stall=False,
                 invariants=True, patience=None, bound=None, unfair=False):
        super().__init__()
        cls = OverAdmitter if ignore_entering else DieRouter
        self.router = cls(ranks=ranks, aivs=aivs, hbm_blocks=hbm_blocks, data_bytes=data_bytes,
                          hbm_latency=hbm_latency, rsp_depth=rsp_depth,
                          max_outstanding=max_outstanding)
        self.drop_on_stall, self.invariants = drop_on_stall, invariants
        self.patience, self.unfair = patience, unfair
        self.bound = bound if bound is not None or patience is None else \
            rsp_depth * (2 + aivs) * patience - 1

    def check(self, m):
        r = self.router
        n, L, depth = r.aivs, r.hbm_latency, r.rsp_depth
        blk = Elaborated(r)
        if self.drop_on_stall:
            m.submodules.dut = dut = StallDropper(r, blk)
            tx = dut.tx
        else:
            m.submodules.dut = blk
            tx = r.tx

        def free(value):
            return value.eq(AnySeq(len(value)))

        # --- arbitrary inputs: the cores, rx, the host, tx back-pressure --------------------------
        rank = Signal.like(r.rank, name="rank")
        m.d.comb += [rank.eq(AnyConst(len(rank))), r.rank.eq(rank)]
        for i in range(n):
            m.d.comb += [free(r.mem_req[i].valid), free(r.mem_req[i].payload.as_value()),
                         r.mem_rsp[i].ready.eq(1)]
        m.d.comb += [free(r.rx.valid), free(r.rx.payload.as_value())]
        if self.patience is None:
            m.d.comb += free(tx.ready)
        else:
            tx_waited = fair_ready(m, tx.ready, patience=None if self.unfair else self.patience,
                                   name="tx")
        for name in ("we", "addr", "wdata", "re", "wblock", "wrow"):
            m.d.comb += free(getattr(r.host, name))
        rx = r.rx.payload
        rx_taken = r.rx.valid & r.rx.ready & (rx.kind == FlitKind.REQ)
        load_in = rx_taken & _is_load(rx.op)        # a remote load REQ taken: its answer is owed
        ub_in = rx_taken & ~_is_load(rx.op)         # a remote store / fetch-add REQ taken

        # --- the cores' read ports: any answer (not this property's business) -------------------
        for i in range(n):
            port = r.ub_read[i]
            m.d.comb += [port.req.ready.eq(1), free(port.resp.valid),
                         free(port.resp.payload.as_value())]

        # --- read port `aivs`: answers exactly L cycles after a request, any data ------------------
        rport = r.ub_read[n]
        stage = data.StructLayout({"valid": 1, "remote": 1, "src": len(rx.src), "core": len(rx.core),
                                   "block": 1})
        pipe = [Signal(stage, name=f"rd{k}") for k in range(L)]
        m.d.comb += [rport.req.ready.eq(1), rport.resp.valid.eq(pipe[L - 1].valid),
                     free(rport.resp.payload.as_value()),
                     Assert(~load_in | (rport.req.valid & ~r.host.re), "a load REQ taken, not read")]
        m.d.sync += [pipe[0].valid.eq(rport.req.valid), pipe[0].remote.eq(load_in),
                     pipe[0].src.eq(rx.src), pipe[0].core.eq(rx.core),
                     pipe[0].block.eq(rx.op == MemOp.READ_BLOCK)]
        for k in range(1, L):
            m.d.sync += pipe[k].eq(pipe[k - 1])

        # --- UB port: one request outstanding, answered after >= 1 cycle, held until taken --------
        ub, ub_rsp = r.ub_req, r.ub_rsp
        busy, shown = Signal(name="ub_busy"), Signal(name="ub_shown")
        u_host, u_remote = Signal(name="ub_host"), Signal(name="ub_remote")
        u_src, u_core = Signal.like(rx.src, name="ub_src"), Signal.like(rx.core, name="ub_core")
        u_op, u_addr = Signal(UBOp, name="ub_op"), Signal.like(ub_rsp.payload.addr, name="ub_addr")
        u_old = Signal(32, name="ub_old")
        taken = ub_rsp.valid & ub_rsp.ready
        m.d.comb += [ub.ready.eq(AnySeq(1) & (~busy | taken)),
                     ub_rsp.valid.eq(busy & (shown | AnySeq(1))),
                     ub_rsp.payload.op.eq(u_op), ub_rsp.payload.addr.eq(u_addr),
                     ub_rsp.payload.old.eq(u_old)]
        accept = ub.valid & ub.ready
        m.d.comb += Assert(~ub_in | (accept & ~r.host.we), "a store/fetch-add REQ taken, not applied")
        with m.If(ub_rsp.valid & ~ub_rsp.ready):
            m.d.sync += shown.eq(1)
        with m.If(taken):
            m.d.sync += [busy.eq(0), shown.eq(0)]
        with m.If(accept):
            m.d.sync += [busy.eq(1), shown.eq(0), u_host.eq(r.host.we), u_remote.eq(ub_in),
                         u_src.eq(rx.src), u_core.eq(rx.core), u_op.eq(ub.payload.op),
                         u_addr.eq(ub.payload.addr), u_old.eq(AnySeq(32))]

        # --- admissions: the answers the router now owes ------------------------------------------
        ans = answer_layout(r.flit)
        adm_rd = rport.resp.valid & pipe[L - 1].remote
        adm_ub = taken & u_remote & (u_op == UBOp.FETCH_ADD)
        adm = Signal(name="admit")
        entry = Signal(ans, name="admitted")
        last, resp = pipe[L - 1], rport.resp.payload
        m.d.comb += [adm.eq(adm_rd | adm_ub),
                     Assert(~(adm_rd & adm_ub), "two answers admitted in one cycle")]
        with m.If(adm_rd):
            m.d.comb += [entry.dst.eq(last.src), entry.core.eq(last.core),
                         entry.op.eq(Mux(last.block, MemOp.READ_BLOCK, MemOp.READ_WORD)),
                         entry.data.eq(Mux(last.block, resp.block, resp.word))]
        with m.Else():
            m.d.comb += [entry.dst.eq(u_src), entry.core.eq(u_core), entry.op.eq(MemOp.FETCH_ADD),
                         entry.data.eq(u_old)]

        # --- departures: data answers sent on tx ----------------------------------------------------
        t = tx.payload
        dep = Signal(name="depart")
        sent = Signal(ans, name="sent")
        m.d.comb += [dep.eq(tx.valid & tx.ready & _data_answer(t)),
                     sent.dst.eq(t.dst), sent.core.eq(t.core), sent.op.eq(t.op),
                     sent.data.eq(t.data)]
        with m.If(dep):
            m.d.comb += [Assert(t.src == rank, "an answer with a wrong src"),
                         Assert(t.small == (t.op != MemOp.READ_BLOCK), "an answer with a wrong small")]

        # --- the accounts ---------------------------------------------------------------------------
        cnt = Signal(range(depth + 2), name="cnt")      # admitted, not yet sent
        m.d.comb += [Assert(~adm | (cnt < depth), "an answer admitted to a full RSP queue"),
                     Assert(~dep | (cnt > 0), "an answer sent that is not owed")]
        m.d.sync += cnt.eq(cnt + adm - dep)
        trk = Signal(name="trk")                        # following one admitted answer ...
        pos = Signal(range(depth + 1), name="pos")      # ... with pos answers ahead of it
        rec = Signal(ans, name="rec")                   # ... which was this
        follow = Signal(name="follow")
        m.d.comb += follow.eq(~trk & adm & AnySeq(1))
        with m.If(trk):
            with m.If(dep):
                with m.If(pos == 0):
                    m.d.comb += Assert(sent.as_value() == rec.as_value(),
                                       "the followed answer left changed or out of order")
                    m.d.sync += trk.eq(0)
                with m.Else():
                    m.d.sync += pos.eq(pos - 1)
        with m.Elif(follow):
            m.d.sync += [trk.eq(1), rec.eq(entry), pos.eq(cnt - dep)]
        if self.patience is not None:
            _, age = response_age(m, start=follow, done=trk & dep & (pos == 0), bound=self.bound,
                                  name="answer")
            # (not shown tight: a cover of the bound needs a longer run than is kept)
            m.d.comb += Assert(~trk | (age <= self.bound), "an answer not sent in time")
        # non-vacuity: the queue full, and a followed answer leaving behind another one
        waited = Signal(name="waited")
        with m.If(trk & (pos != 0)):
            m.d.sync += waited.eq(1)
        with m.If(~trk):
            m.d.sync += waited.eq(0)
        m.d.comb += [Cover(cnt == depth),
                     Cover(trk & dep & (pos == 0) & waited & (rec.op == MemOp.FETCH_ADD))]

        # --- the queue itself: harness read ports on its storage -------------------------------------
        answers = blk.sub("answers")        # the router's AnswerQueue
        q = answers.sub("rsp_queue")
        store_mem = q.sub("storage").fragment
        slots = []
        for j in range(depth):
            v = Signal(ans, name=f"rsp_slot{j}")
            store_mem.read_port(domain="comb", addr=Const(j, ceil_log2(depth)),
                                data=v.as_value(), en=Const(1), transparent_for=())
            slots.append(v)
        produce, consume, level = q["produce"], q["consume"], q["level"]
        off = _offset(depth)

        with m.If(trk):
            m.d.comb += Assert(pos < cnt, "the followed answer is not among those owed")
            for j in range(depth):
                with m.If(off(j, consume) == pos):
                    # nothing lost: the followed answer waits at its place, unchanged
                    m.d.comb += Assert(slots[j].as_value() == rec.as_value(),
                                       "the followed answer is not in its queue slot")
        m.d.comb += Assert(level == cnt, "the RSP queue does not hold the answers owed")
        if not self.invariants:
            return
        m.d.comb += _fifo_invariants(produce, consume, level, depth, "queue")
        # it only ever holds data answers (a read's or a fetch-add's): none
        # leaves looking like a store ack
        for j in range(depth):
            with m.If(off(j, consume) < level):
                op = slots[j].op
                m.d.comb += Assert((op == MemOp.READ_WORD) | (op == MemOp.READ_BLOCK)
                                   | (op == MemOp.FETCH_ADD), f"inv: slot {j} is not a data answer")
        # the router's read tags are the model's reads in flight: a valid tag is the
        # host's (rport.req.valid without a load REQ taken is a host read) or a
        # remote load's with its requester
        rtag = data.StructLayout({"valid": 1, "host": 1, "src": len(rx.src), "core": len(rx.core),
                                  "block": 1})
        for k in range(L):
            tag = data.View(rtag, answers[f"rtag{k}"])
            p = pipe[k]
            m.d.comb += [Assert(tag.valid == p.valid, f"inv: read tag {k} valid"),
                         Assert(tag.host == (p.valid & ~p.remote), f"inv: read tag {k} host")]
            with m.If(p.remote):
                m.d.comb += [Assert(p.valid, f"inv: read {k} remote but not valid"),
                             Assert((tag.src == p.src) & (tag.core == p.core)
                                    & (tag.block == p.block), f"inv: read tag {k} requester")]
        # the reservation: every remote load in flight has its place in the queue
        inflight = sum(p.remote for p in pipe)
        m.d.comb += [Assert(answers["inflight"] == inflight, "inv: loads in flight"),
                     Assert(level + inflight <= depth, "inv: queue + loads in flight <= rsp_depth")]
        # the UB answer tags (the router's UBArbiter) name the outstanding request's requester
        tags = blk.sub("ub")
        with m.If(busy):
            m.d.comb += [Assert(tags["tag_host"] == u_host, "inv: UB tag host"),
                         Assert(tags["tag_local"] == (~u_host & ~u_remote), "inv: UB tag local"),
                         Assert(~(u_host & u_remote), "inv: UB request host and remote")]
            with m.If(u_remote):
                m.d.comb += Assert((tags["tag_src"] == u_src) & (tags["tag_rcore"] == u_core),
                                   "inv: UB tag requester")
            # the UB port is given stores and fetch-adds only (UBOp has a fourth, unused code)
            m.d.comb += Assert(u_op.as_value() != 3, "inv: UB request of no operation")
        with m.If(~busy):
            m.d.comb += Assert(~shown, "inv: UB answer shown with nothing outstanding")
        if self.patience is not None:
            self.response_invariants(m, blk, trk, pos, age, tx_waited)

    def response_invariants(self, m, blk, trk, pos, age, waited):
        """The followed answer's budget: ``age`` + (*M* - 1 - ``waited``) + *d* x *M* + ``pos`` x *S* x *M* <= ``bound``.

        Why ``bound`` = ``rsp_depth`` x *S* x *M* - 1 (*S* = 2 + ``aivs``
        sources of ``tx``'s round robin, *M* = ``patience``): an admitted
        answer is in the RSP queue at once, ``pos`` answers ahead of it, and
        the queue's head is offered to ``tx`` while the queue is not empty.
        ``tx`` takes one flit per ready cycle (the next at most *M* - 1 -
        ``waited`` away, then every *M*), the round robin's grant going to
        the first source at or after its pointer: *d* = (0 - pointer) mod *S*
        other sources can go before the queue's head, and after the head
        leaves the pointer is past the queue, so each next answer waits for
        at most *S* grants. A grant to another source lowers *d*; a grant to
        the queue lowers ``pos`` (*d* becomes *S* - 1: *S* x *M* - 1 <
        *S* x *M* + *M* - 1 - ``waited``); a refusal raises ``waited``. At
        admission (cycle *t*), ``pos`` <= ``rsp_depth`` - 1; it is that only
        when no answer left at *t*, so a ready cycle at *t* granted another
        source (then *d* <= *S* - 2) or there was none (``waited`` >= 1):
        either way at most ``rsp_depth`` x *S* x *M* - 1.
        """
        M, N = self.patience, self.bound
        S = 2 + self.router.aivs
        ptr = blk.sub("tx_mux").sub("tx_arb")["ptr"]
        ahead = Mux(ptr == 0, 0, S - ptr)
        m.d.comb += Assert(ptr < S, "inv: tx pointer")
        with m.If(trk):
            m.d.comb += [Assert(age >= 1, "inv: age of the followed answer"),
                         Assert(age + M - 1 - waited + ahead * M + pos * S * M <= N,
                                "inv: the followed answer's budget")]


class TxResponse(Harness):
    """Harness: the router's ``tx`` (:class:`~epfabric.hw.router_tx.TxMux`) under a fair fabric.

    Its sources -- the RSP queue's head (data answers), the store acks, each
    core's remote requests -- offer flits at any time and, as streams must,
    keep a flit offered until ``tx`` takes it (``Assume``); ``tx`` is ready
    at least once every *M* cycles. Claim: every offered flit is taken at
    most *N* = *S* x *M* - 1 cycles after it was first offered (*S* = 2 +
    ``aivs`` sources).

    Why: ``tx`` is a round robin over the *S* sources, its pointer moving
    past each grant when ``tx`` takes it. A waiting source *s* is granted
    once the pointer reaches it, and each taken flit moves the pointer past
    the grantee, which lies between the pointer and *s*: at most *S* - 1
    flits go first, one per ready cycle of ``tx``. The budget
    ``waited``-adjusted: *M* - 1 - ``waited`` to the next ready cycle, plus
    *M* per source ahead, (*s* - pointer) mod *S*.

    Parameters
    ----------
    aivs : int
        Cores per die (*S* = 2 + ``aivs``).
    patience : int or None
        *M*; ``None`` drops the fairness (the negative control).
    bound : int or None
        *N* (default *S* x *M* - 1).
    invariants : bool
        Also assert the budget per source.
    """

    def __init__(self, *, aivs=2, patience=2, bound=None, invariants=True):
        super().__init__()
        self.count = 2 + aivs
        self.patience, self.invariants = patience, invariants
        self.bound = bound if bound is not None else self.count * (patience or 1) - 1
        self.mux = TxMux(ranks=2, aivs=aivs, hbm_blocks=2, data_bytes=32, max_outstanding=3)

    def check(self, m):
        mux, n, N = self.mux, self.count, self.bound
        m.submodules.tx_mux = blk = Elaborated(mux)
        m.d.comb += mux.rank.eq(0)
        waited = fair_ready(m, mux.tx.ready, patience=self.patience, name="tx")
        ptr = blk.sub("tx_arb")["ptr"]
        sources = [("answers", mux.answers), ("acks", mux.acks),
                   *((f"core{i}", r) for i, r in enumerate(mux.requests))]
        for s, (name, src) in enumerate(sources):
            age = Signal(range(N + 2), name=f"{name}_age")   # cycles offered and not taken
            taken = src.valid & src.ready
            m.d.comb += [src.valid.eq(AnySeq(1)),
                         src.payload.eq(AnySeq(len(src.payload.as_value()))),
                         # the stream contract: an offered flit stays offered until taken
                         Assume((age == 0) | src.valid)]
            with m.If(src.valid & ~taken & (age != N + 1)):
                m.d.sync += age.eq(age + 1)
            with m.Elif(taken):
                m.d.sync += age.eq(0)
            m.d.comb += [Assert(age <= N, f"{name}: a flit not taken in time"),
                         Cover(taken & (age == N))]
            if self.invariants:
                ahead = Mux(ptr <= s, s - ptr, s + n - ptr)     # sources the pointer reaches first
                with m.If(src.valid):
                    m.d.comb += Assert(age + self.patience - 1 - waited + ahead * self.patience
                                       <= N, f"inv: {name}'s budget")
        if self.invariants:
            # the pointer is a grant index + 1, wrapped
            m.d.comb += Assert(ptr < n, "inv: tx pointer")


PROPERTIES = {
    "router.acks": FormalProperty(
        AckAccounting, mode="prove", depth=4, cover_depth=8, expect="pass",
        doc="router's store-ack coalescer, 3 ranks x 2 cores, window 3, any stores and "
            "back-pressure: every ack acknowledges 1..owed stores; un-acked stores are counted "
            "and queued (none lost, none acked twice)",
        params={},
        gtkw=("out0", "out1", "out2", "out3", "dut.ack__valid", "dut.ack__ready",
              "dut.ack__payload")),
    "router.ack_response": FormalProperty(
        AckAccounting, mode="prove", depth=4, cover_depth=17, expect="pass", slow=True,
        doc="router's store-ack coalescer, 3 ranks x 2 cores (4 remote), ack taken at least "
            "once every 2 cycles: every remote store is acknowledged within 8 cycles (E x M: "
            "its entry re-queued behind the 3 others)",
        params={"patience": 2},
        gtkw=("pick", "tracked_entry", "store_pending", "store_age", "tracked_place",
              "ack_waited", "dut.ack__valid", "dut.ack__ready")),
    "router.ack_response_tight": FormalProperty(
        AckAccounting, mode="bmc", depth=17, expect="fail", slow=True,
        doc="router.ack_response claimed one cycle tighter (7): the solver finds the store "
            "acknowledged at 8 (the claim alone, no invariants)",
        params={"patience": 2, "bound": 7, "invariants": False, "claim_only": True},
        gtkw=("pick", "tracked_entry", "store_pending", "store_age", "ack_waited",
              "dut.ack__valid", "dut.ack__ready")),
    "router.ack_response_unfair": FormalProperty(
        AckAccounting, mode="bmc", depth=12, expect="fail", slow=True,
        doc="router.ack_response without the fairness assumption: the solver finds an ack "
            "consumer that keeps a store unacknowledged past 8 cycles",
        params={"patience": 2, "bound": 8, "unfair": True, "invariants": False,
                "claim_only": True},
        gtkw=("pick", "tracked_entry", "store_pending", "store_age", "dut.ack__valid",
              "dut.ack__ready")),
    "router.answer_response": FormalProperty(
        AnswerAccounting, mode="prove", depth=4, cover_depth=14, expect="pass", slow=True,
        doc="whole die router, 2 ranks x 1 core, RSP queue of 2, tx ready at least once every 2 "
            "cycles: every data answer admitted leaves on tx within 11 cycles (rsp_depth x S x M "
            "- 1: one answer ahead, each waiting for the 3 sources of tx's round robin)",
        params={"patience": 2},
        gtkw=("cnt", "trk", "pos", "answer_age", "tx_waited", "admit", "depart",
              "dut.tx__valid", "dut.tx__ready")),
    "router.answer_response_unfair": FormalProperty(
        AnswerAccounting, mode="bmc", depth=6, expect="fail", slow=True,
        doc="router.answer_response's argument without the fairness assumption: the solver "
            "finds a reachable state whose budget (age + the cycles an answer can still need) "
            "exceeds 11 (the claim-level control, a 14-cycle BMC of the router, does not finish "
            "in 600 s)",
        params={"patience": 2, "unfair": True},
        gtkw=("cnt", "trk", "pos", "answer_age", "admit", "depart", "dut.tx__valid",
              "dut.tx__ready")),
    "router.tx_response": FormalProperty(
        TxResponse, mode="prove", depth=2, cover_depth=10, expect="pass", slow=True,
        doc="router's tx (round robin over data answers, store acks and 2 cores' requests), tx "
            "ready at least once every 2 cycles: every offered flit is taken within 7 cycles "
            "(S x M - 1: the other 3 sources first, one per ready cycle)",
        params={"aivs": 2, "patience": 2},
        gtkw=("answers_age", "acks_age", "core0_age", "core1_age", "tx_waited",
              "tx_mux.tx__valid", "tx_mux.tx__ready")),
    "router.tx_response_tight": FormalProperty(
        TxResponse, mode="bmc", depth=10, expect="fail", slow=True,
        doc="router.tx_response claimed one cycle tighter (6): the solver finds the flit taken "
            "at 7 (the claim alone, no invariants)",
        params={"aivs": 2, "patience": 2, "bound": 6, "invariants": False},
        gtkw=("answers_age", "acks_age", "core0_age", "core1_age", "tx_waited",
              "tx_mux.tx__valid", "tx_mux.tx__ready")),
    "router.tx_response_unfair": FormalProperty(
        TxResponse, mode="bmc", depth=10, expect="fail", slow=True,
        doc="router.tx_response without the fairness assumption: the solver finds a fabric that "
            "keeps a flit waiting past 7 cycles",
        params={"aivs": 2, "patience": None, "bound": 7, "invariants": False},
        gtkw=("answers_age", "acks_age", "core0_age", "core1_age", "tx_mux.tx__valid",
              "tx_mux.tx__ready")),
    "router.answers": FormalProperty(
        AnswerAccounting, mode="prove", depth=4, cover_depth=10, expect="pass",
        doc="whole die router, 2 ranks x 1 core, RSP queue of 2, read latency 2, any core "
            "requests, rx flits, host accesses and tx back-pressure: every data answer admitted "
            "(a remote load's read, a remote fetch-add's old value) finds space, leaves on tx "
            "once, in order, unchanged; none sent that is not owed",
        params={},
        gtkw=("cnt", "trk", "pos", "admit", "depart", "dut.tx__valid", "dut.tx__ready",
              "dut.rx__valid", "dut.rx__ready")),
}
