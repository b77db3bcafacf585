"""Backends for :class:`epfabric.sw.machine.Machine`: a machine's top on any simulator.

Every backend runs the same *session intent* (:func:`session_intent`) through
:func:`epfabric.sim.backends.run`, so Amaranth's simulator, Icarus and
Verilator execute literally the same host-port sequence
(:mod:`epfabric.sim.backends.host`) on the same top:

1. host writes, one per cycle (instruction words, memory words, core
   enables, control registers);
2. ``max_cycles`` and a ``start`` pulse;
3. a wait for ``stop`` (the machine finished, or its watchdog fired) — on
   Icarus/Verilator a native edge wait, with no Python per simulated cycle;
4. read back run control, the status outputs the configuration names, the
   MARK trace buffer (AIV machine), the counter sampler's memory (a machine with
   ``sample_depth``) and every read-back memory word of every rank at once (``re_all``).
"""

import itertools
import time

from ...hw.validate import check_choice
from ...sw.machine import Backend
from . import run
from .host import host_read_blocks, host_run, host_write
from .testbench import ComponentSpec
from .toolchain import SIMULATORS

__all__ = ["machine_spec", "session_intent", "SimulatorBackend", "backend"]


def machine_spec(config):
    """The :class:`ComponentSpec` of a machine configuration's top. Its preset is the first
    one that builds the same hardware (:func:`~epfabric.sw.presets.hardware_twin`), so a
    preset that differs only in runtime knobs (``cm384-fit``) reuses its base's builds."""
    from ...sw.presets import hardware_twin
    d = config.to_dict()
    kind = d["topology"][0] if "topology" in d else "star"
    d["preset"] = hardware_twin(d["preset"], kind)
    return ComponentSpec(config.factory, d)


async def _read_trace(bench):
    count = await bench.get("trace_count")
    direct = getattr(bench, "backdoor_trace", None)     # native: the buffer itself, no cycles
    raw = direct(count) if direct is not None else None
    if raw is None:
        raw = []
        for i in range(count):
            bench.set("trace_raddr", i)
            await bench.tick()  # trace_rdata is valid one tick after trace_raddr
            raw.append(await bench.get("trace_rdata"))
    trace = []
    for value in raw:
        entry = bench.decode("trace_rdata", value)
        trace.append([int(entry.core), int(entry.cycle), int(entry.event)])
    return trace, await bench.get("trace_dropped")


async def _read_samples(bench):
    """The counter sampler's entries (each a dict of the sample layout's fields) and its
    ``sample_dropped``, one entry a tick through ``sample_raddr`` -- or straight from the
    memory on the native backend (``backdoor_samples``, the MARK trace's rule)."""
    count = await bench.get("sample_count")
    direct = getattr(bench, "backdoor_samples", None)
    raw = direct(count) if direct is not None else None
    if raw is None:
        raw = []
        for i in range(count):
            bench.set("sample_raddr", i)
            await bench.tick()  # sample_rdata is valid one tick after sample_raddr
            raw.append(await bench.get("sample_rdata"))
    layout = bench.component.sample_rdata.shape()
    samples = []
    for value in raw:
        entry = bench.decode("sample_rdata", value)
        samples.append({name: int(entry[name]) if name == "cycle" else
                        [int(v) for v in entry[name]] for name, _ in layout})
    return samples, await bench.get("sample_dropped")


async def session_intent(bench, session):
    """Testbench intent: one machine session (see the module docstring)."""
    top = bench.component
    await host_write(bench, session["writes"])
    load_cycles = bench.cycle
    t0 = time.monotonic()
    result = await host_run(bench, session["max_cycles"])
    result["run_wall_s"] = time.monotonic() - t0
    result["status"] = {group: {key: [await bench.get(p) for p in ports]
                                for key, ports in fields.items()}
                        for group, fields in session["status"].items()}
    if session["trace"]:
        result["trace"], result["trace_dropped"] = await _read_trace(bench)
    if session.get("samples"):
        result["samples"], result["samples_dropped"] = await _read_samples(bench)
    blocks = [b for lo, n in session["read_blocks"] for b in range(lo, lo + n)]
    c0 = bench.cycle
    result["mem"] = await host_read_blocks(bench, top.ranks, blocks, session["words_per_block"],
                                           rows=session.get("rows", True))
    result["load_cycles"], result["read_cycles"] = load_cycles, bench.cycle - c0
    # Timing repeats (``epfabric bench``): after the read-back, run the same
    # session again -- ``repeat_writes`` (default: the session's writes), then
    # start -- until ``min_run_s`` of machine run time is measured; the result
    # above stays the first run's. ``repeat_writes`` must restore every word
    # the run changed (the bench adds zeroes for alltoall's receive blocks), so
    # each repeat starts from the same memory; the caller checks that every
    # repeat took the first run's cycles.
    runs = [[result["cycles"], result["run_wall_s"]]]
    while (session.get("min_run_s") and sum(w for _, w in runs) < session["min_run_s"]
           and len(runs) < session.get("max_repeats", 1000)):
        await host_write(bench, session.get("repeat_writes", session["writes"]))
        t0 = time.monotonic()
        again = await host_run(bench, session["max_cycles"])
        runs.append([again["cycles"], time.monotonic() - t0])
    result["runs"] = runs
    return result


_KEEP_TOKENS = itertools.count()


class SimulatorBackend(Backend):
    """Run sessions on ``simulator`` (``pysim``, ``icarus`` or ``verilator``).

    ``verbose`` prints the wall time of each run (generation/build included
    for the Verilog simulators; builds are cached by content). ``waveform``
    names a VCD to write; ``opt`` is the Verilator optimisation level.
    """

    def __init__(self, simulator="pysim", *, verbose=False, waveform=None, opt=None):
        self.name = check_choice("backend", simulator, SIMULATORS)
        self.verbose = verbose
        self.waveform = waveform
        self.opt = opt
        self.last_wall_s = None
        # this backend's runs of one design share a pysim simulator (sim/backends/pysim.py)
        self.keep = next(_KEEP_TOKENS)

    def execute(self, config, session):
        t0 = time.monotonic()
        if self.verbose:
            shape = f"{config.topology}" + (f" x {config.aivs_per_die} AIVs"
                                            if config.kind == "aiv" else f" {config.kind}")
            print(f"[{self.name}] running {shape} (max {session['max_cycles']} cycles) ...",
                  flush=True)
        result, _ = run(machine_spec(config), session_intent, {"session": session},
                        simulator=self.name, waveform=self.waveform, opt=self.opt,
                        keep=self.keep)
        self.last_wall_s = time.monotonic() - t0
        if self.verbose:
            run_s = result.get("run_wall_s")
            split = ("" if run_s is None else
                     f" (build and load {self.last_wall_s - run_s:.1f} s, run {run_s:.1f} s, "
                     f"{result['cycles'] / max(run_s, 1e-9):,.0f} cycles/s)")
            print(f"[{self.name}] {result['cycles']} cycles in {self.last_wall_s:.1f} s{split}",
                  flush=True)
        return result


def backend(name, **kw):
    """A backend by name: ``pysim``, ``icarus`` or ``verilator``."""
    return SimulatorBackend(name, **kw)
