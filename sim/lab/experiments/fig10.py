"""Data-as-Flag vs stop-and-wait latency over the synchronisation granularity (UBEP Fig. 10).

UBEP §5.4, Fig. 10: every rank sends g bytes to every other rank, and the
latency until the last receiver has detected everything is measured for
stop-and-wait (SW, CANN's: data, fence, flag) and the three Data-as-Flag
protocols (TFF, DC, SP), for g from ~10 B to ~10 KB at 16/32/64 ranks. The
paper: Data-as-Flag cuts the latency by 31.0–57.1 %; the saving is about
1 µs at ~10 KB and 3.7–4.6 µs at small g, growing with the rank count; DC is
the worst Data-as-Flag variant at small g or few ranks, SP the best in most
settings.

Each point is one (ranks, g) on the ``cm384`` preset (unchanged latencies,
so µs are comparable) at the reduced scale of ``docs/spec/kernels.md`` §3
(8 = ``superpod:2,4,1``, 16 = ``2,8,1``, 32 = ``2,8,2``; 4 = ``2,2,1`` for
smoke tests), running the ``daf`` kernel (:mod:`epfabric.sw.kernels.daf`)
once per protocol, each run checked against numpy. Every point of one rank
count uses one machine configuration sized for the whole grid (the largest
g, every protocol), so a grid costs one Verilator build per rank count;
cycle counts do not depend on the sizing.
"""

from ....hw.validate import UserError
from ....sw.config import MachineConfig
from ....sw.kernels import KERNELS
from ....sw.kernels.daf import PROTOCOLS, machine_sizes
from ....sw.machine import Machine
from ...backends import SIMULATORS
from ...backends.machine import backend as make_backend
from . import Experiment, Param, int_list, register
from .ubep_runs import cm384_presets

__all__ = ["TOPOLOGIES", "SIZES", "QUICK_SIZES", "PAPER", "CUT_TOLERANCE", "GAIN_TOLERANCE_US", "measure_point", "Fig10", "EXPERIMENT"]

#: ranks -> superpod shape (docs/spec/kernels.md §3; 4 ranks only for smoke tests; 64 as four
#: boards of 16 dies behind tier-2, the validation's, docs/fidelity/preregistration.md §5)
TOPOLOGIES = {4: (2, 2, 1), 8: (2, 4, 1), 16: (2, 8, 1), 32: (2, 8, 2), 64: (2, 8, 4)}
SIZES = (16, 64, 256, 1024, 4096, 10240)
QUICK_SIZES = (16, 1024, 10240)
#: every machine is sized for this g, so one build serves every point of a rank count
MAX_BYTES = max(SIZES)
#: UBEP §5.4 / Fig. 10 as printed
PAPER = {"cut_low": 0.310, "cut_high": 0.571, "gain_small_us_low": 3.7, "gain_small_us_high": 4.6,
         "gain_10k_us": 1.0}
#: tolerance of the cut, in points either side of the paper's 31.0-57.1 %: the paper prints
#: the range to 0.1 points over 16-64 ranks and 10 B-10 KB; the model runs 8-32 dies, so a
#: few points of scale effect are allowed, a fifth of the range's width, not a different regime
CUT_TOLERANCE = 0.05
#: tolerance of the saving (µs) either side of the paper's 3.7-4.6 µs (small g) and ~1 µs
#: (~10 KB): half of the "about 1 µs" the paper gives at 10 KB, so the small-g and the 10 KB
#: bands stay apart (2.7 µs between them) and a flat saving cannot fall inside both
GAIN_TOLERANCE_US = 0.5
SMALL = 64            # g <= SMALL counts as "small granularity"
LARGE = 8192          # g >= LARGE counts as "about 10 KB"
DAF = ("tff", "dc", "sp")
#: modelled bytes per block: cycle counts do not depend on them, the build time does (the
#: kernel's own tests check TFF's payload with 64); here the checker sees every block's flag
#: field, which is all of a raw block's modelled bytes and TFF's header
DATA_BYTES = 32


def machine_config(preset, ranks, aivs, max_bytes=MAX_BYTES):
    """The one machine of a rank count: sized for every protocol up to ``max_bytes``."""
    if ranks not in TOPOLOGIES:
        raise UserError(f"ranks must be one of {', '.join(map(str, TOPOLOGIES))}, not {ranks!r}")
    topology = ("superpod", *TOPOLOGIES[ranks])
    shape = MachineConfig(preset, topology=topology, aivs_per_die=aivs)
    return MachineConfig(preset, topology=topology, aivs_per_die=aivs, data_bytes=DATA_BYTES,
                         **machine_sizes(shape, max_bytes))


def measure_point(*, preset, ranks, aivs, nbytes, backend, seed=0, max_bytes=MAX_BYTES,
                  max_cycles=2_000_000, opt=None):
    """``{protocol: check result}`` of one (ranks, g): the four protocols on one machine.

    ``opt``: Verilator's optimisation level (the runs are a few thousand cycles,
    so the build dominates: ``-O0`` builds fastest).
    """
    kernel = KERNELS["daf"]
    config = machine_config(preset, ranks, aivs, max_bytes)
    be = make_backend(backend, opt=opt) if backend == "verilator" else make_backend(backend)
    out = {}
    for protocol in PROTOCOLS:
        params = kernel.resolve_params({"protocol": protocol, "bytes": nbytes, "seed": seed})
        machine = Machine(backend=be, config=config)
        inputs = kernel.load(machine, params)
        report = machine.run(max_cycles)
        out[protocol] = kernel.check(machine, report, inputs)
    return out


class Fig10(Experiment):
    """One row per (ranks, g): latency of SW, TFF, DC, SP and each DaF cut vs SW."""

    name = "fig10"
    title = "Data-as-Flag vs stop-and-wait: latency until every receiver has all messages, vs g"
    paper = "UBEP Fig. 10"
    headline = ("DaF cuts latency 31.0-57.1 % vs SW: ~1 us saved at ~10 KB, 3.7-4.6 us at small g; "
                "DC worst at small g / few ranks, SP usually best")
    params = (
        Param("preset", "cm384", "preset (its latencies stay unchanged)", str, cm384_presets()),
        Param("backend", "verilator", "simulator", str, SIMULATORS),
        Param("aivs", 4, "AIVs per die (senders/receivers per rank)", int, minimum=1),
        Param("seed", 0, "message data seed", int, minimum=0),
        Param("ranks", "", "rank counts, comma-separated (default 8,16,32, quick 8; given: "
                           "quick keeps them and runs fewer g)", str),
        Param("opt", "-O0", "Verilator optimisation level (runs are short: the build dominates)",
              str, ("-O0", "-O1")),
    )

    def resolve(self, **given):
        p = super().resolve(**given)
        if p["ranks"] and not set(int_list("ranks", p["ranks"])) <= set(TOPOLOGIES):
            raise UserError(f"ranks must be among {', '.join(map(str, TOPOLOGIES))}, "
                            f"not {p['ranks']!r}")
        return p

    def points(self, params, quick=False):
        ranks = (8,) if quick else (8, 16, 32)
        ranks = int_list("ranks", params["ranks"]) if params["ranks"] else ranks
        sizes = QUICK_SIZES if quick else SIZES
        return [{**params, "ranks": r, "bytes": g} for r in ranks for g in sizes]

    def measure(self, point):
        runs = measure_point(preset=point["preset"], ranks=point["ranks"], aivs=point["aivs"],
                             nbytes=point["bytes"], backend=point["backend"], seed=point["seed"],
                             opt=point.get("opt"), max_bytes=point.get("max_bytes", MAX_BYTES))
        bad = {p: r["problems"][:3] for p, r in runs.items() if not r["correct"]}
        if bad:
            raise AssertionError(f"daf differs from numpy at {point['ranks']} ranks, "
                                 f"{point['bytes']} B: {bad}")
        ns = {p: runs[p]["latency_ns"] for p in PROTOCOLS}
        row = {f"{p}_ns": ns[p] for p in PROTOCOLS}
        row.update({f"{p}_cut": 1 - ns[p] / ns["sw"] for p in DAF})
        best = min(DAF, key=lambda p: ns[p])
        row.update({"best": best, "worst_daf": max(DAF, key=lambda p: ns[p]),
                    "best_cut": 1 - ns[best] / ns["sw"], "gain_us": (ns["sw"] - ns[best]) / 1000,
                    "blocks_raw": runs["sw"]["blocks_per_message"],
                    "blocks_tff": runs["tff"]["blocks_per_message"],
                    "sp_rearm_ns": runs["sp"]["rearm_ns"], "correct": True})
        return row

    def compare(self, row):
        out = {"paper_cut_low": PAPER["cut_low"], "paper_cut_high": PAPER["cut_high"]}
        if row["bytes"] <= SMALL:
            out.update({"paper_gain_us_low": PAPER["gain_small_us_low"],
                        "paper_gain_us_high": PAPER["gain_small_us_high"]})
        elif row["bytes"] >= LARGE:
            out.update({"paper_gain_us_low": PAPER["gain_10k_us"],
                        "paper_gain_us_high": PAPER["gain_10k_us"]})
        if "paper_gain_us_low" in out:
            out["gain_over_paper_mid"] = row["gain_us"] / (
                (out["paper_gain_us_low"] + out["paper_gain_us_high"]) / 2)
        return out

    def verdict(self, rows):
        """Holds when the paper's numbers and its ordering hold, each within its stated tolerance:

        * the cut: per rank count, the largest best-DaF cut over g within the paper's
          31.0–57.1 % ± :data:`CUT_TOLERANCE` (the paper: "reduce latency up to 31.0 %–57.1 %"
          across granularities and rank counts, i.e. each setting's largest cut lies in it);
        * the saving (SW minus the best DaF): at g <= 64 B within 3.7–4.6 µs ±
          :data:`GAIN_TOLERANCE_US`, at g >= 8 KB within ~1 µs ± the same;
        * every DaF protocol beats SW at every row (strict), DC is the worst DaF protocol at
          the smallest g of the fewest ranks, SP the best or within 5 % of it in most rows.

        Cut and saving are recomputed from the ``*_ns`` columns."""
        rows = [r for r in rows if "sw_ns" in r]
        if not rows:
            return None, "no rows"
        faster = all(r[f"{p}_ns"] < r["sw_ns"] for r in rows for p in DAF)
        by_ranks = {}
        for r in rows:
            by_ranks.setdefault(r["ranks"], []).append(r)
        fewest = by_ranks[min(by_ranks)]
        smallest = min(fewest, key=lambda r: r["bytes"])
        dc_worst = smallest["worst_daf"] == "dc"
        sp_good = sum(r["sp_ns"] <= 1.05 * min(r[f"{p}_ns"] for p in DAF) for r in rows)
        sp_mostly = sp_good * 2 > len(rows)

        def best_ns(r):
            return min(r[f"{p}_ns"] for p in DAF)

        def cut(r):
            return 1 - best_ns(r) / r["sw_ns"]

        def gain_us(r):
            return (r["sw_ns"] - best_ns(r)) / 1000

        cut_lo = PAPER["cut_low"] - CUT_TOLERANCE
        cut_hi = PAPER["cut_high"] + CUT_TOLERANCE
        top_cuts = {n: max(cut(r) for r in rs) for n, rs in by_ranks.items()}
        cut_ok = all(cut_lo <= c <= cut_hi for c in top_cuts.values())
        gain_bad = []
        for r in rows:
            if r["bytes"] <= SMALL:
                lo, hi = PAPER["gain_small_us_low"], PAPER["gain_small_us_high"]
            elif r["bytes"] >= LARGE:
                lo = hi = PAPER["gain_10k_us"]
            else:
                continue
            if not lo - GAIN_TOLERANCE_US <= gain_us(r) <= hi + GAIN_TOLERANCE_US:
                gain_bad.append(r)
        gain_ok = not gain_bad
        parts = []
        for n, rs in sorted(by_ranks.items()):
            lo, hi = min(rs, key=lambda r: r["bytes"]), max(rs, key=lambda r: r["bytes"])
            parts.append(f"{n} ranks: -{gain_us(lo):.2f} us ({100 * cut(lo):.1f} %, "
                         f"{lo['best']}) at {lo['bytes']} B, -{gain_us(hi):.2f} us "
                         f"({100 * cut(hi):.1f} %, {hi['best']}) at {hi['bytes']} B")
        cuts = [cut(r) for r in rows]
        text = (f"largest cut per rank count "
                + ", ".join(f"{n}: {100 * c:.1f} %" for n, c in sorted(top_cuts.items()))
                + f" vs paper 31.0-57.1 % (tolerance ±{100 * CUT_TOLERANCE:.0f} points: "
                f"{'inside' if cut_ok else 'OUTSIDE'}); saving vs paper 3.7-4.6 us at g <= "
                f"{SMALL} B and ~1 us at g >= {LARGE // 1024} KB (tolerance "
                f"±{GAIN_TOLERANCE_US} us: "
                + ("inside" if gain_ok else f"OUTSIDE at {len(gain_bad)} of the rows it applies to")
                + f"); every DaF faster than SW: {'yes' if faster else 'NO'}; worst DaF at "
                f"{smallest['bytes']} B / {smallest['ranks']} ranks: {smallest['worst_daf']} "
                f"(paper dc); SP best or within 5 %: {sp_good}/{len(rows)} (paper: most); "
                f"cut {100 * min(cuts):.1f}-{100 * max(cuts):.1f} % over all rows; "
                + "; ".join(parts))
        return faster and dc_worst and sp_mostly and cut_ok and gain_ok, text

    def plot(self, rows, path):
        from ..results.plot import save, subplots
        rows = [r for r in rows if "sw_ns" in r]
        ranks = sorted({r["ranks"] for r in rows}) or [0]
        fig, axes = subplots(1, len(ranks), width=max(6.5, 4.2 * len(ranks)), height=4.2)
        styles = {"sw": ("o-", "C0", "SW (stop-and-wait)"), "tff": ("s-", "C1", "TFF"),
                  "dc": ("^-", "C2", "DC"), "sp": ("D-", "C3", "SP")}
        for ax, n in zip(axes, ranks):
            rs = sorted((r for r in rows if r["ranks"] == n), key=lambda r: r["bytes"])
            for p in PROTOCOLS:
                marker, color, label = styles[p]
                ax.plot([r["bytes"] for r in rs], [r[f"{p}_ns"] / 1000 for r in rs], marker,
                        color=color, label=label)
            ax.set_xscale("log")
            ax.set_xlabel("granularity g per (src, dst) [bytes]")
            ax.set_ylabel("latency until every receiver has all [us]")
            ax.set_title(f"{n} ranks (model, cm384 latencies)", fontsize=9)
            ax.grid(True, which="both", alpha=0.3)
            ax.legend(fontsize=7)
        return save(fig, path, f"{self.paper}: {self.title} (paper, 16/32/64 ranks: DaF -31.0 to "
                    f"-57.1 %, -3.7 to -4.6 us at small g, about -1 us at 10 KB)")


EXPERIMENT = register(Fig10())
