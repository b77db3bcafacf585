"""Topologies: class latencies, fair sharing, non-blocking permutations, scoreboarded random traffic."""

import hashlib
import random

import pytest
from amaranth.hdl import Fragment
from amaranth.lib import data

from epfabric.hw.switch import SWITCH_LATENCY
from epfabric.hw.topology import (MAX_RANKS, STAR_HOPS, SUPERPOD_HOPS, TOPOLOGIES, FabricTiming,
                                   check_topology, star, superpod, superpod_distance,
                                   topology_ranks)
from epfabric.sim.backends import SimulationError
from epfabric.sw.presets import get_preset
from epfabric.sim.tb.inc_traffic import (check_multicast, check_reductions, inc_fabric,
                                         multicast_queues, reduction_queues, traffic_intent)
from utils import ComponentSpec, require_simulator, run, simulators, tiny_timing

TINY = get_preset("tiny")
TIMING = tiny_timing()       # the tiny preset's superpod timing (cycles only)
RANKS = 8   # the calibration fabric of `tiny`: 2 dies/NPU, 2 NPUs/board, 2 boards


def spec(data_bytes=2):
    return ComponentSpec("epfabric.sim.lab.experiments.calibrate:calibration_fabric",
                         {"preset": "tiny", "data_bytes": data_bytes})


async def lone_latencies(bench, pairs, ranks=RANKS, attach=0, timeout=2000):
    """Cycles of a lone block for each ``(src, dst)``; ``dst >= ranks`` is attach port ``dst - ranks``."""
    port = {d: f"rx.{d}" if d < ranks else f"attach_rx.{d - ranks}" for d in range(ranks + attach)}
    for p in port.values():
        bench.set(f"{p}.ready", 1)
    out = []
    for src, dst in pairs:
        bench.set(f"tx.{src}.payload", {"dst": dst, "src": src, "data": 5})
        bench.set(f"tx.{src}.valid", 1)
        start = bench.cycle
        await bench.tick()
        bench.set(f"tx.{src}.valid", 0)
        while not await bench.get(f"{port[dst]}.valid"):
            if bench.cycle - start > timeout:
                raise SimulationError(f"block {src} -> {dst} never arrived")
            await bench.tick()
        out.append(bench.cycle - start)
        await bench.tick()
    return out


def test_every_pair_has_its_class_latency():
    distance = superpod_distance(2, 2)
    pairs = [(s, d) for s in range(RANKS) for d in range(RANKS) if s != d]
    got, _ = run(spec(), lone_latencies, {"pairs": pairs})
    want = TINY.latency_cycles()
    assert got == [want[distance(s, d)] for s, d in pairs]


async def streams(bench, flows, cycles, warmup):
    """Every flow's source streams to its destination; count arrivals per flow after warmup."""
    for r in range(RANKS):
        bench.set(f"rx.{r}.ready", 1)
    seq = {tuple(f): 0 for f in flows}
    by_src = {}
    for s, d in flows:
        by_src.setdefault(s, []).append(d)
    turn = {s: 0 for s in by_src}
    counts = {f"{s}-{d}": 0 for s, d in flows}
    expect = {f"{s}-{d}": 0 for s, d in flows}
    dsts = sorted({d for _s, d in flows})
    for _ in range(cycles):
        offered = {}
        for s, ds in by_src.items():
            d = ds[turn[s] % len(ds)]
            bench.set(f"tx.{s}.payload", {"dst": d, "src": s, "data": seq[(s, d)] & 0xFFFF})
            bench.set(f"tx.{s}.valid", 1)
            offered[s] = d
        acc = [s for s in offered if await bench.get(f"tx.{s}.ready")]
        for d in dsts:
            if await bench.get(f"rx.{d}.valid"):
                f = bench.decode(f"rx.{d}.payload", await bench.get(f"rx.{d}.payload"))
                key = f"{f.src}-{d}"
                if f.data != expect[key] & 0xFFFF:
                    raise SimulationError(f"flow {key}: got {f.data}, expected {expect[key]}")
                expect[key] += 1
                if bench.cycle >= warmup:
                    counts[key] += 1
        await bench.tick()
        for s in acc:
            seq[(s, offered[s])] += 1
            turn[s] += 1
    return counts


def test_two_senders_share_a_receiver_and_a_permutation_runs_at_full_rate():
    per_cycle = TINY.bytes_per_cycle() / TINY.block_bytes          # blocks per cycle per link
    cycles, warmup = 460, 60
    window = cycles - warmup
    # Board 0: a permutation of disjoint one-hop pairs. Board 1: an intra and a one-hop sender
    # into rank 4 (arbitration in rank 4's die router); 7 -> 5 runs alongside.
    perm = [[0, 2], [1, 3], [2, 0], [3, 1]]
    fan_in_mixed = [[5, 4], [6, 4]]
    res, _ = run(spec(), streams, {"flows": perm + fan_in_mixed + [[7, 5]],
                                    "cycles": cycles, "warmup": warmup})
    for s, d in perm:
        assert res[f"{s}-{d}"] / window == pytest.approx(float(per_cycle), rel=0.02)
    for s, d in fan_in_mixed:
        assert res[f"{s}-{d}"] / window == pytest.approx(float(per_cycle) / 2, rel=0.05)
    # two one-hop senders into one receiver (arbitration in the tier-1 switch)
    res, _ = run(spec(), streams, {"flows": [[0, 2], [1, 2], [4, 7], [5, 7]],
                                    "cycles": cycles, "warmup": warmup})
    for key in ("0-2", "1-2", "4-7", "5-7"):
        assert res[key] / window == pytest.approx(float(per_cycle) / 2, rel=0.05)


async def random_traffic(bench, blocks, pattern, seed, stall_p, offer_p, hot=0, timeout=20000):
    """Every rank sends `blocks` blocks to random destinations (uniform, or hot-spot: half to
    `hot`); receivers stall at random. Scoreboard: exactly once, per-flow order, no deadlock."""
    rng = random.Random(seed)
    plan = {}
    for s in range(RANKS):
        dsts = []
        for _ in range(blocks):
            if pattern == "hotspot" and rng.random() < 0.5 and s != hot:
                dsts.append(hot)
            else:
                dsts.append(rng.choice([d for d in range(RANKS) if d != s]))
        plan[s] = dsts
    sent = {s: 0 for s in range(RANKS)}
    seq = {}
    expect = {}
    offer = {}
    delivered = 0
    digest = hashlib.sha256()
    total = RANKS * blocks
    start = bench.cycle
    while delivered < total:
        if bench.cycle - start > timeout:
            raise SimulationError(f"deadlock: {delivered}/{total} delivered by cycle {bench.cycle}")
        for s in range(RANKS):
            if s not in offer and sent[s] < blocks and rng.random() < offer_p:
                d = plan[s][sent[s]]
                n = seq.get((s, d), 0)
                seq[(s, d)] = n + 1
                offer[s] = d
                bench.set(f"tx.{s}.payload", {"dst": d, "src": s, "data": n})
            bench.set(f"tx.{s}.valid", int(s in offer))
        ready = {d: int(rng.random() >= stall_p) for d in range(RANKS)}
        for d, r in ready.items():
            bench.set(f"rx.{d}.ready", r)
        acc = [s for s in offer if await bench.get(f"tx.{s}.ready")]
        for d in range(RANKS):
            if ready[d] and await bench.get(f"rx.{d}.valid"):
                f = bench.decode(f"rx.{d}.payload", await bench.get(f"rx.{d}.payload"))
                if f.dst != d:
                    raise SimulationError(f"block for {f.dst} delivered to {d}")
                n = expect.get((f.src, d), 0)
                if f.data != n:
                    raise SimulationError(f"flow {f.src}->{d}: block {f.data} arrived, expected {n}")
                expect[(f.src, d)] = n + 1
                delivered += 1
                digest.update(f"{bench.cycle},{f.src},{d},{n};".encode())
        await bench.tick()
        for s in acc:
            sent[s] += 1
            del offer[s]
    await bench.tick(30)   # nothing else may arrive: every block exactly once
    extra = [d for d in range(RANKS) if await bench.get(f"rx.{d}.valid")]
    if extra or expect != seq:
        raise SimulationError(f"extra deliveries at {extra} or missing flows")
    counters = [await bench.get(f"rx_blocks.{d}") for d in range(RANKS)]
    links = {kind: [await bench.get(f"link_{what}.{k}") for what in ("blocks", "small")]
             for k, kind in enumerate(SUPERPOD_HOPS)}
    return {"delivered": delivered, "digest": digest.hexdigest(), "rx_blocks": counters,
            "end": bench.cycle - start, "links": links, "plan": [plan[s] for s in range(RANKS)]}


def plan_links(plan):
    """``{kind: [blocks, 0]}``: what the links of each kind must count for the blocks of
    ``plan`` (``plan[src]``: its destinations), from the paths of sw/ubep/traffic.py (a
    payload without a ``small`` field counts every flit as a block)."""
    from epfabric.sw.ubep.traffic import path_links
    out = {kind: [0, 0] for kind in SUPERPOD_HOPS}
    for s, dsts in enumerate(plan):
        for d in dsts:
            for kind in path_links(s, d, (2, 2, 2)):
                out[kind][0] += 1
    return out


@pytest.mark.parametrize("pattern", ["uniform", "hotspot"])
def test_random_traffic_scoreboard(pattern):
    res, cycles = run(spec(), random_traffic,
                      {"blocks": 40, "pattern": pattern, "seed": 3, "stall_p": 0.4,
                       "offer_p": 0.8, "hot": 5})
    assert res["delivered"] == 8 * 40 and sum(res["rx_blocks"]) == 8 * 40
    # every block counted once on each link of its path, whatever the stalls
    assert res["links"] == plan_links(res["plan"])
    assert all(res["links"][kind][0] > 0 for kind in SUPERPOD_HOPS)     # every kind is used


def test_cycle_counts_do_not_depend_on_data_bytes():
    args = {"blocks": 12, "pattern": "uniform", "seed": 9, "stall_p": 0.3, "offer_p": 0.9}
    assert run(spec(2), random_traffic, args) == run(spec(32), random_traffic, args)


# Icarus: its own 32-die fabric (15 s of a cold `make test`), `slow`; test_switch and test_link
# run the blocks on Icarus
@pytest.mark.parametrize("simulator", simulators("pysim", "icarus", "verilator", slow=("icarus",)),
                         indirect=True)
def test_random_traffic_on_three_simulators(simulator):
    """The scoreboard (exactly once, per-flow order, no deadlock) on every simulator; the Verilog
    simulators also deliver in Amaranth's cycles (the digest covers every arrival's cycle)."""
    args = {"blocks": 6, "pattern": "hotspot", "seed": 21, "stall_p": 0.3, "offer_p": 0.9, "hot": 2,
            "timeout": 2000}
    got = run(spec(), random_traffic, args, simulator=simulator)
    assert got[0]["delivered"] == RANKS * 6 and sum(got[0]["rx_blocks"]) == RANKS * 6
    if simulator != "pysim":
        assert got == run(spec(), random_traffic, args)


def star_fabric(*, one_hop_ns, ranks, attach):
    """A star of the INC testbed's timing with a shorter hop (a ComponentSpec factory)."""
    p = get_preset("incmoe-testbed").replace(latency_one_hop_ns=one_hop_ns)
    return star(p.fabric_timing(), ranks, attach=attach, data_bytes=2)


def test_star_latency_and_attach_ports():
    """A lone block takes the preset's one-hop latency rank to rank, and up + switch to the engine."""
    params = {"one_hop_ns": 20.0, "ranks": 4, "attach": 1}
    fabric = star_fabric(**params)
    Fragment.get(fabric, None)
    assert fabric.distance(0, 3) == "one_hop" and fabric.distance(1, 1) is None
    assert "attach_tx" in fabric.signature.members and "attach_rx" in fabric.signature.members
    assert fabric.payload["dst"].shape == 3   # 4 ranks + 1 engine address
    p = get_preset("incmoe-testbed").replace(latency_one_hop_ns=20.0)
    one_hop, up = p.latency_cycles()["one_hop"], p.fabric_timing().hops["up"]
    pairs = [(s, d) for s in range(4) for d in range(4) if s != d] + [(2, 4)]
    got, _ = run(ComponentSpec("test_topology:star_fabric", params), lone_latencies,
                 {"pairs": pairs, "ranks": 4, "attach": 1})
    assert one_hop == 20
    assert got == [one_hop] * 12 + [up + SWITCH_LATENCY]


def test_preset_timing_is_cycles_only():
    """A preset makes the timing; the builders see latencies in cycles and the link rate."""
    num, den = TINY.rate()
    assert TIMING == FabricTiming(hops=TINY.hop_cycles("superpod"), rate_num=num, rate_den=den,
                                  block_bytes=TINY.block_bytes, small_bytes=TINY.control_bytes)
    assert set(TIMING.hops) == set(SUPERPOD_HOPS)
    assert set(tiny_timing("star").hops) == set(STAR_HOPS)
    assert TIMING.need(("up", "down")) == {"up": TIMING.hops["up"], "down": TIMING.hops["down"]}
    # a star preset cannot make a superpod timing; any preset makes a star timing
    with pytest.raises(ValueError, match=r"preset 'incmoe-testbed' has no intra-NPU"):
        get_preset("incmoe-testbed").fabric_timing("superpod")
    assert set(get_preset("incmoe-testbed").fabric_timing().hops) == set(STAR_HOPS)


@pytest.mark.parametrize("args, exc, match", [
    ((0, 2, 2), ValueError, r"dies_per_npu must be >= 1, not 0"),
    ((2, "2", 1), TypeError, r"npus_per_board must be an integer, not '2'"),
    ((2, 2, 1.0), TypeError, r"boards must be an integer, not 1.0"),
    ((1, 1, 1), ValueError, r"a superpod needs at least 2 dies"),
])
def test_superpod_shape_errors(args, exc, match):
    with pytest.raises(exc, match=match):
        superpod(TIMING, *args, data_bytes=2)


def test_shape_maxima_are_the_presets_not_the_fabrics():
    """superpod() takes any shape; a preset's maxima are checked by Preset.check_shape."""
    from epfabric.hw.instances import Sharing
    fabric = superpod(TIMING, 2, 2, 3, data_bytes=2, shared=Sharing(has_reset=False))
    Fragment.get(fabric, None)      # its links and switches are instances: cheap
    assert fabric.ranks == 12
    TINY.check_shape(2, 2, 2)
    with pytest.raises(ValueError, match=r"boards must be in \[1, 2\], not 3"):
        TINY.check_shape(2, 2, 3)
    with pytest.raises(ValueError, match=r"npus_per_board must be in \[1, 2\], not 3"):
        TINY.check_shape(2, 3, 1)
    with pytest.raises(TypeError, match=r"dies_per_npu must be an integer, not '2'"):
        TINY.check_shape("2", 2, 1)


def test_other_errors():
    with pytest.raises(ValueError, match=r"n must be >= 2, not 1"):
        star(TIMING, 1, data_bytes=2)
    with pytest.raises(TypeError, match=r"n must be an integer, not 2.0"):
        star(TIMING, 2.0, data_bytes=2)
    with pytest.raises(ValueError, match=r"attach must be >= 0, not -1"):
        star(TIMING, 2, attach=-1, data_bytes=2)
    with pytest.raises(TypeError, match=r"timing must be a FabricTiming"):
        superpod(TINY, 2, 2, 2, data_bytes=2)
    with pytest.raises(TypeError, match=r"timing must be a FabricTiming"):
        star("tiny", 2, data_bytes=2)
    with pytest.raises(ValueError,
                       match=r"timing.hops lacks direct, t2_up, t2_down \(has up, down\)"):
        superpod(tiny_timing("star"), 2, 2, 2, data_bytes=2)
    with pytest.raises(ValueError,
                       match=r"give payload \(a flit layout\) or data_bytes, not neither"):
        superpod(TIMING, 2, 2, 2)
    with pytest.raises(ValueError, match=r"data_bytes must be >= 1, not 0"):
        star(TIMING, 2, data_bytes=0)
    with pytest.raises(TypeError, match=r"payload layout must have a 'dst' field"):
        superpod(TIMING, 2, 2, 2, payload=data.StructLayout({"x": 8}))
    with pytest.raises(ValueError, match=r"cannot address 8 destinations"):
        superpod(TIMING, 2, 2, 2, payload=data.StructLayout({"dst": 2, "d": 8}))


@pytest.mark.parametrize("fields, exc, match", [
    ({"hops": [1, 2]}, TypeError, r"hops must be a dict of link kind -> cycles"),
    ({"hops": {"up": -1}}, ValueError, r"hops\['up'\] must be >= 0, not -1"),
    ({"hops": {"up": 2.5}}, TypeError, r"hops\['up'\] must be an integer, not 2.5"),
    ({"rate_num": 0}, ValueError, r"rate_num must be >= 1, not 0"),
    ({"rate_den": "1"}, TypeError, r"rate_den must be an integer, not '1'"),
    ({"block_bytes": 0}, ValueError, r"block_bytes must be >= 1, not 0"),
])
def test_fabric_timing_errors(fields, exc, match):
    with pytest.raises(exc, match=match):
        FabricTiming(**fields)


def test_check_topology():
    assert TOPOLOGIES == ("superpod", "star")
    assert check_topology(["superpod", 2, 2, 2]) == ("superpod", 2, 2, 2)
    assert check_topology(("star", 4)) == ("star", 4)
    assert check_topology(("superpod", 2, 1, 1)) == ("superpod", 2, 1, 1)
    assert topology_ranks(("superpod", 2, 3, 4)) == 24 and topology_ranks(("star", 5)) == 5
    assert check_topology(("star", MAX_RANKS)) == ("star", MAX_RANKS)


@pytest.mark.parametrize("topology, exc, match", [
    ("star", TypeError, r"topology must be a tuple"),
    ((), TypeError, r"topology must be a tuple"),
    (("ring", 4), ValueError, r"topology kind must be one of superpod, star, not 'ring'"),
    (("star", 2, 2), ValueError, r"topology 'star' takes 1 size\(s\) \(n\)"),
    (("superpod", 2, 2), ValueError, r"topology 'superpod' takes 3 size\(s\)"),
    (("star", 1), ValueError, r"n must be >= 2, not 1"),
    (("star", 2.0), TypeError, r"n must be an integer, not 2.0"),
    (("superpod", 2, 0, 1), ValueError, r"npus_per_board must be >= 1, not 0"),
    (("superpod", 1, 1, 1), ValueError, r"a superpod needs at least 2 dies"),
    (("star", MAX_RANKS + 1), ValueError, r"has 257 ranks; at most 256 are addressable"),
])
def test_check_topology_errors(topology, exc, match):
    with pytest.raises(exc, match=match):
        check_topology(topology)


def test_a_switch_too_wide_for_an_instance_stays_inline():
    """A 16-port tier-1 switch of 4 KB flits has more output bits than an Amaranth Instance
    may have: a shared fabric keeps it a component and still shares the narrower switches."""
    from epfabric.hw.instances import Sharing
    from epfabric.hw.switch import Switch
    from epfabric.hw.topology import MAX_INSTANCE_OUTPUT_BITS, _output_bits
    payload = data.StructLayout({"dst": 4, "data": 4096})
    shared = superpod(tiny_timing(), 2, 4, 2, payload=payload, shared=Sharing(has_reset=False))
    Fragment.get(shared, None)
    wide = {k for k, sw in shared.switches.items()      # an instance's outputs are the switch's
            if _output_bits(sw.signature) > MAX_INSTANCE_OUTPUT_BITS}
    assert wide == {"t1_0", "t1_1"}
    parts = {k: p for k, p in shared.parts.items() if k.startswith("epf_switch")}
    assert parts and all(p.params["ports"] != 16 for p in parts.values())
    assert all(isinstance(shared.switches[k], Switch) for k in wide)
    assert all(not isinstance(shared.switches[k], Switch) for k in shared.switches if k not in wide)


# --- in-network switches (issue 31) ---------------------------------------------------------

INC_HEADER, INC_LANES = 0, 4       # inc_fabric's 64 data bits: four 16-bit lanes


def inc_spec():
    return ComponentSpec("epfabric.sim.tb.inc_traffic:inc_fabric",
                         {"preset": "tiny", "shape": [2, 2, 2], "window": 8, "data_bits": 64})


def test_subtrees_are_the_paths_through_each_switch():
    """Die switch r: every path to r (bit d for each d != r) and r's own paths out; tier-1 b:
    paths between NPUs that end on board b (it sums no group leaving its board, though those
    paths pass it: docs/concepts/inc-deadlock.md); tier-2 plane k: paths between boards to dies
    whose board-local index is k."""
    fabric = inc_fabric(preset="tiny", shape=(2, 2, 2))
    Fragment.get(fabric, None)
    tables = {name: sw.switch.subtree for name, sw in fabric.switches.items()}
    assert sorted(tables) == sorted([f"die{r}" for r in range(8)] + ["t1_0", "t1_1"]
                                    + [f"t2_{k}" for k in range(4)])
    npu, board = (lambda r: r // 2), (lambda r: r // 4)
    for s in range(RANKS):
        for d in range(RANKS):
            if d == s:
                continue
            on = {f"die{d}", f"die{s}"}
            if npu(d) != npu(s):
                on.add(f"t1_{board(s)}")
            if board(d) != board(s):
                on.add(f"t2_{s % 4}")
            for name, sub in tables.items():
                assert bool(sub[s] >> d & 1) == (name in on), (name, d, s)


def inc_traffic(rounds, cycles, seed, simulator="pysim"):
    return run(inc_spec(), traffic_intent, {"rounds": rounds, "cycles": cycles, "ranks": RANKS,
                                            "ins": "tx", "outs": "rx", "seed": seed,
                                            "counters": [f"link_blocks.{k}" for k in
                                                         range(len(SUPERPOD_HOPS))]},
               simulator=simulator)


def test_inc_superpod_multicast_and_reductions_under_stalls():
    """Multicasts, unicasts and reduction groups on 8 dies of 2 boards at once, every receiver
    stalling 30 % of cycles: each die gets each multicast of its set once, each group once
    with its exact sum; the tier-2 links carry one copy per board a multicast reaches across
    boards, and one block per contribution that leaves its board."""
    rng = random.Random(21)
    mq, sent = multicast_queues(rng, RANKS, 10)
    rq, want = reduction_queues(rng, RANKS, 24, window=8, lanes=INC_LANES)
    queues = [a + b for a, b in zip(mq, rq)]
    res, _ = inc_traffic([queues], 2500, seed=4)
    assert res["left"] == [0]
    got = res["got"][0]
    check_multicast(got, sent)
    check_reductions(got, want, header_bits=INC_HEADER, lanes=INC_LANES)
    # tier-2 crossings (t2_up): a flit crosses up once when it names a die of the other board
    # (a multicast's copies for it share the source's plane); a group's contributions from
    # the other board cross once each, on its destination's plane (a tier-1 switch sums no
    # group leaving its board: docs/concepts/inc-deadlock.md; the tier-2 plane sums them)
    board = lambda r: r // 4                                    # noqa: E731
    want_t2 = 0
    for s, q in enumerate(mq):
        for f in q:
            dests = [d for d in range(RANKS) if f["mask"] >> d & 1] if f["mcast"] else [f["dst"]]
            want_t2 += any(board(d) != board(s) for d in dests)
    for (dst, _block), (mask, *_rest) in want.items():
        want_t2 += sum(board(r) != board(dst) for r in range(RANKS) if mask >> r & 1)
    t2_up = res["counters"][f"link_blocks.{SUPERPOD_HOPS.index('t2_up')}"]
    assert t2_up == want_t2


@pytest.mark.slow      # a 44 s Verilator build; tests/hw/test_inc_switch.py compares the switch
def test_inc_superpod_is_the_same_on_verilator():
    rng = random.Random(3)
    mq, _ = multicast_queues(rng, RANKS, 4)
    rq, _ = reduction_queues(rng, RANKS, 10, window=8, lanes=INC_LANES)
    queues = [a + b for a, b in zip(mq, rq)]
    ref = inc_traffic([queues], 900, seed=2)
    require_simulator("verilator")
    assert ref[0]["left"] == [0]
    assert inc_traffic([queues], 900, seed=2, simulator="verilator") == ref
