"""INC-MoE's layer time cut vs the ring, over tokens and band counts (INC-MoE Fig. 1/7, §5.3).

INC-MoE §5.3: the band-pipelined layer (AllGather of band j+1 ‖ expert FFN
of band j ‖ ReduceScatter of band j−1, on one persistent kernel) cuts TTFT by
20.2 % at 24K tokens per accelerator (3 bands) up to 33.1 % at 126K (10
bands), against vLLM's ring AG → FFN → ring RS; more bands shrink the
non-overlapped fill and drain.

Each point is one token count T per rank at the reduced scale of
docs/spec/kernels.md §3 (``incmoe-fig1``: T = paper/256, N = 4 ranks, E = 64 experts
(16 per rank), top-8, one 512 B block per token, 8 AIVs per die as 1 gather
+ 5 compute + 2 reduce, the paper's band counts 3 → 10, tail assistance
on for T ≥ 256 with 2 bands), on ``incmoe-testbed`` (100 Gb/s per direction
per rank, 1 µs one-way). It runs the ``moe-layer`` kernel three times on the
same input — the ring baseline, INC with the paper's tail setting and INC
with it toggled — every run checked bit-exactly by the kernel. Every point
uses machines sized for the largest grid point (``tmax`` 512 rows, 256
engine slots), so the grid costs one Verilator build per mode.

The comparison: the paper's TTFT cut includes non-MoE time and emulator
losses, so its shape is what to hold against; the bound derived from Eq. 5
with fill and drain (docs/spec/kernels.md §3: INC ≈ (n_b + 0.5) + one band's FFN, ring
1.875·n_b, in units of one band's S/BW) is ≈ 31 % at 3 bands and ≈ 42 % at 10.
"""

from ....sw.kernels import KERNELS, run_kernel
from ...backends import SIMULATORS
from ...backends.machine import backend as make_backend
from . import Experiment, Param, register

__all__ = ["GRID", "QUICK", "PAPER_TTFT_CUT", "TOLERANCE", "bound", "measure_point", "IncMoeLayer", "EXPERIMENT"]

#: tokens per rank -> bands (the paper's 24K..126K per accelerator / 256; n_b per docs/spec/kernels.md §2.4)
GRID = {96: 3, 128: 3, 192: 4, 208: 5, 256: 6, 392: 8, 504: 10}
QUICK = (96, 256, 504)
#: INC-MoE Fig. 1: TTFT cut at the same token counts (x 256)
PAPER_TTFT_CUT = {96: 0.2016, 128: 0.2367, 192: 0.2719, 208: 0.2762, 256: 0.2898, 392: 0.2707,
                  504: 0.3311}
TAIL_FROM = 256         # tail assistance on at and above (docs/spec/kernels.md §3)
TAIL_BANDS = 2          # n_tail (docs/spec/kernels.md §2.6)
ROLES = (1, 5, 2)       # B_AG, B_FFN, B_RS at 8 AIVs (docs/spec/kernels.md §2.6)
TMAX, SLOTS = 512, 256  # one machine for the whole grid (>= 504 rows; >= 4 * largest band)
FFN_SHARE = 0.25        # t_FFN / t_ring(AG+RS) the preset's cube rate was set for
MORE_BANDS = 2          # the band-count probe: INC again at the same T with this many more bands
#: the verdict's tolerance (points) on each side of [paper TTFT cut, bound]: the bound takes
#: the FFN share and half a band of fill/drain as estimates, and the TTFT cut is another
#: system's end-to-end figure; two points for those approximations, no more
TOLERANCE = 0.02


def bound(bands, ranks=4, ffn=FFN_SHARE):
    """1 − t_INC / t_ring with a line-rate switch and the FFN hidden (docs/spec/kernels.md §3).

    Per band of S_band: ring AG + RS = 2(N−1)/N, FFN = ``ffn`` of that, all serial;
    INC = 1 per band (Eq. 4) + half a band of fill/drain + the last band's FFN.
    """
    ring_band = 2 * (ranks - 1) / ranks
    ring = bands * ring_band * (1 + ffn)
    inc = bands + 0.5 + ring_band * ffn
    return 1 - inc / ring


def measure_point(*, tokens, bands, backend, seed=0, ranks=4, experts=64, topk=8, roles=ROLES):
    """``{"ring", "inc", "inc_other_tail", "inc_more_bands": run}`` of one token count (each
    checked): the ring, INC with the paper's tail rule, INC with tail assistance toggled, and
    INC with :data:`MORE_BANDS` more bands (what the band count alone does at this T)."""
    be = make_backend(backend)
    tail = TAIL_BANDS if tokens >= TAIL_FROM else 0
    other = 0 if tail else min(TAIL_BANDS, bands)
    base = {"ranks": ranks, "tokens": tokens, "experts": experts, "topk": topk, "roles": roles,
            "bands": bands, "seed": seed, "tmax": TMAX, "slots": SLOTS}
    out = {}
    for name, mode, t, nb in (("ring", "ring", 0, bands), ("inc", "inc", tail, bands),
                              ("inc_other_tail", "inc", other, bands),
                              ("inc_more_bands", "inc", tail, bands + MORE_BANDS)):
        result = run_kernel(KERNELS["moe-layer"], be, preset="incmoe-testbed",
                            params={**base, "mode": mode, "tail": t, "bands": nb})
        if not result.correct:
            raise AssertionError(f"moe-layer {mode} (tail {t}) differs from numpy at T={tokens}: "
                                 f"{result.problems[:3]}")
        out[name] = result.runs[0].to_dict()
    return out


class IncMoeLayer(Experiment):
    """One row per token count: ring and INC layer times, the cut, the tail's effect."""

    name = "incmoe-layer"
    title = "INC-MoE layer vs ring AG -> FFN -> RS: layer time cut over tokens (3 -> 10 bands)"
    paper = "INC-MoE Fig. 1/7"
    headline = ("TTFT cut 20.2 % at 24K tokens (3 bands) rising to 33.1 % at 126K (10 bands); "
                "bound from Eq. 5 with fill/drain ~31 % -> ~42 %")
    params = (
        Param("backend", "verilator", "simulator", str, SIMULATORS),
        Param("seed", 0, "routing and data seed", int, minimum=0),
    )

    def points(self, params, quick=False):
        tokens = QUICK if quick else tuple(GRID)
        return [{**params, "tokens": t, "bands": GRID[t]} for t in tokens]

    def measure(self, point):
        runs = measure_point(tokens=point["tokens"], bands=point["bands"],
                             backend=point["backend"], seed=point["seed"])
        ring, inc, other = runs["ring"], runs["inc"], runs["inc_other_tail"]
        more = runs["inc_more_bands"]
        ffn = ring["band_times"][0]["ffn"]
        with_tail, without = (inc, other) if inc["tail"] else (other, inc)
        return {"tail": inc["tail"], "beta": inc["beta"], "ring_us": ring["layer_us"],
                "inc_us": inc["layer_us"], "cut": 1 - inc["cycles"] / ring["cycles"],
                "other_tail": other["tail"], "inc_other_tail_us": other["layer_us"],
                "cut_other_tail": 1 - other["cycles"] / ring["cycles"],
                "tail_gain": 1 - with_tail["cycles"] / without["cycles"],
                "more_bands": more["bands"], "cut_more_bands": 1 - more["cycles"] / ring["cycles"],
                "ring_ffn_share": (ffn[1] - ffn[0]) / ring["cycles"],
                "tokens_per_us_inc": point["tokens"] / inc["layer_us"],
                "tokens_per_us_ring": point["tokens"] / ring["layer_us"], "correct": True}

    def compare(self, row):
        return {"paper_ttft_cut": PAPER_TTFT_CUT[row["tokens"]], "bound": bound(row["bands"]),
                "cut_minus_paper": row["cut"] - PAPER_TTFT_CUT[row["tokens"]]}

    def verdict(self, rows):
        """Holds when the cut rises with the bands and every cut lies where the paper puts it.

        Rising: the most bands' cut exceeds the fewest's and the least-squares slope of the
        cut over the band count is positive (strict). Steps that fall by more than a point are
        named (the paper's own cut falls once, 29.0 -> 27.1 % at 98K). Where: each row's cut
        within [paper TTFT cut - :data:`TOLERANCE`, bound + :data:`TOLERANCE`] — the paper's
        TTFT also holds non-MoE time the layer does not shorten, so the layer's cut is at
        least its TTFT cut; Eq. 5 with fill and drain (:func:`bound`) is the most a line-rate
        switch allows."""
        rows = sorted((r for r in rows if "cut" in r), key=lambda r: r["tokens"])
        if len(rows) < 2:
            return None, "needs two token counts"
        bands = [r["bands"] for r in rows]
        cuts = [r["cut"] for r in rows]
        mb, mc = sum(bands) / len(bands), sum(cuts) / len(cuts)
        var = sum((b - mb) ** 2 for b in bands)
        slope = sum((b - mb) * (c - mc) for b, c in zip(bands, cuts)) / var if var else 0.0
        by_bands = {}
        for r in rows:
            by_bands.setdefault(r["bands"], []).append(r["cut"])
        first, last = by_bands[min(by_bands)], by_bands[max(by_bands)]
        rising = slope > 0 and min(last) > max(first)
        out = [r for r in rows if not (r["paper_ttft_cut"] - TOLERANCE <= r["cut"]
                                       <= r["bound"] + TOLERANCE)]
        where = (f"every cut between the paper's TTFT cut and the bound (tolerance "
                 f"±{100 * TOLERANCE:.0f} points): "
                 + ("yes" if not out else "NO at T=" + ", ".join(str(r["tokens"]) for r in out)))
        dips = [f"T={b['tokens']} {100 * a['cut']:.1f} -> {100 * b['cut']:.1f} %"
                for a, b in zip(rows, rows[1:]) if b["cut"] < a["cut"] - 0.01]
        parts = [f"T={r['tokens']} ({r['bands']} bands{', tail' if r['tail'] else ''}): "
                 f"{100 * r['cut']:.1f} % (paper {100 * r['paper_ttft_cut']:.1f} %, bound "
                 f"{100 * r['bound']:.1f} %)" for r in rows]
        tails = [f"T={r['tokens']}: tail assistance {100 * r['tail_gain']:+.2f} %"
                 for r in rows]
        probe = [f"T={r['tokens']}: {r['more_bands']} bands {100 * r['cut_more_bands']:.1f} %"
                 for r in rows if "cut_more_bands" in r]
        tails += [f"at the same T with {MORE_BANDS} more bands: " + ", ".join(probe)] if probe else []
        return rising and not out, (f"{where}; cut rises along the paper's grid (T and bands): "
                        f"{'yes' if rising else 'NO'} (slope "
                        f"{100 * slope:+.2f} points per band; steps down > 1 point: "
                        f"{', '.join(dips) or 'none'}); " + "; ".join(parts) + "; "
                        + "; ".join(tails))

    def plot(self, rows, path):
        from ..results.plot import save, subplots
        rows = sorted((r for r in rows if "cut" in r), key=lambda r: r["tokens"])
        fig, (ax,) = subplots(width=7.5, height=4.4)
        t = [r["tokens"] for r in rows]
        ax.plot(t, [100 * r["cut"] for r in rows], "o-", color="C0",
                label="model: INC vs ring (paper's tail rule)")
        ax.plot(t, [100 * r["cut_other_tail"] for r in rows], "x--", color="C0", alpha=0.6,
                label="model: tail assistance toggled")
        if all("cut_more_bands" in r for r in rows):
            ax.plot(t, [100 * r["cut_more_bands"] for r in rows], "^:", color="C0", alpha=0.6,
                    label=f"model: {MORE_BANDS} more bands at the same T")
        ax.plot(t, [100 * r["paper_ttft_cut"] for r in rows], "s-", color="C1",
                label="paper: TTFT cut (Fig. 1)")
        ax.plot(t, [100 * r["bound"] for r in rows], ":", color="C2",
                label="bound: Eq. 5 with fill/drain")
        for r in rows:
            ax.annotate(f"{r['bands']}b", (r["tokens"], 100 * r["cut"]), fontsize=7,
                        textcoords="offset points", xytext=(0, 6))
        ax.set_xlabel("tokens per rank (paper's tokens per accelerator / 256)")
        ax.set_ylabel("layer time cut vs ring [%]")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
        return save(fig, path, f"{self.paper}: {self.title}")


EXPERIMENT = register(IncMoeLayer())
