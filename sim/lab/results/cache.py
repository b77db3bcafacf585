"""The result cache: one JSON file per finished point.

A point's key hashes the experiment's name, the point (every parameter,
backend included; a machine file by its values' digest) and the *source hash* — the contents of every module of
``epfabric`` — so a change to the model or to an experiment invalidates its
points and nothing else can. Entries are written atomically the moment a
point finishes (by the worker that ran it), so a sweep killed mid-way keeps
every finished point and a rerun computes only the rest. Failed points are
not cached: a rerun tries them again.

The folder is ``$EPFABRIC_RESULT_CACHE`` (default ``build/results`` under the
working folder); workers of a Dask cluster that share a file system share it.
"""

import hashlib
import json
import os
from functools import lru_cache
from pathlib import Path

from ...output import write_atomic

__all__ = ["cache_dir", "source_hash", "point_key", "load", "store"]


def cache_dir():
    """The result cache folder."""
    return Path(os.environ.get("EPFABRIC_RESULT_CACHE", Path.cwd() / "build" / "results"))


#: what a result can depend on: a change to any of these files invalidates every cached point
SOURCE_SUFFIXES = (".py", ".vlt", ".cpp", ".h")


@lru_cache(maxsize=1)
def source_hash():
    """SHA-256 (16 hex digits) of every source file (:data:`SOURCE_SUFFIXES`: Python, Verilator
    configuration, the native backend's C++ top) of the installed ``epfabric`` packages."""
    import epfabric.hw
    import epfabric.sim
    import epfabric.sw
    digest = hashlib.sha256()
    for pkg in (epfabric.hw, epfabric.sw, epfabric.sim):
        root = Path(pkg.__path__[0])
        for path in sorted(p for p in root.rglob("*") if p.suffix in SOURCE_SUFFIXES):
            digest.update(f"{pkg.__name__}/{path.relative_to(root).as_posix()}\0".encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def point_key(experiment, point, source=None):
    """The cache key of ``point`` of ``experiment`` (a name). A machine file a value names is
    keyed by its values' digest (:func:`~epfabric.sw.preset_file.pinned`): a point measured on
    another version of the file is another point."""
    from ....sw.preset_file import pinned
    point = {k: pinned(v) for k, v in point.items()} if isinstance(point, dict) else point
    text = json.dumps({"experiment": experiment, "point": point,
                       "source": source or source_hash()}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def _path(experiment, key, folder=None):
    return Path(folder or cache_dir()) / experiment / f"{key}.json"


def load(experiment, key, folder=None):
    """The cached entry ``{"rows", "wall_s", ...}`` or None."""
    path = _path(experiment, key, folder)
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def store(experiment, key, entry, folder=None):
    """Write ``entry`` for ``key`` atomically; return its path."""
    path = _path(experiment, key, folder)
    path.parent.mkdir(parents=True, exist_ok=True)
    return write_atomic(path, json.dumps(entry, default=_jsonable))   # keeps column order


def _jsonable(value):
    if hasattr(value, "item"):          # numpy scalars
        return value.item()
    if hasattr(value, "tolist"):
        return value.tolist()
    return str(value)
