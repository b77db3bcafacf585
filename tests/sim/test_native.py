"""The native backend: shared modules Verilated once, stepped from a C++ top (sim/backends/native.py).

Its cycle-for-cycle agreement with Amaranth's simulator is checked where every
Verilog simulator is: the ``hdl_simulator`` tests (kernels on the machine,
cores, switches) and the explicit cross-simulator tests of test_machine and
test_moe_layer. Here: how the design is split, the build cache, errors.
"""

import re
from collections import Counter

import pytest

from epfabric.sim.backends import SimulationError
from epfabric.sim.backends.native import NativeTestbench, build_native, netlist_of, run_native
from epfabric.sim.backends.machine import machine_spec
from epfabric.sim.backends.native_build import GLUE, decode_verilator_name, native_design
from utils import VECTOR_SPEC, machine, require_simulator


def _spec():
    return machine_spec(machine("native", topology=("superpod", 2, 2, 1), aivs_per_die=2).config)


def test_a_machine_is_glue_and_one_module_per_distinct_block():
    design = native_design(_spec())
    kinds = Counter(module for module, _consts in design["instances"])
    assert kinds["epf_die"] == 4
    assert sum(n for k, n in kinds.items() if k.startswith("epf_link")) == 8 + 4 * 3
    assert sum(n for k, n in kinds.items() if k.startswith("epf_switch")) == 5
    # every die module is the same Verilog; its rank is a constant input of each instance
    ranks = [consts["rank_in"][0] for module, consts in design["instances"] if module == "epf_die"]
    assert ranks == [0, 1, 2, 3]
    assert "module epf_die(" in design["modules"]["epf_die"]
    assert "module epf_aiv(" in design["modules"]["epf_die"]     # the die's cores go with it
    assert "epf_die " not in design["glue"] and f"module {GLUE}(" in design["glue"]
    # flits pass die -> link -> switch directly (no glue port), and the
    # cores' status ports are the die's own outputs
    assert any(pa == "tx__payload" for _a, pa, _b, _pb in design["wires"])
    assert design["aliases"]["core_pc__3"] == [1, "core_pc__1"]
    glue_ports = re.search(rf"^module {GLUE}\((.*?)\);", design["glue"], re.M | re.S)[1]
    assert "host__wrow" in glue_ports and "tx__payload" not in glue_ports and "rx__payload" not in glue_ports


def test_the_recorder_records_instances_instead_of_building_them():
    """The native backend's instancer: the top's dies, links and switches are recorded with
    their ports and constants (what the glue leaves to the C++ top), once the top is
    elaborated; none of its modules is built for it, and a module with a reset is refused."""
    from amaranth.hdl import Fragment
    from epfabric.hw.die import Die
    from epfabric.hw.instances import SharedModule, Sharing
    from epfabric.sim.backends.native_build import Recorder
    recorder = Recorder()
    top = _spec().build(shared=Sharing(has_reset=False, instancer=recorder))
    assert not recorder.found           # recorded when the top is elaborated
    Fragment.get(top, None)
    modules = [module for module, _ports, _consts in recorder.found]
    assert modules.count("epf_die") == 4 and set(modules) <= set(top.parts)
    assert not any(part.built for part in top.parts.values())
    assert [consts["rank_in"] for module, _p, consts in recorder.found
            if module == "epf_die"] == [(r, 2) for r in range(4)]
    _module, ports, _consts = recorder.found[0]
    assert ports["tx__valid"][1] is False and ports["rx__valid"][1] is True   # (signal, is_input)
    die = Die.signature_for(rank=None, ranks=2).create()
    with pytest.raises(ValueError, match="cannot record an instance of epf_die: the native "
                                         "backend's modules are reset-less"):
        recorder.instance(SharedModule("epf_die", has_reset=True), die, (), {})


@pytest.mark.parametrize("dtype, planar", [("bf16", True), ("int16", False)])
def test_a_float_in_network_switch_is_built_planar(dtype, planar):
    """On the native backend an in-network switch of floating-point lanes is a planar part
    (control + data planes: a plane module converted once, not 248 fp32 adders in one module);
    an integer one of the same machine is one module, as before. Nothing is converted here."""
    from amaranth.hdl import Fragment
    from epfabric.hw.inc_switch import IncSwitch, PlanarIncSwitch
    from epfabric.hw.instances import Sharing
    from epfabric.sim.backends.native_build import Recorder
    from epfabric.sw.kernels import KERNELS
    combine = KERNELS["combine"]
    params = combine.resolve_params({"batch": 4, "topk": 2, "experts": 4, "dtype": dtype,
                                     "system": "ubep-inc"})
    config = combine.configs("tiny", ("superpod", 2, 1, 1), 2, params)[0]
    assert config.ep_dtype == dtype
    top = machine_spec(config).build(shared=Sharing(has_reset=False, instancer=Recorder()))
    Fragment.get(top, None)
    switches = [part.cls for name, part in top.parts.items() if name.startswith("epf_switch")]
    assert switches == [PlanarIncSwitch if planar else IncSwitch]


def test_a_module_goes_to_its_build_once_it_is_converted(monkeypatch):
    """The die (the longest build) is handed to its build as soon as it and its core are
    converted, before the links and switches are; each module once, the core with the die."""
    from epfabric.sim.backends import native_build
    events, convert = [], native_build.part_verilog

    def recorded(name, part, *args):
        events.append(("convert", name))
        return convert(name, part, *args)
    monkeypatch.setattr(native_build, "part_verilog", recorded)
    native_build._convert(_spec(), lambda name, text: events.append(("build", name)))
    built = [name for kind, name in events if kind == "build"]
    assert sorted(built) == sorted(native_design(_spec())["modules"]) and "epf_aiv" not in built
    assert events.index(("build", "epf_die")) == events.index(("convert", "epf_aiv")) + 1
    assert events.index(("build", "epf_die")) < events.index(("convert", "epf_link0"))


def test_verilator_names_decode():
    assert decode_verilator_name("host___05Fwe") == "host__we"
    assert decode_verilator_name("a___05Fb___05Fc") == "a__b__c"
    assert decode_verilator_name("plain_name") == "plain_name"


def test_the_build_is_cached_and_shared():
    require_simulator("native")
    library, netlist = build_native(VECTOR_SPEC)
    stamp = (library.parent / "built.ok").stat().st_mtime_ns
    again, netlist2 = build_native(VECTOR_SPEC)
    assert again == library and netlist2 == netlist == f"inst {GLUE} {GLUE}\n"
    assert (library.parent / "built.ok").stat().st_mtime_ns == stamp
    # the machine's netlist: one object per instance, each die its rank
    lines = netlist_of(native_design(_spec())).splitlines()
    assert lines[0] == f"inst {GLUE} {GLUE}"
    assert sum(line.startswith("inst epf_die ") for line in lines) == 4
    assert "const 4 rank_in 3" in lines


async def _long_wait(bench):
    await bench.wait_high("o_stream.valid", timeout=60_000)


def test_a_long_wait_reports_progress_and_times_out(capfd):
    require_simulator("native")
    with pytest.raises(SimulationError, match="timeout: o_stream.valid still 0 after 60000 cycles"):
        run_native(VECTOR_SPEC, _long_wait, {})
    err = capfd.readouterr().err
    assert "[epfabric] native: waiting for o_stream.valid: 50000 cycles of at most 60000" in err
    assert "100000 cycles" not in err


async def _count(bench, n):
    start = bench.cycle
    await bench.tick(n)
    return bench.cycle - start


def test_no_waveforms_and_clear_errors():
    require_simulator("native")
    with pytest.raises(SimulationError, match="native backend writes no waveforms"):
        run_native(VECTOR_SPEC, _count, {"n": 3}, waveform="x")
    assert run_native(VECTOR_SPEC, _count, {"n": 3}) == (3, 3)
    library, _netlist = build_native(VECTOR_SPEC)
    with pytest.raises(SimulationError, match="unknown module epf_nothing"):
        NativeTestbench(VECTOR_SPEC.interface(), library, "inst glue glue\ninst epf_nothing x\n")
    with pytest.raises(SimulationError, match="bad netlist line"):
        NativeTestbench(VECTOR_SPEC.interface(), library, "inst glue glue\nfrobnicate\n")
    bench = NativeTestbench(VECTOR_SPEC.interface(), library, "inst glue glue\n")
    try:
        with pytest.raises(SimulationError, match="cannot set output o_stream__valid"):
            bench.set("o_stream.valid", 1)
    finally:
        bench.close()


def _alltoall(seed, skip, monkeypatch):
    from epfabric.sim.backends import native
    from epfabric.sw.kernels import KERNELS
    monkeypatch.setenv("EPFABRIC_NATIVE_SKIP", "1" if skip else "0")
    k = KERNELS["alltoall"]
    m = machine("native")           # the machine of test_machine_backend's native cases
    inputs = k.load(m, k.resolve_params({"seed": seed}))
    report = m.run(5_000)
    assert k.check(m, report, inputs)["correct"]
    return ((report.cycles, report.trace, m._readback, report.counters, report.cores),
            (native.LAST_STATS["skipped_edges"], native.LAST_STATS["skipped_die_edges"]))


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_skipping_idle_links_and_dies_changes_nothing(seed, monkeypatch):
    """Random alltoall payloads and orders: with and without skipping the edges of idle links
    and dies, every cycle count, MARK, memory word, counter and core status is the same; and
    edges were skipped, of dies too (their idle outputs are proved to mean it in
    tests/hw/test_link.py and tests/hw/test_die.py)."""
    require_simulator("native")
    on, (skipped, dies) = _alltoall(seed, True, monkeypatch)
    off, (none, no_dies) = _alltoall(seed, False, monkeypatch)
    assert on == off
    assert skipped > dies > 0 and none == no_dies == 0


def test_a_glue_too_wide_for_amaranth_is_refused_in_one_line(monkeypatch):
    """32 dies x 48 AIVs failed inside Amaranth (``assert bit in range(1 << 16)``); the limit
    on the glue's input bits is named instead (here lowered to below this small machine's)."""
    from epfabric.hw.validate import UserError
    from epfabric.sim.backends import native_build
    monkeypatch.setattr(native_build, "GLUE_INPUT_BITS", 64)

    def no_conversion(*args, **kwargs):
        raise AssertionError("a module was converted before the glue was checked")
    monkeypatch.setattr(native_build, "part_verilog", no_conversion)   # refused before minutes
    with pytest.raises(UserError, match=r"^the native backend cannot build this machine yet: "
                                        r"its glue reads \d+ bits of the blocks' outputs \(most: "
                                        r"\d+ bits of \d+ x \w+"):
        native_build._convert(_spec())


@pytest.mark.parametrize("seed", [1, 2])
def test_planar_switches_are_the_same_switches(seed, monkeypatch):
    """Every switch of the test machine built as a PlanarSwitch (as the native backend builds a
    16-port switch of 512 B flits, too wide for Amaranth) with 96-bit data planes: 256 data
    bits in 3 planes, the last of 64. Random alltoall traffic gives the same cycles, MARKs,
    memory, counters and core status as the Switch itself."""
    require_simulator("native")
    from epfabric.hw import switch, topology
    ref, _ = _alltoall(seed, True, monkeypatch)
    monkeypatch.setattr(topology, "MAX_INSTANCE_OUTPUT_BITS", 0)
    monkeypatch.setattr(switch.PlanarSwitch, "PLANE_BITS", 96)
    design = native_design(machine_spec(machine("native").config))
    switches = [name for name in design["modules"] if name.startswith("epf_switch")]
    assert switches and all(f"module {name}_dp64(" in design["modules"][name]
                            and f"module {name}_dp96(" in design["modules"][name]
                            for name in switches)
    got, _ = _alltoall(seed, True, monkeypatch)
    assert got == ref


def _alltoall_loaded(seed, backdoor, monkeypatch):
    from epfabric.sim.backends import native
    monkeypatch.setenv("EPFABRIC_NATIVE_BACKDOOR", "1" if backdoor else "0")
    out, _ = _alltoall(seed, True, monkeypatch)
    used = [native.LAST_STATS[k] for k in ("backdoor_writes", "backdoor_blocks", "backdoor_trace")]
    assert all(used) if backdoor else not any(used), used
    return out, native.LAST_STATS["cycles"]


@pytest.mark.parametrize("seed", [1, 2])
def test_loading_through_the_backdoor_changes_nothing(seed, monkeypatch):
    """The native backend writes a large load straight into the models' HBM and instruction
    memories, and reads a finished run's memory and MARK trace straight out of them
    (``backdoor``). Forced on for a small alltoall, the run is the same as loaded and read
    through the host port -- cycles, MARKs, memory read back, counters, core status -- and
    the machine ticked fewer cycles in all (the load's and the read-back's)."""
    require_simulator("native")
    port, port_ticks = _alltoall_loaded(seed, False, monkeypatch)
    direct, direct_ticks = _alltoall_loaded(seed, True, monkeypatch)
    assert port[1], "the alltoall leaves MARKs"
    assert direct == port
    assert direct_ticks < port_ticks


@pytest.mark.parametrize("system", ["cann", "ubep"])
def test_a_dispatch_and_combine_loaded_through_the_backdoor_are_the_same_run(system, monkeypatch):
    """A dispatch and the combine after it with 4-block tokens (instruction rows, HBM blocks)
    on the shared 4-AIV machine, loaded and read back through the backdoor and through the
    port, give the same cycles, phases and bit-exact results."""
    require_simulator("native")
    (port, port_stats), (direct, direct_stats) = _combines(
        system, "EPFABRIC_NATIVE_BACKDOOR", ("0", "1"), monkeypatch)
    assert direct_stats["cycles"] < port_stats["cycles"]    # the backdoor did the loading
    for key in SAME_RUN:
        assert direct[key] == port[key], key


#: what two runs of the dispatch + combine must share to be the same run
SAME_RUN = ("cycles", "phases", "y_payload_digest", "dispatch")


def _combines(system, variable, values, monkeypatch):
    """``[(run, native stats)]``: a dispatch + combine of 4-block tokens on the shared
    2-die x 4-AIV machine (:func:`utils.four_aiv_machine`: one native build serves it, the
    UBEP experiments' runs and the dispatch and combine tests') with ``variable`` set to
    each of ``values``; each run checked correct."""
    from epfabric.sim.backends import native
    from epfabric.sw.kernels import KERNELS
    from utils import four_aiv_machine, run_on_machine
    kernel = KERNELS["combine"]
    params = {"system": system, "batch": 4, "topk": 2, "experts": 4, "hidden_blocks": 4}
    out = []
    for value in values:
        monkeypatch.setenv(variable, value)
        run = run_on_machine(kernel, "native", four_aiv_machine(kernel, params), params)
        assert run["correct"], run["problems"]
        out.append((run, dict(native.LAST_STATS)))
    return out


@pytest.mark.parametrize("system", ["cann", "ubep"])
def test_skipping_idle_dies_changes_nothing(system, monkeypatch):
    """A dispatch + combine on the shared 4-AIV machine (polls of flags, SyncAll, remote
    stores that reach a die whose cores have halted) with and without skipping the edges of idle dies: the same
    cycles, phases, results; with skipping, die edges were skipped (``Die.idle`` is proved to
    mean it in tests/hw/test_die.py), without, none."""
    require_simulator("native")
    (on, on_stats), (off, off_stats) = _combines(system, "EPFABRIC_NATIVE_SKIP",
                                                 ("1", "0"), monkeypatch)
    for key in SAME_RUN:
        assert on[key] == off[key], key
    assert on_stats["skipped_die_edges"] > 0 and off_stats["skipped_die_edges"] == 0
    assert on_stats["dies"] == 2


def test_evaluating_on_threads_changes_nothing(monkeypatch):
    """Each phase of a cycle evaluated on 1, 2 or 3 threads (a Jacobi settle instead of
    Gauss-Seidel): every cycle count, MARK, memory word, counter and core status is the same."""
    require_simulator("native")
    from epfabric.sim.backends import native
    runs = []
    for n in (1, 2, 3):
        monkeypatch.setenv("EPFABRIC_NATIVE_THREADS", str(n))
        out, _ = _alltoall(3, True, monkeypatch)
        assert native.LAST_STATS["threads"] == n
        runs.append(out)
    assert runs[0] == runs[1] == runs[2]


def test_a_dispatch_and_combine_on_two_threads_are_the_same_run(monkeypatch):
    """A UBEP dispatch + combine of 4-block tokens on the shared 4-AIV machine: one thread
    and two give the same cycles, phases and bit-exact results."""
    require_simulator("native")
    (one, _), (two, _) = _combines("ubep", "EPFABRIC_NATIVE_THREADS", ("1", "2"), monkeypatch)
    for key in SAME_RUN:
        assert one[key] == two[key], key


def test_threads_default_by_size_and_refuse_nonsense(monkeypatch):
    from epfabric.sim.backends.native import THREADS_FROM_CORES, native_threads
    from epfabric.sim.backends.testbench import SimulationError
    monkeypatch.delenv("EPFABRIC_NATIVE_THREADS", raising=False)
    monkeypatch.setattr("os.cpu_count", lambda: 2)
    assert native_threads(THREADS_FROM_CORES - 1) == 1
    assert native_threads(THREADS_FROM_CORES) == 2
    monkeypatch.setattr("os.cpu_count", lambda: 1)
    assert native_threads(THREADS_FROM_CORES) == 1
    monkeypatch.setenv("EPFABRIC_NATIVE_THREADS", "3")
    assert native_threads(1) == 3
    for bad in ("0", "two", "65"):
        monkeypatch.setenv("EPFABRIC_NATIVE_THREADS", bad)
        with pytest.raises(SimulationError, match=f"EPFABRIC_NATIVE_THREADS must be an integer "
                                                  f"in \\[1, 64\\], not '{bad}'"):
            native_threads(1)


def _sampled_stream(simulator, monkeypatch, backdoor):
    """A store stream on the machine of tests/hw/test_system.py's sampler tests (the same
    Verilog: its native build serves both), sampled every 2 cycles; ``(samples, stats)``."""
    from epfabric.hw.isa import address
    from epfabric.sim.backends import native
    from epfabric.sim.backends.machine import backend
    from epfabric.sw.assembler import Program
    from epfabric.sw.machine import Machine
    monkeypatch.setenv("EPFABRIC_NATIVE_BACKDOOR", "1" if backdoor else "0")
    m = Machine("tiny", backend=backend(simulator), topology=("superpod", 2, 1, 1),
                aivs_per_die=1, imem_depth=32, ubuf_rows=2, hbm_blocks=8, data_bytes=32,
                lanes=4, trace_depth=16, sample_depth=64)
    p = Program().li(10, address(1, 2, 0)).li(6, 5)
    p.label("loop").stb(0, 10, 0).addi(6, 6, -1).bne(6, 0, "loop").fence().halt()
    m.load_program(0, 0, p)
    m.load_program(1, 0, Program().halt())
    m.set_sampling(2)
    report = m.run(2_000)
    return (report.cycles, report.samples), dict(native.LAST_STATS)


@pytest.mark.slow        # its own native build (17 s); the sampler on native: tests/hw/test_system.py
def test_counter_samples_read_through_the_backdoor_are_the_ports(monkeypatch):
    """The counter sampler's memory read straight from the glue (``backdoor_samples``, forced
    on) gives the samples the host port reads, which are Amaranth's simulator's."""
    require_simulator("native")
    port, port_stats = _sampled_stream("native", monkeypatch, False)
    direct, direct_stats = _sampled_stream("native", monkeypatch, True)
    ref, _ = _sampled_stream("pysim", monkeypatch, False)
    assert port_stats["backdoor_samples"] == 0 < direct_stats["backdoor_samples"]
    assert len(ref[1]["cycles"]) > 5 and ref[1]["values"]["ub_blocks"][1][-1] > 0
    assert direct == port == ref
