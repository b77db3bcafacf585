"""``epfabric prove [NAME ...|--all] [--depth N] [--json FILE]``: formal properties of the blocks.

Front end of :mod:`epfabric.sim.flows.formal`: prints proved / counterexample (with
the VCD path) / unknown per property. A property expected to fail (the
non-atomic port's torn read) counts as passing only when its counterexample
is found. Exit status 1 when a property that should hold is not proved or an
expected counterexample is not found, 2 on bad input.
"""

from ...hw.validate import UserError
from ..flows.formal import (DEFAULT_TIMEOUT, SOLVERS, format_table, missing_tool, registry,
                            run_property)
from ..output import progress
from .common import check_output, positive, write_json

__all__ = ["add_arguments", "prepare"]


def add_arguments(parser):
    parser.add_argument("names", nargs="*", metavar="NAME",
                        help="property or block prefix (e.g. ub_port.atomic, switch); "
                             "see --list")
    parser.add_argument("--all", action="store_true", help="every property")
    parser.add_argument("--quick", action="store_true",
                        help="only the properties CI runs (not marked slow)")
    parser.add_argument("--list", action="store_true", help="list the properties and exit")
    parser.add_argument("--depth", type=int, default=None,
                        help="override every selected property's depth (induction length or "
                             "BMC bound)")
    parser.add_argument("--solver", default=None, choices=list(SOLVERS),
                        help="SMT solver of yosys-smtbmc (default: each property's own, "
                             "see --list)")
    parser.add_argument("--timeout", type=int, default=DEFAULT_TIMEOUT,
                        help=f"seconds per property before it is reported unknown "
                             f"(default {DEFAULT_TIMEOUT})")
    parser.add_argument("--json", metavar="FILE", help="write the outcomes as JSON")


def select(props, names, *, all_=False, quick=False):
    """Names of ``props`` chosen by ``names`` (exact names or block prefixes) / ``all_`` / ``quick``."""
    if all_ or quick:
        chosen = [n for n, p in props.items() if all_ or not p.slow]
    else:
        chosen = []
        for name in names:
            hits = [n for n in props if n == name or n.startswith(name + ".")]
            if not hits:
                raise UserError(f"no property named {name!r} (epfabric prove --list)")
            chosen += [n for n in hits if n not in chosen]
    return chosen


def prepare(args):
    props = registry()
    if args.list:
        def listing():
            for name, p in props.items():
                mode = "k-induction" if p.mode == "prove" else "BMC"
                tag = "expect counterexample" if p.expect == "fail" else "expect proved"
                print(f"{name:28s} {mode:11s} depth {p.depth:<3d} {p.solver:9s} {tag:22s}"
                      f"{' slow' if p.slow else ''}  {p.doc}")
            return 0
        return listing
    if not (args.names or args.all or args.quick):
        raise UserError("name a property, or give --all or --quick (epfabric prove --list)")
    chosen = select(props, args.names, all_=args.all, quick=args.quick)
    positive("--depth", args.depth)
    positive("--timeout", args.timeout)
    check_output(args.json, "--json")
    why = missing_tool([args.solver] if args.solver else
                       sorted({props[n].solver for n in chosen}))
    if why:
        raise UserError(f"cannot run the prover: {why}")

    def job():
        outcomes = []
        for name in chosen:
            progress(f"prove {name}")
            o = run_property(name, props[name], depth=args.depth, solver=args.solver,
                             timeout=args.timeout)
            outcomes.append(o)
            where = f"  {o.vcd}" if o.vcd else ""
            print(f"{name}: {o.result}{where}  [{o.method}, {o.seconds:.1f} s]"
                  f"{'' if o.ok else '  <- NOT AS EXPECTED'}", flush=True)
        print()
        print(format_table(outcomes))
        if args.json:
            write_json(args.json, [o.as_dict() for o in outcomes], recorded=True)
        return 0 if all(o.ok for o in outcomes) else 1
    return job
