"""Formal harness of the router's store-ack accounting (:class:`~epfabric.hw.router.AckCoalescer`).

A die acknowledges remote stores coalesced (hw/router.py, "Store
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
"""

from amaranth.asserts import AnySeq
from amaranth.hdl import Assert, Assume, Const, Cover, Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2

from ....hw.router import AckCoalescer
from . import Elaborated, FormalProperty, Harness

__all__ = ["AckAccounting", "RestartLoser", "PROPERTIES"]


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
    """

    def __init__(self, *, ranks=3, aivs=2, max_outstanding=3, rank=0, lose_restart=False,
                 invariants=True):
        super().__init__()
        self.ranks, self.aivs, self.max_outstanding = ranks, aivs, max_outstanding
        self.rank = rank
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
                     store.payload.core.eq(AnySeq(core_bits)),
                     ack.ready.eq(AnySeq(1))]
        # remote stores come from the cores of the other ranks (DieRouter:
        # acks.store.valid = ub_remote & ub_store)
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
            with m.If(ak):
                m.d.comb += [Assert(ack.payload.count >= 1, f"entry {i}: empty ack"),
                             Assert(ack.payload.count <= out[i],
                                    f"entry {i}: more stores acked than were committed")]
            m.d.sync += out[i].eq(out[i] + st - Mux(ak, ack.payload.count, 0))
        # non-vacuity: an ack of 2 stores at once
        m.d.comb += Cover(sent & (ack.payload.count == 2))

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

        def off(j, base):              # (j - base) mod depth
            return Mux(base <= j, j - base, j + depth - base)

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
        # Invariants. The FIFO (amaranth.lib.fifo.SyncFIFO): produce and
        # consume move by one (mod depth) on a write and a read, level counts
        # the difference, from all-zero at reset.
        m.d.comb += [Assert(level <= depth, "inv: FIFO level"),
                     Assert(produce < depth, "inv: FIFO produce"),
                     Assert(consume < depth, "inv: FIFO consume"),
                     Assert(off(produce, consume) == Mux(level == depth, 0, level),
                            "inv: FIFO produce = consume + level")]
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


PROPERTIES = {
    "router.acks": FormalProperty(
        AckAccounting, mode="prove", depth=4, cover_depth=8, expect="pass",
        doc="router's store-ack coalescer, 3 ranks x 2 cores, window 3, any stores and "
            "back-pressure: every ack acknowledges 1..owed stores; un-acked stores are counted "
            "and queued (none lost, none acked twice)",
        params={},
        gtkw=("out0", "out1", "out2", "out3", "dut.ack__valid", "dut.ack__ready",
              "dut.ack__payload")),
}
