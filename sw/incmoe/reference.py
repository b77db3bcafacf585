"""numpy reference of the INC-MoE layer (KERNELS.md §4, INC-MoE Eq. 1–2), bit-exact int32."""

import numpy as np

__all__ = ["partials", "layer_output"]


def _ffn(case, x, expert):
    return (case.a[expert].astype(np.uint64)[:, None] * x + case.b[expert][:, None]) \
        .astype(np.uint32)


def partials(case, rank):
    """``z^(rank)`` for every gathered token: ``{q: (counts[q], words)}`` (Eq. 2)."""
    lo = rank * case.local_experts
    out = {}
    for q in range(case.ranks):
        x = case.x[q].astype(np.uint64)
        ids, gates = case.routing(q)
        z = np.zeros(x.shape, dtype=np.uint64)
        for i in range(case.topk):
            e = ids[:, i].astype(np.int64)
            local = (e >= lo) & (e < lo + case.local_experts)
            y = _ffn(case, x, e).astype(np.uint64) * gates[:, i].astype(np.uint64)[:, None]
            z += np.where(local[:, None], y, 0)
        out[q] = (z & 0xFFFFFFFF).astype(np.uint32)
    return out


def layer_output(case):
    """``y`` of every rank's own tokens: ``[(counts[r], words) uint32]`` (Eq. 1, int32 wrap)."""
    out = []
    for r in range(case.ranks):
        x = case.x[r].astype(np.uint64)
        ids, gates = case.routing(r)
        y = np.zeros(x.shape, dtype=np.uint64)
        for i in range(case.topk):
            e = ids[:, i].astype(np.int64)
            y += _ffn(case, x, e).astype(np.uint64) * gates[:, i].astype(np.uint64)[:, None]
        out.append((y & 0xFFFFFFFF).astype(np.uint32))
    return out
