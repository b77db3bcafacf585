"""``epfabric reproduce`` / ``epfabric figures`` (sim/lab/results/): grids, cache, Dask, faults, files."""

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from epfabric.sim.cli import main
from epfabric.sim.lab.experiments import EXPERIMENTS, Experiment, Param, register
from epfabric.sim.lab.results import cache, files
from epfabric.sim.lab.reproduce import reproduce

from utils import require, require_dask

PAYLOAD = EXPERIMENTS["payload"]


@pytest.fixture
def result_cache(tmp_path, monkeypatch):
    folder = tmp_path / "cache"
    monkeypatch.setenv("EPFABRIC_RESULT_CACHE", str(folder))
    return folder


@pytest.fixture
def small_payload(monkeypatch):
    """The payload experiment on a 2-point grid of small routings (the registered one, so workers know it)."""
    monkeypatch.setattr(type(PAYLOAD), "params", tuple(
        Param(p.name, {"tokens": 3000, "seeds": "0,1"}.get(p.name, p.default), p.help, p.type,
              p.choices, p.minimum) for p in PAYLOAD.params))
    return PAYLOAD


def test_csv_has_parameters_model_and_paper_columns(tmp_path, result_cache, small_payload):
    doc, = reproduce([small_payload], tmp_path / "out", scheduler="serial", log=lambda *_: None)
    rows = files.read_csv(tmp_path / "out" / "payload.csv")
    assert [r["seed"] for r in rows] == [0, 1]
    for key in ("experts", "tokens", "no_expert_fraction", "paper_no_expert_fraction",
                "diff_no_expert_fraction", "extra_ag_bytes", "paper_extra_ag_bytes"):
        assert key in rows[0], key
    assert rows[0]["paper_no_expert_fraction"] == 0.085
    assert rows == doc["rows"]                       # the CSV reads back exactly (types too)
    saved = json.loads((tmp_path / "out" / "payload.json").read_text())
    assert {"rows", "metadata", "holds", "verdict"} <= set(saved)
    worst = max(abs(r["diff_no_expert_fraction"]) for r in rows)    # the verdict's rule, from
    extra = sum(r["extra_ag_bytes"] for r in rows) / len(rows)      # the CSV the run wrote
    assert saved["holds"] is (worst <= 0.005 and abs(extra - 0.09) <= 0.01)
    assert "8." in saved["verdict"]
    meta = saved["metadata"]
    assert meta["commit"] and meta["source_hash"] == cache.source_hash()
    assert meta["packages"]["amaranth"] and meta["packages"]["numpy"]
    assert [p["cached"] for p in meta["points"]] == [False, False]
    assert all(p["wall_s"] >= 0 for p in meta["points"])
    assert (tmp_path / "out" / "payload.png").stat().st_size > 1000
    summary = (tmp_path / "out" / "summary.md").read_text()
    assert "| payload | INC-MoE §2.2 |" in summary


def test_param_sets_an_experiments_parameter(tmp_path, result_cache, small_payload):
    """``--param NAME=VALUE`` replaces a default, typed as the experiment declares it (the
    grid and each point's cache key follow)."""
    assert main(["reproduce", "payload", "--scheduler", "serial", "-o", str(tmp_path),
                 "--param", "seeds=3", "--param", "tokens=2000"]) == 0
    rows = files.read_csv(tmp_path / "payload.csv")
    assert [(r["seed"], r["tokens"]) for r in rows] == [(3, 2000)]


def test_second_run_reads_the_cache(tmp_path, result_cache, small_payload, monkeypatch):
    reproduce([small_payload], tmp_path / "a", scheduler="serial", log=lambda *_: None)

    def forbidden(self, point):
        raise AssertionError("a cached point was measured again")
    monkeypatch.setattr(type(small_payload), "measure", forbidden)
    doc, = reproduce([small_payload], tmp_path / "b", scheduler="serial", log=lambda *_: None)
    assert [p["cached"] for p in doc["metadata"]["points"]] == [True, True]
    assert (tmp_path / "a" / "payload.csv").read_text() == (tmp_path / "b" / "payload.csv").read_text()
    doc, = reproduce([small_payload], tmp_path / "c", scheduler="serial", force=True,
                     log=lambda *_: None)                          # --force measures again
    assert [e["error"] for e in doc["errors"]] == ["AssertionError: a cached point was measured again"] * 2


def test_local_cluster_and_serial_give_the_same_csv(tmp_path, result_cache, small_payload,
                                                    monkeypatch):
    require("dask distributed", None if importlib.util.find_spec("distributed")
            else "dask[distributed] is not installed (a dependency of epfabric)")
    serial_dir, dask_dir = tmp_path / "serial", tmp_path / "dask"
    reproduce([small_payload], serial_dir, scheduler="serial", log=lambda *_: None)
    monkeypatch.setenv("EPFABRIC_RESULT_CACHE", str(tmp_path / "cache2"))   # nothing cached for Dask
    doc, = reproduce([small_payload], dask_dir, scheduler="local", workers=2, log=lambda *_: None)
    assert [p["cached"] for p in doc["metadata"]["points"]] == [False, False]
    assert doc["metadata"]["scheduler"] == "local"
    assert (serial_dir / "payload.csv").read_text() == (dask_dir / "payload.csv").read_text()
    assert len(list((tmp_path / "cache2" / "payload").glob("*.json"))) == 2   # workers cached


def test_a_killed_sweep_resumes_with_only_the_rest(tmp_path):
    """SIGKILL after the first point is cached; the rerun computes exactly the missing points."""
    env = dict(os.environ, EPFABRIC_RESULT_CACHE=str(tmp_path / "cache"))
    cmd = [sys.executable, "-m", "epfabric.sim.cli", "reproduce", "payload", "--scheduler", "serial",
           "-o", str(tmp_path / "out")]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    folder = tmp_path / "cache" / "payload"
    deadline = time.monotonic() + 120
    while not (folder.exists() and list(folder.glob("*.json"))):
        assert proc.poll() is None, "the sweep ended before its first point was cached"
        assert time.monotonic() < deadline
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    done_before = {p.stem for p in folder.glob("*.json")}
    total = len(PAYLOAD.points(PAYLOAD.resolve()))
    assert 1 <= len(done_before) < total
    assert not (tmp_path / "out" / "payload.csv").exists()       # never a half-written CSV
    assert subprocess.run(cmd, env=env, capture_output=True).returncode == 0
    doc = json.loads((tmp_path / "out" / "payload.json").read_text())
    cached = {p["key"] for p in doc["metadata"]["points"] if p["cached"]}
    assert cached == done_before
    assert sum(not p["cached"] for p in doc["metadata"]["points"]) == total - len(done_before)


class Flaky(Experiment):
    """Test experiment: point 1 fails, the others succeed."""

    name = "flaky_for_test"
    title = "a grid with one failing point"
    params = (Param("n", 3, "points", int),)

    def points(self, params, quick=False):
        return [{"i": i} for i in range(params["n"])]

    def measure(self, point):
        if point["i"] == 1:
            raise RuntimeError("watchdog: nothing halted")
        return {"value": 10 * point["i"]}

    def verdict(self, rows):
        return True, f"{len(rows)} values"


@pytest.fixture
def flaky():
    experiment = register(Flaky())
    yield experiment
    del EXPERIMENTS[experiment.name]


def test_a_failed_point_is_reported_and_the_others_complete(tmp_path, result_cache, flaky,
                                                            capsys):
    assert main(["reproduce", flaky.name, "--scheduler", "serial", "-o", str(tmp_path)]) == 1
    rows = files.read_csv(tmp_path / f"{flaky.name}.csv")
    assert [r["value"] for r in rows] == [0, None, 20]
    assert rows[1]["error"] == "RuntimeError: watchdog: nothing halted"
    doc = json.loads((tmp_path / f"{flaky.name}.json").read_text())
    assert doc["holds"] is False and doc["verdict"].startswith("1 of 3 points failed")
    assert "1 of 3 points failed" in (tmp_path / "summary.md").read_text()
    cached = list((result_cache / flaky.name).glob("*.json"))
    assert len(cached) == 2                                       # failures are retried next time


def test_figures_redraws_from_the_csv_without_simulating(tmp_path, result_cache, small_payload,
                                                         no_simulation, monkeypatch):
    reproduce([small_payload], tmp_path, scheduler="serial", log=lambda *_: None)
    (tmp_path / "payload.png").unlink()
    monkeypatch.setattr(type(small_payload), "measure", lambda *a: pytest.fail("measured"))
    assert main(["figures", str(tmp_path)]) == 0
    assert (tmp_path / "payload.png").stat().st_size > 1000


@pytest.mark.parametrize("argv, message", [
    (["reproduce", "nope", "-o", "x"], "unknown experiment(s) nope; registered:"),
    (["reproduce", "payload", "-o", "x", "--scheduler", "bogus"],
     "scheduler must be serial, local or a Dask scheduler address"),
    (["reproduce", "payload", "-o", "x", "--workers", "0"], "--workers must be >= 1, not 0"),
    (["figures", "/nonexistent-folder"], "is not a folder"),
    (["reproduce", "payload", "-o", __file__], f"--output {__file__!r} is a file, not a folder"),
    (["reproduce", "payload", "-o", __file__ + "/sub"],
     f"--output {__file__ + '/sub'!r}: {__file__!r} is a file, not a folder"),
    (["reproduce", "payload", "-o", "x", "--param", "nope=1"],
     "--param nope: experiment payload has no parameter 'nope'; its parameters:"),
    (["reproduce", "payload", "-o", "x", "--param", "tokens=many"],
     "--param tokens=many: tokens must be an integer"),
    (["reproduce", "payload", "table2", "-o", "x", "--param", "tokens=9"],
     "--param sets one experiment's parameters: name one experiment, not 2"),
    (["reproduce", "inc-ep", "-o", "x", "--param", "ranks=32"],
     "ranks=32 needs backend native, not 'verilator'"),
    (["reproduce", "inc-ep", "-o", "x", "--param", "backend=native", "--backend", "native"],
     "give the backend once: --backend or --param backend=..., not both"),
])
def test_bad_input_one_line(argv, message, capsys, no_simulation):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err


def test_a_scheduler_that_does_not_answer_is_one_line_before_anything_runs(
        tmp_path, monkeypatch, capsys, no_simulation):
    require_dask()
    from epfabric.sim.lab import sweep
    monkeypatch.setattr(sweep, "CONNECT_TIMEOUT_S", 0.2)
    out = tmp_path / "out"
    assert main(["reproduce", "payload", "-o", str(out), "--scheduler", "tcp://127.0.0.1:1"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == ("epfabric reproduce: error: scheduler tcp://127.0.0.1:1: no Dask scheduler "
                   "answered in 0.2 s (is it running, and is the address right?)")
    assert not out.exists()


def _check_grids(names):
    for name in names:
        experiment = EXPERIMENTS[name]
        params = experiment.resolve()
        full, quick = experiment.points(params), experiment.points(params, quick=True)
        assert quick and len(quick) <= len(full), name
        for point in full + quick:
            json.dumps(point)                                     # points cross processes
        assert experiment.title and experiment.name == name


def test_every_experiment_has_a_grid_and_a_quick_grid(monkeypatch):
    """The training grid's machine sizes come from generating every run's programs (~2 min
    on the full grid); here they are a fixed envelope, and the slow test below sizes them."""
    from epfabric.sim.lab.experiments import training
    monkeypatch.setattr(training, "_SIZES", {})
    monkeypatch.setattr(training, "sizes", lambda *a, **k: {
        "hbm_blocks": 1 << 16, "rank_bits": 5, "ubuf_rows": 64, "imem_depth": 1 << 12,
        "trace_depth": 1 << 10})
    _check_grids(EXPERIMENTS)


@pytest.mark.slow
def test_the_training_grid_is_sized_from_its_programs():
    _check_grids(["training"])
    point = EXPERIMENTS["training"].points(EXPERIMENTS["training"].resolve(), quick=True)[0]
    assert point["imem_depth"] >= 1 and point["hbm_blocks"] >= 1 and point["ubuf_rows"] >= 1


def test_every_experiments_points_are_submitted_before_the_first_is_collected(
        tmp_path, result_cache, monkeypatch):
    """On Dask, one experiment's build overlaps another's runs: ``reproduce`` submits every
    parallel experiment's points before it waits on any; timing experiments run first, alone."""
    from epfabric.sim.lab import sweep

    events = []

    class Probe(Experiment):
        def __init__(self, name, parallel):
            self.name, self.parallel = name, parallel

        def points(self, params, quick=False):
            return [{"i": 0}, {"i": 1}]

        def measure(self, point):
            events.append(f"{self.name} ran")
            return {"x": point["i"]}

    class Scheduler:
        def __init__(self, *a):
            pass

        def __enter__(self):
            return object()          # a client: the points go through submit/collect

        def __exit__(self, *exc):
            return False

    def submit(name, tasks, client):
        events.append(f"submit {name}")
        return {"tasks": tasks}

    def collect(name, tasks, client=None, *, progress=None, parallel=True, futures=None):
        events.append(f"collect {name}")
        todo = tasks if futures is None else futures["tasks"]
        return [sweep.run_task(name, p, k) for p, k in todo]

    monkeypatch.setattr(sweep, "open_scheduler", Scheduler)
    monkeypatch.setattr(sweep, "submit_points", submit)
    monkeypatch.setattr(sweep, "run_points", collect)
    probes = [Probe("probe_a", True), Probe("probe_timing", False), Probe("probe_b", True)]
    for p in probes:
        monkeypatch.setitem(EXPERIMENTS, p.name, p)
    docs = reproduce(probes, tmp_path / "out", scheduler="local", log=lambda *_: None)
    assert [d["experiment"] for d in docs] == ["probe_a", "probe_timing", "probe_b"]
    assert [len(d["rows"]) for d in docs] == [2, 2, 2]
    assert events[:5] == ["collect probe_timing", "probe_timing ran", "probe_timing ran",
                          "submit probe_a", "submit probe_b"]
    assert events[5:] == ["collect probe_a", "probe_a ran", "probe_a ran",
                          "collect probe_b", "probe_b ran", "probe_b ran"]


def test_a_name_matches_with_either_separator(monkeypatch, tmp_path, no_simulation):
    """fabric-speed is the command's name, fabric_speed the experiment's: both name it."""
    import epfabric.sim.cli.reproduce as cli
    from epfabric.sim.cli import make_parser
    asked = []
    monkeypatch.setattr(cli, "reproduce", lambda experiments, *a, **kw: asked.append(
        [e.name for e in experiments]) or [])
    args = make_parser().parse_args(["reproduce", "fabric-speed", "incmoe_layer", "-o",
                                     str(tmp_path), "--scheduler", "serial"])
    assert cli.prepare(args)() == 0
    assert asked == [["fabric_speed", "incmoe-layer"]]


def test_every_point_of_a_grid_has_its_own_key():
    """The speed grid's points differ only by backend: a key that left it out would serve one
    backend's row for every backend."""
    for name in ("speed", "fig10", "fig9"):
        e = EXPERIMENTS[name]
        points = e.points(e.resolve(), quick=True)
        keys = {cache.point_key(name, p, source="s") for p in points}
        assert len(keys) == len(points), name
    p = EXPERIMENTS["speed"].points(EXPERIMENTS["speed"].resolve(), quick=True)[0]
    assert (cache.point_key("speed", {**p, "backend": "pysim"}, source="s")
            != cache.point_key("speed", {**p, "backend": "native"}, source="s"))


@pytest.mark.parametrize("name", ["native_top.cpp", "native_bind.h", "lint.vlt", "x.py"])
def test_the_source_hash_sees_every_source_file(name, tmp_path, monkeypatch):
    """A change to the native backend's C++ top invalidates cached results like a .py does."""
    import epfabric.sim
    (tmp_path / name).write_text("one")
    monkeypatch.setattr(epfabric.sim, "__path__", [str(tmp_path)])
    cache.source_hash.cache_clear()                      # it is computed once per process
    try:
        before = cache.source_hash()
        (tmp_path / name).write_text("two")
        cache.source_hash.cache_clear()
        assert cache.source_hash() != before
    finally:
        cache.source_hash.cache_clear()


def test_points_in_dask_workers_evaluate_native_models_on_one_thread(monkeypatch):
    """A Dask worker already has a core of its own: a point run there sets the native
    backend's threads to 1 unless the user chose a number; outside a worker nothing changes."""
    from epfabric.sim.lab import sweep
    require("Dask distributed", None if sweep.have_dask() else "it is not installed "
            "(pip install 'epfabric[cluster]')")
    from distributed import Client, LocalCluster
    assert not sweep.in_dask_worker()
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False,
                      dashboard_address=None) as cluster, Client(cluster) as client:
        assert client.submit(sweep.in_dask_worker, pure=False).result() is True
    monkeypatch.delenv("EPFABRIC_NATIVE_THREADS", raising=False)
    entry = sweep.run_task("no-such-experiment", {}, "key")
    assert entry["error"] and "EPFABRIC_NATIVE_THREADS" not in os.environ
    monkeypatch.setattr(sweep, "in_dask_worker", lambda: True)
    sweep.run_task("no-such-experiment", {}, "key")
    assert os.environ["EPFABRIC_NATIVE_THREADS"] == "1"
    monkeypatch.setenv("EPFABRIC_NATIVE_THREADS", "3")
    sweep.run_task("no-such-experiment", {}, "key")
    assert os.environ["EPFABRIC_NATIVE_THREADS"] == "3"


def test_ctrl_c_on_dask_keeps_the_finished_points_and_cancels_the_rest(result_cache, monkeypatch):
    """Ctrl-C while a Dask sweep waits: the points that finished are in the result cache (a rerun
    skips them), every future is cancelled, and the KeyboardInterrupt reaches the command (which
    says "interrupted" and exits 130: tests/sim/test_cli_run.py)."""
    require("dask distributed", None if importlib.util.find_spec("distributed")
            else "distributed is not installed")
    import distributed
    from epfabric.sim.lab import sweep

    class Future:
        def __init__(self, entry):
            self.entry, self.cancelled = entry, False

        def result(self):
            return self.entry

        def cancel(self):
            self.cancelled = True

    done = {"rows": [{"x": 1}], "wall_s": 0.1, "error": None}
    futures = {Future(done): 0, Future(None): 1}

    def first_then_ctrl_c(fs):
        yield next(iter(fs))
        raise KeyboardInterrupt
    monkeypatch.setattr(distributed, "as_completed", first_then_ctrl_c)
    tasks = [({"i": 0}, "key0"), ({"i": 1}, "key1")]
    with pytest.raises(KeyboardInterrupt):
        sweep.run_points("payload", tasks, client=object(), futures=futures)
    assert all(f.cancelled for f in futures)
    assert cache.load("payload", "key0")["rows"] == [{"x": 1}]
    assert cache.load("payload", "key1") is None
