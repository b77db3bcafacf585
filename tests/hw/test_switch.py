"""Switch: routing table, round-robin per output, backpressure, counters, per-flow order."""

import random

import pytest
from amaranth.hdl import Fragment

from epfabric.hw.switch import SWITCH_LATENCY, Switch
from epfabric.sim.backends import SimulationError
from rejected import rejected
from utils import ComponentSpec, run


def spec(**params):
    return ComponentSpec("epfabric.hw.switch:Switch",
                         {"ports": 4, "depth": 4, "data_bits": 16, "counter_width": 16, **params})


async def flows_intent(bench, ports, flows, cycles, seed=0, stall_p=0.0, offer_p=1.0,
                       routes=None):
    """Each flow (src port, dst) streams; receivers stall at random. Returns per-flow data received,
    per-output counts, counters and the first arrival cycle."""
    rng = random.Random(seed)
    routes = routes or list(range(ports))
    nxt = {tuple(f): 0 for f in flows}
    by_src = {}
    for s, d in flows:
        by_src.setdefault(s, []).append(d)
    offer = {}
    got = {f"{s}-{d}": [] for s, d in flows}
    first = None
    for _ in range(cycles):
        for s, dsts in by_src.items():
            if s not in offer and rng.random() < offer_p:
                d = dsts[rng.randrange(len(dsts))]
                offer[s] = d
                bench.set(f"i_stream.{s}.payload", {"dst": d, "src": s, "data": nxt[(s, d)]})
                nxt[(s, d)] += 1
            bench.set(f"i_stream.{s}.valid", int(s in offer))
        readies = {p: int(rng.random() >= stall_p) for p in range(ports)}
        for p, r in readies.items():
            bench.set(f"o_stream.{p}.ready", r)
        accepted = [s for s in offer if await bench.get(f"i_stream.{s}.ready")]
        for p in range(ports):
            if readies[p] and await bench.get(f"o_stream.{p}.valid"):
                flit = bench.decode(f"o_stream.{p}.payload", await bench.get(f"o_stream.{p}.payload"))
                if routes[flit.dst] != p:
                    raise SimulationError(f"flit for {flit.dst} left on port {p}")
                got[f"{flit.src}-{flit.dst}"].append(flit.data)
                first = bench.cycle if first is None else first
        await bench.tick()
        for s in accepted:
            del offer[s]
    counters = {name: [await bench.get(f"{name}.{p}") for p in range(ports)]
                for name in ("o_blocks", "o_stalls", "i_stalls")}
    return {"got": got, "counters": counters, "first": first,
            "sent": {f"{s}-{d}": n for (s, d), n in nxt.items()}}


def test_latency_and_routing_table():
    res, _ = run(spec(routes=[3, 3, 0, 1]), flows_intent,
                 {"ports": 4, "flows": [[2, 0]], "cycles": 6, "routes": [3, 3, 0, 1]})
    assert res["first"] == SWITCH_LATENCY
    assert res["got"]["2-0"] == [0, 1, 2, 3]
    assert res["counters"]["o_blocks"] == [0, 0, 0, 4]


def test_permutation_runs_at_full_rate():
    flows = [[0, 2], [1, 3], [2, 1], [3, 0]]
    res, _ = run(spec(), flows_intent, {"ports": 4, "flows": flows, "cycles": 102})
    for s, d in flows:
        assert res["got"][f"{s}-{d}"] == list(range(100))  # one per cycle after the 2-cycle latency
    assert res["counters"]["i_stalls"] == [0, 0, 0, 0]


def test_round_robin_shares_an_output_equally_and_backpressures():
    flows = [[0, 3], [1, 3], [2, 3]]
    res, _ = run(spec(), flows_intent, {"ports": 4, "flows": flows, "cycles": 302})
    counts = [len(res["got"][f"{s}-3"]) for s, _d in flows]
    assert sum(counts) == 300 and max(counts) - min(counts) <= 1
    for s, _d in flows:   # nothing lost, in order
        assert res["got"][f"{s}-3"] == list(range(len(res["got"][f"{s}-3"])))
    stalls = res["counters"]["i_stalls"]
    assert all(st > 150 for st in stalls[:3])  # each sender held off ~2/3 of the time
    assert res["counters"]["o_blocks"][3] == 300


def test_random_traffic_with_stalling_receivers_loses_nothing():
    flows = [[s, d] for s in range(4) for d in range(4)]
    res, _ = run(spec(depth=2), flows_intent,
                 {"ports": 4, "flows": flows, "cycles": 600, "seed": 7, "stall_p": 0.5,
                  "offer_p": 0.8})
    total = 0
    for key, data in res["got"].items():
        assert data == list(range(len(data))), key          # per-flow order, exactly once
        assert res["sent"][key] - len(data) <= 2 + 4 * 2      # the rest is still buffered
        total += len(data)
    assert res["counters"]["o_stalls"] != [0, 0, 0, 0]
    assert sum(res["counters"]["o_blocks"]) == total


AGREE_ARGS = {"ports": 4, "flows": [[s, d] for s in range(4) for d in range(4)], "cycles": 120,
              "seed": 11, "stall_p": 0.3, "offer_p": 0.7}


def _check_flows(res, depth=4):
    """Independent of any simulator: per-flow order, nothing lost, counters add up."""
    total = 0
    for key, data in res["got"].items():
        assert data == list(range(len(data))), key          # in order, exactly once
        assert 0 <= res["sent"][key] - len(data) <= 2 + 4 * depth, key   # the rest is buffered
        total += len(data)
    assert sum(res["counters"]["o_blocks"]) == total
    assert res["first"] == SWITCH_LATENCY


def test_amaranth_run_of_the_agreement_case_loses_nothing():
    res, cycles = run(spec(), flows_intent, AGREE_ARGS)
    _check_flows(res)
    assert cycles == AGREE_ARGS["cycles"]


def test_icarus_and_verilator_agree_with_amaranth(hdl_simulator):
    ref = run(spec(), flows_intent, AGREE_ARGS)
    got = run(spec(), flows_intent, AGREE_ARGS, simulator=hdl_simulator)
    _check_flows(got[0])
    assert got == ref


@pytest.mark.parametrize("params, exc, match", [
    ({"ports": 1}, ValueError, r"ports must be >= 2, not 1"),
    ({"ports": 4.0}, TypeError, r"ports must be an integer, not 4.0"),
    ({"ports": 4, "routes": [0, 4]}, ValueError, r"routes\[1\] must be in \[0, 3\], not 4"),
    ({"ports": 4, "routes": [0, "1"]}, TypeError, r"routes\[1\] must be an integer, not '1'"),
    ({"ports": 4, "routes": []}, ValueError, r"routes must name a port for at least one destination"),
    ({"ports": 4, "depth": 1}, ValueError, r"depth must be >= 2, not 1"),
    ({"ports": 4, "counter_width": 0}, ValueError, r"counter_width must be >= 1, not 0"),
    ({"ports": 4, "counter_width": True}, TypeError, r"counter_width must be an integer, not True"),
])
def test_validation(params, exc, match):
    with pytest.raises(exc, match=match):
        rejected(Switch, **params)


def test_deep_input_buffers_are_memories_one_per_input():
    """Above REGISTER_RING_MAX entries each input's ring is a Memory of its own (two inputs used
    to clash on one submodule name)."""
    from amaranth.back import rtlil
    from epfabric.hw.ring import REGISTER_RING_MAX
    text = rtlil.convert(Switch(ports=3, depth=2 * REGISTER_RING_MAX))
    assert all(f"in{i}_ring" in text for i in range(3))


def test_routes_must_fit_dst_field():
    from epfabric.hw.link import flit_layout
    with pytest.raises(ValueError, match=r"routes has 5 destinations but the payload's dst field has only 2 bits"):
        rejected(Switch, ports=2, routes=[0, 1, 0, 1, 0], payload=flit_layout(ranks=4, data_bits=8))


def test_a_planar_switchs_equal_planes_are_one_module_built_once(monkeypatch):
    """Planes of one width share a module: parts() builds it once (an object built and then
    dropped is an Amaranth UnusedElaboratable warning on native builds of wide switches)."""
    from epfabric.hw import switch
    from epfabric.hw.link import flit_layout
    built = []

    class Counted(switch.SwitchDataPlane):
        def __init__(self, **params):
            built.append(params["width"])
            super().__init__(**params)
    monkeypatch.setattr(switch, "SwitchDataPlane", Counted)
    planar = switch.PlanarSwitch(ports=2, routes=[0, 1], depth=2, counter_width=8,
                                 payload=flit_layout(ranks=2, data_bits=224), plane_bits=64)
    parts = planar.parts("s")
    assert sorted(parts) == ["s_ctl", "s_dp32", "s_dp64"]
    assert sorted(built) == [32, 64]
    for part in parts.values():         # each is converted: none is built to be dropped
        Fragment.get(part, None)


def test_one_hot_select_is_the_granted_value_or_zero():
    """The outputs' select (``one_hot_select``): the value whose grant bit is set, 0 for none."""
    from amaranth.hdl import Module, Signal
    from amaranth.sim import Simulator
    from epfabric.hw.switch import one_hot_select
    m = Module()
    grant = Signal(4)
    values = [Signal(8, name=f"v{i}", init=0x11 * (i + 1)) for i in range(4)]
    sel = one_hot_select(m, grant, values, name="sel")
    seen = {}

    async def bench(ctx):
        for g in (0, 1, 2, 4, 8):
            ctx.set(grant, g)
            seen[g] = ctx.get(sel)

    sim = Simulator(m)
    sim.add_testbench(bench)
    sim.run()
    assert seen == {0: 0, 1: 0x11, 2: 0x22, 4: 0x33, 8: 0x44}
