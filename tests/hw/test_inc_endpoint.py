"""INC and ring endpoints (hw/inc_endpoint.py), AgrsSystem (hw/agrs_system.py): AG, RS = numpy.

N in {2, 4, 8}, random int32 data, uneven per-rank token counts, three
operations back to back in one simulation (counters never reset). The system
is driven through its host port only (:mod:`epfabric.sim.backends.host`):
buffers at :func:`agrs_memory_map`, row counts and flags at
:func:`agrs_control_map`, ``host_run`` to start and wait for ``stop``. The
``tiny`` preset's short links keep these on Amaranth's simulator fast; the
bandwidth figures use ``incmoe-testbed`` (tests/sim/test_agrs.py).
"""

import pytest

from epfabric.hw.agrs_system import AgrsSystem
from epfabric.hw.host import HostTarget
from epfabric.hw.inc_endpoint import IncEndpoint, RingEndpoint, agrs_control_map, agrs_memory_map
from epfabric.sim.backends.host import host_read, host_read_all, host_run, host_write
from epfabric.sw.kernels.agrs import make_case, reference
from rejected import rejected
from utils import ComponentSpec, run, tiny_timing

LANES = 1
HBM, CTRL = HostTarget.HBM.value, HostTarget.CTRL.value


def agrs_spec(*, ranks, mode, tmax, lanes=LANES, slots=32):
    """The AG/RS top of the JSON-facing factory (:func:`epfabric.sw.tops.agrs_system`), tiny."""
    return ComponentSpec("epfabric.sw.tops:agrs_system",
                         {"preset": "tiny", "ranks": ranks, "mode": mode, "tmax": tmax,
                          "lanes": lanes, "slots": slots})


def cases(ranks, tmax, n_ops, seed):
    import numpy as np
    rng = np.random.default_rng(seed)
    out = []
    for k in range(n_ops):
        counts = rng.integers(0 if k else 1, tmax + 1, size=ranks).tolist()
        counts[k % ranks] = tmax  # Tmax = max_r T_r
        out.append(make_case(ranks=ranks, tmax=tmax, lanes=LANES, counts=counts, seed=seed + k))
    return out


def word_addr(block, word=0):
    """Host byte address of word ``word`` (lane) of DataBlock ``block``."""
    return block << 9 | word << 2


def _u32(v):
    return int(v) & 0xFFFFFFFF


def _s32(v):
    return v - (1 << 32) if v >= 1 << 31 else v


async def agrs_ops(bench, ranks, tmax, lanes, cases, concurrent, barrier=False,
                   max_cycles=2_000):
    """Per case: load buffers and counts, run, read every rank back and compare with numpy.

    Counters are never reset between cases. Returns per case ``{"cycles",
    "done", "timeout", "errors"}`` plus the final cumulative counters.
    """
    mm, cm = agrs_memory_map(ranks, tmax), agrs_control_map(ranks)
    await host_write(bench, [[CTRL, 0, 0, cm["concurrent"], int(concurrent)],
                             [CTRL, 0, 0, cm["barrier"], int(barrier)]])
    ops = []
    for case in cases:
        counts = case["counts"]
        writes = []
        for r in range(ranks):
            for i, row in enumerate(case["ag_in"][r]):
                writes += [[HBM, r, 0, word_addr(mm["ag"] + r * tmax + i, k), _u32(v)]
                           for k, v in enumerate(row)]
            for a, row in enumerate(case["rs_in"][r]):
                writes += [[HBM, r, 0, word_addr(mm["rs"] + a, k), _u32(v)]
                           for k, v in enumerate(row)]
        writes += [[CTRL, 0, 0, cm["counts"] + q, c] for q, c in enumerate(counts)]
        await host_write(bench, writes)
        result = await host_run(bench, max_cycles)
        # read back: the whole gather buffer and the reduced shard, every rank at once
        gathered, out = reference(case, ranks=ranks, tmax=tmax)
        addrs = [word_addr(mm["ag"] + row, k) for row in gathered for k in range(lanes)]
        addrs += [word_addr(mm["out"] + i, k) for i in range(tmax) for k in range(lanes)]
        got = await host_read_all(bench, ranks, addrs)
        errors = 0
        for r in range(ranks):
            words = [_s32(w) for w in got[r]]
            rows = [words[j:j + lanes] for j in range(0, len(words), lanes)]
            errors += sum(rows[j] != want for j, want in enumerate(gathered.values()))
            errors += sum(rows[len(gathered) + i] != want for i, want in enumerate(out[r]))
        ops.append({**result, "errors": errors})
    counters = {"ag": [await bench.get(f"ag_count.{r}") for r in range(ranks)],
                "rs": [await bench.get(f"rs_count.{r}") for r in range(ranks)],
                "slot_stalls": await bench.get("slot_stalls")}
    return {"ops": ops, "counters": counters}


@pytest.mark.parametrize("mode", ["inc", "ring"])
@pytest.mark.parametrize("ranks, tmax, concurrent", [(2, 3, True), (4, 3, False), (8, 2, True)])
def test_ag_rs_equal_numpy_back_to_back(mode, ranks, tmax, concurrent):
    cs = cases(ranks, tmax, 3, seed=ranks)
    # an operation takes <= ~200 cycles here (8 ranks): a hang stops at 2000
    result, _ = run(agrs_spec(ranks=ranks, mode=mode, tmax=tmax), agrs_ops,
                    {"ranks": ranks, "tmax": tmax, "lanes": LANES, "cases": cs,
                     "concurrent": concurrent, "max_cycles": 2_000})
    assert [op["errors"] for op in result["ops"]] == [0, 0, 0]
    assert all(op["done"] and not op["timeout"] for op in result["ops"])
    # cumulative counters: everything received over the three operations
    for r in range(ranks):
        assert result["counters"]["ag"][r] == sum(sum(c["counts"]) - c["counts"][r] for c in cs)
        assert result["counters"]["rs"][r] == sum(c["counts"][r] for c in cs)


def test_barrier_costs_a_round_trip():
    cs = cases(4, 2, 2, seed=5)
    spec = agrs_spec(ranks=4, mode="inc", tmax=2)
    # each operation takes < 100 cycles: a broken engine stops at 1000, not at 20 000
    args = {"ranks": 4, "tmax": 2, "lanes": LANES, "cases": cs, "concurrent": True,
            "max_cycles": 1_000}
    plain, _ = run(spec, agrs_ops, args)
    assert all(op["errors"] == 0 and op["done"] for op in plain["ops"]), plain["ops"]
    fenced, _ = run(spec, agrs_ops, {**args, "barrier": True})
    assert all(op["errors"] == 0 and op["done"] for op in fenced["ops"]), fenced["ops"]
    # a barrier is one message up and one multicast down: >= one one-hop latency
    for a, b in zip(plain["ops"], fenced["ops"]):
        assert b["cycles"] - a["cycles"] >= 16


def test_watchdog_stops_a_run_that_cannot_finish():
    """A run with max_cycles too small for the operation ends in ``timeout`` at max_cycles."""
    cs = cases(4, 2, 1, seed=5)
    result, _ = run(agrs_spec(ranks=4, mode="inc", tmax=2), agrs_ops,
                    {"ranks": 4, "tmax": 2, "lanes": LANES, "cases": cs, "concurrent": True,
                     "max_cycles": 5})
    op, = result["ops"]
    assert op["timeout"] and not op["done"] and op["cycles"] == 5


def test_memory_and_control_maps():
    assert agrs_memory_map(4, 3) == {"ag": 0, "out": 12, "rs": 15, "end": 27}
    assert agrs_control_map(4) == {"counts": 0, "concurrent": 4, "barrier": 5}
    system = AgrsSystem.signature_for(timing=tiny_timing("star"), ranks=4, tmax=3).create()
    assert system.memory_map == agrs_memory_map(4, 3)
    assert system.control_map == agrs_control_map(4)
    assert system.host_read_latency == 1


async def host_port_probe(bench, ranks, tmax, lanes):
    """Words written through the host port and read back; the cycles a read takes."""
    mm = agrs_memory_map(ranks, tmax)
    blocks = [mm["ag"], mm["ag"] + 1, mm["out"], mm["rs"], mm["end"] - 1]
    writes = [[HBM, r, 0, word_addr(b, k), (r << 16) | (b << 4) | k]
              for r in range(ranks) for b in blocks for k in range(lanes)]
    writes += [[HBM, 1, 0, word_addr(mm["ag"], lanes), 0xBAD],      # beyond the lanes: dropped
               [HBM, 1, 0, word_addr(mm["end"], 0), 0xBAD]]         # beyond the map: dropped
    await host_write(bench, writes)
    # latency of one read: ticks from the cycle re is set until rvalid
    bench.set("host.rank", 1)
    bench.set("host.addr", word_addr(mm["ag"] + 1, 1))
    bench.set("host.re", 1)
    await bench.tick()
    bench.set("host.re", 0)
    latency = 1
    while not await bench.get("host.rvalid"):
        await bench.tick()
        latency += 1
    first = await bench.get("host.rdata")
    single = await host_read(bench, [[r, word_addr(b, k)] for r in range(ranks) for b in blocks
                                     for k in range(lanes)])
    extra = await host_read(bench, [[1, word_addr(mm["ag"], lanes)], [1, word_addr(mm["end"], 0)]])
    every = await host_read_all(bench, ranks, [word_addr(b, k) for b in blocks
                                               for k in range(lanes)])
    return {"latency": latency, "first": first, "single": single, "extra": extra,
            "all": [every[r] for r in range(ranks)]}


def test_host_port_memory_map_round_trip():
    """Every buffer is host-writable and readable by rank, word by word (word k = lane k)."""
    ranks, tmax, lanes = 2, 2, 2
    out, _ = run(agrs_spec(ranks=ranks, mode="inc", tmax=tmax, lanes=lanes, slots=16),
                 host_port_probe, {"ranks": ranks, "tmax": tmax, "lanes": lanes})
    mm = agrs_memory_map(ranks, tmax)
    blocks = [mm["ag"], mm["ag"] + 1, mm["out"], mm["rs"], mm["end"] - 1]
    want = [[(r << 16) | (b << 4) | k for b in blocks for k in range(lanes)] for r in range(ranks)]
    assert out["latency"] == AgrsSystem.signature_for(ranks=ranks, tmax=tmax).params[
        "host_read_latency"] == 1
    assert out["first"] == (1 << 16) | ((mm["ag"] + 1) << 4) | 1
    assert out["single"] == [w for r in range(ranks) for w in want[r]]
    assert out["extra"] == [0, 0]
    assert out["all"] == want


@pytest.mark.parametrize("cls, params, exc, match", [
    (IncEndpoint, {"rank": 4, "ranks": 4, "tmax": 2}, ValueError,
     r"rank must be in \[0, 3\], not 4"),
    (IncEndpoint, {"rank": 1.0, "ranks": 4, "tmax": 2}, TypeError,
     r"rank must be an integer, not 1.0"),
    (RingEndpoint, {"rank": 0, "ranks": 1, "tmax": 2}, ValueError, r"ranks must be >= 2, not 1"),
    (AgrsSystem, {"ranks": 4, "mode": "tree"}, ValueError,
     r"mode must be one of inc, ring, not 'tree'"),
    (AgrsSystem, {"ranks": 0}, ValueError, r"ranks must be >= 2, not 0"),
    (AgrsSystem, {"ranks": "4"}, TypeError, r"ranks must be an integer, not '4'"),
    (AgrsSystem, {"ranks": 4, "tmax": 0}, ValueError, r"tmax must be >= 1, not 0"),
    (AgrsSystem, {"ranks": 4, "lanes": 2.0}, TypeError, r"lanes must be an integer, not 2.0"),
    (AgrsSystem, {"ranks": 4, "slots": 3}, ValueError, r"slots must be a power of two, not 3"),
    (AgrsSystem, {"ranks": 4, "switch_depth": 1}, ValueError, r"switch_depth must be >= 2, not 1"),
])
def test_validation(cls, params, exc, match):
    if cls is AgrsSystem:
        params = {"timing": tiny_timing("star"), **params}
    with pytest.raises(exc, match=match):
        rejected(cls, **params)


def test_factory_names_an_unknown_preset():
    from epfabric.sw.tops import agrs_system
    with pytest.raises(ValueError, match=r"unknown preset 'nope'"):
        agrs_system(preset="nope")
