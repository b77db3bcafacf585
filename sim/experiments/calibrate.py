"""Calibration: the fabric's latency and bandwidth per distance class (``epfabric calibrate``).

On the smallest superpod that has all three distance classes (2 dies per NPU,
2 NPUs per board, 2 boards; a 2-rank star for a star preset) this measures

* the one-way latency of a lone 512 B block per class (UBEP Table 2): cycles
  from the cycle the sender's ``tx`` transfer happens to the cycle the block
  is ``valid`` at the receiver's ``rx``;
* the sustained bandwidth of one sender streaming to one receiver per class:
  blocks × ``block_bytes`` over the time between arrivals (the first
  ``skip`` arrivals, which ride the rate limiter's initial burst credit, are
  left out). The three streams run at once on pairs with no rank in common,
  so they share no link and no switch output.

and prints them next to the preset's targets. Cycles become ns and GB/s only
through the preset (:mod:`epfabric.sw.presets`).
"""

import json
import sys
import time

from ...hw.topology import star, superpod, superpod_distance
from ...hw.validate import check_choice, check_int
from ...sw.presets import CLASSES, get_preset, preset_names
from ..backends import SIMULATORS, ComponentSpec, SimulationError, run, wait_until
from . import Experiment, Param, register

__all__ = ["calibration_fabric", "calibration_ranks", "calibration_pairs", "calibrate",
           "format_report", "Calibrate", "EXPERIMENT"]


def _shape(preset):
    return {"dies_per_npu": min(2, preset.dies_per_npu),
            "npus_per_board": min(2, preset.npus_per_board),
            "boards": min(2, preset.boards)}


def calibration_fabric(*, preset, data_bytes=4):
    """The fabric calibrate measures (JSON-able parameters: usable as a ComponentSpec)."""
    preset = get_preset(preset)
    timing = preset.fabric_timing()
    if preset.topology == "star":
        return star(timing, 2, data_bytes=data_bytes)
    return superpod(timing, **_shape(preset), data_bytes=data_bytes)


def calibration_ranks(preset):
    """``(ranks, distance)`` of the calibration fabric, without building it."""
    preset = get_preset(preset)
    if preset.topology == "star":
        return 2, lambda s, d: "one_hop"
    shape = _shape(preset)
    ranks = shape["dies_per_npu"] * shape["npus_per_board"] * shape["boards"]
    return ranks, superpod_distance(shape["dies_per_npu"], shape["npus_per_board"])


def calibration_pairs(ranks, distance, classes):
    """One (class, src, dst) per class, no rank used twice (so the flows share no link)."""
    used, pairs = set(), []
    for cls in classes:
        for src in range(ranks):
            dst = next((d for d in range(ranks)
                        if d not in used and d != src and src not in used
                        and distance(src, d) == cls), None)
            if dst is not None:
                used |= {src, dst}
                pairs.append((cls, src, dst))
                break
        else:
            raise ValueError(f"the calibration fabric has no free pair for class {cls!r}")
    return pairs


async def calibrate_intent(bench, pairs, blocks, skip, ranks, timeout, verbose=False):
    """Harness intent: lone-block latencies one class at a time, then concurrent streams."""
    def say(text):
        if verbose:
            print(f"  [cycle {bench.cycle}] {text}", file=sys.stderr, flush=True)

    for r in range(ranks):
        bench.set(f"rx.{r}.ready", 1)
    latency = {}
    for cls, src, dst in pairs:
        say(f"latency {cls}: one block rank {src} -> rank {dst}")
        bench.set(f"tx.{src}.payload", {"dst": dst, "src": src, "data": 1})
        bench.set(f"tx.{src}.valid", 1)
        await wait_until(bench, f"tx.{src}.ready", 1, timeout=timeout)
        start = bench.cycle
        await bench.tick()
        bench.set(f"tx.{src}.valid", 0)
        await wait_until(bench, f"rx.{dst}.valid", 1, timeout=timeout)
        latency[cls] = bench.cycle - start
        await bench.tick()

    say(f"bandwidth: {len(pairs)} streams of {blocks} blocks")
    sent = {cls: 0 for cls, _s, _d in pairs}
    arrivals = {cls: [] for cls, _s, _d in pairs}
    deadline = bench.cycle + timeout
    while any(len(a) < blocks for a in arrivals.values()):
        if bench.cycle > deadline:
            raise SimulationError(f"calibration streams did not finish in {timeout} cycles")
        accepted = []
        for cls, src, dst in pairs:
            if sent[cls] < blocks:
                bench.set(f"tx.{src}.payload", {"dst": dst, "src": src, "data": sent[cls] & 0xff})
                bench.set(f"tx.{src}.valid", 1)
                accepted.append((cls, await bench.get(f"tx.{src}.ready")))
            else:
                bench.set(f"tx.{src}.valid", 0)
        for cls, src, dst in pairs:
            if await bench.get(f"rx.{dst}.valid"):
                raw = await bench.get(f"rx.{dst}.payload")
                flit = bench.decode(f"rx.{dst}.payload", raw)
                if flit.data != len(arrivals[cls]) & 0xff or flit.src != src:
                    raise SimulationError(f"{cls}: block {len(arrivals[cls])} arrived out of order")
                arrivals[cls].append(bench.cycle)
        await bench.tick()
        for cls, ok in accepted:
            sent[cls] += ok
        if verbose and bench.cycle % 1000 == 0:
            say("delivered " + ", ".join(f"{c}={len(a)}" for c, a in arrivals.items()))
    bandwidth = {cls: {"blocks": blocks - 1 - skip, "cycles": a[-1] - a[skip]}
                 for cls, a in arrivals.items()}
    return {"latency_cycles": latency, "bandwidth": bandwidth}


def calibrate(preset, *, backend="pysim", blocks=None, skip=8, data_bytes=4, verbose=False):
    """Calibrate ``preset`` on ``backend``; return the report dict (see module docstring)."""
    preset = get_preset(preset)
    check_choice("backend", backend, SIMULATORS)
    if blocks is None:
        blocks = 256
    check_int("blocks", blocks, skip + 8)
    if preset.name not in preset_names() or get_preset(preset.name) != preset:
        raise ValueError(f"calibrate needs a named preset, not a modified {preset.name!r}")
    spec = ComponentSpec("epfabric.sim.experiments.calibrate:calibration_fabric",
                         {"preset": preset.name, "data_bytes": data_bytes})
    ranks, distance = calibration_ranks(preset)
    pairs = calibration_pairs(ranks, distance, preset.classes())
    targets = preset.latency_cycles()
    per_block = preset.block_bytes / (preset.bytes_per_cycle())
    timeout = 4 * max(targets.values()) + int(4 * blocks * per_block) + 1000
    t0 = time.monotonic()
    result, cycles = run(spec, calibrate_intent,
                         {"pairs": pairs, "blocks": blocks, "skip": skip, "ranks": ranks,
                          "timeout": timeout, "verbose": verbose},
                         simulator=backend)
    wall = time.monotonic() - t0
    latency_ns = {c: preset.ns(v) for c, v in result["latency_cycles"].items()}
    bandwidth = {c: preset.gbytes_s(b["blocks"] * preset.block_bytes, b["cycles"])
                 for c, b in result["bandwidth"].items()}
    return {
        "preset": preset.name,
        "backend": backend,
        "fabric": {**_shape(preset), "ranks": ranks, "data_bytes": data_bytes}
        if preset.topology == "superpod" else {"n": ranks, "data_bytes": data_bytes},
        "pairs": {cls: [src, dst] for cls, src, dst in pairs},
        "latency_ns": latency_ns,
        "bandwidth_gbps": bandwidth,
        "bandwidth_unit": "GB/s (gigabytes per second, per direction)",
        "target_latency_ns": preset.latency_ns(),
        "target_bandwidth_gbps": {c: preset.bandwidth_gbytes_s for c in preset.classes()},
        "latency_cycles": result["latency_cycles"],
        "bandwidth_cycles": result["bandwidth"],
        "cycles": cycles,
        "wall_s": round(wall, 2),
        "cycles_per_s": round(cycles / wall, 1) if wall else None,
    }


class Calibrate(Experiment):
    """One row per distance class: latency and bandwidth, measured and targeted."""

    name = "calibrate"
    title = "one-way latency of a lone 512 B block and sustained bandwidth per distance class"
    paper = "UBEP Table 2"
    params = (
        Param("preset", "cm384", f"preset ({', '.join(preset_names())})", str, tuple(preset_names())),
        Param("backend", "pysim", "simulator", str, SIMULATORS),
        Param("blocks", 256, "blocks per bandwidth stream", int, minimum=16),
        Param("data_bytes", 4, "simulated bytes per block (cycle counts do not depend on it)", int,
              minimum=1),
        Param("verbose", False, "progress messages on stderr", bool),
    )

    def run(self, **params):
        p = self.resolve(**params)
        report = calibrate(p["preset"], backend=p["backend"], blocks=p["blocks"],
                         data_bytes=p["data_bytes"], verbose=p["verbose"])
        return rows_of(report)

    def format(self, rows):
        return format_rows(rows)


def rows_of(report):
    """One row per class of a :func:`calibrate` report."""
    rows = []
    for cls in CLASSES:
        if cls not in report["latency_ns"]:
            continue
        lat, tl = report["latency_ns"][cls], report["target_latency_ns"][cls]
        bw, tb = report["bandwidth_gbps"][cls], report["target_bandwidth_gbps"][cls]
        rows.append({"preset": report["preset"], "backend": report["backend"], "class": cls,
                     "latency_ns": lat, "target_latency_ns": tl,
                     "latency_error_pct": 100 * (lat - tl) / tl,
                     "bandwidth_gbytes_s": bw, "target_bandwidth_gbytes_s": tb,
                     "bandwidth_error_pct": 100 * (bw - tb) / tb,
                     "latency_cycles": report["latency_cycles"][cls]})
    return rows


def format_rows(rows):
    lines = [f"{'class':<9} {'latency ns':>11} {'target':>8} {'err':>7}   "
             f"{'GB/s':>8} {'target':>8} {'err':>7}"]
    for r in rows:
        lines.append(f"{r['class']:<9} {r['latency_ns']:>11.1f} {r['target_latency_ns']:>8.1f} "
                     f"{r['latency_error_pct']:>+6.2f}%   {r['bandwidth_gbytes_s']:>8.2f} "
                     f"{r['target_bandwidth_gbytes_s']:>8.2f} {r['bandwidth_error_pct']:>+6.2f}%")
    return "\n".join(lines)


def format_report(report):
    """The printed calibration: a heading line and :func:`format_rows`."""
    head = (f"calibration of preset {report['preset']} on {report['backend']} "
            f"({report['fabric'].get('ranks', report['fabric'].get('n'))} ranks, {report['cycles']} "
            f"cycles, {report['wall_s']} s)")
    return head + "\n" + format_rows(rows_of(report))


EXPERIMENT = register(Calibrate())
