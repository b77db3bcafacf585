"""The three-simulator harness (sim/harness.py) itself."""

import pytest

from epfabric.sim import harness
from epfabric.sim.harness import SimulationError, stream_get, stream_put, wait_until
from epfabric.sim.tools import missing_reason
from epfabric.sim.vector_driver import command, run_commands

from utils import VECTOR_SPEC as SPEC
from utils import ComponentSpec, run


async def put_get_intent(bench, a):
    await stream_put(bench, "i_stream", {"op": 4, "cond": 0, "length": len(a), "s": [0, 0, 0],
                                         "a": a + [0] * (8 - len(a)), "b": [0] * 8})
    rsp = await stream_get(bench, "o_stream")
    return {"sum": int(rsp.sum), "cycle": bench.cycle}


async def failing_intent(bench):
    await bench.tick(3)
    raise RuntimeError("intent exploded at cycle 3")


async def timeout_intent(bench):
    await wait_until(bench, "o_stream.valid", 1, timeout=20)


async def bad_port_intent(bench):
    bench.set("no_such_port", 1)


def test_stream_helpers(simulator):
    result, cycles = run(SPEC, put_get_intent, {"a": [1, 2, 3]}, simulator=simulator)
    assert result["sum"] == 6
    # put: presented in cycle 0, accepted at edge 1; response valid in cycle 2, taken at edge 3.
    assert cycles == result["cycle"] == 3


def test_intent_errors_surface(simulator):
    with pytest.raises(SimulationError, match="intent exploded at cycle 3"):
        run(SPEC, failing_intent, simulator=simulator)


def test_timeout_and_bad_port_messages():
    with pytest.raises(SimulationError, match=r"timeout: o_stream.valid != 1 after 20 cycles"):
        run(SPEC, timeout_intent)
    with pytest.raises(SimulationError, match="no port 'no_such_port'; ports: i_stream.payload"):
        run(SPEC, bad_port_intent)


def test_unknown_simulator():
    with pytest.raises(ValueError, match="simulator must be one of pysim, icarus, verilator, not 'ghdl'"):
        run(SPEC, put_get_intent, {"a": [1]}, simulator="ghdl")


@pytest.mark.parametrize("sim", ["icarus", "verilator"])
def test_build_is_cached_by_content(sim):
    if missing_reason(sim):
        pytest.skip(missing_reason(sim))
    first = harness._build(SPEC, sim, waves=False)
    stamp = (first / "built.ok").stat().st_mtime_ns
    run(SPEC, run_commands, {"commands": [command("COUNT", [1, 2], s=(2, 2, 2))]}, simulator=sim)
    assert harness._build(SPEC, sim, waves=False) == first
    assert (first / "built.ok").stat().st_mtime_ns == stamp
    # Another design, or another build option, gets another cache entry.
    other = harness.verilog_of(ComponentSpec(SPEC.factory, {**SPEC.params, "lanes": 2}), sim)
    assert harness.build_dir_for(other, sim, waves=False) != first
    assert harness.build_dir_for(harness.verilog_of(SPEC, sim), sim, waves=True) != first
