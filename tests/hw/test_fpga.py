"""FPGA-ready die top (hw/fpga.py): loaded, run and read back through its host port.

The same host-side sequence as the simulated machine
(:mod:`epfabric.sim.backends.host`) drives it on Amaranth's simulator; the
expected memory is computed here from the programs, independently of the
model.
"""

import pytest
from amaranth.hdl import Fragment

from epfabric.hw.fpga import FpgaDie
from epfabric.hw.isa import address
from epfabric.sim.backends.host import host_read, host_read_pipelined, host_run, host_write, \
    load_programs
from epfabric.sw.assembler import Program

from rejected import rejected
from utils import ComponentSpec, run

# small memories keep Amaranth's simulator quick; the logic is the FPGA top's
PARAMS = {"aivs": 2, "imem_depth": 32, "hbm_blocks": 16, "hbm_latency": 2}
SPEC = ComponentSpec("epfabric.hw.fpga:FpgaDie", PARAMS)


async def fpga_run(bench, programs, hbm, reads, max_cycles=2000):
    """Load ``programs`` ([[core, words]]) and ``hbm`` ([[addr, word]]), run, read ``reads``."""
    await host_write(bench, load_programs([[0, c, w] for c, w in programs],
                                          [[0, a, w] for a, w in hbm]))
    result = await host_run(bench, max_cycles)
    result["fault"] = await bench.get("fault")
    result["mem"] = await host_read(bench, [[0, a] for a in reads])
    return result


def _run(programs, hbm=(), reads=()):
    programs = [[c, p.assemble()] for c, p in programs.items()]
    out, _ = run(SPEC, fpga_run, {"programs": programs, "hbm": [list(x) for x in hbm],
                                  "reads": list(reads)})
    return out


def test_program_loaded_run_and_read_back_through_the_host_port():
    """Core 0 stores and fetch-adds locally; core 1 does the same through rank 1 (the loopback)."""
    here, mirror = address(0, 5, 0), address(1, 5, 0)
    p0 = Program().li(10, here).li(5, 0x1234).sw(5, 10, 4)          # word 1 = 0x1234
    p0.li(6, 3).fadd(7, 10, 6).sw(7, 10, 8).fence().halt()            # word 0 += 3; word 2 = old
    p1 = Program().li(10, mirror).li(5, 0xBEEF).sw(5, 10, 12)        # word 3 via REQ/RSP flits
    p1.lw(6, 10, 16).addi(6, 6, 1).sw(6, 10, 20).fence().halt()      # word 5 = word 4 + 1
    out = _run({0: p0, 1: p1}, hbm=[(here, 40), (here + 16, 99)],
               reads=[here + 4 * k for k in range(6)])
    assert (out["done"], out["timeout"], out["fault"]) == (1, 0, 0)
    assert out["mem"] == [43, 0x1234, 40, 0xBEEF, 99, 100]
    assert out["cycles"] > 0


def test_fetch_adds_of_both_cores_local_and_looped_back_are_exact():
    """10 local + 10 looped-back fetch-adds on one word: the atomic UB port serialises all 20."""
    def prog(rank):
        p = Program().li(10, address(rank, 2, 0)).li(5, 1).li(6, 10)
        p.label("loop").fadd(4, 10, 5).addi(6, 6, -1).bne(6, 0, "loop")
        return p.fence().halt()
    out = _run({0: prog(0), 1: prog(1)}, reads=[address(0, 2, 0)])
    assert out["mem"] == [20] and out["done"] == 1


def test_watchdog_stops_a_program_that_never_halts():
    out = _run({0: Program().label("spin").j("spin")})
    assert (out["done"], out["timeout"], out["cycles"]) == (0, 1, 2000)


async def read_latency(bench, words):
    await host_write(bench, [[1, 0, 0, a, w] for a, w in words])     # HostTarget.HBM
    return [lat for lat, _w in await host_read_pipelined(bench, [[0, a] for a, _w in words])]


def test_host_read_latency_is_hbm_latency_plus_the_input_register():
    words = [[address(0, 1, 1), 5], [address(0, 3, 0), 6]]
    lat, _ = run(SPEC, read_latency, {"words": words})
    latency = FpgaDie.signature_for(**PARAMS).params["host_read_latency"]
    assert lat == [latency] * 2 == [PARAMS["hbm_latency"] + 1] * 2


def test_signature_is_the_host_port_with_run_control_and_a_fault_bit():
    top = FpgaDie(aivs=3)
    Fragment.get(top, None)
    assert set(top.signature.members) == {"host", "fault"}
    assert {"we", "target", "core", "addr", "wdata", "re", "rvalid", "rdata", "start",
            "max_cycles", "cycle", "running", "done", "timeout", "stop"} == \
        set(top.signature.members["host"].signature.members)
    assert top.die.ranks == 2 and top.die.aivs == 3


def test_bad_parameters_name_themselves():
    with pytest.raises(ValueError, match=r"aivs must be in \[1, 64\], not 0"):
        rejected(FpgaDie, aivs=0)
    with pytest.raises(TypeError, match="aivs must be an integer, not '2'"):
        rejected(FpgaDie, aivs="2")
    with pytest.raises(ValueError, match="hbm_blocks must be a power of two, not 100"):
        rejected(FpgaDie, hbm_blocks=100)
    with pytest.raises(ValueError, match=r"hbm_latency must be in \[1, 256\], not 0"):
        rejected(FpgaDie, hbm_latency=0)
    with pytest.raises(TypeError):
        rejected(FpgaDie, 2)          # keyword-only
