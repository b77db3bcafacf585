"""Amaranth's simulator as a backend: the intent runs in this process, an async testbench."""

from contextlib import nullcontext

from ..output import waveform_dir
from .testbench import CLOCK_PERIOD_NS, SimulationError, Testbench

__all__ = ["PysimTestbench", "run_pysim"]


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


def run_pysim(spec, intent, args, waveform=None):
    """Run ``intent(bench, **args)`` on ``spec``'s component; return ``(result, cycles)``.

    ``waveform`` (a name) writes ``<waveform_dir>/<name>.vcd`` and a ``.gtkw``
    save file listing the component's ``gtkw_traces()``.
    """
    from amaranth.sim import Simulator

    component = spec.build()
    sim = Simulator(component)
    sim.add_clock(CLOCK_PERIOD_NS * 1e-9)
    out = {}

    async def testbench(ctx):
        bench = PysimTestbench(ctx, component)
        out["result"] = await intent(bench, **args)
        out["cycles"] = bench.cycle

    sim.add_testbench(testbench)
    if waveform:
        wdir = waveform_dir()
        wdir.mkdir(parents=True, exist_ok=True)
        writer = sim.write_vcd(str(wdir / f"{waveform}.vcd"), str(wdir / f"{waveform}.gtkw"),
                               traces=_default_traces(component))
    else:
        writer = nullcontext()
    try:
        with writer:
            sim.run()
    except SimulationError:
        raise
    except Exception as exc:
        raise SimulationError(f"test intent failed on pysim: {type(exc).__name__}: {exc}") from exc
    return out["result"], out["cycles"]
