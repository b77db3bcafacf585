"""A superpod fabric driven by hardware uniform-traffic generators, for speed measurements.

UBEP §2.3 Insight 3 / Table 2: the two-tier superpod of :func:`~epfabric.hw.topology.superpod`.
Every rank gets a saturating uniform-random source and an always-ready sink in
hardware, so a simulator can run the loaded fabric for any number of cycles
with no testbench code per cycle (``start`` once, then wait for ``done``).
"""

from amaranth.hdl import Const, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ...hw.topology import superpod
from ...hw.validate import check_int

__all__ = ["TrafficFabric", "xorshift32", "traffic_seed"]

#: Width of the generators' random state (xorshift32).
STATE_BITS = 32
#: Random bits used to pick a destination (multiply-shift; bias < 2**-16 per rank).
PICK_BITS = 16


def count_ones(bits, n):
    """How many of ``bits`` (at most ``n`` one-bit values) are 1, as a value of ``range(n + 1)``."""
    acc = Const(0, range(n + 1))
    for b in bits:
        acc = acc + b
    return acc


def traffic_seed(rank):
    """Non-zero 32-bit xorshift seed of rank ``rank`` (distinct per rank)."""
    seed = ((rank + 1) * 0x9E3779B1) & 0xFFFF_FFFF
    return seed or 0x2545F491


def xorshift32(x):
    """One step of Marsaglia's xorshift32 on an int (a reference model of the hardware)."""
    x ^= (x << 13) & 0xFFFF_FFFF
    x ^= x >> 17
    x ^= (x << 5) & 0xFFFF_FFFF
    return x


def _xorshift32(x):
    """The same step as an Amaranth expression (all shifts are wiring; three XOR rows)."""
    x = x ^ (x << 13)[:STATE_BITS]
    x = x ^ (x >> 17)
    return x ^ (x << 5)[:STATE_BITS]


class TrafficFabric(wiring.Component):
    """A superpod fabric with a uniform-traffic source and a counting sink on every rank.

    Each rank's source is an xorshift32 generator (a linear-feedback shift
    register generator over GF(2)) seeded from the rank (:func:`traffic_seed`).
    Its top :data:`PICK_BITS` bits choose the destination uniformly among the
    *other* ranks by multiply-shift — ``offset = (bits * (ranks - 1)) >> 16``,
    ``dst = (rank + 1 + offset) mod ranks`` — with no rejection, so the source
    offers a flit on every running cycle (saturating). The state advances only
    when a flit is accepted, so the offered payload is stable while stalled
    (the stream contract). ``data`` carries the low bits of the rank's sent
    count. Sinks are always ready; flits that reach a rank other than their
    ``dst`` are counted in ``misrouted``.

    Timing: the cycle ``start`` is sampled, ``cycle`` clears and the sources
    run for exactly ``cycles_to_run`` cycles; ``done`` rises ``cycles_to_run``
    cycles after that edge (at once if ``cycles_to_run`` is 0) and stays high
    until the next ``start``. Sources stop offering when done; the sinks keep
    draining and counting what is in flight.

    Parameters
    ----------
    timing : epfabric.hw.topology.FabricTiming
        Link latencies and rate (as :func:`~epfabric.hw.topology.superpod`).
    dies_per_npu, npus_per_board, boards : int
        Superpod shape.
    data_bytes : int
        Simulated bytes per block; cycle counts do not depend on it.
    switch_depth : int
        Input FIFO depth of every switch.
    counter_width : int
        Width of every counter (and of ``cycle``); 16..64.

    Attributes
    ----------
    start : In(1)
        Pulse to (re)start a run.
    cycles_to_run : In(32)
        Cycles the sources run; sampled with ``start``.
    done : Out(1)
        The run's ``cycles_to_run`` cycles are over.
    cycle : Out(counter_width)
        Cycles run since ``start``.
    sent_total, received_total : Out(counter_width)
        Blocks accepted by the fabric / delivered to sinks, all ranks.
    sent, received : Out(counter_width).array(ranks)
        The same per rank.
    misrouted : Out(counter_width)
        Blocks delivered to a rank other than their ``dst`` (0 in a correct fabric).
    fabric : Fabric
        The wrapped fabric.
    ranks : int

    Raises
    ------
    ValueError, TypeError
        On an invalid parameter (named in the message), including invalid shapes.
    """

    def __init__(self, timing, dies_per_npu, npus_per_board, boards, *, data_bytes=2,
                 switch_depth=4, counter_width=32):
        check_int("data_bytes", data_bytes, 1)
        check_int("switch_depth", switch_depth, 2)
        check_int("counter_width", counter_width, 16, 64)
        self.fabric = superpod(timing, dies_per_npu, npus_per_board, boards,
                               data_bytes=data_bytes, switch_depth=switch_depth,
                               counter_width=counter_width)
        self.ranks = self.fabric.ranks
        self.shape = dict(self.fabric.shape)
        super().__init__(self.signature_of(self.ranks, counter_width=counter_width))

    @staticmethod
    def signature_of(ranks, *, counter_width=32):
        """The signature of a traffic fabric of ``ranks`` ranks, without building one."""
        return wiring.Signature({
            "start": In(1),
            "cycles_to_run": In(32),
            "done": Out(1),
            "cycle": Out(counter_width),
            "sent_total": Out(counter_width),
            "received_total": Out(counter_width),
            "sent": Out(counter_width).array(ranks),
            "received": Out(counter_width).array(ranks),
            "misrouted": Out(counter_width),
        })

    def capacity(self):
        """Blocks the fabric can hold in flight: link rings, switch input FIFOs and output registers.

        An upper bound on ``sent_total - received_total`` at any cycle.
        """
        links = sum(link.depth for link, _s, _d in self.fabric.links if link.latency > 0)
        switches = sum(sw.ports * (sw.depth + 1) for sw in self.fabric.switches.values())
        return links + switches

    def elaborate(self, platform):
        m = Module()
        m.submodules.fabric = fabric = self.fabric
        n = self.ranks

        running = Signal()
        limit = Signal(32)
        with m.If(self.start):
            m.d.sync += [
                self.cycle.eq(0),
                limit.eq(self.cycles_to_run),
                running.eq(self.cycles_to_run != 0),
                self.done.eq(self.cycles_to_run == 0),
            ]
        with m.Elif(running):
            m.d.sync += self.cycle.eq(self.cycle + 1)
            with m.If(self.cycle + 1 == limit):
                m.d.sync += [running.eq(0), self.done.eq(1)]

        data_bits = len(fabric.tx[0].payload.data)
        sends, receives, wrong = [], [], []
        for r in range(n):
            tx, rx = fabric.tx[r], fabric.rx[r]
            state = Signal(STATE_BITS, init=traffic_seed(r), name=f"rng{r}")
            pick = state[STATE_BITS - PICK_BITS:]
            offset = Signal(range(max(2, n - 1)), name=f"offset{r}")
            m.d.comb += offset.eq((pick * (n - 1)) >> PICK_BITS)
            # (r + 1 + offset) mod n without a divider: offset < n - 1.
            dst = Mux(offset >= n - 1 - r, offset - (n - 1 - r), offset + r + 1)
            fire = Signal(name=f"fire{r}")
            m.d.comb += [
                tx.valid.eq(running),
                tx.payload.dst.eq(dst),
                tx.payload.src.eq(r),
                tx.payload.data.eq(fabric.tx_blocks[r][:data_bits]),
                fire.eq(tx.valid & tx.ready),
                rx.ready.eq(1),
                self.sent[r].eq(fabric.tx_blocks[r]),
                self.received[r].eq(fabric.rx_blocks[r]),
            ]
            with m.If(fire):
                m.d.sync += state.eq(_xorshift32(state))
            got = Signal(name=f"got{r}")
            bad = Signal(name=f"bad{r}")
            m.d.comb += [got.eq(rx.valid), bad.eq(rx.valid & (rx.payload.dst != r))]
            sends.append(fire)
            receives.append(got)
            wrong.append(bad)


        m.d.sync += [
            self.sent_total.eq(self.sent_total + count_ones(sends, n)),
            self.received_total.eq(self.received_total + count_ones(receives, n)),
            self.misrouted.eq(self.misrouted + count_ones(wrong, n)),
        ]
        return m
