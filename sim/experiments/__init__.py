"""Experiments: one module per question, each declaring its parameters and returning rows.

An experiment answers one question about the model — how long a lone block
takes per distance class, how close in-network AG+RS gets to 2·BW, what a
torn read looks like, how fast each simulator runs — by running kernels or
hardware tops on a backend. Each is an :class:`Experiment` registered in
:data:`EXPERIMENTS` (name → experiment):

* ``name``, ``title`` (the question, one line), ``paper`` (the figure or
  table it reproduces, or ``""``);
* ``params`` — a tuple of :class:`Param` (name, default, help, type,
  choices): what a caller may set, validated by :meth:`Experiment.resolve`
  before anything runs;
* ``run(**params)`` → a list of row dicts (flat, JSON-able: one row per
  point measured);
* ``format(rows)`` → the table ``epfabric`` prints.

The CLI commands (:mod:`epfabric.sim.cli`) are thin front ends over these;
``epfabric reproduce`` runs them by name.
"""

from dataclasses import dataclass

__all__ = ["Param", "Experiment", "EXPERIMENTS", "register"]

#: name → :class:`Experiment`; the modules below register theirs on import.
EXPERIMENTS = {}


@dataclass(frozen=True)
class Param:
    """One experiment parameter: ``type`` converts and checks a value (``int``, ``float``, ``str``, ``bool``)."""
    name: str
    default: object
    help: str
    type: type = int
    choices: tuple = None
    minimum: float = None

    def check(self, value):
        """``value`` converted to ``type`` and validated; ``ValueError``/``TypeError`` naming the parameter."""
        if value is None and self.default is None:
            return None
        if self.type is bool:
            if not isinstance(value, bool):
                raise TypeError(f"{self.name} must be a bool, not {value!r}")
        elif self.type in (int, float):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or \
                    (self.type is int and not isinstance(value, int)):
                raise TypeError(f"{self.name} must be {'an integer' if self.type is int else 'a number'}, "
                                f"not {value!r}")
            if self.minimum is not None and value < self.minimum:
                raise ValueError(f"{self.name} must be >= {self.minimum}, not {value!r}")
        elif not isinstance(value, self.type):
            raise TypeError(f"{self.name} must be a {self.type.__name__}, not {value!r}")
        if self.choices is not None and value not in self.choices:
            raise ValueError(f"{self.name} must be one of {', '.join(map(str, self.choices))}, "
                             f"not {value!r}")
        return value


class Experiment:
    """Base class of the experiment protocol (see the module docstring)."""

    name = ""
    title = ""
    paper = ""
    params = ()

    def resolve(self, **given):
        """Every parameter, given or default, validated; ``ValueError`` for an unknown name."""
        known = {p.name: p for p in self.params}
        unknown = sorted(set(given) - set(known))
        if unknown:
            raise ValueError(f"unknown parameter(s) {', '.join(unknown)} for experiment {self.name}; "
                             f"valid: {', '.join(known) or 'none'}")
        return {name: p.check(given.get(name, p.default)) for name, p in known.items()}

    def run(self, **params):
        """Rows of the experiment (a list of flat dicts)."""
        raise NotImplementedError

    def format(self, rows):
        """A plain-text table of ``rows``."""
        if not rows:
            return "(no rows)"
        keys = list(rows[0])
        lines = [" | ".join(keys)]
        lines += [" | ".join(str(r.get(k, "")) for k in keys) for r in rows]
        return "\n".join(lines)


def register(experiment):
    """Add ``experiment`` to :data:`EXPERIMENTS` (each name once); return it."""
    if not isinstance(experiment, Experiment):
        raise TypeError(f"experiment must be an Experiment, not {experiment!r}")
    if not experiment.name or experiment.name in EXPERIMENTS:
        raise ValueError(f"experiment name must be new and non-empty, not {experiment.name!r}")
    EXPERIMENTS[experiment.name] = experiment
    return experiment


from . import agrs, calibrate, fabric_speed, quaternary, races, speed   # noqa: E402,F401
