"""Formal harness of the reduction unit's one wait: it absorbs whenever its switch's outputs drain.

The deadlock argument of the in-network fabric (hw/inc_reduce.py, "Slots and waits";
hw/inc_waits.py) rests on one lemma about a single :class:`~epfabric.hw.inc_switch.IncSwitch`: the
reduction unit waits for nothing but its own output -- its one-flit release register,
which empties into the switch's input FIFO of the reduction port, which empties into
the output ``routes[dst]`` of each release. So if every output of the switch drains,
the unit absorbs every contribution offered to it within a bound, whatever the slots
hold (they are direct-mapped: a contribution never waits for a free slot).

* ``inc_drain.absorb`` -- a :class:`~epfabric.hw.inc_switch.StarIncSwitch` of 3 dies
  (window 2, FIFOs of ``depth``), every input offering any flit in any cycle (unicast,
  multicast to any set, contributions to any group), every output's ``ready`` free but
  *fair*: an output holding a flit is ready within ``patience`` cycles (``Assume``).
  Claim: the switch never offers the unit a contribution it refuses for more than
  ``bound`` consecutive cycles. Bounded model check (``BMC depth N``), not an
  unbounded proof.
* ``inc_drain.absorb_unfair`` -- negative control, ``expect="fail"``: the same claim with
  outputs that may stall for ever. The solver finds the unit blocked behind a release
  whose output never drains -- the local step of the cyclic wait a two-tier fabric had
  while its tier-1 units also summed groups leaving the board (docs/concepts/inc-deadlock.md):
  a tier-1 unit's release to another board waited on the tier-2 path, which waited on the
  other board's tier-1 unit.

What the check covers and what it does not: it is the lemma for one switch, under the
assumption that every output drains. The fabric supplies that assumption by giving units
only groups whose releases go down (a tier-1 switch sums no group leaving its board), so
the wait-for graph of channels and units has no cycle (hw/inc_waits.py, checked on every
superpod shape). Without that restriction the assumption failed: a tier-1 unit held
releases going up and down in one register, and two boards' units waited on each other
through one tier-2 plane (the adversarial soak, ``epfabric soak --inc --adversarial``,
reached it).
"""

from amaranth.asserts import AnySeq
from amaranth.hdl import Assert, Assume, Cover, Signal

from ....hw.inc_switch import StarIncSwitch
from . import FormalProperty, Harness

__all__ = ["AbsorbBound", "PROPERTIES"]

RANKS = 3
LANE = 4


class AbsorbBound(Harness):
    """With fair outputs, the unit refuses an offered contribution at most ``bound`` cycles in a
    row (see the module docstring); ``fair=False`` drops the fairness assumption."""

    def __init__(self, *, depth=2, patience=2, bound=8, fair=True):
        super().__init__()
        self.depth, self.patience, self.bound, self.fair = depth, patience, bound, fair

    def check(self, m):
        m.submodules.dut = dut = StarIncSwitch(ranks=RANKS, depth=self.depth, window=2,
                                               data_bits=2 * LANE, header_bits=0,
                                               dtype=f"int{LANE}", counter_width=2)
        for i in range(RANKS):
            port = dut.i_stream[i]
            f = port.payload
            m.d.comb += [port.valid.eq(AnySeq(1)), f.eq(AnySeq(len(f.as_value()))),
                         Assume(f.dst < RANKS), Assume(~(f.mcast & f.red))]
        for o in range(RANKS):
            out = dut.o_stream[o]
            m.d.comb += out.ready.eq(AnySeq(1))
            if self.fair:
                held = Signal(range(self.patience + 1), name=f"held{o}")
                with m.If(out.valid & ~out.ready):
                    m.d.sync += held.eq(held + 1)
                with m.Else():
                    m.d.sync += held.eq(0)
                m.d.comb += Assume(held < self.patience)
        unit = dut.unit.i_stream
        refused = Signal(range(self.bound + 2), name="refused")
        with m.If(unit.valid & ~unit.ready):
            m.d.sync += refused.eq(refused + 1)
        with m.Else():
            m.d.sync += refused.eq(0)
        m.d.comb += Assert(refused <= self.bound, "the unit refused a contribution too long")
        m.d.comb += Cover(refused == self.bound // 2)


PROPERTIES = {
    "inc_drain.absorb": FormalProperty(
        AbsorbBound, "bmc", 20, "pass",
        "with every output ready within 2 cycles of holding a flit, the reduction unit takes "
        "an offered contribution within 8 cycles (6 is not enough: a counterexample)",
        gtkw=("refused", "dut.reduce.o_stream__valid", "dut.reduce.o_stream__ready")),
    "inc_drain.absorb_unfair": FormalProperty(
        AbsorbBound, "bmc", 20, "fail",
        "negative control: with an output that may never drain, the unit can refuse a "
        "contribution for ever (the local step of the two-tier cyclic wait)",
        params={"fair": False}),
    "inc_drain.absorb_deep": FormalProperty(
        AbsorbBound, "bmc", 32, "pass",
        "inc_drain.absorb to BMC depth 32", slow=True),
}
