"""Repeated blocks as one shared Verilog module.

Amaranth emits one Verilog module per instance, so a system of N identical
dies (or links) repeats each one's Verilog N times: generation time and the
C++ that Verilator compiles grow with N. For simulation Verilog the system
top replaces such children by :class:`~amaranth.hdl.Instance` of one module
per distinct parameter set, converted once (``System.hierarchical_verilog``).
Amaranth's simulator always runs the flat design; the cross-simulator tests
check that both give identical cycles and results.
"""

from amaranth.hdl import ClockSignal, Elaboratable, Instance, ResetSignal
from amaranth.lib.wiring import In

__all__ = ["instance_of", "mark_used"]


def instance_of(module, iface, has_reset, skip=(), **consts):
    """``Instance`` of Verilog ``module`` wired to interface object ``iface``.

    ``iface`` has the module's signature (``signature.create()``); every member
    becomes the port named as Amaranth names ports (path joined with ``__``).
    ``consts`` drive further input ports with constants; ``skip`` names
    members driven that way. ``has_reset``: the module has a ``rst`` port.
    """
    ports = {"i_clk": ClockSignal("sync")}
    if has_reset:
        ports["i_rst"] = ResetSignal("sync")
    for path, member, value in iface.signature.flatten(iface):
        key = "__".join(str(p) for p in path)
        if key in skip:
            continue
        ports[("i_" if member.flow == In else "o_") + key] = value
    for key, value in consts.items():
        ports["i_" + key] = value
    return Instance(module, **ports)


def mark_used(obj, seen=None):
    """Tell Amaranth that ``obj`` and the elaboratables it holds were left unused on purpose."""
    seen = set() if seen is None else seen
    if id(obj) in seen or not hasattr(obj, "__dict__"):
        return
    seen.add(id(obj))
    if hasattr(obj, "_MustUse__used"):
        obj._MustUse__used = True
    for value in vars(obj).values():
        if isinstance(value, dict):
            items = value.values()
        elif isinstance(value, (list, tuple)):
            items = value
        else:
            items = [value]
        for item in items:
            if isinstance(item, (list, tuple)):
                for sub in item:
                    if isinstance(sub, Elaboratable):
                        mark_used(sub, seen)
            elif isinstance(item, Elaboratable):
                mark_used(item, seen)
