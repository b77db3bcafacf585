"""``epfabric calibrate`` (sim/lab/experiments/calibrate.py): measured latency and bandwidth per class against the preset."""

import json

import pytest
from amaranth.hdl import Fragment

from epfabric.sim.lab.experiments import EXPERIMENTS
from epfabric.sim.lab.experiments.calibrate import calibration_fabric, format_report, calibrate
from epfabric.sim.cli import main as cli


def test_tiny_matches_targets_exactly():
    rep = calibrate("tiny", blocks=64)
    assert rep["latency_ns"] == rep["target_latency_ns"]
    for cls, bw in rep["bandwidth_gbps"].items():
        assert bw == pytest.approx(rep["target_bandwidth_gbps"][cls], rel=0.03)


def test_cm384_acceptance():
    """UBEP Table 2: 218 / 929 / 2500 ns within 2 %, 392 GB/s within 3 %, measured in simulation."""
    rep = calibrate("cm384", blocks=48)
    for cls, target in {"intra": 218, "one_hop": 929, "two_hop": 2500}.items():
        assert rep["latency_ns"][cls] == pytest.approx(target, rel=0.02)
        assert rep["bandwidth_gbps"][cls] == pytest.approx(392, rel=0.03)


def test_cli_json(tmp_path, capsys):
    out = tmp_path / "cal.json"
    assert cli(["calibrate", "--preset", "tiny", "--blocks", "24", "--quiet", "--json", str(out)]) == 0
    rep = json.loads(out.read_text())
    for key in ("latency_ns", "bandwidth_gbps", "target_latency_ns", "target_bandwidth_gbps"):
        assert set(rep[key]) == {"intra", "one_hop", "two_hop"}
    assert "two_hop" in capsys.readouterr().out


@pytest.mark.parametrize("argv, message", [
    (["--preset", "nope"], "unknown preset 'nope'; valid presets"),
    (["--preset", "tiny", "--blocks", "8"], "--blocks must be >= 16, not 8"),
    (["--preset", "tiny", "--data-bytes", "0"], "--data-bytes must be >= 1, not 0"),
    (["--preset", "tiny", "--json", "/missing-folder/c.json"], "--json '/missing-folder/c.json'"),
])
def test_cli_bad_input(argv, message, capsys, monkeypatch):
    def forbidden(*args, **kwargs):
        raise AssertionError("a simulation was started")
    monkeypatch.setattr("epfabric.sim.cli.calibrate.calibrate", forbidden)
    assert cli(["calibrate", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("epfabric calibrate: error: ") and "\n" not in err
    assert message in err


def test_experiment_rows_and_report(monkeypatch):
    """The registered experiment: its parameters reach calibrate(), one row per class."""
    exp = EXPERIMENTS["table2"]
    assert exp.paper == "UBEP Table 2"
    calls = []

    def fake_measure(preset, **kw):         # a report as calibrate() returns it, not simulated
        calls.append((preset, kw))
        return {"preset": preset, "backend": kw["backend"], "latency_ns": {"one_hop": 1000.0},
                "target_latency_ns": {"one_hop": 1000.0}, "bandwidth_gbps": {"one_hop": 12.4},
                "target_bandwidth_gbps": {"one_hop": 12.5}, "latency_cycles": {"one_hop": 1000}}
    monkeypatch.setattr("epfabric.sim.lab.experiments.calibrate.calibrate", fake_measure)
    rows = exp.run(preset="incmoe-testbed", blocks=24)
    assert calls == [("incmoe-testbed", {"backend": "pysim", "blocks": 24, "data_bytes": 4,
                                         "verbose": False})]
    assert [r["class"] for r in rows] == ["one_hop"]
    assert rows[0]["latency_ns"] == rows[0]["target_latency_ns"] == 1000.0
    assert rows[0]["latency_error_pct"] == 0
    assert rows[0]["bandwidth_error_pct"] == pytest.approx(100 * (12.4 - 12.5) / 12.5)
    assert "paper_latency_ns" not in rows[0]             # Table 2 is for cm384 only
    assert "one_hop" in exp.format(rows)
    with pytest.raises(ValueError, match="blocks must be >= 16, not 8"):
        exp.resolve(blocks=8)


def test_calibration_fabric_is_the_smallest_with_every_class():
    fabric, star = calibration_fabric(preset="tiny"), calibration_fabric(preset="incmoe-testbed")
    for built in (fabric, star):
        Fragment.get(built, None)
    assert fabric.ranks == 8                               # 2 dies x 2 NPUs x 2 boards
    assert star.ranks == 2


def test_star_preset():
    rep = calibrate("incmoe-testbed", blocks=24)
    assert rep["latency_ns"] == {"one_hop": 1000.0}
    assert rep["bandwidth_gbps"]["one_hop"] == pytest.approx(12.5, rel=0.03)
    assert "calibration of preset incmoe-testbed on pysim" in format_report(rep)


def test_table2_compares_with_the_paper_and_holds_only_within_one_percent():
    exp = EXPERIMENTS["table2"]
    rows = []
    for cls, lat in (("intra", 218.0), ("one_hop", 929.0), ("two_hop", 2500.0)):
        row = {"preset": "cm384", "class": cls, "latency_ns": lat, "bandwidth_gbytes_s": 392.75}
        rows.append({**row, **exp.compare(row)})
    assert [r["paper_latency_ns"] for r in rows] == [218.0, 929.0, 2500.0]
    assert [r["paper_normalised"] for r in rows] == [1.0, 4.3, 11.5]
    holds, text = exp.verdict(rows)
    assert holds and "218 / 929 / 2500 ns" in text
    rows[2] = {**rows[2], **exp.compare({**rows[2], "latency_ns": 2600.0}), "latency_ns": 2600.0}
    assert exp.verdict(rows)[0] is False                  # 4 % off: the claim no longer holds
