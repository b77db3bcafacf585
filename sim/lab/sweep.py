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
receives as well. An address is checked when given (a protocol of
:data:`PROTOCOLS`, a port) and probed before any work (:meth:`open_scheduler.probe`):
a scheduler that does not answer within :data:`CONNECT_TIMEOUT_S` is one line.
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
#: protocols of a scheduler address: those that reach a scheduler in another process with
#: Dask's own dependencies (not ``inproc``, this process only; not ``ucx``, a separate package)
PROTOCOLS = ("tcp", "tls", "ws", "wss")
#: seconds a Dask scheduler address has to answer before the sweep gives up on it
CONNECT_TIMEOUT_S = 30


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
        if scheduler not in SCHEDULERS:
            _check_address(scheduler)
        self.scheduler = scheduler
        self.workers = workers or os.cpu_count() or 1
        self.client = self.cluster = None

    def probe(self):
        """Connect to a scheduler address and close again: ``UserError`` now, before a sweep
        builds or sizes anything, if no Dask scheduler answers there. Returns ``self``."""
        if self.scheduler not in SCHEDULERS:
            self._connect(set_as_default=False).close()
        return self

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
            self.client = self._connect()
        return self.client

    def _connect(self, **options):
        from distributed import Client
        try:
            return Client(self.scheduler, timeout=f"{CONNECT_TIMEOUT_S}s", **options)
        except OSError:         # no answer in time (Dask's TimeoutError), an unknown host
            raise UserError(f"scheduler {self.scheduler}: no Dask scheduler answered in "
                            f"{CONNECT_TIMEOUT_S} s (is it running, and is the address "
                            f"right?)") from None

    def __exit__(self, *exc):
        if self.client is not None:
            self.client.close()
        if self.cluster is not None:
            self.cluster.close()
        return False


def _check_address(address):
    """``UserError`` unless ``address`` is ``PROTOCOL://host:port`` with a protocol that reaches
    another process (:data:`PROTOCOLS`) and a port in range, naming it and the valid forms."""
    from distributed.comm.addressing import parse_host_port
    scheme, _, location = str(address).partition("://")
    forms = f"serial, local or PROTOCOL://host:port (PROTOCOL one of {', '.join(PROTOCOLS)})"
    if scheme not in PROTOCOLS:
        raise UserError(f"scheduler {address!r}: {scheme!r} is not a protocol a Dask scheduler "
                        f"is reached by; give {forms}")
    try:
        _, port = parse_host_port(location)
        port = int(port)
    except ValueError:
        raise UserError(f"scheduler {address!r}: {location!r} is not host:port (a port a "
                        f"number); give {forms}") from None
    if not 0 < port < 65536:
        raise UserError(f"scheduler {address!r}: port {port} is not in 1..65535")
    if scheme == "tls":
        from distributed.security import Security
        if Security().get_connection_args("client").get("ssl_context") is None:
            raise UserError(f"scheduler {address!r}: tls:// needs Dask's TLS settings "
                            f"(distributed.comm.tls: ca-file and the client's cert)")


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
