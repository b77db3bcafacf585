"""The calibration fit (``epfabric calibrate --fit``, sim/lab/fit.py) on synthetic surrogates.

No simulation runs here: the surrogate's algebra (recovering known parameters, bounds,
identifiability, what the training targets are computed from) is checked on made-up
Jacobians; the runs themselves are the ``training`` experiment's, whose measures are the
dispatch checker's (tests/sw/test_dispatch.py pins that a hard SyncAll of ``s`` cycles adds
exactly ``2 s`` to CANN's run, which the surrogate relies on).
"""

import json

import numpy as np
import pytest

from epfabric.hw.validate import UserError
from epfabric.sim.cli import main
from epfabric.sim.lab import fit
from epfabric.sim.lab.experiments.training import TARGETS, targets

from utils import require_dask

GOAL = [TARGETS[t][0] for t in fit.ORDER]


def surrogate():
    """A made-up surrogate: targets at the priors and a Jacobian every parameter moves."""
    base = {"y": np.array([p.coord(p.prior) for p in fit.SIMULATED]),
            "m": np.array([60.0, 10.0, 1.4, 20.0])}
    # d target / d coordinate: the window's coordinate is 1/bytes (~7e-5 at the prior)
    # and the injection's 1/(GB/s) (~5e-3); F1 (us): window, injection, read start ns
    jac = np.array([[4.0e5, 2000.0, 0.010],
                    [2.0e5, 400.0, 0.002],           # F2
                    [0.0, 150.0, 0.0],               # F3
                    [0.0, 0.0, 0.020]])              # F5
    return base, jac


def model_at(values):
    base, jac = surrogate()
    z = np.array([p.coord(values[p.field]) for p in fit.SIMULATED] + [values["syncall_ns"]])
    return fit._model(z, base, jac, 1.0)


def test_the_fit_recovers_the_parameters_that_made_its_targets():
    base, jac = surrogate()
    truth = {"send_window_bytes": 9000.0, "die_injection_gbytes_s": 120.0,
             "read_start_ns": 150.0, "syncall_ns": 4000.0}
    goal = model_at(truth)
    z, predicted = fit.solve(base, jac, goal)
    got = fit.values_of(z)
    for name, value in truth.items():
        assert got[name] == pytest.approx(value, rel=1e-4), name
    assert predicted == pytest.approx(goal, rel=1e-6)


def test_syncall_enters_exactly():
    """F1 grows by n_s s and F4 is n_s (s + 1) / T16 (s in cycles at 1 ns a cycle), n_s = 3:
    S1's dies host 16 experts each, so CANN runs UpdateTokenNumsOut's third SyncAll."""
    from epfabric.sim.lab.experiments.training import S1_SYNCALLS
    assert S1_SYNCALLS == 3
    base, jac = surrogate()
    z0 = np.append(base["y"], 0.0)
    z1 = np.append(base["y"], 500.0)
    m0, m1 = fit._model(z0, base, jac, 1.0), fit._model(z1, base, jac, 1.0)
    assert m1[0] - m0[0] == pytest.approx(1.5)            # 3 * 500 ns = 1.5 us
    assert m1[3] == pytest.approx(3 * 501 / (60_000 + 1500))
    assert list(m1[[1, 2, 4]]) == list(m0[[1, 2, 4]])


def test_bounds_hold_and_are_reported():
    """A target that wants an injection rate above 392 GB/s leaves it at the bound, said so."""
    base, jac = surrogate()
    truth = {"send_window_bytes": 9000.0, "die_injection_gbytes_s": 380.0,
             "read_start_ns": 150.0, "syncall_ns": 4000.0}
    goal = model_at(truth)
    goal[2] *= 0.5                          # F3 far below what the bound allows
    z, _ = fit.solve(base, jac, goal)
    got = fit.values_of(z)
    assert got["die_injection_gbytes_s"] == pytest.approx(392.0)
    _, status = fit.identifiability(base, jac, goal, z)
    assert status["die_injection_gbytes_s"] == "weak: at its bound"


def test_identifiability_names_what_no_target_pins():
    base, jac = surrogate()
    jac[:, 2] = 0.0                          # nothing responds to the read start
    truth = {"send_window_bytes": 9000.0, "die_injection_gbytes_s": 120.0,
             "read_start_ns": 100.0, "syncall_ns": 4000.0}
    goal = model_at(truth)
    z, _ = fit.solve(base, jac, goal)
    table, status = fit.identifiability(base, jac, goal, z)
    assert status["read_start_ns"].startswith("not pinned")
    assert status["syncall_ns"] == "pinned"
    # F4 +10 % moves the SyncAll cost up, and by about 10 % or more (T16 grows with it)
    minus, plus = table["syncall_ns"]["F4"]
    assert minus < 0 < plus and plus > 0.09
    # every parameter has a change for every target move, in both directions
    assert all(len(table[p.field][t]) == 2 and all(np.isfinite(table[p.field][t]))
               for p in fit.PARAMS if p.field != "read_start_ns" for t in fit.ORDER)


def test_targets_from_rows():
    rows = [{"run": "s1_cann", "cycles": 100_000, "syncall_cycles": 4_999, "a2a": 1},
            {"run": "s2_cann", "cycles": 117_000, "a2a": 1},
            {"run": "f3_t8", "cycles": 9, "a2a": 3_732},
            {"run": "f3_t47", "cycles": 9, "a2a": 2_000},
            {"run": "f5_c1", "cycles": 80_000, "a2a": 1},
            {"run": "f5_c4", "cycles": 46_300, "a2a": 1, "error": None}]
    got = targets(rows)
    assert got == pytest.approx({"F1": 100.0, "F2": 17.0, "F3": 1.866, "F4": 0.15, "F5": 33.7})
    assert "F5" not in targets(rows[:4] + [{"run": "f5_c1", "cycles": None}])


def test_knobs_of_go_through_the_preset():
    knobs = fit.knobs_of("cm384", {"send_window_bytes": 14336, "die_injection_gbytes_s": 196.0,
                                   "read_start_ns": 99.6, "syncall_ns": 0.0})
    assert knobs == {"store_window": 28, "inject_rate": 196 * 1024, "read_extra": 100,
                     "poll_extra": 100, "syncall_cycles": 0}


def test_the_scalar_reads_cost_is_held_at_the_read_start():
    """``poll_ns`` is not fitted: unset in the training preset, its knob follows the fitted
    read start and the held values leave it unset; a preset that names it keeps its own."""
    values = {"send_window_bytes": 14336, "die_injection_gbytes_s": 196.0,
              "read_start_ns": 99.6, "syncall_ns": 0.0}
    assert "poll_ns" not in fit.held_values("cm384-ascend", fit.knobs_of("cm384-ascend", values),
                                            values)
    assert "poll_ns" not in {p.field for p in fit.PARAMS}
    from epfabric.sw import presets
    own = presets.PRESETS["cm384"].replace(name="cm384-own-poll", poll_ns=40.0)
    knobs = fit.knobs_of(own, values)
    assert (knobs["read_extra"], knobs["poll_extra"]) == (100, 40)
    assert fit.held_values(own, knobs, values)["poll_ns"] == 40.0


def test_a_written_fit_is_a_preset(tmp_path, monkeypatch):
    """``--write``'s file becomes ``<preset>-fit``, with its provenance."""
    from epfabric.sw import presets
    from epfabric.sw.presets import ASCEND
    report = {"preset": "cm384", "fitted": {"send_window_bytes": 9216,
                                            "die_injection_gbytes_s": 150.0,
                                            "read_start_ns": 120.0, "syncall_ns": 5000.0},
              "structure": dict(ASCEND), "trained_on": "cm384-ascend",
              "status": {"syncall_ns": "pinned"}, "wall_s": 1.0}
    for key in ("targets", "predicted", "measured", "residuals", "checks", "identifiability", "basis",
                "priors", "design", "jacobian", "knobs", "backend", "seed"):
        report.setdefault(key, {})
    path = fit.write_fit(report, tmp_path / "cm384.json")
    doc = json.loads(path.read_text())
    assert doc["fields"]["syncall"] == "hard"
    p = presets._fitted(path)
    assert p.name == "cm384-fit" and p.syncall == "hard"
    assert (p.vector_lanes, p.copies, p.cumsum_scan) == (128, "mte", "split")  # the structure
    assert doc["provenance"]["trained_on"] == "cm384-ascend"
    assert p.knobs() == {"store_window": 18, "syncall_cycles": 5000, "inject_rate": 153600,
                         "read_extra": 120, "poll_extra": 120}
    assert "poll_ns" not in doc["fields"] and p.poll_ns is None
    assert "pinned" in p.description


def test_bad_input_is_one_line(capsys):
    assert main(["calibrate", "--write", "--preset", "cm384"]) == 2
    assert "--write needs --fit" in capsys.readouterr().err
    assert main(["calibrate", "--fit", "--scheduler", "nowhere"]) == 2
    assert "scheduler must be" in capsys.readouterr().err
    with pytest.raises(UserError, match="cm384 superpod of 48 AIVs"):
        fit.fit("tiny")


def test_a_scheduler_address_is_checked_before_the_fit_sizes_anything(monkeypatch, capsys):
    require_dask()
    monkeypatch.setattr(fit, "fit", lambda *a, **k: pytest.fail("the fit started"))
    assert main(["calibrate", "--fit", "--scheduler", "nosuch://x"]) == 2
    assert capsys.readouterr().err == ("epfabric calibrate: error: scheduler 'nosuch://x': "
                                       "'nosuch' is not a protocol a Dask scheduler is reached "
                                       "by; give serial, local or PROTOCOL://host:port "
                                       "(PROTOCOL one of tcp, tls, ws, wss)\n")


def test_a_fitted_preset_builds_its_bases_hardware(monkeypatch):
    """Its knobs are runtime values: a machine of ``cm384-fit`` has ``cm384``'s specification
    (so its build), and a preset with other latencies does not."""
    from epfabric.sim.backends.machine import machine_spec
    from epfabric.sw import presets
    from epfabric.sw.config import MachineConfig
    fitted = presets.PRESETS["cm384"].replace(name="cm384-x", syncall="hard", syncall_ns=5000.0,
                                              send_window_bytes=9216, vector_op_ns=10.0,
                                              die_injection_gbytes_s=150.0)
    slower = presets.PRESETS["cm384"].replace(name="cm384-y", latency_one_hop_ns=930.0)
    monkeypatch.setitem(presets.PRESETS, "cm384-x", fitted)
    monkeypatch.setitem(presets.PRESETS, "cm384-y", slower)

    def spec(name):
        return machine_spec(MachineConfig(name, topology=("superpod", 2, 2, 1), aivs_per_die=2))
    assert spec("cm384-x") == spec("cm384")
    assert spec("cm384-y") != spec("cm384")
    assert presets.hardware_twin("cm384-y", "superpod") == "cm384-y"


def test_broyden_moves_the_surrogate_onto_the_check():
    """After the update the surrogate is exact at the checked point and along its step."""
    base, jac = surrogate()
    y1 = base["y"] * np.array([0.5, 0.8, 1.0]) + np.array([0.0, 0.0, 300.0])
    m1 = base["m"] + np.array([9.0, 3.0, 0.2, 4.0])
    new, j2 = fit.broyden(base, jac, y1, m1)
    assert list(new["y"]) == list(y1) and list(new["m"]) == list(m1)
    assert j2 @ (y1 - base["y"]) == pytest.approx(m1 - base["m"])


def test_the_fit_checks_again_until_its_targets_are_close(monkeypatch):
    """On a made-up machine whose targets are not linear in the knobs, the first check misses
    and the Broyden checks bring every target within CLOSE of the paper; every check is in
    the report, and the last one is what is reported as measured."""
    from epfabric.sw.presets import get_preset

    def raw(knobs):                # made-up targets of a setting of the knobs, not linear
        w = knobs["store_window"] * 512.0
        g = knobs["inject_rate"] / 1024.0
        v = knobs.get("vector_extra", 0)
        r = knobs.get("read_extra", 0)
        f1 = 3.0e5 / w + 2000.0 / g + 0.4 * v + 0.02 * r + 0.002 * v * r
        return np.array([f1, 1.2e5 / w + 0.01 * r, 60.0 / g + 0.002 * v,
                         0.5 * v + 0.05 * r + 1e-4 * r * r])

    # offsets that put the paper's targets at a known setting (an exact solution exists)
    truth = {"store_window": 30, "inject_rate": 80 * 1024, "read_extra": 300}
    s_true = 7000
    goal = np.array([TARGETS[t][0] for t in ("F1", "F2", "F3", "F5")])
    goal[0] -= 3 * s_true / 1000                    # three SyncAlls at S1
    offset = goal - raw(truth)

    def machine(knobs):
        f1, f2, f3, f5 = raw(knobs) + offset
        s = knobs.get("syncall_cycles", 0)
        return {"F1": f1 + 3 * s / 1000, "F2": f2, "F3": f3,
                "F4": 3 * (s + 1) / (1000 * f1 + 3 * s), "F5": f5}

    calls = []

    def measure(preset, backend, seed, points_at, log, scheduler):
        calls.append([label for label, _ in points_at])
        got = {label: machine(knobs) for label, knobs in points_at}
        rows = {label: [{"run": "s1_cann", "release_share": 0.1}] for label, _ in points_at}
        return got, rows

    monkeypatch.setattr(fit, "_measure", measure)
    monkeypatch.setattr(fit, "get_preset", lambda name: get_preset("cm384").replace(
        name="cm384") if name == "cm384" else get_preset(name))
    one = fit.fit("cm384", log=lambda *a: None, checks=1)
    three = fit.fit("cm384", log=lambda *a: None, checks=4)
    worst = lambda rep: max(abs(r) for r in rep["residuals"].values())
    assert len(one["checks"]) == 1 and worst(one) > fit.CLOSE      # linearisation error
    assert 2 <= len(three["checks"]) <= 4 and worst(three) <= fit.CLOSE
    assert three["measured"] == three["checks"][-1]["measured"]
    assert calls[1] == ["check 1"] and len(calls[0]) == len(fit.SIMULATED) + 1
