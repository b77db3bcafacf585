"""In-switch reduction for expert-parallel combine: contributions summed where their paths meet.

INC-MoE §3.1 (message semantics: the switch reduces the payloads of
messages that contribute to one result and forwards one). A :class:`ReduceUnit` sits
on an extra port of a superpod switch (:class:`~epfabric.hw.inc_switch.IncSwitch`).
A *group* is one result block: destination rank ``dst`` and block address
``key``. Every contribution carries

* ``mask`` -- the contributors of its group (bit ``d``: rank ``d`` sends one
  contribution), the same in every contribution of the group;
* ``count`` -- how many contributions it already holds (1 from a die, more once a
  switch has summed some).

A switch expects ``popcount(mask & subtree[dst])`` contributions of a group: the
contributors whose path to ``dst`` passes through it (:func:`~epfabric.hw.topology.subtrees`
computes the table from the fabric's routes). Nobody writes a group table: the
kernel's routing, carried in the mask, *is* the count (INC-MoE's "each reduction
knows how many contributions it waits for"). The unit sums the group's data lanes
in lanes of ``dtype`` (the INC blocks' one lane arithmetic, :mod:`~epfabric.hw.lane_arith`:
by default 16-bit wrapping integers, bit-exact in any order; ``"fp32"`` or ``"bf16"``,
rounded, so the order matters -- see "Order of accumulation"), and when the counts reach
the expectation it releases one flit with the sum and ``count`` = the expectation, which
the switch routes on towards ``dst`` (the next switch expects at least as many, so it
sums again or forwards).

Order of accumulation. Contributions are added in the order they reach the unit, which
is the order the switch's arbiter grants its reduction port: arrival order, nothing
buffered, one partial sum per group. The simulation is cycle-deterministic (the same run
gives the same order, on every simulator), but the order depends on timing -- link
latencies, stalls, other traffic -- so a change of timing can change a floating-point
sum in its last bits. A bf16 group keeps an fp32 partial sum (twice its lanes' bits in
the slot) and is rounded to bf16 when it leaves: once per switch that releases it
(docs/concepts/inc-numerics.md gives the error bound a checker uses).

Slots are direct-mapped: slot ``(dst, key mod window)``, ``2**bits(dst) * window``
of them, each a count and the partial sum (in the accumulator form of ``dtype``:
:func:`~epfabric.hw.lane_arith.accumulator_width`). A group's slot is free again once it is
released (count 0), so a slot is reused by every run (epoch) with no reset. The
kernel's layout must put one run's result blocks of a destination in at most
``window`` consecutive blocks (the unit counts a contribution whose count would
pass the expectation as an ``o_errors``, which only a layout breaking that rule
or a wrong mask can cause).

The first ``header_bits`` of ``data`` (the Data-as-Flag header words of
docs/spec/kernels.md §1.7) are not summed: the released block carries the
header of the last contribution, which a kernel makes equal in every contribution
(the epoch flag, the token). So the receiver polls one flag, as for any block.

Slots and waits (docs/concepts/inc-deadlock.md). A slot is never allocated: a
contribution never waits for a free one, so open slots block nothing. The unit waits only
for its output: every contribution is absorbed in the cycle it is offered unless the
one-flit release register is full and not draining (or, with floating-point lanes, a sum
for its slot is still in the adder's pipeline: a wait of at most ``latency`` cycles that
depends on nothing else). Its releases go to the switch as an input and leave by
``routes[dst]``. So if that output drains, every contribution is absorbed within a bound
(formal harness ``inc_drain.absorb``). What keeps the outputs draining is where units sum:
only where their releases go *down*, towards ``dst`` -- a die's unit for its own die, a
tier-2 unit, and a tier-1 unit only for groups of its own board
(:func:`~epfabric.hw.topology.superpod` restricts the tier-1 tables). A tier-1 unit that
also summed groups leaving its board held releases going up and down in one register, so a
partial sum that came down from tier-2 waited behind one going up, and two boards' units
waited on each other through one tier-2 plane: a deadlock simulation reached. With the
restriction the fabric's wait-for graph has no cycle (:mod:`~epfabric.hw.inc_waits`,
checked on every superpod shape). The tests put random back-pressure on every output
(tests/hw/test_inc_switch.py) and the formal harness ``inc_switch.reduce`` checks a release
carries exactly the sum of its group.

One contribution a cycle: the slot is read combinationally and written at the
clock edge, so a contribution to the same slot in the next cycle sees the sum.
A floating-point sum does not fit a cycle (:data:`~epfabric.hw.lane_arith.FLOAT_ADD_LATENCY`
register stages, :func:`~epfabric.hw.lane_arith.add_latency`): the slot is read at the
offer, the sum and the decisions (count, release) travel down the pipeline, and the slot
is written -- and a release loaded into the output register -- at its end. A contribution
whose slot has a sum in the pipeline waits for it (``hazard``: at most ``latency`` cycles,
whatever the other inputs do, so it adds no wait to those above); the whole pipeline
stalls while the output register is full and not draining. Integer sums keep the one-cycle
path, cycle for cycle. The counters count at the offer.

Planes. A switch of many ports and 512 B flits is too wide for one Amaranth module (the
native backend builds it as a :class:`~epfabric.hw.switch.PlanarSwitch`; for an in-network
switch :class:`~epfabric.hw.inc_switch.PlanarIncSwitch`). The sums never steer the unit, so
``ReduceUnit(planes=True)`` keeps only the counts and the decisions (``x_index``, ``x_take``,
``x_fresh``, ``x_release``) and each :class:`ReduceDataPlane` keeps the partial sums of its
bits of ``data`` and follows them: cycle for cycle the same unit.
"""

from amaranth.hdl import Cat, Module, Mux, Shape, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2

from .lane_arith import (accumulate_lanes, accumulator_width, add_latency,
                         identity_lanes, lane_bits, pipeline, round_lanes)
from .switch import popcount
from .validate import UserError, check_int, check_pow2

__all__ = ["ReduceUnit", "ReduceDataPlane", "VERILOG_EXPORTS"]


def _field(payload, path):
    layout = payload
    offset = 0
    for name in path:
        try:
            f = layout[name]
        except KeyError:
            raise UserError(f"the payload has no field {'.'.join(path)!r}") from None
        offset += f.offset
        layout = f.shape
    return offset, Shape.cast(layout).width


class ReduceUnit(wiring.Component):
    """The reduction engine of one switch (see the module docstring).

    Parameters
    ----------
    payload : data.Layout
        The fabric's flit, with fields ``dst``, ``mask``, ``count``, ``red``, ``data``
        and the group key (``key_field``).
    subtree : sequence of int
        ``subtree[d]``: the contributors whose path to ``d`` passes through the switch.
        With ``subtree_port`` only its length is used and the masks come from the
        input ``subtree_in``.
    window : int
        Result blocks of one destination a run may reduce into (a power of two): the
        slots per destination.
    key_field : tuple of str
        Path of the payload field whose low bits name the group's block (default the
        router flit's ``("addr", "block")``).
    header_bits : int
        Leading bits of ``data`` not summed (default 128: the four Data-as-Flag words).
    dtype : str
        Lane type of the sums (:mod:`~epfabric.hw.lane_arith`): default ``"int16"`` (the
        vector unit's elements, wrapping), ``"fp32"``, ``"bf16"`` (fp32 partial sums).
    counter_width : int
        Width of the counters.
    subtree_port : bool
        Take ``subtree`` from an input port (switches that differ only in their tables
        share one Verilog module).
    planes : bool
        The control part only (see the module docstring): ``payload`` has no ``data`` (its
        sums live in the data planes, :class:`ReduceDataPlane`) and the unit exposes its decisions.
        ``header_bits`` and ``dtype`` are then the data planes' business.

    Attributes
    ----------
    i_stream : In(stream.Signature(payload))
        Contributions, from the switch.
    o_stream : Out(stream.Signature(payload))
        Releases, to the switch.
    o_absorbed, o_released, o_errors : Out(counter_width)
        Contributions taken, groups released, contributions past their expectation.
    o_open : Out(counter_width)
        Slots holding a partial sum now.
    x_index, x_take, x_fresh, x_release : Out, with ``planes``
        The slot of the flit offered, whether it is taken this cycle, whether its slot held
        nothing (count 0), whether it completes its group (the release register loads).

    Raises
    ------
    ValueError, TypeError
        On an invalid parameter (named in the message).
    """

    def __init__(self, *, payload, subtree, window=16, key_field=("addr", "block"),
                 header_bits=128, dtype="int16", counter_width=32, subtree_port=False,
                 planes=False):
        fields = dict(iter(payload))
        self.planes = bool(planes)
        need = ("dst", "mask", "count", "red") + (() if self.planes else ("data",))
        missing = [f for f in need if f not in fields]
        if missing:
            raise UserError(f"a ReduceUnit's payload needs fields {', '.join(need)}; "
                            f"missing: {', '.join(missing)}")
        self.payload = payload
        self.subtree = tuple(subtree)
        if not self.subtree:
            raise UserError("subtree must have one mask per destination, not none")
        nd = len(self.subtree)
        for d, mask in enumerate(self.subtree):
            check_int(f"subtree[{d}]", mask, 0, (1 << nd) - 1)
        self.window = check_pow2("window", window, 1, 1 << 16)
        self.key_field = tuple(key_field)
        self.key_offset, key_width = _field(payload, self.key_field)
        if (1 << key_width) < window:
            raise UserError(f"window {window} needs {ceil_log2(window)} bits of "
                            f"{'.'.join(self.key_field)}, which has {key_width}")
        self.lane_bits = lane_bits(dtype)
        if not self.planes:
            data_bits = Shape.cast(fields["data"].shape).width
            check_int("header_bits", header_bits, 0, data_bits)
            if self.lane_bits > data_bits - header_bits:
                raise UserError(f"dtype {dtype!r}: a {self.lane_bits}-bit lane does not fit the "
                                f"{data_bits - header_bits} data bits past the header")
        self.header_bits = header_bits
        self.dtype = dtype
        #: register stages of the sum (0: integers, in the cycle of the offer)
        self.latency = add_latency(dtype)
        self.counter_width = check_int("counter_width", counter_width, 1)
        self.subtree_port = bool(subtree_port)
        if Shape.cast(fields["mask"].shape).width < nd:
            raise UserError(f"the payload's mask field is narrower than the {nd} destinations")
        flit = stream.Signature(payload)
        #: bits of a slot's address (:meth:`index_bits_for`)
        self.index_bits = self.index_bits_for(payload, self.window)
        index_bits = self.index_bits
        super().__init__({
            **({"subtree_in": In(nd).array(nd)} if subtree_port else {}),
            **({"x_index": Out(index_bits), "x_take": Out(1), "x_fresh": Out(1),
                "x_release": Out(1)} if self.planes else {}),
            **({"x_advance": Out(1)} if self.planes and self.latency else {}),
            "i_stream": In(flit),
            "o_stream": Out(flit),
            "o_absorbed": Out(counter_width),
            "o_released": Out(counter_width),
            "o_errors": Out(counter_width),
            "o_open": Out(counter_width),
        })

    @staticmethod
    def index_bits_for(payload, window):
        """Bits of a slot's address of a unit of flits ``payload`` and ``window``: the
        destination, then the key's low bits."""
        return Shape.cast(dict(iter(payload))["dst"].shape).width + ceil_log2(window)

    def elaborate(self, platform):
        m = Module()
        nd = len(self.subtree)
        inp, out = self.i_stream, self.o_stream
        flit = inp.payload
        data_bits = 0 if self.planes else len(flit.data)
        count_bits = len(flit.count)
        wbits = ceil_log2(self.window)
        dst_bits = len(flit.dst)
        # the control part of a planar switch holds no data: no header, no lanes
        form = dict(dtype=self.dtype, header_bits=0 if self.planes else self.header_bits)
        acc_bits = accumulator_width(data_bits, **form)
        entry_bits = count_bits + acc_bits
        # The slots: direct-mapped by (dst, key), never allocated, so a contribution never
        # waits for a free one and open slots hold nothing up. The unit's one wait is its
        # release register (``advance`` below), whose release leaves by routes[dst]: on a
        # tier-1 switch up or down, which lets two boards' units wait on each other
        # (module docstring, docs/concepts/inc-deadlock.md).
        m.submodules.slots = slots = Memory(shape=entry_bits, depth=(1 << dst_bits) << wbits,
                                            init=[])
        rd = slots.read_port(domain="comb")
        wr = slots.write_port()
        key = Cat(flit)[self.key_offset:self.key_offset + wbits] if wbits else Cat()
        index = Cat(key, flit.dst)
        m.d.comb += rd.addr.eq(index)
        old_count = rd.data[:count_bits]
        old_sum = (Mux(old_count == 0, identity_lanes(data_bits, **form),
                       rd.data[count_bits:]) if data_bits else None)

        sub = Signal(nd)
        table = 0
        for d in reversed(range(nd)):
            entry = self.subtree_in[d] if self.subtree_port else self.subtree[d]
            table = Mux(flit.dst == d, entry, table)
        m.d.comb += sub.eq(table)
        expected = Signal(count_bits + 1)
        m.d.comb += expected.eq(popcount((flit.mask[:nd] & sub)[k] for k in range(nd)))
        total = Signal(count_bits + 1)
        m.d.comb += total.eq(old_count + flit.count)
        done = Signal()
        m.d.comb += done.eq(total >= expected)

        o_valid = Signal()
        o_bits = Signal(len(Cat(flit)))
        lat = self.latency
        advance = ~o_valid | out.ready           # the output register can take a release
        take = inp.valid & inp.ready
        release = self.payload(Signal(len(Cat(flit)), name="release"))
        m.d.comb += [release.eq(flit), release.count.eq(total)]
        if lat:
            # the sum's pipeline: the decisions travel with it; the slot is written at its end
            stages = pipeline(m, {"take": take, "index": index, "total": total, "done": done,
                                  "release": release.as_value()}, lat, advance=advance)
            hazard = Signal()                    # a sum for this slot is still in the pipeline
            m.d.comb += hazard.eq(Cat(st["take"] & (st["index"] == index)
                                      for st in stages).any())
            m.d.comb += inp.ready.eq(advance & ~hazard)
            end = stages[-1]
            retire = end["take"] & advance
            release = self.payload(Signal(len(Cat(flit)), name="release_end"))
            m.d.comb += release.eq(end["release"])
        else:
            m.d.comb += inp.ready.eq(advance)
            end, retire = {"index": index, "total": total, "done": done}, take
        m.d.comb += [out.valid.eq(o_valid), out.payload.eq(o_bits)]
        with m.If(out.ready):
            m.d.sync += o_valid.eq(0)
        if data_bits:
            summed = Signal(acc_bits)         # the partial sum, in the accumulator form
            m.d.comb += summed.eq(accumulate_lanes(m, old_sum, flit.data, latency=lat,
                                                   advance=advance, **form))
            m.d.comb += release.data.eq(round_lanes(m, summed, width=data_bits, **form))
        else:
            summed = Cat()
        m.d.comb += [wr.addr.eq(end["index"]), wr.en.eq(retire),
                     wr.data.eq(Mux(end["done"], 0, Cat(end["total"][:count_bits], summed)))]
        with m.If(retire & end["done"]):
            m.d.sync += [o_valid.eq(1), o_bits.eq(release)]
        if self.planes:
            m.d.comb += [self.x_index.eq(index), self.x_take.eq(take),
                         self.x_fresh.eq(old_count == 0), self.x_release.eq(take & done)]
            if lat:
                m.d.comb += self.x_advance.eq(advance)
        self._count(m, take, done, old_count, total > expected)
        return m

    def _count(self, m, take, done, old_count, over):
        """The counters, from the decisions at the offer."""
        opened = Signal()
        closed = Signal()
        with m.If(take):
            m.d.sync += self.o_absorbed.eq(self.o_absorbed + 1)
            with m.If(done):
                m.d.sync += self.o_released.eq(self.o_released + 1)
                m.d.comb += closed.eq(old_count != 0)
                with m.If(over):
                    m.d.sync += self.o_errors.eq(self.o_errors + 1)
            with m.Else():
                m.d.comb += opened.eq(old_count == 0)
        with m.If(opened & ~closed):
            m.d.sync += self.o_open.eq(self.o_open + 1)
        with m.If(closed & ~opened):
            m.d.sync += self.o_open.eq(self.o_open - 1)


class ReduceDataPlane(wiring.Component):
    """The partial sums of ``width`` bits of ``data`` of a ``ReduceUnit(planes=True)``.

    A memory of ``2**index_bits`` slots (the accumulator form of ``width`` bits of
    ``dtype``), read at ``index``; on ``take`` the slot gets the sum of ``data_in`` and
    its old value (nothing when ``fresh``), and on ``release`` the output register the
    sum in the wire form -- the storage and moves of
    :class:`ReduceUnit` for these bits. ``header_bits`` are the plane's leading bits that
    are not summed (the unit's header as it falls in this plane); the plane's lanes must
    start where the unit's do (:class:`~epfabric.hw.inc_switch.PlanarIncSwitch` checks).
    A floating-point ``dtype`` sums in the unit's pipeline (``advance``, its
    ``x_advance``): the slot is read at the offer and written, and the output register
    loaded, ``latency`` stages of ``advance`` later, as in the unit.
    """

    def __init__(self, *, index_bits, width, header_bits=0, dtype="int16"):
        self.index_bits = check_int("index_bits", index_bits, 0, 24)
        self.width = check_int("width", width, 1)
        self.header_bits = check_int("header_bits", header_bits, 0, width)
        self.lane_bits = lane_bits(dtype)
        self.dtype = dtype
        self.latency = add_latency(dtype)
        super().__init__({"index": In(max(1, index_bits)), "take": In(1), "fresh": In(1),
                          "release": In(1), "data_in": In(width), "data_out": Out(width),
                          **({"advance": In(1)} if self.latency else {})})

    def elaborate(self, platform):
        m = Module()
        form = dict(dtype=self.dtype, header_bits=self.header_bits)
        acc_bits = accumulator_width(self.width, **form)
        m.submodules.slots = slots = Memory(shape=acc_bits, depth=1 << self.index_bits,
                                            init=[])
        rd = slots.read_port(domain="comb")
        wr = slots.write_port()
        index = self.index[:self.index_bits] if self.index_bits else Cat()
        lat = self.latency
        advance = self.advance if lat else None
        end = {"take": self.take, "index": index, "release": self.release}
        if lat:
            end = pipeline(m, end, lat, advance=advance)[-1]
            end["take"] = end["take"] & advance
        summed = Signal(acc_bits)
        m.d.comb += [
            rd.addr.eq(index), wr.addr.eq(end["index"]),
            summed.eq(accumulate_lanes(m, Mux(self.fresh, identity_lanes(self.width, **form),
                                              rd.data), self.data_in, latency=lat,
                                       advance=advance, **form)),
            wr.en.eq(end["take"]), wr.data.eq(Mux(end["release"], 0, summed)),
        ]
        out = Signal(self.width)
        with m.If(end["take"] & end["release"]):
            m.d.sync += out.eq(round_lanes(m, summed, width=self.width, **form))
        m.d.comb += self.data_out.eq(out)
        return m


def _example_payload():
    from amaranth.lib import data
    return data.StructLayout({"dst": 2, "src": 2, "red": 1, "mcast": 1, "mask": 4, "count": 3,
                              "addr": data.StructLayout({"block": 4, "word": 7}),
                              "data": 256})


class _Example(ReduceUnit):
    """The registered example: 4 ranks, a window of 8 (``epfabric verilog inc_reduce``)."""

    def __init__(self, *, window=8, counter_width=16, dtype="int16"):
        super().__init__(payload=_example_payload(), subtree=(0b1110, 0b1101, 0b1011, 0b0111),
                         window=window, counter_width=counter_width, dtype=dtype)


VERILOG_EXPORTS = {
    "inc_reduce": (_Example, {"window": 8, "counter_width": 16, "dtype": "int16"}),
}
