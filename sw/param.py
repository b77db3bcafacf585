"""Parameters: one declaration (:class:`Param`) for a kernel's, an experiment's and a preset's.

A :class:`Param` names a parameter, its default and its help, and says what a value
must be (a type, one of a few choices, a range and its unit). The same declaration serves

* the kernels (:attr:`epfabric.sw.kernels.Kernel.params`): ``epfabric run`` makes an
  option of each (``--system``, ``--batch``), lists its help, choices and every
  kernel's default, matches names in any case and reads a list of values
  (:meth:`Param.values`);
* the experiments (:attr:`epfabric.sim.lab.experiments.Experiment.params`);
* the presets' fields (:func:`param`: a dataclass field whose metadata is its
  :class:`Param`, :func:`params_of` reads them back named); a machine file
  (:mod:`epfabric.sw.preset_file`) is read and written from them, units and ranges included.

:meth:`Param.check` validates a value with the messages of :mod:`epfabric.hw.validate`
(``UserError``/``UserTypeError`` naming the parameter and the value).
"""

import ast
import math
from dataclasses import MISSING, dataclass, field, fields, replace

from ..hw.validate import UserError, UserTypeError, check_bool, check_choice, check_int

__all__ = ["Param", "param", "params_of", "literal"]


@dataclass(frozen=True)
class Param:
    """One parameter.

    Attributes
    ----------
    name : str
        As callers give it (``seed``; on the command line ``--seed``).
    default : object
        The value when none is given (``None``: unset, the owner chooses).
    help : str
        One line: what it sets.
    type : type or None
        ``int``, ``float``, ``bool``, ``str`` (checked by :meth:`check`), or ``None``:
        any value, the owner checks it.
    choices : tuple or None
        The values it takes, when a few names (``("cann", "ubep")``).
    minimum : number or None
        The least value (``int``/``float`` only).
    sequence : bool
        A value is a sequence: on the command line ``1,5,2`` is one value, and ``;``
        separates the values of a list.
    maximum : number or None
        The greatest value (``int``/``float`` only).
    unit : str or None
        The value's physical unit (``"ns"``, ``"GB/s"``, ``"bytes"``); ``None``: a count or a
        name, no unit.
    positive : bool
        The value must be above :attr:`minimum` (a time or a rate: ``minimum`` 0, excluded).
    """
    name: str
    default: object
    help: str = ""
    type: type = None
    choices: tuple = None
    minimum: float = None
    sequence: bool = False
    maximum: float = None
    unit: str = None
    positive: bool = False

    def range_text(self):
        """The values a number takes, with the unit: ``>= 1``, ``in (0, 100000] ns``."""
        lo, hi = self.minimum, self.maximum
        if self.positive:
            lo = 0 if lo is None else lo
        unit = f" {self.unit}" if self.unit else ""
        if lo is not None and hi is not None:
            return f"in {'(' if self.positive else '['}{lo}, {hi}]{unit}"
        if lo is not None:
            return f"{'>' if self.positive else '>='} {lo}{unit}"
        return f"<= {hi}{unit}"

    def check(self, value):
        """``value`` if the parameter takes it; else ``UserError``/``UserTypeError`` naming it."""
        if value is None and self.default is None:
            return None
        if self.type is bool:
            check_bool(self.name, value)
        elif self.type is int:
            check_int(self.name, value)
            self._check_range(value)
        elif self.type is float:
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise UserTypeError(f"{self.name} must be a number, not {value!r}")
            self._check_range(value)
        elif self.type is not None and not isinstance(value, self.type):
            raise UserTypeError(f"{self.name} must be a {self.type.__name__}, not {value!r}")
        if self.choices is not None:
            check_choice(self.name, value, self.choices)
        return value

    def _check_range(self, value):
        lo, hi = self.minimum, self.maximum
        if self.positive:
            lo = 0 if lo is None else lo
        if ((lo is not None and (value <= lo if self.positive else value < lo))
                or (hi is not None and value > hi)):
            raise UserError(f"{self.name} must be {self.range_text()}, not {value!r}")
        if not math.isfinite(value):
            raise UserError(f"{self.name} must be a finite number"
                            + (f" {self.range_text()}" if lo is not None or hi is not None
                               else "") + f", not {value!r}")

    def canonical(self, value):
        """``value`` as :attr:`choices` spells it if it differs only in case (``UBEP``: ``ubep``)."""
        if isinstance(value, str):
            for choice in self.choices or ():
                if isinstance(choice, str) and choice.lower() == value.lower():
                    return choice
        return value

    def values(self, text):
        """The values a command-line ``text`` lists, each a Python literal (else a string):
        ``"cann,UBEP"`` → ``["cann", "ubep"]`` (:meth:`canonical`); of a :attr:`sequence`,
        ``"1,5,2;2,4,2"`` → ``[(1, 5, 2), (2, 4, 2)]``."""
        if self.sequence:
            return [tuple(literal(x) for x in v.split(",")) for v in text.split(";")]
        return [self.canonical(literal(v)) for v in text.split(",")]


def literal(text):
    """``text`` as a Python literal (``3``, ``None``, ``[1, 2]``), else the string itself."""
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def param(help, default=MISSING, *, type=None, choices=None, minimum=None, maximum=None,
          unit=None, positive=False):
    """A dataclass field declared by a :class:`Param` (its metadata ``"param"``; the name is
    the field's, :func:`params_of`)."""
    declared = Param("", None if default is MISSING else default, help, type, choices, minimum,
                     maximum=maximum, unit=unit, positive=positive)
    return field(default=default, metadata={"param": declared})


def params_of(cls):
    """The :class:`Param` of every field of dataclass ``cls`` declared by :func:`param`, named."""
    return tuple(replace(f.metadata["param"], name=f.name) for f in fields(cls)
                 if "param" in f.metadata)
