"""The bf16 combine's data and its numpy reference (``epfabric run combine --dtype bf16``).

The kernels modelled (CANN's ``MoeDistributeCombine``, UBEP's) take bf16 expert rows and fp32
weights, accumulate in fp32 and write bf16. The combine with ``dtype="bf16"`` computes that on
the cores' fp instructions (:mod:`.combine`), in this order, for every token ``t`` and element::

    acc = fp32(o(t, 0)) * w[t, 0]                  (vfcastf, vfmuls: the product rounded)
    acc = acc + fp32(o(t, i)) * w[t, i]            i = 1 … k−1 (vfcastf, vfmuls, vfadd)
    y[t] = bf16(acc)                               (vfcastb: nearest, ties to even)

(starting from the first product rather than from ``+0.0`` only differs in the sign of an
exact zero sum). :func:`combine_out` is that order in numpy float32 and ``ml_dtypes.bfloat16``,
so the checker compares bit for bit.

Data, from the integer workload (:mod:`.workload`, seeded), elementwise:

* expert rows (:func:`expert_outputs`, the stand-in FFN): every 16-bit element ``u`` of a
  row dispatched to expert ``e`` becomes ``to_bf16(u ^ m(e))``, ``m(e) = 0x9E37·(e + 1) mod
  2^16``: the finite bf16 (:func:`to_bf16`) with ``u``'s sign bit and 7 mantissa bits and
  exponent ``112 + (u >> 7 & 31)`` (magnitudes in [2^-15, 2^17): no NaN, infinity or
  subnormal). The mask differs per expert, so the ``k`` rows of a token differ in exponent and
  the fp32 sums round (their order shows);
* weights (:func:`weight_bits`): ``w = bf16(topk_w / 8)``, an fp32 value with an 8-bit
  significand. [choice] ``WEIGHTS`` holds 16 bits a slot (the int16 layout), so the weight is
  stored as the upper half of its fp32 bits and the program shifts it into place; a full
  24-bit fp32 weight needs a 32-bit ``WEIGHTS`` layout.
"""

import ml_dtypes
import numpy as np

from .reference import counts, dispatch_order

__all__ = ["DTYPES", "expert_mask", "to_bf16", "expert_outputs", "weight_bits", "weights_f32",
           "combine_out", "ulps"]

#: the combine's element types: ``int16`` (16-bit lanes mod 2^16) or ``bf16`` (fp32 sums)
DTYPES = ("int16", "bf16")


def expert_mask(e):
    """``m(e)``: what expert ``e``'s stand-in FFN XORs into every element (module docstring)."""
    return (0x9E37 * (e + 1)) & 0xFFFF


def to_bf16(u):
    """16-bit integers ``u`` → finite bf16 bits (module docstring), as ``uint64``."""
    u = np.asarray(u, dtype=np.uint64)
    return (u & 0x807F) | ((112 + (u >> 7 & 31)) << 7)


def _halves(words):
    """uint64 words → (low, high) 16-bit halves as bf16 values widened to float32."""
    words = np.asarray(words, dtype=np.uint64)
    lo = (words & 0xFFFF).astype(np.uint16).view(ml_dtypes.bfloat16).astype(np.float32)
    hi = (words >> 16 & 0xFFFF).astype(np.uint16).view(ml_dtypes.bfloat16).astype(np.float32)
    return lo, hi


def _words(lo, hi):
    """float32 (low, high) halves → uint64 words of their bf16 bits (nearest, ties to even)."""
    bits = [np.asarray(x, dtype=np.float32).astype(ml_dtypes.bfloat16).view(np.uint16)
            .astype(np.uint64) for x in (lo, hi)]
    return bits[0] | (bits[1] << 16)


def expert_outputs(w, out):
    """The bf16 stand-in expert FFN over ``out[d]`` (rows × blocks × words): module docstring."""
    cnt = counts(w)
    outs = []
    for d in range(w.ranks):
        rows = np.asarray(out[d], dtype=np.uint64)
        if not len(rows):
            outs.append(rows.copy())
            continue
        m = np.concatenate([np.full(cnt[d, e_l].sum(), expert_mask(d * w.epr + e_l),
                                    dtype=np.uint64)
                            for e_l in range(w.epr)]).reshape(-1, 1, 1)
        outs.append(to_bf16((rows & 0xFFFF) ^ m) | (to_bf16((rows >> 16 & 0xFFFF) ^ m) << 16))
    return outs


def weights_f32(topk_w):
    """The fp32 weights of integer weights ``topk_w``: ``bf16(topk_w / 8)`` as float32."""
    v = np.asarray(topk_w).astype(np.float32) / np.float32(8)
    return v.astype(ml_dtypes.bfloat16).astype(np.float32)


def weight_bits(topk_w):
    """What ``WEIGHTS`` holds for the bf16 combine: the upper 16 bits of each fp32 weight."""
    return (weights_f32(topk_w).view(np.uint32) >> 16).astype(np.int64)


def combine_out(w, expert_out):
    """``y[s][t]``: the module docstring's order over ``expert_out`` (bf16 words), bf16 words."""
    where = {}
    for d, rows in enumerate(dispatch_order(w)):
        for p, (s, t, i) in enumerate(rows):
            where[(s, t, i)] = (d, p)
    ys = []
    for s in range(w.ranks):
        wts = weights_f32(w.topk_w[s])
        y = np.zeros((w.batch, w.hidden_blocks, w.words), dtype=np.uint64)
        for t in range(w.batch):
            acc = None
            for i in range(w.topk):
                d, p = where[(s, t, i)]
                prod = [h * wts[t, i] for h in _halves(expert_out[d][p])]
                acc = prod if acc is None else [a + x for a, x in zip(acc, prod)]
            y[t] = _words(*acc)
        ys.append(y)
    return ys


def ulps(got, want):
    """Largest distance in bf16 units in the last place between the halves of two word arrays
    (bf16 bits ordered as integers: sign-magnitude made monotonic)."""
    def ordered(words):
        h = np.stack([words & 0xFFFF, words >> 16 & 0xFFFF]).astype(np.int64)
        return np.where(h & 0x8000, 0x8000 - (h & 0x7FFF), 0x8000 + h)
    g, x = (ordered(np.asarray(a, dtype=np.uint64)) for a in (got, want))
    return int(np.abs(g - x).max()) if g.size else 0
