"""Run the points of a grid: serially in this process, or as tasks on Dask distributed.

Each point is an independent task, :func:`run_task`: it measures the point
in whatever process runs it and stores the entry in the result cache
(:mod:`.cache`) as soon as it finishes, so a sweep interrupted by Ctrl-C, a
killed worker or a lost connection keeps every finished point. A point that
raises (a watchdog timeout, a build error) becomes an entry with its
``error``; the other points still run. Results come back in grid order, so a
grid gives the same rows serially and on Dask.

Schedulers (``--scheduler``): ``serial``; ``local`` — a ``LocalCluster`` with
one single-threaded worker process per core (the default where Dask is
installed); or the address of a running Dask scheduler
(``tcp://host:8786``), so a user who outgrows one machine adds workers, not
code. Workers must run the same epfabric (same source hash) and should share
the build and result caches' file system; the client stores every entry it
receives as well.
"""

import os
import sys
import time
import traceback

from ...hw.validate import UserError
from .results import cache

__all__ = ["run_task", "run_points", "submit_points", "open_scheduler", "Progress", "SCHEDULERS",
           "have_dask"]

SCHEDULERS = ("serial", "local")


def have_dask():
    """Whether Dask distributed can be imported."""
    try:
        import distributed  # noqa: F401
    except ImportError:
        return False
    return True


def in_dask_worker():
    """Whether this code runs in a Dask worker (a point of a parallel sweep)."""
    try:
        from distributed import get_worker
        get_worker()
    except (ImportError, ValueError):
        return False
    return True


def run_task(name, point, key, cache_folder=None):
    """Measure ``point`` of experiment ``name``; cache a success. Returns the entry.

    The entry is ``{"rows": [...], "wall_s", "error": None}`` or, when the
    measurement raised, ``{"rows": [], "wall_s", "error": "Type: message"}``.
    """
    from .experiments import EXPERIMENTS
    if in_dask_worker():
        # the workers already share the cores one each: a native model on two threads
        # would oversubscribe them (the user's own setting wins)
        os.environ.setdefault("EPFABRIC_NATIVE_THREADS", "1")
    t0 = time.monotonic()
    try:
        measured = EXPERIMENTS[name].measure(point)
    except Exception as exc:   # a failed point is a result, not the end of the sweep
        detail = traceback.format_exc(limit=4)
        return {"rows": [], "wall_s": round(time.monotonic() - t0, 3),
                "error": f"{type(exc).__name__}: {exc}".strip(), "traceback": detail}
    rows = measured if isinstance(measured, list) else [measured]
    entry = {"rows": rows, "wall_s": round(time.monotonic() - t0, 3), "error": None,
             "source": cache.source_hash()}
    cache.store(name, key, entry, cache_folder)
    return entry


class Progress:
    """One status line on stderr: points done / total, cached, failed, elapsed and ETA."""

    def __init__(self, label, total, cached=0, stream=None):
        self.label, self.total, self.cached = label, total, cached
        self.done = cached
        self.failed = 0
        self.t0 = time.monotonic()
        self.stream = stream or sys.stderr
        self.tty = hasattr(self.stream, "isatty") and self.stream.isatty()
        self.show()

    def advance(self, failed=False):
        self.done += 1
        self.failed += int(failed)
        self.show()

    def show(self):
        elapsed = time.monotonic() - self.t0
        computed = self.done - self.cached
        left = self.total - self.done
        eta = f", ETA {_hms(elapsed / computed * left)}" if computed and left else ""
        text = (f"[reproduce] {self.label}: {self.done}/{self.total} points"
                f" ({self.cached} cached, {self.failed} failed), {_hms(elapsed)}{eta}")
        if self.tty:
            print("\r" + text, end="" if left else "\n", file=self.stream, flush=True)
        else:
            print(text, file=self.stream, flush=True)


def _hms(seconds):
    seconds = int(round(seconds))
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


class open_scheduler:
    """Context manager: ``None`` for serial, else a Dask ``Client`` (local cluster or address)."""

    def __init__(self, scheduler, workers=None):
        if scheduler not in SCHEDULERS and "://" not in str(scheduler):
            raise UserError(f"scheduler must be serial, local or a Dask scheduler address "
                            f"(tcp://host:8786), not {scheduler!r}")
        if scheduler != "serial" and not have_dask():
            raise UserError(f"scheduler {scheduler!r} needs Dask distributed "
                            f"(pip install 'epfabric[cluster]'); use --scheduler serial")
        self.scheduler = scheduler
        self.workers = workers or os.cpu_count() or 1
        self.client = self.cluster = None

    def __enter__(self):
        if self.scheduler == "serial":
            return None
        from distributed import Client, LocalCluster
        if self.scheduler == "local":
            self.cluster = LocalCluster(n_workers=self.workers, threads_per_worker=1,
                                        processes=True, dashboard_address=None,
                                        silence_logs=50)   # CRITICAL: no heartbeat tracebacks at close
            self.client = Client(self.cluster)
        else:
            self.client = Client(self.scheduler, timeout="30s")
        return self.client

    def __exit__(self, *exc):
        if self.client is not None:
            self.client.close()
        if self.cluster is not None:
            self.cluster.close()
        return False


def run_points(name, tasks, client=None, *, progress=None, parallel=True, futures=None):
    """Entries for ``tasks`` (``[(point, key), ...]``), in order.

    ``client`` None (or ``parallel`` False): in this process, one after
    another; else each point is a Dask task (retried twice if its worker
    dies) — already submitted when ``futures`` (:func:`submit_points`) is given.
    """
    folder = str(cache.cache_dir())
    entries = [None] * len(tasks)
    if client is None or not parallel:
        for i, (point, key) in enumerate(tasks):
            entries[i] = run_task(name, point, key, folder)
            if progress:
                progress.advance(failed=bool(entries[i]["error"]))
        return entries
    from distributed import as_completed
    futures = futures if futures is not None else submit_points(name, tasks, client)
    try:
        for future in as_completed(futures):
            i = futures[future]
            try:
                entry = future.result()
            except Exception as exc:   # the task itself died (worker lost too often)
                entry = {"rows": [], "wall_s": None, "error": f"{type(exc).__name__}: {exc}"}
            if not entry["error"]:
                cache.store(name, tasks[i][1], entry)   # also where workers share no file system
            entries[i] = entry
            if progress:
                progress.advance(failed=bool(entry["error"]))
    finally:
        for future in futures:
            future.cancel()
    return entries


def submit_points(name, tasks, client):
    """Submit ``tasks`` to ``client`` now; ``{future: index}`` for :func:`run_points`.

    :func:`~.reproduce.reproduce` submits every experiment's points before
    waiting on the first, so one experiment's Verilog generation and build
    overlap another's runs instead of leaving a core idle.
    """
    folder = str(cache.cache_dir())
    return {client.submit(run_task, name, point, key, folder, pure=False, retries=2): i
            for i, (point, key) in enumerate(tasks)}
