"""UBEP Fig. 3b: Token-Sending efficiency vs the number of sending AIVs.

UBEP §2.3: on CANN's hardware the link saturates long before every AIV
sends, so efficiency ``eff(n) = T₁ / (n · Tₙ)`` falls from 100 % at one
sender to 31.1 % at 48 (100 / 76.7 / 57.6 / 45.6 / 31.1 % at 8 / 16 / 24 /
32 / 48 of 48 AIVs). Here ``Tₙ`` is the longest Token-Sending time of UBEP's
``n`` T-AIVs (the dispatch's C-group is ``A − n``), with the paper's token
size (B_tok 16, DeepSeek's 7296 B per token as TFF blocks), BS 32, top-8,
16 experts (docs/spec/kernels.md §3 ``ubep-fig3b``); ``n`` ∈ {1, 2, 3, 4, 6}, the
paper's sender counts over 8 AIVs per die instead of 48.
"""

from . import Experiment, register
from .ubep_runs import common_params, grid, measure_dispatch

__all__ = ["Fig3b", "EXPERIMENT", "PAPER_EFF", "TOLERANCE"]

#: UBEP Fig. 3b: efficiency at n = 1, 2, 3, 4, 6 sixths of the die's AIVs
PAPER_EFF = {1: 1.0, 2: 0.767, 3: 0.576, 4: 0.456, 6: 0.311}
#: tolerance of each efficiency against the paper's, in points either side: the band of the
#: other UBEP figures at reduced scale (:data:`.ubep_sensitivity.TOLERANCE`, Fig. 8), here for
#: n of 8 AIVs standing in for 8n of 48
TOLERANCE = 0.10


class Fig3b(Experiment):
    """One point (every sender count on one machine, in turn); one row per count: Tₙ, eff(n)."""

    name = "fig3b"
    title = "Token-Sending efficiency of UBEP's T-AIVs vs the number of senders"
    paper = "UBEP Fig. 3b"
    headline = "eff = 100 / 76.7 / 57.6 / 45.6 / 31.1 % at 8 / 16 / 24 / 32 / 48 sending AIVs"
    params = common_params(min_aivs=7, hidden_blocks=16)     # n goes up to 6; the paper's B_tok

    def points(self, params, quick=False):
        ranks = 8 if quick else 16
        cells = [{"ranks": ranks, "experts": 16, "batch": 32, "topk": 8, "seed": params["seed"],
                  "hidden_blocks": params["hidden_blocks"], "senders": n,
                  "cumsum_aivs": params["aivs"] - n} for n in PAPER_EFF]
        sized = grid(cells, preset=params["preset"], backend=params["backend"], aivs=params["aivs"])
        point = {k: v for k, v in sized[0].items() if k not in ("senders", "cumsum_aivs")}
        return [{**point, "senders": ",".join(str(n) for n in PAPER_EFF)}]

    def measure(self, point):
        rows = []
        for n in (int(x) for x in point["senders"].split(",")):
            m = measure_dispatch({**point, "cumsum_aivs": point["aivs"] - n}, "ubep")
            rows.append({"senders": n, "t_send": m["a2a"], "cycles": m["cycles"]})
        return efficiencies(rows)

    def compare(self, row):
        return {"paper_eff": PAPER_EFF[row["senders"]]}

    def verdict(self, rows):
        """Holds when the efficiency falls with n (strictly) and every n's is within
        :data:`TOLERANCE` of the paper's at the same share of the die's AIVs."""
        rows = sorted(rows, key=lambda r: r["senders"])
        falls = all(a["eff"] > b["eff"] for a, b in zip(rows, rows[1:]))
        off = [r for r in rows if abs(r["eff"] - PAPER_EFF[r["senders"]]) > TOLERANCE]
        words = " / ".join(f"{100 * r['eff']:.1f}" for r in rows)
        paper = " / ".join(f"{100 * PAPER_EFF[r['senders']]:.1f}" for r in rows)
        return falls and not off, (
            f"eff at n = {', '.join(str(r['senders']) for r in rows)}: {words} % "
            f"(paper {paper} %; tolerance ±{100 * TOLERANCE:.0f} points: "
            + (f"OUTSIDE at n = {', '.join(str(r['senders']) for r in off)}" if off else "inside")
            + f"); {'falls' if falls else 'does NOT fall'} with n")

    def plot(self, rows, path):
        from ..results.plot import save, subplots
        rows = sorted(rows, key=lambda r: r["senders"])
        fig, (ax,) = subplots()
        ns = [r["senders"] for r in rows]
        ax.plot(ns, [100 * r["eff"] for r in rows], "o-", label="model")
        ax.plot(ns, [100 * PAPER_EFF[n] for n in ns], "s--", color="C3",
                label="paper (n × 8 of 48 AIVs)")
        ax.set_xlabel(f"sending AIVs n (of {rows[0]['aivs']} per die)")
        ax.set_ylabel("Token-Sending efficiency T1 / (n·Tn) (%)")
        ax.set_ylim(0, 105)
        ax.legend(fontsize=8)
        save(fig, path, f"{self.paper}: {self.title}, {rows[0]['topology']}, "
                        f"B_tok {rows[0]['hidden_blocks']}")


def efficiencies(rows):
    """``rows`` sorted by sender count, each with ``eff = T₁ / (n · Tₙ)`` (needs the n = 1 row)."""
    rows = sorted(rows, key=lambda r: r["senders"])
    one = next((r for r in rows if r["senders"] == 1), None)
    if one is None:
        return [{**r, "eff": float("nan")} for r in rows]
    return [{**r, "eff": one["t_send"] / (r["senders"] * r["t_send"])} for r in rows]


EXPERIMENT = register(Fig3b())
