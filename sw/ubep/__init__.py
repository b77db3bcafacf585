"""UBEP's dispatch and combine (UBEP §2–4; ``docs/spec/kernels.md`` §1, §4).

* :mod:`.workload` — the inputs: seeded routing (k distinct experts per
  token, optional hot experts, weights 1–7), random tokens, and the models'
  shapes (UBEP Table 3) in 512 B blocks;
* :mod:`.reference` — the numpy references every run is checked against:
  CANN's output order (local expert, source rank, slot j), per-expert counts,
  ``expandIdx``, and the combine's weighted sum;
* :mod:`.layout` — where everything lives in HBM;
* :mod:`.cann`, :mod:`.ubep` — the dispatch programs (CANN's BSP baseline,
  UBEP's decomposed kernel); :mod:`.combine` — both combines;
* :mod:`.traffic` — the data blocks each system must put on each link class of a
  superpod, exactly from the routing and in closed form (uniform top-k);

The ``dispatch``/``combine`` kernels (``epfabric run dispatch|combine``) are
in :mod:`epfabric.sw.kernels`; the DeepEP-like API on top of them
(:class:`~epfabric.sw.buffer.Buffer`: ``get_dispatch_layout``, ``dispatch``,
``combine``) is :mod:`epfabric.sw.buffer`.
"""
