"""Verification campaigns over the whole model.

* :mod:`.mutations` + :mod:`.mutate` — curated mutations of ``hw/`` and the
  kernels, each run in a copy of the tree: caught by a named test, or
  documented harmless (``epfabric mutate``);
* :mod:`.soak` — long random-traffic soaks of the superpod fabric,
  scoreboarded in hardware (``epfabric soak``).
"""
