"""epfabric calibrate: measured latency and bandwidth per class against the preset."""

import json

import pytest

from epfabric.sim.calibrate import measure
from epfabric.sim.cli import main as cli


def test_tiny_matches_targets_exactly():
    rep = measure("tiny", blocks=64)
    assert rep["latency_ns"] == rep["target_latency_ns"]
    for cls, bw in rep["bandwidth_gbps"].items():
        assert bw == pytest.approx(rep["target_bandwidth_gbps"][cls], rel=0.03)


def test_cm384_acceptance():
    """UBEP Table 2: 218 / 929 / 2500 ns within 2 %, 392 GB/s within 3 %, measured in simulation."""
    rep = measure("cm384", blocks=48)
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


def test_cli_bad_preset(capsys):
    assert cli(["calibrate", "--preset", "nope"]) == 2
    assert "unknown preset 'nope'; valid presets" in capsys.readouterr().err


def test_star_preset():
    rep = measure("incmoe-testbed", blocks=24)
    assert rep["latency_ns"] == {"one_hop": 1000.0}
    assert rep["bandwidth_gbps"]["one_hop"] == pytest.approx(12.5, rel=0.03)
