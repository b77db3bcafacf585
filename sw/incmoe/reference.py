"""numpy reference of the INC-MoE layer (docs/spec/kernels.md §4, INC-MoE Eq. 1–2), bit-exact int32."""

import numpy as np

__all__ = ["partials", "layer_output"]


def _weighted_ffn(case, q, lo, hi):
    """Σ over rank q's tokens' slots whose expert is in [lo, hi) of gate · FFN_e(x), mod 2**32."""
    x = case.x[q].astype(np.uint64)
    ids, gates = case.routing(q)
    out = np.zeros(x.shape, dtype=np.uint64)
    for i in range(case.topk):
        e = ids[:, i].astype(np.int64)
        ffn = (case.a[e].astype(np.uint64)[:, None] * x + case.b[e][:, None]) & 0xFFFFFFFF
        chosen = ((e >= lo) & (e < hi))[:, None]
        out += np.where(chosen, ffn * gates[:, i].astype(np.uint64)[:, None], 0)
    return (out & 0xFFFFFFFF).astype(np.uint32)


def partials(case, rank):
    """``z^(rank)`` for every gathered token: ``{q: (counts[q], words)}`` (Eq. 2): the slots
    whose expert is one of ``rank``'s."""
    lo = rank * case.local_experts
    return {q: _weighted_ffn(case, q, lo, lo + case.local_experts) for q in range(case.ranks)}


def layer_output(case):
    """``y`` of every rank's own tokens: ``[(counts[r], words) uint32]`` (Eq. 1, int32 wrap)."""
    return [_weighted_ffn(case, r, 0, case.experts) for r in range(case.ranks)]
