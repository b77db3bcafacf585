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

__all__ = ["SharedModule", "Sharing", "mark_used", "shared_modules", "shared_modules_active"]

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


class SharedModule:
    """One Verilog module that several children of a top are instances of.

    The parent (:class:`~epfabric.hw.system.System` for its dies,
    :class:`~epfabric.hw.die.Die` for its cores,
    :class:`~epfabric.hw.topology.Fabric` for its links and switches) is
    given one per kind of child and elaborates each child as
    :meth:`instance`; the caller converts the module itself once
    (``System.hierarchical_verilog`` returns them).

    Parameters
    ----------
    name : str
        Verilog module name.
    has_reset : bool
        The module has a ``rst`` port.
    expose : list or None
        The native backend's recorder (:mod:`epfabric.sim.backends.native_build`):
        ``None`` (default) makes :meth:`instance` an ``Instance``; a list makes
        it record the instance instead -- it returns an empty module and
        appends ``(name, ports, consts)`` to the list: ``ports`` maps each
        Verilog port name of the instance to ``(signal, is_input)`` -- an
        input of the instance is a copy of what the parent drives into it, an
        output is a signal nothing in the design drives. Converting the top
        with those signals as its own ports (inputs of the instance become
        outputs of the top, and the other way round) gives the *glue*: the
        top without the instances, which a C++ top connects to one Verilated
        model per instance. The native backend's modules are reset-less.

    Raises
    ------
    TypeError, ValueError
        On an invalid parameter, or a module with a reset to expose.
    """

    def __init__(self, name, *, has_reset, expose=None):
        if not isinstance(name, str):
            raise TypeError(f"name must be a Verilog module name, not {name!r}")
        if expose is not None and not isinstance(expose, list):
            raise TypeError(f"expose must be a list (the recorder) or None, not {expose!r}")
        if expose is not None and has_reset:
            raise ValueError(f"cannot expose {name}: the native backend's modules are reset-less")
        self.name, self.has_reset, self.expose = name, bool(has_reset), expose

    def __repr__(self):
        return f"SharedModule({self.name!r}, has_reset={self.has_reset})"

    def instance(self, iface, skip=(), **consts):
        """``Instance`` of this module wired to interface object ``iface``.

        ``iface`` has the module's signature (``signature.create()``); every member
        becomes the port named as Amaranth names ports (path joined with ``__``).
        ``consts`` drive further input ports with constants; ``skip`` names
        members driven that way.
        """
        if self.expose is not None:
            return self._expose(iface, skip, consts)
        ports = {"i_clk": ClockSignal("sync")}
        if self.has_reset:
            ports["i_rst"] = ResetSignal("sync")
        for path, member, value in iface.signature.flatten(iface):
            key = "__".join(str(p) for p in path)
            if key in skip:
                continue
            ports[("i_" if member.flow == In else "o_") + key] = value
        for key, value in consts.items():
            ports["i_" + key] = value
        return Instance(self.name, **ports)

    def _expose(self, iface, skip, consts):
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
        self.expose.append((self.name, ports,
                            {k: (int(v.value), len(v)) for k, v in consts.items()}))
        return m


class Sharing:
    """How a top builds its repeated blocks: as instances of shared Verilog modules.

    Given to :class:`~epfabric.hw.system.System` (``shared``) and the fabric
    builders (:func:`~epfabric.hw.topology.superpod`,
    :func:`~epfabric.hw.topology.star`), which build one component per
    distinct block -- a *part*, for the caller to convert -- and one
    :class:`SharedModule` instance per child.

    Parameters
    ----------
    has_reset : bool
        The shared modules have a ``rst`` port.
    expose : list or None
        The native backend's recorder for the top's own instances (see
        :class:`SharedModule`).
    """

    def __init__(self, *, has_reset, expose=None):
        self.has_reset, self.expose = bool(has_reset), expose

    def __repr__(self):
        return f"Sharing(has_reset={self.has_reset})"

    def module(self, name, *, inner=False):
        """The :class:`SharedModule` ``name``; ``inner``: instantiated inside another part
        (a die's cores), so never exposed."""
        return SharedModule(name, has_reset=self.has_reset, expose=None if inner else self.expose)


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
