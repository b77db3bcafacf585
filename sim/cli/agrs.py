"""``epfabric agrs``: one AllGather + one ReduceScatter, in-network (INC) or ring; ``--sweep`` for Fig. 6.

Front end of :mod:`epfabric.sim.lab.experiments.agrs` (the ``agrs`` kernel on an
AG/RS machine).
"""

import functools
import sys

from ...hw.validate import UserError
from ...sw.config import AgrsConfig
from ...sw.machine import WatchdogTimeout
from ...sw.kernels.agrs import check_fits
from ...sw.presets import get_preset, preset_names
from ..backends import SIMULATORS
from ..lab.experiments.agrs import (SWEEP_ROWS, format_report, format_sweep, run_point, sweep,
                                   sweep_sizes)
from .common import check_output, max_cycles, positive, write_json

__all__ = ["add_arguments", "prepare"]


def add_arguments(parser):
    parser.add_argument("--ranks", type=int, default=4, help="ranks N (default 4)")
    parser.add_argument("--bytes", type=int, default=None,
                        help="bytes S per collective, a multiple of N*512 (default N*512*16)")
    parser.add_argument("--mode", choices=("inc", "ring"), default="inc")
    parser.add_argument("--concurrent", action="store_true", help="AG and RS at once (Fig. 6)")
    parser.add_argument("--backend", choices=SIMULATORS, default=None,
                        help="simulator (default pysim; verilator with --sweep)")
    parser.add_argument("--preset", default="incmoe-testbed", help=f"one of {', '.join(preset_names())}")
    parser.add_argument("--lanes", type=int, default=None,
                        help="int32 lanes simulated per block (default 2; 1 with --sweep)")
    parser.add_argument("--sweep", action="store_true",
                        help="Fig. 6 table: concurrent ring vs INC over several S "
                             "(default backend for it: verilator)")
    parser.add_argument("--sizes", default=None,
                        help="with --sweep: comma-separated S in bytes (default N*512*"
                             + "{" + ",".join(map(str, SWEEP_ROWS)) + "})")
    parser.add_argument("--max-cycles", type=int, default=None,
                        help="watchdog: cycles per run before it counts as hung (default 10^7)")
    parser.add_argument("--json", metavar="FILE", help="also write the report as JSON")


def prepare(args):
    preset = get_preset(args.preset)
    positive("--ranks", args.ranks, 2)
    positive("--lanes", args.lanes)
    max_cycles("--max-cycles", args.max_cycles)
    check_output(args.json, "--json")
    AgrsConfig(preset.name, ranks=args.ranks, lanes=2 if args.lanes is None else args.lanes)
    unit = args.ranks * preset.block_bytes
    if not args.sweep:
        if args.sizes is not None:
            raise UserError(f"--sizes applies only with --sweep (one size: --bytes), not {args.sizes!r}")
    elif args.bytes is not None:
        raise UserError(f"--bytes applies only without --sweep (several sizes: --sizes), "
                        f"not {args.bytes}")
    if args.sweep:
        sizes = None
        if args.sizes is not None:
            if not args.sizes.strip():
                raise UserError(f"--sizes must name at least one size, not {args.sizes!r}")
            try:
                sizes = [int(x) for x in args.sizes.split(",")]
            except ValueError:
                raise UserError(f"--sizes must be comma-separated integers, not {args.sizes!r}") from None
        for s in sizes or ():
            positive("--sizes", s, unit)
            if s % unit:
                raise UserError(f"--sizes must be multiples of ranks * block_bytes ({unit}), not {s}")
            check_fits("--sizes", s, preset=preset.name, ranks=args.ranks, ranks_name="--ranks")
        if sizes is None:
            sizes, skipped = sweep_sizes(preset.name, args.ranks)
            if not sizes:
                raise UserError(f"--ranks {args.ranks}: no default --sweep size fits a rank's memory")
            for s in skipped:
                print(f"skip S={s}: does not fit a rank's memory at --ranks {args.ranks}")

        @_watchdog_exits_1
        def job():
            rows = sweep(preset=args.preset, ranks=args.ranks, sizes=sizes,
                         backend=args.backend or "verilator",
                         lanes=1 if args.lanes is None else args.lanes, max_cycles=args.max_cycles)
            print(format_sweep(rows, args.ranks))
            if args.json:
                write_json(args.json, {"sweep": rows})
            return 0 if all(r["ring"]["correct"] and r["inc"]["correct"] for r in rows) else 1
        return job

    nbytes = args.bytes if args.bytes is not None else unit * 16
    positive("--bytes", nbytes, unit)
    if nbytes % unit:
        raise UserError(f"--bytes must be a multiple of ranks * block_bytes ({unit}), not {nbytes}")
    check_fits("--bytes", nbytes, preset=preset.name, ranks=args.ranks, ranks_name="--ranks")

    @_watchdog_exits_1
    def job():
        report = run_point(preset=args.preset, ranks=args.ranks, nbytes=nbytes, mode=args.mode,
                           concurrent=args.concurrent, backend=args.backend or "pysim",
                           lanes=2 if args.lanes is None else args.lanes, max_cycles=args.max_cycles)
        print(format_report(report))
        if args.json:
            write_json(args.json, report)
        return 0 if report["correct"] else 1
    return job


def _watchdog_exits_1(job):
    """A hung run prints the watchdog's diagnosis and exits 1 (as ``epfabric run`` does)."""
    @functools.wraps(job)
    def wrapped():
        try:
            return job()
        except WatchdogTimeout as exc:
            print(f"epfabric agrs: {exc}", file=sys.stderr)
            return 1
    return wrapped
