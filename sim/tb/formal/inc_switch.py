"""Formal harnesses of the in-network switch: multicast delivery and reduction sums.

Both drive a :class:`~epfabric.hw.inc_switch.StarIncSwitch` of 3 dies (3 ports and the
reduction engine's) with arbitrary flits on every input in every cycle and arbitrary
back-pressure on every output; the solver picks what is tracked (``AnyConst``).

* ``inc_switch.multicast`` -- a tracked multicast flit *A* (tag 1) from input *i* to
  destination set *M*: a copy of *A* leaves output *o* only if *o* is in *M*, at most
  once, and names only *o* in its mask; with ``fair=True`` (outputs always ready)
  every *o* in *M* has its copy within ``bound`` cycles of *A*'s acceptance (nothing
  lost, nothing starved). Every other flit -- unicast, multicast to any set, reduction
  contributions -- is arbitrary and untagged.
* ``inc_switch.reduce`` -- a tracked group (destination *g*, block *k*, contributors
  *M* not containing *g*): every flit of the group is a contribution from a die of *M*
  (``count`` 1, ``mask`` *M*), at most one per die (the protocol; ``Assume``); every
  other flit is arbitrary. A flit of the group leaves only at *g*, at most once, and
  when it does it carries ``count`` = |*M*| and exactly the lane-wise sum of the
  group's contributions, every one of which had entered the switch.

Negative controls (tests/sim/test_prove.py): ``bound=1`` for the response (a copy takes
longer) and ``miscount=True`` for the reduction (a scoreboard that leaves input 0's
contributions out of the sum must see a counterexample).

Bounded model checks (``mode="bmc"``): no counterexample within ``depth`` cycles from
reset, reported as "BMC depth N" -- not unbounded proofs. Covers show the tracked
release/delivery is reachable (non-vacuity).
"""

from amaranth.asserts import AnyConst, AnySeq
from amaranth.hdl import Assert, Assume, Cat, Cover, Mux, Signal

from ....hw.inc_switch import StarIncSwitch
from ....hw.switch import popcount
from . import FormalProperty, Harness

__all__ = ["MulticastScoreboard", "ReduceScoreboard", "PROPERTIES"]

RANKS = 3
LANE = 4
DATA = 2 * LANE


def _free_inputs(m, dut):
    """Every input offers any flit in any cycle (to a die of the switch; never multicast and
    reduction at once); returns each input's stream."""
    ports = [dut.i_stream[i] for i in range(RANKS)]
    for port in ports:
        f = port.payload
        m.d.comb += [port.valid.eq(AnySeq(1)), f.eq(AnySeq(len(f.as_value()))),
                     Assume(f.dst < RANKS), Assume(~(f.mcast & f.red))]
    return ports


def _dut(depth):
    return StarIncSwitch(ranks=RANKS, depth=depth, window=2, data_bits=DATA, header_bits=0,
                         dtype=f"int{LANE}", counter_width=2)


class MulticastScoreboard(Harness):
    """Multicast: each destination of a tracked flit gets exactly one copy (see the module)."""

    def __init__(self, *, depth=2, fair=False, bound=8):
        super().__init__()
        self.depth, self.fair, self.bound = depth, fair, bound

    def check(self, m):
        m.submodules.dut = dut = _dut(self.depth)
        n = RANKS
        src_sel = Signal(range(n), name="track_src")
        mset = Signal(n, name="track_mask")
        m.d.comb += [src_sel.eq(AnyConst(len(src_sel))), mset.eq(AnyConst(n)),
                     Assume(src_sel < n), Assume(mset != 0)]
        sent = Signal(name="sent_a")
        got = Signal(n, name="got_a")
        age = Signal(range(self.bound + 2), name="age_a")
        for i, port in enumerate(_free_inputs(m, dut)):
            f = port.payload
            pick = Signal(name=f"in{i}_pick")
            m.d.comb += pick.eq((src_sel == i) & ~sent & AnySeq(1))
            with m.If(pick):
                m.d.comb += [Assume(f.mcast == 1), Assume(f.mask == mset), Assume(f.data == 1)]
            with m.Else():
                m.d.comb += Assume(f.data == 0)
            with m.If(port.valid & port.ready & pick):
                m.d.sync += sent.eq(1)
        for o in range(n):
            out = dut.o_stream[o]
            m.d.comb += out.ready.eq(1 if self.fair else AnySeq(1))
            f = out.payload
            with m.If(out.valid & out.ready & (f.data == 1)):
                m.d.comb += [Assert(mset[o], f"output {o}: a copy for a die not in the set"),
                             Assert(~got[o], f"output {o}: a second copy"),
                             Assert(f.mask == (1 << o), f"output {o}: the copy names other dies"),
                             Assert(sent, f"output {o}: a copy before the flit entered")]
                m.d.sync += got[o].eq(1)
        if self.fair:
            with m.If(sent & (got != mset)):
                m.d.sync += age.eq(age + 1)
            m.d.comb += Assert(age <= self.bound, "a copy not delivered in time")
        m.d.comb += Cover(sent & (got == mset) & (popcount(mset[k] for k in range(n)) > 1))


class ReduceScoreboard(Harness):
    """Reduction: a group is released once, with the sum of exactly its contributions."""

    def __init__(self, *, depth=2, miscount=False):
        super().__init__()
        self.depth = depth
        self.miscount = miscount     # negative control: the scoreboard leaves input 0 out

    def check(self, m):
        m.submodules.dut = dut = _dut(self.depth)
        n = RANKS
        g = Signal(range(n), name="group_dst")
        k = Signal(name="group_block")
        mset = Signal(n, name="group_mask")
        m.d.comb += [g.eq(AnyConst(len(g))), k.eq(AnyConst(1)), mset.eq(AnyConst(n)),
                     Assume(g < n), Assume(mset != 0), Assume(~(mset >> g)[0])]
        sent = Signal(n, name="sent")              # the dies whose contribution entered
        total = [Signal(LANE, name=f"sum{j}") for j in range(DATA // LANE)]
        released = Signal(name="released")
        expect = popcount(mset[d] for d in range(n))
        entered = []
        for i, port in enumerate(_free_inputs(m, dut)):
            f = port.payload
            mine = Signal(name=f"in{i}_group")
            m.d.comb += mine.eq(f.red & (f.dst == g) & (f.addr.block[0] == k))
            with m.If(mine):
                m.d.comb += [Assume(mset[i]), Assume(~sent[i]), Assume(f.mask == mset),
                             Assume(f.count == 1)]
            take = Signal(name=f"in{i}_take")
            m.d.comb += take.eq(port.valid & port.ready & mine)
            entered.append((take, f))
        for j, acc in enumerate(total):
            add = acc
            for i, (take, f) in enumerate(entered):
                if self.miscount and i == 0:
                    continue
                add = (add + Mux(take, f.data[j * LANE:(j + 1) * LANE], 0))[:LANE]
            m.d.sync += acc.eq(add)
        m.d.sync += sent.eq(sent | _bits(take for take, _ in entered))
        for o in range(n):
            out = dut.o_stream[o]
            m.d.comb += out.ready.eq(AnySeq(1))
            f = out.payload
            theirs = f.red & (f.dst == g) & (f.addr.block[0] == k)
            with m.If(out.valid & out.ready & theirs):
                m.d.comb += [Assert(g == o, f"output {o}: the group's result off its die"),
                             Assert(~released, "the group released twice"),
                             Assert(f.count == expect, "released with the wrong count"),
                             Assert(sent == mset, "released before every contribution entered"),
                             *(Assert(f.data[j * LANE:(j + 1) * LANE] == acc,
                                      f"lane {j}: not the sum of the contributions")
                               for j, acc in enumerate(total))]
                m.d.sync += released.eq(1)
        m.d.comb += Cover(released & (expect > 1))


def _bits(values):
    return Cat(*values)


PROPERTIES = {
    "inc_switch.multicast": FormalProperty(
        MulticastScoreboard, "bmc", 12, "pass",
        "a multicast flit reaches each die of its set once, with only that die in its mask",
        gtkw=("dut.switch.served0", "dut.switch.pending0")),
    "inc_switch.multicast_response": FormalProperty(
        MulticastScoreboard, "bmc", 14, "pass",
        "with outputs ready, every die of a multicast set has its copy within 12 cycles",
        params={"fair": True, "bound": 12}),
    "inc_switch.reduce": FormalProperty(
        ReduceScoreboard, "bmc", 8, "pass",
        "a reduction group is released once, at its die, with the sum of exactly its "
        "contributions"),
}
