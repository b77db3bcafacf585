"""Parameter validation shared by every block, the driver and the CLI.

One rule everywhere (docs/spec/design.md "Bad input"): a value of the wrong *type*
raises :class:`UserTypeError` (a ``TypeError``), a value of the right type
outside its range raises :class:`UserError` (a ``ValueError``), and the
message names the parameter and the value::

    check_int("ranks", 0, 1)      # UserError: ranks must be >= 1, not 0
    check_int("ranks", 2.0, 1)    # UserTypeError: ranks must be an integer, not 2.0

Every check of a value a user gives — a constructor parameter, a kernel
parameter, a preset field, a command-line option — raises one of these two,
and nothing else does: the command line turns a ``UserError`` into one line
and exit status 2, and lets any other exception (a bug) show its traceback.

Each function returns the value it accepted, so constructors can write
``self.ranks = check_int("ranks", ranks, 1, 256)``. ``bool`` is not accepted
as an integer (``True`` is an ``int`` in Python, never a count).
"""

__all__ = ["UserError", "UserTypeError", "check_int", "check_pow2", "check_multiple", "check_bool",
           "check_choice", "check_word",
           "check_number"]


class UserError(ValueError):
    """Bad input from the user: a parameter, option or value out of its range.

    A ``ValueError``, so ``except ValueError`` and ``pytest.raises(ValueError)``
    still see it; the message names the parameter and the value.
    """


class UserTypeError(UserError, TypeError):
    """Bad input of the wrong type (also a ``TypeError``, and a :class:`UserError`)."""


def _range_text(lo, hi):
    if lo is not None and hi is not None:
        return f"in [{lo}, {hi}]"
    if lo is not None:
        return f">= {lo}"
    return f"<= {hi}"


def check_int(name, value, lo=None, hi=None):
    """``value`` if it is an ``int`` (not a ``bool``) in ``[lo, hi]`` (either bound optional)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise UserTypeError(f"{name} must be an integer, not {value!r}")
    if (lo is not None and value < lo) or (hi is not None and value > hi):
        raise UserError(f"{name} must be {_range_text(lo, hi)}, not {value!r}")
    return value


def check_pow2(name, value, lo=1, hi=None):
    """``value`` if it is a power-of-two integer in ``[lo, hi]``."""
    check_int(name, value, lo, hi)
    if value < 1 or value & (value - 1):
        raise UserError(f"{name} must be a power of two, not {value!r}")
    return value


def check_multiple(name, value, of, lo=None, hi=None):
    """``value`` if it is an integer multiple of ``of`` in ``[lo, hi]``."""
    check_int(name, value, lo, hi)
    if value % of:
        raise UserError(f"{name} must be a multiple of {of}, not {value!r}")
    return value


def check_word(name, value, bits=32):
    """``value`` as an ``int`` if it is an unsigned integer of at most ``bits`` bits.

    numpy integers are accepted (a word read out of an array); floats and
    bools are not, and nothing is truncated: a word of 2**32 is an error, not 0.
    """
    import numbers
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise UserTypeError(f"{name} must be an integer, not {value!r}")
    value = int(value)
    if not 0 <= value < (1 << bits):
        shown = f"a {value.bit_length()}-bit value" if value.bit_length() > 64 else repr(value)
        raise UserError(f"{name} must be in [0, 2**{bits} - 1] ({bits}-bit unsigned), not {shown}")
    return value


def check_bool(name, value):
    """``value`` if it is a ``bool``."""
    if not isinstance(value, bool):
        raise UserTypeError(f"{name} must be a bool, not {value!r}")
    return value


def check_choice(name, value, choices):
    """``value`` if it is one of ``choices`` (compared with ``==``)."""
    choices = tuple(choices)
    if value not in choices:
        raise UserError(f"{name} must be one of {', '.join(map(str, choices))}, not {value!r}")
    return value


def check_number(name, value, *, positive=True):
    """``value`` if it is a finite real number (``> 0`` when ``positive``)."""
    import math
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise UserTypeError(f"{name} must be a number, not {value!r}")
    if not math.isfinite(value) or (positive and value <= 0):
        raise UserError(f"{name} must be a {'positive' if positive else 'finite'} number, "
                        f"not {value!r}")
    return value
