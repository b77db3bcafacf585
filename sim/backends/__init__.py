"""Simulator backends: run one test intent on pysim, Icarus or Verilator.

Layers, lowest first:

* :mod:`.testbench` — the testbench API every intent is written against
  (:class:`Testbench`, :class:`ComponentSpec`, stream helpers);
* :mod:`.host` — the host-port protocol of every top with a host port
  (load, start, wait for ``stop``, read back) as testbench coroutines;
* :mod:`.pysim` — Amaranth's simulator, in this process;
* :mod:`.cocotb_runner` + :mod:`.cocotb_entry` — Icarus and Verilator under
  cocotb, with a build cache; :mod:`.toolchain` finds the tools;
* :mod:`.native` — ``native``: one Verilated model per distinct module,
  stepped from a C++ top through ctypes (no cocotb);
* :mod:`.machine` — :class:`~epfabric.sw.machine.Backend` implementations:
  what :class:`~epfabric.sw.machine.Machine` runs its sessions on.

:func:`run` is the one entry point below the machine layer.
"""

from .testbench import (CLOCK_PERIOD_NS, ComponentSpec, SimulationError, Testbench,
                        stream_get, stream_put, wait_until)
from .toolchain import SIMULATORS, missing_reason

__all__ = ["run", "ComponentSpec", "Testbench", "SimulationError", "stream_put", "stream_get",
           "wait_until", "SIMULATORS", "missing_reason", "CLOCK_PERIOD_NS"]


def run(spec, intent, args=None, *, simulator="pysim", waveform=None, opt=None, keep=None):
    """Run ``intent(bench, **args)`` on ``spec``'s component under ``simulator``.

    Returns ``(result, cycles)``: the intent's return value and ``bench.cycle``
    at its end. ``waveform`` (a name) writes ``<name>.vcd`` and a ``.gtkw``
    save file (pysim), or the simulator's own dump (cocotb), into
    :func:`~epfabric.sim.output.waveform_dir`. ``opt`` is the Verilator C++
    optimisation level (default
    :func:`~epfabric.sim.backends.cocotb_runner.verilator_opt`). ``keep`` (pysim): a token
    naming the runs that may share one simulator of the design (a machine backend's runs;
    :func:`~epfabric.sim.backends.pysim.run_pysim`); ``None``: a simulator of its own.
    """
    from ...hw.validate import check_choice
    args = dict(args or {})
    check_choice("simulator", simulator, SIMULATORS)
    reason = missing_reason(simulator)
    if reason:
        raise SimulationError(f"{simulator} unavailable: {reason}")
    if simulator == "pysim":
        from .pysim import run_pysim
        return run_pysim(spec, intent, args, waveform, keep=keep)
    if simulator == "native":
        from .native import run_native
        return run_native(spec, intent, args, waveform, opt)
    from .cocotb_runner import run_cocotb
    return run_cocotb(spec, intent, args, simulator, waveform, opt)
