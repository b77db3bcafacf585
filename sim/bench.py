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

``--scale`` instead grows the Verilator system (dies × AIVs per die) until a
build plus run exceeds a time budget, reporting build time, run time and the
peak memory of the build/simulator processes.
"""

import json
import resource
import sys
import time
from pathlib import Path

from epfabric.sw.driver import Machine, MachineConfig
from epfabric.sw.kernels import alltoall

from . import harness
from .machine import HarnessBackend, session_intent, system_spec
from .tools import SIMULATORS, missing_reason

__all__ = ["bench_one", "add_arguments", "main"]

SHAPES = {4: ("superpod", 2, 2, 1), 16: ("superpod", 2, 4, 2), 32: ("superpod", 2, 8, 2),
          64: ("superpod", 2, 8, 4), 128: ("superpod", 2, 8, 8)}
BENCH_OPT = "-O0"


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
            harness.verilog_of(spec)
            harness._build(spec, self.name, False, self.opt)
        self.build_s = time.monotonic() - t0
        result, _ = harness.run(spec, session_intent, {"session": session},
                                simulator=self.name, opt=self.opt)
        return result


def bench_one(simulator, dies, aivs=1, opt=BENCH_OPT, max_cycles=1_000_000):
    """Run alltoall once; return the JSON row (``run_s`` measured around the machine run)."""
    topo = SHAPES[dies]
    be = _TimedBackend(simulator, opt)
    shape = MachineConfig("cm384", topology=topo, aivs_per_die=aivs)
    m = Machine("cm384", backend=be, topology=topo, aivs_per_die=aivs,
                hbm_blocks=1 << (alltoall.blocks_needed(shape) - 1).bit_length(),
                imem_depth=1 << (len(alltoall.program(shape, 0, 0).assemble()) - 1).bit_length())
    tok = alltoall.load(m)
    report = m.run(max_cycles)
    verdict = alltoall.check(m, report, tok)
    run_s = report.extra.get("run_wall_s")
    return {"backend": simulator, "dies": dies, "aivs_per_die": aivs, "cycles": report.cycles,
            "build_s": round(be.build_s, 2), "run_s": round(run_s, 3),
            "cycles_per_s": round(report.cycles / run_s, 1) if run_s else None,
            "correct": verdict["correct"],
            "peak_rss_mb_children": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024}


def add_arguments(parser):
    parser.add_argument("--backends", default=",".join(SIMULATORS),
                        help="comma-separated backends (default: all three)")
    parser.add_argument("--dies", default="4,16", help="comma-separated die counts (4, 16, 32, 64, 128)")
    parser.add_argument("--aivs", type=int, default=1, help="AIVs per die")
    parser.add_argument("--opt", default=BENCH_OPT,
                        help="Verilator C++ optimisation level (default -O0; -O2 compiles for tens of minutes)")
    parser.add_argument("--json", metavar="FILE", help="write {runs, verilator_over_pysim} as JSON")


def main(args):
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
