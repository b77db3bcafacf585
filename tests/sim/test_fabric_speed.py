"""``epfabric fabric-speed`` (sim/lab/experiments/fabric_speed.py): cycles/s of a loaded superpod fabric."""

import json

import pytest

from epfabric.sim.cli import main
from epfabric.sim.lab.experiments import EXPERIMENTS
from epfabric.sim.lab.experiments.fabric_speed import traffic_spec


def test_small_pysim_run(tmp_path, capsys):
    out = tmp_path / "fs.json"
    assert main(["fabric-speed", "--backends", "pysim", "--shape", "2,1,1", "--cycles", "400",
                 "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    (row,) = data["runs"]
    assert row["backend"] == "pysim" and row["ranks"] == 2 and row["cycles"] == 400
    assert row["misrouted"] == 0 and row["sent"] > 0 and 0 < row["received"] <= row["sent"]
    assert row["cycles_per_s"] == pytest.approx(row["cycles"] / row["run_s"], rel=0.01)
    assert data["verilator_over_pysim"] is None          # no Verilator run, no ratio
    assert "uniform saturating traffic" in capsys.readouterr().out


def test_native_runs_the_fabric_and_agrees_with_verilator(tmp_path, capsys):
    """``--backends native`` (issue 29: it used to fail deep in the build with "Simulator 'native'
    is not in supported list") runs the fabric as one glue model: same cycles, traffic as Verilator."""
    from utils import require_simulator
    require_simulator("native")
    require_simulator("verilator")
    out = tmp_path / "fs.json"
    assert main(["fabric-speed", "--backends", "native,verilator", "--shape", "2,1,1",
                 "--cycles", "2000", "--opt=-O0", "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    native, verilator = data["runs"]
    assert native["backend"] == "native" and verilator["backend"] == "verilator"
    for key in ("ranks", "cycles", "sent", "received", "misrouted"):
        assert native[key] == verilator[key], key
    assert native["cycles"] == 2000 and native["misrouted"] == 0 and native["sent"] > 0
    assert data["native_over_verilator"] == pytest.approx(
        native["cycles_per_s"] / verilator["cycles_per_s"], abs=0.01)
    assert "native / verilator: " in capsys.readouterr().out


def test_traffic_spec_checks_the_shape_against_the_preset():
    ports = traffic_spec(preset="cm384", dies_per_npu=2, npus_per_board=1, boards=1).interface()
    assert len(ports.sent) == len(ports.received) == 2       # 2 ranks; nothing is built
    with pytest.raises(ValueError, match=r"dies_per_npu must be in \[1, 2\], not 3"):
        traffic_spec(preset="cm384", dies_per_npu=3, npus_per_board=1, boards=1).build()


@pytest.mark.parametrize("argv, message", [
    (["--preset", "nope"], "preset must be one of"),
    (["--json", "/missing-folder/f.json"], "--json '/missing-folder/f.json'"),
    # checked by the experiment's run(); must be found before anything is built
    (["--backends", "xcelium"], "backends must be one of pysim, icarus, verilator, native, not 'xcelium'"),
    (["--shape", "2,x"], "shape must be three integers a,b,c, not '2,x'"),
    (["--shape", "3,8,2"], "dies_per_npu must be in [1, 2], not 3"),
    (["--cycles", "0"], "cycles must be >= 1, not 0"),
    (["--backends", ""], "--backends must name at least one of pysim, icarus, verilator, native, not ''"),
    (["--backends", "pysim", "--opt=banana"], "--opt must be one of -O0, -O1, -O2, -O3, -Os, -Og, "
                                              "not 'banana'"),
    (["--backends", "pysim", "--opt=-O1"], "--opt=-O1 applies to verilator and native only, not to pysim"),
    (["--json", "."], "--json '.' is a folder, not a file"),
])
def test_bad_input_one_line_before_any_simulation(argv, message, capsys, monkeypatch):
    def forbidden(*args, **kwargs):
        raise AssertionError("a simulation was started")
    monkeypatch.setattr("epfabric.sim.lab.experiments.fabric_speed.run_backend", forbidden)
    assert main(["fabric-speed", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("epfabric fabric-speed: error: ") and "\n" not in err
    assert message in err


def test_registered():
    assert EXPERIMENTS["fabric_speed"].resolve()["backends"] == "pysim,verilator"


def test_backend_is_accepted_for_backends(no_simulation):
    """Every command that takes simulators accepts --backend (bench and fabric-speed: a list)."""
    from epfabric.sim.cli import make_parser
    for command in ("fabric-speed", "bench"):
        args = make_parser().parse_args([command, "--backend", "pysim,verilator"])
        assert args.backends == "pysim,verilator"


@pytest.mark.parametrize("given", ["superpod:2,1,1", "2,1,1"])
def test_topology_is_accepted_for_shape(given, monkeypatch):
    """``--topology superpod:a,b,c`` (every other command's name and form) is ``--shape a,b,c``:
    the experiment gets the same shape; ``--shape`` still works."""
    from epfabric.sim.cli import make_parser
    from epfabric.sim.cli.fabric_speed import prepare
    seen = {}
    monkeypatch.setattr(EXPERIMENTS["fabric_speed"], "run",
                        lambda **params: seen.update(params) or [])
    monkeypatch.setattr(EXPERIMENTS["fabric_speed"], "format", lambda rows: "")
    for flag in ("--topology", "--shape"):
        args = make_parser().parse_args(["fabric-speed", "--backends", "pysim", flag, given])
        seen.clear()
        prepare(args)()
        assert seen["shape"] == "2,1,1", flag
