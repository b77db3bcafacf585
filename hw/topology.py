"""Fabric topologies built from links and switches: ``superpod`` and ``star``.

UBEP §2.3 Insight 3 / Table 2: a CloudMatrix384-like superpod — the dies of an
NPU reach each other directly (intra-NPU, 218 ns), the dies of a board through
their tier-1 switch (one-hop, 929 ns), the dies of different boards through
tier-1 → tier-2 → tier-1 (two-hop, 2500 ns). INC-MoE §3: ``star`` puts N ranks
on one switch (where the INC engine attaches).

How a die's port is shared (our design decision). Each rank has one endpoint
port pair (``tx[r]`` into the fabric, ``rx[r]`` out of it). Behind it sits a
small *die router* — a :class:`~epfabric.hw.switch.Switch` with port 0 to the
endpoint, ports ``1..dies_per_npu-1`` to direct links to the other dies of the
NPU, and a last port to the die's uplink to its tier-1 switch. It routes by
destination, so intra-NPU traffic never touches the tier-1 switch, and it
merges incoming direct and switch traffic round-robin. Rate limiters (links of
latency 0) on the endpoint's two directions make the die's total bandwidth the
link rate per direction, however its traffic is split.

Every link (direct, die ↔ tier-1, tier-1 ↔ tier-2) runs at the same rate (the
timing's). The tier-2 layer is ``dies_per_board`` planes (as CM384's L2 switch
planes): tier-1 uplink ``k`` of every board goes to plane ``k``, and cross-board
flits take the plane of their destination's board-local die index, so distinct
destinations never share an uplink and a permutation is non-blocking.
Per-hop latencies and the link rate arrive as a :class:`FabricTiming` in
cycles; a preset computes one (``Preset.fabric_timing``) so that a lone
block's path sums to its class latency. Hardware never sees physical units.
"""

import functools
from dataclasses import dataclass, field

from amaranth.hdl import Const, Module, Shape
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from .hbm import BLOCK_BYTES
from .link import Link, check_payload, flit_layout
from .inc_switch import IncSwitch, PlanarIncSwitch, inc_payload
from .instances import Part
from .lane_arith import is_float
from .switch import PlanarSwitch, Switch, popcount
from .validate import UserError, UserTypeError, check_choice, check_int

__all__ = ["FabricTiming", "Fabric", "superpod", "star", "superpod_distance", "SUPERPOD_HOPS",
           "STAR_HOPS", "TOPOLOGIES", "MAX_RANKS", "check_topology", "topology_ranks", "superpod_ranks",
           "check_timing", "link_label", "subtrees"]

#: Topology kinds: ``("superpod", dies_per_npu, npus_per_board, boards)``, ``("star", n)``.
TOPOLOGIES = ("superpod", "star")
#: Largest rank count: a core address names its rank in 8 bits.
MAX_RANKS = 256

#: Link kinds of a superpod and of a star, keys of :attr:`FabricTiming.hops`.
SUPERPOD_HOPS = ("direct", "up", "down", "t2_up", "t2_down")
STAR_HOPS = ("up", "down")


#: Amaranth's netlist numbers an ``Instance``'s output bits in 16 bits
MAX_INSTANCE_OUTPUT_BITS = (1 << 16) - 1


def _output_bits(signature):
    """Output bits of a component with ``signature`` (what an ``Instance`` of it would drive)."""
    return sum(Shape.cast(member.shape).width for _path, member, _value
               in signature.flatten(signature.create())
               if member.flow == wiring.Out)


@dataclass(frozen=True)
class FabricTiming:
    """What the fabric builders need to know of time: per-link latencies and the link rate.

    Parameters
    ----------
    hops : dict
        ``{link kind: latency in cycles}``: :data:`SUPERPOD_HOPS` for
        :func:`superpod`, :data:`STAR_HOPS` for :func:`star` (extra keys are
        ignored). A latency of 0 is a wire.
    rate_num, rate_den : int
        Link bandwidth in bytes per cycle, ``rate_num / rate_den``
        (:class:`~epfabric.hw.link.Link`).
    block_bytes : int
        Bytes each flit is charged by the rate limiters (one DataBlock).
    small_bytes : int or None
        Bytes charged for a flit without a DataBlock (payload field ``small``
        set: acks, word stores, loads); ``None``: ``block_bytes``.

    Raises
    ------
    TypeError, ValueError
        On a field of the wrong type or out of range (named in the message).
    """
    hops: dict = field(default_factory=dict)
    rate_num: int = 1
    rate_den: int = 1
    block_bytes: int = BLOCK_BYTES
    small_bytes: int = None

    def __post_init__(self):
        if not isinstance(self.hops, dict):
            raise UserTypeError(f"hops must be a dict of link kind -> cycles, not {self.hops!r}")
        for kind, cycles in self.hops.items():
            check_int(f"hops[{kind!r}]", cycles, 0)
        check_int("rate_num", self.rate_num, 1)
        check_int("rate_den", self.rate_den, 1)
        check_int("block_bytes", self.block_bytes, 1)
        if self.small_bytes is not None:
            check_int("small_bytes", self.small_bytes, 1, self.block_bytes)

    def need(self, kinds):
        """``{kind: cycles}`` for ``kinds``; ``ValueError`` naming the first one missing."""
        missing = [k for k in kinds if k not in self.hops]
        if missing:
            raise UserError(f"timing.hops lacks {', '.join(missing)} (has "
                            f"{', '.join(self.hops) or 'nothing'})")
        return {k: self.hops[k] for k in kinds}

    def link(self, payload, latency):
        """A :class:`~epfabric.hw.link.Link` of this rate with ``latency`` cycles."""
        return Link(**self.link_params(payload, latency))

    def link_params(self, payload, latency):
        """The :class:`~epfabric.hw.link.Link` parameters of :meth:`link`, without building it."""
        return dict(payload=payload, latency=latency, rate_num=self.rate_num,
                    rate_den=self.rate_den, block_bytes=self.block_bytes,
                    small_bytes=self.small_bytes)


class Fabric(wiring.Component):
    """A fabric: links and switches between ``ranks`` endpoint port pairs.

    Built by :func:`superpod` or :func:`star`, not directly.

    Parameters
    ----------
    ranks : int
        Endpoint port pairs.
    payload : data.Layout
        Flit layout (with ``dst``).
    switches : dict
        ``{name: Switch}``, or the switch's interface object when it is an
        instance of a shared module (``instances``).
    links : list
        ``(Link, source, sink)`` with source/sink ``("tx", r)``, ``("rx", r)``,
        ``("attach_tx", j)``, ``("attach_rx", j)`` or ``(switch name, port)``;
        the link is an interface object when it is an instance.
    wires : list
        ``(source, sink)`` connected directly, without a link.
    attach : int
        Extra switch ports exposed as ``attach_tx``/``attach_rx`` (star only).
    classes : callable
        ``classes(src, dst)`` → distance class name.
    counter_width : int
        Width of the per-rank counters.
    instances : dict or None
        ``{switch name or link index: (SharedModule, constants)}``: the
        children elaborated as instances of shared Verilog modules (the
        builders' ``shared``), their constant inputs.
    parts : dict or None
        ``{module name: Part}``: the shared modules, for the caller to
        convert (:class:`~epfabric.hw.instances.Part`).
    link_kinds : list or None
        The kind of each link of ``links`` (a key of ``kinds``), or ``None`` for a link that
        is not counted (the endpoints' rate limiters); ``None``: no link is counted.
    kinds : tuple
        The link kinds counted per kind (``link_blocks``, ``link_small``): :func:`superpod`
        gives :data:`SUPERPOD_HOPS`; empty (the default, and :func:`star`): no such counters.
    routing : dict or None
        The builder's routes, link ends and reduction tables (:mod:`~epfabric.hw.inc_waits`
        checks its wait-for graph); kept as the ``routing`` attribute.

    Attributes
    ----------
    tx : In(stream.Signature(payload)).array(ranks)
        Flits a rank sends (``payload.dst`` names the destination rank).
    rx : Out(stream.Signature(payload)).array(ranks)
        Flits delivered to a rank.
    attach_tx, attach_rx : streams, present when ``attach`` > 0
        Ports of an engine attached to the switch (flits to it have
        ``dst = ranks + j``).
    tx_blocks, rx_blocks, tx_stalls : Out(counter_width).array(ranks)
        Blocks sent and delivered per rank, and cycles a rank's ``tx`` was held off.
    link_blocks, link_small : Out(counter_width).array(len(kinds)), present when ``kinds``
        Per link kind ``kinds[k]``, since reset: the flits that entered a link of that kind
        (``valid & ready`` on the link's input, one per cycle and link) carrying a DataBlock
        (``link_blocks``) and those without one (``link_small``: acks, word stores, loads,
        fetch-adds and their answers -- the payload's ``small`` bit, read from the sending
        switch's ``o_small`` tap; a payload without ``small`` counts every flit as a block).
        A flit is counted once on every link it crosses, so a flit to another board counts
        once in each of ``up``, ``t2_up``, ``t2_down`` and ``down``. Observation only: no
        cycle changes.
    switches : dict
        The switches by name (their counters are readable in simulation).
    parts : dict
        The shared modules to convert (empty for a flat fabric).
    """

    def __init__(self, *, ranks, payload, switches, links, wires=(), attach=0, classes=None,
                 counter_width=32, instances=None, parts=None, link_kinds=None, kinds=(),
                 routing=None):
        self.ranks = ranks
        self.routing = routing
        self.payload = check_payload(payload)
        self.switches = dict(switches)
        self.links = list(links)
        self.wires = list(wires)
        self.attach = attach
        self._classes = classes
        self._instances = dict(instances or {})
        self.parts = dict(parts or {})
        self.kinds = tuple(kinds)
        self.link_kinds = list(link_kinds) if link_kinds is not None else [None] * len(self.links)
        if len(self.link_kinds) != len(self.links):
            raise UserError(f"link_kinds has {len(self.link_kinds)} entries for "
                            f"{len(self.links)} links")
        unknown = sorted({k for k in self.link_kinds if k is not None} - set(self.kinds))
        if unknown:
            raise UserError(f"link_kinds names {', '.join(unknown)}, not in kinds {self.kinds}")
        flit = stream.Signature(payload)
        members = {
            "tx": In(flit).array(ranks),
            "rx": Out(flit).array(ranks),
            "tx_blocks": Out(counter_width).array(ranks),
            "rx_blocks": Out(counter_width).array(ranks),
            "tx_stalls": Out(counter_width).array(ranks),
        }
        if self.kinds:
            members["link_blocks"] = Out(counter_width).array(len(self.kinds))
            members["link_small"] = Out(counter_width).array(len(self.kinds))
        if attach:
            members["attach_tx"] = In(flit).array(attach)
            members["attach_rx"] = Out(flit).array(attach)
        super().__init__(members)

    def distance(self, src, dst):
        """Distance class (``"intra"``, ``"one_hop"``, ``"two_hop"``) of a flow; ``None`` for src == dst."""
        if src == dst:
            return None
        return self._classes(src, dst)

    def elaborate(self, platform):
        m = Module()
        for name, sw in self.switches.items():
            m.submodules[name] = self._child(name, sw)
        for n, (link, src, dst) in enumerate(self.links):
            m.submodules[link_label(n, src, dst)] = self._child(n, link)
            wiring.connect(m, self._source(src), link.i_stream)
            wiring.connect(m, link.o_stream, self._sink(dst))
        for src, dst in self.wires:
            wiring.connect(m, self._source(src), self._sink(dst))
        for r in range(self.ranks):
            tx, rx = self.tx[r], self.rx[r]
            with m.If(tx.valid & tx.ready):
                m.d.sync += self.tx_blocks[r].eq(self.tx_blocks[r] + 1)
            with m.If(tx.valid & ~tx.ready):
                m.d.sync += self.tx_stalls[r].eq(self.tx_stalls[r] + 1)
            with m.If(rx.valid & rx.ready):
                m.d.sync += self.rx_blocks[r].eq(self.rx_blocks[r] + 1)
        self._link_counters(m)
        return m

    def _link_counters(self, m):
        """``link_blocks``/``link_small`` += the flits entering the links of each kind."""
        for k, kind in enumerate(self.kinds):
            blocks, small = [], []
            for n, (link, src, _dst) in enumerate(self.links):
                if self.link_kinds[n] != kind:
                    continue
                fire = link.i_stream.valid & link.i_stream.ready
                # the tap, not the payload: a native glue would otherwise read every payload
                switch = self.switches.get(src[0])
                tap = switch.o_small[src[1]] if hasattr(switch, "o_small") else None
                blocks.append(fire if tap is None else fire & ~tap)
                small.append(0 if tap is None else fire & tap)
            if blocks:
                m.d.sync += [self.link_blocks[k].eq(self.link_blocks[k] + popcount(blocks)),
                             self.link_small[k].eq(self.link_small[k] + popcount(small))]

    def _child(self, key, child):
        """``child`` itself, or the instance of its shared module."""
        if key not in self._instances:
            return child
        module, consts = self._instances[key]
        return module.instance(child, skip=set(consts), **consts)

    def _source(self, end):
        kind, idx = end
        if kind in ("tx", "attach_tx"):
            return wiring.flipped(getattr(self, kind)[idx])
        return self.switches[kind].o_stream[idx]

    def _sink(self, end):
        kind, idx = end
        if kind in ("rx", "attach_rx"):
            return wiring.flipped(getattr(self, kind)[idx])
        return self.switches[kind].i_stream[idx]


def link_label(n, src, dst):
    """Submodule name of link ``n`` of a fabric, from ``src`` to ``dst``."""
    return f"link{n}_{src[0]}{src[1]}_to_{dst[0]}{dst[1]}"


class _Children:
    """The switches and links a builder gives a :class:`Fabric`.

    ``shared`` (a :class:`~epfabric.hw.instances.Sharing`) or ``None``: each
    child is its own component, or an instance of one shared module per
    distinct child -- switches that differ only in their routes share one
    module built with ``route_port=True`` (routes driven as constants on
    ``routes_in``), links with equal parameters one; the modules are
    :class:`~epfabric.hw.instances.Part` s, built only when converted. A switch with more than
    :data:`MAX_INSTANCE_OUTPUT_BITS` output bits (e.g. a 16-port tier-1
    switch of 4 KB flits) stays a component: Amaranth cannot build an
    ``Instance`` with that many -- unless the instancer builds none (the native backend's
    records its instances): there it is a :class:`~epfabric.hw.switch.PlanarSwitch` (an
    in-network one a :class:`~epfabric.hw.inc_switch.PlanarIncSwitch`).
    """

    def __init__(self, shared, inc=None, plan=False):
        self.shared = shared
        self.plan = plan                     # record the fabric's paths, build no component
        self.inc = inc                       # IncSwitch parameters, or None: plain switches
        self._pending = []                   # (name, parameters) of the switches to build
        self._ends = []                      # (src, dst) of every link, in order
        self.switches, self.links = {}, []
        self.instances, self.parts = {}, {}
        self.link_kinds = []                 # the kind of each link (None: not counted)
        self._switch_kinds, self._link_kinds = {}, []
        self._sums = {}                      # switch name: which destinations it sums, or None

    def switch(self, name, *, ports, routes, payload, depth, counter_width, small_taps=False,
               mcast_uplinks=None, sums=None):
        """Record a switch; it is built by :meth:`fabric_args`, once every link is known (an
        in-network switch's tables come from the paths through the whole fabric).
        ``mcast_uplinks`` and ``sums`` only matter to an in-network switch: ``sums[d]`` false
        means the switch sums no group of destination ``d`` (its table entry is 0, so those
        contributions pass it unsummed); ``None``: it sums wherever paths meet."""
        self._pending.append((name, dict(ports=ports, routes=tuple(routes), payload=payload,
                                         depth=depth, counter_width=counter_width,
                                         small_taps=small_taps, mcast_uplinks=mcast_uplinks)))
        self._sums[name] = None if sums is None else tuple(bool(x) for x in sums)

    def _build_switch(self, name, *, ports, routes, payload, depth, counter_width, small_taps,
                      mcast_uplinks=None, subtree=None):
        inc = subtree is not None
        kind = (ports, len(routes), depth, counter_width, small_taps, inc,
                mcast_uplinks if inc else None)
        wide = self.shared is not None and _output_bits(Switch.signature_of(
            ports=ports, destinations=len(routes), payload=payload, counter_width=counter_width,
            route_port=False, small_taps=small_taps)) > MAX_INSTANCE_OUTPUT_BITS
        # an instancer that builds no Instance (the native backend's) takes a wide switch
        # too, converted as a PlanarSwitch (control switch + data planes); there an
        # in-network switch of floating-point lanes is planar too, however wide: its lane
        # adders are the bulk of it, and a plane module is converted once for every plane
        # of its width (a 248-lane bf16 switch: 66 s and 7.9 MB of Verilog converted whole)
        native = self.shared is not None and not self.shared.instancer.makes_instances
        planar = (native and "data" in dict(iter(payload))
                  and (wide or (inc and is_float(self.inc.get("dtype", "int16")))))
        make = functools.partial(IncSwitch, **self.inc) if inc else Switch
        extra = {"subtree": subtree, "mcast_uplinks": mcast_uplinks} if inc else {}
        if self.shared is None or (wide and not planar):
            self.switches[name] = make(ports=ports, routes=routes, payload=payload, depth=depth,
                                       counter_width=counter_width, small_taps=small_taps, **extra)
            return
        if kind not in self._switch_kinds:
            params = dict(ports=ports, routes=routes, payload=payload, depth=depth,
                          counter_width=counter_width, small_taps=small_taps, **extra,
                          **(self.inc if inc else {}))
            if planar:      # not an elaboratable: built to tell its signature
                part = Part(PlanarIncSwitch if inc else PlanarSwitch, **params)
            else:
                cls = IncSwitch if inc else Switch
                part = Part(cls, signature=cls.signature_for(route_port=True, **params),
                            route_port=True, **params)
            module = self.shared.module(f"epf_switch{len(self._switch_kinds)}", part)
            self._switch_kinds[kind] = module
            self.parts[module.name] = part
        module = self._switch_kinds[kind]
        self.switches[name] = module.part.signature.create(path=(name,))
        width = len(self.switches[name].routes_in[0])
        consts = {f"routes_in__{d}": Const(p, width) for d, p in enumerate(routes)}
        if inc:
            consts.update({f"subtree_in__{d}": Const(mask, len(routes))
                           for d, mask in enumerate(subtree)})
        self.instances[name] = (module, consts)

    def link(self, params, src, dst, kind=None):
        n = len(self.links)
        self._ends.append((src, dst))
        self.link_kinds.append(kind)
        if self.plan:
            return
        if self.shared is None:
            self.links.append((Link(**params), src, dst))
            return
        for kind_params, module in self._link_kinds:
            if kind_params == params:
                break
        else:
            part = Part(Link, signature=Link.signature_for(**params), **params)
            module = self.shared.module(f"epf_link{len(self._link_kinds)}", part)
            self._link_kinds.append((params, module))
            self.parts[module.name] = part
        port = module.part.signature.create(path=(link_label(n, src, dst),))
        self.links.append((port, src, dst))
        self.instances[n] = (module, {})

    def routing(self, ranks):
        """What :mod:`~epfabric.hw.inc_waits` builds the fabric's wait-for graph from: the
        switches' routes, the links' ends, the reduction tables (``{}`` without ``inc``) and the
        tier-1 multicast uplinks -- the tables every switch is built with."""
        inc = self.inc is not None
        routes = {name: p["routes"] for name, p in self._pending}
        tables = subtrees(ranks, routes, self._ends) if inc else {}
        for name, sums in self._sums.items():
            if inc and sums is not None:
                tables[name] = [m if sums[d] else 0 for d, m in enumerate(tables[name])]
        return {"ranks": ranks, "routes": routes, "ends": list(self._ends), "tables": tables,
                "mcast_uplinks": {name: p["mcast_uplinks"] for name, p in self._pending
                                  if inc and p["mcast_uplinks"] is not None}}

    def fabric_args(self, ranks):
        routing = self.routing(ranks)
        for name, params in self._pending:
            self._build_switch(name, **params, subtree=routing["tables"].get(name))
        self._pending = []
        return dict(switches=self.switches, links=self.links, instances=self.instances,
                    parts=self.parts, link_kinds=self.link_kinds, routing=routing)


def subtrees(ranks, routes, links):
    """``{switch: [mask per destination]}``: bit ``d`` of ``table[X][s]`` is set when the path
    of a flit from rank ``d`` to rank ``s`` passes through switch ``X``.

    ``routes`` is ``{switch name: routes}``, ``links`` the ``(src end, dst end)`` of every
    link (ends as in :class:`Fabric`). Each path is walked from ``("tx", d)`` through the
    switches' routes to ``("rx", s)``; a path that leaves the fabric elsewhere or loops is a
    construction error.
    """
    nxt = dict(links)
    table = {name: [0] * ranks for name in routes}
    for d in range(ranks):
        for s in range(ranks):
            if d == s:
                continue
            end, seen = nxt.get(("tx", d)), []
            while end is not None and end[0] in routes and len(seen) <= len(routes):
                seen.append(end[0])
                end = nxt.get((end[0], routes[end[0]][s]))
            if end != ("rx", s):
                raise RuntimeError(f"the path from rank {d} to {s} ends at {end!r}")
            for name in set(seen):
                table[name][s] |= 1 << d
    return table


def check_timing(timing):
    """Raise ``TypeError`` unless ``timing`` is a :class:`FabricTiming`."""
    if not isinstance(timing, FabricTiming):
        raise UserTypeError(f"timing must be a FabricTiming (e.g. Preset.fabric_timing()), not {timing!r}")
    return timing


def _payload(payload, addresses, data_bytes):
    if payload is None:
        if data_bytes is None:
            raise UserError("give payload (a flit layout) or data_bytes, not neither")
        check_int("data_bytes", data_bytes, 1)
        return flit_layout(ranks=addresses, data_bits=8 * data_bytes)
    payload = check_payload(payload)
    if addresses > 2 ** Shape.cast(payload['dst'].shape).width:
        raise UserError(f"payload's dst field ({Shape.cast(payload['dst'].shape).width} bits) cannot "
                        f"address {addresses} destinations")
    return payload


def check_topology(topology):
    """Validate a topology; return it as a tuple.

    ``("superpod", dies_per_npu, npus_per_board, boards)`` (at least 2 dies)
    or ``("star", n)`` (``n >= 2``), with at most :data:`MAX_RANKS` ranks.
    The one check of a topology's shape: the machine configuration, the
    system top and the CLI all call it.
    """
    if not isinstance(topology, (tuple, list)) or not topology:
        raise UserTypeError(f"topology must be a tuple ('superpod', dies_per_npu, npus_per_board, "
                            f"boards) or ('star', n), not {topology!r}")
    kind, *shape = topology
    check_choice("topology kind", kind, TOPOLOGIES)
    names = ("dies_per_npu", "npus_per_board", "boards") if kind == "superpod" else ("n",)
    if len(shape) != len(names):
        raise UserError(f"topology {kind!r} takes {len(names)} size(s) ({', '.join(names)}), "
                        f"not {tuple(topology)!r}")
    for name, value in zip(names, shape):
        check_int(name, value, 2 if kind == "star" else 1)
    ranks = topology_ranks(topology)
    if kind == "superpod" and ranks < 2:
        raise UserError(f"a superpod needs at least 2 dies, not {tuple(topology)!r}")
    if ranks > MAX_RANKS:
        raise UserError(f"topology {tuple(topology)!r} has {ranks} ranks; at most {MAX_RANKS} "
                        f"are addressable")
    return (kind, *shape)


def topology_ranks(topology):
    """Number of ranks (dies) of a topology tuple."""
    ranks = 1
    for size in topology[1:]:
        ranks *= size
    return ranks


def superpod_ranks(dies_per_npu, npus_per_board, boards):
    """Ranks of a :func:`superpod` of this shape, checked as :func:`superpod` checks it.

    Raises
    ------
    ValueError, TypeError
        On an invalid shape (the parameter is named): sizes must be positive
        integers, at least 2 dies in all.
    """
    dpn = check_int("dies_per_npu", dies_per_npu, 1)
    npb = check_int("npus_per_board", npus_per_board, 1)
    nb = check_int("boards", boards, 1)
    ranks = dpn * npb * nb
    if ranks < 2:
        raise UserError(f"a superpod needs at least 2 dies, not dies_per_npu={dpn}, "
                        f"npus_per_board={npb}, boards={nb}")
    return ranks


def superpod_distance(dies_per_npu, npus_per_board):
    """``distance(src, dst)`` → ``"intra"``, ``"one_hop"`` or ``"two_hop"`` for a superpod shape."""
    def distance(src, dst):
        if src // dies_per_npu == dst // dies_per_npu:
            return "intra"
        if src // (dies_per_npu * npus_per_board) == dst // (dies_per_npu * npus_per_board):
            return "one_hop"
        return "two_hop"
    return distance


def superpod(timing, dies_per_npu, npus_per_board, boards, *, payload=None,
             data_bytes=None, switch_depth=4, counter_width=32, shared=None, inc=None,
             routing_only=False):
    """A two-tier superpod fabric (UBEP §2.3 Insight 3, Table 2).

    Rank ``r`` is die ``r % dies_per_npu`` of NPU ``(r // dies_per_npu) %
    npus_per_board`` on board ``r // (dies_per_npu * npus_per_board)``.

    Parameters
    ----------
    timing : FabricTiming
        Link rate and the latencies of :data:`SUPERPOD_HOPS`.
    dies_per_npu, npus_per_board, boards : int
        Shape (positive; at least 2 dies in all).
    payload : data.Layout or None
        Flit layout with a ``dst`` field; ``None``: ``flit_layout`` with
        ``data_bytes`` of data.
    data_bytes : int or None
        Simulated bytes per block when ``payload`` is ``None``; cycle counts
        do not depend on it.
    switch_depth : int
        Input FIFO depth of every switch.
    shared : Sharing or None
        Build every switch and link as an instance of one shared Verilog
        module per distinct kind (:class:`~epfabric.hw.instances.Sharing`;
        ``Fabric.parts`` holds the modules): every die's switch shares one,
        so does every tier-1 switch. ``None`` (default, what Amaranth's
        simulator runs): components. Same cycles.
    inc : dict or None
        In-network multicast and reduction: every switch -- each die's, each
        tier-1's, each tier-2's -- is an :class:`~epfabric.hw.inc_switch.IncSwitch` with
        these parameters (``window``, ``header_bits``, ``dtype``, ``key_field``; ``{}``
        for the defaults) and its reduction tables from the fabric's own paths
        (:func:`subtrees`), except that a tier-1 switch sums only groups whose destination
        is on its board (its releases go down; contributions to other boards go up unsummed
        and their tier-2 plane sums them: what keeps the fabric free of deadlock,
        docs/concepts/inc-deadlock.md); a tier-1 switch sends a multicast's copies for other
        boards up one tier-2 plane, the source's (``mcast_uplinks``). The payload needs :func:`~epfabric.hw.inc_switch.inc_fields`
        and the key; with ``payload=None`` it is :func:`~epfabric.hw.inc_switch.inc_payload`.
        ``None`` (default): plain switches, the fabric as without it.
    routing_only : bool
        Build no component and return only the fabric's routing (its ``routing``
        attribute: routes, link ends, reduction tables), which
        :mod:`~epfabric.hw.inc_waits` checks for a cyclic wait.

    Returns
    -------
    Fabric
        With per-link-kind counters ``link_blocks``/``link_small`` over
        :data:`SUPERPOD_HOPS` (:class:`Fabric`): ``direct`` (die ↔ die of an NPU, both
        directions), ``up`` (die → tier-1), ``down`` (tier-1 → die), ``t2_up`` (tier-1 →
        tier-2), ``t2_down`` (tier-2 → tier-1). The endpoints' rate limiters are not counted.

    Raises
    ------
    ValueError
        On an invalid shape (the parameter is named).
    """
    check_timing(timing)
    ranks = superpod_ranks(dies_per_npu, npus_per_board, boards)
    dpn, npb, nb = dies_per_npu, npus_per_board, boards
    dpb = dpn * npb
    hops = timing.need(SUPERPOD_HOPS)
    if inc is not None and payload is None:
        if data_bytes is None:
            raise UserError("give payload (a flit layout) or data_bytes, not neither")
        payload = inc_payload(ranks, 8 * check_int("data_bytes", data_bytes, 1),
                              max(1, (inc.get("window", 16) - 1).bit_length()))
    payload = _payload(payload, ranks, data_bytes)

    children = _Children(shared, inc=None if inc is None else dict(inc), plan=routing_only)

    def link(latency, src, dst, kind=None):
        children.link(timing.link_params(payload, latency), src, dst, kind)

    taps = "small" in dict(iter(payload))      # the switches feed the link counters

    def npu_of(r):
        return r // dpn

    def board_of(r):
        return r // dpb

    has_t1 = nb > 1 or npb > 1
    for r in range(ranks):
        siblings = [s for s in range(npu_of(r) * dpn, npu_of(r) * dpn + dpn) if s != r]
        uplink = 1 + len(siblings)
        routes = []
        for d in range(ranks):
            if d == r:
                routes.append(0)
            elif npu_of(d) == npu_of(r):
                routes.append(1 + siblings.index(d))
            else:
                routes.append(uplink)
        children.switch(f"die{r}", ports=uplink + has_t1, routes=routes, payload=payload,
                        depth=switch_depth, counter_width=counter_width, small_taps=taps)
        link(0, ("tx", r), (f"die{r}", 0))
        link(0, (f"die{r}", 0), ("rx", r))
        for i, s in enumerate(siblings):
            back = [t for t in range(npu_of(s) * dpn, npu_of(s) * dpn + dpn) if t != s].index(r)
            link(hops["direct"], (f"die{r}", 1 + i), (f"die{s}", 1 + back), "direct")
        if has_t1:
            t1, k = f"t1_{board_of(r)}", r % dpb
            link(hops["up"], (f"die{r}", uplink), (t1, k), "up")
            link(hops["down"], (t1, k), (f"die{r}", uplink), "down")
    if has_t1:
        for b in range(nb):
            routes = [d % dpb if board_of(d) == b else dpb + d % dpb for d in range(ranks)]
            # a tier-1 unit sums only the groups of its own board's dies, whose releases go
            # down: a unit that also released up would hold partial sums that came down
            # behind releases going up, and two boards' units could wait on each other
            # through one tier-2 plane (docs/concepts/inc-deadlock.md). Contributions to
            # other boards go up unsummed; the tier-2 plane sums them.
            children.switch(f"t1_{b}", ports=dpb * (2 if nb > 1 else 1), routes=routes,
                            payload=payload, depth=switch_depth, counter_width=counter_width,
                            small_taps=taps, mcast_uplinks=(dpb, dpb) if nb > 1 else None,
                            sums=[board_of(d) == b for d in range(ranks)])
    if nb > 1:
        for k in range(dpb):
            children.switch(f"t2_{k}", ports=nb, routes=[board_of(d) for d in range(ranks)],
                            payload=payload, depth=switch_depth, counter_width=counter_width,
                            small_taps=taps)
            for b in range(nb):
                link(hops["t2_up"], (f"t1_{b}", dpb + k), (f"t2_{k}", b), "t2_up")
                link(hops["t2_down"], (f"t2_{k}", b), (f"t1_{b}", dpb + k), "t2_down")

    if routing_only:
        return children.routing(ranks)
    classes = superpod_distance(dpn, npb)
    fabric = Fabric(ranks=ranks, payload=payload, classes=classes, counter_width=counter_width,
                    kinds=SUPERPOD_HOPS, **children.fabric_args(ranks))
    fabric.shape = {"dies_per_npu": dpn, "npus_per_board": npb, "boards": nb}
    return fabric


def star(timing, n, *, attach=0, payload=None, data_bytes=None, switch_depth=4, counter_width=32,
         shared=None):
    """``n`` ranks on one switch, each by a full-duplex link (INC-MoE §3; UBEP one-hop class).

    A lone block takes ``up + switch + down`` cycles rank to rank. ``attach``
    extra switch ports, without links, are exposed as ``attach_tx[j]`` /
    ``attach_rx[j]`` for an engine inside the switch (the INC engine); flits
    with ``dst = n + j`` are routed to ``attach_rx[j]``.

    Parameters
    ----------
    timing : FabricTiming
        Link rate and the latencies of :data:`STAR_HOPS`.
    n : int
        Ranks (>= 2).
    attach : int
        Engine ports (>= 0).
    payload, data_bytes, switch_depth, counter_width, shared
        As for :func:`superpod`.

    Returns
    -------
    Fabric

    Raises
    ------
    ValueError
        On an invalid parameter (named in the message).
    """
    check_timing(timing)
    check_int("n", n, 2)
    check_int("attach", attach, 0)
    hops = timing.need(STAR_HOPS)
    payload = _payload(payload, n + attach, data_bytes)
    ports = n + attach
    children = _Children(shared)
    children.switch("switch", ports=ports, routes=list(range(ports)), payload=payload,
                    depth=switch_depth, counter_width=counter_width)
    for r in range(n):
        children.link(timing.link_params(payload, hops["up"]), ("tx", r), ("switch", r))
        children.link(timing.link_params(payload, hops["down"]), ("switch", r), ("rx", r))
    wires = []
    for j in range(attach):
        wires.append((("attach_tx", j), ("switch", n + j)))
        wires.append((("switch", n + j), ("attach_rx", j)))
    fabric = Fabric(ranks=n, payload=payload, wires=wires, attach=attach,
                    classes=lambda s, d: "one_hop", counter_width=counter_width,
                    **children.fabric_args(n))
    fabric.shape = {"n": n, "attach": attach}
    return fabric
