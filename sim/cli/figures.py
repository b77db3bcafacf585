"""``epfabric figures DIR``: redraw every ``NAME.png`` in DIR from its ``NAME.csv``, without simulating."""

from pathlib import Path

from ...hw.validate import UserError
from ..lab.experiments import EXPERIMENTS
from ..lab.reproduce import redraw, write_summary

__all__ = ["add_arguments", "prepare"]


def add_arguments(parser):
    parser.add_argument("folder", metavar="DIR", help="a folder written by epfabric reproduce")


def prepare(args):
    folder = Path(args.folder)
    if not folder.is_dir():
        raise UserError(f"DIR {args.folder!r} is not a folder")
    if not list(folder.glob("*.csv")):
        raise UserError(f"DIR {args.folder!r} has no NAME.csv (run epfabric reproduce -o DIR first)")

    def job():
        drawn = redraw(folder, EXPERIMENTS)
        write_summary(folder)
        return 0 if drawn else 1
    return job
