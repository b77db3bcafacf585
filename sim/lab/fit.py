"""``epfabric calibrate --fit``: fit a cm384 preset's timing knobs once, on the training set.

The fit runs on ``<preset>-ascend`` (:data:`~epfabric.sw.presets.ASCEND`: the
structure of an Ascend die, declared from its documentation and not fitted — a 128-lane
vector unit, MTE copies, the CalCumSum AIVs' split scan, the hardware SyncAll). The
parameters (:data:`PARAMS`) are four preset fields, each a die's runtime knob (hw/die.py
``KNOBS``), so one build of each training machine serves every parameter setting:

* ``send_window_bytes`` (knob ``store_window``): a sending AIV's block stores
  in flight — its staging buffers, freed at remote completion;
* ``die_injection_gbytes_s`` (``inject_rate``): what a die may send into the fabric (a
  bandwidth: the surrogate is linear in its reciprocal, as in the window's);
* ``read_start_ns`` (``read_extra``): what a read of an AIV (a load, a copy's first block, a
  fetch-add, each read of a poll) waits before its request — a copy engine's start;
  the scalar reads (a load, a fetch-add, a poll's read) pay it through their own knob
  ``poll_extra``, which follows ``read_start_ns`` while the training preset leaves
  ``poll_ns`` unset (``cm384-ascend`` does);
* ``syncall_ns`` (``syncall_cycles``): what the die's hardware SyncAll costs after
  the last arrival.

``vector_op_ns`` (``vector_extra``) is not fitted: the first fit (16 lanes, block reads)
left it at its bound, 0, its 16 ns design step moving no target by more than 0.2 µs
(sw/fits/cm384.json of a0f64b0), so F1-F5 cannot pin it; it stays 0 and a knob for what-ifs.

``poll_ns`` (``poll_extra``, a scalar read of global memory apart from a copy's start:
the preregistration's M1) is not fitted here either: it is held at "the same as
``read_start_ns``" (unset), so every design and check point charges the scalar reads the
read start, as every fit before the two knobs were apart did, and a written fit leaves it
unset. Fitting it apart is the preregistered refit's (docs/fidelity/preregistration.md).

The targets are F1–F5 of :mod:`epfabric.sim.lab.experiments.training` and only
those. The fit is one Gauss-Newton step on simulations:

1. **Design.** The six training runs at the priors and at one step of each of
   the three simulated parameters (window, injection, read start) — 24 runs,
   each checked bit-exact. The SyncAll cost needs no runs: the hardware barrier
   holds every die ``s`` cycles after its last arrival, so CANN's time grows by
   exactly ``n_s s`` (``n_s`` SyncAlls: three at S1, whose dies host 16 experts each;
   tests/sw/test_dispatch.py and tests/sim/test_cli_run.py pin it) and F4 is
   ``n_s (s + 1) / T16``.
2. **Surrogate.** Each simulated target is linear in the parameters around the
   priors (the window in blocks⁻¹: a window-bound sender's rate is proportional
   to its window), plus the exact SyncAll terms.
3. **Fit.** Weighted least squares on the surrogate (each residual relative to
   its paper value), inside each parameter's bounds.
4. **Check.** The six runs again at the fitted knobs; the report gives the
   measured targets beside the surrogate's prediction (the linearisation's
   error) and the paper's. While a measured target is more than :data:`CLOSE`
   from the paper, and at most :data:`CHECKS` times in all, the surrogate moves
   to the checked point (its base becomes the check's runs; Broyden's rank-one
   update corrects the Jacobian along the step, :func:`broyden`) and is solved
   and checked again — six runs a check, no new design runs.
5. **Identifiability.** Each target moved ±10 % and the surrogate refitted: how
   far each parameter moves. A parameter no target responds to is reported as
   not pinned, one that hits a bound or moves more than the target did × 5 as
   weakly pinned.

Every run is a point of the ``training`` experiment, cached by the result cache
(:mod:`.results.cache`), so a rerun at the same source reuses them.
"""

import json
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ...hw.die import INJECT_DEN
from ...hw.validate import UserError
from ...sw.presets import ASCEND, FITS, get_preset
from .experiments.training import RUNS, S1_SYNCALLS, TARGETS, format_targets, run_points, targets
from .results import cache
from . import sweep

__all__ = ["PARAMS", "FitParam", "fit", "solve", "identifiability", "format_report",
           "FIT_FILE"]

#: where the fitted values of a preset are written (``--write``), read by :mod:`epfabric.sw.presets`
FIT_FILE = str(FITS / "{preset}.json")


@dataclass(frozen=True)
class FitParam:
    """One fitted preset field: its prior, the step of its design run, its bounds."""
    field: str
    knob: str
    prior: float
    step: float
    lo: float
    hi: float
    unit: str
    basis: str
    reciprocal: bool = False      # linear in 1/value (the window)

    def coord(self, value):
        """The surrogate's coordinate of ``value``."""
        return 1.0 / value if self.reciprocal else float(value)

    def value(self, coord):
        return 1.0 / coord if self.reciprocal else float(coord)


PARAMS = (
    FitParam("send_window_bytes", "store_window", 2 * 14 * 512, -14 * 512, 512, 512 * 512, "B",
             "UBEP §3.3: UB buffers reused per token; the issue's reading of Table 4 and Fig. 9 "
             "(about two 7 KiB tokens in flight per AIV); Ascend's MTE copies are asynchronous "
             "with double-buffered UB (CANN's open dispatch kernel)", reciprocal=True),
    FitParam("die_injection_gbytes_s", "inject_rate", 196.0, -49.0, 8.0, 392.0, "GB/s",
             "UBEP Table 2 / §2.3: 392 GB/s of UB per NPU of two dies; Fig. 3b's saturation "
             "at about half the AIVs; 392 GB/s is per NPU of two dies in the CloudMatrix384 "
             "paper (Zuo et al. 2025, UBEP's ref. [57]), hence 196 a die as the prior", reciprocal=True),
    FitParam("read_start_ns", "read_extra", 100.0, 100.0, 0.0, 4000.0, "ns",
             "Ascend C: an AIV reads global memory only through its MTE2 copy engine "
             "(DataCopy GM->UB, then SetFlag/WaitFlag before the vector or scalar unit may use "
             "the data), as CANN's open dispatch kernel reads its status flags and counts; "
             "the model's memory answers in a few cycles (hw/aiv_core.py read_extra). A copy "
             "pays it once (ldbc for its next blocks, copies='mte'); UBEP Fig. 14's C = 1 "
             "penalty is a C-AIV's serial count polls (F5), the issue's 0.1-0.4 us a poll"),
    FitParam("syncall_ns", "syncall_cycles", 0.0, 0.0, 0.0, 100000.0, "ns",
             "docs/spec/kernels.md §1.3: CANN's SyncAll is the die's barrier across its AIVs; its cost "
             "after the last arrival is what F4 measures"),
)
SIMULATED = PARAMS[:3]
SYNCALL = PARAMS[3]
ORDER = tuple(TARGETS)           # F1..F5


def knobs_of(preset, values):
    """``{knob: value}`` of fitted ``values`` (``{field: value}``), through the preset's
    conversion (:meth:`~epfabric.sw.presets.Preset.knobs`); the SyncAll knob is always
    written (0 when ``syncall_ns`` is 0). ``poll_extra`` is the preset's ``poll_ns``, or the
    fitted ``read_start_ns`` while the preset leaves it unset (held, not fitted)."""
    values = {**values, "send_window_bytes": math.ceil(values["send_window_bytes"])}
    pr = get_preset(preset).replace(syncall="hard", **values)
    knobs = pr.knobs()
    knobs.setdefault("syncall_cycles", 0)
    return knobs


def design(preset):
    """``[(label, {field: value})]``: the priors, then one step of each simulated parameter."""
    base = {p.field: p.prior for p in SIMULATED}
    out = [("prior", base)]
    for p in SIMULATED:
        out.append((f"step {p.field}", {**base, p.field: p.prior + p.step}))
    return out


def _model(z, base, jac, cycle_ns):
    """The surrogate's targets at ``z`` (simulated coordinates, then SyncAll ns)."""
    y, s_ns = z[:-1], z[-1]
    m = base["m"] + jac @ (y - base["y"])          # F1, F2, F3, F5 at s = 0
    f1, f2, f3, f5 = m
    s = s_ns / cycle_ns
    n = S1_SYNCALLS
    t16 = f1 * 1000 / cycle_ns + n * s             # cycles
    return np.array([f1 + n * s_ns / 1000, f2, f3, n * (s + 1) / t16, f5])


def _bounds():
    """``(lo, hi)`` of the solution vector: the simulated parameters' coordinates, then SyncAll."""
    lo = np.array([min(p.coord(p.lo), p.coord(p.hi)) for p in SIMULATED] + [SYNCALL.lo])
    hi = np.array([max(p.coord(p.lo), p.coord(p.hi)) for p in SIMULATED] + [SYNCALL.hi])
    return lo, hi


def solve(base, jac, goal, cycle_ns=1.0, iterations=60):
    """The surrogate's weighted least-squares fit to ``goal`` (targets in :data:`ORDER`);
    ``(z, model at z)``. Residuals are relative to ``goal``; each parameter stays inside its
    bounds (projected Gauss-Newton)."""
    lo, hi = _bounds()
    goal = np.asarray(goal, float)
    z = np.append(base["y"], 0.0)
    # each coordinate's scale: its design step (the SyncAll cost: a microsecond)
    scale = np.array([abs(p.coord(p.prior + p.step) - p.coord(p.prior)) for p in SIMULATED]
                     + [1000.0])

    def resid(z):
        return (_model(z, base, jac, cycle_ns) - goal) / goal

    for _ in range(iterations):
        r = resid(z)
        J = np.empty((len(goal), len(z)))
        for i in range(len(z)):
            dz = np.zeros_like(z)
            dz[i] = 1e-6 * scale[i]
            J[:, i] = (resid(z + dz) - r) / dz[i]
        # active set: a parameter on a bound that the gradient pushes outward stays there
        g = J.T @ r
        free = ~(((z <= lo) & (g > 0)) | ((z >= hi) & (g < 0)))
        step = np.zeros_like(z)
        if free.any():
            step[free] = np.linalg.lstsq(J[:, free] * scale[free], -r, rcond=None)[0] * scale[free]
        t, new = 1.0, z
        while t > 1e-6:                               # backtrack on the clipped step
            trial = np.clip(z + t * step, lo, hi)
            if np.sum(resid(trial) ** 2) < np.sum(r ** 2):
                new = trial
                break
            t /= 2
        if np.allclose(new, z, rtol=1e-12, atol=0):
            break
        z = new
    return z, _model(z, base, jac, cycle_ns)


def values_of(z):
    """``{field: value}`` of a solution ``z``."""
    out = {p.field: p.value(c) for p, c in zip(SIMULATED, z[:-1])}
    out[SYNCALL.field] = float(z[-1])
    return out


def identifiability(base, jac, goal, z, cycle_ns=1.0, move=0.10):
    """``{field: {target: (change at -move, change at +move)}}`` — relative changes of each
    fitted parameter when one target moves by ``∓move`` — and ``{field: status}``."""
    fitted = values_of(z)
    table = {p.field: {} for p in PARAMS}
    for j, t in enumerate(ORDER):
        for sign in (-1, 1):
            g = np.array(goal, float)
            g[j] *= 1 + sign * move
            moved = values_of(solve(base, jac, g, cycle_ns)[0])
            for p in PARAMS:
                a, b = fitted[p.field], moved[p.field]
                rel = (b - a) / abs(a) if a else (0.0 if b == a else float("inf"))
                table[p.field].setdefault(t, [None, None])[(sign + 1) // 2] = rel
    status = {}
    lo, hi = _bounds()
    goal = np.asarray(goal, float)
    for i, p in enumerate(PARAMS):
        moves = [abs(v) for pair in table[p.field].values() for v in pair]
        if i < len(SIMULATED):
            dy = p.coord(p.prior + p.step) - p.coord(p.prior)
            effect = np.abs(jac[:, i] * dy / goal[[0, 1, 2, 4]]).max()
        else:
            effect = 1.0        # F1 and F4 respond to it by construction
        if effect < 1e-3:
            status[p.field] = "not pinned: no target responds to it"
        elif np.isclose(z[i], lo[i], rtol=1e-6, atol=0) or np.isclose(z[i], hi[i], rtol=1e-6,
                                                                          atol=0):
            status[p.field] = "weak: at its bound"
        elif max(moves) > 5 * move:
            status[p.field] = f"weak: a ±{move:.0%} target move shifts it by {max(moves):.0%}"
        else:
            status[p.field] = "pinned"
    return table, status


def _measure(preset, backend, seed, points_at, log, scheduler):
    """Run (or read from the cache) every point of ``points_at`` (``[(label, knobs)]``);
    ``{label: {target: value}}`` and the rows."""
    tasks, owners = [], []
    t0 = time.monotonic()
    for label, knobs in points_at:
        for p in run_points(preset, backend, seed, knobs):
            tasks.append((p, cache.point_key("training", p)))
            owners.append(label)
    # the longest runs first, S1 beside S2, so two workers build the two big machines at once
    order = ("s2_cann", "s1_cann", "f5_c1", "f5_c4", "f3_t8", "f3_t47")
    ranked = sorted(range(len(tasks)), key=lambda i: (order.index(tasks[i][0]["run"]) // 2, i))
    tasks, owners = [tasks[i] for i in ranked], [owners[i] for i in ranked]
    entries = [cache.load("training", k) for _, k in tasks]
    todo = [i for i, e in enumerate(entries) if e is None]
    log(f"  {len(tasks)} runs, {len(tasks) - len(todo)} cached "
        f"(sizing took {time.monotonic() - t0:.0f} s)")
    if todo:
        progress = sweep.Progress("training", len(todo), stream=sys.stderr)
        with sweep.open_scheduler(scheduler) as client:
            done = sweep.run_points("training", [tasks[i] for i in todo], client,
                                    progress=progress)
        for i, e in zip(todo, done):
            entries[i] = e
    failed = [(tasks[i][0]["run"], e["error"]) for i, e in enumerate(entries) if e["error"]]
    if failed:
        run, error = failed[0]
        raise RuntimeError(f"{len(failed)} training run(s) failed, first {run}: {error}")
    rows = {}
    for (p, _), label, e in zip(tasks, owners, entries):
        rows.setdefault(label, []).extend({**p, **r} for r in e["rows"])
    return {label: targets(rs, get_preset(preset).cycle_ns) for label, rs in rows.items()}, rows


#: the fit stops checking once every measured target is this close to the paper (relative)
CLOSE = 0.05
#: checks at most (the first is the Gauss-Newton step's; each later one a Broyden step)
CHECKS = 2
#: the surrogate's targets (the SyncAll terms are exact and apart)
KEYS = ("F1", "F2", "F3", "F5")


def held_values(preset, knobs, fitted):
    """``{field: value}`` that ``knobs`` hold: whole blocks, whole cycles, the injection
    knob's 1/1024 bytes a cycle (what is run, checked and written). ``poll_ns`` only when the
    preset names it; unset, it stays unset (the same as ``read_start_ns``)."""
    pr = get_preset(preset)
    held = dict(fitted)
    held["send_window_bytes"] = knobs["store_window"] * pr.block_bytes
    held["syncall_ns"] = pr.ns(knobs["syncall_cycles"])
    held["read_start_ns"] = pr.ns(knobs.get("read_extra", 0))
    if pr.poll_ns is not None:      # a preset naming its scalar reads' cost holds that
        held["poll_ns"] = pr.ns(knobs.get("poll_extra", 0))
    held["die_injection_gbytes_s"] = knobs["inject_rate"] / INJECT_DEN / pr.cycle_ns
    return held


def broyden(base, jac, y1, m1):
    """The surrogate moved to a checked point: base ``(y1, m1)`` and Broyden's rank-one update
    of ``jac`` along the step (in coordinates scaled by each parameter's design step), so the
    new surrogate reproduces both the old base and the check exactly along that line."""
    scale = np.array([abs(p.coord(p.prior + p.step) - p.coord(p.prior)) for p in SIMULATED])
    dy = (np.asarray(y1, float) - base["y"]) / scale
    dm = np.asarray(m1, float) - base["m"]
    js = jac * scale
    if float(dy @ dy) > 0:
        js = js + np.outer(dm - js @ dy, dy) / float(dy @ dy)
    return {"y": np.asarray(y1, float), "m": np.asarray(m1, float)}, js / scale


def training_preset(preset):
    """The preset the fit of ``preset`` runs on: ``<preset>-ascend`` (the declared Ascend
    structure, :data:`~epfabric.sw.presets.ASCEND`), which must exist."""
    from ...sw.presets import preset_names
    name = f"{preset}-ascend"
    if name not in preset_names():
        raise UserError(f"preset must have an Ascend structure preset ({name!r} does not "
                        f"exist); of: {', '.join(n[:-len('-ascend')] for n in preset_names() if n.endswith('-ascend'))}")
    return name


def fit(preset="cm384", backend="native", seed=0, scheduler="serial", log=print,
        checks=CHECKS):
    """Fit :data:`PARAMS` of ``<preset>-ascend`` to F1–F5 (module docstring); the report (a
    dict)."""
    pr = get_preset(preset)
    if pr.topology != "superpod" or pr.aivs_per_die < 48:
        raise UserError(f"preset must be a cm384 superpod of 48 AIVs a die, not {preset!r}")
    base_preset, preset = preset, training_preset(preset)
    pr = get_preset(preset)
    t0 = time.monotonic()
    points = design(preset)
    log(f"fit {preset}: design, {len(points)} settings x {len(RUNS)} runs on {backend}")
    measured, _ = _measure(preset, backend, seed,
                           [(label, knobs_of(preset, v)) for label, v in points], log, scheduler)
    base_vals = points[0][1]
    base = {"y": np.array([p.coord(base_vals[p.field]) for p in SIMULATED]),
            "m": np.array([measured["prior"][k] for k in KEYS])}
    jac = np.empty((len(KEYS), len(SIMULATED)))
    for i, p in enumerate(SIMULATED):
        label, vals = points[i + 1]
        dy = p.coord(vals[p.field]) - base["y"][i]
        jac[:, i] = [(measured[label][k] - measured["prior"][k]) / dy for k in KEYS]
    design_jac = jac.copy()
    goal = [TARGETS[t][0] for t in ORDER]
    history = []
    for n in range(1, checks + 1):
        z, predicted = solve(base, jac, goal, pr.cycle_ns)
        knobs = knobs_of(preset, values_of(z))
        held = held_values(preset, knobs, values_of(z))
        label = f"check {n}"
        log(f"fit {preset}: {label} at the fitted knobs {knobs}")
        check, check_rows = _measure(preset, backend, seed, [(label, knobs)], log, scheduler)
        got = check[label]
        residuals = {t: got[t] / TARGETS[t][0] - 1 for t in ORDER if t in got}
        history.append({"check": n, "knobs": knobs, "fitted": held,
                        "predicted": dict(zip(ORDER, map(float, predicted))),
                        "measured": got, "residuals": residuals})
        log(f"fit {preset}: {label}: " + ", ".join(f"{t} {100 * r:+.1f} %"
                                                   for t, r in residuals.items()))
        if all(abs(r) <= CLOSE for r in residuals.values()) or n == checks:
            break
        # the next step from the check: its simulated targets with the exact SyncAll part out
        y1 = np.array([p.coord(held[p.field]) for p in SIMULATED])
        m1 = np.array([got["F1"] - S1_SYNCALLS * held["syncall_ns"] / 1000]
                      + [got[k] for k in KEYS[1:]])
        base, jac = broyden(base, jac, y1, m1)
    table, status = identifiability(base, jac, goal, z, pr.cycle_ns)
    release = [r.get("release_share") for r in check_rows[label] if r["run"] == "s1_cann"]
    last = history[-1]
    return {
        "preset": base_preset, "trained_on": preset,
        "structure": {k: getattr(pr, k) for k in ASCEND}, "backend": backend, "seed": seed,
        "targets": {t: {"paper": TARGETS[t][0], "unit": TARGETS[t][1], "what": TARGETS[t][2]}
                    for t in ORDER},
        "priors": {p.field: p.prior for p in PARAMS},
        "design": {label: measured[label] for label, _ in points},
        "jacobian": {k: {p.field: float(design_jac[i, j]) for j, p in enumerate(SIMULATED)}
                     for i, k in enumerate(KEYS)},
        "checks": history,
        "fitted": last["fitted"], "knobs": last["knobs"],
        "predicted": last["predicted"], "measured": last["measured"],
        "residuals": last["residuals"],
        "mark_release_share": release[0] if release else None,
        "identifiability": table, "status": status,
        "basis": {p.field: p.basis for p in PARAMS},
        "wall_s": round(time.monotonic() - t0, 1),
    }


def format_report(report):
    """The fit in plain text: parameters, targets (paper, predicted, measured), identifiability."""
    from tabulate import tabulate
    lines = [f"calibrate --fit {report['preset']} ({report['backend']}, seed {report['seed']}, "
             f"{report['wall_s']:.0f} s)"]
    if report.get("trained_on"):
        lines.append(f"trained on {report['trained_on']}, its structure declared, not fitted: "
                     + ", ".join(f"{k}={v}" for k, v in report["structure"].items()))
    lines.append("")
    rows = [[p.field, _num(report["priors"][p.field]), _num(report["fitted"][p.field]), p.unit,
             report["knobs"].get(p.knob), report["status"][p.field]] for p in PARAMS]
    lines.append(tabulate(rows, headers=["parameter", "prior", "fitted", "unit", "knob",
                                         "identifiable"]))
    lines += ["", format_targets(report["measured"], report["predicted"]), ""]
    for c in report.get("checks", []):
        lines.append(f"check {c['check']}: knobs {c['knobs']}; measured / paper - 1: "
                     + ", ".join(f"{t} {100 * r:+.1f} %" for t, r in c["residuals"].items()))
    lines.append("")
    head = ["parameter"] + [f"{t} -/+10%" for t in ORDER]
    rows = [[p.field] + [f"{_pct(a)} / {_pct(b)}" for a, b in
                         (report["identifiability"][p.field][t] for t in ORDER)]
            for p in PARAMS]
    lines.append("identifiability: change of each fitted parameter when one target moves -10 % / +10 %")
    lines.append(tabulate(rows, headers=head))
    if report.get("mark_release_share") is not None:
        lines.append(f"\nF4 by the MARKs at the fitted knobs: {report['mark_release_share']:.3f} "
                     f"(includes the trace stream's wait; the fit uses the barrier's own cost)")
    return "\n".join(lines)


def _num(v):
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def _pct(v):
    return "inf" if v is None or not np.isfinite(v) else f"{100 * v:+.0f}%"


def write_fit(report, path=None):
    """Write the fitted values and their provenance to ``sw/fits/<preset>.json`` (what
    :mod:`epfabric.sw.presets` reads into the ``<preset>-fit`` preset); the path."""
    from .results.files import run_metadata
    path = Path(path or FIT_FILE.format(preset=report["preset"]))
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = {"preset": report["preset"],
           "fields": {**report.get("structure", {}), **report["fitted"], "syncall": "hard"},
           "provenance": {k: report.get(k) for k in ("trained_on", "structure", "targets", "predicted",
                                                 "measured", "residuals", "checks",
                                                 "identifiability", "status", "basis",
                                                 "priors", "design", "jacobian", "knobs",
                                                 "backend", "seed", "wall_s")},
           "metadata": run_metadata(command="epfabric calibrate --fit --write")}
    path.write_text(json.dumps(doc, indent=1, sort_keys=False, default=float) + "\n")
    return path
