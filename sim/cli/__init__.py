"""Command-line interface: ``epfabric SUBCOMMAND ...``.

Each subcommand is a thin module of this package with two functions:

* ``add_arguments(parser)``;
* ``prepare(args)`` — validates every option and output path and returns a
  zero-argument callable that does the work and returns the exit status.

Bad input is found in ``prepare``, before anything is simulated, and raised
as :class:`~epfabric.hw.validate.UserError`: the CLI prints one line naming the
option and the value and exits with status 2. A ``UserError`` that only the
work itself can find (a kernel refusing a shape when it generates its
programs) is reported the same way. Any other exception — a plain
``ValueError`` or ``TypeError`` included — is a bug and shows its traceback.
Ctrl-C prints ``interrupted`` and exits with status 130; what finished is kept
(``reproduce`` caches every finished point).
"""

import argparse
import importlib
import sys

from ...hw.validate import UserError
from .. import __version__

__all__ = ["COMMANDS", "make_parser", "main"]

# (subcommand, module, one-line help)
COMMANDS = [
    ("run", "epfabric.sim.cli.run", "run a registered kernel on the simulated machine and check it"),
    ("presets", "epfabric.sim.cli.presets",
     "list the machine presets; --show NAME prints one as a TOML machine file to edit"),
    ("verilog", "epfabric.sim.cli.verilog", "write Verilog for a registered component"),
    ("demo", "epfabric.sim.cli.demo", "quaternary search (UBEP Alg. 1) on the simulated vector unit"),
    ("races", "epfabric.sim.cli.races", "run the synchronization-race catalog and write waveforms"),
    ("calibrate", "epfabric.sim.cli.calibrate",
     "latency and bandwidth per distance class; --fit: fit a preset's timing knobs"),
    ("agrs", "epfabric.sim.cli.agrs", "AllGather + ReduceScatter, in-network (INC) or ring"),
    ("bench", "epfabric.sim.cli.bench", "simulated cycles per second of alltoall on each backend"),
    ("fabric-speed", "epfabric.sim.cli.fabric_speed",
     "cycles per second of a loaded superpod fabric, per backend"),
    ("reproduce", "epfabric.sim.cli.reproduce",
     "reproduce paper figures: CSV, JSON and PNG per experiment, and a summary"),
    ("figures", "epfabric.sim.cli.figures", "redraw every PNG of a reproduce folder from its CSVs"),
    ("synth", "epfabric.sim.cli.synth",
     "synthesis (and place-and-route) report of a registered component for an FPGA"),
    ("prove", "epfabric.sim.cli.prove",
     "formal properties of the blocks (SymbiYosys): proved / counterexample / unknown"),
    ("soak", "epfabric.sim.cli.soak",
     "long random-traffic soak of the superpod fabric, scoreboarded in hardware"),
    ("mutate", "epfabric.sim.cli.mutate", "curated mutations: break one thing, check the tests notice"),
    ("pages", "epfabric.sim.cli.pages", "write the results pages from the recorded JSON"),
]


def make_parser():
    parser = argparse.ArgumentParser(
        prog="epfabric", description="Cycle-approximate models of the hardware under expert-parallel "
        "MoE communication: run kernels and experiments, write Verilog.",
        epilog="Each command has --help. Bad input exits with status 2 and a one-line message.")
    parser.add_argument("--version", action="version", version=f"epfabric {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, module, help_text in COMMANDS:
        try:
            mod = importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name != module:
                raise
            continue        # a command whose module is not in this checkout yet

        p = sub.add_parser(name, help=help_text, description=help_text)
        mod.add_arguments(p)
        p.set_defaults(_prepare=mod.prepare)
    return parser


def main(argv=None):
    parser = make_parser()
    args = parser.parse_args(argv)
    try:
        job = args._prepare(args)
        return job() or 0
    except UserError as exc:
        print(f"epfabric {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"epfabric {args.command}: interrupted", file=sys.stderr)
        return 130
