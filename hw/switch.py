"""N-port switch crossbar: per-input FIFOs, round-robin per output, routing by destination rank.

UBEP §2.3 Insight 3 / Table 2: the tier-1 (board) and tier-2 (superpod)
switches of a CloudMatrix384-like fabric; also the single switch of the
INC-MoE testbed's ``star`` topology (INC-MoE §3).
"""

from amaranth.hdl import Cat, Const, Module, Mux, Shape, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from .arbiter import RoundRobin
from .link import check_payload, flit_layout
from .ring import incr_wrap, ring_storage
from .validate import UserError, check_int

__all__ = ["Switch", "SWITCH_LATENCY", "VERILOG_EXPORTS"]

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

    Raises
    ------
    ValueError, TypeError
        On an invalid parameter (named in the message).
    """

    def __init__(self, *, ports, routes=None, payload=None, depth=4, counter_width=32,
                 data_bits=32, route_port=False):
        check_int("ports", ports, 2)
        if routes is None:
            routes = range(ports)
        routes = tuple(routes)
        if not routes:
            raise UserError(f"routes must name a port for at least one destination, not {routes!r}")
        for d, p in enumerate(routes):
            check_int(f"routes[{d}]", p, 0, ports - 1)
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
        super().__init__(self.signature_of(ports=ports, destinations=len(routes), payload=payload,
                                           counter_width=counter_width, route_port=route_port))

    @staticmethod
    def signature_of(*, ports, destinations, payload, counter_width, route_port):
        """The signature of a switch with these (valid) parameters, without building one."""
        flit = stream.Signature(payload)
        return wiring.Signature({
            **({"routes_in": In(range(ports)).array(destinations)} if route_port else {}),
            "i_stream": In(flit).array(ports),
            "o_stream": Out(flit).array(ports),
            "o_blocks": Out(counter_width).array(ports),
            "o_stalls": Out(counter_width).array(ports),
            "i_stalls": Out(counter_width).array(ports),
        })

    def elaborate(self, platform):
        m = Module()
        n = self.ports
        width = len(Cat(self.i_stream[0].payload))
        mask = (1 << n) - 1

        heads = []
        wants = []   # wants[i]: one-hot output requested by input i's head (0 if empty)
        pops = []
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
            m.d.comb += want.eq(Mux(level != 0, route, 0))
            heads.append(head_bits)
            wants.append(want)
            pops.append(pop)

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
            sel = Const(0, width)
            for i in range(n):
                sel = sel | Mux(grant[i], heads[i], 0)
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

        popped = Signal(n)
        acc = Const(0, n)
        for g in granted:
            acc = acc | g
        m.d.comb += popped.eq(acc & mask)
        for i in range(n):
            m.d.comb += pops[i].eq(popped[i])
        return m


VERILOG_EXPORTS = {
    "switch": (Switch, {"ports": 4, "depth": 4, "counter_width": 16, "data_bits": 16}),
}
