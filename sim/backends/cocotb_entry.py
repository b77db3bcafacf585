"""cocotb test module: runs one test intent inside Icarus or Verilator.

Loaded by the simulator process that :func:`epfabric.sim.backends.run` starts;
the intent, its arguments, the component spec and the result file come from
``EPFABRIC_*`` environment variables. Not meant to be imported elsewhere.
"""

import json
import os
import traceback

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import FallingEdge, RisingEdge, SimTimeoutError, Timer, with_timeout
from cocotb.utils import get_sim_time
from amaranth.lib.wiring import In

from .testbench import CLOCK_PERIOD_NS, ComponentSpec, SimulationError, Testbench, resolve


#: cycles between progress reports of a long native wait
PROGRESS_CYCLES = 50_000


def _report(line):
    path = os.environ.get("EPFABRIC_PROGRESS")
    if path:
        with open(path, "a") as f:
            f.write(line + "\n")


class CocotbTestbench(Testbench):
    """Testbench over a cocotb DUT handle; the clock is GPI-driven.

    ``tick`` waits for the falling edge, half a period after the rising edge
    that updated the registers, so reads see settled values; a read after a
    write advances 1 ps first so the write's combinational effect has settled.
    """

    def __init__(self, dut, component):
        super().__init__(component)
        self._dut = dut
        self._handles = {}
        self._dirty = False

    def _handle(self, path):
        h = self._handles.get(path)
        if h is None:
            self._lookup(path)
            h = self._handles[path] = getattr(self._dut, path.replace(".", "__"))
        return h

    async def start(self):
        # impl="gpi": the clock toggles in the simulator's GPI layer (C++), not in
        # a Python coroutine; cocotb's default picks the Python clock unless
        # COCOTB_TRUST_INERTIAL_WRITES is set, which ran Python on every edge.
        Clock(self._dut.clk, CLOCK_PERIOD_NS, unit="ns", impl="gpi").start(start_high=False)
        # The simulation Verilog is reset-less (verilog.verilog_of): registers start at
        # their init values. Drive every input to 0 from the start: an undriven input is
        # Z in Icarus, and the registers it feeds would be X.
        for path, member, _obj in self.component.signature.flatten(self.component):
            if member.flow == In:
                self._handle(".".join(str(p) for p in path)).value = 0
        await FallingEdge(self._dut.clk)

    def set(self, path, value):
        self._handle(path).value = self.pack(path, value)
        self._dirty = True

    async def get(self, path):
        if self._dirty:
            await Timer(1, unit="ps")
            self._dirty = False
        return self._unpack(path, _int_of(self._handle(path)))

    async def tick(self, n=1):
        for _ in range(n):
            await FallingEdge(self._dut.clk)
        self._dirty = False
        self.cycle += n

    async def wait_high(self, path, *, timeout=None):
        """Wait on the signal's rising edge in the simulator: no Python per cycle."""
        if await self.get(path):
            return
        period_ps = CLOCK_PERIOD_NS * 1000
        t0 = get_sim_time("ps")
        waited = 0
        # Wake every PROGRESS_CYCLES to report progress (cocotb_runner._follow_progress
        # echoes it); between wake-ups no Python runs.
        while True:
            chunk = PROGRESS_CYCLES if timeout is None else min(PROGRESS_CYCLES, timeout - waited)
            if chunk <= 0:
                raise SimulationError(f"timeout: {path} still 0 after {timeout} cycles")
            try:
                await with_timeout(RisingEdge(self._handle(path)), chunk * period_ps, "ps")
                break
            except SimTimeoutError:
                waited += chunk
                _report(f"waiting for {path}: {waited} cycles"
                        + (f" of at most {timeout}" if timeout is not None else ""))
        await FallingEdge(self._dut.clk)
        self._dirty = False
        self.cycle += round((get_sim_time("ps") - t0) / period_ps)


def _value(handle):
    try:
        return int(handle.value)
    except ValueError:      # X/Z (Icarus before reset)
        return None


async def _watch(handle, changes):
    """Record ``(time in ps, value)`` at every change of ``handle`` (a waveform's run window)."""
    while True:
        await handle.value_change
        changes.append((get_sim_time("ps"), _value(handle)))


def _start_watches(dut):
    """Watch the top-level ports named in ``EPFABRIC_WATCH``; return ``{port: changes}``."""
    watched = {}
    for port in json.loads(os.environ.get("EPFABRIC_WATCH") or "[]"):
        handle = getattr(dut, port)
        watched[port] = [(get_sim_time("ps"), _value(handle))]
        cocotb.start_soon(_watch(handle, watched[port]))
    return watched


@cocotb.test()
async def run_intent(dut):
    result_file = os.environ["EPFABRIC_RESULT"]
    watched = {}
    try:
        spec = ComponentSpec.from_json(os.environ["EPFABRIC_SPEC"])
        intent = resolve(os.environ["EPFABRIC_INTENT"])
        with open(os.environ["EPFABRIC_ARGS_FILE"]) as f:
            args = json.load(f)
        bench = CocotbTestbench(dut, spec.interface())     # the top's ports: nothing is built
        await bench.start()
        bench.cycle = 0
        watched = _start_watches(dut)
        result = await intent(bench, **args)
        out = {"result": result, "cycles": bench.cycle}
    except Exception:
        out = {"error": traceback.format_exc()}
    if watched:
        out["watch"] = watched
    with open(result_file, "w") as f:
        json.dump(out, f)
    if "error" in out:
        raise AssertionError(out["error"])


def _int_of(handle):
    """The unsigned value of a logic signal: ``int(binary string, 2)``.

    cocotb's ``int(handle.value)`` builds a ``LogicArray`` and converts it
    bit by bit: about 1 ms for a 4096-bit block row (a host row read-back
    reads one per rank per cycle). Python's own parser is far faster. A value
    with X or Z bits goes through cocotb, whose error names them.
    """
    try:
        return int(handle._handle.get_signal_val_binstr(), 2)
    except ValueError:
        return int(handle.value)
