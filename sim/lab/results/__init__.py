"""Results: storage and drawing for ``epfabric reproduce``, with no knowledge of any experiment.

* :mod:`.cache` — one file per finished point, keyed by (experiment, point,
  source hash): a rerun reads it, a killed sweep loses nothing;
* :mod:`.files` — CSV and JSON with run metadata (epfabric version, commit,
  package versions, wall time per point), written atomically, and read back;
* :mod:`.plot` — matplotlib helpers every experiment's ``plot`` uses.

Running grids is :mod:`epfabric.sim.lab.sweep`; the pipeline is
:mod:`epfabric.sim.lab.reproduce`.
"""
