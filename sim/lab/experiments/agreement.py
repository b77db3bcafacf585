"""Agreement of every held-out number with the paper's: MAPE, correlation, the scatter.

As GPU-simulator validations report it (docs/fidelity/preregistration.md §7,
"Verdicts, statistics and the goal"), over the held-out numbers of
:data:`.heldout.NUMBERS`, each the model's mean over the seeds against the paper's:

* **MAPE** — the mean over the numbers of ``|model − paper| / |paper|``, each in its
  own unit (percentages as percentages, µs, fig14's best C as a count);
* **Pearson's r** of ``log10(paper)`` against ``log10(model)``; a model value ``<= 0``
  is entered as 1 % of the paper's and marked;
* **Spearman's ρ** of paper against model (the raw values: a rank needs no log);
* **the scatter** — model against paper on log–log axes, the y = x line, a ±15 % band,
  each point's own tolerance as an error bar, coloured by item, MAPE and r in the title.

A number the run could not compute ("not run") enters none of them; the statistics say
over how many of the numbers they are.
"""

from .heldout import spearman

__all__ = ["statistics", "headline", "scatter", "BAND", "FLOOR"]

#: the scatter's band around y = x (a fraction of the paper's value)
BAND = 0.15
#: a model value <= 0 enters the log correlation as this fraction of the paper's
FLOOR = 0.01


def statistics(entries):
    """``{numbers, ran, mape, r, rho, marked}`` over ``entries`` = ``[(item, Number, model)]``.

    ``mape`` in percent; ``r``/``rho`` ``None`` when fewer than two numbers ran or one
    side is constant; ``marked``: the keys entered at :data:`FLOOR` of the paper's.
    """
    import numpy as np
    ran = [(item, n, m) for item, n, m in entries if m is not None]
    out = {"numbers": len(entries), "ran": len(ran), "mape": None, "r": None, "rho": None,
           "marked": [f"{item} {n.key}" for item, n, m in ran if m <= 0]}
    if not ran:
        return out
    out["mape"] = 100 * sum(abs(m - n.paper) / abs(n.paper) for _i, n, m in ran) / len(ran)
    paper = [n.paper for _i, n, _m in ran]
    model = [m if m > 0 else FLOOR * n.paper for _i, n, m in ran]
    if len(ran) >= 2:
        x, y = np.log10(paper), np.log10(model)
        if np.ptp(x) > 0 and np.ptp(y) > 0:
            out["r"] = float(np.corrcoef(x, y)[0, 1])
        out["rho"] = spearman(paper, [m for _i, _n, m in ran])
    return out


def _fmt(value, spec):
    return "—" if value is None else format(value, spec)


def headline(stats):
    """``MAPE 12.3 %, r 0.91, rho 0.88 over 31 of 31 numbers`` (and the marked ones)."""
    text = (f"MAPE {_fmt(stats['mape'], '.1f')} %, r {_fmt(stats['r'], '.2f')} (log10), "
            f"rho {_fmt(stats['rho'], '.2f')} over {stats['ran']} of {stats['numbers']} numbers")
    if stats["marked"]:
        text += f" ({len(stats['marked'])} model values <= 0 entered at 1 % of the paper's)"
    return text


def scatter(entries, stats, path, title):
    """Write the scatter of ``entries`` (``[(item, Number, model)]``) to ``path`` (PNG)."""
    from ..results.plot import save, subplots
    fig, (ax,) = subplots(width=7.5, height=6.5)
    ran = [(item, n, m) for item, n, m in entries if m is not None]
    items = list(dict.fromkeys(item for item, _n, _m in entries))
    colors = {item: f"C{k % 10}" for k, item in enumerate(items)}
    values = [n.paper for _i, n, _m in entries] + [m for _i, _n, m in ran if m > 0]
    lo, hi = min(values) / 2, max(values) * 2
    line = [lo, hi]
    ax.plot(line, line, "k-", lw=0.8, label="y = x")
    ax.fill_between(line, [v * (1 - BAND) for v in line], [v * (1 + BAND) for v in line],
                    color="0.85", label=f"±{100 * BAND:.0f} %")
    seen = set()
    for item, n, m in ran:
        y = m if m > 0 else FLOOR * n.paper
        below = min(n.band(), 0.99 * y)           # a log axis has no room below zero
        ax.errorbar([n.paper], [y], yerr=[[below], [n.band()]], fmt="x" if m <= 0 else "o",
                    color=colors[item], ms=5, capsize=2, lw=0.8,
                    label=None if item in seen else item)
        seen.add(item)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo, hi)
    ax.set_xlabel("paper (its own unit: %, us, best C)")
    ax.set_ylabel("model, mean over seeds (bar: the number's tolerance; x: <= 0, at 1 %)")
    ax.legend(fontsize=7, ncol=2, loc="upper left")
    return save(fig, path, f"{title}: {headline(stats)}")
