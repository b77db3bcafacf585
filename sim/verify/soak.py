"""Long constrained-random soaks of the superpod fabric, scoreboarded in hardware (``epfabric soak``).

Builds :class:`~epfabric.sim.tb.soak.SoakFabric` (by default the 32-rank
``cm384`` superpod: 2 boards x 8 NPUs x 2 dies), runs it on a simulator
(Verilator by default) until every rank has sent its blocks and the fabric
has drained, and reads the hardware scoreboard: blocks sent and received,
misrouted, out of order (lost, duplicated or reordered per flow). A fabric
that deadlocks hits the timeout and the soak fails with that message.

One row per run: pattern, seed, blocks moved, simulated cycles, wall time
(the whole process: Verilog, the model build if not cached, the run), the
run alone (``run_s``), and ``lost = sent - received`` (0 when the soak
passes).

:func:`kernel_soak` is the other soak: a registered kernel (``alltoall``)
run many times with random data seeds and random machine shapes, every run
checked against numpy.
"""

import time

from ..tb.soak import PATTERNS, SoakFabric
from ...hw.topology import superpod_ranks
from ...hw.validate import UserError, check_choice, check_int
from ...sw.presets import get_preset
from ..backends import ComponentSpec, run

__all__ = ["soak_fabric", "soak_spec", "soak_intent", "run_soak", "ok", "DEFAULT_SHAPE",
           "KERNEL_SHAPES", "kernel_soak", "inc_soak", "check_rates", "INC_SHAPE"]

DEFAULT_SHAPE = (2, 8, 2)       # dies/NPU, NPUs/board, boards: 32 ranks
INC_SHAPE = (2, 2, 2)           # inc_soak's: 8 ranks on two boards


def soak_fabric(*, preset="cm384", shape=DEFAULT_SHAPE, hot=0, duplicate_first=False):
    """JSON-facing factory of a :class:`SoakFabric` (a ComponentSpec target)."""
    p = get_preset(preset)
    dpn, npb, nb = shape
    p.check_shape(dpn, npb, nb)
    return SoakFabric(p.fabric_timing("superpod"), dpn, npb, nb, hot=hot,
                      duplicate_first=duplicate_first)


def soak_spec(**params):
    return ComponentSpec("epfabric.sim.verify.soak:soak_fabric", dict(params))


async def soak_intent(bench, blocks, offer, stall, hotspot, seed, timeout):
    """Start the soak; wait (no Python per cycle on cocotb) until it has drained; read the scoreboard."""
    bench.set("hotspot", hotspot)
    bench.set("seed", seed)
    bench.set("blocks", blocks)
    bench.set("offer", offer)
    bench.set("stall", stall)
    bench.set("start", 1)
    await bench.tick()
    bench.set("start", 0)
    t0 = time.monotonic()
    await bench.wait_high("done", timeout=timeout)
    run_s = time.monotonic() - t0
    out = {"run_s": run_s}
    for name in ("cycle", "sent_total", "received_total", "misrouted", "out_of_order"):
        out[name] = await bench.get(name)
    await bench.tick(64)     # nothing may arrive after the drain: every block exactly once
    out["received_after"] = await bench.get("received_total")
    out["misrouted_after"] = await bench.get("misrouted")
    out["out_of_order_after"] = await bench.get("out_of_order")
    return out


def check_rates(offer, stall, prefix=""):
    """``UserError`` naming ``offer`` or ``stall`` (with ``prefix``, e.g. ``--``) unless both
    are probabilities in [0, 1) and ``offer`` is not 0."""
    for name, value in (("offer", offer), ("stall", stall)):
        if not 0 <= value < 1:
            raise UserError(f"{prefix}{name} must be a probability in [0, 1), not {value!r}")
    if offer == 0:
        raise UserError(f"{prefix}offer must be > 0, not 0")


def run_soak(*, blocks_per_rank, pattern="uniform", seed=1, hot=0, offer=0.7, stall=0.3,
             backend="verilator", preset="cm384", shape=DEFAULT_SHAPE, timeout=None,
             duplicate_first=False):
    """One soak run; its row (see the module docstring)."""
    check_choice("pattern", pattern, PATTERNS)
    check_int("blocks_per_rank", blocks_per_rank, 1)
    check_rates(offer, stall)
    check_int("seed", seed, 0, 2**32 - 1)
    params = {"preset": preset, "shape": list(shape), "hot": hot}
    if duplicate_first:
        params["duplicate_first"] = True
    spec = soak_spec(**params)
    ranks = superpod_ranks(*shape)
    total = ranks * blocks_per_rank
    if timeout is None:
        # generous: every block through the hot rank one at a time, stalled, plus the
        # slowest preset's round trips; a deadlock of a small soak fails in seconds
        timeout = 64 * total + 10_000
    t0 = time.monotonic()
    res, _ = run(spec, soak_intent, {"blocks": blocks_per_rank, "offer": round(offer * 65536),
                                     "stall": round(stall * 65536),
                                     "hotspot": int(pattern == "hotspot"), "seed": seed,
                                     "timeout": timeout},
                 simulator=backend)
    wall = time.monotonic() - t0
    return {"backend": backend, "ranks": ranks, "pattern": pattern, "hot": hot, "seed": seed,
            "offer": offer, "stall": stall, "blocks": total,
            "sent": res["sent_total"], "received": res["received_total"],
            "lost": res["sent_total"] - res["received_total"],
            "extra_after_drain": res["received_after"] - res["received_total"],
            "misrouted": res["misrouted_after"], "out_of_order": res["out_of_order_after"],
            "cycles": res["cycle"], "run_s": round(res["run_s"], 2), "wall_s": round(wall, 2)}


def ok(row):
    """The soak passed: every block delivered exactly once, in order, to its rank."""
    return (row["sent"] == row["blocks"] == row["received"] and row["lost"] == 0
            and row["extra_after_drain"] == 0 and row["misrouted"] == 0
            and row["out_of_order"] == 0)


#: machine shapes a kernel soak draws from: (topology, AIVs per die) on the ``tiny`` preset
KERNEL_SHAPES = ((("superpod", 2, 1, 1), 1), (("superpod", 2, 1, 1), 2),
                 (("superpod", 2, 2, 1), 1), (("superpod", 2, 2, 1), 2))
#: the shapes of a ``system="ubep-inc"`` soak: at least a T- and a C-AIV a die, and every link
#: kind (tier-2 too), so multicast copies and reductions meet in every kind of switch
INC_KERNEL_SHAPES = ((("superpod", 2, 1, 1), 2), (("superpod", 2, 2, 1), 2),
                     (("superpod", 2, 1, 2), 2), (("superpod", 1, 2, 2), 3))


def kernel_soak(kernel="alltoall", *, runs=100, seed=0, backend="verilator", preset="tiny",
                shapes=None, params=None, progress=None):
    """``runs`` runs of a registered kernel, each with a random data seed and a random shape.

    ``params`` are fixed kernel parameters (``seed`` is drawn per run); ``shapes`` the
    ``(topology, AIVs per die)`` drawn from, by default :data:`KERNEL_SHAPES`
    (:data:`INC_KERNEL_SHAPES` for ``system="ubep-inc"``). Every
    run is checked against the kernel's numpy reference
    (:func:`~epfabric.sw.kernels.run_kernel`). Returns one row per run:
    shape, data seed, cycles, correct, problems, wall time.
    """
    import random

    from ...sw.kernels import KERNELS, run_kernel
    from ..backends.machine import backend as make_backend

    if kernel not in KERNELS:
        raise UserError(f"unknown kernel {kernel!r}; registered: {', '.join(sorted(KERNELS))}")
    if "seed" not in KERNELS[kernel].defaults:
        raise UserError(f"kernel {kernel!r} has no seed parameter to vary")
    check_int("runs", runs, 1)
    if shapes is None:
        shapes = (INC_KERNEL_SHAPES if (params or {}).get("system") == "ubep-inc"
                  else KERNEL_SHAPES)
    rng = random.Random(seed)
    be = make_backend(backend)
    rows = []
    for k in range(runs):
        topology, aivs = rng.choice(shapes)
        data_seed = rng.randrange(2**31)
        t0 = time.monotonic()
        result = run_kernel(kernel, be, preset=preset, topology=topology, aivs=aivs,
                            params={**(params or {}), "seed": data_seed})
        row = {"kernel": kernel, "run": k, "topology": list(topology), "aivs": aivs,
               "seed": data_seed, "cycles": [r.cycles for r in result.runs],
               "correct": result.correct, "problems": result.problems[:5],
               "wall_s": round(time.monotonic() - t0, 2)}
        rows.append(row)
        if progress:
            progress(row)
    return rows


def inc_soak(*, shape=INC_SHAPE, seed=1, multicasts=16, groups=None, offer=0.7, stall=0.3,
             backend="verilator", preset="cm384", window=8, adversarial=False, planes=1):
    """A soak of a superpod with in-network switches, on ``preset``'s timing: every
    die offers
    ``multicasts`` flits (a quarter unicast, the rest multicast to random die sets) and its
    contributions to ``groups`` random reduction groups (default: a quarter of the slots),
    interleaved at random, while every receiver stalls with probability ``stall``. Checked in
    Python (:mod:`epfabric.sim.tb.inc_traffic`): each multicast reaches each die of its set
    exactly once and in order, each group arrives once with its exact sum. The row has the
    deliveries, the cycles, the tier-2 blocks and ``problems`` (empty when it passed); a
    fabric that stops delivering ends at the cycle limit, and ``problems`` names the first
    die whose deliveries are wrong and how many deliveries are missing.

    ``adversarial``: the pattern of docs/concepts/inc-deadlock.md (it deadlocked tier-1
    units that summed groups leaving their board) instead
    (:func:`~epfabric.sim.tb.inc_traffic.plane_ring_queues`: on every tier-2 plane each
    board reduces pairs into a die of the other board, whose own board adds one
    contribution; ``groups`` per destination, default ``window``, and ``multicasts`` per
    group from each destination to the other board, on the same plane; on the first
    ``planes`` tier-2 planes, default 1: the worst), on a fabric whose
    ``window`` holds every group of a destination; a watchdog ends the run when nothing is
    delivered for a while (``stuck``: the cycle of the last delivery)."""
    import random

    from ...hw.topology import SUPERPOD_HOPS
    from ..tb.inc_traffic import (deliveries, multicast_queues, plane_ring_queues,
                                  reduction_queues, traffic_intent)

    check_int("seed", seed, 0, 2**32 - 1)
    check_int("multicasts", multicasts, 0)
    check_rates(offer, stall)
    ranks = superpod_ranks(*shape)
    rng = random.Random(seed)
    lanes = 4
    if adversarial:
        groups = window if groups is None else check_int("groups", groups, 1, 1 << 16)
        window = max(window, 1 << (groups - 1).bit_length())     # one slot per group
        queues, want, sent = plane_ring_queues(rng, shape, groups, lanes=lanes,
                                               multicasts=multicasts, planes=planes)
        groups = len(want)
    else:
        groups = (max(1, ranks * window // 4) if groups is None
                  else check_int("groups", groups, 0, ranks * window))
        mq, sent = multicast_queues(rng, ranks, multicasts)
        rq, want = reduction_queues(rng, ranks, groups, window=window, lanes=lanes)
        queues = _merge(rng, mq, rq)
    expect = deliveries(queues)
    spec = ComponentSpec("epfabric.sim.tb.inc_traffic:inc_fabric",
                         {"preset": preset, "shape": list(shape), "window": window,
                          "data_bits": 16 * lanes})
    limit = 200 * (expect + sum(map(len, queues))) + 20_000
    # the watchdog: four times a block's longest path without a delivery (adversarial only,
    # so the random soak keeps its cycles)
    hops = get_preset(preset).fabric_timing("superpod").hops
    watchdog = {"stuck": 4 * sum(hops.values()) + 1000} if adversarial else {}
    t0 = time.monotonic()
    res, cycles = run(spec, traffic_intent,
                      {"rounds": [queues], "cycles": limit, "ranks": ranks, "ins": "tx",
                       "outs": "rx", "seed": seed, "stall_p": stall, "offer_p": offer,
                       "expect": [expect],
                       "counters": [f"link_blocks.{k}" for k in range(len(SUPERPOD_HOPS))],
                       **watchdog},
                      simulator=backend)
    delivered = sum(map(len, res["got"][0]))
    problems = _inc_problems(res, sent, want, lanes=lanes, expect=expect, **watchdog)
    stuck = res.get("stuck", [None])[0]
    t2 = res["counters"][f"link_blocks.{SUPERPOD_HOPS.index('t2_up')}"]
    return {"backend": backend, "ranks": ranks, "seed": seed, "multicasts": len(sent),
            "adversarial": bool(adversarial), "window": window, "stuck": stuck,
            "groups": groups, "contributions": sum(w[1] for w in want.values()),
            "deliveries": delivered, "expected": expect, "cycles": cycles, "t2_blocks": t2,
            "problems": problems, "ok": not problems,
            "wall_s": round(time.monotonic() - t0, 2)}


def _inc_problems(res, sent, want, *, lanes, expect, stuck=None):
    """What :func:`inc_soak`'s run ``res`` got wrong, one line each (empty: it passed); with
    the watchdog's ``stuck`` cycles, its diagnosis of a run that stopped delivering."""
    from ..tb.inc_traffic import check_multicast, check_reductions
    got = res["got"][0]
    problems = []
    for check, args in ((check_multicast, (got, sent)),
                        (check_reductions, (got, want))):
        try:
            if check is check_reductions:
                check(*args, header_bits=0, lanes=lanes)
            else:
                check(*args)
        except AssertionError as e:
            first = f"{check.__name__}: {e}".splitlines()[0]
            problems.append(first if len(first) <= 200 else first[:197] + "...")
    delivered = sum(map(len, got))
    if delivered != expect:
        problems.append(f"{delivered} deliveries, {expect} expected")
    if res["left"][0]:
        problems.append(f"{res['left'][0]} flits never accepted by the fabric")
    last = res.get("stuck", [None])[0]
    if last is not None:
        # the sources the fabric stopped taking from, the dies still owed a result
        results = {(f["dst"], f["block"]) for g in got for f in g if f["red"]}
        owed = sorted({d for d, b in want if (d, b) not in results})
        problems.append(f"stuck: nothing delivered after cycle {last} ({stuck} cycles of "
                        f"watchdog); sources held off: "
                        f"{', '.join(map(str, res['held'][0])) or 'none'}; dies owed a "
                        f"result: {', '.join(map(str, owed)) or 'none'}")
    return problems


def _merge(rng, first, second):
    """Per source, a random merge of two queues that keeps each one's order."""
    queues = []
    for a, b in zip(first, second):
        a, b, q = list(a), list(b), []
        while a or b:
            q.append((a if a and (not b or rng.random() < len(a) / (len(a) + len(b))) else b)
                     .pop(0))
        queues.append(q)
    return queues
