"""Routing generator: which experts each token goes to (seeded, host-side data).

MoE routing is *data* for every kernel (docs/spec/design.md): a generator draws it on
the host with a seeded numpy RNG and the simulated hardware computes
everything that depends on it. Conventions of ``docs/spec/kernels.md`` §4:

* every token picks ``topk`` **distinct** experts, drawn without
  replacement; by default uniformly;
* optionally ``hot`` experts are favoured with weight ``w_hot`` (the others
  weight 1), spread over the ranks at ids ``m * experts // hot`` (docs/spec/kernels.md
  §1.6 "Hot experts": with ``w_hot = 0.3 * (E - hot) / (hot * 0.7)`` the hot
  experts take about 30 % of the slots);
* or the hot experts sit at consecutive ids ``0 .. hot - 1`` (``hot_layout="consecutive"``:
  all on the first rank or two, UBEP §5.4's worst case for a rank);
* or every expert has a Zipf weight ``(e + 1) ** -zipf`` by id (``zipf > 0``: expert 0
  the hottest; a generalisation of the paper's hot experts, not in the paper);
* routing weights are small integers 1..7 (so reductions stay exact).

Expert ``e`` lives on rank ``e // (experts // ranks)`` (contiguous blocks of
``experts // ranks``).
"""

import numpy as np

from ..hw.validate import UserError, check_choice, check_int, check_number

__all__ = ["route", "hot_weight", "hot_ids", "expert_rank", "remote_need", "HOT_LAYOUTS"]

#: where the hot experts sit: spread over the ranks (``m * E // hot``) or at ids 0 .. hot - 1
HOT_LAYOUTS = ("spread", "consecutive")


def hot_weight(experts, hot, share=0.3):
    """Weight of a hot expert so that ``hot`` of ``experts`` take ``share`` of the slots (about)."""
    check_int("experts", experts, 1)
    check_int("hot", hot, 1, experts - 1)
    return share * (experts - hot) / (hot * (1 - share))


def hot_ids(experts, hot, layout="spread"):
    """The ids of the ``hot`` experts: ``m * experts // hot`` (``"spread"``) or ``0 .. hot - 1``
    (``"consecutive"``)."""
    check_choice("hot_layout", layout, HOT_LAYOUTS)
    if layout == "consecutive":
        return list(range(hot))
    return [m * experts // hot for m in range(hot)]


def route(tokens, experts, topk, *, seed=0, hot=0, w_hot=None, hot_layout="spread", zipf=0.0):
    """``(topk_idx, topk_weights)``: int arrays of shape ``(tokens, topk)``.

    Each row holds ``topk`` distinct expert ids (in draw order); weights are
    integers in 1..7. ``hot`` experts at :func:`hot_ids` ``(hot_layout)`` have weight
    ``w_hot``; or, with ``zipf > 0``, expert ``e`` has weight ``(e + 1) ** -zipf``.

    Raises
    ------
    TypeError, ValueError
        On a bad size (named), ``topk > experts``, ``hot >= experts``, or ``hot`` and
        ``zipf`` both given.
    """
    check_int("tokens", tokens, 1)
    check_int("experts", experts, 1)
    check_int("topk", topk, 1, experts)
    check_int("hot", hot, 0, experts - 1)
    check_int("seed", seed, 0)
    check_number("zipf", zipf, positive=False)
    if zipf < 0:
        raise UserError(f"zipf must be >= 0, not {zipf!r}")
    if zipf and hot:
        raise UserError(f"hot={hot} and zipf={zipf!r}: choose hot experts or Zipf weights")
    rng = np.random.default_rng(seed)
    weight = np.ones(experts)
    if hot:
        w = hot_weight(experts, hot) if w_hot is None else check_number("w_hot", w_hot)
        weight[hot_ids(experts, hot, hot_layout)] = w
    elif zipf:
        weight = np.arange(1, experts + 1, dtype=float) ** -zipf
    # Sampling k distinct items with probabilities proportional to `weight`
    # (successive draws without replacement) = the k smallest of E_i / w_i
    # with E_i ~ Exp(1) (Efraimidis–Spirakis), vectorised over tokens.
    keys = rng.exponential(size=(tokens, experts)) / weight
    topk_idx = np.argsort(keys, axis=1, kind="stable")[:, :topk]
    weights = rng.integers(1, 8, size=(tokens, topk))
    return topk_idx.astype(np.int64), weights.astype(np.int64)


def expert_rank(topk_idx, experts, ranks):
    """The rank hosting each entry of ``topk_idx`` (``experts // ranks`` experts per rank)."""
    check_int("ranks", ranks, 1, experts)
    if experts % ranks:
        raise UserError(f"experts ({experts}) must be a multiple of ranks ({ranks})")
    return np.asarray(topk_idx) // (experts // ranks)


def remote_need(topk_idx, experts, ranks, token_rank=None):
    """Boolean ``(tokens, ranks)``: rank ``r`` hosts at least one of the token's experts.

    ``token_rank`` (default: tokens dealt round-robin) is the rank that owns
    each token; its own column is left False.
    """
    idx = np.asarray(topk_idx)
    host = expert_rank(idx, experts, ranks)
    need = np.zeros((idx.shape[0], ranks), dtype=bool)
    rows = np.repeat(np.arange(idx.shape[0]), idx.shape[1])
    need[rows, host.reshape(-1)] = True
    owner = np.arange(idx.shape[0]) % ranks if token_rank is None else np.asarray(token_rank)
    need[np.arange(idx.shape[0]), owner] = False
    return need
