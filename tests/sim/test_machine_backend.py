"""The machine backends (sim/backends/machine.py): same kernels, same answers on every simulator.

For ``pingpong``, ``syncall`` and ``alltoall`` on the shared small machine,
every simulator's run is checked against numpy (the kernel's checker);
Amaranth's cycle counts and counters are pinned, and Icarus and Verilator
must give Amaranth's cycle counts, memory contents, MARK traces and counters.
"""

import functools

import pytest

from epfabric.sim.backends import ComponentSpec
from epfabric.sim.backends.machine import SimulatorBackend, backend, machine_spec
from epfabric.sw.kernels import KERNELS

from utils import MACHINE, machine, simulators

PARAMS = {"pingpong": {}, "syncall": {}, "alltoall": {"seed": 3}}
#: Amaranth's cycles and blocks sent per rank (pinned: a timing change must update them on purpose)
PINNED = {"alltoall": (57, [4, 4]), "pingpong": (141, [6, 6]), "syncall": (121, [4, 4])}
MAX_CYCLES = 2_000      # every run takes < 150 cycles: a hang fails in seconds


@functools.lru_cache(maxsize=None)
def outcome(simulator, kernel):
    k = KERNELS[kernel]
    m = machine(simulator)
    inputs = k.load(m, k.resolve_params(PARAMS[kernel]))
    report = m.run(MAX_CYCLES)
    verdict = k.check(m, report, inputs)
    return {"cycles": report.cycles, "trace": report.trace, "mem": m._readback,
            "correct": verdict["correct"], "problems": verdict["problems"],
            "counters": report.counters, "cores": report.cores, "backend": report.backend}


@pytest.mark.parametrize("kernel", sorted(PARAMS))
def test_amaranth_matches_numpy_and_the_pinned_cycles(kernel):
    got = outcome("pysim", kernel)
    assert got["correct"], got["problems"]
    assert got["backend"] == "pysim"
    assert (got["cycles"], got["counters"]["tx_blocks"]) == PINNED[kernel]
    assert got["counters"]["rx_blocks"] == got["counters"]["tx_blocks"]
    assert all(c["halted"] for c in got["cores"])


# Verilator: its own flat build of this machine (16 s of a cold `make test`), `slow`; the
# dispatch and combine tests compare the Verilator machine with Amaranth's simulator
@pytest.mark.parametrize("hdl_simulator", simulators("icarus", "verilator", "native",
                                                     slow=("verilator",)), indirect=True)
@pytest.mark.parametrize("kernel", sorted(PARAMS))
def test_same_cycles_memory_and_trace(hdl_simulator, kernel):
    got = outcome(hdl_simulator, kernel)
    assert got["correct"], got["problems"]
    assert got["backend"] == hdl_simulator
    ref = outcome("pysim", kernel)
    assert got["cycles"] == ref["cycles"]
    assert got["mem"] == ref["mem"]
    assert got["trace"] == ref["trace"]
    assert got["counters"] == ref["counters"]
    assert got["cores"] == ref["cores"]


def test_machine_spec_is_the_configurations_top():
    m = machine()
    spec = machine_spec(m.config)
    assert spec == ComponentSpec("epfabric.sw.tops:aiv_system", m.config.to_dict())
    assert spec.params["topology"] == list(MACHINE["topology"])
    be = backend("icarus", verbose=True)
    assert isinstance(be, SimulatorBackend) and be.name == "icarus" and be.verbose
