"""``epfabric reproduce [NAME ...|all] -o DIR``: every paper figure as CSV + JSON + PNG, and a summary.

Front end of :mod:`epfabric.sim.lab.results`. Experiments come from
:data:`epfabric.sim.lab.experiments.EXPERIMENTS`; points are cached
(``build/results``), so a rerun reads what it has and a killed sweep resumes.
"""

from ...hw.validate import UserError
from ..lab.experiments import EXPERIMENTS
from ..backends import SIMULATORS
from ..output import check_output_dir
from ..lab.reproduce import reproduce
from ..lab.sweep import have_dask, open_scheduler
from .common import positive

__all__ = ["add_arguments", "prepare"]


def add_arguments(parser):
    parser.add_argument("names", nargs="*", default=["all"], metavar="NAME",
                        help="experiments to reproduce, or all (default): "
                             + ", ".join(sorted(EXPERIMENTS)))
    parser.add_argument("-o", "--output", required=True, metavar="DIR",
                        help="folder for NAME.csv, NAME.json, NAME.png and summary.md")
    parser.add_argument("--backend", choices=SIMULATORS, default=None,
                        help="simulator for experiments that take one (default: each experiment's)")
    parser.add_argument("--quick", action="store_true", help="the reduced grid of each experiment")
    parser.add_argument("--scheduler", default=None,
                        help="serial, local (a Dask LocalCluster, one worker per core; the default "
                             "where Dask is installed) or a Dask scheduler address (tcp://host:8786)")
    parser.add_argument("--workers", type=int, default=None,
                        help="worker processes of --scheduler local (default: one per core)")
    parser.add_argument("--force", action="store_true", help="recompute cached points")
    parser.add_argument("--param", action="append", default=[], metavar="NAME=VALUE",
                        help="an experiment parameter instead of its default (one experiment "
                             "only), e.g. inc-ep --param ranks=32 --param seeds=1 --backend native")


def experiment_params(experiment, pairs):
    """``{parameter: value}`` of ``--param NAME=VALUE`` pairs, each converted to the type the
    experiment declares for it (``UserError`` naming a bad pair or an unknown parameter)."""
    known = {p.name: p for p in experiment.params}
    given = {}
    for pair in pairs:
        name, sep, text = pair.partition("=")
        if not sep or not name:
            raise UserError(f"--param must look like NAME=VALUE, not {pair!r}")
        if name not in known:
            raise UserError(f"--param {name}: experiment {experiment.name} has no parameter "
                            f"{name!r}; its parameters: {', '.join(known) or 'none'}")
        kind = known[name].type
        try:
            given[name] = ({"true": True, "false": False}[text.lower()] if kind is bool
                           else kind(text))
        except (KeyError, ValueError):
            what = {bool: "true or false", int: "an integer", float: "a number"}.get(
                kind, f"a {kind.__name__}")
            raise UserError(f"--param {pair}: {name} must be {what}") from None
    return given


def prepare(args):
    # fabric-speed or fabric_speed: a name matches whichever separator it is written with
    spelled = {n.replace("_", "-"): n for n in EXPERIMENTS}
    names = (sorted(EXPERIMENTS) if args.names in (["all"], []) else
             [spelled.get(n.replace("_", "-"), n) for n in args.names])
    unknown = [n for n in names if n not in EXPERIMENTS]
    if unknown:
        raise UserError(f"unknown experiment(s) {', '.join(unknown)}; registered: "
                        f"{', '.join(sorted(EXPERIMENTS))}")
    experiments = [EXPERIMENTS[n] for n in names]
    if args.param and len(experiments) != 1:
        raise UserError(f"--param sets one experiment's parameters: name one experiment, not "
                        f"{len(experiments)}")
    params = {e.name: experiment_params(e, args.param) for e in experiments}
    if args.backend and any("backend" in given for given in params.values()):
        raise UserError("give the backend once: --backend or --param backend=..., not both")
    for e in experiments:           # every parameter set valid before anything runs
        given = {"backend": args.backend} if args.backend and any(
            p.name == "backend" for p in e.params) else {}
        e.points(e.resolve(**given, **params[e.name]), args.quick)
    scheduler = args.scheduler or ("local" if have_dask() else "serial")
    checked = open_scheduler(scheduler)       # validates the name and the address's form
    positive("--workers", args.workers)
    out = check_output_dir(args.output, "--output")
    checked.probe()                 # last: an address that does not answer costs its timeout

    def job():
        docs = reproduce(experiments, out, backend=args.backend, quick=args.quick,
                         scheduler=scheduler, force=args.force, workers=args.workers,
                         params=params)
        print(f"wrote {out}/summary.md ({len(docs)} experiments)")
        failed = [d["experiment"] for d in docs if d["errors"]]
        return 1 if failed else 0
    return job
