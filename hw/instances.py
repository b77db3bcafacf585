"""Repeated blocks as one shared Verilog module.

Amaranth emits one Verilog module per instance, so a system of N identical
dies (or links) repeats each one's Verilog N times: generation time and the
C++ that Verilator compiles grow with N. For simulation Verilog the system
top replaces such children by :class:`~amaranth.hdl.Instance` of one module
per distinct parameter set, converted once (``System.hierarchical_verilog``).
Amaranth's simulator always runs the flat design; the cross-simulator tests
check that both give identical cycles and results.
"""

import contextlib

from amaranth.hdl import ClockSignal, Elaboratable, Instance, Module, ResetSignal, Signal, Value
from amaranth.lib.wiring import In

__all__ = ["instance_of", "mark_used", "exposing", "shared_modules", "shared_modules_active"]

#: the recorder of :func:`exposing`, or None
_EXPOSED = None
#: set by :func:`shared_modules`
_SHARED = False


@contextlib.contextmanager
def shared_modules():
    """Inside the block, tops with shared modules skip building their flat children.

    A :class:`~epfabric.hw.system.System` built here has its dies as
    interface objects of the shared die module, as in
    ``hierarchical_verilog``: the same ports, none of the 8 x ranks core
    objects. For the Verilog simulators, whose Verilog comes from
    ``hierarchical_verilog`` anyway, and for testbenches that only need the
    top's port shapes (measured: 29 s of a 64-die x 8-AIV machine's Verilog
    generation went into building the flat system first). Amaranth's
    simulator never builds inside it.
    """
    global _SHARED
    previous, _SHARED = _SHARED, True
    try:
        yield
    finally:
        _SHARED = previous


def shared_modules_active():
    """Whether :func:`shared_modules` is active."""
    return _SHARED


@contextlib.contextmanager
def exposing():
    """Record shared-module instances instead of instantiating them (the native backend).

    Inside the block, :func:`instance_of` returns an empty module and appends
    ``(module, ports, consts)`` to the list this yields: ``ports`` maps each
    Verilog port name of the instance to ``(signal, is_input)`` -- an input of
    the instance is a copy of what the parent drives into it, an output is a
    signal nothing in the design drives. Converting the top with those
    signals as its own ports (inputs of the instance become outputs of the
    top, and the other way round) gives the *glue*: the top without the
    instances, which a C++ top connects to one Verilated model per instance
    (:mod:`epfabric.sim.backends.native_build`).
    """
    global _EXPOSED
    previous, _EXPOSED = _EXPOSED, []
    try:
        yield _EXPOSED
    finally:
        _EXPOSED = previous


def instance_of(module, iface, has_reset, skip=(), **consts):
    """``Instance`` of Verilog ``module`` wired to interface object ``iface``.

    ``iface`` has the module's signature (``signature.create()``); every member
    becomes the port named as Amaranth names ports (path joined with ``__``).
    ``consts`` drive further input ports with constants; ``skip`` names
    members driven that way. ``has_reset``: the module has a ``rst`` port.
    """
    if _EXPOSED is not None:
        return _expose(module, iface, has_reset, skip, consts)
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


def _expose(module, iface, has_reset, skip, consts):
    if has_reset:
        raise ValueError(f"cannot expose {module}: the native backend's modules are reset-less")
    m = Module()
    ports = {}
    for path, member, value in iface.signature.flatten(iface):
        key = "__".join(str(p) for p in path)
        if key in skip:
            continue
        value = Value.cast(value)
        if member.flow == In:
            # driven by the parent; a copy so the glue's port is an output even if it drives nothing
            copy = Signal(len(value), name=f"x_{key}")
            m.d.comb += copy.eq(value)
            ports[key] = (copy, True)
        else:
            ports[key] = (value, False)
    _EXPOSED.append((module, ports, {k: (int(v.value), len(v)) for k, v in consts.items()}))
    return m


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
