"""numpy references of dispatch and combine (docs/spec/kernels.md §1.2, §1.4, §4), bit-exact.

The output order is CANN's (docs/spec/kernels.md §0.5): on rank ``d`` the dispatched
tokens are grouped by local expert ``e_l``, then by source rank ``s``, then
by slot ``j`` — the number of earlier token slots (token-major index
``t*k + i``) of the same source routed to the same expert. Both CANN's
baseline and UBEP must produce exactly this order, so their outputs compare
bit for bit.
"""

import numpy as np

__all__ = ["slot_index", "counts", "dispatch_order", "dispatch_out", "expert_outputs",
           "combine_out"]


def slot_index(topk_idx):
    """``j[t, i]``: earlier slots (token-major) of the same source going to the same expert."""
    idx = np.asarray(topk_idx)
    flat = idx.reshape(-1)
    j = np.zeros_like(flat)
    seen = {}
    for n, e in enumerate(flat.tolist()):
        j[n] = seen.get(e, 0)
        seen[e] = j[n] + 1
    return j.reshape(idx.shape)


def counts(w):
    """``cnt[d, e_l, s]``: slots of source ``s`` routed to local expert ``e_l`` of rank ``d``."""
    cnt = np.zeros((w.ranks, w.epr, w.ranks), dtype=np.int64)
    for s in range(w.ranks):
        for e in w.topk_idx[s].reshape(-1).tolist():
            cnt[e // w.epr, e % w.epr, s] += 1
    return cnt


def dispatch_order(w):
    """``order[d]``: ``(s, t, i)`` of every slot received by rank ``d``, in output order."""
    order = []
    j = [slot_index(w.topk_idx[s]) for s in range(w.ranks)]
    for d in range(w.ranks):
        rows = []
        for e_l in range(w.epr):
            e = d * w.epr + e_l
            for s in range(w.ranks):
                hits = [(int(j[s][t, i]), t, i) for t in range(w.batch) for i in range(w.topk)
                        if w.topk_idx[s][t, i] == e]
                rows += [(s, t, i) for _j, t, i in sorted(hits)]
        order.append(rows)
    return order


def dispatch_out(w):
    """``(out, recv_count)``: ``out[d]`` = the received tokens (rows × blocks × words) in order.

    ``recv_count[d][e_l]`` = tokens received for local expert ``e_l``.
    """
    order = dispatch_order(w)
    out = [np.stack([w.x[s][t] for s, t, _i in rows]) if rows
           else np.zeros((0, w.hidden_blocks, w.words), dtype=np.uint64) for rows in order]
    cnt = counts(w)
    return out, cnt.sum(axis=2)


def expert_outputs(w, out, scale=None):
    """The stand-in expert FFN: a row of local expert ``e_l`` of rank ``d`` × ``(e + 1)`` mod 2^16.

    Elements are the 16-bit halves of the modelled words (the vector unit's
    16-bit lanes); ``scale`` overrides the per-expert factor ``e + 1``.
    """
    cnt = counts(w)
    outs = []
    for d in range(w.ranks):
        rows = out[d].astype(np.uint64)
        factors = np.concatenate([np.full(cnt[d, e_l].sum(), (d * w.epr + e_l + 1)
                                          if scale is None else scale(d * w.epr + e_l),
                                          dtype=np.uint64) for e_l in range(w.epr)]) \
            if len(rows) else np.zeros(0, dtype=np.uint64)
        lo, hi = rows & 0xFFFF, rows >> 16 & 0xFFFF
        f = factors.reshape(-1, 1, 1)
        outs.append((((hi * f) & 0xFFFF) << 16) | ((lo * f) & 0xFFFF))
    return outs


def combine_out(w, expert_out):
    """``y[s][t]`` = Σ_i w[s,t,i] · o(t, i) in 16-bit lanes mod 2^16, i ascending.

    Specification: docs/spec/kernels.md §4.

    ``o(t, i)`` is the expert output row of slot (t, i) on the expert's rank.
    """
    order = dispatch_order(w)
    where = {}
    for d, rows in enumerate(order):
        for p, (s, t, i) in enumerate(rows):
            where[(s, t, i)] = (d, p)
    ys = []
    for s in range(w.ranks):
        lo = np.zeros((w.batch, w.hidden_blocks, w.words), dtype=np.uint64)
        hi = np.zeros_like(lo)
        for t in range(w.batch):
            for i in range(w.topk):
                d, p = where[(s, t, i)]
                o = expert_out[d][p].astype(np.uint64)
                wt = np.uint64(w.topk_w[s][t, i])
                lo[t] = (lo[t] + (o & 0xFFFF) * wt) & 0xFFFF
                hi[t] = (hi[t] + (o >> 16 & 0xFFFF) * wt) & 0xFFFF
        ys.append((hi << 16) | lo)
    return ys
