"""``epfabric races [--scenario NAME ...] [--json FILE]``: the synchronization-race catalog.

Front end of the ``races`` experiment (:mod:`epfabric.sim.lab.experiments.races`).
"""

from ..lab.experiments import EXPERIMENTS
from ..lab.experiments.races import SCENARIOS
from .common import check_output, write_json

__all__ = ["add_arguments", "prepare"]

EXPERIMENT = EXPERIMENTS["races"]


def add_arguments(parser):
    parser.add_argument("--scenario", action="append", choices=list(SCENARIOS),
                        help="run only this scenario (repeatable; default: all)")
    parser.add_argument("--json", metavar="FILE", help="write the catalog as JSON")


def prepare(args):
    params = EXPERIMENT.resolve(scenarios=",".join(args.scenario) if args.scenario else None)
    check_output(args.json, "--json")

    def job():
        rows = EXPERIMENT.run(**params)
        print(EXPERIMENT.format(rows))
        if args.json:
            write_json(args.json, rows)
        return 0
    return job
