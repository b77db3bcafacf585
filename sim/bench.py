"""``epfabric bench``: simulated cycles per second of the whole machine, per backend.

Runs ``alltoall`` on ``cm384`` machines of 4 dies (superpod 2×2×1) and 16 dies
(2×4×2), one AIV per die by default, on each backend, and reports per run:

* ``build_s`` — Verilog generation + simulator build (Icarus/Verilator; cached
  by content, so a rerun reports the cache hit) or elaboration (pysim);
* ``run_s`` — wall time of the machine run alone, from ``start`` to ``stop``
  (host loading and read-back excluded), measured inside the simulator process;
* ``cycles_per_s`` = simulated cycles / ``run_s``;

and the Verilator / Amaranth-simulator ratio of cycles per second measured in
the same invocation. Verilator models are built at ``-O0`` (``--opt`` to
change): measured here, gcc at ``-O2`` spent over 19 CPU-minutes on a single
generated C++ file of the 4-die system without finishing, so ``-O0`` figures
are a lower bound on Verilator's speed.

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
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from epfabric.sw.driver import Machine, MachineConfig
from epfabric.sw.kernels import alltoall

from . import harness
from .machine import HarnessBackend, session_intent, system_spec
from .tools import SIMULATORS, missing_reason

__all__ = ["bench_one", "probe_one", "add_arguments", "main"]

SHAPES = {4: ("superpod", 2, 2, 1), 16: ("superpod", 2, 4, 2), 32: ("superpod", 2, 8, 2),
          64: ("superpod", 2, 8, 4), 128: ("superpod", 2, 8, 8)}
BENCH_OPT = "-O0"
#: Shapes the scale probe tries, smallest first: (dies, AIVs per die).
SCALE_LADDER = [(16, 1), (16, 2), (32, 1), (32, 2), (16, 4), (32, 4), (64, 1), (16, 8),
                (64, 2), (128, 1)]


class _TimedBackend(HarnessBackend):
    """A backend that also reports build time and the run's own wall time."""

    def __init__(self, simulator, opt):
        super().__init__(simulator)
        self.opt = opt
        self.build_s = 0.0

    def execute(self, config, session):
        spec = system_spec(config)
        t0 = time.monotonic()
        if self.name == "pysim":
            from amaranth.sim import Simulator
            Simulator(spec.build())          # elaboration, as a build-time figure
        else:
            harness._build(spec, self.name, False, self.opt)   # Verilog generation + build
        self.build_s = time.monotonic() - t0
        result, _ = harness.run(spec, session_intent, {"session": session},
                                simulator=self.name, opt=self.opt)
        return result


def bench_one(simulator, dies, aivs=1, opt=BENCH_OPT, max_cycles=1_000_000):
    """Run alltoall once; return the JSON row (``run_s`` measured around the machine run)."""
    topo = SHAPES[dies]
    be = _TimedBackend(simulator, opt)
    shape = MachineConfig("cm384", topology=topo, aivs_per_die=aivs)
    m = Machine("cm384", backend=be, topology=topo, aivs_per_die=aivs, **alltoall.machine_sizes(shape))
    tok = alltoall.load(m)
    report = m.run(max_cycles)
    verdict = alltoall.check(m, report, tok)
    run_s = report.extra.get("run_wall_s")
    return {"backend": simulator, "dies": dies, "aivs_per_die": aivs, "cycles": report.cycles,
            "build_s": round(be.build_s, 2), "run_s": round(run_s, 3),
            "cycles_per_s": round(report.cycles / run_s, 1) if run_s else None,
            "correct": verdict["correct"], "problems": verdict["problems"][:5]}


def probe_one(dies, aivs, budget_s, opt=BENCH_OPT, log=print):
    """One scale-probe point: ``bench_one`` on Verilator in a subprocess, fresh build, time budget.

    Returns {``dies``, ``aivs_per_die``, ``status`` (``ok``, ``over_budget``,
    ``failed``), ``wall_s``, ``build_s``, ``run_s``, ``cycles``,
    ``cycles_per_s``, ``correct``, ``peak_rss_mb``}; ``peak_rss_mb`` is the
    largest resident set of any one process of the attempt (``wait4``).
    """
    with tempfile.TemporaryDirectory(prefix="epf-scale-") as tdir:
        out = Path(tdir) / "row.json"
        cmd = [sys.executable, "-m", "epfabric.sim.cli", "bench", "--backends", "verilator",
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
                os.killpg(proc.pid, signal.SIGKILL)
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
            run = json.loads(out.read_text())["runs"][0]
            row.update({k: run[k] for k in ("cycles", "build_s", "run_s", "cycles_per_s", "correct")})
            row["status"] = "ok" if run["correct"] and wall <= budget_s else "failed"
            if not run["correct"]:
                row["error"] = "\n".join(tail[-8:])
        return row


def _parse_shapes(text):
    shapes = []
    for item in text.split(","):
        try:
            d, a = (int(x) for x in item.lower().split("x"))
        except ValueError:
            raise ValueError(f"--shapes: {item!r} is not DIESxAIVS (e.g. 16x2)") from None
        if d not in SHAPES:
            raise ValueError(f"--shapes: {d} dies not one of {', '.join(map(str, SHAPES))}")
        if not 1 <= a <= 256:
            raise ValueError(f"--shapes: {a} AIVs per die not in [1, 256]")
        shapes.append((d, a))
    return shapes


def scale(shapes, budget_s, opt=BENCH_OPT):
    """Run the scale probe over ``shapes``; return ``{"budget_s", "runs", "largest"}``."""
    runs, failed = [], []
    for d, a in shapes:
        if any(d >= fd and a >= fa for fd, fa in failed):
            print(f"scale: {d} dies x {a} AIVs skipped (a smaller shape did not fit)", flush=True)
            continue
        print(f"scale: {d} dies x {a} AIVs, budget {budget_s:.0f} s ...", flush=True)
        row = probe_one(d, a, budget_s, opt)
        print(f"scale: {d}x{a}: {row['status']}, wall {row['wall_s']:.0f} s, "
              f"build {row.get('build_s', float('nan')):.0f} s, run {row.get('run_s', float('nan')):.1f} s, "
              f"peak RSS {row['peak_rss_mb']} MB", flush=True)
        runs.append(row)
        if row["status"] != "ok":
            failed.append((d, a))
    ok = [r for r in runs if r["status"] == "ok"]
    largest = max(ok, key=lambda r: (r["dies"] * r["aivs_per_die"], r["dies"]), default=None)
    return {"budget_s": budget_s, "opt": opt, "runs": runs,
            "largest": None if largest is None else [largest["dies"], largest["aivs_per_die"]]}


def add_arguments(parser):
    parser.add_argument("--backends", default=",".join(SIMULATORS),
                        help="comma-separated backends (default: all three)")
    parser.add_argument("--dies", default="4,16", help="comma-separated die counts (4, 16, 32, 64, 128)")
    parser.add_argument("--aivs", type=int, default=1, help="AIVs per die")
    parser.add_argument("--opt", default=BENCH_OPT,
                        help="Verilator C++ optimisation level (default -O0; -O2 compiles for tens of minutes)")
    parser.add_argument("--json", metavar="FILE", help="write {runs, verilator_over_pysim} as JSON")
    parser.add_argument("--scale", action="store_true",
                        help="scale probe: largest Verilator system that builds and runs in --budget")
    parser.add_argument("--budget", type=float, default=600.0,
                        help="scale probe: seconds per shape, generation + build + run (default 600)")
    parser.add_argument("--shapes", default=",".join(f"{d}x{a}" for d, a in SCALE_LADDER),
                        help="scale probe: comma-separated DIESxAIVS, smallest first")


def main(args):
    if args.scale:
        if args.budget <= 0:
            raise ValueError(f"--budget must be positive, not {args.budget}")
        if missing_reason("verilator"):
            raise ValueError(f"--scale needs Verilator: {missing_reason('verilator')}")
        result = scale(_parse_shapes(args.shapes), args.budget, args.opt)
        print(f"{'dies':>5} {'AIVs':>5} {'status':>12} {'wall s':>7} {'build s':>8} {'run s':>7} "
              f"{'cycles':>7} {'peak MB':>8}")
        for r in result["runs"]:
            print(f"{r['dies']:>5} {r['aivs_per_die']:>5} {r['status']:>12} {r['wall_s']:>7.0f} "
                  f"{r.get('build_s', float('nan')):>8.0f} {r.get('run_s', float('nan')):>7.1f} "
                  f"{r.get('cycles', 0):>7} {r['peak_rss_mb']:>8}")
        print(f"largest within {args.budget:.0f} s: "
              + (f"{result['largest'][0]} dies x {result['largest'][1]} AIVs" if result["largest"] else "none"))
        if args.json:
            Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
            print(f"wrote {args.json}")
        return 0 if result["largest"] else 1
    backends = [b for b in args.backends.split(",") if b]
    for b in backends:
        if b not in SIMULATORS:
            raise ValueError(f"--backends: unknown backend {b!r}; valid: {', '.join(SIMULATORS)}")
    dies = [int(d) for d in args.dies.split(",") if d]
    for d in dies:
        if d not in SHAPES:
            raise ValueError(f"--dies: {d} not one of {', '.join(map(str, SHAPES))}")
    runs = []
    for d in dies:
        for b in backends:
            reason = missing_reason(b)
            if reason:
                print(f"skip {b}: {reason}", file=sys.stderr)
                continue
            print(f"bench: alltoall, cm384, {d} dies x {args.aivs} AIV on {b} ...", flush=True)
            row = bench_one(b, d, args.aivs, opt=args.opt)
            print(f"  {row['cycles']} cycles, build {row['build_s']:.1f} s, run {row['run_s']:.2f} s, "
                  f"{row['cycles_per_s']:.0f} cycles/s, correct={row['correct']}", flush=True)
            for problem in row["problems"]:
                print(f"  problem: {problem}", flush=True)
            runs.append(row)
    ratio = {}
    for d in dies:
        by = {r["backend"]: r for r in runs if r["dies"] == d}
        if "verilator" in by and "pysim" in by:
            ratio[str(d)] = round(by["verilator"]["cycles_per_s"] / by["pysim"]["cycles_per_s"], 1)
    print(f"{'backend':>10} {'dies':>5} {'cycles':>8} {'build s':>8} {'run s':>8} {'cycles/s':>10}")
    for r in runs:
        print(f"{r['backend']:>10} {r['dies']:>5} {r['cycles']:>8} {r['build_s']:>8.1f} "
              f"{r['run_s']:>8.2f} {r['cycles_per_s']:>10.0f}")
    for d, x in ratio.items():
        print(f"verilator / pysim at {d} dies: {x}x (cycles per second, same invocation)")
    if args.json:
        Path(args.json).write_text(json.dumps({"runs": runs, "verilator_over_pysim": ratio},
                                              indent=2) + "\n")
        print(f"wrote {args.json}")
    return 0 if all(r["correct"] for r in runs) else 1
