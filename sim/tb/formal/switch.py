"""Formal harness of the crossbar switch: no loss, no duplication, per-(input, output) order, bounded response.

:class:`SwitchScoreboard` drives every input of a :class:`~epfabric.hw.switch.Switch`
with arbitrary flits (any cycle, any destination) and every output with
arbitrary back-pressure. It checks the flow from one input *i* to one output
*o*, both chosen by the solver (``AnyConst``), by tagging two of its flits,
also chosen by the solver: the first tagged flit *A* (``data = 1``), a later
one *B* (``data = 2``); every other flit carries 0 (symbolic tagging: two
arbitrary flits stand for every pair, so the solver needs no counters).
At the outputs:

* a tagged flit leaves only through *o* (no misrouting);
* *A* leaves at most once and *B* at most once (no duplication);
* *B* never leaves before *A* (per-(input, output) order — and no loss of
  *A* behind a *B* that made it through).

With ``fair=True`` every output is always ready and *A* must leave within
``bound`` cycles of entering the switch (bounded response: nothing starves,
and a lost flit is caught even when no *B* follows it).

All three (``switch.order``, ``switch.order3``, ``switch.response``) are
proved by k-induction, with no bound: the harness elaborates the switch
itself (:class:`~epfabric.sim.tb.formal.Elaborated`; the switch's Verilog is
untouched) and asserts the invariants of every reachable state
(:meth:`SwitchScoreboard.order_invariants`: FIFO pointers agree with the
fill level, the output registers hold flits for their port, *A* and *B*
each sit in one place while inside, on their flow, *A* ahead of *B*;
:meth:`SwitchScoreboard.response_invariants`: how old *A* can be at each
place). ``switch.order_deep`` keeps the old BMC run without the invariants.

``drop_on_collision=True`` puts :class:`CollisionDropper` in front of the
switch — a broken switch that acknowledges but discards input 1's flit when
input 0 offers a flit for the same output in the same cycle (the negative
control).
"""

from amaranth.asserts import AnyConst, AnySeq
from amaranth.hdl import Assert, Assume, Const, Cover, Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from ....hw.link import flit_layout
from ....hw.switch import Switch
from . import Elaborated, FormalProperty, Harness
from .fairness import fair_ready

__all__ = ["SwitchScoreboard", "CollisionDropper", "PROPERTIES"]


class CollisionDropper(wiring.Component):
    """A broken switch: a real one whose input 1 loses its flit on a collision with input 0."""

    def __init__(self, switch, block=None):
        self.switch = switch
        self.block = block if block is not None else switch   # an Elaborated view of it
        sig = stream.Signature(switch.payload)
        super().__init__({"i_stream": In(sig).array(switch.ports),
                          "o_stream": Out(sig).array(switch.ports)})

    def elaborate(self, platform):
        m = Module()
        m.submodules.switch = self.block
        sw = self.switch
        for p in range(sw.ports):
            wiring.connect(m, sw.o_stream[p], wiring.flipped(self.o_stream[p]))
            if p != 1:
                wiring.connect(m, wiring.flipped(self.i_stream[p]), sw.i_stream[p])
        a, b = self.i_stream[0], self.i_stream[1]
        collide = a.valid & b.valid & (a.payload.dst == b.payload.dst)
        m.d.comb += [sw.i_stream[1].payload.eq(b.payload),
                     sw.i_stream[1].valid.eq(b.valid & ~collide),
                     b.ready.eq(sw.i_stream[1].ready | collide)]
        return m


class SwitchScoreboard(Harness):
    """Harness: sequence-numbered flits in, a scoreboard per (input, output) out.

    Parameters
    ----------
    ports, depth
        Of the switch under test.
    fair : bool
        Check the bounded response of a tracked flit: outputs always ready, or
        ready at least once every ``patience`` cycles.
    bound : int
        Cycles within which a tracked flit must leave (``fair`` only).
    patience : int or None
        With ``fair``: each output is ready at least once in every ``patience``
        cycles (:func:`~epfabric.sim.tb.formal.fairness.fair_ready`; the
        invariants are :meth:`fair_response_invariants`). ``None``: always ready.
    unfair : bool
        With ``patience``: drop the fairness assumption (the negative control).
    drop_on_collision : bool
        Check the broken :class:`CollisionDropper` instead.
    invariants : bool
        Also assert the invariants that make the property inductive
        (:meth:`order_invariants`; needed by ``mode="prove"``).
    """

    def __init__(self, *, ports=2, depth=2, fair=False, bound=8, drop_on_collision=False,
                 invariants=True, patience=None, unfair=False):
        super().__init__()
        self.ports, self.depth = ports, depth
        self.fair, self.bound = fair, bound
        self.patience, self.unfair = patience, unfair
        layout = flit_layout(ranks=ports, data_bits=2)      # the tag
        self.switch = Switch(ports=ports, depth=depth, payload=layout, counter_width=1)
        self.invariants = invariants
        self.drop_on_collision = drop_on_collision

    def check(self, m):
        n = self.ports
        self.blk = Elaborated(self.switch)
        if self.drop_on_collision:
            dut = CollisionDropper(self.switch, self.blk)
            m.submodules.dut = dut
        else:
            dut = self.switch
            m.submodules.dut = self.blk
        dst_bits = len(dut.i_stream[0].payload.dst)
        src_sel = Signal(range(n), name="flow_src")        # the checked flow: input ...
        dst_sel = Signal(dst_bits, name="flow_dst")        # ... to output
        m.d.comb += [src_sel.eq(AnyConst(len(src_sel))), dst_sel.eq(AnyConst(dst_bits)),
                     Assume(src_sel < n), Assume(dst_sel < n)]
        sent_a, sent_b = Signal(name="sent_a"), Signal(name="sent_b")
        got_a, got_b = Signal(name="got_a"), Signal(name="got_b")
        age = Signal(range(self.bound + 2), name="age_a")

        for i in range(n):
            port = dut.i_stream[i]
            dst = Signal.like(port.payload.dst, name=f"in{i}_dst")
            tag = Signal(2, name=f"in{i}_tag")
            m.d.comb += [port.valid.eq(AnySeq(1)), dst.eq(AnySeq(len(dst))), Assume(dst < n)]
            pick = Signal(name=f"in{i}_pick")
            m.d.comb += pick.eq(AnySeq(1) & (src_sel == i) & (dst == dst_sel))
            with m.If(pick & ~sent_a):
                m.d.comb += tag.eq(1)
            with m.Elif(pick & sent_a & ~sent_b):
                m.d.comb += tag.eq(2)
            m.d.comb += [port.payload.dst.eq(dst), port.payload.src.eq(i),
                         port.payload.data.eq(tag)]
            with m.If(port.valid & port.ready):
                with m.If(tag == 1):
                    m.d.sync += sent_a.eq(1)
                with m.If(tag == 2):
                    m.d.sync += sent_b.eq(1)

        waited = []
        for o in range(n):
            out = dut.o_stream[o]
            if self.fair and self.patience is not None:
                waited.append(fair_ready(m, out.ready, name=f"out{o}",
                                         patience=None if self.unfair else self.patience))
            else:
                m.d.comb += out.ready.eq(1 if self.fair else AnySeq(1))
            tag = out.payload.data[:2]
            with m.If(out.valid & out.ready):
                m.d.comb += Assert(out.payload.dst == o, f"output {o}: flit for another port")
                with m.If(tag != 0):
                    m.d.comb += Assert(dst_sel == o, f"output {o}: tagged flit misrouted")
                with m.If(tag == 1):
                    m.d.comb += Assert(~got_a, "flit A duplicated")
                    m.d.sync += got_a.eq(1)
                with m.If(tag == 2):
                    m.d.comb += [Assert(~got_b, "flit B duplicated"),
                                 Assert(got_a, "flit B overtook (or outlived) flit A")]
                    m.d.sync += got_b.eq(1)
        m.d.comb += Assert(~got_a | sent_a)
        m.d.comb += Assert(~got_b | sent_b)
        if self.invariants:
            pos_a, a_out = self.order_invariants(m, src_sel, dst_sel, sent_a, sent_b, got_a, got_b)
            if self.fair and self.patience is not None:
                self.fair_response_invariants(m, src_sel, dst_sel, sent_a, age, pos_a, a_out,
                                              waited)
            elif self.fair:
                self.response_invariants(m, src_sel, sent_a, got_a, age, pos_a, a_out)
        if self.fair:
            with m.If(sent_a & ~got_a):
                m.d.sync += age.eq(age + 1)
            m.d.comb += Assert(age <= self.bound, "flit A not delivered in time")
        # non-vacuity: both tagged flits can make it through
        m.d.comb += Cover(got_b)
        if self.fair and self.patience is not None:
            # the bound is met exactly
            m.d.comb += Cover(got_a & (age == self.bound))

    def order_invariants(self, m, src_sel, dst_sel, sent_a, sent_b, got_a, got_b):
        """Invariants of every reachable state that make no-loss/no-duplication/order inductive.

        k-induction otherwise starts from states no trace reaches: FIFO
        pointers that disagree with the fill level, a tagged flit in the
        wrong FIFO or twice, *B* ahead of *A*, an output register holding a
        flit for another port. Each assertion below says why it holds.
        """
        n, depth = self.ports, self.depth
        layout = self.switch.payload
        blk = self.blk
        sync = blk.fragment.statements["sync"]

        def off(j, base):                  # (j - base) mod depth
            return Mux(base <= j, j - base, j + depth - base)

        # (location, "tag is A", "tag is B", position for the order) of every
        # place a flit can be: live input-FIFO entries and full output registers
        places = []
        for i in range(n):
            produce, consume = blk[f"in{i}_produce"], blk[f"in{i}_consume"]
            level = blk[f"in{i}_level"]
            # input i's ring registers: the ones its push writes (ring_storage
            # names every ring's registers ring0, ring1, ...)
            regs = {}
            for stmt in sync:
                if any(sig.name == f"in{i}_push" for sig in stmt._rhs_signals()):
                    for sig in stmt._lhs_signals():
                        if sig.name.startswith("ring"):
                            regs[int(sig.name[4:])] = sig
            assert sorted(regs) == list(range(depth)), (i, sorted(regs))
            # a FIFO: produce and consume move by one (mod depth) on push and
            # pop, level counts the difference, from all-zero at reset
            m.d.comb += [Assert(level <= depth, f"inv: in{i} level"),
                         Assert(produce < depth, f"inv: in{i} produce"),
                         Assert(consume < depth, f"inv: in{i} consume"),
                         Assert(off(produce, consume) == Mux(level == depth, 0, level),
                                f"inv: in{i} produce = consume + level")]
            for j in range(depth):
                flit = layout(regs[j])
                live = off(j, consume) < level
                pos = off(j, consume) + 1          # 1 = head of the FIFO
                places.append((f"in{i}[{j}]", live, flit, pos,
                               # a tagged flit is only ever offered on input
                               # src_sel with destination dst_sel
                               (src_sel == i) & (flit.dst == dst_sel)))
        for o in range(n):
            valid, reg = blk[f"ovalid{o}"], blk[f"odata{o}"]
            flit = layout(reg)
            # the arbiter of output o only loads a head that wants o
            m.d.comb += Assert(~valid | (flit.dst == o), f"inv: out{o} holds a flit for o")
            places.append((f"out{o}", valid, flit, Const(0, 2), dst_sel == o))
        if n > 2:
            for o in range(n):
                ptr = blk.sub(f"arb{o}")["ptr"]
                # the pointer is a grant index + 1 wrapped, or 0
                m.d.comb += Assert(ptr < n, f"inv: arb{o} pointer")

        in_a = [live & (flit.data == 1) for _, live, flit, _, _ in places]
        in_b = [live & (flit.data == 2) for _, live, flit, _, _ in places]
        for (where, live, flit, pos, ok), a, b in zip(places, in_a, in_b):
            with m.If(live):
                # tags are 0, 1 (A) and 2 (B); only the flow's flits carry one;
                # every destination offered is a port (the harness assumes it)
                m.d.comb += [Assert(flit.data != 3, f"inv: {where} tag 3"),
                             Assert(flit.dst < n, f"inv: {where} destination")]
                with m.If(flit.data != 0):
                    m.d.comb += Assert(ok, f"inv: {where} tagged flit off its flow")
        # A is in the switch exactly once from its acceptance until it leaves
        # (nothing is dropped or copied: the property itself), same for B
        m.d.comb += [Assert(sum(in_a) == (sent_a & ~got_a), "inv: A in the switch once"),
                     Assert(sum(in_b) == (sent_b & ~got_b), "inv: B in the switch once"),
                     # B is tagged after A was accepted; A leaves first
                     Assert(~sent_b | sent_a, "inv: B sent before A"),
                     Assert(~got_b | got_a, "inv: B out before A")]
        # while both are inside, A is ahead of B in their FIFO or already in
        # the output register: one FIFO per input, popped in order, into the
        # output both want
        pos_a = sum(Mux(a, pos, 0) for (_, _, _, pos, _), a in zip(places, in_a))
        pos_b = sum(Mux(b, pos, 0) for (_, _, _, pos, _), b in zip(places, in_b))
        with m.If(sent_b & ~got_b & ~got_a):
            m.d.comb += Assert(pos_a < pos_b, "inv: A ahead of B")
        a_out = sum(a for (where, *_), a in zip(places, in_a) if where.startswith("out"))
        return pos_a, a_out

    def response_invariants(self, m, src_sel, sent_a, got_a, age, pos_a, a_out):
        """Invariants that make the bounded response inductive (2 ports, FIFOs of 2, outputs ready).

        With every output ready, an output register holds a flit for one
        cycle and each arbiter is asked every cycle; a head that is not
        popped lost its output to the other input, so the round-robin
        pointer favours it the next cycle: it is popped then. That gives
        how old A can be at each place (``bound`` = the claimed response):

        * in an output register: it leaves this cycle, ``age <= bound - 1``;
        * head of its FIFO, popped this cycle: it waited at most one cycle as
          head, ``age <= bound - 2``; not popped: it became head this cycle
          (it entered an empty FIFO, or moved up from second), ``age <= bound - 3``;
        * second in its FIFO: it entered last cycle behind a head that was
          not popped then (the FIFO of 2 was not full), so that head is
          popped now: ``age <= bound - 4`` and the head is popped.
        """
        assert self.ports == 2 and self.depth == 2, "response invariants: 2 ports, depth 2"
        blk, bound = self.blk, self.bound
        pop = Signal(name="src_pop")
        for i in range(self.ports):
            with m.If(src_sel == i):
                m.d.comb += pop.eq(blk[f"in{i}_pop"])
        # age counts from the cycle after A's acceptance
        m.d.comb += Assert(sent_a | (age == 0), "inv: age of A before it is sent")
        with m.If(sent_a & ~got_a):
            with m.If(a_out):
                m.d.comb += Assert(age <= bound - 1, "inv: age of A in an output register")
            with m.If(pos_a == 1):
                m.d.comb += Assert(age <= Mux(pop, bound - 2, bound - 3), "inv: age of A as head")
            with m.If(pos_a == 2):
                m.d.comb += [Assert(pop, "inv: head ahead of A not popped"),
                             Assert(age <= bound - 4, "inv: age of A second in its FIFO")]

    def fair_response_invariants(self, m, src_sel, dst_sel, sent_a, age, pos_a, a_out, waited):
        """The bounded response under fair outputs, as a budget per place of *A* (2 ports, FIFOs of 2).

        *M* = ``patience``; ``waited[o]``: output *o*'s not-ready cycles in a
        row before this one. From any state, how many more cycles *A* can
        need is bounded by a budget *R*; the invariant is (cycles since *A*
        was accepted) + *R* <= ``bound``, and one step lowers *R* by at least
        one (checked by the solver; the cases below say why):

        * ``load(o, s)``, the cycles until output *o* loads the head of
          input *s* that asks for it: *M* - 1 - ``waited[o]`` while *o*'s
          register is full (it loads in its next ready cycle; 0 when empty),
          plus *M* if *o*'s round-robin pointer favours the other input (it
          may win that load; the pointer then favours *s*, so *s* wins the
          next). A not-ready cycle raises ``waited``; a lost load leaves a
          full register (``waited`` 0 if it was a ready cycle) and a pointer
          on *s*: *M* - 1 < the *M* + *M* - 1 - ``waited`` it had.
        * *A* in output register *o*: it leaves in *o*'s next ready cycle,
          *R* = *M* - 1 - ``waited[o]``.
        * *A* head of its FIFO, asking for *o*: *R* = load(*o*, *s*) + *M*.
        * *A* second, behind head *H* that asks for *o'*: *R* = load(*o'*, *s*) +
          3 *M*: *H* leaves; *A* is head the cycle after, where its budget is
          at most (*M* - 1) + *M* + *M*.

        On acceptance (cycle *t*), *A* is head or second behind *H*, which
        asked for *o'* at *t* already: if *o'* loaded at *t* (ready or empty)
        the pointer now favours *s* or *H* has left; otherwise *o'* was full
        and not ready, so ``waited[o']`` >= 1. Either way the budget at *t* + 1
        is at most (*M* - 2) + *M* + 3 *M*: *A* leaves by *t* + 5 *M* - 1. That is
        ``bound`` = 5 *M* - 1: *A* and *H* each lose one load of *o* to the
        other input, and *A* leaves with the fifth ready cycle of its output
        (tight: the cover reaches it); with *M* = 1 it is ``switch.response``'s 4.
        The harness's ``age`` counts from the cycle after the acceptance, so
        the cycles since acceptance are ``age + 1``.
        """
        assert self.ports == 2 and self.depth == 2, "fair response invariants: 2 ports, depth 2"
        blk, M, N = self.blk, self.patience, self.bound
        m.d.comb += Assert(sent_a | (age == 0), "inv: age of A before it is sent")

        def load(o, s):
            valid, ptr = blk[f"ovalid{o}"], blk.sub(f"arb{o}")["ptr"]
            return Mux(valid, M - 1 - waited[o], 0) + Mux(ptr == 1 - s, M, 0)

        since = age + 1
        for o in range(2):
            with m.If(a_out & (dst_sel == o)):
                m.d.comb += Assert(since + M - 1 - waited[o] <= N, f"inv: A in output {o}")
            for s in range(2):
                with m.If(sent_a & (pos_a == 1) & (src_sel == s) & (dst_sel == o)):
                    m.d.comb += Assert(since + load(o, s) + M <= N,
                                       f"inv: A head of input {s} for output {o}")
                with m.If(sent_a & (pos_a == 2) & (src_sel == s) & blk[f"want{s}"][o]):
                    m.d.comb += Assert(since + load(o, s) + 3 * M <= N,
                                       f"inv: A behind a head of input {s} for output {o}")


PROPERTIES = {
    "switch.order": FormalProperty(
        SwitchScoreboard, mode="prove", depth=4, cover_depth=12, expect="pass",
        doc="2-port switch, any traffic and back-pressure: no flit of a flow lost, duplicated, "
            "misrouted or reordered",
        params={"ports": 2, "depth": 2},
        gtkw=("flow_src", "flow_dst", "sent_a", "sent_b", "got_a", "got_b")),
    "switch.response": FormalProperty(
        SwitchScoreboard, mode="prove", depth=6, cover_depth=12, expect="pass",
        doc="2-port switch, outputs always ready: a flit is handed over after at most 4 cycles "
            "of waiting (a bound of 3 gives a counterexample)",
        params={"ports": 2, "depth": 2, "fair": True, "bound": 4},
        gtkw=("flow_src", "flow_dst", "sent_a", "got_a", "age_a")),
    "switch.order_deep": FormalProperty(
        SwitchScoreboard, mode="bmc", depth=20, expect="pass", slow=True,
        doc="switch.order to 20 cycles (BMC without the induction invariants: the property "
            "alone, as before the proof)",
        params={"ports": 2, "depth": 2, "invariants": False}),
    "switch.order3": FormalProperty(
        SwitchScoreboard, mode="prove", depth=4, cover_depth=12, expect="pass",
        doc="3-port switch, any traffic and back-pressure: no loss, duplication, misrouting "
            "or reordering",
        params={"ports": 3, "depth": 2}),
    "switch.fair_response": FormalProperty(
        SwitchScoreboard, mode="prove", depth=6, cover_depth=16, expect="pass",
        doc="2-port switch, FIFOs of 2, any traffic, each output ready at least once every 2 "
            "cycles: a flit leaves within 9 cycles of its acceptance (5 M - 1: it and the flit "
            "ahead each lose one load to the other input, then it leaves with the fifth ready "
            "cycle of its output)",
        params={"ports": 2, "depth": 2, "fair": True, "patience": 2, "bound": 9},
        gtkw=("flow_src", "flow_dst", "sent_a", "got_a", "age_a", "out0_waited",
              "out1_waited")),
    "switch.fair_response_tight": FormalProperty(
        SwitchScoreboard, mode="bmc", depth=16, expect="fail", slow=True,
        doc="switch.fair_response claimed one cycle tighter (8): the solver finds the flit that "
            "takes 9 (the claim alone, no invariants)",
        params={"ports": 2, "depth": 2, "fair": True, "patience": 2, "bound": 8,
                "invariants": False},
        gtkw=("flow_src", "flow_dst", "sent_a", "got_a", "age_a", "out0_waited",
              "out1_waited")),
    "switch.fair_response_unfair": FormalProperty(
        SwitchScoreboard, mode="bmc", depth=12, expect="fail", slow=True,
        doc="switch.fair_response without the fairness assumption: the solver finds an output "
            "that keeps a flit past 9 cycles",
        params={"ports": 2, "depth": 2, "fair": True, "patience": 2, "bound": 9,
                "unfair": True, "invariants": False},
        gtkw=("flow_src", "flow_dst", "sent_a", "got_a", "age_a")),
}
