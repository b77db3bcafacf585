"""``epfabric pages [--data DIR] [-o DIR] [--check]``: the results pages from recorded JSON.

Front end of :mod:`epfabric.sim.lab.pages`: every page of ``docs/results`` that is made
from data (what the model reproduces, how fast it runs, the hardware's checks) is written
from the JSON files in ``--data``. ``--check`` writes nothing and exits 1 when a page
differs from what the data gives. The provenance table's page
(:mod:`epfabric.sim.lab.provenance_page`) is written beside the results folder, ``fidelity/provenance.md``.
"""

from pathlib import Path

from ...hw.validate import UserError
from ..lab import provenance_page
from ..lab.pages import PAGES, stale_pages, write_pages
from ..output import check_output_dir, write_atomic

__all__ = ["add_arguments", "prepare"]


def add_arguments(parser):
    parser.add_argument("--data", default="docs/data", metavar="DIR",
                        help="folder of the recorded JSON (default docs/data)")
    parser.add_argument("-o", "--output", default="docs/results", metavar="DIR",
                        help="folder of the pages (default docs/results): "
                             + ", ".join(PAGES))
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 if a page differs from what the data gives")


def prepare(args):
    data = Path(args.data)
    if not data.is_dir():
        raise UserError(f"--data {args.data!r} is not a folder")
    out = check_output_dir(args.output, "--output")

    def job():
        page, text = out.parent / provenance_page.PAGE, provenance_page.render()
        if args.check:
            stale = stale_pages(data, out)
            for name in stale:
                print(f"{out / name}: differs from what {data} gives (run epfabric pages)")
            if not page.is_file() or page.read_text() != text:
                print(f"{page}: differs from what sw/fits/provenance.toml gives (run epfabric pages)")
                stale.append(page)
            return 1 if stale else 0
        page.parent.mkdir(parents=True, exist_ok=True)
        for path in [*write_pages(data, out), write_atomic(page, text)]:
            print(f"wrote {path}")
        return 0
    return job
