"""TrafficFabric: hardware uniform traffic flows, ``done`` timing, parameter errors."""

import pytest
from amaranth.hdl import Fragment

from epfabric.sim.tb.traffic import TrafficFabric, traffic_seed, xorshift32
from epfabric.sim.lab.experiments.fabric_speed import speed_intent, traffic_spec
from epfabric.sw.presets import get_preset
from rejected import rejected
from utils import run, tiny_timing

TINY = get_preset("tiny")
TIMING = tiny_timing()
SHAPE = {"preset": "tiny", "dies_per_npu": 2, "npus_per_board": 2, "boards": 1}
RANKS = 4


def test_uniform_traffic_flows_and_drains():
    spec = traffic_spec(**SHAPE)
    top = TrafficFabric(TIMING, 2, 2, 1)
    Fragment.get(top, None)
    capacity = top.capacity()
    result, _ = run(spec, speed_intent, {"cycles": 300, "ranks": RANKS, "drain": 200})
    assert result["cycles"] == 300 and result["cycle_reg"] == 300
    at_done = result["at_done"]
    # Received == sent - in flight, and in flight never exceeds what the fabric holds.
    assert 0 <= at_done["sent"] - at_done["received"] <= capacity
    assert result["received"] == result["sent"] == sum(result["sent_per_rank"])
    assert sum(result["received_per_rank"]) == result["received"]
    assert all(n > 0 for n in result["received_per_rank"])
    assert result["misrouted"] == 0
    # Saturating: every source runs near the link rate (0.75 blocks/cycle in `tiny`).
    rate = TINY.bytes_per_cycle() / TINY.block_bytes
    for n in result["sent_per_rank"]:
        assert 0.6 * rate * 300 <= n <= rate * 300 + 3


async def done_timing(bench, cycles):
    """Cycles from the start edge to ``done``, checked one cycle at a time, twice."""
    seen = []
    for _ in range(2):
        bench.set("cycles_to_run", cycles)
        bench.set("start", 1)
        await bench.tick()
        bench.set("start", 0)
        bench.set("cycles_to_run", 0)   # sampled with start: later changes are ignored
        n = 0
        while not await bench.get("done"):
            await bench.tick()
            n += 1
            assert n <= cycles + 5
        seen.append([n, await bench.get("cycle")])
        await bench.tick(3)
        assert await bench.get("done") == 1   # stays high until the next start
    return seen


@pytest.mark.parametrize("cycles", [0, 1, 17])
def test_done_rises_after_cycles_to_run(cycles):
    result, _ = run(traffic_spec(**SHAPE), done_timing, {"cycles": cycles})
    assert result == [[cycles, cycles]] * 2


def reference_picks(n, r, k):
    """Destinations of rank ``r``'s first ``k`` flits as the docstring specifies them (a histogram)."""
    x, hist = traffic_seed(r), [0] * n
    for _ in range(k):
        off = ((x >> 16) * (n - 1)) >> 16
        hist[(r + 1 + off) % n] += 1
        x = xorshift32(x)
    return hist


def test_seeds_distinct_and_the_specified_pick_is_uniform():
    """The specification (xorshift32 + multiply-shift) on 32 ranks: uniform over the others."""
    seeds = [traffic_seed(r) for r in range(128)]
    assert len(set(seeds)) == 128 and 0 not in seeds
    hist = reference_picks(32, 5, 31_000)
    assert hist[5] == 0
    assert all(900 <= hist[d] <= 1100 for d in range(32) if d != 5)


def test_hardware_destinations_are_the_specified_ones():
    """What the hardware's sources really send, read at every sink after a drain.

    Per source, the histogram of destinations delivered equals the
    specification's for the number of flits the source sent — so the
    hardware never picks itself, and its picks are as uniform as the
    reference above; every flit reached the sink of its ``dst``.
    """
    from amaranth.sim import Simulator
    dut = TrafficFabric(TIMING, 2, 2, 1)
    n, run_cycles, drain = dut.ranks, 1200, 100
    out = {}

    async def bench(ctx):
        ctx.set(dut.cycles_to_run, run_cycles)
        ctx.set(dut.start, 1)
        await ctx.tick()
        ctx.set(dut.start, 0)
        hist, wrong = [[0] * n for _ in range(n)], 0
        for _ in range(run_cycles + drain):
            for d in range(n):          # sinks are always ready: valid is a delivery
                if ctx.get(dut.fabric.rx[d].valid):
                    flit = ctx.get(dut.fabric.rx[d].payload)
                    hist[flit.src][flit.dst] += 1
                    wrong += flit.dst != d
            await ctx.tick()
        out.update(hist=hist, wrong=wrong, sent=[ctx.get(dut.sent[r]) for r in range(n)])

    sim = Simulator(dut)
    sim.add_clock(1e-9)
    sim.add_testbench(bench)
    sim.run()
    assert out["wrong"] == 0
    for r in range(n):
        assert sum(out["hist"][r]) == out["sent"][r] > 0.6 * run_cycles * 0.75   # all drained
        assert out["hist"][r] == reference_picks(n, r, out["sent"][r]), r
        assert out["hist"][r][r] == 0


@pytest.mark.parametrize("args, kwargs, exc, match", [
    (("tiny", 2, 2, 1), {}, TypeError, r"timing must be a FabricTiming"),
    ((TINY, 2, 2, 1), {}, TypeError, r"timing must be a FabricTiming"),
    ((tiny_timing("star"), 2, 2, 1), {}, ValueError, r"timing.hops lacks direct, t2_up, t2_down"),
    ((TIMING, 0, 2, 1), {}, ValueError, r"dies_per_npu must be >= 1, not 0"),
    ((TIMING, "2", 2, 1), {}, TypeError, r"dies_per_npu must be an integer, not '2'"),
    ((TIMING, 1, 1, 1), {}, ValueError, r"at least 2 dies"),
    ((TIMING, 2, 2, 1), {"data_bytes": 0}, ValueError, r"data_bytes must be >= 1, not 0"),
    ((TIMING, 2, 2, 1), {"data_bytes": 2.0}, TypeError, r"data_bytes must be an integer, not 2.0"),
    ((TIMING, 2, 2, 1), {"switch_depth": 1}, ValueError, r"switch_depth must be >= 2, not 1"),
    ((TIMING, 2, 2, 1), {"counter_width": 8}, ValueError,
     r"counter_width must be in \[16, 64\], not 8"),
    ((TIMING, 2, 2, 1), {"counter_width": None}, TypeError,
     r"counter_width must be an integer, not None"),
])
def test_bad_parameters(args, kwargs, exc, match):
    with pytest.raises(exc, match=match):
        rejected(TrafficFabric, *args, **kwargs)


def test_factory_rejects_unknown_preset():
    with pytest.raises(ValueError, match=r"unknown preset 'nope'"):
        traffic_spec(preset="nope").build()


@pytest.mark.parametrize("params, match", [
    ({"preset": "tiny", "dies_per_npu": 2, "npus_per_board": 2, "boards": 3},
     r"boards must be in \[1, 2\], not 3"),
    ({"preset": "incmoe-testbed", "dies_per_npu": 1, "npus_per_board": 1, "boards": 1},
     r"preset 'incmoe-testbed' has no intra-NPU and two-hop latencies; it cannot build a superpod"),
])
def test_factory_checks_the_preset(params, match):
    """The preset's shape maxima and topology are the factory's to check (the hardware has none)."""
    with pytest.raises(ValueError, match=match):
        traffic_spec(**params).build()


def test_hardware_takes_any_shape():
    top = TrafficFabric(TIMING, 2, 2, 3)
    Fragment.get(top, None)
    assert top.ranks == 12


@pytest.mark.slow
@pytest.mark.verilator
def test_same_counts_on_verilator():
    """The hardware traffic is deterministic: identical counts on pysim and Verilator (-O0)."""
    args = {"cycles": 300, "ranks": RANKS, "drain": 200}
    ref, ref_cycles = run(traffic_spec(**SHAPE), speed_intent, args)
    out, cycles = run(traffic_spec(**SHAPE), speed_intent, args, simulator="verilator")
    keys = ("cycles", "cycle_reg", "sent", "received", "misrouted", "at_done",
            "sent_per_rank", "received_per_rank")
    assert {k: out[k] for k in keys} == {k: ref[k] for k in keys}
    assert cycles == ref_cycles
