"""A superpod switch with in-network multicast and reduction (issue 31).

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

Why nothing deadlocks: the switch's routes are up/down on a tree, so its channel
dependencies are acyclic; a multicast copy follows the unicast route of each of
its destinations (its input waits only for outputs a unicast flit to one of them
could wait for), so the union adds no cycle; the unit is a buffer on the way to
``routes[dst]`` that never waits for anything but its own output (hw/inc_reduce.py).
"""

from amaranth.hdl import Module
from amaranth.lib import data, wiring
from amaranth.lib.wiring import Out

from .inc_reduce import ReduceUnit
from .switch import Switch
from .validate import check_int

__all__ = ["IncSwitch", "StarIncSwitch", "inc_fields", "inc_payload", "VERILOG_EXPORTS"]


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
    window, key_field, header_bits, lane_bits
        Of the :class:`~epfabric.hw.inc_reduce.ReduceUnit`.
    mcast_uplinks : (int, int) or None
        A tier-1 switch's uplink ports (:class:`~epfabric.hw.switch.Switch`).

    Attributes
    ----------
    As a ``Switch`` of ``ports`` ports, plus ``o_absorbed``, ``o_released``,
    ``o_errors``, ``o_open`` of its reduction unit.
    """

    def __init__(self, *, ports, routes, payload, subtree, depth=4, counter_width=32,
                 small_taps=False, route_port=False, window=16, key_field=("addr", "block"),
                 header_bits=128, lane_bits=16, mcast_uplinks=None):
        check_int("ports", ports, 2)
        self.ports, self.routes = ports, tuple(routes)
        self.payload, self.route_port = payload, bool(route_port)
        self.switch = Switch(ports=ports + 1, routes=self.routes, payload=payload, depth=depth,
                             counter_width=counter_width, small_taps=small_taps,
                             route_port=route_port, multicast=True, reduce_port=ports,
                             subtree=subtree, mcast_uplinks=mcast_uplinks)
        self.unit = ReduceUnit(payload=payload, subtree=subtree, window=window,
                               key_field=key_field, header_bits=header_bits,
                               lane_bits=lane_bits, counter_width=counter_width,
                               subtree_port=route_port)
        sig = Switch.signature_of(ports=ports, destinations=len(self.routes), payload=payload,
                                  counter_width=counter_width, route_port=route_port,
                                  small_taps=small_taps, subtree_port=route_port)
        members = dict(sig.members)
        for name in ("o_absorbed", "o_released", "o_errors", "o_open"):
            members[name] = Out(counter_width)
        super().__init__(members)

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
        return m


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
                 lane_bits=16, counter_width=16):
        check_int("ranks", ranks, 2, 64)
        full = (1 << ranks) - 1
        super().__init__(ports=ranks, routes=list(range(ranks)),
                         payload=inc_payload(ranks, data_bits, max(1, (window - 1).bit_length())),
                         depth=depth, subtree=[full & ~(1 << d) for d in range(ranks)],
                         window=window, header_bits=header_bits, lane_bits=lane_bits,
                         counter_width=counter_width)


VERILOG_EXPORTS = {
    "inc_switch": (StarIncSwitch, {"ranks": 4, "depth": 4, "window": 8, "data_bits": 256,
                                   "header_bits": 128, "lane_bits": 16, "counter_width": 16}),
}
