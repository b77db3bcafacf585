"""Where simulation outputs go, and how long steps report themselves.

* :func:`build_cache_dir` — simulator builds, cached by content
  (``$EPFABRIC_BUILD_DIR``, default the user's cache, ``~/.cache/epfabric/build``);
* :func:`waveform_dir` — VCD/FST and ``.gtkw`` files
  (``$EPFABRIC_WAVEFORM_DIR``, default ``waveforms/``);
* :func:`progress` — one line on stderr for steps longer than
  :data:`PROGRESS_AFTER_S` (``EPFABRIC_QUIET=1`` silences it);
* :func:`check_output` / :func:`write_atomic` — result files: checked
  before a simulation starts, written whole or not at all;
* :func:`build_once` — a cached build folder, made by one process while
  parallel workers that need it wait.
"""

import contextlib
import fcntl
import json
import os
import signal
import sys
import tempfile
import time
from pathlib import Path

from ..hw.validate import UserError

__all__ = ["build_cache_dir", "waveform_dir", "progress", "PROGRESS_AFTER_S", "check_output",
           "check_output_dir", "write_atomic", "build_once"]

#: Steps longer than this many seconds report their time on stderr.
PROGRESS_AFTER_S = 10.0


def build_cache_dir():
    """Folder of cached simulator builds: ``$EPFABRIC_BUILD_DIR``, else the user's cache
    (``~/.cache/epfabric/build`` on Linux), shared by every command and folder."""
    if os.environ.get("EPFABRIC_BUILD_DIR"):
        return Path(os.environ["EPFABRIC_BUILD_DIR"])
    import platformdirs
    return Path(platformdirs.user_cache_dir("epfabric")) / "build"


def waveform_dir():
    """Folder waveforms are written to."""
    return Path(os.environ.get("EPFABRIC_WAVEFORM_DIR", Path.cwd() / "waveforms"))


def build_once(folder, make):
    """``folder`` after ``make(folder)`` has filled it once, across processes; stamp ``built.ok``.

    Parallel test workers asking for the same build: one runs ``make``
    under a file lock, the others wait and reuse the folder. The stamp
    (the build's seconds) is written only when ``make`` returns.
    """
    folder = Path(folder)
    stamp = folder / "built.ok"
    if stamp.exists():
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    with open(folder.parent / f"{folder.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not stamp.exists():
            folder.mkdir(parents=True, exist_ok=True)
            t0 = time.monotonic()
            make(folder)
            seconds = time.monotonic() - t0
            stamp.write_text(f"{seconds:.2f}\n")
            log_event(folder=Path(folder).name, seconds=seconds)
    return folder


def log_event(**fields):
    """``$EPFABRIC_BUILD_LOG``: append one JSON line per build made or simulation run (what,
    seconds, and the pytest test that asked for it): which tests pay for which builds and
    runs in a cold run. Without the variable, nothing: a field given as a function (a
    design's hash) is called only when the line is written."""
    log = os.environ.get("EPFABRIC_BUILD_LOG")
    if log:
        line = {k: v() if callable(v) else v for k, v in fields.items()}
        line = {k: round(v, 2) if isinstance(v, float) else v for k, v in line.items()}
        line["test"] = os.environ.get("PYTEST_CURRENT_TEST", "").rsplit(" (", 1)[0]
        if os.environ.get("PYTEST_XDIST_WORKER"):
            line["worker"] = os.environ["PYTEST_XDIST_WORKER"]
        with open(log, "a") as f:
            f.write(json.dumps(line) + "\n")


def progress(msg):
    """Print ``[epfabric] msg`` on stderr unless ``EPFABRIC_QUIET=1``."""
    if os.environ.get("EPFABRIC_QUIET") != "1":
        print(f"[epfabric] {msg}", file=sys.stderr, flush=True)


def check_output(path, option):
    """Raise ``UserError`` naming ``option`` unless ``path`` can be written (checked before any run)."""
    if path is None:
        return None
    path = Path(path)
    parent = path.resolve().parent
    try:
        if path.is_dir():
            raise UserError(f"{option} {str(path)!r} is a folder, not a file")
        if not parent.is_dir():
            raise UserError(f"{option} {str(path)!r}: folder {str(parent)!r} does not exist")
        _writable(option, path, parent)
    except OSError as exc:          # a name the file system refuses (too long)
        raise UserError(f"{option} {str(path)!r}: {exc.strerror or exc}") from None
    return path


def check_output_dir(path, option):
    """Raise ``UserError`` naming ``option`` unless folder ``path`` exists or can be created
    (its first missing folder is made and removed again)."""
    if path is None:
        return None
    if not str(path):
        raise UserError(f"{option} must name a folder, not ''")
    path = Path(path)
    try:
        if path.exists() and not path.is_dir():
            raise UserError(f"{option} {str(path)!r} is a file, not a folder")
        existing, missing = path.resolve(), None
        while not existing.exists():
            existing, missing = existing.parent, existing
        if not existing.is_dir():
            raise UserError(f"{option} {str(path)!r}: {str(existing)!r} is a file, not a folder")
        _writable(option, path, existing)
        if missing is not None:
            missing.mkdir()
            missing.rmdir()
    except OSError as exc:          # a name too long, a folder the file system refuses
        raise UserError(f"{option} {str(path)!r}: cannot create this folder "
                        f"({exc.strerror or exc})") from None
    return path


def _writable(option, path, folder):
    """``UserError`` unless a file can be made in ``folder``: one is made and removed, as the
    file system says, not guessed from permission bits (which ``/proc``, a read-only mount or
    root do not tell)."""
    try:
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as exc:
        raise UserError(f"{option} {str(path)!r}: folder {str(folder)!r} is not writable "
                        f"({exc.strerror or exc})") from None


def _umask():
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextlib.contextmanager
def atomic_path(path, suffix=""):
    """A temporary file next to ``path`` to write; renamed onto ``path`` when the block succeeds.

    Readers never see a half-written file; on an exception the temporary file is removed.
    """
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=suffix, dir=path.resolve().parent)
    os.close(fd)
    tmp = Path(tmp)
    try:
        yield tmp
        os.chmod(tmp, 0o666 & ~_umask())        # as open() would have made it, not mkstemp's 0600
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_atomic(path, text):
    """Write ``text`` to ``path`` through a temporary file and a rename: never a half-written file."""
    with atomic_path(path) as tmp:
        with open(tmp, "w") as f:
            f.write(text)
    return Path(path)


def kill_group(proc):
    """Stop a child started with ``start_new_session=True`` and everything it started (SIGKILL)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:      # already gone
        pass
