"""Formal harness of a link: the credit limiter's rate bound and the exact latency (docs/spec/design.md time model).

:class:`LinkRate` offers flits to a :class:`~epfabric.hw.link.Link` in
arbitrary cycles, with arbitrary back-pressure on its output, and measures
every window of cycles: the solver picks where a window starts (the first
cycle ``start`` is high); from there the harness adds ``block_bytes *
rate_den`` per accepted flit and takes off ``rate_num`` per cycle after the
first. The property: the excess never exceeds the burst,

    bytes(window of W cycles) * rate_den <= rate_num * (W - 1) + burst * block_bytes * rate_den,

i.e. the link never sends more than ``rate x window + burst`` bytes in any
window.

:class:`LinkLatency` keeps the output always ready and tracks one flit
chosen by the solver: its ``o_stream.valid`` rises exactly ``latency``
cycles after the cycle it was accepted in, and it is the flit that comes out
(flits are tagged, so a lost, duplicated or reordered flit fails too).

Negative controls: ``LinkRate(slack=1)`` builds the link with one block more
burst than the bound claims; ``LinkLatency(claim=latency - 1)`` claims a
latency the link does not have.
"""

from amaranth.asserts import AnySeq
from amaranth.hdl import Assert, Cover, Mux, Signal, signed

from ....hw.link import Link, flit_layout
from . import FormalProperty, Harness

__all__ = ["LinkRate", "LinkLatency", "PROPERTIES"]


class LinkRate(Harness):
    """Harness: any traffic; every window's bytes against ``rate x window + burst``.

    Parameters
    ----------
    latency, rate_num, rate_den, block_bytes, burst
        Of the link under test (small numbers: the bound is arithmetic).
    slack : int
        Build the link with ``burst + slack`` (negative control when > 0).
    """

    def __init__(self, *, latency=4, rate_num=3, rate_den=2, block_bytes=4, burst=2, slack=0):
        super().__init__()
        self.rate_num, self.rate_den = rate_num, rate_den
        self.block_bytes, self.burst = block_bytes, burst
        self.link = Link(payload=flit_layout(ranks=2, data_bits=2), latency=latency,
                         rate_num=rate_num, rate_den=rate_den, block_bytes=block_bytes,
                         burst=burst + slack)

    def check(self, m):
        m.submodules.link = link = self.link
        cost = self.block_bytes * self.rate_den
        cap = self.burst * cost
        m.d.comb += [link.i_stream.valid.eq(AnySeq(1)),
                     link.i_stream.payload.eq(AnySeq(len(link.i_stream.payload.as_value()))),
                     link.o_stream.ready.eq(AnySeq(1))]
        fire = link.i_stream.valid & link.i_stream.ready
        started = Signal(name="window_open")
        start = Signal(name="window_start")
        m.d.comb += start.eq(AnySeq(1) & ~started)
        # excess = bytes * rate_den - rate_num * (cycles - 1); clamped below at
        # -cap, which can only make the check stricter
        excess = Signal(signed(16), name="excess")
        now = Signal(signed(16), name="excess_now")
        m.d.comb += now.eq(Mux(start, 0, excess - self.rate_num) + Mux(fire, cost, 0))
        with m.If(start | started):
            m.d.sync += [started.eq(1), excess.eq(Mux(now < -cap, -cap, now))]
            m.d.comb += Assert(now <= cap, "more than rate x window + burst bytes sent")
        m.d.comb += Cover(started & (now == cap))     # the bound is reached: it is tight


class LinkLatency(Harness):
    """Harness: output always ready; one tracked flit must come out exactly ``claim`` cycles later.

    Parameters
    ----------
    latency, rate_num, rate_den, block_bytes, burst
        Of the link under test.
    claim : int or None
        The latency asserted (default: ``latency``; the negative control
        claims another).
    """

    def __init__(self, *, latency=4, rate_num=3, rate_den=2, block_bytes=4, burst=2, claim=None):
        super().__init__()
        self.latency = latency
        self.claim = latency if claim is None else claim
        self.link = Link(payload=flit_layout(ranks=2, data_bits=2), latency=latency,
                         rate_num=rate_num, rate_den=rate_den, block_bytes=block_bytes,
                         burst=burst)

    def check(self, m):
        m.submodules.link = link = self.link
        inp, out = link.i_stream, link.o_stream
        sent, seen = Signal(name="sent_t"), Signal(name="seen_t")
        age = Signal(range(self.claim + 2), name="age_t")
        pick = Signal(name="pick")
        m.d.comb += [inp.valid.eq(AnySeq(1)), pick.eq(AnySeq(1) & ~sent),
                     inp.payload.dst.eq(AnySeq(1)), inp.payload.src.eq(AnySeq(1)),
                     inp.payload.data.eq(Mux(pick, 1, 0)), out.ready.eq(1)]
        with m.If(inp.valid & inp.ready & pick):
            m.d.sync += [sent.eq(1), age.eq(1)]
        with m.If(sent & ~seen):
            m.d.sync += age.eq(Mux(age == self.claim + 1, age, age + 1))
        tagged_out = out.valid & (out.payload.data == 1)
        with m.If(tagged_out):
            m.d.sync += seen.eq(1)
            m.d.comb += [Assert(sent & ~seen, "tracked flit out twice or out of nowhere"),
                         Assert(age == self.claim, "tracked flit not out exactly `latency` "
                                                   "cycles after it entered")]
        with m.If(sent & ~seen):
            m.d.comb += Assert(age <= self.claim, "tracked flit late")
        m.d.comb += Cover(seen)


PROPERTIES = {
    "link.rate": FormalProperty(
        LinkRate, mode="bmc", depth=24, expect="pass",
        doc="link at 3/2 B/cycle, 4 B blocks, burst 2: any window of W cycles carries at most "
            "rate x (W-1) + burst bytes",
        params={},
        gtkw=("window_start", "window_open", "excess_now", "link.i_stream__valid",
              "link.i_stream__ready")),
    "link.latency": FormalProperty(
        LinkLatency, mode="bmc", depth=20, expect="pass",
        doc="latency-4 link, output always ready: a flit's valid rises exactly 4 cycles after "
            "it was accepted",
        params={},
        gtkw=("pick", "sent_t", "age_t", "seen_t", "link.o_stream__valid")),
}
