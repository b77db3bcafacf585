"""Experiments: one module per question, each declaring its parameters and its grid of points.

An experiment answers one question about the model — how long a lone block
takes per distance class (``table2``), how close in-network AG+RS gets to
2·BW (``fig6``), what a torn read looks like (``races``), how fast each
simulator runs (``speed``) — by running kernels or hardware tops on a
backend. Each is an :class:`Experiment` registered in :data:`EXPERIMENTS`
(name → experiment):

* ``name``; ``title`` (the question, one line); ``paper`` (the figure or
  table it reproduces, or ``""``); ``headline`` (the paper's claim, one line);
* ``params`` — a tuple of :class:`~epfabric.sw.param.Param` (the kernels' and
  presets' declaration too): what a caller may set, validated by
  :meth:`Experiment.resolve` before anything runs;
* ``points(params, quick)`` — the grid: a list of independent points, each a
  flat JSON-able dict that carries everything :meth:`measure` needs
  (backend included); ``quick`` is a reduced grid;
* ``measure(point)`` → one row (a flat dict of the model's values) or a list
  of rows; points run in any order, in any process;
* ``compare(row)`` → the paper's values at that row (keys ``paper_*``) and
  their ratio or difference to the model's;
* ``verdict(rows)`` → ``(holds, line)``: ``True``/``False``, or ``None``
  where the paper gives nothing to hold against;
* ``plot(rows, path)`` → a PNG of the model beside the paper;
* ``run(**params)`` → rows (every point, in this process) and
  ``format(rows)`` → the table a CLI command prints.

``epfabric reproduce`` (:mod:`epfabric.sim.lab.results`) runs the grids —
serially or on Dask — caches every point, and writes CSV, JSON, PNG and a
summary; the CLI commands (:mod:`epfabric.sim.cli`) are thin front ends.
"""

from ....hw.validate import UserError
from ....sw.param import Param

__all__ = ["Param", "Experiment", "EXPERIMENTS", "register", "int_list"]

#: name → :class:`Experiment`; the modules below register theirs on import.
EXPERIMENTS = {}


class Experiment:
    """Base class of the experiment protocol (see the module docstring)."""

    name = ""
    title = ""
    paper = ""
    headline = ""
    params = ()
    #: points may run in parallel processes (False: timing figures that contention would skew)
    parallel = True

    def resolve(self, **given):
        """Every parameter, given or default, validated; ``ValueError`` for an unknown name."""
        known = {p.name: p for p in self.params}
        unknown = sorted(set(given) - set(known))
        if unknown:
            raise UserError(f"unknown parameter(s) {', '.join(unknown)} for experiment {self.name}; "
                            f"valid: {', '.join(known) or 'none'}")
        return {name: p.check(given.get(name, p.default)) for name, p in known.items()}

    def points(self, params, quick=False):
        """The grid for resolved ``params`` (default: one point, the parameters themselves)."""
        return [dict(params)]

    def measure(self, point):
        """The model's values at ``point``: a flat dict, or a list of them."""
        raise NotImplementedError

    def compare(self, row):
        """``{paper_*: value, ...}`` — the paper's values at ``row`` and their ratio/difference."""
        return {}

    def verdict(self, rows):
        """``(holds, line)``: whether the paper's claim holds in the model, and why, in one line."""
        return None, "the paper gives nothing to hold against"

    def plot(self, rows, path):
        """Write a PNG of ``rows`` (the model beside the paper) to ``path``."""
        from ..results.plot import table_figure
        table_figure(self, rows, path)

    def rows_of(self, point, measured):
        """Rows of one point: the point's parameters, the model's values, the paper's."""
        out = []
        for row in (measured if isinstance(measured, list) else [measured]):
            row = {**point, **row}
            out.append({**row, **self.compare(row)})
        return out

    def run(self, **params):
        """Every point of the full grid of ``params``, in this process; the rows."""
        p = self.resolve(**params)
        rows = []
        for point in self.points(p):
            rows += self.rows_of(point, self.measure(point))
        return rows

    def format(self, rows):
        """A plain-text table of ``rows``."""
        if not rows:
            return "(no rows)"
        keys = list(rows[0])
        lines = [" | ".join(keys)]
        lines += [" | ".join(str(r.get(k, "")) for k in keys) for r in rows]
        return "\n".join(lines)


def int_list(name, text, lo=1, hi=None):
    """``"8,16,32"`` → ``[8, 16, 32]``, each in ``[lo, hi]`` (``hi`` None: no bound);
    ``UserError`` naming ``name`` otherwise (a comma-separated parameter of a grid)."""
    try:
        values = [int(v) for v in str(text).split(",") if v.strip() != ""]
    except ValueError:
        raise UserError(f"{name} must be comma-separated integers, not {text!r}") from None
    if not values or min(values) < lo or (hi is not None and max(values) > hi):
        bound = f">= {lo}" if hi is None else f"in [{lo}, {hi}]"
        raise UserError(f"{name} must name one or more integers {bound}, not {text!r}")
    return values


def register(experiment):
    """Add ``experiment`` to :data:`EXPERIMENTS` (each name once); return it."""
    if not isinstance(experiment, Experiment):
        raise TypeError(f"experiment must be an Experiment, not {experiment!r}")
    if not experiment.name or experiment.name in EXPERIMENTS:
        raise ValueError(f"experiment name must be new and non-empty, not {experiment.name!r}")
    EXPERIMENTS[experiment.name] = experiment
    return experiment


from . import agrs, calibrate, fabric_speed, payload, quaternary, races, speed   # noqa: E402,F401
from . import ubep_cumsum, ubep_phases, ubep_senders, ubep_sensitivity   # noqa: E402,F401
from . import fig9  # noqa: E402,F401
from . import fig10  # noqa: E402,F401
from . import incmoe_layer  # noqa: E402,F401
from . import table4  # noqa: E402,F401
from . import mechanisms  # noqa: E402,F401
from . import training  # noqa: E402,F401
from . import validation  # noqa: E402,F401
from . import inc_ep  # noqa: E402,F401
