"""The lab: experiments, their grids, the result cache and files, plots, and ``epfabric reproduce``.

* :mod:`.results` — storage and drawing, with no knowledge of any
  experiment: the point cache, CSV/JSON with run metadata, matplotlib helpers;
* :mod:`.experiments` — one module per question, registered in ``EXPERIMENTS``;
* :mod:`.sweep` — runs a grid's points serially or on Dask;
* :mod:`.reproduce` — grid → points → rows → files → ``summary.md``.
"""
