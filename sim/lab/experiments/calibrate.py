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

import sys
import time

from tabulate import tabulate

from ....hw.topology import star, superpod, superpod_distance
from ....hw.validate import UserError, check_choice, check_int
from ....sw.presets import CLASSES, get_preset, preset_names
from ...backends import SIMULATORS, ComponentSpec, SimulationError, run, wait_until
from . import Experiment, Param, register

__all__ = ["calibration_fabric", "calibration_ranks", "calibration_pairs", "calibrate",
           "format_report", "Table2", "EXPERIMENT"]


#: Table 2's verdict: each class's latency and bandwidth within this fraction of the paper's
TOLERANCE = 0.01


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
        raise UserError(f"calibrate needs a named preset, not a modified {preset.name!r}")
    spec = ComponentSpec("epfabric.sim.lab.experiments.calibrate:calibration_fabric",
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


#: UBEP Table 2 (CM384): one-way latency per class (ns), normalised, and the UB bandwidth (GB/s)
PAPER_LATENCY_NS = {"intra": 218.0, "one_hop": 929.0, "two_hop": 2500.0}
PAPER_NORMALISED = {"intra": 1.0, "one_hop": 4.3, "two_hop": 11.5}
PAPER_BANDWIDTH = 392.0


class Table2(Experiment):
    """One row per distance class: latency and bandwidth, measured, targeted and the paper's."""

    name = "table2"
    title = "one-way latency of a lone 512 B block and sustained bandwidth per distance class"
    paper = "UBEP Table 2"
    headline = "CM384: 218 / 929 / 2500 ns (1 : 4.3 : 11.5) intra-NPU / one-hop / two-hop, ~392 GB/s"
    params = (
        Param("preset", "cm384", f"preset ({', '.join(preset_names())})", str, tuple(preset_names())),
        Param("backend", "pysim", "simulator", str, SIMULATORS),
        Param("blocks", 256, "blocks per bandwidth stream", int, minimum=16),
        Param("data_bytes", 4, "simulated bytes per block (cycle counts do not depend on it)", int,
              minimum=1),
        Param("verbose", False, "progress messages on stderr", bool),
    )

    def points(self, params, quick=False):
        # quick is the full grid: one point, and fewer blocks would measure the limiter's burst
        return [{k: params[k] for k in ("preset", "backend", "blocks", "data_bytes")}]

    def measure(self, point):
        report = calibrate(point["preset"], backend=point["backend"], blocks=point["blocks"],
                           data_bytes=point["data_bytes"])
        rows = rows_of(report)
        for row in rows:                   # latency relative to the nearest class, as Table 2
            row["normalised"] = row["latency_ns"] / rows[0]["latency_ns"]
        return rows

    def compare(self, row):
        if row["preset"] != "cm384":
            return {}
        cls = row["class"]
        return {"paper_latency_ns": PAPER_LATENCY_NS[cls],
                "paper_normalised": PAPER_NORMALISED[cls],
                "latency_over_paper": row["latency_ns"] / PAPER_LATENCY_NS[cls],
                "paper_bandwidth_gbytes_s": PAPER_BANDWIDTH,
                "bandwidth_over_paper": row["bandwidth_gbytes_s"] / PAPER_BANDWIDTH}

    def verdict(self, rows):
        papered = [r for r in rows if "paper_latency_ns" in r]
        if not papered:
            return None, "the paper's Table 2 is for cm384 only"
        lat = max(abs(r["latency_over_paper"] - 1) for r in papered)
        bw = max(abs(r["bandwidth_over_paper"] - 1) for r in papered)
        text = " / ".join(f"{r['latency_ns']:.0f}" for r in papered)
        # the cm384 preset is calibrated to Table 2, so the measurement must return the table's
        # values to within a cycle's rounding: 1 % (2 ns of the 218 ns class) either way
        return (lat <= TOLERANCE and bw <= TOLERANCE,
                f"{text} ns (worst {100 * lat:.2f} % off), "
                f"{min(r['bandwidth_gbytes_s'] for r in papered):.1f} GB/s per class "
                f"(worst {100 * bw:.2f} % off; tolerance ±{100 * TOLERANCE:.0f} % on each: "
                f"{'inside' if lat <= TOLERANCE and bw <= TOLERANCE else 'OUTSIDE'}) — "
                f"the preset is calibrated to Table 2")

    def plot(self, rows, path):
        from ..results.plot import save, subplots
        fig, (lat_ax, bw_ax) = subplots(1, 2, width=10)
        classes = [r["class"] for r in rows]
        x = range(len(rows))
        lat_ax.bar([i - 0.2 for i in x], [r["latency_ns"] for r in rows], 0.4, label="model")
        if "paper_latency_ns" in rows[0]:
            lat_ax.bar([i + 0.2 for i in x], [r["paper_latency_ns"] for r in rows], 0.4,
                       label="paper", color="C3")
        lat_ax.set_xticks(list(x), classes)
        lat_ax.set_ylabel("one-way latency of a lone 512 B block (ns)")
        lat_ax.legend()
        bw_ax.bar([i - 0.2 for i in x], [r["bandwidth_gbytes_s"] for r in rows], 0.4,
                  label="model")
        if "paper_bandwidth_gbytes_s" in rows[0]:
            bw_ax.bar([i + 0.2 for i in x], [r["paper_bandwidth_gbytes_s"] for r in rows], 0.4,
                      label="paper", color="C3")
        bw_ax.set_xticks(list(x), classes)
        bw_ax.set_ylabel("sustained bandwidth, one stream (GB/s)")
        bw_ax.legend(loc="lower right")
        save(fig, path, f"{self.paper}: latency and bandwidth per distance class "
                        f"({rows[0]['preset']}, {rows[0]['backend']})")

    def run(self, **params):
        p = self.resolve(**params)
        report = calibrate(p["preset"], backend=p["backend"], blocks=p["blocks"],
                           data_bytes=p["data_bytes"], verbose=p["verbose"])
        return [{**r, **self.compare(r)} for r in rows_of(report)]

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
    return tabulate([(r["class"], f"{r['latency_ns']:.1f}", f"{r['target_latency_ns']:.1f}",
                      f"{r['latency_error_pct']:+.2f}%", f"{r['bandwidth_gbytes_s']:.2f}",
                      f"{r['target_bandwidth_gbytes_s']:.2f}", f"{r['bandwidth_error_pct']:+.2f}%")
                     for r in rows],
                    headers=("class", "latency ns", "target", "err", "GB/s", "target", "err"),
                    disable_numparse=True, colalign=("left",) + ("right",) * 6)


def format_report(report):
    """The printed calibration: a heading line and :func:`format_rows`."""
    head = (f"calibration of preset {report['preset']} on {report['backend']} "
            f"({report['fabric'].get('ranks', report['fabric'].get('n'))} ranks, {report['cycles']} "
            f"cycles, {report['wall_s']} s)")
    return head + "\n" + format_rows(rows_of(report))


EXPERIMENT = register(Table2())
