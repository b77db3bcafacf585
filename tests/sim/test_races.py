"""Race catalog (sim/experiments/races.py, hw/race.py): every scenario misbehaves unsafe and never safe."""

import json
import os
import re

import pytest

from epfabric.hw.race import NEW_FLAG
from epfabric.sim import cli
from epfabric.sim.experiments import EXPERIMENTS, races


def parse_vcd(path):
    """Minimal VCD reader: ``{scope.name: [values in order of change]}``."""
    names, changes, scope = {}, {}, []
    with open(path) as f:
        text = f.read()
    header, _, body = text.partition("$enddefinitions")
    for tok in re.finditer(r"\$scope\s+\w+\s+(\S+)\s+\$end|\$upscope|\$var\s+\S+\s+\d+\s+(\S+)\s+(\S+)", header):
        if tok.group(1):
            scope.append(tok.group(1))
        elif tok.group(0) == "$upscope":
            scope.pop()
        else:
            names.setdefault(tok.group(2), []).append(".".join(scope + [tok.group(3)]))
    for line in body.splitlines():
        line = line.strip()
        if not line or line[0] in "#$":
            continue
        if line[0] in "bBsSrR":
            value, ident = line[1:].split()
        else:
            value, ident = line[0], line[1:]
        for name in names.get(ident, ()):
            changes.setdefault(name, []).append(value)
    return changes


@pytest.fixture(scope="module")
def catalog(tmp_path_factory):
    out = tmp_path_factory.mktemp("races")
    old = os.environ.get("EPFABRIC_WAVEFORM_DIR")
    os.environ["EPFABRIC_WAVEFORM_DIR"] = str(out / "waveforms")
    try:
        assert cli.main(["races", "--json", str(out / "out.json")]) == 0
    finally:
        if old is None:
            os.environ.pop("EPFABRIC_WAVEFORM_DIR")
        else:
            os.environ["EPFABRIC_WAVEFORM_DIR"] = old
    return json.loads((out / "out.json").read_text()), out


def test_every_scenario_races_unsafe_only(catalog):
    rows, _ = catalog
    assert [r["scenario"] for r in rows] == list(races.SCENARIOS)
    for r in rows:
        assert set(r) == {"scenario", "waveform", "unsafe_outcome", "safe_outcome",
                          "race_observed_unsafe", "race_observed_safe", "vcd"}
        assert r["race_observed_unsafe"] is True, r
        assert r["race_observed_safe"] is False, r


REQUIRED = ["reader_state", "mem_flag", "mem_payload0", "mem_payload1", "commit_valid", "observed"]


@pytest.mark.parametrize("scenario", list(races.SCENARIOS))
def test_vcd_has_named_signals_that_change(catalog, scenario):
    rows, out = catalog
    row = next(r for r in rows if r["scenario"] == scenario)
    vcd = row["vcd"]
    assert vcd.startswith(str(out)) and os.path.exists(vcd)
    assert os.path.exists(vcd[:-4] + ".gtkw")
    changes = parse_vcd(vcd)
    for variant in ("unsafe", "safe"):
        keys = {}
        for name in REQUIRED:
            key = next((k for k in changes if f".{variant}." in k and k.endswith(f".{name}")), None)
            assert key is not None, f"{variant}.{name} missing from {vcd}"
            keys[name] = key
        changed = {n for n, k in keys.items() if len(set(changes[k])) > 1}
        assert {"reader_state", "commit_valid"} <= changed, changed
        # the written block shows up in memory (a zero payload over a zero
        # sentinel leaves the flag word itself unchanged: that is the race)
        assert changed & {"mem_flag", "mem_payload0", "mem_payload1"}, changed
        gtkw = open(vcd[:-4] + ".gtkw").read()
        assert f"{variant}.reader_state" in gtkw and f"{variant}.mem_flag" in gtkw
        assert f"{variant}.mem.commit_valid" in gtkw


def test_outcomes_are_measured():
    """Stale-word counts come from the reader's hardware comparison."""
    row = races.run_scenario("torn_read", waveform=False)
    assert row["measured"]["unsafe"]["stale"] > 0
    assert row["measured"]["safe"]["stale"] == 0
    assert row["measured"]["unsafe"]["observed"] == NEW_FLAG


def test_counter_race_loses_exactly_one_signal():
    row = races.run_scenario("counter_reset_race", waveform=False)
    assert row["measured"]["unsafe"]["observed"] == 1       # reset erased op 1's early signal; only the late one counts
    assert row["measured"]["safe"]["observed"] == 4
    assert row["measured"]["safe"]["ops_done"] == 2


def test_bad_scenario():
    with pytest.raises(ValueError, match=r"scenario must be one of .*not 'nope'"):
        races.run_scenario("nope")
    with pytest.raises(ValueError, match=r"scenario must be one of .*not 'nope'"):
        races.race_top(scenario="nope")
    with pytest.raises(ValueError, match=r"scenario must be one of .*not 'nope'"):
        EXPERIMENTS["races"].run(scenarios="torn_read,nope", waveform=False)


def test_cli_json_folder_missing(capsys, monkeypatch):
    def forbidden(*args, **kwargs):
        raise AssertionError("a simulation was started")
    monkeypatch.setattr("epfabric.sim.experiments.races.run_catalog", forbidden)
    assert cli.main(["races", "--json", "/missing-folder/r.json"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("epfabric races: error: --json '/missing-folder/r.json'") and "\n" not in err
