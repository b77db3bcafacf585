"""Race catalog (sim/lab/experiments/races.py, sim/tb/race.py): every scenario misbehaves unsafe and never safe,
and its .gtkw opens on the moment that matters."""

import json
import os
import re

import pytest
from amaranth.hdl import Fragment

from epfabric.sim.tb.race import NEW_FLAG, ReaderState
from epfabric.sim import cli
from epfabric.sim.lab.experiments import EXPERIMENTS, races
from epfabric.sim.waves import read_gtkw


def parse_vcd(path):
    """Minimal VCD reader, independent of the package's: ``(vars, changes, end)``.

    ``vars`` maps ``scope.name`` (no escape, no bit range) to ``(ident, type)``;
    ``changes`` maps an ident to ``[(time, value), ...]``; ``end`` is the last time.
    """
    text = open(path).read()
    header, _, body = text.partition("$enddefinitions")
    vars, scope = {}, []
    for tok in re.finditer(r"\$scope\s+\w+\s+(\S+)\s+\$end|\$upscope|"
                           r"\$var\s+(\S+)\s+\d+\s+(\S+)\s+(\S+)", header):
        if tok.group(1):
            scope.append(tok.group(1))
        elif tok.group(0) == "$upscope":
            scope.pop()
        else:
            vars[".".join(scope + [tok.group(4).lstrip("\\")])] = (tok.group(3), tok.group(2))
    changes, time = {}, 0
    for line in body.splitlines():
        line = line.strip()
        if not line or line[0] == "$":
            continue
        if line[0] == "#":
            time = int(line[1:])
        elif line[0] in "bBsSrR":
            value, ident = line[1:].split()
            changes.setdefault(ident, []).append((time, value))
        else:
            changes.setdefault(line[1:], []).append((time, line[0]))
    return vars, changes, time


def value_at(changes, ident, time):
    value = None
    for t, v in changes[ident]:
        if t > time:
            break
        value = v
    return value


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
                          "race_observed_unsafe", "race_observed_safe", "unsafe_wrong_cycle",
                          "safe_act_cycle", "vcd", "gtkw"}
        assert r["race_observed_unsafe"] is True, r
        assert r["race_observed_safe"] is False, r
        assert isinstance(r["unsafe_wrong_cycle"], int) and isinstance(r["safe_act_cycle"], int)
        assert f"cycle {r['unsafe_wrong_cycle']}" in r["unsafe_outcome"], r


REQUIRED = ["reader_state", "mem_flag", "mem_payload0", "mem_payload1", "ub_commit", "observed"]


@pytest.mark.parametrize("scenario", list(races.SCENARIOS))
def test_vcd_has_named_signals_that_change(catalog, scenario):
    rows, out = catalog
    row = next(r for r in rows if r["scenario"] == scenario)
    vcd = row["vcd"]
    assert vcd.startswith(str(out)) and os.path.exists(vcd)
    vars, changes, _ = parse_vcd(vcd)
    for variant in ("unsafe", "safe"):
        keys = {name: f"bench.top.{variant}.{name}" for name in REQUIRED}
        for key in keys.values():
            assert key in vars, f"{key} missing from {vcd}"
        changed = {n for n, k in keys.items() if len({v for _, v in changes[vars[k][0]]}) > 1}
        assert {"reader_state", "ub_commit"} <= changed, changed
        # the written block shows up in memory (a zero payload over a zero
        # sentinel leaves the flag word itself unchanged: that is the race)
        assert changed & {"mem_flag", "mem_payload0", "mem_payload1"}, changed
        # enum states are written by name
        assert vars[keys["reader_state"]][1] == "string"
        names = {v for _, v in changes[vars[keys["reader_state"]][0]]}
        assert names <= {s.name for s in ReaderState} and "POLL" in names
    # every signal of the variants' own scopes has its design name: no generated $N
    generated = [k for k in vars if re.match(r"bench\.top\.(unsafe|safe)\.[^.]*\$", k)
                 or re.match(r"bench\.top\.[^.]*$", k) and "$" in k]
    assert not generated, generated


@pytest.mark.parametrize("scenario", list(races.SCENARIOS))
def test_gtkw_opens_on_the_race(catalog, scenario):
    """Every trace exists; the window holds markers A and B; A is the cycle the outcome reports."""
    rows, _ = catalog
    row = next(r for r in rows if r["scenario"] == scenario)
    sc = races.SCENARIOS[scenario]
    save = read_gtkw(row["gtkw"])
    vars, changes, end = parse_vcd(row["vcd"])
    assert save.dumpfile == row["vcd"]

    # every trace exists in the VCD, under its design name
    assert save.traces
    for name in save.traces:
        assert "$" not in name, name
        assert re.sub(r"\[\d+:\d+\]$", "", name).replace("\\", "") in vars, name

    # markers: A = unsafe goes wrong (also the primary marker), B = safe acts
    named = {save.marker_names[k]: t for k, t in save.markers.items()}
    a = next(t for n, t in named.items() if n.startswith(sc.wrong))
    b = next(t for n, t in named.items() if sc.act in n)
    assert save.primary == a == save.markers["A"]
    cycle = vars["bench.top.unsafe.cycle"][0]
    assert int(value_at(changes, cycle, a), 2) == row["unsafe_wrong_cycle"]
    assert int(value_at(changes, cycle, b), 2) == row["safe_act_cycle"]
    assert f"cycle {row['safe_act_cycle']}" in row["safe_outcome"]
    assert save.marker_names["A"].endswith(f"@{row['unsafe_wrong_cycle']}")

    # the zoom window (as GTKWave computes it from zoom, start and pane width) holds A and B
    t0, t1 = save.window(end=end)
    assert t0 < a < t1 and t0 < b < t1, (t0, a, b, t1)
    assert t1 - t0 < end / 2          # zoomed in, not the whole run

    # the variants: two groups with comment rows, the unsafe one first
    assert save.groups[0].startswith("UNSAFE") and save.groups[0] == sc.unsafe
    assert sc.safe in save.groups
    for line in (*sc.look_unsafe, *sc.look_safe):
        assert line in save.comments


def test_scenario_key_signals_exist():
    for name, sc in races.SCENARIOS.items():
        top = races.race_top(scenario=name)
        Fragment.get(top, None)
        shown = {getattr(s, "name", None) or s.as_value().name
                 for s in top.unsafe.gtkw_traces()}
        assert set(sc.key) <= shown, (name, set(sc.key) - shown)


def test_outcomes_are_measured():
    """Stale-word counts come from the reader's hardware comparison."""
    row = races.run_scenario("torn_read", waveform=False)
    assert row["measured"]["unsafe"]["stale"] > 0
    assert row["measured"]["safe"]["stale"] == 0
    assert row["measured"]["unsafe"]["observed"] == NEW_FLAG
    assert row["measured"]["unsafe"]["wrong_cycle"] == row["measured"]["unsafe"]["done_cycle"]
    assert row["measured"]["safe"]["wrong"] == 0
    assert row["vcd"] is None and row["gtkw"] is None


def test_flag_overtakes_data_only_without_fence():
    """Stop-and-wait: fenced, the flag (short lane) lands after its payload (long lane); not, before."""
    row = races.run_scenario("flag_overtakes_data", waveform=False)
    unsafe, safe = row["measured"]["unsafe"], row["measured"]["safe"]
    assert unsafe["observed"] == safe["observed"] == NEW_FLAG      # both readers saw the flag
    assert unsafe["stale"] > 0 and unsafe["wrong"] == 1
    assert safe["stale"] == 0 and safe["wrong"] == 0 and safe["done"] == 1
    # the safe flag is written only after the payload's acknowledgement
    assert safe["done_cycle"] > unsafe["done_cycle"]


def test_counter_race_loses_exactly_one_signal():
    row = races.run_scenario("counter_reset_race", waveform=False)
    assert row["measured"]["unsafe"]["observed"] == 1       # reset erased op 1's early signal; only the late one counts
    assert row["measured"]["safe"]["observed"] == 4
    assert row["measured"]["safe"]["ops_done"] == 2
    # the erasing reset is measured in hardware, before the watchdog gives up
    assert row["measured"]["unsafe"]["wrong"] == 1
    assert row["measured"]["unsafe"]["wrong_cycle"] < row["measured"]["unsafe"]["done_cycle"]


def test_checksum_over_stale_blocks():
    """DC: the stale batch's markers sum to the new checksum unless the epoch is mixed in."""
    row = races.run_scenario("checksum_stale_blocks", waveform=False)
    unsafe, safe = row["measured"]["unsafe"], row["measured"]["safe"]
    assert unsafe["observed"] == safe["observed"] == 2          # both saw epoch 2's checksum
    assert unsafe["stale"] > 0 and unsafe["done_cycle"] < safe["done_cycle"]
    assert safe["stale"] == 0 and safe["done"] == 1
    assert "stale payload words" in row["unsafe_outcome"]
    assert "intact payload" in row["safe_outcome"]


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
    monkeypatch.setattr("epfabric.sim.lab.experiments.races.run_catalog", forbidden)
    assert cli.main(["races", "--json", "/missing-folder/r.json"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("epfabric races: error: --json '/missing-folder/r.json'") and "\n" not in err
