"""UBEP's dispatch and combine (UBEP §2–4; ``../shared/KERNELS.md`` §1, §4).

* :mod:`.workload` — the inputs: seeded routing (k distinct experts per
  token, optional hot experts, weights 1–7), random tokens, and the models'
  shapes (UBEP Table 3) in 512 B blocks;
* :mod:`.reference` — the numpy references every run is checked against:
  CANN's output order (local expert, source rank, slot j), per-expert counts,
  ``expandIdx``, and the combine's weighted sum.

The kernel programs (CANN's BSP baseline and UBEP's decomposed kernel), the
DeepEP-like ``Buffer`` API and the ``dispatch``/``combine`` kernels build on
these.
"""
