"""The held-out items of the cm384 validation: paper numbers, tolerances, magnitude and trend rules.

One table, :data:`ITEMS`, holds what docs/fidelity/preregistration.md states per item in
its section 6 ("The held-out items") and how section 7 ("Verdicts, statistics and the
goal") turns it into verdicts; :mod:`.validation` (its table, its summary, its scatter)
and the tests read it, nothing else states a paper number or a tolerance of the
validation. Each :class:`Item` cites its row of the preregistration.

Per item and seed, from the rows its experiment wrote for that seed:

* each :class:`Number` — a printed paper number, in its own unit (percentages as
  percentages, µs, fig14's best C as a count) — gets the model's value at the same
  point or over the same grid (a printed range "a–b" over a grid is two numbers: the
  model's minimum against a and its maximum against b), or ``None`` when the rows do
  not hold the whole grid the number is defined over (the verdict then says "not run",
  it never guesses from a part);
* the **magnitude** verdict: every number within its tolerance and every further
  magnitude :class:`Check` (a ratio, an axis bound: checks only, in no statistic);
* the **trend** verdict: the item's trend :class:`Check`.

Each verdict is ``True``, ``False`` or ``None`` ("not run"): ``False`` as soon as one
part that ran fails, ``None`` when none failed but one could not be computed.
"""

from dataclasses import dataclass, field
from statistics import fmean
from typing import Callable

from .fig10 import DAF, SIZES

__all__ = ["Number", "Check", "Item", "ITEMS", "NUMBERS", "judge_seed", "both",
           "spearman", "paper_senders", "table4_ratio", "best_c", "FIG10_SIZES", "FIG10_PANELS", "FIG14_GROUPS"]

#: fig10's granularities as the experiment sweeps them (B): the grid the cut's range is over
FIG10_SIZES = SIZES
#: fig10: ranks -> the latency axis of its panel (µs), UBEP Fig. 10 (preregistration §6, fig10)
FIG10_PANELS = {16: (2.0, 4.0), 32: (4.0, 8.0), 64: (5.0, 15.0)}
#: fig14: the group sizes C the paper sweeps (Fig. 14(a): C 1–16)
FIG14_GROUPS = tuple(range(1, 17))
#: slack of a tolerance comparison: 0.464 · 100 + 10 is 56.39999… in binary
EPS = 1e-9


@dataclass(frozen=True)
class Number:
    """One printed paper number and how the model's counterpart is read from one seed's rows.

    ``tolerance`` is in the number's ``unit`` (points of a percentage, µs, a count) or,
    with ``relative``, a fraction of the paper's value.
    """

    key: str
    paper: float
    unit: str
    tolerance: float
    model: Callable
    relative: bool = False

    def band(self):
        """The tolerance in the number's own unit (the scatter's error bar)."""
        return self.tolerance * abs(self.paper) if self.relative else self.tolerance

    def within(self, value):
        """Whether ``value`` is within the tolerance of the paper's (``None``: not run)."""
        if value is None:
            return None
        return abs(value - self.paper) <= self.band() + EPS * max(1.0, abs(self.paper))

    def tolerance_text(self):
        if self.relative:
            return f"±{100 * self.tolerance:.0f} %"
        unit = {"%": " points", "us": " us", "C": ""}[self.unit]
        return f"±{self.tolerance:g}{unit}"


@dataclass(frozen=True)
class Check:
    """A verdict on one seed's rows that enters no statistic: ``judge(rows)`` ->
    ``(True | False | None, words)``."""

    text: str
    judge: Callable


@dataclass(frozen=True)
class Item:
    """One held-out item: its preregistration row, its numbers, checks and trend.

    ``shape`` is the Round 1 model shape (``ranks``, AIVs a die) the rows are compared
    with; ``given`` the experiment parameters the validation sets to get the grid the
    rules need (where the experiment can run it).
    """

    name: str
    source: str
    claim: str
    tolerance: str
    numbers: tuple
    trend: Check
    checks: tuple = ()
    shape: tuple = ((64,), 48)
    given: dict = field(default_factory=dict)


# --- reading rows ---------------------------------------------------------------------------

def _rows(rows, **match):
    """The rows whose fields equal ``match`` (compared as text: table4's ranks are strings)."""
    return [r for r in rows if all(str(r.get(k)) == str(v) for k, v in match.items())]


def _get(rows, key, **match):
    found = _rows(rows, **match)
    return None if not found or found[0].get(key) is None else found[0][key]


def _pct(value):
    return None if value is None else 100 * value


def _mean(values):
    return None if not values or any(v is None for v in values) else fmean(values)


def both(verdicts):
    """``False`` if any is False, else ``None`` if any is None, else ``True``."""
    verdicts = list(verdicts)
    if any(v is False for v in verdicts):
        return False
    return None if any(v is None for v in verdicts) else True


def spearman(xs, ys):
    """Spearman's ρ of two equal-length sequences (ties at their average rank); ``None`` when
    either is constant or shorter than 2. (numpy has no rank function; scipy is not a
    dependency for this one line of it.)"""
    import numpy as np

    def ranks(values):
        values = np.asarray(values, dtype=float)
        order = values.argsort(kind="stable")
        r = np.empty(len(values))
        r[order] = np.arange(1, len(values) + 1)
        for v in np.unique(values):
            r[values == v] = r[values == v].mean()
        return r
    if len(xs) < 2 or len(set(xs)) < 2 or len(set(ys)) < 2:
        return None
    return float(np.corrcoef(ranks(xs), ranks(ys))[0, 1])


def _words(ok, text):
    return ok, f"{text}: {'yes' if ok else 'not run' if ok is None else 'NO'}"


# --- table4 ---------------------------------------------------------------------------------

TABLE4_RATIO = {16: 0.709, 32: 0.717, 64: 0.727}
TABLE4_RATIO_TOL = 0.04


def table4_ratio(rows):
    """``(verdict, words)``: UBEP/CANN within ±0.04 of the paper's at 16, 32 and 64 ranks."""
    got = {n: _get(rows, "ratio", ranks=n) for n in TABLE4_RATIO}
    got = {n: x for n, x in got.items() if x is not None}
    oks = [abs(got[n] - p) <= TABLE4_RATIO_TOL + EPS if n in got else None
           for n, p in TABLE4_RATIO.items()]
    words = ", ".join(f"R{n} {got[n]:.3f}" if n in got else f"R{n} not run" for n in TABLE4_RATIO)
    return _words(both(oks), f"ratio {words} (paper 0.709 / 0.717 / 0.727 ±0.04)")


def _bit_exact(rows):
    bad = [r for r in rows if r.get("correct") is False]
    return _words(not bad if rows else None, "every run bit-exact against numpy")


def _table4_trend(rows):
    ubep = [_get(rows, "ubep_us", ranks=n) for n in TABLE4_RATIO]
    cann = [_get(rows, "cann_us", ranks=n) for n in TABLE4_RATIO]
    if None in ubep or None in cann:
        return None, "UBEP rises with ranks and CANN - UBEP rises: not run (16/32/64 needed)"
    diff = [c - u for c, u in zip(cann, ubep)]
    ok = all(a < b for a, b in zip(ubep, ubep[1:])) and all(a < b for a, b in zip(diff, diff[1:]))
    return ok, (f"UBEP {' / '.join(f'{u:.1f}' for u in ubep)} us, CANN - UBEP "
                f"{' / '.join(f'{d:.1f}' for d in diff)} us (paper 30 / 34 / 38): "
                f"{'both rise' if ok else 'NOT both rising'}")


# --- fig3b ----------------------------------------------------------------------------------

def paper_senders(row):
    """The paper's sender count (of 48 AIVs) a fig3b row stands for: its own at 48 AIVs a
    die; at the experiment's reduced 8 AIVs, n senders stand for 8n (:mod:`.ubep_senders`)."""
    return row["senders"] if row.get("aivs", 0) >= 48 else 8 * row["senders"]


def _eff_at(n):
    def model(rows):
        found = [r for r in rows if paper_senders(r) == n and r.get("eff") is not None]
        return _pct(found[0]["eff"]) if found else None
    return model


def _fig3b_trend(rows):
    rows = sorted((r for r in rows if r.get("eff") is not None), key=paper_senders)
    at24 = [r for r in rows if paper_senders(r) == 24]
    if not at24 or not rows or paper_senders(rows[-1]) < 47:
        return None, "eff falls with n and T24/T47 <= 1.2: not run (24 and 47/48 senders needed)"
    falls = all(a["eff"] > b["eff"] for a, b in zip(rows, rows[1:]))
    ratio = at24[0]["t_send"] / rows[-1]["t_send"]
    ok = falls and ratio <= 1.2
    return ok, (f"eff {'falls' if falls else 'does NOT fall'} with n; T24/T{paper_senders(rows[-1])} "
                f"{ratio:.2f} (<= 1.2: {'yes' if ratio <= 1.2 else 'NO'})")


# --- fig7a, fig7c, fig13 (improvement over CANN EP) -----------------------------------------

def _fig7a_mean(rows):
    return _pct(_mean([_get(rows, "improvement", batch=b) for b in (8, 16, 32, 64)]))


def _fig7a_128(rows):
    return _pct(_get(rows, "improvement", batch=128))


def _fig7a_trend(rows):
    mean, last = _fig7a_mean(rows), _fig7a_128(rows)
    if mean is None or last is None:
        return None, "BS 128 below the mean of BS 8-64: not run (BS 8/16/32/64/128 needed)"
    return last < mean, (f"BS 128 {last:.1f} % vs BS 8-64 mean {mean:.1f} %: "
                         f"{'below' if last < mean else 'NOT below'}")


def _fig7c_points(rows):
    """fig7c's points when they cover 2 and 4 experts a rank (the paper's E 128 and 256 at
    64 ranks), else ``None``."""
    ok = [r for r in rows if r.get("improvement") is not None]
    per = {r["experts"] // r["ranks"] for r in ok}
    return ok if {2, 4} <= per else None


def _over_fig7c(key, reduce):
    def model(rows):
        points = _fig7c_points(rows)
        return None if points is None else _pct(reduce(r[key] for r in points))
    return model


def _fig7c_trend(rows):
    points = _fig7c_points(rows)
    if points is None:
        return None, "CANN's share above UBEP's, UBEP's A2A >= CANN's: not run"
    share = sum(r["cann_sync_share"] > r["ubep_sync_share"] for r in points)
    longer = sum(r["ubep_a2a"] >= r["cann_a2a"] for r in points)
    n = len(points)
    return share == n and longer == n, (f"CANN's share above UBEP's at {share} of {n} points, "
                                        f"UBEP's A2A >= CANN's at {longer} of {n}")


def _fig13_at(k):
    return lambda rows: _pct(_get(rows, "improvement", topk=k))


def _fig13_trend(rows):
    imp = [_get(rows, "improvement", topk=k) for k in (2, 4, 8)]
    if None in imp:
        return None, "rises with k: not run (k 2/4/8 needed)"
    ok = imp[0] < imp[1] < imp[2]
    return ok, (f"{' / '.join(f'{100 * x:.1f}' for x in imp)} % at k 2/4/8: "
                f"{'rises' if ok else 'does NOT rise'}")


# --- fig8 -----------------------------------------------------------------------------------

FIG8_BATCHES = (32, 64, 128)
#: fig8: BS -> the x-axis maximum of its panel (µs), CANN's dispatch must stay under it
FIG8_AXIS_US = {32: 70.0, 64: 90.0, 128: 140.0}


def _fig8_cuts(rows):
    cuts = {b: _get(rows, "cut", batch=b) for b in FIG8_BATCHES}
    return None if None in cuts.values() else cuts


def _fig8_cut(reduce):
    def model(rows):
        cuts = _fig8_cuts(rows)
        return None if cuts is None else _pct(reduce(cuts.values()))
    return model


def _fig8_axes(rows):
    from ....sw.presets import get_preset
    words, oks = [], []
    for b, top in FIG8_AXIS_US.items():
        cann = _rows(rows, batch=b, system="cann")
        if not cann or "preset" not in cann[0]:
            oks.append(None)
            words.append(f"BS {b} not run")
            continue
        us = cann[0]["run_cycles"] * get_preset(cann[0]["preset"]).cycle_ns / 1000
        oks.append(us < top)
        words.append(f"BS {b} {us:.1f} us (< {top:g})")
    return _words(both(oks), "CANN under each axis maximum: " + ", ".join(words))


def _fig8_trend(rows):
    oks, words = [], []
    for b in FIG8_BATCHES:
        ub = _rows(rows, batch=b, system="ubep")
        t = [r for r in ub if r.get("role") == "T"]
        c = [r for r in ub if r.get("role") == "C"]
        if not t or not c:
            oks.append(None)
            words.append(f"BS {b} not run")
            continue
        send_end = max(r["init"] + r["sending"] for r in t)
        cumsum_end = max(r["init"] + r["flag_verify"] + r["cumsum"] for r in c)
        oks.append(cumsum_end < send_end)
        words.append(f"BS {b} {cumsum_end} < {send_end}: {'yes' if cumsum_end < send_end else 'NO'}")
    return both(oks), "UBEP's CalCumSum ends before its last Token-Sending: " + ", ".join(words)


# --- fig9 -----------------------------------------------------------------------------------

def _fig9_max(variant):
    return lambda rows: _get(rows, "max_us", variant=variant)


def _fig9_trend(rows):
    m = {v: _get(rows, "max_us", variant=v) for v in ("cann-slot", "ubep-nomap", "ubep")}
    spread = _get(rows, "max_over_mean", variant="ubep")
    if None in m.values() or spread is None:
        return None, "CANN > w/o mapping > UBEP, UBEP max/mean <= 1.10: not run"
    order = m["cann-slot"] > m["ubep-nomap"] > m["ubep"]
    return order and spread <= 1.10, (
        f"CANN > w/o mapping > UBEP: {'yes' if order else 'NO'}; UBEP max/mean {spread:.2f} "
        f"(<= 1.10: {'yes' if spread <= 1.10 else 'NO'})")


# --- fig10 ----------------------------------------------------------------------------------

def _fig10_grid(rows):
    """``{(ranks, g): row}`` when it covers 16/32/64 ranks × every g, else ``None``."""
    grid = {(r["ranks"], r["bytes"]): r for r in rows if r.get("sw_ns") is not None}
    need = {(n, g) for n in FIG10_PANELS for g in FIG10_SIZES}
    return grid if need <= set(grid) else None


def _cuts(row):
    return [1 - row[f"{p}_ns"] / row["sw_ns"] for p in DAF]


def _savings_us(row):
    return [(row["sw_ns"] - row[f"{p}_ns"]) / 1000 for p in DAF]


def _fig10_cut(reduce):
    def model(rows):
        grid = _fig10_grid(rows)
        if grid is None:
            return None
        return _pct(reduce(c for (n, _g), r in grid.items() if n in FIG10_PANELS
                           for c in _cuts(r)))
    return model


def _fig10_small(reduce):
    def model(rows):
        found = [r for r in rows if r.get("ranks") == 64 and r.get("bytes") == 16
                 and r.get("sw_ns") is not None]
        return reduce(_savings_us(found[0])) if found else None
    return model


def _fig10_10k(rows):
    found = [r for n in FIG10_PANELS for r in rows
             if r.get("ranks") == n and r.get("bytes") == 10240 and r.get("sw_ns") is not None]
    if {r["ranks"] for r in found} != set(FIG10_PANELS):
        return None
    return fmean(s for r in found for s in _savings_us(r))


def _fig10_axes(rows):
    grid = _fig10_grid(rows)
    if grid is None:
        return None, "every latency inside its panel's axis: not run (16/32/64 ranks × g needed)"
    out = [(n, g) for (n, g), r in grid.items() if n in FIG10_PANELS
           for p in ("sw", *DAF)
           if not FIG10_PANELS[n][0] <= r[f"{p}_ns"] / 1000 <= FIG10_PANELS[n][1]]
    return not out, ("every latency inside its panel's axis (2-4 / 4-8 / 5-15 us): "
                     + ("yes" if not out else f"NO at {len(out)} latencies"))


def _fig10_trend(rows):
    oks, words = [], []
    for n in FIG10_PANELS:
        small = _rows(rows, ranks=n, bytes=16)
        big = _rows(rows, ranks=n, bytes=10240)
        if not small or not big:
            oks.append(None)
            words.append(f"R{n} not run")
            continue
        s, b = max(_savings_us(small[0])), max(_savings_us(big[0]))
        oks.append(b < s)
        words.append(f"R{n} {s:.2f} -> {b:.2f} us")
    return both(oks), "the best variant's saving shrinks from 16 B to 10,240 B: " + ", ".join(words)


# --- fig14 ----------------------------------------------------------------------------------

FIG14_BATCHES = (8, 16, 32, 64, 128)


def best_c(rows, batch, ranks=64):
    """The C of fewest cycles at (``ranks``, ``batch``) when every C of 1–16 ran (ties: the
    smaller C), else ``None``."""
    cell = {r["cumsum_aivs"]: r["cycles"] for r in _rows(rows, ranks=ranks, batch=batch)}
    if not set(FIG14_GROUPS) <= set(cell):
        return None
    return min(FIG14_GROUPS, key=lambda c: (cell[c], c))


def _fig14_trend(rows):
    best = [best_c(rows, b) for b in FIG14_BATCHES]
    if None in best:
        return None, "Spearman rho(BS, best C) <= -0.7: not run (C 1-16 at every BS needed)"
    rho = spearman(FIG14_BATCHES, best)
    ok = rho is not None and rho <= -0.7
    return ok, (f"best C {' / '.join(map(str, best))} at BS 8-128: Spearman rho "
                + ("undefined (one C everywhere)" if rho is None else f"{rho:.2f}")
                + f" (<= -0.7: {'yes' if ok else 'NO'})")


# --- the table ------------------------------------------------------------------------------

PREREG = "docs/fidelity/preregistration.md §6"

ITEMS = {item.name: item for item in (
    Item("table4", f"{PREREG}, row table4 (UBEP Table 4)",
         "UBEP 73 / 86 / 101 us at 16 / 32 / 64 ranks, CANN 139 us at 64; "
         "UBEP/CANN 0.709 / 0.717 / 0.727", "±20 % (us), ±0.04 (ratio)",
         numbers=tuple(Number(f"UBEP R{n}", p, "us", 0.20,
                              lambda rows, n=n: _get(rows, "ubep_us", ranks=n), relative=True)
                       for n, p in ((16, 73.0), (32, 86.0), (64, 101.0)))
         + (Number("CANN R64", 139.0, "us", 0.20,
                   lambda rows: _get(rows, "cann_us", ranks=64), relative=True),),
         checks=(Check("UBEP/CANN within ±0.04 of the paper's at 16/32/64", table4_ratio),
                 Check("every run bit-exact", _bit_exact)),
         trend=Check("UBEP rises with ranks and CANN - UBEP rises", _table4_trend),
         shape=((16, 32, 64), 48)),
    Item("fig3b", f"{PREREG}, row fig3b (UBEP Fig. 3b)",
         "efficiency 76.7 / 57.6 / 45.6 % at 16 / 24 / 32 of 48 senders", "±8 points",
         numbers=tuple(Number(f"eff n={n}", p, "%", 8.0, _eff_at(n))
                       for n, p in ((16, 76.7), (24, 57.6), (32, 45.6))),
         trend=Check("eff falls strictly with n, T24/T47 <= 1.2", _fig3b_trend),
         shape=((16,), 48)),
    Item("fig7a", f"{PREREG}, row fig7a (UBEP §5.2)",
         "improvement 46.4 % (mean over BS 8-64), 35.9 % at BS 128", "±10 points",
         numbers=(Number("mean BS 8-64", 46.4, "%", 10.0, _fig7a_mean),
                  Number("BS 128", 35.9, "%", 10.0, _fig7a_128)),
         trend=Check("BS 128 below the mean of BS 8-64", _fig7a_trend)),
    Item("fig7c", f"{PREREG}, row fig7c (UBEP §5.2)",
         "improvement 38.6-41.9 %; sync ≈70 % of CANN's time, ≈30 % of UBEP's", "±10 points",
         numbers=(Number("min improvement", 38.6, "%", 10.0, _over_fig7c("improvement", min)),
                  Number("max improvement", 41.9, "%", 10.0, _over_fig7c("improvement", max)),
                  Number("CANN sync share", 70.0, "%", 10.0,
                         _over_fig7c("cann_sync_share", lambda v: fmean(list(v)))),
                  Number("UBEP sync share", 30.0, "%", 10.0,
                         _over_fig7c("ubep_sync_share", lambda v: fmean(list(v))))),
         trend=Check("CANN's share above UBEP's, UBEP's A2A >= CANN's, every point",
                     _fig7c_trend)),
    Item("fig8", f"{PREREG}, row fig8 (UBEP §5.3, Fig. 8)",
         "UBEP cuts the dispatch 34.7-52.4 % over BS 32/64/128; CANN under 70 / 90 / 140 us",
         "±10 points",
         numbers=(Number("min cut", 34.7, "%", 10.0, _fig8_cut(min)),
                  Number("max cut", 52.4, "%", 10.0, _fig8_cut(max))),
         checks=(Check("CANN under each axis maximum", _fig8_axes),),
         trend=Check("CalCumSum ends before the last Token-Sending at every BS", _fig8_trend)),
    Item("fig9", f"{PREREG}, row fig9 (UBEP §5.4, Fig. 9)",
         "slowest sender 62.2 / 48.1 / 43.5 us (CANN / w/o mapping / UBEP)", "±20 %",
         numbers=tuple(Number(label, p, "us", 0.20, _fig9_max(v), relative=True)
                       for label, v, p in (("CANN", "cann-slot", 62.2),
                                           ("w/o mapping", "ubep-nomap", 48.1),
                                           ("UBEP", "ubep", 43.5))),
         checks=(Check("every run bit-exact", _bit_exact),),
         trend=Check("CANN > w/o mapping > UBEP, UBEP max/mean <= 1.10", _fig9_trend)),
    Item("fig10", f"{PREREG}, row fig10 (UBEP §5.4, Fig. 10)",
         "every Data-as-Flag variant cuts 31.0-57.1 % vs stop-and-wait; saving 3.7-4.6 us at "
         "small g (64 ranks), ≈1 us at 10 KB", "±5 points, ±0.5 us",
         numbers=(Number("min cut", 31.0, "%", 5.0, _fig10_cut(min)),
                  Number("max cut", 57.1, "%", 5.0, _fig10_cut(max)),
                  Number("min saving R64 16 B", 3.7, "us", 0.5, _fig10_small(min)),
                  Number("max saving R64 16 B", 4.6, "us", 0.5, _fig10_small(max)),
                  Number("mean saving 10,240 B", 1.0, "us", 0.5, _fig10_10k)),
         checks=(Check("every latency inside its panel's axis range", _fig10_axes),),
         trend=Check("at every R the best variant's saving shrinks from 16 B to 10,240 B",
                     _fig10_trend),
         shape=((16, 32, 64), 48), given={"ranks": "16,32,64", "aivs": 48}),
    Item("fig13", f"{PREREG}, row fig13 (UBEP App. C.2)",
         "improvement 29 / 31 / 34 % at top-2 / 4 / 8", "±10 points",
         numbers=tuple(Number(f"k={k}", p, "%", 10.0, _fig13_at(k))
                       for k, p in ((2, 29.0), (4, 31.0), (8, 34.0))),
         trend=Check("the improvement rises with k", _fig13_trend)),
    Item("fig14", f"{PREREG}, row fig14 (UBEP Fig. 14(a))",
         "best C 13 / 15 / 11 / 2 / 1 at BS 8 / 16 / 32 / 64 / 128 (64 ranks, C 1-16)", "±3",
         numbers=tuple(Number(f"best C BS {b}", p, "C", 3.0, lambda rows, b=b: best_c(rows, b))
                       for b, p in zip(FIG14_BATCHES, (13, 15, 11, 2, 1))),
         trend=Check("Spearman rho(BS, best C) <= -0.7", _fig14_trend),
         given={"ranks": "64", "aivs": 48, "experts_per_die": 1,
                "groups": ",".join(map(str, FIG14_GROUPS))}),
)}

#: every held-out number of the nine items, ``(item, Number)``, in the table's order
NUMBERS = tuple((item.name, n) for item in ITEMS.values() for n in item.numbers)


def judge_seed(item, rows):
    """One seed's verdict on ``item``: ``{values, magnitude, trend, holds, words}``.

    ``values``: ``{number key: model value or None}``; ``magnitude``/``trend``: True,
    False or None (not run); ``holds``: both True.
    """
    spec = ITEMS[item]
    values = {n.key: n.model(rows) if rows else None for n in spec.numbers}
    inside = [n.within(values[n.key]) for n in spec.numbers]
    checks = [c.judge(rows) if rows else (None, f"{c.text}: not run") for c in spec.checks]
    magnitude = both(inside + [ok for ok, _w in checks])
    trend, trend_words = spec.trend.judge(rows) if rows else (None, "not run")
    parts = [f"{n.key} " + ("not run" if values[n.key] is None else
                            f"{values[n.key]:.3g} (paper {n.paper:g}"
                            + ("" if ok else ", OUTSIDE") + ")")
             for n, ok in zip(spec.numbers, inside)]
    words = "; ".join(parts + [w for _ok, w in checks] + [f"trend: {trend_words}"])
    return {"values": values, "magnitude": magnitude, "trend": trend,
            "holds": magnitude is True and trend is True, "words": words}
