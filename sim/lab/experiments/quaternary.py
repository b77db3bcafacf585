"""Quaternary search (UBEP Algorithm 1) on the simulated vector unit (``epfabric demo``).

Random top-k routing gives the expert list ``E``; for several target token
indices the mapper's search runs with every ``VectorCount`` executed by the
simulated :class:`~epfabric.hw.vector_unit.VectorUnit` (three pivots per
command), and the result is printed next to the numpy reference.
"""

import time

import numpy as np
from tabulate import tabulate

from ....hw.validate import UserError
from ....hw.vector_unit import VectorUnit
from ....sw.mapper import quaternary_search, reference_lookup
from ...backends import SIMULATORS, ComponentSpec, run
from ...tb.vector_commands import command, run_commands
from . import Experiment, Param, register

__all__ = ["search_intent", "log4_ceil", "Quaternary", "EXPERIMENT"]


async def search_intent(bench, expert_list, targets, n_experts):
    """Harness intent: run the search for each target; return results and cycles."""
    out = []
    for target in targets:
        start = bench.cycle

        async def count3(pivots):
            r = await run_commands(bench, [command("COUNT", expert_list, cond="LT", s=pivots)])
            return r["results"][0]

        expert, offset, steps = await quaternary_search(count3, target, n_experts)
        out.append({"target": target, "expert": expert, "offset": offset,
                    "steps": steps, "cycles": bench.cycle - start})
    return out


def log4_ceil(n):
    """The least ``s`` with ``4 ** s >= n`` (the quaternary search's narrowing commands)."""
    s = 0
    while 4 ** s < n:
        s += 1
    return s


class Quaternary(Experiment):
    """One row per target token index: the vector unit's answer, numpy's, and the cycles."""

    name = "quaternary"
    title = "UBEP Algorithm 1: quaternary search with every VectorCount on the vector unit"
    paper = "UBEP §3.3, Algorithm 1"
    headline = "three pivots per VectorCount: a lookup in O(log4 E) vector commands"
    params = (
        Param("tokens", 32, "batch size (tokens)", int, minimum=1),
        Param("topk", 8, "experts per token", int, minimum=1),
        Param("experts", 256, "number of experts", int, minimum=1),
        Param("lanes", 16, "vector-unit lanes", int, minimum=1),
        Param("targets", 6, "target token indices to look up", int, minimum=1),
        Param("seed", 0, "random seed of the routing", int, minimum=0),
        Param("backend", "pysim", "simulator", str, SIMULATORS),
    )

    def resolve(self, **given):
        p = super().resolve(**given)
        if p["topk"] > p["experts"]:
            raise UserError(f"topk ({p['topk']}) must not exceed experts ({p['experts']})")
        if p["targets"] > p["tokens"] * p["topk"]:
            raise UserError(f"targets ({p['targets']}) must not exceed tokens * topk "
                            f"({p['tokens'] * p['topk']})")
        width = max(1, int(p["experts"]).bit_length())
        VectorUnit.signature_for(lanes=p["lanes"], width=width, max_len=p["tokens"] * p["topk"])
        return p

    def points(self, params, quick=False):
        return [dict(params, targets=min(params["targets"], 3)) if quick else dict(params)]

    def measure(self, point):
        p = point
        rng = np.random.default_rng(p["seed"])
        topk_idx = np.stack([rng.choice(p["experts"], p["topk"], replace=False)
                             for _ in range(p["tokens"])])
        expert_list = [int(e) for e in topk_idx.reshape(-1)]
        targets = sorted(int(t) for t in rng.choice(len(expert_list), p["targets"], replace=False))
        width = max(1, int(p["experts"]).bit_length())
        spec = ComponentSpec("epfabric.hw.vector_unit:VectorUnit",
                             {"lanes": p["lanes"], "width": width, "max_len": len(expert_list)})
        t0 = time.monotonic()
        results, total = run(spec, search_intent, {"expert_list": expert_list, "targets": targets,
                                                   "n_experts": p["experts"]},
                             simulator=p["backend"])
        wall = time.monotonic() - t0
        per_count = -(-len(expert_list) // p["lanes"]) + 1
        rows = []
        for r in results:
            ref = reference_lookup(expert_list, r["target"], p["experts"])
            rows.append({**r, "numpy_expert": ref[0], "numpy_offset": ref[1],
                         "match": (r["expert"], r["offset"]) == ref, "entries": len(expert_list),
                         "count_cycles": per_count, "total_cycles": total, "wall_s": wall})
        return rows

    def verdict(self, rows):
        """Holds when every lookup matches numpy (no tolerance) and takes at most
        ``ceil(log4 E) + 1`` VectorCount commands: Algorithm 1 narrows the range four-fold per
        command, plus the one count that gives the offset inside the expert (no slack)."""
        ok = all(r["match"] for r in rows)
        bound = {r["experts"]: log4_ceil(r["experts"]) + 1 for r in rows}
        within = all(r["steps"] <= bound[r["experts"]] for r in rows)
        steps = sorted({r["steps"] for r in rows})
        limit = "/".join(str(b) for b in sorted(set(bound.values())))
        return ok and within, (
            f"{sum(r['match'] for r in rows)}/{len(rows)} lookups match numpy (tolerance: none), "
            f"{'/'.join(map(str, steps))} VectorCount commands each (tolerance: at most "
            f"ceil(log4 E) + 1 = {limit}: {'inside' if within else 'OUTSIDE'}; "
            f"{rows[0]['count_cycles']} cycles per command)")

    def plot(self, rows, path):
        from ..results.plot import save, subplots
        fig, (ax,) = subplots()
        ax.bar([str(r["target"]) for r in rows], [r["cycles"] for r in rows],
               color=["C0" if r["match"] else "C3" for r in rows])
        ax.set_xlabel("target token index T")
        ax.set_ylabel("cycles of the search (vector unit)")
        save(fig, path, f"{self.paper}: quaternary search per lookup, {rows[0]['entries']} "
                        f"entries, {rows[0]['lanes']} lanes (red: mismatch with numpy)")

    def format(self, rows):
        return tabulate([(r["target"], r["expert"], r["offset"], r["steps"], r["cycles"],
                          f"({r['numpy_expert']}, {r['numpy_offset']})",
                          "ok" if r["match"] else "MISMATCH") for r in rows],
                        headers=("target", "expert", "offset", "counts", "cycles",
                                 "numpy (expert, offset)", ""),
                        disable_numparse=True, colalign=("right",) * 5 + ("left", "left"))


EXPERIMENT = register(Quaternary())
