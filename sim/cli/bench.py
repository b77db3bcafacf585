"""``epfabric bench``: simulated cycles/s of the whole machine per backend; ``--scale`` for the scale probe.

Front end of the ``speed`` experiment (:mod:`epfabric.sim.lab.experiments.speed`).
"""

import os

from tabulate import tabulate

from ...hw.validate import UserError, check_choice
from ..backends import SIMULATORS, missing_reason
from ..backends.toolchain import OPT_LEVELS, check_opt, parse_backends
from ..lab.experiments import EXPERIMENTS
from ..lab.experiments.speed import (BENCH_OPT, SCALE_BACKEND, SCALE_LADDER, SCALE_OPT, SHAPES,
                                     build_growth, parse_shapes, ratios, scale)
from .common import check_output, usable_backends, write_json

__all__ = ["add_arguments", "prepare"]

EXPERIMENT = EXPERIMENTS["speed"]


def add_arguments(parser):
    parser.add_argument("--backends", "--backend", dest="backends", default=None,
                        help="comma-separated backends (default: all four; with --scale one of "
                             f"verilator, native, default {SCALE_BACKEND})")
    parser.add_argument("--dies", default="4,16",
                        help=f"comma-separated die counts ({', '.join(map(str, SHAPES))})")
    parser.add_argument("--aivs", type=int, default=1, help="AIVs per die")
    parser.add_argument("--opt", default=None,
                        help=f"Verilator hot-code C++ optimisation level (OPT_FAST; cold code is always "
                             f"-O0), written --opt=-O1 (default {BENCH_OPT}, {SCALE_OPT} with --scale)")
    parser.add_argument("--hier", default=None, metavar="MODULES",
                        help="Verilate these shared modules as --hierarchical blocks: comma-separated "
                             "(epf_aiv,epf_die,...) or 'all' (sets EPFABRIC_VERILATOR_HIER; default: "
                             "one flat model)")
    parser.add_argument("--json", metavar="FILE", help="write {runs, over_pysim} as JSON")
    parser.add_argument("--scale", action="store_true",
                        help="scale probe: largest system that builds and runs in --budget, each shape in a "
                             "fresh process and build cache (native backend unless --backends verilator)")
    parser.add_argument("--budget", type=float, default=600.0,
                        help="scale probe: seconds per shape, generation + build + run (default 600)")
    parser.add_argument("--shapes", default=",".join(f"{d}x{a}" for d, a in SCALE_LADDER),
                        help="scale probe: comma-separated DIESxAIVS, smallest first")


def prepare(args):
    check_output(args.json, "--json")
    if args.hier is not None:
        if not all(name == "all" or name.startswith("epf_") for name in args.hier.split(",") if name):
            raise UserError(f"--hier must name shared modules (epf_...) or 'all', not {args.hier!r}")

    def use_hier():
        # read by the Verilator build here and in the scale probe's subprocesses; set only
        # once every option is checked (a refused command changes nothing)
        if args.hier is not None:
            os.environ["EPFABRIC_VERILATOR_HIER"] = args.hier
    if args.scale:
        if args.opt is not None:
            check_choice("--opt", args.opt, OPT_LEVELS)
        if args.budget <= 0:
            raise UserError(f"--budget must be positive, not {args.budget}")
        backend = SCALE_BACKEND if args.backends is None else args.backends
        check_choice("--backends (with --scale)", backend, ("verilator", "native"))
        if args.hier is not None and backend != "verilator":
            raise UserError("--hier applies to the verilator backend only; add --backends verilator")
        if missing_reason(backend):
            raise UserError(f"--scale needs Verilator: {missing_reason(backend)}")
        shapes = parse_shapes(args.shapes)

        def probe():
            use_hier()
            result = scale(shapes, args.budget, args.opt or SCALE_OPT, backend)
            print(tabulate(
                [(r["dies"], r["aivs_per_die"], r["status"], f"{r['wall_s']:.0f}",
                  f"{r.get('build_s', float('nan')):.0f}", f"{r.get('run_s', float('nan')):.1f}",
                  r.get("cycles", 0), f"{r.get('cycles_per_s') or 0:,.0f}",
                  f"{r.get('core_cycles_per_s') or 0:,.0f}", r["peak_rss_mb"])
                 for r in result["runs"]],
                headers=("dies", "AIVs", "status", "wall s", "build s", "run s", "cycles",
                         "cycles/s", "core-cycles/s", "peak MB"),
                disable_numparse=True, colalign=("right",) * 10))
            for line in build_growth(result["runs"]):
                print(line)
            print(f"largest within {args.budget:.0f} s: "
                  + (f"{result['largest'][0]} dies x {result['largest'][1]} AIVs"
                     if result["largest"] else "none"))
            if args.json:
                write_json(args.json, result, recorded=True)
            return 0 if result["largest"] else 1
        return probe

    if args.backends is None:
        args.backends = ",".join(SIMULATORS)
    backends = parse_backends("--backends", args.backends)
    if args.opt is not None:
        check_opt("--opt", args.opt, backends)
    if args.hier is not None and "verilator" not in backends:
        raise UserError(f"--hier applies to the verilator backend only, not to {args.backends}")
    params = EXPERIMENT.resolve(backends=args.backends, dies=args.dies, aivs=args.aivs,
                                opt=args.opt or BENCH_OPT)
    usable_backends("--backends", backends)

    def job():
        use_hier()
        rows = EXPERIMENT.run(**params)
        print(EXPERIMENT.format(rows))
        if args.json:
            write_json(args.json, {"runs": rows, "over_pysim": ratios(rows)}, recorded=True)
        return 0 if all(r["correct"] for r in rows) else 1
    return job
