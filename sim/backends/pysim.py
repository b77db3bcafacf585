"""Amaranth's simulator as a backend: the intent runs in this process, an async testbench."""

import collections
import hashlib
import sys
import time
from contextlib import nullcontext

from ..output import log_event, waveform_dir
from ..waves import Waveform, fit_gtkw, read_dump, vcd_edges
from .testbench import CLOCK_PERIOD_NS, SimulationError, Testbench

__all__ = ["PysimTestbench", "run_pysim"]

# Amaranth's simulator compiles every process to Python; wide designs (512 B
# blocks) nest expressions deeper than Python's default limit allows.
sys.setrecursionlimit(max(sys.getrecursionlimit(), 20000))


def _cheap_write_enables():
    """Make Amaranth's simulator compute a memory write port's enable mask in O(enable bits).

    Amaranth 0.5's compiler builds the mask as ``Cat(bit.replicate(granularity) for bit in
    en)`` (``amaranth/sim/_pyrtl.py``, its only ``Cat``): one term per *data* bit, evaluated on
    every clock edge whether or not the port writes. A core's 4,096-bit unified buffer at
    32-bit granularity, a 4,096-bit HBM row and a FIFO carrying a 512 B block each compiled to
    about 210 kB of Python a memory: these processes were about half of a small machine's
    simulated time and much of its compile time (py-spy, the small combine case). Here each
    enable bit becomes ``(bit * (2**g - 1))[:g]``: the same mask, bit for bit (an unsigned
    1-bit value times an all-ones constant), one term per enable bit. Any other ``Cat`` the
    compiler might build is left to Amaranth's. The cross-simulator tests (Amaranth's
    simulator against Icarus and Verilator, cycles, traces and memories) check the result.
    """
    try:
        from amaranth.hdl import Cat, Const
        from amaranth.hdl._ast import Concat
        from amaranth.sim import _pyrtl
    except ImportError:                                  # another Amaranth: leave it as it is
        return
    if getattr(_pyrtl, "Cat", None) is not Cat:
        return

    def cat(*args):
        parts = list(args[0]) if len(args) == 1 and not hasattr(args[0], "shape") else list(args)
        out = []
        for part in parts:
            bits = part.parts if isinstance(part, Concat) else ()
            if not bits or len(bits[0]) != 1 or any(b is not bits[0] for b in bits):
                return Cat(*parts)
            g = len(bits)
            out.append((bits[0] * Const((1 << g) - 1, g))[:g])
        return Cat(*out)

    _pyrtl.Cat = cat


_cheap_write_enables()


class PysimTestbench(Testbench):
    """:class:`Testbench` over an ``amaranth.sim`` testbench context."""

    def __init__(self, ctx, component):
        super().__init__(component)
        self._ctx = ctx

    def set(self, path, value):
        self._ctx.set(self._lookup(path)[0], self.pack(path, value))

    async def get(self, path):
        return self._unpack(path, self._ctx.get(self._lookup(path)[0]))

    async def tick(self, n=1):
        for _ in range(n):
            await self._ctx.tick()
        self.cycle += n


def _default_traces(component):
    traces = getattr(component, "gtkw_traces", None)
    if callable(traces):
        return traces()
    return [obj for _p, _f, obj in component.signature.flatten(component)]


#: simulators kept for reuse (:func:`_simulator`), the most recently used last
SIMULATOR_CACHE = 4
_SIMULATORS = collections.OrderedDict()


def _simulator(spec, keep):
    """``(simulator, component, slot)`` of ``spec``'s design, reused from an earlier run with
    the same ``keep`` token.

    Building a simulator -- elaborating the design and compiling its processes to Python --
    took 8.5 s of each 14.5 s run of the small dispatch case (under cProfile), and a machine is run
    several times (a kernel's load, its run; a combine's dispatch first). A kept simulator is
    :meth:`~amaranth.sim.Simulator.reset` (every signal and memory back to its initial value,
    its clock and testbench restarted) and its one testbench runs whatever ``slot`` holds.

    Reuse is scoped by ``keep`` (a :class:`~epfabric.sim.backends.machine.SimulatorBackend`'s
    own token), not by the design's description alone: a design is also what the code
    around its parameters makes of them, and a test that patches a preset's method between
    two backends must get the new design. The last :data:`SIMULATOR_CACHE` are kept; a run
    that fails drops its simulator.
    """
    from amaranth.sim import Simulator

    key = None if keep is None else (keep, spec.to_json())
    if key in _SIMULATORS:
        _SIMULATORS.move_to_end(key)
        sim, component, slot = _SIMULATORS[key]
        sim.reset()
        return sim, component, slot
    t0 = time.monotonic()
    component = spec.build()
    sim = Simulator(component)
    log_event(pysim_build=lambda: _design_id(spec), seconds=time.monotonic() - t0)
    sim.add_clock(CLOCK_PERIOD_NS * 1e-9)
    slot = {}

    async def testbench(ctx):
        bench = PysimTestbench(ctx, component)
        slot["out"]["result"] = await slot["intent"](bench, **slot["args"])
        slot["out"]["cycles"] = bench.cycle

    sim.add_testbench(testbench)
    if key is not None and SIMULATOR_CACHE:
        _SIMULATORS[key] = (sim, component, slot)
        while len(_SIMULATORS) > SIMULATOR_CACHE:
            _SIMULATORS.popitem(last=False)
    return sim, component, slot


def _design_id(spec):
    """A short name of ``spec``'s design for the build log (its description's hash)."""
    return hashlib.sha1(spec.to_json().encode()).hexdigest()[:12]


def run_pysim(spec, intent, args, waveform=None, keep=None):
    """Run ``intent(bench, **args)`` on ``spec``'s component; return ``(result, cycles)``.

    ``waveform`` (a name) writes ``<waveform_dir>/<name>.vcd`` and a ``.gtkw``
    save file listing the component's ``gtkw_traces()``, zoomed to the whole
    run. A :class:`~epfabric.sim.waves.Waveform` writes the VCD to its
    next path (no save file: its owner writes one) and records the edges of
    its watched ports. ``keep``: runs with the same token (and design) share one simulator,
    reset between them (:func:`_simulator`); ``None``: a simulator of its own.
    """
    if isinstance(waveform, Waveform) and waveform.format != "vcd":
        raise SimulationError(f"Amaranth's simulator writes VCD only, not {waveform.path.name!r}")
    out = {}
    if waveform:
        keep = None         # a simulator of its own: a VCD writer stays attached to it
    sim, component, slot = _simulator(spec, keep)
    slot.update(out=out, intent=intent, args=args)
    vcd = gtkw = None
    if isinstance(waveform, Waveform):
        vcd = waveform.next_path()
        vcd.parent.mkdir(parents=True, exist_ok=True)
        writer = sim.write_vcd(str(vcd))
    elif waveform:
        wdir = waveform_dir()
        wdir.mkdir(parents=True, exist_ok=True)
        vcd, gtkw = wdir / f"{waveform}.vcd", wdir / f"{waveform}.gtkw"
        writer = sim.write_vcd(str(vcd), str(gtkw), traces=_default_traces(component))
    else:
        writer = nullcontext()
    t0 = time.monotonic()
    try:
        with writer:
            sim.run()
    except BaseException as exc:
        _SIMULATORS.pop((keep, spec.to_json()), None)   # a run cut short: afresh next time
        if isinstance(exc, SimulationError) or not isinstance(exc, Exception):
            raise
        raise SimulationError(f"test intent failed on pysim: {type(exc).__name__}: {exc}") from exc
    if isinstance(waveform, Waveform):
        dump = read_dump(vcd)
        waveform.add_run(vcd, simulator="pysim", spec=spec, edges=vcd_edges(dump, waveform.watch))
    elif gtkw is not None:
        fit_gtkw(gtkw, read_dump(vcd))
    log_event(pysim_run=lambda: _design_id(spec), cycles=out["cycles"],
              seconds=time.monotonic() - t0)
    return out["result"], out["cycles"]
