"""The driver (sw/machine.py, sw/config.py, sw/report.py): Machine, Report, watchdog diagnosis, trace export."""

import functools
import json

import pytest

from epfabric.hw.host import HostTarget
from epfabric.hw.validate import UserError
from epfabric.sw.assembler import Program
from epfabric.sw.config import AgrsConfig, MachineConfig, parse_topology
from epfabric.sw.machine import Backend, Machine, Report, WatchdogTimeout
from epfabric.sw.isa import address
from epfabric.sw import report as report_module
from epfabric.sim.backends.machine import backend

from utils import MACHINE, machine, store_program


def test_run_writes_reads_and_reports():
    m = machine()
    m.write_mem(1, address(0, 2, 0), [5, 6, 7])
    m.load_program(0, 0, store_program(1, [11, 22]))   # rank 0 stores into rank 1
    p = Program()
    p.li(1, address(1, 2, 0))
    p.lw(3, 1, 4)                                       # rank 1 reads its own word 1 (= 6)
    p.li(2, address(1, 2, 3))
    p.sw(3, 2, 0)
    p.fence()
    p.halt()
    m.load_program(1, 1, p)
    report = m.run(5_000)
    assert report.done and not report.timeout and report.cycles > 0
    assert m.read_mem(1, address(0, 3, 0), 2) == [11, 22]
    assert m.read_mem(1, address(0, 2, 0), 4) == [5, 6, 7, 6]
    assert [t["event"] for t in report.marks(rank=0, core=0)] == [10, 11]
    cycles = [t["cycle"] for t in report.marks(rank=0, core=0)]
    assert cycles == sorted(cycles)
    back = json.loads(report.to_json())
    assert back["cycles"] == report.cycles and back["config"]["aivs_per_die"] == 2
    assert back["config"]["kind"] == "aiv" and back["backend"] == "pysim"
    from epfabric.hw.topology import SUPERPOD_HOPS
    from epfabric.sw.config import link_counter
    links = {link_counter(w, k) for w in ("blocks", "small") for k in SUPERPOD_HOPS}
    assert set(report.counters) == {"tx_blocks", "rx_blocks", "tx_stalls"} | links
    assert all(len(v) == m.ranks for k, v in report.counters.items() if k not in links)
    assert all(len(report.counters[k]) == 1 for k in links)      # one value a machine
    assert report.counters["tx_blocks"][0] >= 1            # rank 0's store crossed the fabric
    assert [(c["rank"], c["core"]) for c in report.cores] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert all(c["halted"] for c in report.cores if (c["rank"], c["core"]) in {(0, 0), (1, 1)})
    chrome = report.chrome_trace(cycle_ns=1.0)
    inst = [e for e in chrome["traceEvents"] if e["ph"] == "i"]
    assert [e["name"] for e in inst] == ["mark 10", "mark 11"]
    assert inst[0]["ts"] == cycles[0] / 1000.0 and inst[0]["pid"] == 0 and inst[0]["tid"] == 0


def test_chrome_trace_pairs_span_marks_into_slices():
    """A kernel's trace_spans: start/end MARKs of one AIV become one slice, in order; a start
    that never ends and other MARKs stay instants."""
    from epfabric.sw.report import Report
    trace = [{"rank": 0, "core": 1, "cycle": c, "event": e}
             for c, e in [(10, 7), (12, 5), (20, 8), (30, 7), (45, 8), (50, 7)]]
    trace.append({"rank": 1, "core": 1, "cycle": 40, "event": 8})   # an end without a start
    report = Report(config={}, backend="pysim", cycles=60, ns=120.0, done=True, timeout=False,
                    trace=trace)
    events = report.chrome_trace(cycle_ns=2.0, spans={7: (8, "FFN")})["traceEvents"]
    slices = [(e["ts"], e["dur"]) for e in events if e["ph"] == "X"]
    assert slices == [(0.02, 0.02), (0.06, 0.03)]
    assert all(e["name"] == "FFN" and e["pid"] == 0 and e["tid"] == 1
               for e in events if e["ph"] == "X")
    instants = sorted((e["pid"], e["args"]["cycle"]) for e in events if e["ph"] == "i")
    assert instants == [(0, 12), (0, 50), (1, 40)]


def test_watchdog_names_waiting_cores_and_addresses():
    m = machine()
    p = Program()
    p.li(1, address(1, 5, 2))
    p.li(2, 99)
    p.poll(3, 1, 2, "eq")                               # nobody ever writes 99 there
    p.halt()
    m.load_program(0, 1, p)
    m.load_program(1, 0, store_program(1, [1]))
    with pytest.raises(WatchdogTimeout) as info:
        m.run(max_cycles=400)
    msg = str(info.value)
    assert "within 400 cycles" in msg
    assert "rank 0 core 1" in msg and f"{address(1, 5, 2):#010x}" in msg
    assert "rank 1 block 5 word 2" in msg
    assert "rank 1 core 0" not in msg                   # that one halted
    assert info.value.report.timeout and info.value.report.cycles == 400


@pytest.mark.parametrize("kw, exc, match", [
    ({"preset": "nope"}, ValueError, "nope"),
    ({"topology": ("ring", 4)}, ValueError, "topology kind must be one of superpod, star, not 'ring'"),
    ({"topology": ("superpod", 2, 0, 1)}, ValueError, "npus_per_board must be >= 1, not 0"),
    ({"topology": ("superpod", 2, 1)}, ValueError, r"topology 'superpod' takes 3 size\(s\)"),
    ({"topology": ("star", 1)}, ValueError, r"n must be >= 2, not 1"),
    ({"topology": ("superpod", 3, 1, 1)}, ValueError, r"dies_per_npu must be in \[1, 2\], not 3"),
    ({"preset": "incmoe-testbed"}, ValueError, "preset 'incmoe-testbed' has no intra-NPU"),
    ({"aivs_per_die": 0}, ValueError, r"aivs_per_die must be in \[1, 256\], not 0"),
    ({"hbm_blocks": 12}, ValueError, "hbm_blocks must be a power of two, not 12"),
    ({"data_bytes": 48}, ValueError, "data_bytes must be a multiple of 32, not 48"),
    ({"lanes": 2.0}, TypeError, "lanes must be an integer, not 2.0"),
    ({"sample_depth": -1}, ValueError, r"sample_depth must be in \[0, 65535\], not -1"),
    ({"ep_dtype": "fp32"}, ValueError, r"ep_dtype='fp32' needs ep_window"),
    ({"ep_window": 8, "ep_dtype": "fp16"}, ValueError, r"dtype must be a lane type"),
])
def test_bad_configuration_names_the_parameter(kw, exc, match):
    with pytest.raises(exc, match=match):
        MachineConfig(**kw)


def test_the_in_network_lane_type_reaches_the_switches_and_only_when_set():
    """``ep_dtype`` goes into ``System(ep_inc=...)`` (every ``IncSwitch``); at its default
    the specification, and so the Verilog and the builds, are what they were."""
    from amaranth.hdl import Fragment
    from epfabric.sw.config import AgrsConfig
    from epfabric.sw.tops import aiv_system
    assert "ep_dtype" not in MachineConfig(ep_window=8).to_dict()
    for extra, ep_inc in (({}, {"window": 8}),
                          ({"ep_dtype": "bf16"}, {"window": 8, "dtype": "bf16"})):
        top = aiv_system(**MachineConfig(ep_window=8, **extra).to_dict())
        Fragment.get(top, None)                 # the switches it reads are built to be used
        assert top.ep_inc == ep_inc
        assert {sw.unit.dtype for sw in top.fabric.switches.values()} == \
            {ep_inc.get("dtype", "int16")}
    assert "dtype" not in AgrsConfig().to_dict()
    assert AgrsConfig(dtype="fp32").to_dict()["dtype"] == "fp32"
    with pytest.raises(ValueError, match=r"dtype must be 'int32', 'fp32' or 'bf16'"):
        AgrsConfig(dtype="int16")


def test_bad_calls_are_rejected_early():
    m = machine()
    with pytest.raises(ValueError, match=r"rank must be in \[0, 1\], not 2"):
        m.load_program(2, 0, [0])
    with pytest.raises(ValueError, match="has 200 instructions; imem_depth is 128"):
        m.load_program(0, 0, [0] * 200)
    with pytest.raises(ValueError, match="word-aligned local byte address"):
        m.write_mem(0, 3, [1])
    with pytest.raises(ValueError, match="runs past the 16 blocks of the machine's memory"):
        m.write_mem(0, address(0, 15, 127), [1, 2])
    with pytest.raises(RuntimeError, match="needs a finished run"):
        m.read_mem(0, 0)
    with pytest.raises(RuntimeError, match="no program loaded"):
        m.run()
    with pytest.raises(TypeError, match="backend must be a Backend"):
        Machine("tiny", backend="pysim")
    with pytest.raises(ValueError, match="backend must be one of pysim, icarus, verilator, native, not 'modelsim'"):
        backend("modelsim")
    with pytest.raises(TypeError, match="the AIV machine has no control registers"):
        m.write_control(0, 1)
    with pytest.raises(TypeError, match="give either config or preset and MachineConfig fields"):
        Machine("tiny", backend=backend("pysim"), config=m.config)
    with pytest.raises(ValueError, match=r"set_sampling needs a machine with a counter sampler "
                                         r"\(MachineConfig sample_depth > 0\)"):
        m.set_sampling(8)
    with pytest.raises(ValueError, match=r"sample_every must be in \[0, 4294967295\], not -2"):
        machine(sample_depth=16).set_sampling(-2)


def test_a_sampler_changes_no_cycle_and_leaves_other_machines_alone():
    """A kernel run with the counter sampler (every 2 cycles) has the cycles, MARKs, memory and
    counters of the run without it, plus the UB commit counters and the samples; a
    configuration without it keeps its specification (and so its Verilog and builds)."""
    from epfabric.sw.kernels import run_kernel
    plain = MachineConfig(**{**MachineConfig().__dict__})
    assert "sample_depth" not in plain.to_dict()
    assert MachineConfig(sample_depth=8).to_dict()["sample_depth"] == 8
    be = backend("pysim")
    shared = MachineConfig("tiny", **MACHINE)       # the alltoall's machine, larger program store
    runs = [run_kernel("alltoall", be, params={"seed": 1}, sampling=s, configs=[shared])
            for s in (None, (64, 2))]
    (a, b), ([ra], [rb]) = runs, (runs[0].reports, runs[1].reports)
    assert a.correct and b.correct
    assert (ra.cycles, ra.trace) == (rb.cycles, rb.trace) and ra.cycles > 20
    assert {k: v for k, v in rb.counters.items() if not k.startswith("ub_")} == ra.counters
    assert ra.samples == {} and rb.samples["every"] == 2 and rb.samples["dropped"] == 0
    assert rb.samples["cycles"] == list(range(0, ra.cycles + 1, 2))
    assert all(s[-1] <= end for s, end in zip(rb.samples["values"]["ub_blocks"],
                                              rb.counters["ub_blocks"]))
    assert sum(rb.counters["ub_blocks"]) > 0


@pytest.mark.parametrize("words, exc, message", [
    ([1 << 32], ValueError, r"words\[0\] must be in \[0, 2\*\*32 - 1\] \(32-bit unsigned\), not 4294967296"),
    ([7, -1], ValueError, r"words\[1\] must be in \[0, 2\*\*32 - 1\] \(32-bit unsigned\), not -1"),
    ([1.0], TypeError, r"words\[0\] must be an integer, not 1.0"),
    ([True], TypeError, r"words\[0\] must be an integer, not True"),
    (5, TypeError, r"words must be a sequence of 32-bit words, not 5"),
])
def test_write_mem_never_truncates(words, exc, message):
    """A word that does not fit 32 bits, a float or a bool is refused, not masked."""
    m = machine()
    with pytest.raises(exc, match=message) as info:
        m.write_mem(0, address(0, 1, 0), words)
    assert isinstance(info.value, UserError)
    assert not m._mem                      # nothing half-written


def test_write_mem_takes_numpy_words_exactly():
    import numpy as np
    m = machine()
    m.write_mem(0, address(0, 1, 0), np.array([0xFFFFFFFF, 3], dtype=np.uint32))
    m.load_program(0, 0, [0])
    hbm = [(a, v) for t, rank, _, a, v, *_ in m.session(10)["writes"] if t == HostTarget.HBM.value]
    assert hbm == [(address(0, 1, 0), 0xFFFFFFFF), (address(0, 1, 1), 3)]
    assert all(type(v) is int for _, v in hbm)


@pytest.mark.parametrize("n, exc, message", [
    (-1, ValueError, r"n must be >= 1, not -1"),
    (0, ValueError, r"n must be >= 1, not 0"),
    (1.5, TypeError, r"n must be an integer, not 1.5"),
])
def test_read_mem_count_is_checked(n, exc, message):
    """``read_mem(n=-1)`` used to return []; the count is checked before anything else."""
    with pytest.raises(exc, match=message):
        machine().read_mem(0, address(0, 1, 0), n)


def test_agrs_machine_has_no_cores():
    """An AG/RS machine takes control registers and memory, never programs."""
    m = Machine(backend=backend("pysim"), config=AgrsConfig("tiny", ranks=4, tmax=2, lanes=1))
    assert not m.has_cores and m.ranks == 4
    with pytest.raises(TypeError, match="a agrs machine has no cores to load programs into"):
        m.load_program(0, 0, [0])
    with pytest.raises(ValueError, match=r"register must be in \[0, 65535\], not 70000"):
        m.write_control(70000, 1)
    with pytest.raises(ValueError, match=r"value must be in \[0, 2\*\*32 - 1\] \(32-bit unsigned\), not -1"):
        m.write_control(3, -1)             # refused like write_mem's words, never masked
    m.write_control(3, 0xFFFFFFFF)
    assert m.session(10)["writes"][-1][3:] == [3, 0xFFFFFFFF]


class _Recorder(Backend):
    """A backend that records the session and answers like a finished run."""

    name = "recorder"

    def __init__(self):
        self.sessions = []

    def execute(self, config, session):
        self.sessions.append((config, session))
        ranks = config.ranks
        status = {"cores": {k: [0 if k != "halted" else 1] * config.cores
                            for k in session["status"]["cores"]},
                  "counters": {k: [7] * len(v) for k, v in session["status"]["counters"].items()}}
        return {"cycles": 42, "done": 1, "timeout": 0, "run_wall_s": 0.0, "status": status,
                "mem": {r: [r] * sum(n for _lo, n in session["read_blocks"])
                        * session["words_per_block"] for r in range(ranks)},
                "trace": [[1, 5, 99]], "trace_dropped": 0}


def test_session_is_what_the_backend_runs():
    """Programs, enables and memory words go to the backend as one host-port session."""
    be = _Recorder()
    m = Machine("tiny", backend=be, topology=("superpod", 2, 1, 1), aivs_per_die=2)
    m.load_program(1, 0, [0x11, 0x22])
    m.write_mem(0, address(0, 3, 1), [9])
    session = m.session(123)
    report = m.run(123)
    ((config, sent),) = be.sessions
    assert config is m.config and sent == session
    assert sent["max_cycles"] == 123 and sent["trace"] is True
    W = m.config.words_per_block                          # core g = 1*2 + 0 is word 2 of row 0
    assert W % 2 == 0 and sent["writes"] == [
        [HostTarget.IMEM_ROW.value, 0, 0, 0, 0, 0x11 << 64, 1 << 2],
        [HostTarget.IMEM_ROW.value, 0, 0, 1, 0, 0x22 << 64, 1 << 2],
        [HostTarget.ENABLE.value, 1, 0, 0, 1],
        [HostTarget.HBM.value, 0, 0, address(0, 3, 1), 9]]   # a partial block: word writes
    assert sent["read_blocks"] == [[0, m.config.hbm_blocks]]
    assert sent["status"] == m.config.status_ports()
    assert report.cycles == 42 and report.done and report.backend == "recorder"
    assert report.marks() == [{"rank": 0, "core": 1, "cycle": 5, "event": 99}]
    assert {k: report.counters[k] for k in ("tx_blocks", "rx_blocks", "tx_stalls")} == {
        "tx_blocks": [7, 7], "rx_blocks": [7, 7], "tx_stalls": [7, 7]}
    assert all(v == [7] for k, v in report.counters.items() if k.startswith("link_"))
    assert m.read_mem(1, address(0, 0, 0), 1) == [1]


def test_read_back_ranges_limit_what_is_read_and_readable():
    be = _Recorder()
    m = Machine("tiny", backend=be, topology=("superpod", 2, 1, 1), aivs_per_die=2)
    m.load_program(0, 0, [0x11])
    m.read_back([(3, 2), (10, 1)])
    m.run(50)
    ((_config, sent),) = be.sessions
    assert sent["read_blocks"] == [[3, 2], [10, 1]]
    assert m.read_mem(1, address(0, 4, 0), 1) == [1]
    with pytest.raises(ValueError, match="block 5 of rank 1 is not read back"):
        m.read_mem(1, address(0, 5, 0))
    with pytest.raises(ValueError, match="read-back range 15..16 runs past the 16 blocks"):
        m.read_back([(15, 2)])


def test_report_lives_in_its_own_module():
    assert Report is report_module.Report and WatchdogTimeout is report_module.WatchdogTimeout


def test_parse_topology_validates():
    assert parse_topology("superpod:2,2,2") == ("superpod", 2, 2, 2)
    assert parse_topology("star:4") == ("star", 4)
    with pytest.raises(ValueError, match=r"topology must look like superpod:2,2,2 or star:4, "
                                         r"not 'superpod:2,x'"):
        parse_topology("superpod:2,x")
    with pytest.raises(ValueError, match="topology kind must be one of superpod, star, not 'ring'"):
        parse_topology("ring:4")


ROWS = (True, False)


@pytest.mark.parametrize("simulator, aivs", [("pysim", 2), ("icarus", 2), ("verilator", 2),
                                             ("native", 2), ("pysim", 3)])
def test_row_writes_load_what_word_writes_load(simulator, aivs):
    """IMEM_ROW and HBM_BLOCK writes (one host cycle per instruction index / block) give the
    machine the same programs and memory as one word per cycle: same cycles, marks and memory;
    and a row read-back takes a cycle per block. With 3 AIVs a die an 8-word row window holds
    two dies' 6 cores (imem_row_window), so rank 2's core 0 is word 0 of window 1. On
    Verilator the 2 x 2 machine is the small dispatch case's (its build is shared)."""
    from utils import require_simulator, small_dispatch_machine
    require_simulator(simulator)
    results = []
    cores = ((0, 0), (0, 1), (1, 1)) + (((2, 0),) if aivs == 3 else ())
    for rows in ROWS:
        m = (small_dispatch_machine(simulator) if simulator == "verilator" else
             machine(simulator, topology=("superpod", 2, 1 if aivs == 2 else 2, 1),
                     aivs_per_die=aivs))
        assert (m.config.topology[2], m.config.aivs_per_die) == (1 if aivs == 2 else 2, aivs)
        m.row_writes = rows
        wpb = m.config.words_per_block
        block = [0x1000 + k for k in range(wpb)]
        for rank in range(m.config.ranks):
            m.write_mem(rank, address(0, 3, 0), block)          # a whole block: HBM_BLOCK
        m.write_mem(1, address(0, 4, 1), [7, 8])                # part of a block: words
        for rank, core in cores:                                 # each core its own program
            p = Program()
            p.li(1, address(rank, 3, 0))
            p.ldb(0, 1, 0)                                       # its rank's block 3, into UBuf row 0
            p.li(1, address(1, 5 + 2 * rank + core, 0))
            p.stb(0, 1, 0)                                       # ... to a block of its own
            p.li(1, address(1, 4, 3 + 2 * rank + core))
            p.li(2, 100 * rank + 10 * core + 1)
            p.sw(2, 1, 0)
            p.fence()
            p.mark(20 + 2 * rank + core)
            p.halt()
            m.load_program(rank, core, p)
        writes = m.session(1)["writes"]
        kinds = {w[0] for w in writes}
        assert (HostTarget.IMEM_ROW.value in kinds and HostTarget.HBM_BLOCK.value in kinds) == rows
        report = m.run(5_000)
        assert report.done
        # read-back: one block per cycle on every rank at once, or one word per cycle
        blocks = m.config.readback_blocks
        read = report.extra["read_cycles"]
        assert (blocks <= read <= blocks + 4) if rows else (read >= blocks * wpb), (rows, read)
        results.append((report.cycles, report.marks(),
                        m.read_mem(1, address(0, 3, 0), wpb), m.read_mem(1, address(0, 4, 0), 8),
                        [m.read_mem(1, address(0, 5 + 2 * r + c, 0), wpb) for r, c in cores]))
    assert results[0] == results[1]
    cycles, marks, b3, b4, copies = results[0]
    assert b3 == block and copies == [block] * len(cores)        # every core ran its own program
    assert b4 == [0, 7, 8, 1, 11, 0, 111, 201 if aivs == 3 else 0]
    assert sorted(t["event"] for t in marks) == [20, 21, 23] + ([24] if aivs == 3 else [])


@functools.lru_cache(maxsize=None)
def _remote_loads(simulator, dispatch_machine=False):
    """Both cores of rank 0 load from rank 1 at once -- ``lw``, ``ldb``, ``poll`` and
    ``fadd`` -- and store what they got locally: ``(cycles, rank 0's copies, rank 1's words)``;
    on the shared test machine, or on the small dispatch case's (``dispatch_machine``)."""
    from utils import small_dispatch_machine
    m = (small_dispatch_machine(simulator) if dispatch_machine else
         machine(simulator, topology=("superpod", 2, 1, 1), aivs_per_die=2))
    wpb = m.config.words_per_block
    m.write_mem(1, address(0, 3, 0), [101 + k for k in range(wpb)])
    m.write_mem(1, address(0, 4, 0), [2000, 3000])
    for core in (0, 1):
        p = Program()
        p.li(1, address(1, 3, 0))
        p.lw(2, 1, 4 * (core + 1))                      # remote word 1 / 2 of rank 1's block 3
        p.ldb(0, 1, 0)                                   # remote block: rank 1's block 3
        p.li(3, address(1, 4, core))
        p.li(4, 5 + core)
        p.fadd(5, 3, 4)                                  # remote fetch-add: old value in R5
        p.poll(6, 3, 4, "ne")                            # remote poll: the new value
        p.li(7, address(0, 5, 4 * core))
        p.sw(2, 7, 0)
        p.sw(5, 7, 4)
        p.sw(6, 7, 8)
        p.li(7, address(0, 6 + core, 0))
        p.stb(0, 7, 0)
        p.fence()
        p.halt()
        m.load_program(0, core, p)
    report = m.run(2_000)
    assert report.done
    return (report.cycles, [m.read_mem(0, address(0, b, 0), wpb) for b in (5, 6, 7)],
            m.read_mem(1, address(0, 4, 0), 2))


@pytest.mark.parametrize("simulator", ["pysim", "icarus", "verilator", "native"])
def test_remote_loads_agree_on_every_simulator(simulator):
    """Remote lw/ldb/poll/fadd from two cores of rank 0 to rank 1 complete with the right values
    in pysim's cycles on every simulator. Regression: on Icarus a remote load never completed
    (an ``always @*`` block of the router never ran at time 0, its output ``ub_wr`` stayed x).
    Verilator runs on the small dispatch case's machine (its build is shared), compared with
    Amaranth's run on that machine."""
    from utils import require_simulator
    require_simulator(simulator)
    on_dispatch_machine = simulator == "verilator"
    got = _remote_loads(simulator, on_dispatch_machine)
    cycles, (words, block0, block1), fetched = got
    block = [101 + k for k in range(len(block0))]
    assert words[:8] == [102, 2000, 2005, 0, 103, 3000, 3006, 0]
    assert block0 == block1 == block
    assert fetched == [2005, 3006]
    assert cycles == _remote_loads("pysim", on_dispatch_machine)[0]


def test_send_buffers_make_the_store_window_whole_tokens(monkeypatch):
    """A preset's ``send_buffers`` (the open kernel's two UB token buffers) is a store window of
    that many tokens of the kernel's blocks (Machine.set_token_blocks), unless a knob sets it;
    a window past the cores' ``max_outstanding`` is refused, naming both; and it cannot be
    given with ``send_window_bytes``."""
    from epfabric.sw import presets
    monkeypatch.setitem(presets.PRESETS, "tiny",
                        presets.PRESETS["tiny"].replace(send_buffers=2))
    m = machine("pysim", max_outstanding=8)
    assert "store_window" not in m.run_knobs()                  # no kernel has said its blocks
    m.set_token_blocks(3)
    assert m.run_knobs()["store_window"] == 6
    m.set_knob("store_window", 1)
    assert m.run_knobs()["store_window"] == 1                   # a knob wins
    with pytest.raises(UserError, match=r"^send_buffers=2 of preset 'tiny' x 5 blocks a token is "
                                        r"a store window of 10 blocks, more than "
                                        r"max_outstanding=8$"):
        m.set_token_blocks(5)
    with pytest.raises(UserError, match=r"^send_buffers=2 and send_window_bytes=1024: one store "
                                        r"window; give one of them$"):
        presets.PRESETS["tiny"].replace(send_window_bytes=1024)

