"""Dispatch/combine inputs: routing, weights and tokens per rank (docs/spec/kernels.md §1.2, §4).

Everything here is *data*: the host places it in HBM and the kernels never
see it while being generated. A :class:`Workload` holds, per source rank
``s``: ``topk_idx[s]`` (BS×k distinct expert ids, token-major),
``topk_w[s]`` (BS×k weights 1..7) and ``x[s]`` (BS tokens × ``hidden_blocks``
512 B blocks × ``words`` modelled 32-bit words).

Expert ``e`` lives on rank ``e // epr`` as local expert ``e % epr``
(``epr = experts // ranks``).
"""

from dataclasses import dataclass, field

import numpy as np

from ...hw.validate import UserError, check_int, check_number
from ..routing import hot_ids, hot_weight, route

__all__ = ["Workload", "MODELS", "Model", "blocks_per_token", "read_routing", "check_routing"]


@dataclass(frozen=True)
class Model:
    """A model's MoE shape (UBEP Table 3): hidden bytes per token, top-k, routed experts."""
    name: str
    hidden_bytes: int
    topk: int
    experts: int
    precision: str


#: UBEP Table 3 (hidden size in bytes at the dispatch precision), by ``--model`` name
MODELS = {
    "deepseek-v3": Model("DeepSeek-R1/V3.2", 7168 + 128, 8, 256,
                         "W8A8 (+128 B padded fp32 scale)"),
    "qwen3-30b": Model("Qwen3-30B", 2048 * 2, 8, 128, "BF16"),
    "glm-4.7": Model("GLM-4.7", 5120 * 2, 8, 160, "BF16"),
}


def blocks_per_token(hidden_bytes, tff=True):
    """512 B blocks a token takes: raw ``ceil(H/512)``, with Token-Flag Fusion ``ceil(H/480)``."""
    check_int("hidden_bytes", hidden_bytes, 1)
    per = 480 if tff else 512
    return -(-hidden_bytes // per)


@dataclass(frozen=True)
class Workload:
    """One dispatch's inputs on every rank (see the module docstring).

    Parameters
    ----------
    ranks, batch, topk, experts : int
        R, BS (tokens per rank), k, E (a multiple of R; ``topk <= experts``).
    hidden_blocks : int
        512 B blocks per token (``B_tok``).
    words : int
        Modelled 32-bit words of each block (``data_bytes // 4``).
    seed : int
        Rank ``s`` draws its routing and tokens from ``seed * 1000 + s``.
    hot : int
        Hot experts (at :func:`~epfabric.sw.routing.hot_ids` of ``hot_layout``: spread at
        ids ``m * E / hot``, or consecutive ``0 .. hot - 1``), 0 for uniform routing.
    hot_layout : str
        ``"spread"`` (default) or ``"consecutive"``.
    zipf : float
        With ``hot = 0``: expert ``e`` drawn with weight ``(e + 1) ** -zipf`` (0: uniform).
    hot_share : float
        The share of slots the hot experts are meant to take, in ``(0, 1)``:
        their weight is :func:`~epfabric.sw.routing.hot_weight` ``(E, hot,
        hot_share)`` (docs/spec/kernels.md §1.6's ``w_hot``). The formula ignores that a
        token's ``k`` experts are distinct, so the measured share falls a
        little short when ``k`` is not small against ``E``
        (:meth:`hot_slot_share` measures it).
    """
    ranks: int
    batch: int
    topk: int
    experts: int
    hidden_blocks: int = 1
    words: int = 8
    seed: int = 0
    hot: int = 0
    hot_share: float = 0.3
    hot_layout: str = "spread"
    zipf: float = 0.0
    topk_idx: np.ndarray = field(init=False, repr=False, compare=False)
    topk_w: np.ndarray = field(init=False, repr=False, compare=False)
    x: np.ndarray = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        check_int("ranks", self.ranks, 1)
        check_int("batch", self.batch, 1)
        check_int("experts", self.experts, 1)
        check_int("topk", self.topk, 1, self.experts)
        if self.experts % self.ranks:
            raise UserError(f"experts ({self.experts}) must be a multiple of ranks ({self.ranks})")
        check_int("hidden_blocks", self.hidden_blocks, 1)
        check_int("words", self.words, 1, 128)
        check_int("seed", self.seed, 0)
        check_int("hot", self.hot, 0, self.experts - 1)
        check_number("hot_share", self.hot_share)
        if not self.hot_share < 1:
            raise UserError(f"hot_share must be in (0, 1), not {self.hot_share!r}")
        w_hot = hot_weight(self.experts, self.hot, self.hot_share) if self.hot else None
        idx, w, x = [], [], []
        for s in range(self.ranks):
            i_s, w_s = route(self.batch, self.experts, self.topk, seed=self.seed * 1000 + s,
                             hot=self.hot, w_hot=w_hot, hot_layout=self.hot_layout,
                             zipf=self.zipf)
            idx.append(i_s)
            w.append(w_s)
            rng = np.random.default_rng((self.seed * 1000 + s) ^ 0x5EED)
            x.append(rng.integers(0, 2**32, size=(self.batch, self.hidden_blocks, self.words),
                                  dtype=np.uint64))
        object.__setattr__(self, "topk_idx", np.stack(idx))
        object.__setattr__(self, "topk_w", np.stack(w))
        object.__setattr__(self, "x", np.stack(x))

    @classmethod
    def from_arrays(cls, x, topk_idx, topk_weights, experts):
        """A workload holding the caller's data (the ``Buffer`` API); shapes and values checked.

        ``x``: ranks × BS × blocks × words 32-bit words; ``topk_idx``: ranks ×
        BS × k expert ids, distinct per token; ``topk_weights``: ranks × BS ×
        k integers 0..65535 (the 16-bit lanes' weights).
        """
        x = np.asarray(x)
        idx = np.asarray(topk_idx)
        wts = np.asarray(topk_weights)
        if x.ndim != 4:
            raise UserError(f"x must be ranks x tokens x blocks x words, not shape {x.shape}")
        if idx.ndim != 3 or idx.shape[:2] != x.shape[:2]:
            raise UserError(f"topk_idx must be ranks x tokens x k = {x.shape[:2]} x k, "
                            f"not shape {idx.shape}")
        if wts.shape != idx.shape:
            raise UserError(f"topk_weights must have topk_idx's shape {idx.shape}, "
                            f"not {wts.shape}")
        if idx.size and (idx.min() < 0 or idx.max() >= experts):
            raise UserError(f"topk_idx must hold expert ids in [0, {experts - 1}]")
        if any(len(set(row)) != len(row) for row in idx.reshape(-1, idx.shape[2]).tolist()):
            raise UserError("topk_idx must name k distinct experts per token")
        if wts.size and (wts.min() < 0 or wts.max() > 0xFFFF):
            raise UserError("topk_weights must be integers in [0, 65535] (16-bit lanes)")
        if x.size and (x.min() < 0 or x.max() > 0xFFFFFFFF):
            raise UserError("x must hold 32-bit words")
        ranks, batch, blocks, words = x.shape
        w = cls(ranks=ranks, batch=batch, topk=idx.shape[2], experts=experts,
                hidden_blocks=blocks, words=words)
        object.__setattr__(w, "topk_idx", idx.astype(np.int64))
        object.__setattr__(w, "topk_w", wts.astype(np.int64))
        object.__setattr__(w, "x", x.astype(np.uint64))
        return w

    def replay(self, topk_idx, topk_weights=None):
        """This workload with the given routing (and weights; default: its own, drawn from the
        seed) in place of the drawn one; the tokens ``x`` stay the seed's. Checked by
        :func:`check_routing` (``UserError`` naming the first bad rank, token, slot)."""
        idx = check_routing(topk_idx, topk_weights, self.ranks, self.experts)[0]
        if idx.shape[1:] != (self.batch, self.topk):
            raise UserError(f"routing is {idx.shape}: the workload is ranks x batch x topk = "
                            f"{(self.ranks, self.batch, self.topk)}")
        object.__setattr__(self, "topk_idx", idx.astype(np.int64))
        if topk_weights is not None:
            object.__setattr__(self, "topk_w", np.asarray(topk_weights).astype(np.int64))
        return self

    @property
    def epr(self):
        """Experts per rank."""
        return self.experts // self.ranks

    @property
    def slots(self):
        """Token slots per rank, ``batch * topk``."""
        return self.batch * self.topk

    def hot_experts(self):
        """The hot experts' ids (:func:`~epfabric.sw.routing.hot_ids`; none for uniform routing)."""
        return hot_ids(self.experts, self.hot, self.hot_layout) if self.hot else []

    def hot_slot_share(self):
        """The share of all token slots (every rank) that go to a hot expert."""
        return float(np.isin(self.topk_idx, self.hot_experts()).mean()) if self.hot else 0.0

    def bytes_moved(self, hidden_bytes=None):
        """Dispatch payload bytes per rank as UBEP Table 4 counts them: BS·k·H."""
        h = self.hidden_blocks * 512 if hidden_bytes is None else hidden_bytes
        return self.batch * self.topk * h


def read_routing(path):
    """``(topk_idx, topk_weights or None)`` of a routing file; ``UserError`` naming what is wrong.

    A ``.npz`` holds ``topk_idx`` (ranks × batch × topk integers) and optionally
    ``topk_weights`` (integers, the same shape); a ``.npy`` holds ``topk_idx`` only.
    Only the file's own structure is checked here (:func:`check_routing` checks the ids).
    """
    import os
    if not isinstance(path, (str, os.PathLike)):
        raise UserError(f"routing must be the path of a .npz or .npy file, not {path!r}")
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise UserError(f"routing={path!r}: no such file")
    if not path.endswith((".npz", ".npy")):
        raise UserError(f"routing={path!r} must be a .npz (topk_idx, topk_weights) or .npy "
                        f"(topk_idx) file")
    try:
        if path.endswith(".npy"):
            arrays = {"topk_idx": np.load(path, allow_pickle=False)}
        else:
            with np.load(path, allow_pickle=False) as data:
                arrays = {k: data[k] for k in data.files}
    except (OSError, ValueError, EOFError) as exc:
        raise UserError(f"routing={path!r} is not a readable numpy file ({exc})") from None
    extra = sorted(set(arrays) - {"topk_idx", "topk_weights"})
    if "topk_idx" not in arrays or extra:
        raise UserError(f"routing={path!r} must hold topk_idx (and optionally topk_weights), "
                        f"not {', '.join(sorted(arrays)) or 'nothing'}")
    idx, wts = arrays["topk_idx"], arrays.get("topk_weights")
    for name, a in (("topk_idx", idx), ("topk_weights", wts)):
        if a is not None and not np.issubdtype(a.dtype, np.integer):
            raise UserError(f"routing={path!r}: {name} must be an integer array, not {a.dtype}")
    if idx.ndim != 3 or 0 in idx.shape:
        raise UserError(f"routing={path!r}: topk_idx must be ranks x batch x topk, not shape "
                        f"{idx.shape}")
    if wts is not None and wts.shape != idx.shape:
        raise UserError(f"routing={path!r}: topk_weights must have topk_idx's shape "
                        f"{idx.shape}, not {wts.shape}")
    return idx, wts


def check_routing(topk_idx, topk_weights, ranks, experts):
    """``(topk_idx, topk_weights)`` as arrays if they fit ``ranks`` and ``experts``; else
    ``UserError`` naming the first offender (rank, token, slot)."""
    idx = np.asarray(topk_idx)
    if idx.shape[0] != ranks:
        raise UserError(f"routing has {idx.shape[0]} ranks, the machine {ranks}")
    bad = np.argwhere((idx < 0) | (idx >= experts))
    if len(bad):
        s, t, i = map(int, bad[0])
        raise UserError(f"routing topk_idx[{s}, {t}, {i}] (rank {s}, token {t}, slot {i}) is "
                        f"{int(idx[s, t, i])}: expert ids must be in [0, {experts})")
    for s in range(idx.shape[0]):
        for t, row in enumerate(idx[s].tolist()):
            for i, v in enumerate(row):
                if v in row[:i]:
                    raise UserError(f"routing topk_idx[{s}, {t}, {i}] (rank {s}, token {t}, "
                                    f"slot {i}) repeats expert {v} of slot {row.index(v)}: a "
                                    f"token's experts are distinct")
    if topk_weights is not None:
        wts = np.asarray(topk_weights)
        bad = np.argwhere((wts < 0) | (wts > 0xFFFF))
        if len(bad):
            s, t, i = map(int, bad[0])
            raise UserError(f"routing topk_weights[{s}, {t}, {i}] (rank {s}, token {t}, slot "
                            f"{i}) is {int(wts[s, t, i])}: weights are 16-bit, in [0, 65535]")
    return idx, topk_weights
