"""``epfabric calibrate --preset NAME``: latency and bandwidth per distance class next to the preset's.

Front end of the ``calibrate`` experiment (:mod:`epfabric.sim.lab.experiments.calibrate`).
``--fit`` fits the preset's timing knobs to the calibration's training set instead
(:mod:`epfabric.sim.lab.fit`); ``--write`` stores the result as the ``<preset>-fit`` preset.
"""

import sys

from ...sw.presets import get_preset, preset_names
from ..backends import SIMULATORS
from ..lab.experiments.calibrate import format_report, calibrate
from ...hw.validate import UserError
from ..lab import sweep
from .common import check_output, positive, write_json

__all__ = ["add_arguments", "prepare"]


def add_arguments(parser):
    parser.add_argument("--preset", help=f"one of {', '.join(preset_names())} or a machine "
                                          f"file FILE.toml (required; with --fit default cm384)")
    parser.add_argument("--backend", default=None, choices=SIMULATORS,
                        help="simulator (default pysim; with --fit native)")
    parser.add_argument("--fit", action="store_true",
                        help="fit the timing knobs (store window, die injection, read start, "
                             "SyncAll cost) of PRESET-ascend (the declared Ascend structure) to "
                             "the training set F1-F5: 24 dispatch runs at the "
                             "paper's shape and 6 a check, each cached (a rerun at the same "
                             "source reads them)")
    parser.add_argument("--write", action="store_true",
                        help="with --fit: write the structure, the fitted values and their "
                             "provenance to sw/fits/PRESET.json, the preset PRESET-fit")
    parser.add_argument("--seed", type=int, default=0, help="with --fit: routing seed (default 0)")
    parser.add_argument("--scheduler", default="serial",
                        help="with --fit: serial (default), local (Dask, one worker per core) or "
                             "a Dask scheduler address")
    parser.add_argument("--blocks", type=int, default=None,
                        help="blocks per bandwidth stream (default 256)")
    parser.add_argument("--data-bytes", type=int, default=4,
                        help="simulated bytes per block (cycle counts do not depend on it; default 4)")
    parser.add_argument("--json", metavar="FILE", help="also write the report as JSON")
    parser.add_argument("--quiet", action="store_true", help="no progress messages")


def prepare(args):
    if args.fit:
        return _prepare_fit(args)
    if args.write:
        raise UserError("--write needs --fit")
    if args.preset is None:
        raise UserError("--preset is required (or --fit)")
    args.backend = args.backend or "pysim"
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


def _prepare_fit(args):
    from ..lab import fit
    preset = get_preset(args.preset or "cm384")
    args.backend = args.backend or "native"
    positive("--seed", args.seed, 0)
    check_output(args.json, "--json")
    # the name, Dask and that an address answers, before the fit sizes its design (minutes)
    sweep.open_scheduler(args.scheduler).probe()
    log = (lambda *a: None) if args.quiet else (lambda text: print(text, file=sys.stderr,
                                                                   flush=True))

    def job():
        report = fit.fit(preset.name, backend=args.backend, seed=args.seed,
                         scheduler=args.scheduler, log=log)
        print(fit.format_report(report))
        if args.json:
            write_json(args.json, report)
        if args.write:
            print(f"wrote {fit.write_fit(report)}")
        return 0
    return job
