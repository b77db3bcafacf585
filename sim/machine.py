"""Backends for :class:`epfabric.sw.driver.Machine`: the system top on any simulator.

Every backend runs the same *session intent* (:func:`session_intent`) through
the three-simulator harness, so Amaranth's simulator, Icarus and Verilator
execute literally the same host-port sequence on the same system top:

1. host writes, one per cycle (instruction words, HBM words, core enables);
2. ``max_cycles`` and a ``start`` pulse;
3. a wait for ``stop`` (every enabled core halted, or the watchdog) — on
   Icarus/Verilator a native edge wait, with no Python per simulated cycle;
4. read back the cycle counter, per-core status, fabric counters, the MARK
   trace buffer and every modelled HBM word through the host read port (all
   ranks at once, ``host_re_all``).
"""

import time

from epfabric.sw.driver import Backend

from .harness import ComponentSpec, run
from .tools import SIMULATORS

__all__ = ["build_system", "system_spec", "session_intent", "HarnessBackend", "backend"]


def build_system(**config):
    """JSON-facing factory: :class:`~epfabric.hw.system.System` from a MachineConfig dict."""
    from epfabric.hw.system import System
    from epfabric.sw.presets import get_preset

    config = dict(config)
    preset = get_preset(config.pop("preset"))
    topology = tuple(config.pop("topology"))
    return System(preset=preset, topology=topology, **config)


def system_spec(config):
    """The harness :class:`ComponentSpec` of a machine configuration dict."""
    return ComponentSpec("epfabric.sim.machine:build_system", dict(config))


async def _host_reads_all(bench, ranks, n_words, words_per_block):
    """Read ``n_words`` modelled HBM words of every rank at once (``host_re_all``), one per cycle."""
    out = {r: [] for r in range(ranks)}
    addrs = [(i // words_per_block) << 9 | (i % words_per_block) << 2 for i in range(n_words)]
    i = got = 0
    while got < n_words:
        if i < n_words:
            bench.set("host_re_all", 1)
            bench.set("host_addr", addrs[i])
            i += 1
        else:
            bench.set("host_re_all", 0)
        await bench.tick()
        if await bench.get("host_rvalid"):
            for r in range(ranks):
                out[r].append(await bench.get(f"host_rdata_all.{r}"))
            got += 1
    bench.set("host_re_all", 0)
    return out


async def session_intent(bench, session):
    """Harness intent: one machine session (see the module docstring)."""
    system = bench.component
    for target, rank, core, addr, word in session["writes"]:
        bench.set("host_we", 1)
        bench.set("host_target", target)
        bench.set("host_rank", rank)
        bench.set("host_core", core)
        bench.set("host_addr", addr)
        bench.set("host_wdata", word)
        await bench.tick()
    bench.set("host_we", 0)
    bench.set("max_cycles", session["max_cycles"])
    t0 = time.monotonic()
    bench.set("start", 1)
    await bench.tick()
    bench.set("start", 0)
    await bench.wait_high("stop", timeout=session["max_cycles"] + 1000)
    run_wall_s = time.monotonic() - t0
    result = {name: await bench.get(name) for name in ("cycle", "done", "timeout")}
    result["run_wall_s"] = run_wall_s
    result["cycles"] = result.pop("cycle")
    n_cores = system.n_cores
    cores = []
    for i in range(n_cores):
        cores.append({k: await bench.get(f"core_{k}.{i}")
                      for k in ("pc", "halted", "fault", "waiting", "wait_addr")})
    result["cores"] = cores
    result["counters"] = {name: [await bench.get(f"fabric_{name}.{r}") for r in range(system.ranks)]
                          for name in ("tx_blocks", "rx_blocks", "tx_stalls")}
    trace = []
    count = await bench.get("trace_count")
    for i in range(count):
        bench.set("trace_raddr", i)
        await bench.tick()  # trace_rdata is valid one tick after trace_raddr
        entry = bench.decode("trace_rdata", await bench.get("trace_rdata"))
        trace.append([int(entry.core), int(entry.cycle), int(entry.event)])
    result["trace"] = trace
    result["trace_dropped"] = await bench.get("trace_dropped")
    result["mem"] = await _host_reads_all(bench, system.ranks, session["read_words"],
                                          session["words_per_block"])
    return result


class HarnessBackend(Backend):
    """Run sessions on ``simulator`` (``pysim``, ``icarus`` or ``verilator``).

    ``verbose`` prints the wall time of each run (generation/build included
    for the Verilog simulators; builds are cached by content).
    """

    def __init__(self, simulator="pysim", *, verbose=False, waveform=None):
        if simulator not in SIMULATORS:
            raise ValueError(f"backend must be one of {', '.join(SIMULATORS)}, not {simulator!r}")
        self.name = simulator
        self.verbose = verbose
        self.waveform = waveform
        self.last_wall_s = None

    def execute(self, config, session):
        t0 = time.monotonic()
        if self.verbose:
            print(f"[{self.name}] running {config['topology']} x {config['aivs_per_die']} AIVs "
                  f"(max {session['max_cycles']} cycles) ...", flush=True)
        result, _ = run(system_spec(config), session_intent, {"session": session},
                        simulator=self.name, waveform=self.waveform)
        self.last_wall_s = time.monotonic() - t0
        if self.verbose:
            print(f"[{self.name}] {result['cycles']} cycles in {self.last_wall_s:.1f} s", flush=True)
        return result


def backend(name, **kw):
    """A backend by name: ``pysim``, ``icarus`` or ``verilator``."""
    return HarnessBackend(name, **kw)
