"""Results: ``epfabric reproduce`` — run experiment grids, cache every point, write CSV/JSON/PNG.

* :mod:`.cache` — one file per finished point, keyed by (experiment, point,
  source hash): a rerun reads it, a killed sweep loses nothing;
* :mod:`.sweep` — runs a grid's points serially or as Dask tasks (a
  ``LocalCluster`` or a scheduler address), with a progress line;
* :mod:`.files` — CSV and JSON with run metadata (commit, package versions,
  wall time per point), written atomically, and read back;
* :mod:`.plot` — matplotlib helpers every experiment's ``plot`` uses;
* :mod:`.reproduce` — the pipeline: grid → points → rows → files → ``summary.md``.
"""
