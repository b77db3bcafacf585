"""The simulator backends (sim/backends/) themselves: one intent, three simulators."""

import os

import pytest

from epfabric.sim import backends
from epfabric.sim.backends import SimulationError, stream_get, stream_put, wait_until
from epfabric.sim.backends.cocotb_runner import _public_ports_vlt, build, build_dir_for
from epfabric.sim.backends.verilog import TOPLEVEL, has_reset, verilog_of
from epfabric.sim.tb.vector_commands import command, run_commands

from utils import VECTOR_SPEC as SPEC
from utils import ComponentSpec, require_simulator, run


async def put_get_intent(bench, a):
    assert isinstance(bench, backends.Testbench)
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
    with pytest.raises(ValueError, match="simulator must be one of pysim, icarus, verilator, native, not 'ghdl'"):
        run(SPEC, put_get_intent, {"a": [1]}, simulator="ghdl")


@pytest.mark.parametrize("sim", ["icarus", "verilator"])
def test_build_is_cached_by_content(sim):
    require_simulator(sim)
    first = build(SPEC, sim, waves=False)
    stamp = (first / "built.ok").stat().st_mtime_ns
    run(SPEC, run_commands, {"commands": [command("COUNT", [1, 2], s=(2, 2, 2))]}, simulator=sim)
    assert build(SPEC, sim, waves=False) == first
    assert (first / "built.ok").stat().st_mtime_ns == stamp
    # Another design, or another build option, gets another cache entry.
    other = verilog_of(ComponentSpec(SPEC.factory, {**SPEC.params, "lanes": 2}), sim)
    assert build_dir_for(other, sim, waves=False) != first
    assert build_dir_for(verilog_of(SPEC, sim), sim, waves=True) != first


def test_verilator_verilog_is_reset_less_and_exposes_only_ports():
    """Verilator gets no ``rst`` input and a VPI config listing exactly the top's ports.

    Either a ``rst`` input or public internal wires puts logic into Verilator's
    input-combinational region, re-evaluated on every eval (see verilog_of).
    Icarus gets the same conversion with its ``always @*`` blocks kicked at time 0.
    """
    from epfabric.sim.backends.verilog import _kick_at_time_zero
    import re
    assert TOPLEVEL == "top"
    assert not has_reset("verilator") and not has_reset("icarus") and has_reset("pysim")
    vtext = verilog_of(SPEC, "verilator")
    itext = verilog_of(SPEC, "icarus")
    top_ports = lambda t: set(re.findall(r"^\s*(?:input|output)\s+(?:\[[^\]]*\]\s*)?(\S+);",
                                         re.search(r"^module top\(.*?^endmodule", t, re.M | re.S)[0],
                                         re.M))
    assert "rst" not in top_ports(vtext) and "clk" in top_ports(vtext)
    assert itext == _kick_at_time_zero(vtext) != vtext
    vlt = _public_ports_vlt(vtext).splitlines()
    assert vlt[0] == "`verilator_config"
    listed = {re.search(r'-var "([^"]+)"', line)[1] for line in vlt[1:]}
    assert listed == top_ports(vtext)
    assert 'public_flat_rw -module "top" -var "clk"' in vlt
    assert 'public_flat_rd -module "top" -var "o_stream__valid"' in vlt


async def long_wait_intent(bench):
    await bench.wait_high("o_stream.valid", timeout=60_000)


@pytest.mark.parametrize("sim", ["icarus", "verilator"])
def test_long_native_wait_reports_progress_and_times_out(sim, capfd):
    """A native wait wakes every 50 000 cycles to report, and still honours its timeout."""
    require_simulator(sim)
    with pytest.raises(SimulationError, match="timeout: o_stream.valid still 0 after 60000 cycles"):
        run(SPEC, long_wait_intent, simulator=sim)
    err = capfd.readouterr().err
    assert f"[epfabric] {sim}: waiting for o_stream.valid: 50000 cycles of at most 60000" in err
    assert "100000 cycles" not in err


def test_load_programs_puts_each_enable_after_its_program():
    from epfabric.hw.host import HostTarget
    from epfabric.sim.backends.host import load_programs
    IMEM, HBM, ENABLE = HostTarget.IMEM.value, HostTarget.HBM.value, HostTarget.ENABLE.value
    writes = load_programs([[1, 0, [7, 8]], [0, 1, [9]]], hbm=[[0, 0x204, 5]])
    assert writes == [[IMEM, 1, 0, 0, 7], [IMEM, 1, 0, 1, 8], [ENABLE, 1, 0, 0, 1],
                      [IMEM, 0, 1, 0, 9], [ENABLE, 0, 1, 0, 1], [HBM, 0, 0, 0x204, 5]]


def test_output_folders_progress_and_checks(tmp_path, monkeypatch, capsys):
    from epfabric.sim import output
    from epfabric.sim.backends.cocotb_runner import verilator_opt
    monkeypatch.setenv("EPFABRIC_BUILD_DIR", str(tmp_path / "b"))
    monkeypatch.setenv("EPFABRIC_WAVEFORM_DIR", str(tmp_path / "w"))
    assert output.build_cache_dir() == tmp_path / "b" and output.waveform_dir() == tmp_path / "w"
    monkeypatch.delenv("EPFABRIC_QUIET", raising=False)
    output.progress("building")
    monkeypatch.setenv("EPFABRIC_QUIET", "1")
    output.progress("silenced")
    assert capsys.readouterr().err == "[epfabric] building\n"
    assert output.check_output(None, "--json") is None
    assert output.check_output(str(tmp_path / "r.json"), "--json") == tmp_path / "r.json"
    with pytest.raises(ValueError, match=f"--json {str(tmp_path)!r} is a folder, not a file"):
        output.check_output(tmp_path, "--json")
    with pytest.raises(ValueError, match="--trace '/missing-folder/t.json': folder '/missing-folder' "
                                         "does not exist"):
        output.check_output("/missing-folder/t.json", "--trace")
    monkeypatch.delenv("EPFABRIC_VERILATOR_OPT", raising=False)
    assert verilator_opt() == "-O1"
    monkeypatch.setenv("EPFABRIC_VERILATOR_OPT", "-O0")
    assert verilator_opt() == "-O0"


def test_atomic_writes_get_ordinary_permissions(tmp_path):
    from epfabric.sim.output import write_atomic
    mask = os.umask(0o022)
    try:
        path = write_atomic(tmp_path / "r.json", "{}")
        assert path.stat().st_mode & 0o777 == 0o644
    finally:
        os.umask(mask)


def test_the_build_cache_is_the_users_wherever_the_command_runs(tmp_path, monkeypatch):
    from epfabric.sim.output import build_cache_dir
    monkeypatch.delenv("EPFABRIC_BUILD_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    assert build_cache_dir() == tmp_path / "cache" / "epfabric" / "build"
    monkeypatch.chdir("/")
    assert build_cache_dir() == tmp_path / "cache" / "epfabric" / "build"
    monkeypatch.setenv("EPFABRIC_BUILD_DIR", str(tmp_path / "b"))
    assert build_cache_dir() == tmp_path / "b"


def test_a_model_is_not_rebuilt_only_for_the_default_level(tmp_path, monkeypatch):
    """A build at -O0 (make run's) serves a later run that names no level; naming one builds."""
    import epfabric.sim.backends.cocotb_runner as runner
    monkeypatch.setenv("EPFABRIC_BUILD_DIR", str(tmp_path))
    monkeypatch.delenv("EPFABRIC_VERILATOR_OPT", raising=False)
    monkeypatch.setattr(runner, "verilog_of", lambda spec, simulator: "module top; endmodule\n")
    built = []
    monkeypatch.setattr(runner, "_build_locked", lambda bdir, *a: built.append(a[-1]))
    o0 = build_dir_for("module top; endmodule\n", "verilator", False, "-O0")
    o0.mkdir(parents=True)
    (o0 / "built.ok").write_text("1\n")
    assert build(SPEC, "verilator") == o0 and built == []            # reused, nothing built
    build(SPEC, "verilator", opt="-O1")                                # asked for: built
    monkeypatch.setenv("EPFABRIC_VERILATOR_OPT", "-O1")
    assert build(SPEC, "verilator") != o0
    assert built == ["-O1"]                       # the second -O1 build is the first one's


def test_a_kept_pysim_simulator_starts_from_the_initial_state(monkeypatch):
    """Amaranth's simulator of a design is kept for the same backend's next run on it (reset,
    not rebuilt: sim/backends/pysim.py). A second machine run on the kept simulator sees
    nothing of the first's memory or counters, and is the same run as on a simulator built
    afresh; another backend gets a simulator of its own (a patched preset must be seen)."""
    from epfabric.sim.backends import pysim
    from epfabric.sim.backends.machine import backend, machine_spec
    from epfabric.sw.assembler import Program
    from epfabric.sw.isa import address
    from epfabric.sw.machine import Machine
    from utils import MACHINE, store_program

    def first(be):
        m = Machine("tiny", backend=be, **MACHINE)
        m.load_program(0, 0, store_program(1, [0x5A5A]))   # rank 0 into rank 1's word 3:0
        m.run(5_000)
        assert m.read_mem(1, address(0, 3, 0), 1) == [0x5A5A]
        return pysim._SIMULATORS[(be.keep, machine_spec(m.config).to_json())][0]

    def second(be):
        m = Machine("tiny", backend=be, **MACHINE)
        p = Program()
        p.li(1, address(1, 3, 0))            # rank 1 copies its word 3:0 to 2:0
        p.lw(3, 1, 0)
        p.li(2, address(1, 2, 0))
        p.sw(3, 2, 0)
        p.fence()
        p.halt()
        m.load_program(1, 0, p)
        report = m.run(5_000)
        return m.read_mem(1, address(0, 2, 0), 1), report.cycles, report.trace, report.counters

    be = backend("pysim")
    kept = first(be)
    got = second(be)
    assert pysim._SIMULATORS[(be.keep, machine_spec(Machine("tiny", backend=be, **MACHINE)
                                                    .config).to_json())][0] is kept
    assert got[0] == [0] and got[3]["tx_blocks"] == [0, 0]       # nothing of the first run
    other = backend("pysim")
    assert first(other) is not kept                               # its own simulator
    monkeypatch.setattr(pysim, "SIMULATOR_CACHE", 0)
    monkeypatch.setattr(pysim, "_SIMULATORS", type(pysim._SIMULATORS)())
    assert second(backend("pysim")) == got
