"""The driver (sw/driver.py): Machine, Report, watchdog diagnosis, trace export."""

import json

import pytest

from epfabric.sw.assembler import Program
from epfabric.sw.driver import Machine, MachineConfig, WatchdogTimeout
from epfabric.sw.isa import address
from epfabric.sim.machine import backend

from utils import machine


def store_program(rank, values):
    p = Program()
    for i, v in enumerate(values):
        p.li(1, v)
        p.li(2, address(rank, 3, i))
        p.sw(1, 2, 0)
        p.mark(10 + i)
    p.fence()
    p.halt()
    return p


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
    chrome = report.chrome_trace(cycle_ns=1.0)
    inst = [e for e in chrome["traceEvents"] if e["ph"] == "i"]
    assert [e["name"] for e in inst] == ["mark 10", "mark 11"]
    assert inst[0]["ts"] == cycles[0] / 1000.0 and inst[0]["pid"] == 0 and inst[0]["tid"] == 0


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
    ({"topology": ("ring", 4)}, ValueError, "topology must start with one of superpod, star"),
    ({"topology": ("superpod", 2, 0, 1)}, ValueError, "npus_per_board must be >= 1, not 0"),
    ({"topology": ("star", 1)}, ValueError, r"n must be >= 2, not 1"),
    ({"aivs_per_die": 0}, ValueError, r"aivs_per_die must be in \[1, 64\], not 0"),
    ({"hbm_blocks": 12}, ValueError, "hbm_blocks must be a power of two, not 12"),
    ({"data_bytes": 48}, ValueError, "data_bytes must be a multiple of 32, not 48"),
    ({"lanes": 2.0}, TypeError, "lanes must be an integer, not 2.0"),
])
def test_bad_configuration_names_the_parameter(kw, exc, match):
    with pytest.raises(exc, match=match):
        MachineConfig(**kw)


def test_bad_calls_are_rejected_early():
    m = machine()
    with pytest.raises(ValueError, match=r"rank must be in \[0, 1\], not 2"):
        m.load_program(2, 0, [0])
    with pytest.raises(ValueError, match="has 200 instructions; imem_depth is 128"):
        m.load_program(0, 0, [0] * 200)
    with pytest.raises(ValueError, match="word-aligned local byte address"):
        m.write_mem(0, 3, [1])
    with pytest.raises(ValueError, match="runs past hbm_blocks=16"):
        m.write_mem(0, address(0, 15, 127), [1, 2])
    with pytest.raises(RuntimeError, match="needs a finished run"):
        m.read_mem(0, 0)
    with pytest.raises(RuntimeError, match="no program loaded"):
        m.run()
    with pytest.raises(TypeError, match="backend must be a Backend"):
        Machine("tiny", backend="pysim")
    with pytest.raises(ValueError, match="backend must be one of pysim, icarus, verilator"):
        backend("modelsim")
