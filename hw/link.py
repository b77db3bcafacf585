"""One direction of a fabric link: latency as a FIFO of (release cycle, flit), rate as credits.

UBEP §2.3 Insight 3 / Table 2: a superpod hides a physical hierarchy behind one
address space; every hop adds latency and every link has a finite bandwidth.
A :class:`Link` models one direction of one such hop (full duplex = two
instances). It carries whole DataBlocks (one flit = one 512 B block, whatever
the simulated ``data`` width) and never drops one: a full link stalls its
sender through ``ready``.
"""

import math

from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from .ring import incr_wrap, ring_storage
from .signature import check_other_params
from .validate import UserError, UserTypeError, check_int

__all__ = ["Link", "flit_layout", "check_payload", "LINK_MIN_LATENCY", "VERILOG_EXPORTS"]

#: Smallest non-zero latency a :class:`Link` implements (cycles from the input
#: transfer to ``o_stream.valid``): one cycle to enter the FIFO, one to release.
LINK_MIN_LATENCY = 2


def flit_layout(*, ranks, data_bits):
    """The fabric's default flit: ``dst`` and ``src`` rank and ``data_bits`` of payload.

    One flit stands for one 512 B DataBlock; ``data_bits`` is how much of it is
    simulated (docs/spec/design.md: cycle counts never depend on it).

    Raises
    ------
    ValueError
        If ``ranks`` < 1 or ``data_bits`` < 1.
    """
    check_int("ranks", ranks, 1)
    check_int("data_bits", data_bits, 1)
    rank_bits = max(1, (ranks - 1).bit_length())
    return data.StructLayout({"dst": rank_bits, "src": rank_bits, "data": data_bits})


def check_payload(payload):
    """Return ``payload`` if it is a ``data.Layout`` with a ``dst`` field, else raise TypeError."""
    if not isinstance(payload, data.Layout):
        raise UserTypeError(f"payload must be a data.Layout with a 'dst' field, not {payload!r}")
    if "dst" not in dict(iter(payload)):
        raise UserTypeError(f"payload layout must have a 'dst' field, not {payload!r}")
    return payload


class Link(wiring.Component):
    """One direction of a link with a fixed latency and an average bandwidth.

    Latency is a FIFO of (release time, flit): one ring buffer whose entries
    carry the flit and its release time, encoded as the wait after the
    previous entry's release (``log2(latency)`` bits). A release pointer
    walks the ring as entries fall due — never blocked by the receiver, so
    never late — and a head pointer pops released entries to ``o_stream``.
    No deep shift register: the cost grows with the flits in flight, not
    with the latency, and an idle link does not change state.

    Bandwidth is an integer credit scheme (docs/spec/design.md time model): every cycle
    the credit grows by ``rate_num``; a flit may enter when the credit is at
    least its cost — ``block_bytes * rate_den``, or ``small_bytes * rate_den``
    for a flit whose payload has a ``small`` field set (no DataBlock on
    board: an ack, a word store, a load) — and then pays it, so the average
    rate is exactly ``rate_num / rate_den`` bytes per cycle. The credit
    saturates at ``burst`` blocks (it starts full, so a lone block is never
    delayed by the limiter).

    Parameters
    ----------
    payload : data.Layout or None
        Flit layout; must have a ``dst`` field. ``None``: :func:`flit_layout`
        of ``ranks`` and ``data_bits``.
    latency : int
        Cycles from an input transfer to ``o_stream.valid`` for a flit that
        meets an empty link: ``0`` (a pure rate limiter, combinational) or at
        least :data:`LINK_MIN_LATENCY`.
    rate_num, rate_den : int
        Bandwidth in bytes per cycle, as the fraction ``rate_num / rate_den``.
        ``rate_num = 0`` means unlimited (one flit per cycle).
    block_bytes : int
        Bytes charged per flit (the 512 B UB DataBlock).
    small_bytes : int or None
        Bytes charged per flit whose payload's ``small`` field is 1 (a UB
        control packet); ``None``: ``block_bytes`` (every flit is a block).
    burst : int
        Credit ceiling, in blocks.
    depth : int or None
        Flits the link holds in flight. ``None``: enough to sustain the rate
        over the latency (bandwidth-delay product plus ``burst`` + 1).
    ranks, data_bits : int
        Only used when ``payload`` is ``None``.

    Attributes
    ----------
    i_stream : In(stream.Signature(payload))
        Flits entering the link (``ready`` low: link full or out of credit).
    o_stream : Out(stream.Signature(payload))
        Flits leaving the link.
    idle : Out(1)
        The next clock edge leaves every register and the ring unchanged:
        nothing is in flight, the arrival counter and the credit are
        saturated, and no flit is offered (``i_stream.valid`` low). A
        simulator may skip the link's clock edge then (the native backend
        does); nothing in the hardware reads it.

    Raises
    ------
    ValueError, TypeError
        On an invalid parameter (named in the message).
    """

    def __init__(self, *, payload=None, latency, rate_num=0, rate_den=1, block_bytes=512,
                 small_bytes=None, burst=2, depth=None, ranks=4, data_bits=32):
        if payload is None:
            payload = flit_layout(ranks=ranks, data_bits=data_bits)
        #: its parameters: two links with equal ones are the same hardware
        self.params = dict(payload=payload, latency=latency, rate_num=rate_num, rate_den=rate_den,
                           block_bytes=block_bytes, small_bytes=small_bytes, burst=burst,
                           depth=depth)
        self.payload = check_payload(payload)
        check_int("latency", latency)
        if latency < 0 or 0 < latency < LINK_MIN_LATENCY:
            raise UserError(f"latency must be 0 or an integer >= {LINK_MIN_LATENCY}, "
                            f"not {latency!r}")
        self.latency = latency
        check_int("rate_num", rate_num, 0)
        check_int("rate_den", rate_den, 1)
        check_int("block_bytes", block_bytes, 1)
        if small_bytes is not None:
            check_int("small_bytes", small_bytes, 1, block_bytes)
        check_int("burst", burst, 1)
        self.block_bytes = block_bytes
        # flits may be small only if the payload says so
        self.small_bytes = small_bytes if "small" in dict(iter(payload)) else None
        self.burst = burst
        # At one block per cycle or more the limiter never holds a flit back.
        self.limited = rate_num > 0 and rate_num < block_bytes * rate_den
        self.rate_num, self.rate_den = rate_num, rate_den
        smallest = self.small_bytes or block_bytes
        # flits in flight at full rate (at most one enters per cycle)
        flits_per_cycle = min(1.0, rate_num / (smallest * rate_den)) if self.limited else 1.0
        if depth is None:
            depth = math.ceil(latency * flits_per_cycle) + burst + 1
        check_int("depth", depth, 1)
        self.depth = depth
        super().__init__(self.signature_for(payload=payload))
        #: the registers ``idle`` promises to keep (set by ``elaborate``, for tests)
        self.state = []

    @staticmethod
    def signature_for(*, payload=None, ranks=4, data_bits=32, **others):
        """The signature of a link of these parameters (the constructor's: flits ``payload``,
        or :func:`flit_layout` of ``ranks`` and ``data_bits``), without building one."""
        check_other_params(Link, others)
        if payload is None:
            payload = flit_layout(ranks=ranks, data_bits=data_bits)
        return wiring.Signature({
            "i_stream": In(stream.Signature(payload)),
            "o_stream": Out(stream.Signature(payload)),
            "idle": Out(1),
        })

    def elaborate(self, platform):
        m = Module()

        credit_ok = Signal(init=1)
        if self.limited:
            block_cost = self.block_bytes * self.rate_den
            cap = self.burst * block_cost
            credit = Signal(range(cap + self.rate_num + 1), init=cap)
            if self.small_bytes is None:
                cost = block_cost
            else:
                cost = Mux(self.i_stream.payload.small, self.small_bytes * self.rate_den, block_cost)
            m.d.comb += credit_ok.eq(credit >= cost)
            fire = self.i_stream.valid & self.i_stream.ready
            nxt = Signal.like(credit)
            m.d.comb += nxt.eq(credit + self.rate_num - Mux(fire, cost, 0))
            m.d.sync += credit.eq(Mux(nxt > cap, cap, nxt))
            credit_full = credit == cap
            self.state = [credit]
        else:
            credit_full = 1
            self.state = []

        if self.latency == 0:
            m.d.comb += self.idle.eq(credit_full & ~self.i_stream.valid)
            m.d.comb += [
                self.o_stream.payload.eq(self.i_stream.payload),
                self.o_stream.valid.eq(self.i_stream.valid & credit_ok),
                self.i_stream.ready.eq(self.o_stream.ready & credit_ok),
            ]
            return m

        width = len(Cat(self.i_stream.payload))
        wait_bits = max(1, (self.latency - 2).bit_length())
        depth = self.depth
        # One ring of (wait, flit) entries with two read pointers: `due_ptr`
        # (oldest entry not yet released) and `head` (oldest entry not yet sent).
        # `wait` is how long an entry waits once it is the oldest unreleased
        # one: min(gap to the previous arrival, latency - 1) - 1, so it is due
        # exactly latency - 1 cycles after its arrival and out.valid rises one
        # cycle later. Nothing counts while the link is idle.
        produce = Signal(range(depth), name="produce")
        head = Signal(range(depth), name="head")
        due_ptr = Signal(range(depth), name="due_ptr")
        level = Signal(range(depth + 1), name="level")
        released = Signal(range(depth + 1), name="released")
        since = Signal(range(self.latency), init=self.latency - 1, name="since")
        held = Signal(wait_bits, name="held")

        accept = Signal()
        send = Signal()
        due = Signal()
        m.d.comb += [
            self.i_stream.ready.eq((level != depth) & credit_ok),
            accept.eq(self.i_stream.valid & self.i_stream.ready),
            self.o_stream.valid.eq(released != 0),
            send.eq(self.o_stream.valid & self.o_stream.ready),
        ]
        entry = Cat(self.i_stream.payload, (since - 1)[:wait_bits])
        head_data, due_data = ring_storage(m, width + wait_bits, depth, produce, accept, entry,
                                    [head, due_ptr])
        m.d.comb += [
            self.o_stream.payload.eq(head_data[:width]),
            due.eq((level != released) & (held == due_data[width:])),
            # level == 0 implies released == 0: nothing due, sent or counted
            self.idle.eq((level == 0) & (since == self.latency - 1) & credit_full
                         & ~self.i_stream.valid),
        ]
        self.state += [produce, head, due_ptr, level, released, since, held]

        with m.If(accept):
            m.d.sync += [produce.eq(incr_wrap(produce, depth)), since.eq(1)]
        with m.Elif(since != self.latency - 1):
            m.d.sync += since.eq(since + 1)
        with m.If(due):
            m.d.sync += [due_ptr.eq(incr_wrap(due_ptr, depth)), held.eq(0)]
        with m.Elif(level != released):
            m.d.sync += held.eq(held + 1)
        with m.If(send):
            m.d.sync += head.eq(incr_wrap(head, depth))
        with m.If(accept != send):
            m.d.sync += level.eq(Mux(accept, level + 1, level - 1))
        with m.If(due != send):
            m.d.sync += released.eq(Mux(due, released + 1, released - 1))
        return m


VERILOG_EXPORTS = {
    "link": (Link, {"latency": 8, "rate_num": 3, "rate_den": 2, "block_bytes": 4,
                    "burst": 2, "ranks": 4, "data_bits": 16}),
}
