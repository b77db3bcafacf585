"""N-port switch crossbar: per-input FIFOs, round-robin per output, routing by destination rank.

UBEP §2.3 Insight 3 / Table 2: the tier-1 (board) and tier-2 (superpod)
switches of a CloudMatrix384-like fabric; also the single switch of the
INC-MoE testbed's ``star`` topology (INC-MoE §3).
"""

import functools
import operator

from amaranth.hdl import Cat, Const, Module, Mux, Shape, Signal, Value
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from .arbiter import RoundRobin
from .link import check_payload, flit_layout
from .ring import incr_wrap, ring_storage
from .signature import check_other_params
from .validate import UserError, check_int

__all__ = ["Switch", "MulticastMasks", "SWITCH_LATENCY", "VERILOG_EXPORTS"]

#: Cycles from an input transfer to ``o_stream[p].valid`` through an idle
#: switch: one to enter the input FIFO, one in the output register.
SWITCH_LATENCY = 2


class Switch(wiring.Component):
    """An N-port crossbar switch.

    Each input port has a FIFO of ``depth`` flits; when it is full the port's
    ``ready`` falls and the sender stalls (nothing is dropped). The head flit of
    every input FIFO asks for the output ``routes[dst]``. Each output port has
    a one-flit output register and a round-robin arbiter over the inputs that
    ask for it, so every output can forward one flit per cycle from a different
    input: a permutation of disjoint pairs runs at full rate (non-blocking).
    One FIFO per input and one route per destination keep every (source,
    destination) flow in order.

    Parameters
    ----------
    ports : int
        Number of ports (>= 2).
    routes : sequence of int or None
        ``routes[d]`` is the output port of flits with ``dst == d``.
        ``None``: ``range(ports)`` (destination rank = port). Destinations past
        the end of the table go to port 0.
    payload : data.Layout or None
        Flit layout with a ``dst`` field. ``None``: :func:`~epfabric.hw.link.flit_layout`
        of ``len(routes)`` ranks and ``data_bits``.
    depth : int
        Input FIFO depth in flits (>= 2 so an input streams at full rate).
    counter_width : int
        Width of the counters.
    data_bits : int
        Only used when ``payload`` is ``None``.
    route_port : bool
        Take the route table from an input port ``routes_in`` (one entry per
        destination of ``routes``; ``routes`` then only gives the table's
        length) instead of constants, so switches that differ only in their
        routes share one Verilog module
        (:func:`~epfabric.hw.topology.superpod`'s ``shared``). Same cycles.
    small_taps : bool
        Expose each output's ``small`` payload bit as a one-bit port ``o_small`` (the payload
        must have a ``small`` field), so a fabric can count control flits per link without
        reading whole payloads (:class:`~epfabric.hw.topology.Fabric`'s link counters).
        Default ``False``: the switch, and its Verilog, as without it.
    multicast : bool
        In-network multicast (INC-MoE §3.1's switch replication, on the superpod): a
        flit whose payload's ``mcast`` bit is set goes to every output that some
        destination of its ``mask`` field (bit ``d``: destination ``d``) routes to, each
        copy with ``mask`` cut to the destinations behind that output (the tables: a
        :class:`MulticastMasks` child); the input's head leaves its FIFO when every copy
        has been taken (a register of the outputs already served). Unicast flits are
        unchanged. The payload needs ``mcast`` and ``mask`` fields. Default ``False``: the
        switch, and its Verilog, as without it.
    mcast_uplinks : (int, int) or None
        With ``multicast``, on a tier-1 switch: ports ``first .. first + count - 1`` are its
        uplinks to the ``count`` tier-2 planes. A multicast's copies for dies of other boards
        all leave by one of them, plane ``src % count`` (the source's board-local index),
        as one copy naming all of them; the tier-2 switch copies it per board and each
        board's tier-1 switch per die. So a token crosses the tier-2 layer once on the way
        up, whatever dies it goes to (unicast routes spread over the planes by destination;
        a multicast cannot, and still takes up links before down links, so the routes stay
        deadlock-free). ``None``: copies follow each destination's unicast route.
    reduce_port : int or None
        The port of an in-switch reduction engine (:class:`~epfabric.hw.inc_reduce.ReduceUnit`,
        wired by :class:`~epfabric.hw.inc_switch.IncSwitch`): a flit with ``red`` set that
        stands for fewer contributions (``count``) than this switch expects for its
        group -- ``popcount(mask & subtree[dst])``, the contributors whose path to ``dst``
        passes here -- goes to that port instead of ``routes[dst]``. The engine's
        releases carry the whole expected count, so they route on. Needs ``subtree``
        and ``red``/``mask``/``count`` payload fields.
    subtree : sequence of int or None
        With ``reduce_port``: ``subtree[d]``, the mask of the contributors whose path
        to destination ``d`` passes through this switch. With ``route_port`` it comes
        from the input port ``subtree_in`` instead (``subtree`` then only gives its
        length).

    Attributes
    ----------
    i_stream : In(stream.Signature(payload)).array(ports)
        Flits entering each port.
    o_stream : Out(stream.Signature(payload)).array(ports)
        Flits leaving each port.
    o_blocks : Out(counter_width).array(ports)
        Blocks forwarded out of each port.
    o_stalls : Out(counter_width).array(ports)
        Cycles each output held a flit its receiver did not accept.
    i_stalls : Out(counter_width).array(ports)
        Cycles each input's sender offered a flit the full input FIFO refused.
    o_small : Out(1).array(ports), with ``small_taps``
        The ``small`` field of each output's flit (``o_stream[p].payload.small``), a wire.

    Raises
    ------
    ValueError, TypeError
        On an invalid parameter (named in the message).
    """

    def __init__(self, *, ports, routes=None, payload=None, depth=4, counter_width=32,
                 data_bits=32, route_port=False, planes=False, small_taps=False,
                 multicast=False, reduce_port=None, subtree=None, mcast_uplinks=None):
        check_int("ports", ports, 2)
        routes = _check_routes(ports, range(ports) if routes is None else routes)
        if payload is None:
            payload = flit_layout(ranks=len(routes), data_bits=data_bits)
        self.payload = check_payload(payload)
        dst_width = Shape.cast(payload["dst"].shape).width
        if len(routes) > 2 ** dst_width:
            raise UserError(f"routes has {len(routes)} destinations but the payload's dst field "
                            f"has only {dst_width} bits")
        check_int("depth", depth, 2)
        check_int("counter_width", counter_width, 1)
        self.ports = ports
        self.routes = routes
        self.depth = depth
        self.counter_width = counter_width
        self.route_port = bool(route_port)
        self.planes = bool(planes)
        self.small_taps = bool(small_taps)
        if self.small_taps and "small" not in dict(iter(payload)):
            raise UserError("small_taps needs a payload with a 'small' field")
        self.multicast = bool(multicast)
        fields = dict(iter(payload))
        if self.multicast:
            _need_fields(payload, ("mcast", "mask"), "multicast")
        if mcast_uplinks is not None and not self.multicast:
            raise UserError("mcast_uplinks needs multicast=True")
        self.mcast_uplinks = _check_uplinks(ports, mcast_uplinks)
        self.reduce_port = reduce_port
        self.subtree = None
        if reduce_port is not None:
            check_int("reduce_port", reduce_port, 0, ports - 1)
            _need_fields(payload, ("red", "mask", "count"), "reduce_port")
            if subtree is None:
                raise UserError("reduce_port needs subtree (the contributors behind each "
                                "destination)")
            subtree = tuple(subtree)
            if len(subtree) != len(routes):
                raise UserError(f"subtree has {len(subtree)} entries, routes {len(routes)}: "
                                f"one mask per destination")
            for d, mask in enumerate(subtree):
                check_int(f"subtree[{d}]", mask, 0, (1 << len(routes)) - 1)
            self.subtree = subtree
        if "mask" in fields and (self.multicast or reduce_port is not None):
            width = Shape.cast(fields["mask"].shape).width
            if width < len(routes):
                raise UserError(f"the payload's mask field has {width} bits for "
                                f"{len(routes)} destinations")
        super().__init__(self.signature_of(ports=ports, destinations=len(routes), payload=payload,
                                           counter_width=counter_width, route_port=route_port,
                                           planes=planes, small_taps=small_taps,
                                           subtree_port=route_port and reduce_port is not None))

    @classmethod
    def signature_for(cls, *, ports, routes=None, payload=None, counter_width=32, data_bits=32,
                      route_port=False, planes=False, small_taps=False, reduce_port=None,
                      **others):
        """The signature of a switch of these parameters (the constructor's), without building
        one (:meth:`signature_of`); the constructor checks them."""
        check_other_params(cls, others)
        routes = range(ports) if routes is None else routes
        if payload is None:
            payload = flit_layout(ranks=len(routes), data_bits=data_bits)
        return cls.signature_of(ports=ports, destinations=len(routes), payload=payload,
                                counter_width=counter_width, route_port=route_port,
                                planes=planes, small_taps=small_taps,
                                subtree_port=route_port and reduce_port is not None)

    @staticmethod
    def signature_of(*, ports, destinations, payload, counter_width, route_port, planes=False,
                     small_taps=False, subtree_port=False):
        """The signature of a switch with these (valid) parameters, without building one."""
        flit = stream.Signature(payload)
        return wiring.Signature({
            **({"routes_in": In(range(ports)).array(destinations)} if route_port else {}),
            **({"subtree_in": In(destinations).array(destinations)} if subtree_port else {}),
            "i_stream": In(flit).array(ports),
            "o_stream": Out(flit).array(ports),
            "o_blocks": Out(counter_width).array(ports),
            "o_stalls": Out(counter_width).array(ports),
            "i_stalls": Out(counter_width).array(ports),
            # the decisions a SwitchDataPlane follows (PlanarSwitch)
            **({"x_push": Out(ports), "x_pop": Out(ports), "x_load": Out(ports),
                "x_grant": Out(ports).array(ports)} if planes else {}),
            **({"o_small": Out(1).array(ports)} if small_taps else {}),
        })

    def elaborate(self, platform):
        m = Module()
        n = self.ports
        width = len(Cat(self.i_stream[0].payload))
        mask = (1 << n) - 1

        heads = []
        wants = []   # wants[i]: one-hot output requested by input i's head (0 if empty)
        pops = []
        if self.multicast:
            # each output's destination mask, and what a multicast copy through it keeps, built
            # once, by a child (the planar control part of a 64-die tier-1 switch made them per
            # input and per output, 1.3 M comparisons in all)
            tables = m.submodules.mcast = MulticastMasks(
                ports=n, routes=self.routes, route_port=self.route_port,
                mcast_uplinks=self.mcast_uplinks)
            if self.route_port:
                m.d.comb += [tables.routes_in[d].eq(self.routes_in[d])
                             for d in range(len(self.routes))]
        for i in range(n):
            # Input FIFO, inline (no submodule: cheaper in Amaranth's simulator).
            port = self.i_stream[i]
            produce = Signal(range(self.depth), name=f"in{i}_produce")
            consume = Signal(range(self.depth), name=f"in{i}_consume")
            level = Signal(range(self.depth + 1), name=f"in{i}_level")
            pop = Signal(name=f"in{i}_pop")
            push = Signal(name=f"in{i}_push")
            m.d.comb += [
                port.ready.eq(level != self.depth),
                push.eq(port.valid & port.ready),
            ]
            head_bits, = ring_storage(m, width, self.depth, produce, push, port.payload, [consume],
                                      name=f"in{i}_ring")
            with m.If(push):
                m.d.sync += produce.eq(incr_wrap(produce, self.depth))
            with m.If(pop):
                m.d.sync += consume.eq(incr_wrap(consume, self.depth))
            with m.If(push != pop):
                m.d.sync += level.eq(Mux(push, level + 1, level - 1))
            with m.If(port.valid & ~port.ready):
                m.d.sync += self.i_stalls[i].eq(self.i_stalls[i] + 1)
            head = self.payload(head_bits)
            want = Signal(n, name=f"want{i}")
            # Mux chain rather than a Switch (continuous logic in Verilog; see ring_storage).
            route = Const(1, n)
            for d, p in reversed(list(enumerate(self.routes))):
                onehot = (Const(1, n) << self.routes_in[d])[:n] if self.route_port else 1 << p
                route = Mux(head.dst == d, onehot, route)
            if self.multicast:
                route = Mux(head.mcast, self._mcast_route(m, head, tables.o_mask, i), route)
            if self.reduce_port is not None:
                expected = self._expected(m, head, i)
                route = Mux(head.red & (expected > head.count),
                            Const(1 << self.reduce_port, n), route)
            m.d.comb += want.eq(Mux(level != 0, route, 0))
            heads.append(head_bits)
            wants.append(want)
            pops.append(pop)

        if self.multicast:
            # the outputs each input's head still owes a copy to
            served = [Signal(n, name=f"served{i}") for i in range(n)]
            pending = [Signal(n, name=f"pending{i}") for i in range(n)]
            m.d.comb += [p.eq(w & ~sv) for p, w, sv in zip(pending, wants, served)]
            wants = pending
        granted = []  # one-hot input vectors popped by each output this cycle
        for o in range(n):
            out = self.o_stream[o]
            req = Signal(n, name=f"req{o}")
            m.d.comb += req.eq(Cat(wants[i][o] for i in range(n)))
            arb = m.submodules[f"arb{o}"] = RoundRobin(count=n)
            grant = Signal(n, name=f"grant{o}")     # one-hot
            m.d.comb += grant.eq((Const(1, n) << arb.grant)[:n])

            data_reg = Signal(width, name=f"odata{o}")
            valid = Signal(name=f"ovalid{o}")
            load = Signal(name=f"load{o}")
            m.d.comb += [
                arb.requests.eq(req),
                arb.ready.eq(~valid | out.ready),
                load.eq(arb.valid & arb.ready),
                out.valid.eq(valid),
                out.payload.eq(data_reg),
            ]
            sel = one_hot_select(m, grant, heads, name=f"sel{o}")
            if self.multicast:
                # the grant is one-hot or none, and the copy of none is none: cut once
                sel = self._copy(sel, tables.o_keep[o])
            with m.If(load):
                m.d.sync += [data_reg.eq(sel), valid.eq(1)]
            with m.Elif(out.ready):
                m.d.sync += valid.eq(0)
            with m.If(valid & out.ready):
                m.d.sync += self.o_blocks[o].eq(self.o_blocks[o] + 1)
            with m.If(valid & ~out.ready):
                m.d.sync += self.o_stalls[o].eq(self.o_stalls[o] + 1)
            g = Signal(n, name=f"popped{o}")
            m.d.comb += g.eq(Mux(load, grant, 0))
            granted.append(g)
            if self.planes:
                m.d.comb += [self.x_load[o].eq(load), self.x_grant[o].eq(grant)]
            if self.small_taps:
                m.d.comb += self.o_small[o].eq(out.payload.small)

        popped = Signal(n)
        acc = Const(0, n)
        for g in granted:
            acc = acc | g
        if self.multicast:
            # an input's head leaves when this cycle's copies are the last it owes
            taken = [Cat(g[i] for g in granted) for i in range(n)]
            m.d.comb += popped.eq(Cat((t != 0) & ((w & ~t) == 0) for t, w in zip(taken, wants)))
            for i in range(n):
                with m.If(popped[i]):
                    m.d.sync += served[i].eq(0)
                with m.Else():
                    m.d.sync += served[i].eq(served[i] | taken[i])
        else:
            m.d.comb += popped.eq(acc & mask)
        for i in range(n):
            m.d.comb += pops[i].eq(popped[i])
        if self.planes:
            m.d.comb += [self.x_pop.eq(popped),
                         self.x_push.eq(Cat(p.valid & p.ready for p in self.i_stream))]
        return m

    def _mcast_route(self, m, head, masks, i):
        """The outputs input ``i``'s multicast ``head`` goes to (one bit per output), from the
        outputs' destination ``masks``."""
        n = self.ports
        hits = [(head.mask & masks[p]) != 0 for p in range(n)]
        if self.mcast_uplinks is not None:
            # every copy for the other boards takes one tier-2 plane: the source's
            # (the tier-2 switch copies it to each board, that board's tier-1 to its dies)
            first, count = self.mcast_uplinks
            up = hits[first:first + count]
            any_up = up[0]
            for h in up[1:]:
                any_up = any_up | h
            chain = Const(0, range(count))
            for r in reversed(range(len(self.routes))):
                chain = Mux(head.src == r, r % count, chain)
            # a signal: each use of an expression builds its logic again
            plane = Signal(range(count), name=f"plane{i}")
            m.d.comb += plane.eq(chain)
            for k in range(count):
                hits[first + k] = any_up & (plane == k)
        return Cat(*hits)

    def _copy(self, head_bits, keep):
        """``head_bits`` as an output forwards it: a multicast flit's ``mask`` cut to ``keep``,
        the destinations behind that output (:attr:`MulticastMasks.o_keep`)."""
        field = self.payload["mask"]
        lo, w = field.offset, Shape.cast(field.shape).width
        head = self.payload(head_bits)
        cut = Mux(head.mcast, head_bits[lo:lo + w] & keep, head_bits[lo:lo + w])
        return Cat(head_bits[:lo], cut, head_bits[lo + w:])

    def _expected(self, m, head, i):
        """Contributions this switch expects for input ``i``'s ``head``'s group:
        ``popcount(mask & subtree[dst])``."""
        nd = len(self.routes)
        sub = Const(0, nd)
        for d in reversed(range(nd)):
            entry = self.subtree_in[d] if self.route_port else Const(self.subtree[d], nd)
            sub = Mux(head.dst == d, entry, sub)
        # a signal, not an expression: each of the nd bits taken from an expression would
        # build the whole table lookup again (4,096 comparisons an input at 64 dies)
        both = Signal(nd, name=f"contributors{i}")
        m.d.comb += both.eq(head.mask[:nd] & sub)
        return popcount(both[k] for k in range(nd))


def one_hot_select(m, grant, values, name):
    """A signal of the one of ``values`` whose bit of ``grant`` is set (0 when none is).

    ``grant`` is one-hot or zero (an output's round-robin choice). The select is a ``case`` on
    it, not an OR of the values each masked by its bit: that OR reads every value every time
    it is evaluated (``len(values)`` x its width: the 16-port 512-bit data planes' outputs
    were 26 % of a 16-die x 8-AIV dispatch's native run), the case reads one. The same value
    for every one-hot or zero ``grant``.
    """
    sel = Signal(len(values[0]), name=name)
    with m.Switch(grant):
        for i, value in enumerate(values):
            with m.Case(1 << i):
                m.d.comb += sel.eq(value)
    return sel


def popcount(bits):
    """The number of set bits among ``bits`` (one-bit values), as a balanced adder tree."""
    values = [Value.cast(b) for b in bits]
    if not values:
        return Const(0, 1)
    while len(values) > 1:
        values = [values[i] + values[i + 1] if i + 1 < len(values) else values[i]
                  for i in range(0, len(values), 2)]
    return values[0]


def _check_routes(ports, routes):
    """``routes`` as a tuple, each entry a port of ``ports``."""
    routes = tuple(routes)
    if not routes:
        raise UserError(f"routes must name a port for at least one destination, not {routes!r}")
    for d, p in enumerate(routes):
        check_int(f"routes[{d}]", p, 0, ports - 1)
    return routes


def _check_uplinks(ports, mcast_uplinks):
    """``mcast_uplinks`` as ``(first, count)`` ports of ``ports``, or ``None``."""
    if mcast_uplinks is None:
        return None
    first, count = mcast_uplinks
    check_int("mcast_uplinks first port", first, 0, ports - 1)
    check_int("mcast_uplinks count", count, 1, ports - first)
    return (first, count)


def _need_fields(payload, names, option):
    fields = dict(iter(payload))
    missing = [f for f in names if f not in fields]
    if missing:
        raise UserError(f"{option} needs payload fields {', '.join(names)}; "
                        f"missing: {', '.join(missing)}")


class MulticastMasks(wiring.Component):
    """The multicast tables of a :class:`Switch`: the destinations behind each output, and what
    a copy through it keeps.

    A multicast flit goes to every output some destination of its ``mask`` routes to
    (``o_mask``), each copy with ``mask`` cut to ``o_keep`` of its output. On a tier-1
    switch's uplinks (``mcast_uplinks``) one copy carries the dies of every other board,
    so each uplink keeps the destinations of all of them. Combinational: the tables are
    constants, or follow ``routes_in`` in the same cycle.

    Parameters
    ----------
    ports : int
        The switch's ports (>= 2).
    routes : sequence of int
        ``routes[d]``: the output of destination ``d`` (:class:`Switch`'s ``routes``); with
        ``route_port`` only its length is used.
    route_port : bool
        Take the route table from the input ``routes_in`` instead of ``routes``.
    mcast_uplinks : (int, int) or None
        ``(first, count)``: the uplink ports (:class:`Switch`'s ``mcast_uplinks``).

    Attributes
    ----------
    routes_in : In(range(ports)).array(len(routes)), with ``route_port``
        The route table.
    o_mask : Out(len(routes)).array(ports)
        ``o_mask[p]``: the destinations routed to output ``p`` (bit ``d``: destination ``d``).
    o_keep : Out(len(routes)).array(ports)
        ``o_keep[o]``: the destinations a multicast copy through output ``o`` keeps in its
        ``mask``: ``o_mask[o]``, or on an uplink the union of every uplink's ``o_mask``.

    Raises
    ------
    ValueError, TypeError
        On an invalid parameter (named in the message).
    """

    def __init__(self, *, ports, routes, route_port=False, mcast_uplinks=None):
        self.ports = check_int("ports", ports, 2)
        self.routes = _check_routes(ports, routes)
        self.route_port = bool(route_port)
        self.mcast_uplinks = _check_uplinks(ports, mcast_uplinks)
        nd = len(self.routes)
        super().__init__({
            **({"routes_in": In(range(ports)).array(nd)} if self.route_port else {}),
            "o_mask": Out(nd).array(ports),
            "o_keep": Out(nd).array(ports),
        })

    def elaborate(self, platform):
        m = Module()
        nd = len(self.routes)
        for p in range(self.ports):
            if self.route_port:
                mask = Cat(self.routes_in[d] == p for d in range(nd))
            else:
                mask = Const(sum(1 << d for d, q in enumerate(self.routes) if q == p), nd)
            m.d.comb += self.o_mask[p].eq(mask)
        up = range(0) if self.mcast_uplinks is None else \
            range(self.mcast_uplinks[0], sum(self.mcast_uplinks))
        for o in range(self.ports):
            # the one plane a copy takes up carries every other board's dies
            keep = functools.reduce(operator.or_, (self.o_mask[k] for k in up)) if o in up \
                else self.o_mask[o]
            m.d.comb += self.o_keep[o].eq(keep)
        return m


class SwitchDataPlane(wiring.Component):
    """The data path of ``width`` payload bits of a :class:`Switch`, driven by its decisions.

    Per input, a ring of ``depth`` entries written on ``push`` and read at a consume pointer
    advanced on ``pop``; per output, a register that loads the ``grant``-selected input's
    head on ``load`` -- exactly the storage and moves of :class:`Switch` for these bits, whose
    decisions (``x_push``, ``x_pop``, ``x_load``, ``x_grant`` of a ``Switch(planes=True)``)
    never depend on them. :class:`PlanarSwitch` puts the two together.
    """

    def __init__(self, *, ports, depth, width):
        check_int("ports", ports, 2)
        check_int("depth", depth, 2)
        check_int("width", width, 1)
        self.ports, self.depth, self.width = ports, depth, width
        super().__init__({
            "push": In(ports), "pop": In(ports), "load": In(ports),
            "grant": In(ports).array(ports),
            "data_in": In(width).array(ports),
            "data_out": Out(width).array(ports),
        })

    def elaborate(self, platform):
        m = Module()
        n = self.ports
        heads = []
        for i in range(n):
            produce = Signal(range(self.depth), name=f"in{i}_produce")
            consume = Signal(range(self.depth), name=f"in{i}_consume")
            head, = ring_storage(m, self.width, self.depth, produce, self.push[i],
                                 self.data_in[i], [consume], name=f"in{i}_ring")
            with m.If(self.push[i]):
                m.d.sync += produce.eq(incr_wrap(produce, self.depth))
            with m.If(self.pop[i]):
                m.d.sync += consume.eq(incr_wrap(consume, self.depth))
            heads.append(head)
        for o in range(n):
            data_reg = Signal(self.width, name=f"odata{o}")
            sel = one_hot_select(m, self.grant[o], heads, name=f"sel{o}")
            with m.If(self.load[o]):
                m.d.sync += data_reg.eq(sel)
            m.d.comb += self.data_out[o].eq(data_reg)
        return m


class PlanarSwitch:
    """A :class:`Switch` too wide for one Amaranth module, as Verilog: a control switch and
    data planes.

    Amaranth keeps a module's inputs, and an instance's outputs, in one netlist cell of
    fewer than 2**16 bits, so a 16-port switch of 512 B flits (16 x 4,096 data bits) can be
    neither converted nor instantiated. Its data never steers it: the control switch
    (:class:`Switch` ``planes=True``) carries every payload field but ``data`` and decides;
    each :class:`SwitchDataPlane` carries ``plane_bits`` of ``data`` and follows the
    decisions. :meth:`verilog` wraps them in a module with the ports of
    ``Switch(route_port=True)`` (``signature``), cycle for cycle the same switch. The
    native backend builds wide switches this way (:mod:`epfabric.hw.topology`).
    """

    #: the most data bits per plane; a switch of more ports would get narrower planes
    #: (:meth:`plane_bits_for`). Narrow planes build far faster for the same bits: S1's
    #: 16-port tier-1 switch (4,096 data bits) converted in 16.5 s and Verilated and compiled
    #: in 92.2 s as 2 planes of 2,048 bits, in 5.2 s and 15.5 s as 8 planes of 512 (256:
    #: 3.4 s and 14.7 s; empty caches, 2 cores) -- gcc is superlinear in the width of the
    #: generated code's operations, and one narrow plane module serves every plane.
    PLANE_BITS = 512
    #: bits of a netlist cell in Amaranth (a module's inputs, an instance's outputs)
    CELL_BITS = 1 << 16

    @classmethod
    def plane_bits_for(cls, ports):
        """The widest power-of-two plane (at most :data:`PLANE_BITS`) whose module's inputs
        (``ports`` data words, ``ports``² grant bits, push/pop/load) fit one netlist cell."""
        room = (cls.CELL_BITS - 1 - ports * ports - 3 * ports) // ports
        if room < 1:
            raise UserError(f"a PlanarSwitch of {ports} ports has no room for a data plane")
        return min(cls.PLANE_BITS, 1 << (room.bit_length() - 1))

    def __init__(self, *, ports, routes, payload, depth, counter_width, plane_bits=None,
                 small_taps=False):
        from amaranth.lib import data
        self.ports, self.routes, self.depth, self.counter_width = ports, tuple(routes), depth, counter_width
        self.small_taps = bool(small_taps)
        self.payload = check_payload(payload)
        fields = dict(iter(payload))
        if "data" not in fields:
            raise UserError("a PlanarSwitch's payload needs a 'data' field")
        self.data_offset = fields["data"].offset
        self.data_bits = Shape.cast(fields["data"].shape).width
        self.plane_bits = check_int("plane_bits", self.plane_bits_for(ports) if plane_bits is None
                                    else plane_bits, 1)
        self.control_payload = data.StructLayout({k: f.shape for k, f in fields.items()
                                                  if k != "data"})
        self.signature = Switch.signature_of(ports=ports, destinations=len(self.routes),
                                             payload=payload, counter_width=counter_width,
                                             route_port=True, small_taps=small_taps)
        self.inner_ports = ports        # ports of the decisions (a PlanarIncSwitch: one more)

    def _planes(self, name):
        """``[(offset, width, module name)]`` of the data planes (one module per width)."""
        return [(plo, min(self.plane_bits, self.data_bits - plo),
                 f"{name}_dp{min(self.plane_bits, self.data_bits - plo)}")
                for plo in range(0, self.data_bits, self.plane_bits)]

    def _extra_wires(self):
        """``[(wire, width, control port)]``: decisions besides the switch's, wired from the
        control part to every plane's port ``wire``."""
        return []

    def parts(self, name):
        """``{module name: component}`` of the control switch and the data planes."""
        out = {f"{name}_ctl": Switch(ports=self.ports, routes=self.routes,
                                     payload=self.control_payload, depth=self.depth,
                                     counter_width=self.counter_width, route_port=True,
                                     planes=True, small_taps=self.small_taps)}
        for _plo, w, module in self._planes(name):
            if module not in out:       # planes of one width share a module: build it once
                out[module] = SwitchDataPlane(ports=self.ports, depth=self.depth, width=w)
        return out

    def verilog(self, name, convert):
        """Verilog of module ``name`` and its parts; ``convert(name, component)`` converts one."""
        texts = [convert(n, part) for n, part in self.parts(name).items()]
        n, lo, w, total = self.ports, self.data_offset, self.data_bits, self.payload.size
        members = [("__".join(map(str, path)), member) for path, member, _v
                   in self.signature.flatten(self.signature.create())]
        decl, ctl, body = [], [], []
        for port, member in members:
            width = Shape.cast(member.shape).width
            decl.append(f"  {'input' if member.flow == In else 'output'} "
                        f"{f'[{width - 1}:0] ' if width > 1 else ''}{port};")
        ctl_total = total - w
        for i in range(n):
            src = f"i_stream__{i}__payload"
            parts = ([f"{src}[{total - 1}:{lo + w}]"] if lo + w < total else []) + \
                    ([f"{src}[{lo - 1}:0]"] if lo else [])
            body.append(f"  wire [{ctl_total - 1}:0] ctl_out{i};")
            ctl.append(f"    .i_stream__{i}__payload({{{', '.join(parts)}}}),")
            ctl.append(f"    .o_stream__{i}__payload(ctl_out{i}),")
        for port, _member in members:
            if not port.endswith("__payload") or not port.startswith(("i_stream", "o_stream")):
                ctl.append(f"    .{port}({port}),")
        ni = self.inner_ports
        extra = self._extra_wires()
        body += [f"  wire [{ni - 1}:0] push, pop, load;"] + \
                [f"  wire [{ni - 1}:0] grant{o};" for o in range(ni)] + \
                [f"  wire {f'[{bits - 1}:0] ' if bits > 1 else ''}{wire};"
                 for wire, bits, _port in extra]
        ctl += ["    .x_push(push),", "    .x_pop(pop),", "    .x_load(load),"] + \
               [f"    .x_grant__{o}(grant{o})," for o in range(ni)] + \
               [f"    .{port}({wire})," for wire, _bits, port in extra]
        ctl.append("    .clk(clk)")
        body.append(f"  {name}_ctl ctl (\n" + "\n".join(ctl) + "\n  );")
        planes = []
        for k, (plo, pw, module) in enumerate(self._planes(name)):
            conns = ["    .clk(clk),", "    .push(push),", "    .pop(pop),", "    .load(load),"]
            conns += [f"    .grant__{o}(grant{o})," for o in range(ni)]
            conns += [f"    .{wire}({wire})," for wire, _bits, _port in extra]
            for i in range(n):
                body.append(f"  wire [{pw - 1}:0] dp{k}_out{i};")
                conns.append(f"    .data_in__{i}(i_stream__{i}__payload[{lo + plo + pw - 1}:"
                             f"{lo + plo}]),")
            conns += [f"    .data_out__{o}(dp{k}_out{o})," for o in range(n)]
            conns[-1] = conns[-1].rstrip(",")
            body.append(f"  {module} dp{k} (\n" + "\n".join(conns) + "\n  );")
            planes.append(k)
        for o in range(n):
            pieces = ([f"ctl_out{o}[{ctl_total - 1}:{lo}]"] if lo < ctl_total else []) + \
                     [f"dp{k}_out{o}" for k in reversed(planes)] + \
                     ([f"ctl_out{o}[{lo - 1}:0]"] if lo else [])
            body.append(f"  assign o_stream__{o}__payload = {{{', '.join(pieces)}}};")
        ports = ["clk"] + [port for port, _member in members]
        wrapper = "\n".join([f"module {name}({', '.join(ports)});", "  input clk;", *decl, *body,
                             "endmodule", ""])
        return "\n".join([wrapper, *texts])

    def _constants(self):
        """``{input port: value}`` that bind the wrapper's tables (``routes_in__d``)."""
        return {f"routes_in__{d}": p for d, p in enumerate(self.routes)}

    def verilog_with_constants(self, top, name, convert):
        """:meth:`verilog` of ``name``, and a module ``top`` with the ports of the same switch
        built with its tables as constants (``route_port=False``): it instantiates ``name``
        and ties its table inputs to the tables. For simulating the planar form against the
        switch itself (tests/hw/test_inc_switch.py)."""
        inner = self.verilog(name, convert)
        consts = self._constants()
        members = [("__".join(map(str, path)), member) for path, member, _v
                   in self.signature.flatten(self.signature.create())]
        widths = {port: Shape.cast(member.shape).width for port, member in members}
        outer = [(port, member) for port, member in members if port not in consts]
        decl = [f"  {'input' if member.flow == In else 'output'} "
                f"{f'[{widths[port] - 1}:0] ' if widths[port] > 1 else ''}{port};"
                for port, member in outer]
        conns = ["    .clk(clk)"] + [f"    .{port}({port})" for port, _m in outer] + \
                [f"    .{port}({widths[port]}'d{value})" for port, value in consts.items()]
        text = "\n".join([f"module {top}({', '.join(['clk'] + [p for p, _m in outer])});",
                          "  input clk;", *decl, f"  {name} sw (", ",\n".join(conns), "  );",
                          "endmodule", ""])
        return "\n".join([text, inner])


VERILOG_EXPORTS = {
    "switch": (Switch, {"ports": 4, "depth": 4, "counter_width": 16, "data_bits": 16}),
}
