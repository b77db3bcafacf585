"""Payload efficiency of AllGather vs a deduplicated all-to-all (INC-MoE §2.2).

INC-MoE sends every token to every rank with an AllGather, although a rank
needs a token only if it hosts one of the token's ``k`` experts. §2.2: with
E = 64 experts, top-8 and N = 4 ranks, a rank hosts none of a token's experts
with probability ``C(E - E/N, k) / C(E, k)`` = 8.5 %, so a token is needed by
2.74 of its 3 remote ranks and the AllGather moves about 9 % more bytes than
a deduplicated all-to-all (the same for ReduceScatter).

This experiment measures those three figures on tokens drawn by the routing
generator (:func:`epfabric.sw.routing.route`: ``k`` distinct uniformly random
experts per token, tokens dealt to ranks round-robin), one point per seed,
next to the closed form and the paper's numbers. No hardware is simulated:
routing is host-side data.
"""

from math import comb

from ....hw.validate import UserError
from ....sw.routing import remote_need, route
from . import Experiment, Param, register

__all__ = ["Payload", "EXPERIMENT", "closed_form"]

#: INC-MoE §2.2 as printed
PAPER = {"no_expert_fraction": 0.085, "ranks_needed": 2.74, "extra_ag_bytes": 0.09}
#: the verdict's tolerances (absolute, as fractions): 8.5 % is printed to 0.1 points and the
#: closed form gives 8.44 %; half a point covers that rounding and the sampling noise of a
#: 20k-token quick grid (sigma ~0.1 points) without accepting a neighbouring k (k = 7 and 9
#: give 11.9 and 6.1 %). "~9 %" is an approximate figure: one point either side
TOLERANCE = {"no_expert_fraction": 0.005, "extra_ag_bytes": 0.01}


def closed_form(experts, topk, ranks):
    """``(P(no expert on a rank), remote ranks needing a token, extra AG bytes)`` exactly."""
    p = comb(experts - experts // ranks, topk) / comb(experts, topk)
    needed = (ranks - 1) * (1 - p)
    return p, needed, (ranks - 1) / needed - 1


class Payload(Experiment):
    """One row per seed: the three payload figures measured on generated routing."""

    name = "payload"
    title = "how many (token, remote rank) pairs need no data, and what AllGather overpays for them"
    paper = "INC-MoE §2.2"
    headline = "E=64, k=8, N=4: 8.5 % of (token, rank) pairs need nothing; AG sends ~9 % more bytes"
    params = (
        Param("experts", 64, "experts E", int, minimum=1),
        Param("topk", 8, "experts per token k", int, minimum=1),
        Param("ranks", 4, "EP ranks N", int, minimum=2),
        Param("tokens", 100_000, "tokens per seed", int, minimum=1),
        Param("seeds", "0,1,2", "comma-separated routing seeds (one point each)", str),
    )

    def resolve(self, **given):
        p = super().resolve(**given)
        if p["topk"] > p["experts"]:
            raise UserError(f"topk ({p['topk']}) must not exceed experts ({p['experts']})")
        if p["experts"] % p["ranks"]:
            raise UserError(f"experts ({p['experts']}) must be a multiple of ranks ({p['ranks']})")
        _seeds(p["seeds"])
        return p

    def points(self, params, quick=False):
        seeds = _seeds(params["seeds"])[:1] if quick else _seeds(params["seeds"])
        tokens = min(params["tokens"], 20_000) if quick else params["tokens"]
        return [{"experts": params["experts"], "topk": params["topk"], "ranks": params["ranks"],
                 "tokens": tokens, "seed": s} for s in seeds]

    def measure(self, point):
        idx, _w = route(point["tokens"], point["experts"], point["topk"], seed=point["seed"])
        need = remote_need(idx, point["experts"], point["ranks"])
        remote = point["ranks"] - 1
        per_token = need.sum(axis=1)
        fraction = 1 - per_token.sum() / (need.shape[0] * remote)
        needed = per_token.mean()
        p, needed_exact, extra_exact = closed_form(point["experts"], point["topk"], point["ranks"])
        return {"no_expert_fraction": float(fraction), "ranks_needed": float(needed),
                "extra_ag_bytes": float(remote / needed - 1),
                "exact_no_expert_fraction": p, "exact_ranks_needed": needed_exact,
                "exact_extra_ag_bytes": extra_exact}

    def compare(self, row):
        if (row["experts"], row["topk"], row["ranks"]) != (64, 8, 4):
            return {}
        return {**{f"paper_{k}": v for k, v in PAPER.items()},
                **{f"diff_{k}": row[k] - v for k, v in PAPER.items()}}

    def verdict(self, rows):
        papered = [r for r in rows if "paper_no_expert_fraction" in r]
        if not papered:
            return None, "the paper's figures are for E=64, k=8, N=4 only"
        worst = max(abs(r["diff_no_expert_fraction"]) for r in papered)
        extra = sum(r["extra_ag_bytes"] for r in papered) / len(papered)
        holds = (worst <= TOLERANCE["no_expert_fraction"]
                 and abs(extra - PAPER["extra_ag_bytes"]) <= TOLERANCE["extra_ag_bytes"])
        return holds, (f"{100 * papered[0]['no_expert_fraction']:.2f} % of (token, remote rank) "
                       f"pairs need nothing (paper 8.5 %, tolerance "
                       f"±{100 * TOLERANCE['no_expert_fraction']:.1f} points), AG sends "
                       f"{100 * extra:.1f} % more (paper ~9 %, tolerance "
                       f"±{100 * TOLERANCE['extra_ag_bytes']:.0f} point): "
                       f"{'inside' if holds else 'OUTSIDE'}")

    def plot(self, rows, path):
        from ..results.plot import save, subplots
        fig, axes = subplots(1, 3, width=11)
        names = (("no_expert_fraction", "pairs with no expert on the rank", "%", 100),
                 ("ranks_needed", "remote ranks needing a token", "ranks", 1),
                 ("extra_ag_bytes", "extra AllGather bytes", "%", 100))
        for ax, (key, label, unit, scale) in zip(axes, names):
            model = [r[key] * scale for r in rows]
            ax.bar([f"seed {r['seed']}" for r in rows], model, color="C0", label="model")
            ax.axhline(rows[0][f"exact_{key}"] * scale, color="C2", ls="--", label="closed form")
            if f"paper_{key}" in rows[0]:
                ax.axhline(rows[0][f"paper_{key}"] * scale, color="C3", ls=":", label="paper")
            ax.set_ylabel(f"{label} ({unit})")
            ax.legend(fontsize=8)
        first = rows[0]
        save(fig, path, f"{self.paper}: payload efficiency, E={first['experts']}, "
                        f"k={first['topk']}, N={first['ranks']}, {first['tokens']} tokens per seed")


def _seeds(text):
    try:
        seeds = [int(s) for s in str(text).split(",") if s != ""]
    except ValueError:
        raise UserError(f"seeds must be comma-separated integers, not {text!r}") from None
    if not seeds or any(s < 0 for s in seeds):
        raise UserError(f"seeds must be one or more integers >= 0, not {text!r}")
    return seeds


EXPERIMENT = register(Payload())
