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

``duplicate=True`` puts :class:`Stutter` behind the engine — a broken engine
that sends each reduced chunk twice (the negative control).
"""

from amaranth.asserts import AnyConst, AnySeq
from amaranth.hdl import Assert, Assume, Cat, Cover, Module, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from ....hw.inc_engine import EPOCH_BITS, IncEngine, IncOp
from . import FormalProperty, Harness

__all__ = ["IncReduce", "Stutter", "PROPERTIES"]


class Stutter(wiring.Component):
    """A broken engine: a real one whose reduced (RS) flits are each sent twice."""

    def __init__(self, engine):
        self.engine = engine
        sig = stream.Signature(engine.layout)
        super().__init__({"i_stream": In(sig), "o_stream": Out(sig)})

    def elaborate(self, platform):
        m = Module()
        m.submodules.engine = eng = self.engine
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
    """

    def __init__(self, *, ranks=3, tmax=2, lanes=1, slots=2, duplicate=False):
        super().__init__()
        self.ranks, self.lanes = ranks, lanes
        self.engine = IncEngine(ranks=ranks, tmax=tmax, lanes=lanes, slots=slots)
        self.dut = Stutter(self.engine) if duplicate else self.engine

    def check(self, m):
        n, lanes = self.ranks, self.lanes
        m.submodules.dut = dut = self.dut
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


PROPERTIES = {
    "inc_engine.reduce3": FormalProperty(
        IncReduce, mode="bmc", depth=7, expect="pass", solver="boolector",
        doc="INC engine, 3 ranks, 2 slots, any traffic: a reduced chunk is the int32 sum of its "
            "2 contributions, goes to its root, once",
        params={"ranks": 3, "lanes": 1, "slots": 2},
        gtkw=("t_epoch", "t_root", "t_chunk", "in_tracked", "contributed", "sum0", "delivered")),
    "inc_engine.reduce2": FormalProperty(
        IncReduce, mode="bmc", depth=8, expect="pass", solver="boolector",
        doc="INC engine, 2 ranks, 1 slot, 2 lanes: the reduced chunk equals the contribution, "
            "once, to its root",
        params={"ranks": 2, "lanes": 2, "slots": 1},
        gtkw=("t_epoch", "t_root", "t_chunk", "in_tracked", "contributed", "sum0", "delivered")),
    "inc_engine.reduce3_deep": FormalProperty(
        IncReduce, mode="bmc", depth=10, expect="pass", slow=True, solver="boolector",
        doc="inc_engine.reduce3 to 10 cycles",
        params={"ranks": 3, "lanes": 1, "slots": 2}),
}
