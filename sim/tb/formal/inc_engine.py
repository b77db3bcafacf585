"""Formal harness of the INC engine: a reduced chunk is the sum of its contributions, delivered once; AG copies leave in time.

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

:class:`IncMulticastResponse` is the engine's bounded response: any
traffic, an output taken at least once every *M* cycles; every copy of an
accepted AG flit leaves within *N* = ``ranks`` x *M* - 1 cycles of its
acceptance (``inc_engine.ag_response``, k-induction; ``_tight`` claims one
cycle less and ``_unfair`` drops the fairness: both must fail).

``duplicate=True`` puts :class:`Stutter` behind the engine — a broken engine
that sends each reduced chunk twice (the negative control).
"""

from amaranth.asserts import AnyConst, AnySeq
from amaranth.hdl import Assert, Assume, Cat, Const, Cover, Module, Mux, Signal
from amaranth.lib import data
from amaranth.utils import ceil_log2
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from ....hw.inc_engine import EPOCH_BITS, IncEngine, IncOp, _State
from . import Elaborated, FormalProperty, Harness
from .fairness import fair_ready, response_age

__all__ = ["IncReduce", "Stutter", "IncMulticastResponse", "PROPERTIES"]


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


class IncMulticastResponse(Harness):
    """Harness: any INC traffic, a fair output; every copy of a tracked AG flit leaves in time.

    Why *N* = *n* x *M* - 1 (*n* = ``ranks``, *M* = ``patience`` >= 2): the
    engine takes an AG flit in its idle state and then loads its *n* - 1
    copies into the output register, one whenever the register is free
    (empty, or being taken), taking nothing else meanwhile. So the last copy
    leaves with the *n*-th cycle that takes the output, counting the one
    that empties a register still full from before. If the register is full
    the cycle after the acceptance, the output was not ready in the
    acceptance cycle (an AG acceptance loads nothing), so its next ready
    cycle is at most *M* - 2 away, and each next one within *M*:
    1 + (*M* - 2) + (*n* - 1) x *M*. Tight: a full register and a refusal in
    the acceptance cycle, then a ready cycle every *M*-th.

    Parameters
    ----------
    ranks, patience
        *n* and *M*; ``patience=None`` drops the fairness (negative control).
    bound : int or None
        *N* (default *n* x *M* - 1).
    invariants : bool
        Also assert :meth:`response_invariants`.
    """

    def __init__(self, *, ranks=3, patience=2, bound=None, invariants=True):
        super().__init__()
        self.ranks, self.patience, self.invariants = ranks, patience, invariants
        self.bound = bound if bound is not None else ranks * (patience or 1) - 1
        self.engine = IncEngine(ranks=ranks, tmax=2, lanes=1, slots=2)

    def check(self, m):
        n = self.ranks
        eng = self.engine
        m.submodules.dut = blk = Elaborated(eng)
        inp, out = eng.i_stream, eng.o_stream
        head = inp.payload
        pick = Signal(name="pick")
        m.d.comb += [inp.valid.eq(AnySeq(1)),
                     inp.payload.eq(AnySeq(len(Cat(inp.payload)))),
                     Assume(head.op.as_value() <= IncOp.BARRIER.value),
                     Assume(head.src < n), Assume(head.root < n), Assume(head.dst == n),
                     Assume(head.chunk < 2)]
        # the tracked AG flit is the one AG flit whose lane 0 is 1
        with m.If(head.op == IncOp.AG):
            m.d.comb += Assume((head.data[0] == 1) == pick)
        waited = fair_ready(m, out.ready, patience=self.patience, name="out")
        got = Signal(range(n), name="copies_out")      # copies of the tracked flit taken
        mine = out.valid & out.ready & self.is_copy(out.payload)
        done = Signal(name="all_copies_out")
        m.d.comb += done.eq(mine & (got == n - 2))
        pending, age = response_age(m, start=inp.valid & inp.ready & pick, done=done,
                                    bound=self.bound, name="ag")
        m.d.comb += pick.eq(AnySeq(1) & ~pending & (head.op == IncOp.AG))
        with m.If(done):
            m.d.sync += got.eq(0)
        with m.Elif(mine):
            m.d.sync += got.eq(got + 1)
        with m.If(mine):
            m.d.comb += Assert(pending, "a copy of a flit not taken")
        m.d.comb += [Assert(~pending | (age <= self.bound), "a copy not out in time"),
                     Cover(done & (age == self.bound))]
        if self.invariants:
            self.response_invariants(m, blk, pending, age, got, waited)

    @staticmethod
    def is_copy(p):
        """``p`` is a copy of the tracked AG flit."""
        return (p.op == IncOp.AG) & (p.data[0] == 1)

    def response_invariants(self, m, blk, pending, age, got, waited):
        """The tracked flit's copies, where they are, and its budget.

        While the tracked flit is multicast (state ``MCAST`` with it in
        ``mc``), ``mc_left`` copies are still to load and the budget is
        (*M* - 1 - ``waited`` if the register is full, else 0) + ``mc_left`` x
        *M*: a load needs a free register, which a full one becomes in its
        next ready cycle (*M* - 1 - ``waited`` away) and a just-loaded one
        within *M*; the last copy leaves within *M* of its load. After the
        last load, the budget is the register's: *M* - 1 - ``waited``. Each
        step lowers it by one at least (a ready cycle both empties and
        reloads the register: ``waited`` restarts at 0, *M* - 1 < *M* -
        ``waited``). And copies are neither lost nor made: taken + in the
        register + to load = *n* - 1.
        """
        n, M, N = self.ranks, self.patience, self.bound
        layout = self.engine.layout
        state, mc_left = blk["state"], blk["mc_left"]
        mc, o_valid, o_data = layout(blk["mc"]), blk["o_valid"], layout(blk["o_data"])
        in_mc = Signal(name="tracked_in_mc")
        in_reg = Signal(name="tracked_in_reg")
        m.d.comb += [in_mc.eq((state == _State.MCAST) & self.is_copy(mc)),
                     in_reg.eq(o_valid & self.is_copy(o_data))]
        full = Mux(o_valid, M - 1 - waited, 0)
        with m.If(~pending):
            m.d.comb += [Assert(~in_mc & ~in_reg, "inv: a copy of an untracked flit"),
                         Assert(got == 0, "inv: copies counted with nothing tracked")]
        with m.If(pending):
            m.d.comb += [Assert(age >= 1, "inv: age of the tracked flit"),
                         Assert(got + in_reg + Mux(in_mc, mc_left, 0) == n - 1,
                                "inv: copies taken + in the register + to load")]
            with m.If(in_mc):
                m.d.comb += [Assert((mc_left >= 1) & (mc_left <= n - 1), "inv: copies to load"),
                             Assert(age + full + mc_left * M <= N, "inv: budget while multicast")]
            with m.Else():
                m.d.comb += [Assert(in_reg, "inv: the last copy waits in the register"),
                             Assert(age + M - 1 - waited <= N, "inv: budget of the last copy")]


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
    "inc_engine.ag_response": FormalProperty(
        IncMulticastResponse, mode="prove", depth=4, cover_depth=8, expect="pass",
        slow=True, solver="boolector",
        doc="INC engine, 3 ranks, any traffic, output taken at least once every 2 cycles: "
            "both copies of an AG flit leave within 5 cycles of its acceptance (n x M - 1)",
        params={"ranks": 3, "patience": 2},
        gtkw=("pick", "ag_pending", "ag_age", "copies_out", "out_waited",
              "dut.o_stream__valid", "dut.o_stream__ready")),
    "inc_engine.ag_response_tight": FormalProperty(
        IncMulticastResponse, mode="bmc", depth=8, expect="fail", slow=True,
        solver="boolector",
        doc="inc_engine.ag_response claimed one cycle tighter (4): the solver finds the copy "
            "that leaves at 5 (the claim alone, no invariants)",
        params={"ranks": 3, "patience": 2, "bound": 4, "invariants": False},
        gtkw=("pick", "ag_pending", "ag_age", "copies_out", "out_waited",
              "dut.o_stream__valid", "dut.o_stream__ready")),
    "inc_engine.ag_response_unfair": FormalProperty(
        IncMulticastResponse, mode="bmc", depth=8, expect="fail", slow=True,
        solver="boolector",
        doc="inc_engine.ag_response without the fairness assumption: the solver finds an "
            "output that keeps a copy past 5 cycles",
        params={"ranks": 3, "patience": None, "bound": 5, "invariants": False},
        gtkw=("pick", "ag_pending", "ag_age", "copies_out", "dut.o_stream__valid",
              "dut.o_stream__ready")),
}
