"""``epfabric bench`` (sim/bench.py): cycles per second per backend, measured not assumed."""

import json

import pytest

from epfabric.sim.cli import main


def test_pysim_row(tmp_path, capsys):
    out = tmp_path / "bench.json"
    assert main(["bench", "--backends", "pysim", "--dies", "4", "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    (row,) = data["runs"]
    assert set(row) >= {"backend", "dies", "cycles", "build_s", "run_s", "cycles_per_s"}
    assert row["backend"] == "pysim" and row["dies"] == 4 and row["correct"]
    assert row["cycles"] > 1000                       # cm384 latencies: a real run
    assert row["cycles_per_s"] == pytest.approx(row["cycles"] / row["run_s"], rel=0.01)
    assert data["verilator_over_pysim"] == {}          # no Verilator run, no ratio
    assert "cycles/s" in capsys.readouterr().out


@pytest.mark.parametrize("argv, message", [
    (["bench", "--backends", "xcelium"], "unknown backend 'xcelium'"),
    (["bench", "--dies", "5"], "--dies: 5 not one of"),
])
def test_bad_input(argv, message, capsys):
    assert main(argv) == 2
    assert message in capsys.readouterr().err
