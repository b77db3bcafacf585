"""The calibration's training set: the five paper numbers a cm384 preset is fitted to, at given knobs.

``epfabric calibrate --fit`` (:mod:`epfabric.sim.lab.fit`) fits the timing
knobs of ``cm384-ascend`` (store window, die injection, read start, SyncAll cost;
hw/die.py ``KNOBS``) to these targets **only**; every other paper number is
held out (``reproduce validation``). ``epfabric reproduce training`` runs the
same six dispatch runs at the preset's own knobs and says how far each target
is from the paper.

Targets (:data:`TARGETS`), and the runs that measure them (:data:`RUNS`):

* **F1** — UBEP Table 4: CANN EP's dispatch at 16 ranks, 103 µs. Run ``s1_cann``:
  cm384 ``superpod:2,8,1`` × 48 AIVs, DeepSeek's shape (BS 128, top-8, 256 experts,
  7,168 B tokens: 14 blocks of 512 B for CANN, 15 for UBEP's runs, cap 16), seed 0.
* **F2** — Table 4: CANN at 32 ranks minus at 16, +17 µs. Run ``s2_cann``:
  ``superpod:2,8,2``, the same shape.
* **F3** — Fig. 3b: T₈ / T₄₈ = 1.866 (eff 31.1 % at 48 of 48 senders against 8): the
  longest Token-Sending time of UBEP's T-AIVs with 8 senders a die (C = 40) over with 47
  (C = 1, UBEP's most), at S1: runs ``f3_t8`` and ``f3_t47``. At the die's own 48 AIVs,
  not at the ``fig3b`` experiment's reduced 8 (where one sender stands for eight): the
  store window is per AIV, so eight windows are not one.
* **F4** — §2.3 Insight 2: SyncAll ≈ 15 % of CANN's time, measured from the last arrival
  to the release. With the die's hardware barrier (``syncall='hard'``) that is
  ``n_s (syncall_cycles + 1)`` cycles of every die's run, exact by construction, with
  ``n_s`` = :data:`S1_SYNCALLS` the SyncAlls of the run (three at S1: 16 experts a die
  add UpdateTokenNumsOut's, sw/ubep/cann.py); the MARK-based ``syncall_release_share`` of
  the kernel is reported
  beside it (on S1 it also holds the wait of 768 cores' MARKs for one trace stream).
* **F5** — Fig. 14 (b): UBEP at 128 ranks, BS 8 — group size C = 1 costs 46.0 µs over the
  best, C = 4 12.3 µs, so C = 1 is 33.7 µs slower than C = 4. "128 ranks" is emulated as
  32 dies (``superpod:2,8,2`` × 48 AIVs) with 128 experts (four a die), BS 8, top-8,
  7,168 B tokens (15 blocks): runs ``f5_c1`` and ``f5_c4`` (UBEP with ``cumsum_aivs`` 1 and 4).

Each UBEP run also records Eq. 8's ``cumsum_ratio`` (β/α from its phase MARKs,
:func:`~epfabric.sw.ubep.ubep.count_and_send_slopes`); ``f3_t47``'s -- UBEP at S1 with C = 1 --
is the value a preset's ``cumsum_ratio`` is to be measured from (App. C.3 chose C from its own
measurements; Fig. 14 is held out).

CANN's runs use the hardware SyncAll (``syncall='hard'``; its cost is the knob
``syncall_cycles``); every run is checked bit-exact by the dispatch's checker (a wrong
run raises). The machines of one shape share one size (:func:`sizes`), so one build
serves all its runs at every knob setting.
"""

from tabulate import tabulate

from ....hw.die import KNOBS
from ....hw.validate import UserError
from ....sw.config import parse_topology, topology_ranks
from ....sw.ubep.cann import syncalls_per_run
from ...backends import SIMULATORS
from . import Experiment, Param, register
from .ubep_runs import cap_for, measure_dispatch

__all__ = ["Training", "EXPERIMENT", "RUNS", "TARGETS", "TOLERANCE", "targets", "sizes",
           "syncalls_of", "S1_SYNCALLS"]

#: a token of S1 and F5: UBEP Table 4's 7,168 B, 14 blocks for CANN and 15 for UBEP (its 32 B
#: Token-Flag-Fusion header a block, sw/kernels/dispatch.py token_blocks)
TOKEN_BYTES = 7168
S1 = {"topology": "superpod:2,8,1", "aivs": 48, "batch": 128, "topk": 8, "experts": 256,
      "hidden_bytes": TOKEN_BYTES, "cap": 16}
#: run name -> (system, shape and dispatch parameters); ``seed`` is the experiment's
RUNS = {
    "s1_cann": ("cann", {**S1, "syncall": "hard"}),
    "s2_cann": ("cann", {**S1, "topology": "superpod:2,8,2", "syncall": "hard"}),
    "f3_t8": ("ubep", {**S1, "cumsum_aivs": 40}),
    "f3_t47": ("ubep", {**S1, "cumsum_aivs": 1}),
    "f5_c1": ("ubep", {"topology": "superpod:2,8,2", "aivs": 48, "batch": 8, "topk": 8,
                       "experts": 128, "hidden_bytes": TOKEN_BYTES, "cap": cap_for(8, 8, 128),
                       "cumsum_aivs": 1}),
    "f5_c4": ("ubep", {"topology": "superpod:2,8,2", "aivs": 48, "batch": 8, "topk": 8,
                       "experts": 128, "hidden_bytes": TOKEN_BYTES, "cap": cap_for(8, 8, 128),
                       "cumsum_aivs": 4}),
}


def syncalls_of(run):
    """SyncAlls a CANN run of :data:`RUNS` executes
    (:func:`~epfabric.sw.ubep.cann.syncalls_per_run`: a third when a rank hosts more than one
    expert)."""
    params = RUNS[run][1]
    return syncalls_per_run(params["experts"] // topology_ranks(parse_topology(params["topology"])))


#: the SyncAlls of ``s1_cann`` (F1, F4): F2's runs have as many, so they cancel in it
S1_SYNCALLS = syncalls_of("s1_cann")
#: target -> (paper value, unit, what it is, the runs it needs)
TARGETS = {
    "F1": (103.0, "us", "CANN dispatch at 16 ranks (Table 4)", ("s1_cann",)),
    "F2": (17.0, "us", "CANN at 32 minus at 16 ranks (Table 4)", ("s1_cann", "s2_cann")),
    "F3": (0.311 * 6, "x", "T8/T48 of Token-Sending (Fig. 3b, 31.1 % at 48)", ("f3_t8", "f3_t47")),
    "F4": (0.15, "share", "SyncAll last arrival to release / CANN (§2.3)", ("s1_cann",)),
    "F5": (46.0 - 12.3, "us", "UBEP C=1 minus C=4, 128 ranks BS 8 (Fig. 14b)", ("f5_c1", "f5_c4")),
}
#: a target holds when the model is within this fraction of the paper's value (the scale of
#: the fit's identifiability moves, stated before any fit)
TOLERANCE = 0.10
#: the knobs a point may set (None: the preset's)
KNOB_NAMES = tuple(KNOBS)


def sizes(preset, topology, aivs, runs, seed=0):
    """``{hbm_blocks, ubuf_rows, imem_depth, trace_depth, rank_bits}`` of one machine that runs
    every dispatch of ``runs`` (``[(system, params)]``) on that shape: the largest of each
    field over the kernel's own configurations (``rank_bits`` of the one with the most HBM),
    so one build serves them all. Sizes do not change timing (tests/sim/test_ubep_runs.py)."""
    from ....sw.kernels import KERNELS
    kernel = KERNELS["dispatch"]
    topo = parse_topology(topology)
    configs = []
    for system, params in runs:
        p = {k: v for k, v in params.items() if k not in ("topology", "aivs")}
        configs += kernel.configs(preset, topo, aivs, {**p, "system": system, "seed": seed})
    big = max(configs, key=lambda c: c.hbm_blocks)
    return {"hbm_blocks": big.hbm_blocks, "rank_bits": big.rank_bits,
            **{k: max(getattr(c, k) for c in configs)
               for k in ("ubuf_rows", "imem_depth", "trace_depth")}}


_SIZES = {}


def run_points(preset, backend, seed, knobs, names=tuple(RUNS)):
    """The points of ``names`` at ``knobs`` (``{knob: value or None}``), sized per shape."""
    by_shape = {}
    for name in names:
        system, params = RUNS[name]
        by_shape.setdefault((params["topology"], params["aivs"]), []).append((system, params))
    size = {}
    for shape, runs in by_shape.items():       # sizes do not depend on the knobs: once a fit
        key = (preset, seed, shape, repr(runs))
        if key not in _SIZES:
            _SIZES[key] = sizes(preset, shape[0], shape[1], runs, seed)
        size[shape] = _SIZES[key]
    out = []
    for name in names:
        system, params = RUNS[name]
        out.append({"run": name, "system": system, "preset": preset, "backend": backend,
                    "seed": seed, **params, **size[(params["topology"], params["aivs"])],
                    **{k: knobs.get(k) for k in KNOB_NAMES}})
    return out


def targets(rows, cycle_ns=1.0):
    """``{target: model value}`` from the rows of one knob setting (a target whose runs are
    missing or failed is left out). F4 is ``n_s (syncall_cycles + 1) / T16``
    (:data:`S1_SYNCALLS`)."""
    by = {r["run"]: r for r in rows if r.get("cycles") is not None and not r.get("error")}
    out = {}
    if "s1_cann" in by:
        out["F1"] = by["s1_cann"]["cycles"] * cycle_ns / 1000
        s = by["s1_cann"].get("syncall_cycles") or 0
        out["F4"] = S1_SYNCALLS * (s + 1) / by["s1_cann"]["cycles"]
    if "s1_cann" in by and "s2_cann" in by:
        out["F2"] = (by["s2_cann"]["cycles"] - by["s1_cann"]["cycles"]) * cycle_ns / 1000
    if "f3_t8" in by and "f3_t47" in by:
        out["F3"] = by["f3_t8"]["a2a"] / by["f3_t47"]["a2a"]
    if "f5_c1" in by and "f5_c4" in by:
        out["F5"] = (by["f5_c1"]["cycles"] - by["f5_c4"]["cycles"]) * cycle_ns / 1000
    return out


class Training(Experiment):
    """One point per run of :data:`RUNS` at the given knobs; the verdict over the targets."""

    name = "training"
    title = "The calibration's training targets F1-F5 at a preset's timing knobs"
    paper = "UBEP Table 4, Fig. 3b, §2.3, Fig. 14 (the calibration's training set)"
    headline = ("CANN 103 us at 16 ranks, +17 us at 32; T8/T48 1.87; SyncAll 15 %; "
                "C=1 33.7 us over C=4 at 128 ranks, BS 8")
    params = (Param("preset", "cm384", "preset (its knobs unless given below)", str),
              Param("backend", "native", "simulator", str, SIMULATORS),
              Param("seed", 0, "routing seed", int, minimum=0),
              *(Param(k, None, f"the dies' knob {k} (default: the preset's)", int, minimum=0)
                for k in KNOB_NAMES))

    def resolve(self, **given):
        from ....sw.presets import get_preset
        p = super().resolve(**given)
        get_preset(p["preset"])
        if p["preset"] in ("tiny", "incmoe-testbed"):
            raise UserError(f"preset must be a cm384 superpod preset, not {p['preset']!r}")
        return p

    def points(self, params, quick=False):
        from ....sw.presets import get_preset
        knobs = dict(get_preset(params["preset"]).knobs())
        knobs.update({k: params[k] for k in KNOB_NAMES if params[k] is not None})
        names = ("s1_cann",) if quick else tuple(RUNS)
        return run_points(params["preset"], params["backend"], params["seed"], knobs, names)

    def measure(self, point):
        knobs = {k: point[k] for k in KNOB_NAMES if point.get(k) is not None}
        m = measure_dispatch(point, point["system"], knobs)
        return {"cycles": m["cycles"], "us": m["us"], "a2a": m["a2a"],
                "release_share": m["release_share"], "cumsum_ratio": m["cumsum_ratio"],
                "correct": True}

    def verdict(self, rows):
        """Holds when every target the rows measure is within :data:`TOLERANCE` of the paper."""
        got = targets(rows)
        if not got:
            return False, f"no target measured (every run failed); tolerance ±{TOLERANCE:.0%}"
        off = [t for t, v in got.items() if abs(v / TARGETS[t][0] - 1) > TOLERANCE]
        words = ", ".join(f"{t} {_fmt(v)} vs {_fmt(TARGETS[t][0])}" for t, v in sorted(got.items()))
        if off:
            return False, (f"{', '.join(off)} outside the tolerance, ±{TOLERANCE:.0%} of the "
                           f"paper ({words}); "
                           f"`epfabric calibrate --fit` fits the knobs to them")
        return True, (f"every measured target within the tolerance, ±{TOLERANCE:.0%} of the "
                      f"paper ({words})")

    def format(self, rows):
        return format_targets(targets(rows))

    def plot(self, rows, path):
        from ..results.plot import save, subplots
        got = targets(rows)
        fig, (ax,) = subplots()
        names = sorted(got)
        ax.bar(names, [got[t] / TARGETS[t][0] for t in names], color="tab:blue", label="model")
        ax.axhline(1.0, color="k", lw=1, label="paper")
        ax.axhspan(1 - TOLERANCE, 1 + TOLERANCE, color="0.85", label=f"±{TOLERANCE:.0%}")
        ax.set_ylabel("model / paper")
        ax.legend()
        save(fig, path, self.title)


def _fmt(v):
    return f"{v:.3g}" if abs(v) < 10 else f"{v:.1f}"


def format_targets(got, predicted=None):
    """A table of targets: paper, model (and a fit's prediction), model/paper."""
    table = []
    for t, (paper, unit, what, _) in TARGETS.items():
        v = got.get(t)
        row = [t, what, unit, _fmt(paper), "-" if v is None else _fmt(v)]
        if predicted is not None:
            row.append("-" if t not in predicted else _fmt(predicted[t]))
        row.append("-" if v is None else f"{v / paper:.2f}")
        table.append(row)
    head = ["target", "what", "unit", "paper", "model"]
    head += ["predicted"] if predicted is not None else []
    return tabulate(table, headers=head + ["model/paper"])


EXPERIMENT = register(Training())
