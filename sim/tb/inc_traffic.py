"""Multicast and reduction traffic for in-network switches and fabrics, and its checkers.

Shared by tests/hw/test_inc_switch.py (one :class:`~epfabric.hw.inc_switch.StarIncSwitch`)
and tests/hw/test_topology.py (a :func:`~epfabric.hw.topology.superpod` with ``inc``):
per source a queue of flits -- multicasts to random die sets, unicasts, and
contributions to random reduction groups -- offered with random gaps while every
receiver stalls at random; then every delivery is checked in Python:

* a multicast flit reached each die of its set exactly once (its copy naming only
  that die) and no other, in order per (source, destination) among multicasts and among
  unicasts (the two may take different tier-2 planes: ``Switch`` ``mcast_uplinks``);
* a reduction group was delivered exactly once, at its die, with ``count`` = its
  contributors and every lane the wrapping 16-bit sum of their lanes.
"""

import random

from ...hw.inc_switch import inc_payload
from ...hw.topology import superpod
from ...sw.presets import get_preset

__all__ = ["inc_fabric", "flit", "pack", "unpack", "multicast_queues", "reduction_queues",
           "plane_ring_queues",
           "traffic_intent", "deliveries", "check_multicast", "check_reductions", "LANE"]

LANE = 16


def inc_fabric(*, preset="tiny", shape=(2, 2, 2), window=8, data_bits=64, header_bits=0,
               shared=None):
    """A superpod with in-network switches (a ComponentSpec target): the preset's timing,
    :func:`~epfabric.hw.inc_switch.inc_payload` flits of ``data_bits``. ``shared``: as for
    :func:`~epfabric.hw.topology.superpod` (the Verilog simulators convert each kind of switch
    and link once: a flat 64-die fabric exhausts Yosys's WebAssembly memory)."""
    p = get_preset(preset)
    ranks = shape[0] * shape[1] * shape[2]
    payload = inc_payload(ranks, data_bits, max(1, (window - 1).bit_length()))
    return superpod(p.fabric_timing("superpod"), *shape, payload=payload,
                    inc={"window": window, "header_bits": header_bits}, shared=shared)


def flit(*, src, dst=0, mcast=0, red=0, mask=0, count=0, block=0, data=0):
    """A flit of :func:`~epfabric.hw.inc_switch.inc_payload` as the bench sets it."""
    return {"dst": dst, "src": src, "mcast": mcast, "red": red, "mask": mask, "count": count,
            "addr": {"block": block, "word": 0}, "data": data}


def pack(header, lanes, header_bits):
    value = header
    for k, v in enumerate(lanes):
        value |= (v & 0xFFFF) << (header_bits + LANE * k)
    return value


def unpack(value, header_bits, lanes):
    return (value & ((1 << header_bits) - 1),
            [(value >> (header_bits + LANE * k)) & 0xFFFF for k in range(lanes)])


def multicast_queues(rng, ranks, per_source, serial=1):
    """Per source ``per_source`` flits: a quarter unicast, the rest multicast to a random
    non-empty set; ``data`` is a serial number unique in the run. Returns the queues and
    ``[(serial, mask of the dies that must get it)]``."""
    queues, sent = [], []
    for s in range(ranks):
        q = []
        for _ in range(per_source):
            if rng.random() < 0.25:
                d = rng.randrange(ranks)
                q.append(flit(src=s, dst=d, data=serial))
                sent.append((serial, 1 << d))
            else:
                mask = rng.randrange(1, 1 << ranks)
                q.append(flit(src=s, mcast=1, mask=mask, data=serial))
                sent.append((serial, mask))
            serial += 1
        queues.append(q)
    return queues, sent


def reduction_queues(rng, ranks, groups, *, window, lanes, header_bits=0, p=0.6):
    """``groups`` random groups (destination, block < window, contributors: other dies each
    with probability ``p``, at least one), one contribution (``count`` 1) from each
    contributor with random lanes, shuffled per source. Returns the queues and
    ``{(dst, block): (mask, contributors, header, sums)}``."""
    want = {}
    queues = [[] for _ in range(ranks)]
    if groups > ranks * window:
        raise ValueError(f"{groups} groups do not fit {ranks} x {window} slots")
    while len(want) < groups:
        dst, block = rng.randrange(ranks), rng.randrange(window)
        if (dst, block) in want:
            continue
        others = [r for r in range(ranks) if r != dst]
        contributors = [r for r in others if rng.random() < p] or [rng.choice(others)]
        mask = sum(1 << r for r in contributors)
        header = (0x0D0D0000 | (dst << 8) | block) & ((1 << header_bits) - 1)
        sums = [0] * lanes
        for r in contributors:
            vals = [rng.randrange(1 << 16) for _ in range(lanes)]
            sums = [(a + b) & 0xFFFF for a, b in zip(sums, vals)]
            queues[r].append(flit(src=r, dst=dst, red=1, mask=mask, count=1, block=block,
                                  data=pack(header, vals, header_bits)))
        want[(dst, block)] = (mask, len(contributors), header, sums)
    for q in queues:
        rng.shuffle(q)
    return queues, want


def plane_ring_queues(rng, shape, groups, *, lanes, multicasts=0, serial=1, planes=1):
    """The two-board pattern that deadlocked tier-1 units summing groups that leave their
    board (docs/concepts/inc-deadlock.md).

    Boards go in pairs (0 and 1, 2 and 3, ...). On each of the first ``planes`` tier-2
    planes ``k``, each board of a pair reduces into die ``k`` of the other, ``groups`` groups
    each (blocks ``0 .. groups - 1``): two contributors on the other board (a pair, whose
    contributions go up plane ``k``; a tier-1 unit that summed them sent one partial sum for
    every two) and one on the destination's board in another NPU (so what comes down waits
    for the destination's tier-1 unit). With ``multicasts``, the destination also sends that
    many multicasts to the other board per group (on plane ``k`` too). Every source sends in
    block order.
    Returns the queues, ``{(dst, block): (mask, contributors, header, sums)}`` and
    ``[(serial, mask)]`` of the multicasts.
    """
    dpn, npb, nb = shape
    if nb < 2 or nb % 2 or npb < 2 or dpn * npb % 2:
        raise ValueError(f"the plane ring needs boards in pairs (two boards, four, ...) of at "
                         f"least two NPUs and an even number of dies a board, not {tuple(shape)}")
    dpb = dpn * npb
    if not 1 <= planes <= dpb:
        raise ValueError(f"planes must be in [1, {dpb}] (the tier-2 planes), not {planes!r}")
    ranks = nb * dpb
    queues = [[] for _ in range(ranks)]
    want, sent = {}, []
    boards = [(p * dpb, (p + 1) * dpb) for p in range(0, nb, 2)]
    for b in range(groups):
        pair = 2 * (b % (dpb // 2))
        for k in range(planes):
            for home, other in (ends for a, c in boards for ends in ((a, c), (c, a))):
                dst = home + k
                local = home + (k + dpn) % dpb
                mask = (1 << local) | (3 << (other + (pair + 2 * k) % dpb))
                contributors = [r for r in range(ranks) if mask >> r & 1]
                sums = [0] * lanes
                for r in contributors:
                    vals = [rng.randrange(1 << 16) for _ in range(lanes)]
                    sums = [(a + v) & 0xFFFF for a, v in zip(sums, vals)]
                    queues[r].append(flit(src=r, dst=dst, red=1, mask=mask, count=1, block=b,
                                          data=pack(0, vals, 0)))
                want[(dst, b)] = (mask, len(contributors), 0, sums)
                queues[dst] += [flit(src=dst, mcast=1, mask=((1 << dpb) - 1) << other)
                                for _ in range(multicasts)]
    for q in queues:
        for f in q:                     # serials in queue order: a source's copies stay in order
            if f["mcast"]:
                f["data"] = serial
                sent.append((serial, f["mask"]))
                serial += 1
    return queues, want, sent


async def traffic_intent(bench, rounds, cycles, ranks, ins="i_stream", outs="o_stream",
                         counters=(), seed=0, stall_p=0.3, offer_p=0.8, expect=None, drain=64,
                         stuck=None):
    """Round after round (``cycles`` each): input ``s`` offers the flits of ``round[s]`` in
    order with random gaps, every output stalls at random. Returns every flit each output
    delivered per round (with its cycle), the flits left unsent per round and ``counters``
    (names of signals read at the end).

    ``expect`` (deliveries per round, e.g. :func:`deliveries`): a round ends ``drain``
    cycles after its last expected delivery (so a late duplicate is still seen), and
    ``cycles`` is only its limit. ``stuck`` (cycles, with ``expect``): the watchdog -- a round
    that delivers nothing for that long while deliveries are missing ends there, and
    ``stuck`` in the result names the cycle of its last delivery (``None``: it finished) and
    ``held`` the inputs whose flit the fabric had not taken when the round ended."""
    rng = random.Random(seed)
    out, left, stalled, held = [], [], [], []
    for rnd, queues in enumerate(rounds):
        queues = [list(q) for q in queues]
        got = [[] for _ in range(ranks)]
        offered = [None] * ranks
        until, last, hung = cycles, 0, None
        for cycle in range(cycles):
            if cycle >= until:
                break
            if stuck is not None and until == cycles and cycle - last > stuck:
                hung = bench.cycle - cycle + last        # nothing for ``stuck`` cycles
                break
            for s in range(ranks):
                if offered[s] is None and queues[s] and rng.random() < offer_p:
                    offered[s] = queues[s].pop(0)
                    bench.set(f"{ins}.{s}.payload", offered[s])
                bench.set(f"{ins}.{s}.valid", int(offered[s] is not None))
            readies = [int(rng.random() >= stall_p) for _ in range(ranks)]
            for p, r in enumerate(readies):
                bench.set(f"{outs}.{p}.ready", r)
            taken = [s for s in range(ranks)
                     if offered[s] is not None and await bench.get(f"{ins}.{s}.ready")]
            for p in range(ranks):
                if readies[p] and await bench.get(f"{outs}.{p}.valid"):
                    f = bench.decode(f"{outs}.{p}.payload", await bench.get(f"{outs}.{p}.payload"))
                    got[p].append({"src": int(f.src), "dst": int(f.dst), "mcast": int(f.mcast),
                                   "red": int(f.red), "mask": int(f.mask), "count": int(f.count),
                                   "block": int(f.addr.block), "data": int(f.data),
                                   "cycle": bench.cycle})
                    last = cycle
            await bench.tick()
            for s in taken:
                offered[s] = None
            if expect is not None and until == cycles and sum(map(len, got)) >= expect[rnd]:
                until = min(cycles, cycle + 1 + drain)
        for s in range(ranks):
            bench.set(f"{ins}.{s}.valid", 0)
        out.append(got)
        left.append(sum(map(len, queues)) + sum(o is not None for o in offered))
        stalled.append(hung)
        held.append([s for s in range(ranks) if offered[s] is not None])
    values = {}
    for name in counters:
        values[name] = await bench.get(name)
    return {"got": out, "counters": values, "left": left, "stuck": stalled, "held": held}


def deliveries(queues):
    """Flits the receivers must see for ``queues``: a multicast's dies, one for a unicast,
    one per reduction group."""
    n, groups = 0, set()
    for q in queues:
        for f in q:
            if f["red"]:
                groups.add((f["dst"], f["addr"]["block"]))
            else:
                n += bin(f["mask"]).count("1") if f["mcast"] else 1
    return n + len(groups)


def check_multicast(got, sent):
    """Raise AssertionError unless every serial of ``sent`` reached exactly the dies of its
    mask, once each, multicast copies naming only their die, in order per source and kind."""
    ranks = len(got)
    serials = {sn for sn, _ in sent}
    for p in range(ranks):
        mine = [f for f in got[p] if f["data"] in serials and not f["red"]]
        want = sorted(sn for sn, mask in sent if mask >> p & 1)
        assert sorted(f["data"] for f in mine) == want, f"die {p}: deliveries"
        for f in mine:
            assert not f["mcast"] or f["mask"] == 1 << p, f"die {p}: a copy names other dies"
        for s in range(ranks):
            for kind in (0, 1):       # a multicast may take another tier-2 plane than a unicast
                order = [f["data"] for f in mine if f["src"] == s and f["mcast"] == kind]
                assert order == sorted(order), f"die {p}: source {s} out of order"


def check_reductions(got, want, *, header_bits, lanes):
    """Raise AssertionError unless each group of ``want`` was delivered once, at its die, with
    its count, its header and the exact sums, and no other reduction flit arrived."""
    seen = {}
    for p, flits in enumerate(got):
        for f in flits:
            if not f["red"]:
                continue
            assert f["dst"] == p, f"die {p}: a result for die {f['dst']}"
            key = (p, f["block"])
            assert key not in seen, f"group {key} delivered twice"
            seen[key] = f
    assert set(seen) == set(want), (sorted(set(want) - set(seen)), sorted(set(seen) - set(want)))
    for key, (mask, n, header, sums) in want.items():
        f = seen[key]
        h, vals = unpack(f["data"], header_bits, lanes)
        assert (f["mask"], f["count"], h, vals) == (mask, n, header, sums), key
