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

**The in-network combine** (``system="ubep-inc"``, :mod:`.ubep_inc`) sums where the
contributions meet, in the order they arrive, so its ``y`` is not that order's bits. What it
computes, per token ``t`` of source ``s`` and element, with ``D`` the dies holding ``t``'s
experts:

1. every one of those dies sums its products ``w·o`` in fp32 (its local experts in order,
   the products exact: 8-bit by 8-bit significands fit fp32's 24) and rounds the pre-sum to
   bf16 once (``vfcastb``);
2. the switches add the other dies' pre-sums (bf16 lanes, fp32 partial sums, from ``-0``)
   in arrival order and round to bf16 when a sum leaves a switch;
3. the root ``s`` adds its own pre-sum to the network's (fp32, rounded to bf16 once).

:func:`inc_check` judges that by the bound of recursive summation in any order (Higham,
*Accuracy and Stability of Numerical Algorithms*, 2nd ed., §4.2) against the fp64 sum ``s``
of the exact products ``x_i``. A term meets at most ``k`` fp32 operations on its way (its
product, counted though exact here, and at most ``k − 1`` additions: the whole token takes
``k − 1``) and at most ``D`` roundings to bf16 (its die's pre-sum, then one per *merge*,
where its partial sum meets another die's: each merge adds at least one die to the partial
sum, so there are at most ``D − 1``; a switch or core that passes on a bf16 sum alone
rounds it exactly). Each operation is a factor ``(1 + δ)``, ``|δ| ≤ u = 2^-24`` (fp32) or
``u_b = 2^-8`` (bf16), so

    ``|y − s| ≤ ((1 + u)^k · (1 + u_b)^D − 1) · Σ|x_i|``            (:func:`inc_bound`)

per element. Where the terms share a sign (``Σ|x_i| = |s|``, and ``|s| < 2^8`` ulps of bf16
at ``s``) that is below ``2^8 · ((1 + u)^k (1 + u_b)^D − 1)`` ulps, about ``D`` ulps; under
cancellation it is many ulps of ``s``, which recursive summation can do in any order. The
bound assumes finite sums with no subnormal on the way (the data's magnitudes ensure it).
"""

import math

import ml_dtypes
import numpy as np

from ..lane_sums import U, ulp
from .reference import counts, dispatch_order

__all__ = ["DTYPES", "expert_mask", "to_bf16", "expert_outputs", "weight_bits", "weights_f32",
           "products", "combine_out", "ulps", "inc_dies", "inc_bound", "inc_check"]

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


def products(w, expert_out):
    """Per source ``s``: the fp32 products ``w[t, i] · o(t, i)`` of ``expert_out`` (bf16
    words), shape ``(batch, k, blocks, words, 2)`` (each word's low and high element).
    Exact: 8-bit by 8-bit significands."""
    where = {}
    for d, rows in enumerate(dispatch_order(w)):
        for p, (s, t, i) in enumerate(rows):
            where[(s, t, i)] = (d, p)
    out = []
    for s in range(w.ranks):
        wts = weights_f32(w.topk_w[s])
        x = np.empty((w.batch, w.topk, w.hidden_blocks, w.words, 2), dtype=np.float32)
        for t in range(w.batch):
            for i in range(w.topk):
                d, p = where[(s, t, i)]
                x[t, i] = np.stack(_halves(expert_out[d][p]), axis=-1) * wts[t, i]
        out.append(x)
    return out


def combine_out(w, expert_out):
    """``y[s][t]``: the module docstring's order over ``expert_out`` (bf16 words), bf16 words."""
    ys = []
    for x in products(w, expert_out):
        acc = x[:, 0]
        for i in range(1, w.topk):
            acc = acc + x[:, i]                    # float32: rounded at every addition
        ys.append(_words(acc[..., 0], acc[..., 1]))
    return ys


def ulps(got, want):
    """Largest distance in bf16 units in the last place between the halves of two word arrays
    (bf16 bits ordered as integers: sign-magnitude made monotonic)."""
    def ordered(words):
        h = np.stack([words & 0xFFFF, words >> 16 & 0xFFFF]).astype(np.int64)
        return np.where(h & 0x8000, 0x8000 - (h & 0x7FFF), 0x8000 + h)
    g, x = (ordered(np.asarray(a, dtype=np.uint64)) for a in (got, want))
    return int(np.abs(g - x).max()) if g.size else 0


def inc_dies(w, s):
    """``D`` of each token of source ``s``: how many dies hold its experts (module docstring)."""
    return np.array([len({int(e) // w.epr for e in w.topk_idx[s][t]}) for t in range(w.batch)])


def inc_bound(x, dies):
    """The module docstring's bound: ``((1 + u)^k (1 + u_b)^D − 1) · Σ|x_i|`` per element of
    products ``x`` (``(batch, k, ...)``, float) and ``D`` = ``dies`` (one per token), float64."""
    k = x.shape[1]
    factor = (1 + U["fp32"]) ** k * (1 + U["bf16"]) ** np.asarray(dies, dtype=np.float64) - 1
    total = np.abs(np.asarray(x, dtype=np.float64)).sum(axis=1)
    return factor.reshape((-1,) + (1,) * (total.ndim - 1)) * total


def _exact(x):
    """The exact sums over axis 1 of products ``x`` (``math.fsum``, rounded once to float64)."""
    flat = np.moveaxis(np.asarray(x, dtype=np.float64), 1, -1).reshape(-1, x.shape[1])
    return np.array([math.fsum(row) for row in flat]).reshape(x.shape[:1] + x.shape[2:])


def inc_check(got, w, expert_out, *, first_word=0, fixed=None):
    """Judge the in-network combine's ``y`` by :func:`inc_bound` (module docstring).

    ``got[s]``: rank ``s``'s ``y`` (batch × blocks × words, bf16 words); words from
    ``first_word`` on are judged (the payload). ``fixed`` (optional, ``got``'s form): another
    ``y`` of the same terms (the fixed order's, :func:`combine_out`), measured alike.

    Returns ``{"bad": [(s, t)], "max_error_ulps", "max_error_over_bound", "max_dies",
    "same_sign_bound_ulps", "fixed_max_error_ulps"}``: the tokens with an element past its
    bound, the largest error in ulps of bf16 at the exact sum ``s`` (the subnormal spacing
    near 0, as :func:`~epfabric.sw.lane_sums.ulp`), the largest ratio of an error to its
    bound (at most 1 when every element is within), the largest ``D``, the bound in ulps
    where the terms share a sign at that ``D`` (``2^8 · ((1 + u)^k (1 + u_b)^D − 1)``) and
    the largest error of ``fixed`` (``None`` without).
    """
    bad, worst, ratio, fixed_worst, most = [], 0.0, 0.0, 0.0, 1
    for s, x in enumerate(products(w, expert_out)):
        x = x[:, :, :, first_word:]
        dies = inc_dies(w, s)
        most = max(most, int(dies.max()))
        exact, bound = _exact(x), inc_bound(x, dies)
        unit = ulp(exact, "bf16")
        lo, hi = _halves(np.asarray(got[s], dtype=np.uint64)[:, :, first_word:])
        err = np.abs(np.stack([lo, hi], axis=-1).astype(np.float64) - exact)
        bad += [(s, int(t)) for t in np.flatnonzero((err > bound).any(axis=(1, 2, 3)))]
        worst = max(worst, float((err / unit).max()))
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = max(ratio, float(np.where(bound > 0, err / bound,
                                              np.where(err > 0, np.inf, 0.0)).max()))
        if fixed is not None:
            f = np.stack(_halves(np.asarray(fixed[s], dtype=np.uint64)[:, :, first_word:]),
                         axis=-1).astype(np.float64)
            fixed_worst = max(fixed_worst, float((np.abs(f - exact) / unit).max()))
    k = w.topk
    return {"bad": bad, "max_error_ulps": worst, "max_error_over_bound": ratio,
            "max_dies": most,
            "same_sign_bound_ulps": 2 ** 8 * ((1 + U["fp32"]) ** k * (1 + U["bf16"]) ** most - 1),
            "fixed_max_error_ulps": fixed_worst if fixed is not None else None}
