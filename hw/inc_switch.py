"""A superpod switch with in-network multicast and reduction.

INC-MoE §3.1 puts the replication of AllGather and the reduction of ReduceScatter
in the switch of a star; on the two-tier superpod (UBEP §2.3 Insight 3) every
switch -- a die's, a tier-1's, a tier-2's -- gets both, so that

* a block multicast to a set of dies (``mcast``, ``mask``) is copied where the
  paths to its destinations part (:class:`~epfabric.hw.switch.Switch` ``multicast``):
  one copy crosses each link towards the destinations behind it;
* contributions to one result block (``red``, ``mask`` of the contributors,
  ``count``) are summed where their paths meet (:class:`~epfabric.hw.inc_reduce.ReduceUnit`
  on an extra port) and leave as one block.

:class:`IncSwitch` is a ``Switch`` of ``ports + 1`` ports whose last port is wired
to a ``ReduceUnit``; outside it has the ports of a ``Switch`` of ``ports`` ports
(the same signature, plus the unit's counters), so a fabric builder swaps one
for the other (:func:`~epfabric.hw.topology.superpod` ``inc=True``).

Why it cannot deadlock (docs/concepts/inc-deadlock.md): the switch's routes are up/down on
a tree, so its channel dependencies are acyclic, and a multicast copy follows the unicast
route of each of its destinations (or, from a tier-1 switch, one plane up before down), so
multicast adds no cycle. The unit is a buffer on the way to ``routes[dst]`` that waits for
nothing but its own output (hw/inc_reduce.py), and a fabric gives it only groups whose
releases go down (a tier-1 switch sums no group leaving its board): so it is one more
buffer on the way down, and the dependencies stay acyclic (:mod:`~epfabric.hw.inc_waits`
checks the whole graph).
"""

from amaranth.hdl import Module
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from .inc_reduce import ReduceDataPlane, ReduceUnit
from .lane_arith import add_latency, lane_bits
from .signature import check_other_params
from .switch import PlanarSwitch, Switch, SwitchDataPlane
from .validate import UserError, check_int

__all__ = ["IncSwitch", "IncDataPlane", "PlanarIncSwitch", "PlanarStarIncSwitch",
           "StarIncSwitch", "inc_fields", "inc_payload", "VERILOG_EXPORTS"]


def inc_fields(ranks):
    """The payload fields a fabric of ``ranks`` dies needs for :class:`IncSwitch`:
    ``mcast``, ``red``, ``mask`` (a bit per die) and ``count`` (0..ranks)."""
    check_int("ranks", ranks, 1)
    return {"mcast": 1, "red": 1, "mask": ranks, "count": max(1, ranks.bit_length())}


class IncSwitch(wiring.Component):
    """A :class:`~epfabric.hw.switch.Switch` with multicast and a reduction engine.

    Parameters
    ----------
    ports, routes, payload, depth, counter_width, small_taps, route_port
        As for :class:`~epfabric.hw.switch.Switch` (``payload`` needs the fields of
        :func:`inc_fields` and the reduction key, ``addr.block``).
    subtree : sequence of int
        ``subtree[d]``: the dies whose path to die ``d`` passes through this switch
        (:func:`~epfabric.hw.topology.subtrees`); with ``route_port`` from ``subtree_in``.
    window, key_field, header_bits, dtype
        Of the :class:`~epfabric.hw.inc_reduce.ReduceUnit` (``dtype``: the lane type of the
        sums, default ``"int16"``).
    mcast_uplinks : (int, int) or None
        A tier-1 switch's uplink ports (:class:`~epfabric.hw.switch.Switch`).
    planes : bool
        The control part of a :class:`PlanarIncSwitch`: ``payload`` has no ``data``, and the
        decisions of the inner switch (``ports + 1`` ports) and of the unit are outputs.

    Attributes
    ----------
    As a ``Switch`` of ``ports`` ports, plus ``o_absorbed``, ``o_released``,
    ``o_errors``, ``o_open`` of its reduction unit. With ``planes`` also ``x_push``,
    ``x_pop``, ``x_load``, ``x_grant`` (of ``ports + 1`` ports) and ``x_rindex``,
    ``x_rtake``, ``x_rfresh``, ``x_rrelease`` (the unit's ``x_*``).
    """

    def __init__(self, *, ports, routes, payload, subtree, depth=4, counter_width=32,
                 small_taps=False, route_port=False, window=16, key_field=("addr", "block"),
                 header_bits=128, dtype="int16", mcast_uplinks=None, planes=False):
        check_int("ports", ports, 2)
        self.ports, self.routes = ports, tuple(routes)
        self.payload, self.route_port = payload, bool(route_port)
        self.planes = bool(planes)
        self.switch = Switch(ports=ports + 1, routes=self.routes, payload=payload, depth=depth,
                             counter_width=counter_width, small_taps=small_taps,
                             route_port=route_port, multicast=True, reduce_port=ports,
                             subtree=subtree, mcast_uplinks=mcast_uplinks, planes=self.planes)
        self.unit = ReduceUnit(payload=payload, subtree=subtree, window=window,
                               key_field=key_field, header_bits=header_bits,
                               dtype=dtype, counter_width=counter_width,
                               subtree_port=route_port, planes=self.planes)
        super().__init__(self.signature_for(
            ports=ports, routes=routes, payload=payload, counter_width=counter_width,
            small_taps=small_taps, route_port=route_port, window=window, dtype=dtype,
            planes=planes))

    @staticmethod
    def signature_for(*, ports, routes, payload, counter_width=32, small_taps=False,
                      route_port=False, window=16, dtype="int16", planes=False, **others):
        """The signature of an in-network switch of these parameters (the constructor's),
        without building one (``dtype`` adds ``x_radvance`` to a control part whose unit has
        a pipelined sum); those that shape no port are the constructor's to check."""
        check_other_params(IncSwitch, others)
        check_int("ports", ports, 2)
        sig = Switch.signature_of(ports=ports, destinations=len(routes), payload=payload,
                                  counter_width=counter_width, route_port=route_port,
                                  small_taps=small_taps, subtree_port=route_port)
        members = dict(sig.members)
        for name in ("o_absorbed", "o_released", "o_errors", "o_open"):
            members[name] = Out(counter_width)
        if planes:
            members.update({"x_push": Out(ports + 1), "x_pop": Out(ports + 1),
                            "x_load": Out(ports + 1), "x_grant": Out(ports + 1).array(ports + 1),
                            "x_rindex": Out(ReduceUnit.index_bits_for(payload, window)),
                            "x_rtake": Out(1), "x_rfresh": Out(1), "x_rrelease": Out(1)})
            if add_latency(dtype):
                members["x_radvance"] = Out(1)
        return wiring.Signature(members)

    def elaborate(self, platform):
        m = Module()
        m.submodules.switch = sw = self.switch
        m.submodules.reduce = unit = self.unit
        n = self.ports
        for p in range(n):
            wiring.connect(m, wiring.flipped(self.i_stream[p]), sw.i_stream[p])
            wiring.connect(m, sw.o_stream[p], wiring.flipped(self.o_stream[p]))
            m.d.comb += [self.o_blocks[p].eq(sw.o_blocks[p]), self.o_stalls[p].eq(sw.o_stalls[p]),
                         self.i_stalls[p].eq(sw.i_stalls[p])]
            if hasattr(sw, "o_small"):
                m.d.comb += self.o_small[p].eq(sw.o_small[p])
        wiring.connect(m, sw.o_stream[n], unit.i_stream)
        wiring.connect(m, unit.o_stream, sw.i_stream[n])
        if self.route_port:
            for d in range(len(self.routes)):
                m.d.comb += [sw.routes_in[d].eq(self.routes_in[d]),
                             sw.subtree_in[d].eq(self.subtree_in[d]),
                             unit.subtree_in[d].eq(self.subtree_in[d])]
        for name in ("o_absorbed", "o_released", "o_errors", "o_open"):
            m.d.comb += getattr(self, name).eq(getattr(unit, name))
        if self.planes:
            m.d.comb += [self.x_push.eq(sw.x_push), self.x_pop.eq(sw.x_pop),
                         self.x_load.eq(sw.x_load)]
            m.d.comb += [self.x_grant[o].eq(sw.x_grant[o]) for o in range(n + 1)]
            for a, b in (("x_rindex", "x_index"), ("x_rtake", "x_take"), ("x_rfresh", "x_fresh"),
                         ("x_rrelease", "x_release")) + ((("x_radvance", "x_advance"),)
                                                         if unit.latency else ()):
                m.d.comb += getattr(self, a).eq(getattr(unit, b))
        return m


class IncDataPlane(wiring.Component):
    """``width`` bits of ``data`` of an :class:`IncSwitch`, driven by its decisions: the data
    plane of its inner switch (``ports + 1`` ports, :class:`~epfabric.hw.switch.SwitchDataPlane`)
    with the unit's partial sums (:class:`~epfabric.hw.inc_reduce.ReduceDataPlane`) on the
    last port, as the unit sits on the switch's. Outside, the ``ports`` ports of the switch.
    """

    def __init__(self, *, ports, depth, width, index_bits, header_bits=0, dtype="int16"):
        check_int("ports", ports, 2)
        self.ports, self.depth, self.width = ports, depth, width
        self.index_bits, self.header_bits, self.dtype = index_bits, header_bits, dtype
        n = ports + 1
        self.latency = add_latency(dtype)
        super().__init__({
            "push": In(n), "pop": In(n), "load": In(n), "grant": In(n).array(n),
            "rindex": In(max(1, index_bits)), "rtake": In(1), "rfresh": In(1),
            "rrelease": In(1), **({"radvance": In(1)} if self.latency else {}),
            "data_in": In(width).array(ports),
            "data_out": Out(width).array(ports),
        })

    def elaborate(self, platform):
        m = Module()
        n = self.ports
        m.submodules.switch = sp = SwitchDataPlane(ports=n + 1, depth=self.depth,
                                                   width=self.width)
        m.submodules.reduce = rp = ReduceDataPlane(index_bits=self.index_bits,
                                                   width=self.width,
                                                   header_bits=self.header_bits,
                                                   dtype=self.dtype)
        m.d.comb += [sp.push.eq(self.push), sp.pop.eq(self.pop), sp.load.eq(self.load),
                     rp.index.eq(self.rindex), rp.take.eq(self.rtake),
                     rp.fresh.eq(self.rfresh), rp.release.eq(self.rrelease),
                     rp.data_in.eq(sp.data_out[n]), sp.data_in[n].eq(rp.data_out)]
        if self.latency:
            m.d.comb += rp.advance.eq(self.radvance)
        m.d.comb += [sp.grant[o].eq(self.grant[o]) for o in range(n + 1)]
        for p in range(n):
            m.d.comb += [sp.data_in[p].eq(self.data_in[p]), self.data_out[p].eq(sp.data_out[p])]
        return m


class PlanarIncSwitch(PlanarSwitch):
    """An :class:`IncSwitch` too wide for one Amaranth module, as Verilog: a control
    ``IncSwitch(planes=True)`` (every payload field but ``data``; it decides) and
    data planes (:class:`IncDataPlane`) of ``plane_bits`` of ``data`` each (they follow),
    wrapped in a module with the ports of ``IncSwitch(route_port=True)`` -- cycle for cycle the same
    switch, as :class:`~epfabric.hw.switch.PlanarSwitch` is for a ``Switch``. The native
    backend builds wide in-network switches this way (:mod:`epfabric.hw.topology`).

    A plane sums its own lanes, so the lanes of ``data`` (of ``dtype``, from ``header_bits``
    on) must not straddle two planes: every plane starting past the header starts on a lane.
    """

    def __init__(self, *, ports, routes, payload, depth, counter_width, subtree, plane_bits=None,
                 small_taps=False, mcast_uplinks=None, window=16, key_field=("addr", "block"),
                 header_bits=128, dtype="int16"):
        self.inc = dict(subtree=tuple(subtree), mcast_uplinks=mcast_uplinks, window=window,
                        key_field=tuple(key_field), header_bits=header_bits, dtype=dtype)
        # the planes' inputs: a data word per outer port, the inner switch's (ports + 1)²
        # grants and decisions, the unit's few: what plane_bits_for(ports + 1) leaves room for
        super().__init__(ports=ports, routes=routes, payload=payload, depth=depth,
                         counter_width=counter_width, small_taps=small_taps,
                         plane_bits=self.plane_bits_for(ports + 1) if plane_bits is None
                         else plane_bits)
        self.inner_ports = ports + 1
        self.signature = IncSwitch.signature_for(
            ports=ports, routes=routes, payload=payload, depth=depth, counter_width=counter_width,
            small_taps=small_taps, route_port=True, **self.inc)
        self.index_bits = ReduceUnit.index_bits_for(payload, window)
        bits = lane_bits(dtype)
        for k, (plo, _pw, _module) in enumerate(super()._planes("")):
            if plo > header_bits and (plo - header_bits) % bits:
                raise UserError(f"plane {k} of {self.plane_bits} bits starts at data bit {plo}, "
                                f"inside a {bits}-bit lane (lanes start at bit "
                                f"{header_bits}): choose plane_bits a multiple of {bits}")

    def _header_in(self, plo, pw):
        """Bits of the header (not summed) in the plane of ``pw`` bits at data bit ``plo``."""
        return min(pw, max(0, self.inc["header_bits"] - plo))

    def _planes(self, name):
        """``[(offset, width, module name)]`` of the data planes: one module per distinct
        (width, header bits in the plane)."""
        return [(plo, pw, module + (f"h{h}" if (h := self._header_in(plo, pw)) else ""))
                for plo, pw, module in super()._planes(name)]

    def parts(self, name):
        out = {f"{name}_ctl": IncSwitch(ports=self.ports, routes=self.routes,
                                        payload=self.control_payload, depth=self.depth,
                                        counter_width=self.counter_width, route_port=True,
                                        small_taps=self.small_taps, planes=True, **self.inc)}
        for plo, pw, module in self._planes(name):
            if module in out:
                continue                                  # one module serves equal planes
            out[module] = IncDataPlane(ports=self.ports, depth=self.depth, width=pw,
                                       index_bits=self.index_bits,
                                       header_bits=self._header_in(plo, pw),
                                       dtype=self.inc["dtype"])
        return out

    def _constants(self):
        return {**super()._constants(),
                **{f"subtree_in__{d}": m for d, m in enumerate(self.inc["subtree"])}}

    def _extra_wires(self):
        ib = max(1, self.index_bits)
        return [("rindex", ib, "x_rindex"), ("rtake", 1, "x_rtake"), ("rfresh", 1, "x_rfresh"),
                ("rrelease", 1, "x_rrelease")] + ([("radvance", 1, "x_radvance")]
                                                  if add_latency(self.inc["dtype"]) else [])


def inc_payload(ranks, data_bits=256, block_bits=4):
    """A fabric flit for in-network switches of ``ranks`` dies: ``dst``/``src``,
    :func:`inc_fields`, ``addr.block`` (the reduction key, ``block_bits``) and ``data_bits``
    of data (the fabric tests and the formal harnesses; a machine uses its router's flit)."""
    check_int("ranks", ranks, 2)
    check_int("data_bits", data_bits, 1)
    rb = max(1, (ranks - 1).bit_length())
    return data.StructLayout({"dst": rb, "src": rb, **inc_fields(ranks),
                              "addr": data.StructLayout({"block": block_bits, "word": 7}),
                              "data": data_bits})


class StarIncSwitch(IncSwitch):
    """One :class:`IncSwitch` joining ``ranks`` dies (port ``d`` = die ``d``): the paths of
    every other die to ``d`` pass through it (``epfabric verilog inc_switch``; the tests)."""

    def __init__(self, *, ranks=4, depth=4, window=8, data_bits=256, header_bits=128,
                 dtype="int16", counter_width=16):
        super().__init__(**self.switch_params(
            ranks=ranks, depth=depth, window=window, data_bits=data_bits,
            header_bits=header_bits, dtype=dtype, counter_width=counter_width))

    @staticmethod
    def switch_params(*, ranks=4, depth=4, window=8, data_bits=256, header_bits=128,
                      dtype="int16", counter_width=16):
        """The :class:`IncSwitch` parameters of the star switch of these parameters."""
        check_int("ranks", ranks, 2, 64)
        full = (1 << ranks) - 1
        return dict(ports=ranks, routes=list(range(ranks)),
                    payload=inc_payload(ranks, data_bits, max(1, (window - 1).bit_length())),
                    depth=depth, subtree=[full & ~(1 << d) for d in range(ranks)],
                    window=window, header_bits=header_bits, dtype=dtype,
                    counter_width=counter_width)


class PlanarStarIncSwitch(StarIncSwitch):
    """A :class:`StarIncSwitch` whose simulation Verilog is its planar form
    (:class:`PlanarIncSwitch` with ``plane_bits``-bit planes and its tables as constants):
    the same ports, so a Verilog simulator runs it where Amaranth's simulator runs the
    switch itself (tests/hw/test_inc_switch.py). Amaranth's simulator runs the plain switch."""

    def __init__(self, *, plane_bits=48, **params):
        self.planar = self.planar_of(plane_bits=plane_bits, **params)    # checked first
        super().__init__(**params)

    @staticmethod
    def planar_of(*, plane_bits=48, **params):
        """The :class:`PlanarIncSwitch` (not an elaboratable) of the switch of these
        parameters (the constructor's)."""
        return PlanarIncSwitch(plane_bits=plane_bits, **StarIncSwitch.switch_params(**params))

    @staticmethod
    def simulation_verilog(top, convert, **params):
        """Verilog of module ``top`` of the switch of these parameters (the constructor's),
        which is not built: its planar form's (see
        :meth:`PlanarSwitch.verilog_with_constants`)."""
        planar = PlanarStarIncSwitch.planar_of(**params)
        return planar.verilog_with_constants(top, "epf_planar_inc", convert)


VERILOG_EXPORTS = {
    "inc_switch": (StarIncSwitch, {"ranks": 4, "depth": 4, "window": 8, "data_bits": 256,
                                   "header_bits": 128, "dtype": "int16", "counter_width": 16}),
}
