"""Formal harness of the crossbar switch: no loss, no duplication, per-(input, output) order.

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

``drop_on_collision=True`` puts :class:`CollisionDropper` in front of the
switch — a broken switch that acknowledges but discards input 1's flit when
input 0 offers a flit for the same output in the same cycle (the negative
control).
"""

from amaranth.asserts import AnyConst, AnySeq
from amaranth.hdl import Assert, Assume, Cover, Module, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from ....hw.link import flit_layout
from ....hw.switch import Switch
from . import FormalProperty, Harness

__all__ = ["SwitchScoreboard", "CollisionDropper", "PROPERTIES"]


class CollisionDropper(wiring.Component):
    """A broken switch: a real one whose input 1 loses its flit on a collision with input 0."""

    def __init__(self, switch):
        self.switch = switch
        sig = stream.Signature(switch.payload)
        super().__init__({"i_stream": In(sig).array(switch.ports),
                          "o_stream": Out(sig).array(switch.ports)})

    def elaborate(self, platform):
        m = Module()
        m.submodules.switch = sw = self.switch
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
        Outputs always ready; check the bounded response of a tracked flit.
    bound : int
        Cycles within which a tracked flit must leave (``fair`` only).
    drop_on_collision : bool
        Check the broken :class:`CollisionDropper` instead.
    """

    def __init__(self, *, ports=2, depth=2, fair=False, bound=8, drop_on_collision=False):
        super().__init__()
        self.ports, self.depth = ports, depth
        self.fair, self.bound = fair, bound
        layout = flit_layout(ranks=ports, data_bits=2)      # the tag
        self.switch = Switch(ports=ports, depth=depth, payload=layout, counter_width=1)
        self.dut = CollisionDropper(self.switch) if drop_on_collision else self.switch

    def check(self, m):
        n = self.ports
        m.submodules.dut = dut = self.dut
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

        for o in range(n):
            out = dut.o_stream[o]
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
        if self.fair:
            with m.If(sent_a & ~got_a):
                m.d.sync += age.eq(age + 1)
            m.d.comb += Assert(age <= self.bound, "flit A not delivered in time")
        # non-vacuity: both tagged flits can make it through
        m.d.comb += Cover(got_b)


PROPERTIES = {
    "switch.order": FormalProperty(
        SwitchScoreboard, mode="bmc", depth=12, expect="pass",
        doc="2-port switch, any traffic and back-pressure: no flit of a flow lost, duplicated, "
            "misrouted or reordered",
        params={"ports": 2, "depth": 2},
        gtkw=("flow_src", "flow_dst", "sent_a", "sent_b", "got_a", "got_b")),
    "switch.response": FormalProperty(
        SwitchScoreboard, mode="bmc", depth=12, expect="pass",
        doc="2-port switch, outputs always ready: a flit is handed over after at most 4 cycles "
            "of waiting (a bound of 3 gives a counterexample)",
        params={"ports": 2, "depth": 2, "fair": True, "bound": 4},
        gtkw=("flow_src", "flow_dst", "sent_a", "got_a", "age_a")),
    "switch.order_deep": FormalProperty(
        SwitchScoreboard, mode="bmc", depth=20, expect="pass", slow=True,
        doc="switch.order to 20 cycles",
        params={"ports": 2, "depth": 2}),
    "switch.order3": FormalProperty(
        SwitchScoreboard, mode="bmc", depth=12, expect="pass", slow=True,
        doc="3-port switch, any traffic and back-pressure: no loss, duplication, misrouting "
            "or reordering",
        params={"ports": 3, "depth": 2}),
}
