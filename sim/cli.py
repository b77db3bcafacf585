"""Command-line interface: ``epfabric SUBCOMMAND ...``.

Each subcommand lives in its own module of :mod:`epfabric.sim` with
``add_arguments(parser)`` and ``main(args) -> int``; errors in user input exit
with status 2 and a one-line message.
"""

import argparse
import importlib
import sys

# (subcommand, module, one-line help)
COMMANDS = [
    ("verilog", "epfabric.sim.export", "write Verilog for a registered component"),
    ("demo", "epfabric.sim.demo", "run the vector unit's quaternary-search demo (UBEP Alg. 1)"),
    ("races", "epfabric.sim.races", "run the synchronization-race catalog and write waveforms"),
    ("calibrate", "epfabric.sim.calibrate", "measure latency and bandwidth per distance class"),
    ("agrs", "epfabric.sim.agrs", "AllGather + ReduceScatter, in-network (INC) or ring"),
    ("run", "epfabric.sim.run", "run a kernel (pingpong, syncall, alltoall) on the simulated machine"),
    ("bench", "epfabric.sim.bench", "simulated cycles per second of alltoall on each backend"),
]


def make_parser():
    parser = argparse.ArgumentParser(prog="epfabric", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, module, help_text in COMMANDS:
        try:
            mod = importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name != module:
                raise
            continue  # subcommand not built yet in this checkout
        p = sub.add_parser(name, help=help_text, description=help_text)
        mod.add_arguments(p)
        p.set_defaults(_main=mod.main)
    return parser


def main(argv=None):
    parser = make_parser()
    args = parser.parse_args(argv)
    try:
        return args._main(args) or 0
    except (ValueError, TypeError) as exc:
        print(f"epfabric {args.command}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
