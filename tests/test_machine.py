"""The machine backends (sim/machine.py): same kernels, same answers on every simulator.

For ``pingpong``, ``syncall`` and ``alltoall`` on the shared small machine,
Amaranth's simulator, Icarus and Verilator must give identical cycle counts,
memory contents and MARK traces.
"""

import functools

import pytest

from epfabric.sw.kernels import alltoall, pingpong, syncall

from utils import machine

KERNELS = {
    "pingpong": (lambda m: pingpong.load(m), lambda m, r, s: pingpong.check(m, r, 1.0)),
    "syncall": (lambda m: syncall.load(m), lambda m, r, s: syncall.check(m, r)),
    "alltoall": (lambda m: alltoall.load(m, seed=3), lambda m, r, tok: alltoall.check(m, r, tok)),
}


@functools.lru_cache(maxsize=None)
def outcome(simulator, kernel):
    load, check = KERNELS[kernel]
    m = machine(simulator)
    state = load(m)
    report = m.run(50_000)
    verdict = check(m, report, state)
    return {"cycles": report.cycles, "trace": report.trace, "mem": m._readback,
            "correct": verdict["correct"], "counters": report.counters}


@pytest.mark.parametrize("kernel", sorted(KERNELS))
def test_same_cycles_memory_and_trace(simulator, kernel):
    got = outcome(simulator, kernel)
    assert got["correct"]
    ref = outcome("pysim", kernel)
    assert got["cycles"] == ref["cycles"]
    assert got["mem"] == ref["mem"]
    assert got["trace"] == ref["trace"]
    assert got["counters"] == ref["counters"]
