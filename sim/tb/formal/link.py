"""Formal harness of a link: the credit limiter's rate bound, the exact latency (docs/spec/design.md time model) and the bounded response.

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

Both are proved by k-induction (no bound). The harnesses elaborate the link
themselves (:class:`~epfabric.sim.tb.formal.Elaborated`) to state invariants
over its registers — the link's Verilog is untouched: the credit never
exceeds its ceiling and pays for every window's excess (rate); the ring's
pointers agree with ``level``/``released``, and each entry's ``wait``,
``held`` and ``since`` agree with the arrival times a shadow age per ring
slot records (latency). Each invariant says in a comment why it holds in
every reachable state; the base case (``depth`` cycles from the initial
state) checks that it does.

Negative controls: ``LinkRate(slack=1)`` builds the link with one block more
burst than the bound claims (the base case breaks the credit invariant at
step 1: the link holds more credit than the claimed burst pays for);
``LinkLatency(claim=latency - 1)`` claims a latency the link does not have
(the base case, 6 cycles, breaks the latency assertion itself at step 4).
"""

from amaranth.asserts import AnySeq
from amaranth.hdl import Assert, Cover, Mux, Signal, signed

from ....hw.link import Link, flit_layout
from . import Elaborated, FormalProperty, Harness
from .fairness import fair_ready, response_age

__all__ = ["LinkRate", "LinkLatency", "LinkResponse", "ring_invariants", "PROPERTIES"]


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
        link = self.link
        m.submodules.link = blk = Elaborated(link)
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

        # Invariants (what makes the property inductive; k-induction otherwise
        # starts from a credit above its ceiling or a window whose excess
        # already exceeds what the credit paid for):
        credit = blk["credit"]
        link_cap = link.burst * cost
        # the credit starts at its ceiling and every update saturates there
        m.d.comb += Assert(credit <= link_cap, "inv: credit above its ceiling")
        with m.If(started):
            # every byte of the window beyond the rate was paid from the credit
            # the window began with (at most cap + rate_num: the credit of the
            # cycle before the window plus one cycle's growth): each cycle the
            # excess drops by rate_num while the credit grows by at most
            # rate_num, and a flit adds its cost to one and takes it from the
            # other. So excess + credit <= cap + rate_num holds in every window
            # (the clamp of the excess at -cap only lowers it), and with a flit
            # needing credit >= cost it gives the assertion.
            m.d.comb += [Assert(excess + credit <= cap + self.rate_num,
                                "inv: window excess not paid by the credit"),
                         # the clamp: no wrap-around of the signed excess
                         Assert(excess >= -cap, "inv: excess below its clamp")]


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
        link = self.link
        m.submodules.link = blk = Elaborated(link)
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
        # only the tracked flit sets seen, and it had to be sent first
        m.d.comb += Assert(~seen | sent, "inv: seen before sent")
        self.invariants(m, blk, sent & ~seen, age)

    def invariants(self, m, blk, inside, age_t):
        """What makes the latency inductive (:func:`ring_invariants`, output always ready)."""
        ring_invariants(m, self.link, blk, inside, age_t, always_ready=True)


class LinkResponse(Harness):
    """Harness: any traffic, a fair receiver; one tracked flit must leave within ``bound`` cycles.

    Why *N* = *D* x *M* - 1 (*D*: ring depth, *M*: patience, *L*: latency;
    with *D* > *L*, as the default depth has; in general max(*D* x *M* - 1,
    *L* + *M* - 1), the second for a flit alone in the link):
    a flit accepted at cycle *t* finds at most *D* - 1 flits ahead of it
    (``i_stream.ready`` needs a free slot); the ring pops in order, one flit
    per ready cycle whose head is released, and every flit is released *L*
    cycles after its acceptance whatever the receiver does. With every flit
    ahead released, the worst is *D* - 1 of them and ready cycles *M* apart
    from the first one after *t*: the tracked flit leaves with the *D*-th,
    at most *D* x *M* - 1 cycles after *t* (the ready cycle that made room at
    *t* - 1 leaves the next one at most *M* away; a ready cycle at *t* would
    pop one of the *D* - 1). A ready cycle wasted on an unreleased head
    cannot make it worse: the flits behind that head arrived after it, one
    per cycle at most, so at most *L* - 1 do, and the wait is then at most
    *L* x *M* <= *D* x *M* - 1. Tight (the cover and ``link.response_tight``):
    a ring refilled as fast as it drains, then ready every *M*-th cycle. The
    rate limiter only gates acceptance (it spaces the flits ahead out), so
    the argument holds for a limited link whose depth exceeds its latency;
    the proof here is of an unlimited one.

    The induction invariant (:meth:`response_invariants`) is this argument
    per flit ahead of the tracked one.

    Parameters
    ----------
    latency, burst
        Of the link under test (no rate limit: ``rate_num = 0``; its depth
        *D* is the default ``latency + burst + 1``).
    patience : int or None
        *M*: the receiver is ready at least once in every ``patience`` cycles;
        ``None``: no fairness (the negative control).
    bound : int or None
        *N* (default max(*D* x *M* - 1, *L* + *M* - 1)).
    invariants : bool
        Also assert the invariants that make the claim inductive.
    """

    def __init__(self, *, latency=3, burst=1, patience=2, bound=None, invariants=True):
        super().__init__()
        self.link = Link(payload=flit_layout(ranks=2, data_bits=2), latency=latency,
                         burst=burst)
        self.patience, self.invariants = patience, invariants
        depth, m_ = self.link.depth, patience or 1
        self.bound = bound if bound is not None else max(depth * m_ - 1, latency + m_ - 1)

    def check(self, m):
        link = self.link
        m.submodules.link = blk = Elaborated(link)
        inp, out = link.i_stream, link.o_stream
        waited = fair_ready(m, out.ready, patience=self.patience, name="out")
        pick = Signal(name="pick")
        accept = inp.valid & inp.ready
        m.d.comb += [inp.valid.eq(AnySeq(1)), inp.payload.dst.eq(AnySeq(1)),
                     inp.payload.src.eq(AnySeq(1)), inp.payload.data.eq(Mux(pick, 1, 0))]
        tagged_out = out.valid & out.ready & (out.payload.data == 1)
        pending, age = response_age(m, start=accept & pick, done=tagged_out, bound=self.bound,
                                    name="t")
        m.d.comb += pick.eq(AnySeq(1) & ~pending)
        with m.If(tagged_out):
            m.d.comb += Assert(pending, "tracked flit out of nowhere")
        m.d.comb += [Assert(~pending | (age <= self.bound), "tracked flit not out in time"),
                     Cover(tagged_out & (age == self.bound))]
        if self.invariants:
            self.response_invariants(m, blk, pending, age, waited)

    def response_invariants(self, m, blk, pending, age, waited):
        """The bound, per flit ahead of the tracked one (with :func:`ring_invariants`).

        For the tracked flit *T* (age *a*, position *q* from the head) and each
        flit *i* at or ahead of it (position *p*, released in *d* =
        *L* - its age cycles, 0 if released): *T* leaves within *d* + (*q* -
        *p* + 1) x *M* - 1 cycles, less ``waited`` when *d* = 0 (the next
        ready cycle is at most *M* - 1 - ``waited`` away): once *i* is
        released, each ready cycle pops one of the *q* - *p* + 1 flits from
        *i* to *T*. So *a* + that <= *N* for every such *i*. One step keeps
        it: a pop shifts every position and uses a ready cycle (the
        ``waited`` discount makes up for the term of the popped head); a
        not-ready cycle grows ``waited``; a ready cycle wasted on an
        unreleased head lowers every *d*. On *T*'s acceptance it follows from
        the ring's ages (:func:`ring_invariants`: unreleased flits have
        distinct ages below *L*) and *D* - 1 flits at most ahead.
        """
        link, M, N = self.link, self.patience, self.bound
        lat, depth = link.latency, link.depth
        ages, live, tagged = ring_invariants(m, link, blk, pending, age, always_ready=False)
        head = blk["head"]

        def off(j):                        # position from the head
            return Mux(head <= j, j - head, j + depth - head)

        for t in range(depth):
            for i in range(depth):
                d = lat - ages[i]
                left = d + (off(t) - off(i) + 1) * M - 1 - Mux(d == 0, waited, 0)
                with m.If(live[t] & tagged[t] & live[i] & (off(i) <= off(t))):
                    m.d.comb += Assert(age + left <= N, f"inv: slot {t} behind slot {i}")


def ring_invariants(m, link, blk, inside, age_t, *, always_ready):
    """What makes a link's timing inductive: the ring's pointers, counts and waits as reset made them.

    Without these, k-induction starts from a ring whose pointers disagree
    with ``level``/``released``, or whose ``wait`` fields, ``held`` and
    ``since`` schedule an entry's release at a time no arrival gives.
    The harness keeps a shadow age per ring slot (cycles since the flit
    in it was accepted: 1 on the cycle after, saturating at the latency)
    and ties the link's state to it. ``inside``: the tracked flit (the one
    whose ``data`` is 1) is in the link; ``age_t`` its age (not
    saturating). ``always_ready``: the output never back-pressures, so at
    most one released entry waits. Returns ``(ages, live, tagged)`` per
    ring slot: the shadow ages, which slots hold a flit, which the tracked one.
    """
    lat, depth = link.latency, link.depth
    width = len(link.i_stream.payload.as_value())
    produce, head, due_ptr = blk["produce"], blk["head"], blk["due_ptr"]
    level, released, since, held = blk["level"], blk["released"], blk["since"], blk["held"]
    ring = [blk[f"ring{j}"] for j in range(depth)]
    accept = link.i_stream.valid & link.i_stream.ready

    def off(j, base):                  # (j - base) mod depth
        return Mux(base <= j, j - base, j + depth - base)

    # Pointers and counts: level entries from head to produce, the first
    # `released` of them released (due_ptr follows them). Each of the
    # three pointers moves by one (mod depth) exactly when its count says
    # so, from all-zero at reset.
    m.d.comb += [Assert(level <= depth, "inv: level"),
                 Assert(released <= level, "inv: released <= level"),
                 Assert(produce < depth, "inv: produce"), Assert(head < depth, "inv: head"),
                 Assert(due_ptr < depth, "inv: due_ptr"),
                 Assert(off(produce, head) == Mux(level == depth, 0, level),
                        "inv: produce = head + level"),
                 Assert(off(due_ptr, head) == Mux(released == depth, 0, released),
                        "inv: due_ptr = head + released")]
    if always_ready:
        # a released entry leaves in the cycle after its release, so at
        # most one is ever waiting
        m.d.comb += Assert(released <= 1, "inv: at most one released entry")

    ages = [Signal(range(lat + 1), name=f"slot{j}_age") for j in range(depth)]
    for j, a in enumerate(ages):
        with m.If(accept & (produce == j)):
            m.d.sync += a.eq(1)
        with m.Elif(a != lat):
            m.d.sync += a.eq(a + 1)
    live = [off(j, head) < level for j in range(depth)]
    unrel = [off(j, due_ptr) < level - released for j in range(depth)]
    wait = [r[width:] for r in ring]
    tagged = [link.payload(r[:width]).data == 1 for r in ring]     # the tag
    for j in range(depth):
        nxt = (j + 1) % depth
        with m.If(unrel[j]):
            # an entry is released lat - 1 cycles after its arrival (when
            # its age is lat - 1), so an unreleased one is younger than
            # that; its wait is min(gap, lat - 1) - 1 <= lat - 2
            m.d.comb += [Assert((ages[j] >= 1) & (ages[j] <= lat - 1), "inv: unreleased age"),
                         Assert(wait[j] <= lat - 2, "inv: wait")]
            # the first unreleased entry is due when held reaches its wait:
            # the cycles left, wait - held, are lat - 1 - age
            with m.If(due_ptr == j):
                m.d.comb += Assert(held + lat - 1 == wait[j] + ages[j], "inv: held")
            # the next one arrived `gap` cycles later (gap <= lat - 2 as
            # both are unreleased) and waits gap - 1 after this one's release
            with m.If(off(j, due_ptr) + 1 < level - released):
                m.d.comb += Assert(wait[nxt] + 1 == ages[j] - ages[nxt], "inv: gap")
        with m.Elif(live[j]):
            # released one cycle after it was due at age lat - 1
            m.d.comb += Assert(ages[j] == lat, "inv: released age")
        # since = cycles since the last arrival (saturating at lat - 1):
        # the age of the newest entry
        with m.If((level != 0) & (produce == nxt)):
            m.d.comb += Assert(since == Mux(ages[j] >= lat - 1, lat - 1, ages[j]), "inv: since")
        # the tracked flit is the only tagged flit in the ring, and its
        # age is the harness's (both count from its acceptance; the shadow
        # age saturates at the latency)
        with m.If(live[j] & tagged[j]):
            m.d.comb += Assert(inside & (ages[j] == Mux(age_t >= lat, lat, age_t)),
                               "inv: tagged entry")
    m.d.comb += Assert(sum(live[j] & tagged[j] for j in range(depth)) == inside,
                       "inv: the tracked flit is in the ring once")
    # nothing left (or nothing ever came): the last arrival is lat - 1 or
    # more cycles ago, and held was cleared by the last release
    with m.If(level == 0):
        m.d.comb += Assert(since == lat - 1, "inv: since of an empty link")
    with m.If(level == released):
        m.d.comb += Assert(held == 0, "inv: held of a link with nothing unreleased")
    return ages, live, tagged


PROPERTIES = {
    "link.rate": FormalProperty(
        LinkRate, mode="prove", depth=2, cover_depth=24, expect="pass",
        doc="link at 3/2 B/cycle, 4 B blocks, burst 2: any window of W cycles carries at most "
            "rate x (W-1) + burst bytes",
        params={},
        gtkw=("window_start", "window_open", "excess_now", "link.i_stream__valid",
              "link.i_stream__ready")),
    "link.latency": FormalProperty(
        LinkLatency, mode="prove", depth=6, cover_depth=20, expect="pass",
        doc="latency-4 link, output always ready: a flit's valid rises exactly 4 cycles after "
            "it was accepted",
        params={},
        gtkw=("pick", "sent_t", "age_t", "seen_t", "link.o_stream__valid")),
    "link.response": FormalProperty(
        LinkResponse, mode="prove", depth=4, cover_depth=16, expect="pass",
        doc="latency-3 link of 5 slots, any traffic, receiver ready at least once every 2 "
            "cycles: every flit leaves within 9 cycles of its acceptance (D x M - 1: 4 flits "
            "ahead and itself, one per ready cycle)",
        params={"patience": 2},
        gtkw=("pick", "t_pending", "t_age", "out_waited", "link.o_stream__valid",
              "link.o_stream__ready")),
    "link.response_tight": FormalProperty(
        LinkResponse, mode="bmc", depth=16, expect="fail", slow=True,
        doc="link.response claimed one cycle tighter (8): the solver finds the flit that takes 9 "
            "(the claim alone, no invariants)",
        params={"patience": 2, "bound": 8, "invariants": False},
        gtkw=("pick", "t_pending", "t_age", "out_waited", "link.level",
              "link.o_stream__valid", "link.o_stream__ready")),
    "link.response_unfair": FormalProperty(
        LinkResponse, mode="bmc", depth=12, expect="fail", slow=True,
        doc="link.response without the fairness assumption: the solver finds a receiver that "
            "keeps a flit in the link past 9 cycles",
        params={"patience": None, "bound": 9, "invariants": False},
        gtkw=("pick", "t_pending", "t_age", "link.o_stream__valid", "link.o_stream__ready")),
}
