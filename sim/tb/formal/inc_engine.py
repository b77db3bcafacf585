"""Formal harness of the INC engine: a reduced chunk is the sum of its contributions, delivered once.

:class:`IncReduce` offers the :class:`~epfabric.hw.inc_engine.IncEngine`
arbitrary flits (AG, RS and BARRIER messages of any root, chunk and epoch,
in any order and at any time) and back-pressures its output arbitrarily. One
reduction is tracked: its (epoch, root, chunk) tag is chosen by the solver
(``AnyConst``). The environment keeps the engine's contract for that tag
only — each rank other than the root contributes to it at most once, and no
rank contributes to it as its root — and the harness sums what it offered
under that tag. When the engine sends an RS flit with the tracked tag:

* it goes to the root (``dst == root``), from the engine (``src == ranks``);
* every one of the ``ranks - 1`` contributions has been accepted;
* its lanes equal the (wrapping int32) sum of the contributions;
* it has not been sent before (delivered once).

Contributions of every other tag, AG multicasts and barriers are arbitrary
traffic that competes for the aggregator slots and the output (slot
back-pressure included).

Both ``inc_engine.reduce3`` and ``inc_engine.reduce2`` are proved by
k-induction, with no bound: the harness elaborates the engine itself
(:class:`~epfabric.sim.tb.formal.Elaborated`), adds read ports of its own to
the engine's aggregator memory (the engine's ports and Verilog are
untouched) and asserts :meth:`IncReduce.reduce_invariants` — the tracked
tag's slot holds exactly the count and the int32 sum of the contributions
accepted so far while the reduction is partial, the finished result waits in
the output register with the right sum until it is taken, and never both
waits and was delivered; only AG/BARRIER flits are multicast.
``inc_engine.reduce3_deep`` keeps the old BMC run without the invariants.

``duplicate=True`` puts :class:`Stutter` behind the engine — a broken engine
that sends each reduced chunk twice (the negative control).
"""

from amaranth.asserts import AnyConst, AnySeq
from amaranth.hdl import Assert, Assume, Cat, Const, Cover, Module, Signal
from amaranth.lib import data
from amaranth.utils import ceil_log2
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from ....hw.inc_engine import EPOCH_BITS, IncEngine, IncOp, _State
from . import Elaborated, FormalProperty, Harness

__all__ = ["IncReduce", "Stutter", "PROPERTIES"]


class Stutter(wiring.Component):
    """A broken engine: a real one whose reduced (RS) flits are each sent twice."""

    def __init__(self, engine, block=None):
        self.engine = engine
        self.block = block if block is not None else engine   # an Elaborated view of it
        sig = stream.Signature(engine.layout)
        super().__init__({"i_stream": In(sig), "o_stream": Out(sig)})

    def elaborate(self, platform):
        m = Module()
        m.submodules.engine = self.block
        eng = self.engine
        wiring.connect(m, wiring.flipped(self.i_stream), eng.i_stream)
        again = Signal()
        held = Signal.like(eng.o_stream.payload)
        with m.If(again):
            m.d.comb += [self.o_stream.valid.eq(1), self.o_stream.payload.eq(held)]
            with m.If(self.o_stream.ready):
                m.d.sync += again.eq(0)
        with m.Else():
            m.d.comb += [self.o_stream.valid.eq(eng.o_stream.valid),
                         self.o_stream.payload.eq(eng.o_stream.payload),
                         eng.o_stream.ready.eq(self.o_stream.ready)]
            with m.If(eng.o_stream.valid & self.o_stream.ready &
                      (eng.o_stream.payload.op == IncOp.RS)):
                m.d.sync += [again.eq(1), held.eq(eng.o_stream.payload)]
        return m


class IncReduce(Harness):
    """Harness: arbitrary INC traffic; one tracked RS reduction checked at the output.

    Parameters
    ----------
    ranks, tmax, lanes, slots
        Of the engine under test (small: the solver sees every bit).
    duplicate : bool
        Check the broken :class:`Stutter` instead.
    invariants : bool
        Also assert the invariants that make the property inductive
        (:meth:`reduce_invariants`; needed by ``mode="prove"``).
    """

    def __init__(self, *, ranks=3, tmax=2, lanes=1, slots=2, duplicate=False, invariants=True):
        super().__init__()
        self.ranks, self.lanes, self.slots = ranks, lanes, slots
        self.engine = IncEngine(ranks=ranks, tmax=tmax, lanes=lanes, slots=slots)
        self.duplicate = duplicate
        self.invariants = invariants

    def check(self, m):
        n, lanes = self.ranks, self.lanes
        self.blk = Elaborated(self.engine)
        if self.duplicate:
            dut = Stutter(self.engine, self.blk)
            m.submodules.dut = dut
        else:
            dut = self.engine
            m.submodules.dut = self.blk
        inp, out = dut.i_stream, dut.o_stream
        head = inp.payload
        layout = self.engine.layout
        m.d.comb += [inp.valid.eq(AnySeq(1)),
                     inp.payload.eq(AnySeq(len(Cat(inp.payload)))),
                     Assume(head.op.as_value() <= IncOp.BARRIER.value),
                     Assume(head.src < n), Assume(head.root < n), Assume(head.dst == n),
                     Assume(head.chunk < 2),
                     # fields the engine only copies, and epochs 0..1 (tags still collide)
                     Assume((head.offset == 0) & (head.length == 0) & (head.compl.as_value() == 0)),
                     Assume(head.epoch < 2),
                     out.ready.eq(AnySeq(1))]

        # the tracked reduction
        t_epoch = Signal(EPOCH_BITS, name="t_epoch")
        t_root = Signal.like(head.root, name="t_root")
        t_chunk = Signal.like(head.chunk, name="t_chunk")
        self.t_epoch = t_epoch
        m.d.comb += [t_epoch.eq(AnyConst(EPOCH_BITS)), t_root.eq(AnyConst(len(t_root))),
                     t_chunk.eq(AnyConst(len(t_chunk))), Assume(t_root < n), Assume(t_chunk < 2),
                     Assume(t_epoch < 2)]
        contributed = Signal(n, name="contributed")     # ranks whose contribution was accepted
        total = [Signal(32, name=f"sum{k}") for k in range(lanes)]
        delivered = Signal(name="delivered")

        def tracked(p):
            return (p.op == IncOp.RS) & (p.epoch == t_epoch) & (p.root == t_root) & \
                   (p.chunk == t_chunk)

        ours = Signal(name="in_tracked")
        m.d.comb += ours.eq(inp.valid & tracked(head))
        # only the tracked reduction carries data: the others are traffic
        with m.If(~tracked(head)):
            m.d.comb += Assume(Cat(head.data) == 0)
        for r in range(n):
            with m.If(ours & (head.src == r)):
                m.d.comb += Assume(~contributed[r] & (t_root != r))
        with m.If(ours & inp.ready):
            for r in range(n):
                with m.If(head.src == r):
                    m.d.sync += contributed[r].eq(1)
            for k in range(lanes):
                m.d.sync += total[k].eq(total[k] + head.data[k])

        want = Signal(n, name="want")                   # every rank but the root
        for r in range(n):
            m.d.comb += want[r].eq(t_root != r)
        res = out.payload
        with m.If(out.valid & out.ready & tracked(res)):
            m.d.sync += delivered.eq(1)
            m.d.comb += [Assert(~delivered, "reduced chunk delivered twice"),
                         Assert(contributed == want, "reduced chunk sent before every "
                                                     "contribution arrived"),
                         Assert(res.dst == t_root, "reduced chunk sent to another rank"),
                         Assert(res.src == n)]
            for k in range(lanes):
                m.d.comb += Assert(res.data[k] == total[k], f"lane {k} is not the sum")
        m.d.comb += Cover(delivered)
        if self.invariants:
            self.reduce_invariants(m, tracked, t_root, t_chunk, contributed, total, delivered,
                                   want)

    def reduce_invariants(self, m, tracked, t_root, t_chunk, contributed, total, delivered, want):
        """Invariants of every reachable state that make reduce-once-with-the-right-sum inductive.

        k-induction otherwise starts from an aggregator slot that already
        holds a partial sum of the tracked tag before any contribution (or a
        sum or count that disagrees with what was contributed), or from a
        tracked result sitting in the output register next to one already
        delivered. The harness reads every aggregator slot through read
        ports it adds to the engine's elaborated memory (the engine's own
        ports and Verilog are untouched) and ties the tracked tag's slot,
        the output register and the multicast state to its scoreboard.
        """
        n, lanes, slots = self.ranks, self.lanes, self.slots
        blk = self.blk
        layout = self.engine.layout
        pool = blk.sub("pool").fragment
        # the engine's slot layout (IncEngine.elaborate's slot_layout)
        head = layout(Signal(layout))
        slot_view = data.StructLayout({
            "valid": 1, "tag": EPOCH_BITS + len(head.root) + len(head.chunk),
            "count": range(n), "acc": 32 * lanes})
        assert slot_view.size == len(blk["rp__data"]), "slot layout differs from the engine's"
        mem_slots = []
        for k in range(slots):
            raw = Signal(slot_view.size, name=f"slot{k}")
            pool.read_port(domain="comb", addr=Const(k, ceil_log2(slots)), data=raw,
                           en=Const(1), transparent_for=())
            mem_slots.append(slot_view(raw))
        key_bits = max(1, ceil_log2(slots))
        t_key = Signal(key_bits, name="t_key")      # the tracked tag's slot (as the engine maps it)
        m.d.comb += t_key.eq((t_chunk * n + t_root)[:key_bits] if slots > 1 else 0)
        o_valid, o_data = blk["o_valid"], layout(blk["o_data"])
        state, mc = blk["state"], layout(blk["mc"])

        count = Signal(range(n + 1), name="contributions")
        m.d.comb += count.eq(sum(contributed[r] for r in range(n)))
        sum_ok = Const(1, 1)
        for k in range(lanes):
            sum_ok = sum_ok & (o_data.data[k] == total[k])
        res_out = Signal(name="result_in_register")   # the tracked result waits in the output register
        m.d.comb += res_out.eq(o_valid & tracked(o_data))

        # the root never contributes (the environment's contract)
        m.d.comb += Assert(~(contributed & ~want).any(), "inv: the root contributed")
        # only AG and BARRIER flits are multicast (the IDLE arms that start it)
        with m.If(state == _State.MCAST):
            m.d.comb += Assert(mc.op != IncOp.RS, "inv: an RS flit multicast")
        for k, slot in enumerate(mem_slots):
            held = Signal(name=f"slot{k}_tracked")   # slot k holds the tracked partial sum
            m.d.comb += held.eq(slot.valid & (slot.tag == Cat(t_root, t_chunk, self.t_epoch)))
            acc_ok = Const(1, 1)
            for j in range(lanes):
                acc_ok = acc_ok & (slot.acc[32 * j:32 * j + 32] == total[j])
            # a slot is valid only between its first and its last (n - 1-th)
            # contribution: 1 <= count <= n - 2
            with m.If(slot.valid):
                m.d.comb += Assert((slot.count >= 1) & (slot.count <= n - 2),
                                   f"inv: slot {k} count")
            # the tracked tag is written to slot t_key only (a slot elsewhere
            # holding its tag is never read by a tracked flit); it is there
            # exactly while some but not all contributions arrived (the first
            # misses and writes count 1, each next one hits and adds one, the
            # last frees the slot), with their count and their sum
            partial = (count >= 1) & (count <= n - 2)
            with m.If(t_key == k):
                m.d.comb += Assert(held == partial, f"inv: slot {k} vs contributions")
                with m.If(held):
                    m.d.comb += [Assert(slot.count == count, f"inv: slot {k} count "
                                                             "of contributions"),
                                 Assert(acc_ok, f"inv: slot {k} sum of contributions")]
        # the result is built by the last contribution: it waits in the output
        # register (right sum, to the root, from the engine) until taken, and
        # is then delivered; never both, never before every contribution
        m.d.comb += [Assert(~delivered | (contributed == want), "inv: delivered early"),
                     Assert(~(res_out & delivered), "inv: result delivered and still waiting"),
                     Assert(~res_out | (contributed == want), "inv: result before the sum")]
        with m.If(contributed == want):
            m.d.comb += Assert(res_out | delivered, "inv: complete sum lost")
        with m.If(res_out):
            m.d.comb += [Assert(sum_ok, "inv: result is not the sum"),
                         Assert(o_data.dst == t_root, "inv: result not to the root"),
                         Assert(o_data.src == n, "inv: result not from the engine")]
        with m.If(count == 0):
            m.d.comb += [Assert(total[k] == 0, "inv: sum of no contribution")
                         for k in range(lanes)]


PROPERTIES = {
    "inc_engine.reduce3": FormalProperty(
        IncReduce, mode="prove", depth=4, cover_depth=7, expect="pass", solver="boolector",
        doc="INC engine, 3 ranks, 2 slots, any traffic: a reduced chunk is the int32 sum of its "
            "2 contributions, goes to its root, once",
        params={"ranks": 3, "lanes": 1, "slots": 2},
        gtkw=("t_epoch", "t_root", "t_chunk", "in_tracked", "contributed", "sum0", "delivered")),
    "inc_engine.reduce2": FormalProperty(
        IncReduce, mode="prove", depth=4, cover_depth=8, expect="pass", solver="boolector",
        doc="INC engine, 2 ranks, 1 slot, 2 lanes: the reduced chunk equals the contribution, "
            "once, to its root",
        params={"ranks": 2, "lanes": 2, "slots": 1},
        gtkw=("t_epoch", "t_root", "t_chunk", "in_tracked", "contributed", "sum0", "delivered")),
    "inc_engine.reduce3_deep": FormalProperty(
        IncReduce, mode="bmc", depth=10, expect="pass", slow=True, solver="boolector",
        doc="inc_engine.reduce3 to 10 cycles (BMC without the induction invariants: the "
            "property alone, as before the proof)",
        params={"ranks": 3, "lanes": 1, "slots": 2, "invariants": False}),
}
