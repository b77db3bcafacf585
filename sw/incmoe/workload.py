"""A MoE layer's inputs for the INC-MoE layer (docs/spec/kernels.md §2.1, §3 ``incmoe-fig1``, §4).

One token is one 512 B DataBlock row of ``words`` modelled int32 words. Words
``0 .. k-1`` carry the token's routing, ``expert | weight << 16`` for its k
distinct experts (gate weights are small ints 1..7), as vLLM's AllGather
path gathers the router's top-k with the hidden states; the other words are
random data. The expert FFN's surrogate is ``FFN_e(x) = a_e * x + b_e`` on
every word (mod 2**32), with small-int weights ``a_e, b_e`` placed in HBM as
data (docs/spec/kernels.md §4), so the routing words go through the FFN like any other
word and the numpy reference treats the whole row alike.
"""

from dataclasses import dataclass

import numpy as np

from ...hw.validate import UserError, check_int

__all__ = ["LayerCase", "make_case", "band_rows", "ROUTE_MASK"]

#: bits of a routing word that hold the expert id (the weight is above them)
ROUTE_MASK = 0xFFFF


@dataclass(frozen=True)
class LayerCase:
    """Inputs of one layer: ``x[r]`` (``counts[r]`` x ``words`` uint32) and expert weights."""
    ranks: int
    counts: tuple
    experts: int
    topk: int
    words: int
    x: tuple          # per rank: np.ndarray (counts[r], words) uint32
    a: np.ndarray     # (experts,) uint32
    b: np.ndarray     # (experts,) uint32

    @property
    def tmax(self):
        return max(self.counts)

    @property
    def local_experts(self):
        return self.experts // self.ranks

    def routing(self, rank):
        """``(experts, weights)`` of rank ``rank``'s tokens, each ``(counts[rank], topk)``."""
        words = self.x[rank][:, :self.topk]
        return words & ROUTE_MASK, words >> 16


def make_case(*, ranks, counts, experts, topk, words, seed):
    """A seeded layer: routing with ``topk`` distinct experts per token, random data words.

    Raises
    ------
    ValueError
        On a bad size (named): ``experts`` not a multiple of ``ranks``, ``topk``
        more than the experts or more than half the modelled words, no tokens at all.
    """
    check_int("ranks", ranks, 2)
    counts = tuple(check_int("counts[r]", int(c), 0) for c in counts)
    if len(counts) != ranks:
        raise UserError(f"counts must give one token count per rank ({ranks}), not {counts!r}")
    if max(counts) == 0:
        raise UserError(f"counts must give at least one rank a token, not {counts!r}")
    check_int("experts", experts, ranks, ROUTE_MASK)
    if experts % ranks:
        raise UserError(f"experts must be a multiple of the ranks ({ranks}), not {experts}")
    check_int("words", words, 2)
    check_int("topk", topk, 1, min(experts, words // 2))
    rng = np.random.default_rng(seed)
    xs = []
    for r in range(ranks):
        x = rng.integers(0, 1 << 32, size=(counts[r], words), dtype=np.uint64).astype(np.uint32)
        if counts[r]:
            ids = np.argsort(rng.random((counts[r], experts)), axis=1)[:, :topk]
            gates = rng.integers(1, 8, size=(counts[r], topk))
            x[:, :topk] = (ids | gates << 16).astype(np.uint32)
        xs.append(x)
    a = rng.integers(1, 8, size=experts).astype(np.uint32)
    b = rng.integers(0, 8, size=experts).astype(np.uint32)
    return LayerCase(ranks, counts, experts, topk, words, tuple(xs), a, b)


def band_rows(counts, bands):
    """``beta`` = ceil(Tmax / bands): the band size every role and rank uses (INC-MoE §3.3)."""
    check_int("bands", bands, 1)
    tmax = max(counts)
    return -(-tmax // bands)
