"""The ``epfabric reproduce`` pipeline: grid → points (cached or run) → rows → files → summary.

For each experiment (:mod:`epfabric.sim.lab.experiments`):

1. resolve its parameters (``--backend`` overrides the experiment's default
   where it has one) and ask for its grid (``--quick``: the reduced one);
2. look every point up in the result cache (unless ``force``) and run the
   others (:mod:`.sweep`: serial or Dask);
3. rows = the point's parameters + the model's values + the paper's
   (``compare``); a failed point is one row with its ``error``;
4. write ``NAME.csv``, ``NAME.json`` (``rows``, ``metadata``, ``holds``,
   ``verdict``, ``errors``) and ``NAME.png`` (the experiment's ``plot``);

then ``summary.md`` over every ``NAME.json`` in the folder.
"""

import json
import time
from pathlib import Path

from ..output import write_atomic
from .results import cache, files
from . import sweep

__all__ = ["reproduce", "reproduce_one", "write_summary", "redraw"]


def _params(experiment, backend, given=None):
    names = {p.name for p in experiment.params}
    base = {"backend": backend} if backend is not None and "backend" in names else {}
    return experiment.resolve(**base, **(given or {}))


def _prepare(experiment, *, client, backend, quick, force, given=None):
    """Params, grid, keys, cached entries, the points to run and (on Dask) their futures.

    ``t0`` is when the points were submitted: a later experiment's ``wall_s``
    includes the time its points waited behind earlier experiments'.
    """
    name = experiment.name
    params = _params(experiment, backend, given)
    points = experiment.points(params, quick)
    keys = [cache.point_key(name, p) for p in points]
    entries = [None if force else cache.load(name, k) for k in keys]
    todo = [i for i, e in enumerate(entries) if e is None]
    futures = None
    if client is not None and experiment.parallel and todo:
        futures = sweep.submit_points(name, [(points[i], keys[i]) for i in todo], client)
    return {"params": params, "points": points, "keys": keys, "entries": entries, "todo": todo,
            "futures": futures, "t0": time.monotonic()}


def reproduce_one(experiment, out_dir, *, client=None, backend=None, quick=False, force=False,
                  scheduler="serial", log=print, prepared=None, given=None):
    """Reproduce one experiment into ``out_dir``; return its JSON document.

    ``prepared`` (:func:`_prepare`, by :func:`reproduce`) holds its points
    already submitted; by default they are prepared here.
    """
    out_dir = Path(out_dir)
    name = experiment.name
    prep = prepared or _prepare(experiment, client=client, backend=backend, quick=quick,
                                force=force, given=given)
    t0 = prep["t0"]
    params, points, keys, entries, todo = (prep[k] for k in ("params", "points", "keys",
                                                             "entries", "todo"))
    log(f"{name}: {len(points)} points ({len(points) - len(todo)} cached)"
        + ("" if experiment.parallel or client is None else ", run one at a time (timing figures)"))
    progress = sweep.Progress(name, len(points), cached=len(points) - len(todo))
    fresh = sweep.run_points(name, [(points[i], keys[i]) for i in todo], client,
                             progress=progress, parallel=experiment.parallel,
                             futures=prep["futures"])
    for i, entry in zip(todo, fresh):
        entry["cached"] = False
        entries[i] = entry
    for entry in entries:
        entry.setdefault("cached", True)

    rows, good, errors, per_point = [], [], [], []
    for point, key, entry in zip(points, keys, entries):
        per_point.append({"point": point, "key": key, "wall_s": entry.get("wall_s"),
                          "cached": entry["cached"], "error": entry["error"]})
        if entry["error"]:
            errors.append({"point": point, "error": entry["error"]})
            rows.append({**point, "error": entry["error"]})
            continue
        point_rows = experiment.rows_of(point, entry["rows"])
        good += point_rows
        rows += point_rows
    if errors:
        for row in rows:
            row.setdefault("error", None)
    holds, verdict = experiment.verdict(good) if good else (None, "no point succeeded")
    if errors:
        holds = False if holds is not None else None
        verdict = f"{len(errors)} of {len(points)} points failed ({errors[0]['error']}); " + verdict
    doc = {"experiment": name, "title": experiment.title, "paper": experiment.paper,
           "headline": experiment.headline, "holds": holds, "verdict": verdict,
           "errors": errors, "rows": rows,
           "metadata": files.run_metadata(params=params, quick=quick, scheduler=str(scheduler),
                                          backend=params.get("backend"),
                                          preset=params.get("preset"),
                                          points=per_point,
                                          wall_s=round(time.monotonic() - t0, 2))}
    files.write_csv(out_dir / f"{name}.csv", rows)
    files.write_json(out_dir / f"{name}.json", doc)
    if good:
        try:
            experiment.plot(good, out_dir / f"{name}.png")
        except Exception as exc:     # a figure bug must not lose the data just written
            log(f"{name}: plot failed: {type(exc).__name__}: {exc}")
    log(f"{name}: {'holds' if holds else 'does not hold' if holds is False else 'no verdict'} — "
        f"{verdict}")
    return doc


def reproduce(experiments, out_dir, *, backend=None, quick=False, scheduler="local", force=False,
              workers=None, log=print, params=None):
    """Reproduce ``experiments`` (objects) into ``out_dir``; write ``summary.md``; return the docs.

    ``params``: ``{experiment name: {parameter: value}}`` set on top of the defaults (and
    ``backend``)."""
    params = params or {}
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    docs = {}
    with sweep.open_scheduler(scheduler, workers) as client:
        kw = dict(client=client, backend=backend, quick=quick, force=force, scheduler=scheduler,
                  log=log)
        # timing experiments first, alone on the machine; then every other experiment's
        # points go to the workers at once, so one's Verilog and build overlap another's runs
        for e in experiments:
            if not e.parallel:
                docs[e.name] = reproduce_one(e, out_dir, **kw, given=params.get(e.name))
        rest = [e for e in experiments if e.parallel]
        prepared = [_prepare(e, client=client, backend=backend, quick=quick, force=force,
                             given=params.get(e.name)) for e in rest]
        for e, prep in zip(rest, prepared):
            docs[e.name] = reproduce_one(e, out_dir, **kw, prepared=prep)
    write_summary(out_dir)
    return [docs[e.name] for e in experiments]


def _mark(holds):
    return {True: "yes", False: "**no**", None: "—"}[holds]


def write_summary(out_dir):
    """``summary.md`` from every ``NAME.json`` in ``out_dir``."""
    out_dir = Path(out_dir)
    docs = []
    for path in sorted(out_dir.glob("*.json")):
        try:
            doc = json.loads(path.read_text())
        except json.JSONDecodeError:
            continue
        if isinstance(doc, dict) and "verdict" in doc and "experiment" in doc:
            docs.append(doc)
    lines = ["# Reproduction summary", "",
             "Each experiment's CSV, JSON and PNG are beside this file. *holds*: whether the "
             "paper's claim holds in the model (— where the paper gives nothing to hold against).",
             "", "| experiment | reproduces | the paper | the model | holds |",
             "|---|---|---|---|---|"]
    for d in docs:
        cells = [d["experiment"], d.get("paper") or "—", d.get("headline") or "—", d["verdict"],
                 _mark(d["holds"])]
        lines.append("| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |")
    if docs:
        meta = docs[-1]["metadata"]
        lines += ["", f"Commit {meta['commit']}, source hash {meta['source_hash']}, "
                      f"Python {meta['python']}."]
    return write_atomic(out_dir / "summary.md", "\n".join(lines) + "\n")


def redraw(out_dir, experiments, log=print):
    """Redraw ``NAME.png`` from ``NAME.csv`` for every registered experiment found in ``out_dir``."""
    out_dir = Path(out_dir)
    drawn = []
    for path in sorted(out_dir.glob("*.csv")):
        experiment = experiments.get(path.stem)
        if experiment is None:
            log(f"skip {path.name}: no experiment {path.stem!r} is registered")
            continue
        rows = [r for r in files.read_csv(path) if not r.get("error")]
        if not rows:
            log(f"skip {path.name}: no successful rows")
            continue
        experiment.plot(rows, out_dir / f"{path.stem}.png")
        log(f"drew {out_dir / (path.stem + '.png')}")
        drawn.append(path.stem)
    return drawn
