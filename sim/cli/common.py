"""Option helpers shared by the command modules."""

import json

from ...hw.validate import UserError, check_int
from ...sw.param import literal
from ..backends import missing_reason
from .. import __version__
from ..output import check_output, write_atomic

__all__ = ["positive", "max_cycles", "write_json", "check_output", "parse_params", "usable_backends"]


def positive(option, value, minimum=1):
    """``value`` of ``option`` if given (not None) and ``>= minimum``; the option is named on error."""
    if value is None:
        return None
    return check_int(option, value, minimum)


def max_cycles(option, value):
    """``value`` of a watchdog option if given: a cycle count the host port can hold (32 bits)."""
    if value is None:
        return None
    return check_int(option, value, 1, (1 << 32) - 1)


def write_json(path, obj, *, recorded=False):
    """Write ``obj`` as indented JSON to ``path`` atomically and say so.

    A dict gets an ``"epfabric"`` key with the version that wrote it. ``recorded`` (a
    measurement the results pages show, ``epfabric pages``): it also gets ``"metadata"`` --
    commit, machine, command line and date
    (:func:`~epfabric.sim.lab.results.files.run_metadata`) -- and a list is written as
    ``{"rows": [...]}`` to have a place for them.
    """
    if recorded:
        from ..lab.results.files import run_metadata
        obj = {**(obj if isinstance(obj, dict) else {"rows": obj}), "metadata": run_metadata()}
    if isinstance(obj, dict):
        obj = {"epfabric": __version__, **obj}
    write_atomic(path, json.dumps(obj, indent=2) + "\n")
    print(f"wrote {path}")


def parse_params(pairs):
    """Parse ``["key=value", ...]``; values are Python literals, else strings
    (:func:`~epfabric.sw.param.literal`)."""
    params = {}
    for pair in pairs:
        key, sep, text = pair.partition("=")
        if not sep or not key:
            raise UserError(f"--param must look like key=value, not {pair!r}")
        params[key] = literal(text)
    return params


def usable_backends(option, backends):
    """Say which of ``backends`` cannot run here; ``UserError`` if none can (an empty table)."""
    usable = [b for b in backends if not missing_reason(b)]
    for b in backends:
        if b not in usable:
            print(f"skip {b}: {missing_reason(b)}")
    if not usable:
        raise UserError(f"{option} {','.join(backends)}: none can run here "
                        f"({'; '.join(f'{b}: {missing_reason(b)}' for b in backends)})")
    return usable
