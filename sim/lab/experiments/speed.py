"""Simulation speed (``epfabric bench``): simulated cycles per second of the whole machine, per backend.

Runs ``alltoall`` on ``cm384`` machines of 4 dies (superpod 2×2×1) and 16 dies
(2×4×2), one AIV per die by default, on each backend, and reports per run:

* ``build_s`` — Verilog generation + simulator build (Icarus/Verilator; cached
  by content, so a rerun reports the cache hit) or elaboration (pysim);
* ``run_s`` — wall time of the machine runs alone, from ``start`` to ``stop``
  (host loading and read-back excluded), measured inside the simulator
  process. On Icarus and Verilator the session is repeated in the same
  simulator process until :data:`MIN_RUN_S` of run time is measured (a 4-die
  run lasts milliseconds on Verilator); every repeat must take the first
  run's cycles;
* ``cycles_per_s`` = simulated cycles / ``run_s``, and ``core_cycles_per_s``
  (× the machine's AIV count);

and the Verilator / Amaranth-simulator ratio of cycles per second measured in
the same invocation. The bench's Verilator models are built with hot code at
``-O2`` (:data:`BENCH_OPT`; the scale probe and everything else use ``-O1``)
and cold code at ``-O0``; ``--opt`` changes the hot level and ``--hier``
Verilates shared modules as hierarchical blocks.

``--scale`` is the scale probe: it runs the ladder of Verilator systems
(dies × AIVs per die, :data:`SCALE_LADDER` or ``--shapes``), each in a fresh
subprocess with an empty build cache and a wall-clock budget (``--budget``,
default 600 s for Verilog generation + build + run), skipping every shape at
least as large in both dimensions as one that failed, and reports per shape
build time, run time, total wall time and the peak resident memory of any
single process involved (Python/Amaranth, Verilator, gcc, the simulator).
"""

import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from tabulate import tabulate

from ....hw.host import HostTarget
from ....hw.validate import UserError, check_choice, check_int
from ....sw.isa import address
from ....sw.kernels import KERNELS
from ....sw.kernels.alltoall import layout as alltoall_layout
from ....sw.machine import Machine
from ...backends import SIMULATORS, missing_reason, run
from ...output import kill_group
from ...backends.toolchain import OPT_LEVELS, parse_backends
from ...backends.cocotb_runner import build, verilator_hier, verilator_opt
from ...backends.native import build_native
from ...backends.machine import SimulatorBackend, machine_spec, session_intent
from . import Experiment, Param, register

__all__ = ["bench_one", "probe_one", "scale", "build_growth", "parse_shapes", "SHAPES", "SCALE_LADDER", "BENCH_OPT",
           "SCALE_OPT", "SCALE_BACKEND", "Speed", "EXPERIMENT", "native_stats"]

SHAPES = {4: ("superpod", 2, 2, 1), 16: ("superpod", 2, 4, 2), 32: ("superpod", 2, 8, 2),
          64: ("superpod", 2, 8, 4), 128: ("superpod", 2, 8, 8), 256: ("superpod", 2, 8, 16)}
#: Hot-code level of the bench's Verilator models: with the output split
#: (:data:`~epfabric.sim.backends.cocotb_runner.OUTPUT_SPLIT_CFUNCS`) gcc
#: builds ``-O2`` about as fast as ``-O1`` here, and the 16-die model ran
#: 39.5 k cycles/s at ``-O2`` against 29.3 k at ``-O1`` (docs/results.md).
BENCH_OPT = "-O2"
#: Hot-code level of the scale probe (build-bound; the library default).
SCALE_OPT = "-O1"
#: Seconds of machine run time the bench measures on Icarus/Verilator (repeating the session).
MIN_RUN_S = 1.0
#: Shapes the scale probe tries, smallest first: (dies, AIVs per die).
SCALE_LADDER = [(16, 8), (32, 8), (64, 8), (128, 1), (256, 1), (128, 8)]
#: Backend of the scale probe (``native``: its build does not grow with instances).
SCALE_BACKEND = "native"


class TimedBackend(SimulatorBackend):
    """A backend that also measures the build (or elaboration) apart from the run.

    ``min_run_s``: on Icarus and Verilator, repeat the session in the same
    simulator process until this much machine run time is measured
    (:func:`~epfabric.sim.backends.machine.session_intent`); ``runs`` holds
    ``[cycles, wall s]`` of every run.
    """

    def __init__(self, simulator, opt, min_run_s=0.0, restore=()):
        super().__init__(simulator, opt=opt)
        self.build_s = 0.0
        self.min_run_s = min_run_s
        self.restore = list(restore)    # host writes that undo a run, before each repeat
        self.runs = []

    def execute(self, config, session):
        spec = machine_spec(config)
        t0 = time.monotonic()
        if self.name == "pysim":
            from amaranth.sim import Simulator
            Simulator(spec.build())          # elaboration, as a build-time figure
        else:
            if self.name == "native":
                build_native(spec, self.opt)
            else:
                build(spec, self.name, False, self.opt)   # Verilog generation + build
            session = dict(session, min_run_s=self.min_run_s,
                           repeat_writes=self.restore + session["writes"])
        self.build_s = time.monotonic() - t0
        result, _ = run(spec, session_intent, {"session": session}, simulator=self.name,
                        opt=self.opt)
        self.runs = result.get("runs") or [[result["cycles"], result["run_wall_s"]]]
        return result


def bench_one(simulator, dies, aivs=1, opt=BENCH_OPT, max_cycles=1_000_000, min_run_s=MIN_RUN_S):
    """Run alltoall; return the JSON row (``run_s`` measured around the machine runs).

    On Icarus and Verilator the session is repeated in one simulator process
    until ``min_run_s`` seconds of machine run time are measured (a 4-die run
    lasts milliseconds on Verilator); before each repeat the receive blocks
    are zeroed, so every repeat starts from the same memory and must take
    the same cycles (``repeat_cycles_differ`` lists any that did
    not). The check is on the first run's memory, trace and counters.
    """
    check_choice("dies", dies, tuple(SHAPES))
    kernel = KERNELS["alltoall"]
    config, = kernel.configs("cm384", SHAPES[dies], aivs)
    recv, _ = alltoall_layout(config)
    restore = [[HostTarget.HBM.value, r, 0, address(0, recv + s) + 4 * w, 0]
               for r in range(config.ranks) for s in range(config.ranks * config.aivs_per_die)
               for w in range(config.words_per_block)]
    be = TimedBackend(simulator, opt, min_run_s, restore)
    m = Machine(backend=be, config=config)
    tok = kernel.load(m, kernel.resolve_params({}))
    report = m.run(max_cycles)
    verdict = kernel.check(m, report, tok)
    cycles = sum(c for c, _ in be.runs)
    run_s = sum(w for _, w in be.runs)
    differ = [c for c, _ in be.runs if c != report.cycles]
    problems = verdict["problems"][:5]
    if differ:
        problems.append(f"repeated runs took {sorted(set(differ))} cycles, not {report.cycles}")
    return {"backend": simulator, "dies": dies, "aivs_per_die": aivs, "cycles": report.cycles,
            "build_s": round(be.build_s, 2), "runs": len(be.runs), "run_s": round(run_s, 3),
            "cycles_per_s": round(cycles / run_s, 1) if run_s else None,
            "core_cycles_per_s": round(cycles * config.cores / run_s) if run_s else None,
            "correct": verdict["correct"] and not differ, "problems": problems,
            **({"opt": opt or verilator_opt(), "hier": ",".join(verilator_hier())}
               if simulator == "verilator" else {}),
            **({"opt": opt or verilator_opt(), **native_stats()} if simulator == "native" else {})}


def native_stats():
    """Per-cycle figures of the last native run: model evaluations and settle rounds."""
    from ...backends.native import LAST_STATS as s
    if not s.get("cycles"):
        return {}
    return {"instances": s["instances"], "evals_per_cycle": round(s["evals"] / s["cycles"], 1),
            "settle_rounds_per_cycle": round(s["settle_rounds"] / s["cycles"], 2),
            "skipped_edges_per_cycle": round(s["skipped_edges"] / s["cycles"], 1),
            "die_edges_skipped": round(s.get("skipped_die_edges", 0)
                                       / (max(1, s.get("dies", 0)) * s["cycles"]), 4),
            "threads": s.get("threads", 1)}


def probe_one(dies, aivs, budget_s, opt=SCALE_OPT, log=print, backend=SCALE_BACKEND):
    """One scale-probe point: ``bench_one`` on ``backend`` in a subprocess, fresh build, time budget.

    Returns {``dies``, ``aivs_per_die``, ``status`` (``ok``, ``over_budget``,
    ``failed``), ``wall_s``, ``build_s``, ``run_s``, ``cycles``,
    ``cycles_per_s``, ``correct``, ``peak_rss_mb``}; ``peak_rss_mb`` is the
    largest resident set of any one process of the attempt (``wait4``).
    """
    with tempfile.TemporaryDirectory(prefix="epf-scale-") as tdir:
        out = Path(tdir) / "row.json"
        cmd = [sys.executable, "-m", "epfabric.sim.cli", "bench", "--backends", backend,
               "--dies", str(dies), "--aivs", str(aivs), f"--opt={opt}", "--json", str(out)]
        env = dict(os.environ, EPFABRIC_BUILD_DIR=str(Path(tdir) / "build"))
        t0 = time.monotonic()
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, start_new_session=True)
        tail = []

        def pump():
            for line in proc.stdout:
                tail.append(line.rstrip())
                del tail[:-20]
                log(f"  [{dies}x{aivs} {time.monotonic() - t0:6.0f} s] {line.rstrip()}")
        reader = threading.Thread(target=pump, daemon=True)
        reader.start()
        over = False
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() - t0 > budget_s:
                over = True
                kill_group(proc)
                pid, status, usage = os.wait4(proc.pid, 0)
                break
            time.sleep(0.5)
        proc.returncode = os.waitstatus_to_exitcode(status)
        wall = time.monotonic() - t0
        reader.join(timeout=5)
        row = {"dies": dies, "aivs_per_die": aivs, "wall_s": round(wall, 1),
               "peak_rss_mb": usage.ru_maxrss // 1024}
        if over:
            row["status"] = "over_budget"
        elif not out.exists():
            row["status"] = "failed"
            row["error"] = "\n".join(tail[-8:])
        else:
            got = json.loads(out.read_text())["runs"][0]
            row.update({k: got[k] for k in ("cycles", "build_s", "run_s", "cycles_per_s", "correct")})
            row["core_cycles_per_s"] = got.get("core_cycles_per_s")
            row["status"] = "ok" if got["correct"] and wall <= budget_s else "failed"
            if not got["correct"]:
                row["error"] = "\n".join(tail[-8:])
        return row


def parse_shapes(text):
    shapes = []
    for item in text.split(","):
        try:
            d, a = (int(x) for x in item.lower().split("x"))
        except ValueError:
            raise UserError(f"--shapes: {item!r} is not DIESxAIVS (e.g. 16x2)") from None
        check_choice("--shapes dies", d, tuple(SHAPES))
        check_int("--shapes AIVs per die", a, 1, 256)
        shapes.append((d, a))
    return shapes


def build_growth(runs):
    """Lines saying how build time grows with dies at each AIV count of the scale probe's
    finished shapes (``build s at 16 -> 64 dies: 184 -> 639 s, x3.5 for x4 dies``)."""
    lines = []
    for a in sorted({r["aivs_per_die"] for r in runs}):
        ok = sorted((r["dies"], r["build_s"]) for r in runs
                    if r["aivs_per_die"] == a and r["status"] == "ok" and r.get("build_s"))
        if len(ok) >= 2:
            (d0, b0), (d1, b1) = ok[0], ok[-1]
            lines.append(f"build time at {a} AIVs per die, {d0} -> {d1} dies: {b0:.0f} -> {b1:.0f} s, "
                         f"x{b1 / b0:.2f} for x{d1 / d0:g} dies")
    return lines


def scale(shapes, budget_s, opt=SCALE_OPT, backend=SCALE_BACKEND):
    """Run the scale probe over ``shapes``; return ``{"budget_s", "runs", "largest"}``."""
    runs, failed = [], []
    for d, a in shapes:
        if any(d >= fd and a >= fa for fd, fa in failed):
            print(f"scale: {d} dies x {a} AIVs skipped (a smaller shape did not fit)", flush=True)
            continue
        print(f"scale: {d} dies x {a} AIVs, budget {budget_s:.0f} s ...", flush=True)
        row = probe_one(d, a, budget_s, opt, backend=backend)
        print(f"scale: {d}x{a}: {row['status']}, wall {row['wall_s']:.0f} s, "
              f"build {row.get('build_s', float('nan')):.0f} s, run {row.get('run_s', float('nan')):.1f} s, "
              f"peak RSS {row['peak_rss_mb']} MB", flush=True)
        runs.append(row)
        if row["status"] != "ok":
            failed.append((d, a))
    ok = [r for r in runs if r["status"] == "ok"]
    largest = max(ok, key=lambda r: (r["dies"] * r["aivs_per_die"], r["dies"]), default=None)
    return {"budget_s": budget_s, "opt": opt, "backend": backend,
            "hier": ",".join(verilator_hier()) if backend == "verilator" else "", "runs": runs,
            "largest": None if largest is None else [largest["dies"], largest["aivs_per_die"]]}


class Speed(Experiment):
    """One row per (dies, backend): cycles/s of alltoall, build time apart."""

    name = "speed"
    title = "simulated cycles per second of the whole machine (alltoall) per backend"
    params = (
        Param("backends", ",".join(SIMULATORS), "comma-separated backends", str),
        Param("dies", "4,16", f"comma-separated die counts ({', '.join(map(str, SHAPES))})", str),
        Param("aivs", 1, "AIVs per die", int, minimum=1),
        Param("opt", BENCH_OPT, "Verilator C++ optimisation level", str),
    )
    #: wall-clock figures: points run one at a time, never beside each other
    parallel = False

    def resolve(self, **given):
        p = super().resolve(**given)
        parse_backends("backends", p["backends"])
        check_choice("opt", p["opt"], OPT_LEVELS)
        parse_dies(p["dies"])
        return p

    def points(self, params, quick=False):
        dies = parse_dies(params["dies"])
        if quick:
            dies = dies[:1]
        backends = [b for b in params["backends"].split(",") if b]
        return [{"dies": d, "backend": b, "aivs": params["aivs"], "opt": params["opt"]}
                for d in dies for b in backends if not missing_reason(b)]

    def measure(self, point):
        print(f"bench: alltoall, cm384, {point['dies']} dies x {point['aivs']} AIV on "
              f"{point['backend']} ...", flush=True)
        row = bench_one(point["backend"], point["dies"], point["aivs"], opt=point["opt"])
        print(f"  {row['cycles']} cycles, build {row['build_s']:.1f} s, {row['runs']} run(s) in {row['run_s']:.2f} s, "
              f"{row['cycles_per_s']:.0f} cycles/s, correct={row['correct']}", flush=True)
        for problem in row["problems"]:
            print(f"  problem: {problem}", flush=True)
        return row

    def verdict(self, rows):
        """No paper figure: ``None`` when every run was correct, ``False`` when one was not.

        The papers give no simulator speed, so there is no number to hold against; a speed
        measured on a run that computed the wrong all-to-all (or whose repeats took different
        cycles) is no measurement, and the verdict says no."""
        ratio = ratios(rows)
        text = "; ".join(f"{b} at {d} dies: {x}x Amaranth's simulator"
                         for b, by_dies in ratio.items() for d, x in by_dies.items())
        wrong = [f"{r['backend']} at {r['dies']} dies" for r in rows if not r.get("correct")]
        rule = "tolerance: none on correctness, every run bit-exact; no paper figure for speed"
        if wrong:
            return False, f"wrong run(s): {', '.join(wrong)} ({rule})"
        return None, ((text or "cycles/s per backend") + " (the papers give no simulator speed; "
                      f"{rule})")

    def plot(self, rows, path):
        from ..results.plot import save, subplots
        fig, (ax,) = subplots()
        dies = sorted({r["dies"] for r in rows})
        backends = [b for b in SIMULATORS if any(r["backend"] == b for r in rows)]
        width = 0.8 / max(1, len(backends))
        for k, b in enumerate(backends):
            xs, ys = [], []
            for i, d in enumerate(dies):
                for r in rows:
                    if r["backend"] == b and r["dies"] == d:
                        xs.append(i + (k - (len(backends) - 1) / 2) * width)
                        ys.append(r["cycles_per_s"])
            ax.bar(xs, ys, width, label=b)
        ax.set_yscale("log")
        ax.set_xticks(range(len(dies)), [f"{d} dies" for d in dies])
        ax.set_ylabel("simulated cycles per second (machine run only)")
        ax.legend()
        save(fig, path, "Simulator speed: alltoall on cm384 per backend (no paper figure)")

    def format(self, rows):
        lines = [tabulate(
            [(r["backend"], r["dies"], r["cycles"], f"{r['build_s']:.1f}", r.get("runs", 1),
              f"{r['run_s']:.2f}", f"{r['cycles_per_s']:.0f}", f"{r.get('core_cycles_per_s') or 0:.0f}")
             for r in rows],
            headers=("backend", "dies", "cycles", "build s", "runs", "run s", "cycles/s",
                     "core-cycles/s"),
            disable_numparse=True, colalign=("right",) * 8)]
        for b, by_dies in ratios(rows).items():
            for d, x in by_dies.items():
                lines.append(f"{b} / pysim at {d} dies: {x}x (cycles per second, same invocation)")
        return "\n".join(lines)


def parse_dies(text):
    """``"4,16"`` → ``[4, 16]``: at least one, each one of :data:`SHAPES`, none twice."""
    try:
        dies = [int(d) for d in text.split(",") if d.strip()]
    except ValueError:
        raise UserError(f"dies must be comma-separated integers, not {text!r}") from None
    if not dies:
        raise UserError(f"dies must name at least one die count, not {text!r}")
    for d in dies:
        check_choice("dies", d, tuple(SHAPES))
    if len(set(dies)) != len(dies):
        raise UserError(f"dies names a count twice: {text!r}")
    return dies


def ratios(rows):
    """``{backend: {dies: its cycles/s / pysim's}}`` for Verilator and native where both ran (same invocation)."""
    out = {}
    for d in sorted({r["dies"] for r in rows}):
        by = {r["backend"]: r for r in rows if r["dies"] == d}
        for b in ("verilator", "native"):
            if b in by and "pysim" in by:
                out.setdefault(b, {})[str(d)] = round(by[b]["cycles_per_s"] / by["pysim"]["cycles_per_s"], 1)
    return out


EXPERIMENT = register(Speed())
