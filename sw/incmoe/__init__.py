"""INC-MoE's band-pipelined MoE layer on the AIV machine (INC-MoE §2–3, Algorithm 1).

* :mod:`.workload` — a layer's inputs: per-rank token rows that carry their
  routing (top-k experts and gate weights) and the experts' surrogate weights;
* :mod:`.reference` — the numpy result (docs/spec/kernels.md §4, bit-exact int32);
* :mod:`.layout` — where everything lives in a die's HBM;
* :mod:`.program` — the persistent kernel's programs: gather, compute and
  reduce roles, tail assistance, and the ring baseline.

The kernel ``moe-layer`` (:mod:`epfabric.sw.kernels.moe_layer`) runs them.
"""
