"""Components registered for Verilog export (``epfabric verilog``).

A module of :mod:`epfabric.hw` registers components by defining
``VERILOG_EXPORTS = {"name": (ComponentClass, {"param": default, ...})}``; this
module discovers them, so adding a block never means editing a central list.
"""

import importlib
import pkgutil

import epfabric.hw as hw_pkg

from ...hw.validate import UserError

__all__ = ["registered", "build_component"]


def registered():
    """Return ``{name: (cls, defaults)}`` for every registered component, sorted by name."""
    found = {}
    for info in pkgutil.iter_modules(hw_pkg.__path__):
        mod = importlib.import_module(f"{hw_pkg.__name__}.{info.name}")
        for name, entry in getattr(mod, "VERILOG_EXPORTS", {}).items():
            if name in found:
                raise RuntimeError(f"component name {name!r} registered twice")
            found[name] = entry
    return dict(sorted(found.items()))


def build_component(name, params=None):
    """Construct registered component ``name`` with its defaults overridden by ``params``."""
    table = registered()
    if name not in table:
        raise UserError(f"unknown component {name!r}; registered: {', '.join(table)}")
    cls, defaults = table[name]
    params = dict(params or {})
    unknown = sorted(set(params) - set(defaults))
    if unknown:
        raise UserError(f"unknown parameter(s) {', '.join(unknown)} for {name}; "
                        f"valid: {', '.join(f'{k}={v!r}' for k, v in defaults.items())}")
    params = {**defaults, **params}
    if "signature_for" in vars(cls):
        cls.signature_for(**params)     # what shapes the ports is checked before anything is built
    return cls(**params)
