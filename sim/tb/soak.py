"""A superpod fabric with a hardware scoreboard, for long constrained-random soaks.

UBEP §2.3 Insight 3: the two-tier superpod of :func:`~epfabric.hw.topology.superpod`.
:class:`SoakFabric` is :class:`~epfabric.sim.tb.traffic.TrafficFabric` turned
into a checker: every rank's source offers blocks at random (probability
``offer / 2**16`` per idle cycle), to random destinations — uniform, or
hot-spot (half of every other rank's blocks to one ``hot`` rank) — and
every rank's sink stalls at random (``ready`` low with probability
``stall / 2**16``). Sources stamp each block with its per-(source,
destination) sequence number; sinks keep the next number expected from
every source and count

* ``misrouted`` — a block for another rank,
* ``out_of_order`` — a block whose number is not the next expected one (a
  lost block leaves a gap, a duplicated one repeats a number, a reordered
  one comes early),

so that, once every source has sent its ``blocks`` blocks and the fabric has
drained (``received_total == sent_total``, which raises ``done``), zero
errors means every block arrived exactly once and in order per flow (the
numbers of a flow seen at its sink are exactly 0, 1, ..., sent - 1). A
fabric that deadlocks never raises ``done``: the testbench's timeout says so.

No Python runs per cycle: the random sources (xorshift32, one for the
destinations, one for the offer and stall decisions per rank) are hardware.
The pattern, the seed and the rates are inputs sampled at ``start``, so one
built model serves every run.
"""

from amaranth.hdl import Const, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from ...hw.topology import superpod
from .traffic import STATE_BITS, _xorshift32, count_ones, traffic_seed
from ...hw.validate import check_int

__all__ = ["SoakFabric", "SEQ_BITS", "PATTERNS"]

#: Width of the per-flow sequence numbers (they wrap; a flow's numbers are compared mod 2**16).
SEQ_BITS = 16
PATTERNS = ("uniform", "hotspot")


class SoakFabric(wiring.Component):
    """A superpod fabric under random traffic and random receiver stalls, scoreboarded in hardware.

    Parameters
    ----------
    timing : epfabric.hw.topology.FabricTiming
        Link latencies and rate.
    dies_per_npu, npus_per_board, boards : int
        Superpod shape.
    hot : int
        The hot rank of the hot-spot pattern.
    switch_depth : int
        Input FIFO depth of every switch.
    duplicate_first : bool
        Negative control of the scoreboard: rank 0 stamps its first two
        blocks with the same number, as a fabric that duplicated a block
        would deliver them (the soak must then fail).

    Attributes
    ----------
    start : In(1)
        Pulse: sample ``blocks``, ``offer``, ``stall``, ``hotspot``, ``seed`` and start.
    hotspot : In(1)
        Hot-spot pattern (else uniform).
    seed : In(32)
        Mixed into every generator's state at ``start`` (a different run per seed).
    blocks : In(32)
        Blocks each rank sends.
    offer, stall : In(16)
        Offer / stall probability per cycle, in units of 2**-16.
    done : Out(1)
        Every block was sent and every sent block was received.
    cycle : Out(32)
        Cycles since ``start``.
    sent_total, received_total, misrouted, out_of_order : Out(32)
        Counters (see the module docstring).
    """

    def __init__(self, timing, dies_per_npu, npus_per_board, boards, *, hot=0, switch_depth=4,
                 duplicate_first=False):
        self.fabric = superpod(timing, dies_per_npu, npus_per_board, boards,
                               data_bytes=SEQ_BITS // 8, switch_depth=switch_depth)
        self.ranks = self.fabric.ranks
        check_int("hot", hot, 0, self.ranks - 1)
        self.hot = hot
        self.duplicate_first = duplicate_first
        super().__init__({
            "start": In(1), "blocks": In(32), "offer": In(16), "stall": In(16),
            "hotspot": In(1), "seed": In(32),
            "done": Out(1), "cycle": Out(32),
            "sent_total": Out(32), "received_total": Out(32),
            "misrouted": Out(32), "out_of_order": Out(32),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.fabric = fabric = self.fabric
        n = self.ranks
        running = Signal()
        budget = Signal(32)
        offer_p, stall_p = Signal(16), Signal(16)
        hotspot = Signal()
        mix = Signal(STATE_BITS)
        m.d.comb += mix.eq((self.seed * 0x85EBCA6B)[:STATE_BITS])
        with m.If(self.start):
            m.d.sync += [running.eq(1), budget.eq(self.blocks), offer_p.eq(self.offer),
                         stall_p.eq(self.stall), hotspot.eq(self.hotspot), self.cycle.eq(0)]
        with m.Elif(running):
            m.d.sync += self.cycle.eq(self.cycle + 1)

        finished = []
        sends, receives, wrong, disorder = [], [], [], []
        for r in range(n):
            tx, rx = fabric.tx[r], fabric.rx[r]
            # --- source ---------------------------------------------------
            route = Signal(STATE_BITS, init=traffic_seed(r), name=f"route{r}")
            coin = Signal(STATE_BITS, init=traffic_seed(r + n), name=f"coin{r}")
            m.d.sync += coin.eq(_xorshift32(coin))
            for reg, base in ((route, traffic_seed(r)), (coin, traffic_seed(r + n))):
                seeded = Signal(STATE_BITS, name=f"{reg.name}_seed")
                m.d.comb += seeded.eq(mix ^ base)
                with m.If(self.start):     # xorshift must not start from 0
                    m.d.sync += reg.eq(Mux(seeded == 0, base, seeded))
            pick = route[STATE_BITS - 16:]
            offset = Signal(range(max(2, n - 1)), name=f"offset{r}")
            m.d.comb += offset.eq((pick * (n - 1)) >> 16)
            dst = Signal(range(n), name=f"dst{r}")
            uniform = Mux(offset >= n - 1 - r, offset - (n - 1 - r), offset + r + 1)
            if r != self.hot:
                m.d.comb += dst.eq(Mux(hotspot & route[0], self.hot, uniform))
            else:
                m.d.comb += dst.eq(uniform)
            sent = Signal(32, name=f"sent{r}")
            pending = Signal(name=f"pending{r}")
            fire = Signal(name=f"fire{r}")
            seq = Memory(shape=SEQ_BITS, depth=n, init=[])
            m.submodules[f"seq{r}"] = seq
            seq_r = seq.read_port(domain="comb")
            seq_w = seq.write_port()
            m.d.comb += [
                seq_r.addr.eq(dst),
                tx.valid.eq(pending),
                tx.payload.dst.eq(dst), tx.payload.src.eq(r), tx.payload.data.eq(seq_r.data),
                fire.eq(tx.valid & tx.ready),
                seq_w.addr.eq(dst), seq_w.data.eq(seq_r.data + 1), seq_w.en.eq(fire),
            ]
            if self.duplicate_first and r == 0:
                m.d.comb += seq_w.en.eq(fire & (sent != 0))
            with m.If(fire):
                m.d.sync += [pending.eq(0), sent.eq(sent + 1), route.eq(_xorshift32(route))]
            with m.Elif(running & ~pending & (sent != budget) & (coin[:16] < offer_p)):
                m.d.sync += pending.eq(1)
            with m.If(self.start):
                m.d.sync += sent.eq(0)
            finished.append((sent == budget) & ~pending)

            # --- sink ------------------------------------------------------
            expect = Memory(shape=SEQ_BITS, depth=n, init=[])
            m.submodules[f"expect{r}"] = expect
            exp_r = expect.read_port(domain="comb")
            exp_w = expect.write_port()
            got = Signal(name=f"got{r}")
            m.d.comb += [
                rx.ready.eq(coin[16:] >= stall_p),
                got.eq(rx.valid & rx.ready),
                exp_r.addr.eq(rx.payload.src),
                exp_w.addr.eq(rx.payload.src), exp_w.data.eq(exp_r.data + 1), exp_w.en.eq(got),
            ]
            bad = Signal(name=f"misrouted{r}")
            late = Signal(name=f"disorder{r}")
            m.d.comb += [bad.eq(got & (rx.payload.dst != r)),
                         late.eq(got & (rx.payload.data != exp_r.data))]
            sends.append(fire)
            receives.append(got)
            wrong.append(bad)
            disorder.append(late)


        m.d.sync += [
            self.sent_total.eq(self.sent_total + count_ones(sends, n)),
            self.received_total.eq(self.received_total + count_ones(receives, n)),
            self.misrouted.eq(self.misrouted + count_ones(wrong, n)),
            self.out_of_order.eq(self.out_of_order + count_ones(disorder, n)),
        ]
        all_sent = Const(1, 1)
        for f in finished:
            all_sent = all_sent & f
        m.d.comb += self.done.eq(running & ~self.start & all_sent &
                                 (self.sent_total == self.received_total))
        return m
