"""Repeated blocks as one shared Verilog module.

Amaranth emits one Verilog module per instance, so a system of N identical
dies (or links) repeats each one's Verilog N times: generation time and the
C++ that Verilator compiles grow with N. For simulation Verilog a top given a
:class:`Sharing` (``System(shared=...)``, the fabric builders' ``shared``)
replaces such children by instances of one module per distinct parameter set
-- a *part* (:class:`Part`), converted once by the caller. Amaranth's simulator
always runs the flat design; the cross-simulator tests check that both give
identical cycles and results.

What a child that is an instance becomes is the :class:`Instancer`'s choice:
by default an Amaranth :class:`~amaranth.hdl.Instance`; a simulator backend may
pass its own (the native backend records the instances instead and steps one
Verilated model per instance, :mod:`epfabric.sim.backends.native_build`).
"""

from amaranth.hdl import ClockSignal, Instance, ResetSignal, Value
from amaranth.lib.wiring import In

__all__ = ["Instancer", "SharedModule", "Sharing", "Part", "instance_ports"]


def instance_ports(iface, skip=()):
    """``[(port, is_input, value)]`` of interface object ``iface``: every member of its
    signature, named as Amaranth names ports (path joined with ``__``), but those in ``skip``."""
    ports = []
    for path, member, value in iface.signature.flatten(iface):
        key = "__".join(str(p) for p in path)
        if key not in skip:
            ports.append((key, member.flow == In, Value.cast(value)))
    return ports


class Instancer:
    """Makes a child that is an instance of a shared module an Amaranth ``Instance``.

    The default of :class:`Sharing`. Another instancer (a subclass) stands in something
    else for the instance -- :meth:`instance` returns what the parent adds as its submodule.
    """

    #: :meth:`instance` returns an Amaranth ``Instance``, whose output bits Amaranth's
    #: netlist numbers in 16 bits: a wider child stays a component
    #: (:data:`~epfabric.hw.topology.MAX_INSTANCE_OUTPUT_BITS`)
    makes_instances = True

    def instance(self, module, iface, skip, consts):
        """The submodule standing for an instance of :class:`SharedModule` ``module`` wired to
        interface object ``iface`` (ports as :func:`instance_ports`; ``consts``: further
        input ports driven by constants)."""
        ports = {"i_clk": ClockSignal("sync")}
        if module.has_reset:
            ports["i_rst"] = ResetSignal("sync")
        for key, is_input, value in instance_ports(iface, skip):
            ports[("i_" if is_input else "o_") + key] = value
        for key, value in consts.items():
            ports["i_" + key] = value
        return Instance(module.name, **ports)


class SharedModule:
    """One Verilog module that several children of a top are instances of.

    The parent (:class:`~epfabric.hw.system.System` for its dies,
    :class:`~epfabric.hw.die.Die` for its cores,
    :class:`~epfabric.hw.topology.Fabric` for its links and switches) is
    given one per kind of child and elaborates each child as
    :meth:`instance`; the caller converts the module's :attr:`part` once.

    Parameters
    ----------
    name : str
        Verilog module name.
    has_reset : bool
        The module has a ``rst`` port.
    instancer : Instancer or None
        What an instance becomes (``None``: an ``Instance``).
    part : Part or None
        The component the module is converted from (its signature is an instance's).

    Raises
    ------
    TypeError
        On a parameter of the wrong type.
    """

    def __init__(self, name, *, has_reset, instancer=None, part=None):
        if not isinstance(name, str):
            raise TypeError(f"name must be a Verilog module name, not {name!r}")
        if instancer is not None and not isinstance(instancer, Instancer):
            raise TypeError(f"instancer must be an Instancer or None, not {instancer!r}")
        if part is not None and not isinstance(part, Part):
            raise TypeError(f"part must be a Part or None, not {part!r}")
        self.name, self.has_reset = name, bool(has_reset)
        self.instancer = Instancer() if instancer is None else instancer
        self.part = part

    def __repr__(self):
        return f"SharedModule({self.name!r}, has_reset={self.has_reset})"

    def instance(self, iface, skip=(), **consts):
        """The instance of this module wired to interface object ``iface``.

        ``iface`` has the module's signature (``signature.create()``); every member
        becomes the port named as Amaranth names ports (path joined with ``__``).
        ``consts`` drive further input ports with constants; ``skip`` names
        members driven that way.
        """
        return self.instancer.instance(self, iface, skip, consts)


class Part:
    """The component a shared module is converted from, built only when it is converted.

    A converter keeps the Verilog of parts it converted (keyed by :attr:`key`, what
    defines the part: its class and parameters) and converts a part again only when that
    is missing -- or when the part was built anyway (:attr:`built`: something needed its
    signature and none was given), since a built component must be used.

    Parameters
    ----------
    cls : type
        The component's class.
    signature : wiring.Signature or None
        Its signature, computed without building it (``cls.signature_for``); ``None``:
        asking for :attr:`signature` builds the component.
    **params
        Its constructor's keyword parameters.
    """

    def __init__(self, cls, *, signature=None, **params):
        self.cls, self.params = cls, params
        self._signature, self._component = signature, None

    def __repr__(self):
        return f"Part({self.cls.__qualname__}, {self.params!r})"

    @property
    def key(self):
        """Text naming what defines the component: its class and parameters."""
        params = ", ".join(f"{k}={v!r}" for k, v in sorted(self.params.items()))
        return f"{self.cls.__module__}.{self.cls.__qualname__}({params})"

    @property
    def signature(self):
        return self._signature if self._signature is not None else self.component().signature

    @property
    def built(self):
        """Whether the component was built (and must be converted)."""
        return self._component is not None

    def component(self):
        """The component, built on the first call."""
        if self._component is None:
            self._component = self.cls(**self.params)
        return self._component


class Sharing:
    """How a top builds its repeated blocks: as instances of shared Verilog modules.

    Given to :class:`~epfabric.hw.system.System` (``shared``) and the fabric
    builders (:func:`~epfabric.hw.topology.superpod`,
    :func:`~epfabric.hw.topology.star`), which describe one :class:`Part` per
    distinct block, for the caller to convert, and make each child an instance of
    its :class:`SharedModule`.

    Parameters
    ----------
    has_reset : bool
        The shared modules have a ``rst`` port.
    instancer : Instancer or None
        What the top's own instances become (``None``: ``Instance``; the die
        module's cores are always ``Instance`` s, inside the die's module).

    Raises
    ------
    TypeError
        On a parameter of the wrong type.
    """

    def __init__(self, *, has_reset, instancer=None):
        if instancer is not None and not isinstance(instancer, Instancer):
            raise TypeError(f"instancer must be an Instancer or None, not {instancer!r}")
        self.has_reset = bool(has_reset)
        self.instancer = Instancer() if instancer is None else instancer

    def __repr__(self):
        return f"Sharing(has_reset={self.has_reset})"

    def module(self, name, part, *, inner=False):
        """The :class:`SharedModule` ``name`` converted from ``part``; ``inner``: instantiated
        inside another part (a die's cores), so an ``Instance`` whatever the instancer."""
        return SharedModule(name, has_reset=self.has_reset, part=part,
                            instancer=Instancer() if inner else self.instancer)
