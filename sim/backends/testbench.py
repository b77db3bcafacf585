"""The testbench API: one test intent, any simulator.

A *test intent* is an ``async def intent(bench, **args)`` that drives a
component through a :class:`Testbench` — ``bench.set(path, value)``,
``await bench.get(path)``, ``await bench.tick()`` — and returns a
JSON-serialisable result. :func:`epfabric.sim.backends.run` executes it on
Amaranth's simulator, or on the Verilog Amaranth generates under cocotb on
Icarus or Verilator, so one intent checks the same hardware on all three.

Port paths are the component's signature paths joined with ``.``
(``"i_stream.payload"``); in Verilog they are joined with ``__``, which is how
Amaranth names flattened ports. Values are ints; a port with a
``data.Layout`` shape also accepts a mapping/sequence (packed with the layout)
and :meth:`Testbench.decode` turns a raw int back into a ``data.Const``.

Timing contract (identical on every simulator): inputs set between ticks are
sampled by the next rising edge; ``tick()`` returns after that edge with
registers updated and combinational logic settled; ``get`` after ``set`` sees
the combinational effect of the new inputs.
"""

import importlib
import inspect
import json
from dataclasses import dataclass, field
from pathlib import Path

from amaranth.hdl import Shape, Value
from amaranth.lib import data

from ..waves import CLOCK_PERIOD_NS   # the waveforms' time unit is the simulations' clock

__all__ = ["ComponentSpec", "Testbench", "SimulationError", "wait_until", "stream_put",
           "stream_get", "intent_ref", "resolve", "CLOCK_PERIOD_NS"]


class SimulationError(AssertionError):
    """A test intent failed or a simulator could not run it."""


def resolve(ref):
    """The object named by ``"module:qualified.name"``."""
    mod_name, _, qual = ref.partition(":")
    obj = importlib.import_module(mod_name)
    for part in qual.split("."):
        obj = getattr(obj, part)
    return obj


def intent_ref(intent):
    """``("module:qualname", folder of its file)`` of an intent, to find it in another process."""
    return f"{intent.__module__}:{intent.__qualname__}", str(Path(inspect.getfile(intent)).parent)


@dataclass(frozen=True)
class ComponentSpec:
    """How to construct a component: ``"module:callable"`` plus JSON-able keyword parameters.

    The spec (not the object) is what crosses into the cocotb process, which
    needs the component's ports (:meth:`interface`).
    """
    factory: str
    params: dict = field(default_factory=dict)

    def build(self, **extra):
        """The component; ``extra``: factory parameters beyond the spec's (``shared``)."""
        return resolve(self.factory)(**self.params, **extra)

    def shares(self):
        """Whether the factory builds the component's repeated blocks as instances of shared
        Verilog modules when given ``shared`` (a :class:`~epfabric.hw.instances.Sharing`;
        :class:`~epfabric.hw.system.System`), for the Verilog simulators."""
        return "shared" in inspect.signature(resolve(self.factory)).parameters

    def interface(self):
        """What a testbench of the component's Verilog drives (cocotb, native): an interface
        object of the signature the factory's own ``signature_for(**params)`` gives, with
        the parameters it keeps as attributes (:class:`~epfabric.hw.signature.ParamSignature`)
        -- nothing is built. A factory without one is built: its ports are the component's
        (in a process that elaborates nothing, as cocotb's, Amaranth leaves that unreported;
        a factory the native backend runs in its caller's process needs a ``signature_for``).
        """
        factory = resolve(self.factory)
        signature_for = vars(factory).get("signature_for")
        if signature_for is None:
            return self.build()
        return getattr(factory, "signature_for")(**self.params).create()

    def to_json(self):
        return json.dumps({"factory": self.factory, "params": self.params}, sort_keys=True)

    @classmethod
    def from_json(cls, text):
        d = json.loads(text)
        return cls(d["factory"], d["params"])


def _ports(component):
    """Map ``"a.b"`` path strings to (Value, shape) for every signature member."""
    ports = {}
    for path, _flow, obj in component.signature.flatten(component):
        key = ".".join(str(p) for p in path)
        ports[key] = (Value.cast(obj), obj.shape() if hasattr(obj, "shape") else Shape.cast(obj))
    return ports


class Testbench:
    """Simulator-independent access to a component's ports (see the module docstring).

    ``cycle`` counts the ticks since the intent started; simulators keep it
    exact even when they wait natively (:meth:`wait_high`).
    """

    def __init__(self, component):
        self.component = component
        self._ports = _ports(component)
        self.cycle = 0

    def _lookup(self, path):
        try:
            return self._ports[path]
        except KeyError:
            raise KeyError(f"component has no port {path!r}; ports: "
                           f"{', '.join(sorted(self._ports))}") from None

    def has_port(self, path):
        """Whether the component has a port ``path``."""
        return path in self._ports

    def pack(self, path, value):
        """Raw int for ``value`` on port ``path`` (mappings packed with its layout)."""
        value_obj, shape = self._lookup(path)
        if isinstance(shape, data.Layout) and not isinstance(value, int):
            value = shape.const(value).as_bits()
        elif hasattr(value, "as_bits"):
            value = value.as_bits()
        width = len(value_obj)
        return int(value) & ((1 << width) - 1)

    def _unpack(self, path, raw):
        value_obj, shape = self._lookup(path)
        raw = int(raw)
        if Shape.cast(shape).signed and raw >= 1 << (len(value_obj) - 1):
            raw -= 1 << len(value_obj)
        return raw

    def decode(self, path, raw):
        """Turn a raw int read from ``path`` into a ``data.Const`` if it has a layout."""
        _, shape = self._lookup(path)
        return shape.from_bits(raw) if isinstance(shape, data.Layout) else raw

    def set(self, path, value):
        raise NotImplementedError

    async def get(self, path):
        raise NotImplementedError

    async def tick(self, n=1):
        raise NotImplementedError

    async def wait_high(self, path, *, timeout=None):
        """Tick until 1-bit port ``path`` is 1 (at most ``timeout`` cycles, then raise).

        Simulators may override this with a native wait so no Python runs per
        cycle (cocotb: an edge trigger); ``cycle`` is kept exact either way.
        """
        start = self.cycle
        while not await self.get(path):
            if timeout is not None and self.cycle - start >= timeout:
                raise SimulationError(f"timeout: {path} still 0 after {timeout} cycles")
            await self.tick()


async def wait_until(bench, path, value=1, *, timeout=10_000):
    """Tick until port ``path`` equals ``value``; raise after ``timeout`` cycles."""
    start = bench.cycle
    while await bench.get(path) != value:
        if bench.cycle - start >= timeout:
            raise SimulationError(f"timeout: {path} != {value} after {timeout} cycles "
                                  f"(cycle {bench.cycle})")
        await bench.tick()


async def stream_put(bench, name, payload, *, timeout=10_000):
    """Present ``payload`` on stream ``name`` until accepted (one transfer)."""
    bench.set(f"{name}.payload", payload)
    bench.set(f"{name}.valid", 1)
    await wait_until(bench, f"{name}.ready", 1, timeout=timeout)
    await bench.tick()
    bench.set(f"{name}.valid", 0)


async def stream_get(bench, name, *, timeout=10_000, decode=True):
    """Accept one transfer from stream ``name`` and return its payload."""
    bench.set(f"{name}.ready", 1)
    await wait_until(bench, f"{name}.valid", 1, timeout=timeout)
    raw = await bench.get(f"{name}.payload")
    await bench.tick()
    bench.set(f"{name}.ready", 0)
    return bench.decode(f"{name}.payload", raw) if decode else raw
