"""Table 4: CANN EP and UBEP dispatch latency and bandwidth at the paper's own shape.

UBEP §5.2 (Table 4) runs the dispatch of DeepSeek's shape -- 48 AIVs per die,
7168-byte tokens, BS 128, top-8, 256 experts -- on 16 to
256 ranks of CM384 and reports CANN EP's and UBEP's latency and bandwidth
(bandwidth = BS·k·H / latency): UBEP 0.71–0.74 × CANN's latency at every
rank count. CANN moves a token in 14 blocks of 512 B, UBEP in 15: each of its
blocks leads with the 32 B Token-Flag-Fusion header (§3.4), so it carries 480 B
(the kernel's ``hidden_bytes``; each row records both systems' block counts).

This experiment runs the ``dispatch`` kernel (:mod:`epfabric.sw.kernels.dispatch`)
of both systems at that shape, one point per rank count (the machine the
kernel sizes for both systems: one build serves both), each run checked
bit-exact against numpy (a wrong run is a row with ``correct`` false and its
first problem, and the verdict says no). Rank ``R`` runs on
:data:`TOPOLOGIES` ``[R]`` (one board of 16 dies up to 16 ranks, then boards
of 16 behind tier-2). Each row carries the wall time of its point (both
systems: program generation, Verilog and build when not cached, loading,
runs, checks).

The grid is 16, 32 and 64 ranks (``--quick``: 16). 128 and 256 ranks are
accepted (the paper's last rows) but do not fit a rank's address space at
this shape yet: the kernel refuses them before anything runs, naming the
blocks the layout needs.

The verdict holds when every row is correct and the model's UBEP/CANN latency
ratio is within :data:`BAND` of the paper's at every rank count the paper
reports (stated before the first measurement, as fig9's). Rank counts the
paper does not report have no paper values and do not enter the verdict.
"""

import time

from tabulate import tabulate

from ....hw.validate import UserError
from ...backends import SIMULATORS
from . import Experiment, Param, register

__all__ = ["Table4", "EXPERIMENT", "PAPER", "BAND", "TOPOLOGIES"]

#: UBEP Table 4 (µs, GB/s): ranks -> (CANN latency, CANN bandwidth, UBEP latency, UBEP bandwidth)
PAPER = {16: (103, 71, 73, 100), 32: (120, 61, 86, 85), 64: (139, 53, 101, 73),
         128: (144, 51, 106, 69), 256: (151, 48, 112, 66)}
#: the verdict's tolerance: the model's UBEP/CANN latency ratio within this fraction of the
#: paper's ratio (the same band as fig9's, stated before any measurement)
BAND = 0.2
#: ranks -> machine shape: CM384's boards of 8 NPUs (16 dies), then boards behind tier-2
TOPOLOGIES = {2: "superpod:2,1,1", 4: "superpod:2,2,1", 8: "superpod:2,4,1",
              16: "superpod:2,8,1", 32: "superpod:2,8,2", 64: "superpod:2,8,4",
              128: "superpod:2,8,8", 256: "superpod:2,8,16"}
SYSTEMS = ("cann", "ubep")


def parse_ranks(text):
    """``"16,32,64"`` -> ``[16, 32, 64]``; ``UserError`` naming a count without a shape."""
    try:
        ranks = [int(r) for r in str(text).split(",") if r.strip()]
    except ValueError:
        raise UserError(f"ranks must be a comma-separated list of rank counts, not {text!r}") \
            from None
    bad = [r for r in ranks if r not in TOPOLOGIES]
    if not ranks or bad:
        raise UserError(f"ranks must be among {', '.join(map(str, TOPOLOGIES))}, not {text!r}")
    return ranks


class Table4(Experiment):
    """One row per rank count: both systems' dispatch latency and bandwidth beside the paper's."""

    name = "table4"
    title = "dispatch latency and bandwidth at the paper's shape: CANN EP vs UBEP by rank count"
    paper = "UBEP §5.2, Table 4"
    headline = ("UBEP 73/86/101 us against CANN's 103/120/139 us at 16/32/64 ranks "
                "(ratio 0.71-0.73), bandwidth +35-41 %")
    # a point of 16 dies x 48 AIVs holds ~5 GB and takes both cores' worth of a build: points
    # run one at a time (cycles would not change; memory and the wall times reported would)
    parallel = False
    params = (
        Param("ranks", "16,32,64", "rank counts, comma-separated (a point each)", str),
        Param("aivs", 48, "AIVs per die A", int, minimum=2),
        Param("batch", 128, "tokens per rank BS", int, minimum=1),
        Param("topk", 8, "experts per token k", int, minimum=1),
        Param("experts", 256, "experts E", int, minimum=1),
        Param("hidden_bytes", 7168, "bytes a token carries: CANN moves 7168 B in 14 blocks of "
              "512 B, UBEP in 15 (480 B of payload a block)", int, minimum=1),
        Param("cap", 16, "receive slots per (source, expert); 0: the batch", int, minimum=0),
        Param("seed", 0, "routing and token seed", int, minimum=0),
        Param("preset", "cm384", "preset", str),
        Param("backend", "native", "simulator", str, SIMULATORS),
    )

    def resolve(self, **given):
        p = super().resolve(**given)
        parse_ranks(p["ranks"])
        return p

    def points(self, params, quick=False):
        ranks = [16] if quick else parse_ranks(params["ranks"])
        return [{**params, "ranks": str(r), "topology": TOPOLOGIES[r]} for r in ranks]

    def measure(self, point):
        from ....sw.config import parse_topology
        from ....sw.kernels import KERNELS, run_kernel
        from ...backends.machine import backend
        k = KERNELS["dispatch"]
        t0 = time.monotonic()
        be = backend(point["backend"])
        row = {}
        for system in SYSTEMS:
            params = {"system": system, "batch": point["batch"], "topk": point["topk"],
                      "experts": point["experts"], "hidden_bytes": point["hidden_bytes"],
                      "cap": point["cap"] or None, "seed": point["seed"]}
            run = run_kernel(k, be, preset=point["preset"],
                             topology=parse_topology(point["topology"]),
                             aivs=point["aivs"], params=params).runs[0]
            row.update({f"{system}_blocks": k.resolve_params(params)["hidden_blocks"],
                        f"{system}_cycles": run.cycles, f"{system}_us": run.check["latency_us"],
                        f"{system}_gbps": run.check["bandwidth_gbps"],
                        f"{system}_correct": bool(run.correct),
                        f"{system}_problem": "; ".join(run.problems[:1])})
        row["correct"] = row["cann_correct"] and row["ubep_correct"]
        row["ratio"] = row["ubep_us"] / row["cann_us"]
        row["wall_s"] = round(time.monotonic() - t0, 1)
        return row

    def compare(self, row):
        paper = PAPER.get(int(row["ranks"]))
        if paper is None:
            return {}
        cann_us, cann_gbps, ubep_us, ubep_gbps = paper
        return {"paper_cann_us": cann_us, "paper_cann_gbps": cann_gbps,
                "paper_ubep_us": ubep_us, "paper_ubep_gbps": ubep_gbps,
                "paper_ratio": ubep_us / cann_us,
                "diff_ratio": row["ratio"] - ubep_us / cann_us}

    def verdict(self, rows):
        if not rows:
            return None, "no rows"
        tolerance = f"tolerance ±{100 * BAND:.0f} % of the paper's UBEP/CANN ratio"
        bad = [r["ranks"] for r in rows if not r["correct"]]
        if bad:
            return False, f"not bit-exact against numpy at {', '.join(bad)} ranks ({tolerance})"
        parts, holds, judged = [], True, False
        for r in sorted(rows, key=lambda r: int(r["ranks"])):
            line = (f"{r['ranks']} ranks: CANN {r['cann_us']:.1f} us, UBEP {r['ubep_us']:.1f} us, "
                    f"ratio {r['ratio']:.3f}")
            if "paper_ratio" in r:
                judged = True
                inside = abs(r["ratio"] - r["paper_ratio"]) <= BAND * r["paper_ratio"]
                holds = holds and inside
                line += (f" (paper {r['paper_cann_us']}/{r['paper_ubep_us']} us, "
                         f"{r['paper_ratio']:.3f}: {'inside' if inside else 'OUTSIDE'})")
            else:
                line += " (no paper row)"
            parts.append(line)
        return (holds if judged else None), "; ".join(parts) + f"; {tolerance}"

    def plot(self, rows, path):
        from ..results.plot import save, subplots
        rows = sorted(rows, key=lambda r: int(r["ranks"]))
        fig, (lat, bw) = subplots(1, 2, width=10.0, height=4.0)
        xs = range(len(rows))
        for ax, unit, key in ((lat, "latency (us)", "us"), (bw, "bandwidth (GB/s)", "gbps")):
            for j, (system, color) in enumerate((("cann", "C0"), ("ubep", "C1"))):
                ax.bar([x - 0.3 + 0.15 * j for x in xs], [r[f"{system}_{key}"] for r in rows],
                       width=0.15, color=color, label=f"{system.upper()} (model)")
                ax.bar([x + 0.3 - 0.15 * (1 - j) for x in xs],
                       [r.get(f"paper_{system}_{key}") or 0 for r in rows], width=0.15,
                       color=color, alpha=0.45, hatch="//", label=f"{system.upper()} (paper)")
            ax.set_xticks(list(xs), [r["ranks"] for r in rows])
            ax.set_xlabel("ranks (dies)")
            ax.set_ylabel(unit)
            ax.legend(fontsize=7)
        first = rows[0]
        save(fig, path, f"{self.paper}: dispatch at {first['aivs']} AIVs/die, BS {first['batch']}, "
                        f"top-{first['topk']}, {first['experts']} experts, "
                        f"{first['hidden_bytes']} B tokens")

    def format(self, rows):
        out = []
        for r in sorted(rows, key=lambda r: int(r["ranks"])):
            out.append((r["ranks"], f"{r['cann_us']:.1f}", f"{r['ubep_us']:.1f}",
                        f"{r['ratio']:.3f}", f"{r['cann_gbps']:.1f}", f"{r['ubep_gbps']:.1f}",
                        _paper(r), "yes" if r["correct"] else "NO", f"{r['wall_s']:.0f}"))
        return tabulate(out, headers=("ranks", "CANN us", "UBEP us", "UBEP/CANN", "CANN GB/s",
                                      "UBEP GB/s", "paper (us, us, ratio)", "correct",
                                      "wall s"),
                        disable_numparse=True)


def _paper(row):
    if "paper_ratio" not in row:
        return "-"
    return f"{row['paper_cann_us']}, {row['paper_ubep_us']}, {row['paper_ratio']:.3f}"


EXPERIMENT = register(Table4())
