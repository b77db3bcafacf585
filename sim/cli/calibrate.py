"""``epfabric calibrate --preset NAME``: latency and bandwidth per distance class next to the preset's.

Front end of the ``calibrate`` experiment (:mod:`epfabric.sim.lab.experiments.calibrate`).
"""

import sys

from ...sw.presets import get_preset, preset_names
from ..backends import SIMULATORS
from ..lab.experiments.calibrate import format_report, calibrate
from .common import check_output, positive, write_json

__all__ = ["add_arguments", "prepare"]


def add_arguments(parser):
    parser.add_argument("--preset", required=True, help=f"one of {', '.join(preset_names())}")
    parser.add_argument("--backend", default="pysim", choices=SIMULATORS,
                        help="simulator (default pysim)")
    parser.add_argument("--blocks", type=int, default=None,
                        help="blocks per bandwidth stream (default 256)")
    parser.add_argument("--data-bytes", type=int, default=4,
                        help="simulated bytes per block (cycle counts do not depend on it; default 4)")
    parser.add_argument("--json", metavar="FILE", help="also write the report as JSON")
    parser.add_argument("--quiet", action="store_true", help="no progress messages")


def prepare(args):
    preset = get_preset(args.preset)
    positive("--blocks", args.blocks, 16)
    positive("--data-bytes", args.data_bytes)
    check_output(args.json, "--json")

    def job():
        if not args.quiet:
            print(f"calibrating {preset.name} on {args.backend} ...", file=sys.stderr, flush=True)
        report = calibrate(preset, backend=args.backend, blocks=args.blocks,
                         data_bytes=args.data_bytes, verbose=not args.quiet)
        print(format_report(report))
        if args.json:
            write_json(args.json, report)
        return 0
    return job
