"""``epfabric mutate [--only NAME[,NAME]] [--list] [--json FILE] [-j N]``: the curated mutation suite.

Each mutation (``sim/verify/mutations.py``) breaks one thing on purpose in a copy of
the tracked tree and runs the tests that should notice (:mod:`epfabric.sim.verify.mutate`);
the result is ``build/mutations.json`` and one summary line. Exit 1 if a
mutation not documented as harmless is not caught, or cannot be applied.
"""

import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from ...hw.validate import UserError
from ..verify import mutate
from .common import check_output, positive, write_json

__all__ = ["add_arguments", "prepare"]


def add_arguments(parser):
    parser.add_argument("--only", metavar="NAME[,NAME]", help="run only these mutations (see --list)")
    parser.add_argument("--list", action="store_true", help="list the mutations and their tests, run nothing")
    parser.add_argument("--json", metavar="FILE", default="build/mutations.json",
                        help="where to write the table (default: build/mutations.json)")
    parser.add_argument("-j", "--jobs", type=int, default=1,
                        help="mutations run at the same time (default 1)")
    parser.add_argument("--cache", metavar="DIR", default="build/mutate-cache",
                        help="simulator build cache shared by the mutations (keyed by content; "
                             "default build/mutate-cache)")
    parser.add_argument("--keep", action="store_true", help="keep each mutation's copy (for debugging)")


def _listing(mutations):
    lines = []
    for m in mutations:
        tag = "  [harmless]" if m.harmless else ""
        lines.append(f"{m.name:26s} {m.file}{tag}")
        lines.append(f"    {m.description}")
        for t in m.tests:
            lines.append(f"    - {t}")
    return "\n".join(lines)


def prepare(args):
    mutations = mutate.select(mutate.load_mutations(), args.only)
    if args.list:
        def listing():
            print(_listing(mutations))
            return 0
        return listing
    jobs = positive("--jobs", args.jobs)
    json_path = Path(args.json)
    if json_path.parent == Path("build"):
        json_path.parent.mkdir(exist_ok=True)
    check_output(json_path, "--json")
    cache = Path(args.cache)
    if cache.exists() and not cache.is_dir():
        raise UserError(f"--cache {args.cache!r} is a file, not a folder")

    def job():
        start = time.monotonic()
        total = len(mutations)

        def one(item):
            k, m = item
            outcome = mutate.run_mutation(m, cache=cache, keep=args.keep)
            if outcome.error:
                verdict = "ERROR"
            elif outcome.caught:
                verdict = "caught" + (" (documented harmless)" if m.harmless else "")
            elif m.harmless:
                verdict = "not caught: documented harmless"
            else:
                verdict = "NOT CAUGHT"
            by = ", ".join(outcome.caught_by) if outcome.caught_by else "-"
            print(f"[{k + 1}/{total}] {m.name}: {verdict} in {mutate.format_seconds(outcome.seconds)}"
                  f" (by {by})", flush=True)
            for test, what in outcome.other.items():
                print(f"    {test}: {what}", flush=True)
            if outcome.error:
                print("    " + outcome.error.replace("\n", "\n    "), flush=True)
            return outcome

        with ThreadPoolExecutor(max_workers=jobs) as pool:
            outcomes = list(pool.map(one, enumerate(mutations)))
        seconds = time.monotonic() - start
        rows = [o.to_dict() for o in outcomes]
        write_json(json_path, rows, recorded=True)
        print(mutate.summary_line(outcomes, seconds))
        return 0 if all(o.ok for o in outcomes) else 1
    return job
