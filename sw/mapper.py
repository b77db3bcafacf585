"""UBEP's hardware-accelerated mapper: quaternary search over expert counts.

UBEP §3.3 "Hardware-Accelerated Mapper", Algorithm 1: given the reordered
expert list ``E`` (one expert id per routed token slot) and a global token
index ``T``, find the expert whose cumulative token range covers ``T`` and the
offset of ``T`` inside it. Each step evaluates three pivots with a single
``VectorCount(E < P_i)``; the window ``[L, R)`` over experts shrinks to the
quadrant that contains ``T``.

The search is written against an abstract ``count3`` so the same code runs
on the simulated vector unit and on numpy. Two departures from the printed
algorithm: the loop ends when ``R - L <= 1`` (needed: with
``Gap = ceil((R-L)/4)`` the printed ``Gap = 0`` exit is never reached once
``R - L = 1``), and pivots are clamped to ``R`` (kept for bounds, but not
needed for termination or results: ~59,700 lookups without it all end within
6 steps and match numpy -- ``epfabric mutate --only mapper_pivots_unclamped``).
"""

import numpy as np

from ..hw.validate import UserError

__all__ = ["quaternary_search", "reference_lookup"]


async def quaternary_search(count3, target, n_experts):
    """Return ``(expert, offset, steps)`` for global token index ``target``.

    ``count3(pivots)`` must return (or be awaitable to) the three counts
    ``#{e in E : e < p}`` for the three pivots; ``0 <= target < len(E)``.
    """
    if n_experts < 1:
        raise UserError(f"n_experts must be >= 1, not {n_experts!r}")
    lo, hi, c_lo = 0, n_experts, 0
    steps = 0
    while hi - lo > 1:
        gap = -(-(hi - lo) // 4)
        pivots = [min(lo + i * gap, hi) for i in (1, 2, 3)]
        counts = list(await count3(pivots))
        steps += 1
        q = next((i for i in range(3) if target < counts[i]), 3)
        bounds = [lo] + pivots + [hi]
        c_bounds = [c_lo] + counts
        lo, hi, c_lo = bounds[q], bounds[q + 1], c_bounds[q]
    final = (await count3([lo, lo, lo]))[0]
    return lo, target - final, steps + 1


def reference_lookup(expert_list, target, n_experts):
    """numpy reference: ``(expert, offset)`` of global token index ``target``."""
    counts = np.bincount(np.asarray(expert_list), minlength=n_experts)
    inclusive = np.cumsum(counts)
    expert = int(np.searchsorted(inclusive, target, side="right"))
    return expert, int(target - (inclusive[expert] - counts[expert]))
