"""``epfabric bench`` (sim/lab/experiments/speed.py): cycles per second per backend, measured not assumed."""

import functools
import json

import pytest

from epfabric.sim.cli import main
from epfabric.sim.lab.experiments import speed


def test_pysim_row(tmp_path, capsys, monkeypatch):
    out = tmp_path / "bench.json"
    # the 4-die run takes a few thousand cycles: a hang fails in seconds, not after 10^6
    monkeypatch.setattr(speed, "bench_one", functools.partial(speed.bench_one, max_cycles=20_000))
    assert main(["bench", "--backends", "pysim", "--dies", "4", "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    (row,) = data["runs"]
    assert set(row) >= {"backend", "dies", "cycles", "build_s", "run_s", "cycles_per_s"}
    assert row["backend"] == "pysim" and row["dies"] == 4 and row["correct"]
    assert row["cycles"] > 1000                       # cm384 latencies: a real run
    assert row["cycles_per_s"] == pytest.approx(row["cycles"] / row["run_s"], rel=0.01)
    assert data["over_pysim"] == {}          # no Verilator run, no ratio
    assert "cycles/s" in capsys.readouterr().out


@pytest.mark.parametrize("argv, message", [
    (["bench", "--backends", "xcelium"],
     "backends must be one of pysim, icarus, verilator, native, not 'xcelium'"),
    (["bench", "--dies", "5"], "dies must be one of 4, 16, 32, 64, 128, 256, not 5"),
    (["bench", "--dies", "4,x"], "dies must be comma-separated integers, not '4,x'"),
    (["bench", "--aivs", "0"], "aivs must be >= 1, not 0"),
    (["bench", "--json", "/missing-folder/b.json"], "--json '/missing-folder/b.json'"),
    (["bench", "--scale", "--shapes", "16by2"], "--shapes: '16by2' is not DIESxAIVS"),
    (["bench", "--scale", "--shapes", "12x1"], "--shapes dies must be one of 4, 16, 32, 64, 128, 256, not 12"),
    (["bench", "--scale", "--shapes", "16x0"], "--shapes AIVs per die must be in [1, 256], not 0"),
    (["bench", "--scale", "--budget", "0"], "--budget must be positive"),
    (["bench", "--hier", "die"], "--hier must name shared modules (epf_...) or 'all', not 'die'"),
    (["bench", "--hier", "epf_die", "--backends", "pysim,native"],
     "--hier applies to the verilator backend only, not to pysim,native"),
    (["bench", "--scale", "--hier", "epf_die"], "--hier applies to the verilator backend only"),
    (["bench", "--backends", ""], "--backends must name at least one of pysim, icarus, verilator, native, not ''"),
    (["bench", "--backends", ","], "--backends must name at least one of pysim, icarus, verilator, native, not ','"),
    (["bench", "--backends", "pysim,pysim"], "--backends names a backend twice: 'pysim,pysim'"),
    (["bench", "--backends", "pysim", "--opt=banana"],
     "--opt must be one of -O0, -O1, -O2, -O3, -Os, -Og, not 'banana'"),
    (["bench", "--backends", "pysim,verilator", "--opt=banana"], "--opt must be one of -O0"),
    (["bench", "--backends", "pysim", "--opt=-O2"], "--opt=-O2 applies to verilator and native only, not to pysim"),
    (["bench", "--scale", "--opt=fast"], "--opt must be one of -O0, -O1, -O2, -O3, -Os, -Og, not 'fast'"),
    (["bench", "--json", "."], "--json '.' is a folder, not a file"),
    (["bench", "--dies", ""], "dies must name at least one die count, not ''"),
    (["bench", "--dies", ","], "dies must name at least one die count, not ','"),
    (["bench", "--dies", "4,4"], "dies names a count twice: '4,4'"),
])
def test_bad_input(argv, message, capsys, monkeypatch):
    def forbidden(*args, **kwargs):
        raise AssertionError("a simulation was started")
    monkeypatch.setattr(speed, "bench_one", forbidden)
    monkeypatch.setattr(speed, "probe_one", forbidden)
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("epfabric bench: error: ") and "\n" not in err
    assert message in err


def test_scale_skips_shapes_that_dominate_a_failure(monkeypatch):
    """The probe's bookkeeping, with the per-shape runs replaced by a fixed table."""
    outcome = {(4, 1): "ok", (16, 1): "ok", (16, 2): "over_budget", (32, 1): "ok", (32, 2): "ok",
               (64, 1): "failed", (16, 4): "ok"}
    tried = []

    def fake(d, a, budget_s, opt, backend):
        tried.append((d, a))
        return {"dies": d, "aivs_per_die": a, "status": outcome[(d, a)], "wall_s": 1.0,
                "peak_rss_mb": 1}
    monkeypatch.setattr(speed, "probe_one", fake)
    result = speed.scale([(4, 1), (16, 1), (16, 2), (32, 1), (32, 2), (64, 1), (16, 4), (128, 1)], 600)
    # 32x2 and 16x4 dominate the failed 16x2; 128x1 dominates the failed 64x1
    assert tried == [(4, 1), (16, 1), (16, 2), (32, 1), (64, 1)]
    assert result["largest"] == [32, 1]


@pytest.mark.slow
def test_scale_probe_one_shape():
    """One real probe point: a fresh 4-die Verilator build and run, in a subprocess."""
    row = speed.probe_one(4, 1, budget_s=600)
    assert row["status"] == "ok" and row["correct"] and row["cycles"] > 1000
    assert row["peak_rss_mb"] > 50 and row["build_s"] > 0


def test_experiment_parameters_are_typed():
    exp = speed.EXPERIMENT
    assert exp.resolve() == {"backends": "pysim,icarus,verilator,native", "dies": "4,16", "aivs": 1,
                             "opt": "-O2"}
    with pytest.raises(TypeError, match="aivs must be an integer, not '2'"):
        exp.resolve(aivs="2")
    with pytest.raises(TypeError, match="aivs must be an integer, not True"):
        exp.resolve(aivs=True)
    with pytest.raises(ValueError, match="unknown parameter"):
        exp.resolve(die="4")
    assert speed.parse_shapes("16x2,4X1") == [(16, 2), (4, 1)]
    assert speed.ratios([{"backend": "pysim", "dies": 4, "cycles_per_s": 10.0},
                         {"backend": "verilator", "dies": 4, "cycles_per_s": 250.0},
                         {"backend": "native", "dies": 4, "cycles_per_s": 50.0}]) == {
        "verilator": {"4": 25.0}, "native": {"4": 5.0}}


def test_the_scale_probe_states_the_growth_of_build_time_per_aiv_count():
    runs = [{"dies": 16, "aivs_per_die": 48, "status": "ok", "build_s": 200.0},
            {"dies": 32, "aivs_per_die": 48, "status": "ok", "build_s": 350.0},
            {"dies": 64, "aivs_per_die": 48, "status": "ok", "build_s": 700.0},
            {"dies": 128, "aivs_per_die": 48, "status": "over_budget"},
            {"dies": 16, "aivs_per_die": 8, "status": "ok", "build_s": 50.0}]
    assert speed.build_growth(runs) == [
        "build time at 48 AIVs per die, 16 -> 64 dies: 200 -> 700 s, x3.50 for x4 dies"]
    assert speed.build_growth(runs[:1]) == []
