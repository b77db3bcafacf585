"""System top (hw/system.py): dies on a fabric, host port, done, watchdog, MARK trace, three simulators.

The system is loaded, run and read back through its host port with the
shared host-side sequence (:mod:`epfabric.sim.backends.host`), as the
machine backends do.
"""

import pytest

from epfabric.hw.host import HostTarget
from epfabric.hw.isa import address
from epfabric.hw.system import System
from epfabric.hw.topology import SUPERPOD_HOPS
from epfabric.sim.backends.host import (host_read, host_read_all, host_read_pipelined, host_run,
                                        host_write, load_programs)
from epfabric.sw.assembler import Program
from epfabric.sw.presets import get_preset

from rejected import rejected
from utils import require_simulator, run, system_spec, tiny_timing

M32 = 0xFFFFFFFF


def spec(topology, aivs=1, **kw):
    """The AIV system of the tiny preset (:func:`utils.system_spec`)."""
    return system_spec(topology, aivs, **kw)


#: the cross-simulator configuration: 2 dies of one NPU, 1 AIV each
SMALL = spec(("superpod", 2, 1, 1), aivs=1)


async def system_run(bench, programs, hbm=None, reads=(), max_cycles=2000):
    """Load ``programs`` ([[rank, core, words]]) and ``hbm`` ([[rank, addr, word]]), run to stop.

    Everything is read through ports after the run (as the fast backends do).
    """
    sysc = bench.component
    await host_write(bench, load_programs(programs, hbm or ()))
    t0 = bench.cycle
    result = await host_run(bench, max_cycles)
    waited = bench.cycle - t0
    n = sysc.n_cores
    out = {"cycle": result["cycles"], "done": result["done"], "timeout": result["timeout"],
           "waited": waited,
           "pc": [await bench.get(f"core_pc.{g}") for g in range(n)],
           "halted": [await bench.get(f"core_halted.{g}") for g in range(n)],
           "fault": [await bench.get(f"core_fault.{g}") for g in range(n)],
           "waiting": [await bench.get(f"core_waiting.{g}") for g in range(n)],
           "wait_addr": [await bench.get(f"core_wait_addr.{g}") for g in range(n)],
           "tx_blocks": [await bench.get(f"fabric_tx_blocks.{r}") for r in range(sysc.ranks)],
           "rx_blocks": [await bench.get(f"fabric_rx_blocks.{r}") for r in range(sysc.ranks)],
           "trace_dropped": await bench.get("trace_dropped")}
    if bench.has_port("fabric_link_blocks.0"):           # a superpod: per link kind
        out["links"] = {kind: [await bench.get(f"fabric_link_{what}.{k}")
                               for what in ("blocks", "small")]
                        for k, kind in enumerate(SUPERPOD_HOPS)}
    count = await bench.get("trace_count")
    trace = []
    for k in range(count):
        bench.set("trace_raddr", k)
        await bench.tick()
        e = bench.decode("trace_rdata", await bench.get("trace_rdata"))
        trace.append([int(e.core), int(e.cycle), int(e.event)])
    out["trace"] = trace
    out["mem"] = await host_read(bench, reads)
    return out


def run_sys(sp, programs, simulator="pysim", **kw):
    progs = [[r, c, p.assemble() if isinstance(p, Program) else p] for (r, c), p in programs.items()]
    result, _ = run(sp, system_run, {"programs": progs, **kw}, simulator=simulator)
    return result


# --- programs -------------------------------------------------------------------------------------

def pingpong_programs():
    """Rank 0 stores 0x11 to rank 1 and polls its own word for rank 1's answer; rank 1 polls, answers."""
    p0 = Program().li(10, address(1, 2, 0)).li(11, address(0, 2, 0)).li(5, 0x11).li(6, 0x22)
    p0.mark(1).sw(5, 10, 0).poll(4, 11, 6, "eq").mark(2).sw(4, 11, 4).fence().halt()
    p1 = Program().li(10, address(1, 2, 0)).li(11, address(0, 2, 0)).li(5, 0x11).li(6, 0x22)
    p1.poll(4, 10, 5, "eq").mark(3).sw(6, 11, 0).fence().halt()
    return {(0, 0): p0, (1, 0): p1}


def fetch_add_programs(ranks, aivs, target, reps):
    progs = {}
    for r in range(ranks):
        for c in range(aivs):
            p = Program().li(10, target).li(5, r * aivs + c + 1).li(6, reps)
            p.label("loop").fadd(4, 10, 5).addi(6, 6, -1).bne(6, 0, "loop").halt()
            progs[(r, c)] = p
    return progs


# --- tests ------------------------------------------------------------------------------------------

def test_remote_store_and_poll_across_dies():
    r = run_sys(SMALL, pingpong_programs(), reads=[[0, address(0, 2, 1)], [1, address(1, 2, 0)]])
    assert r["done"] == 1 and r["timeout"] == 0
    assert r["mem"] == [0x22, 0x11]
    # MARKs: rank 0's mark 2 comes after rank 1's mark 3 by at least one intra-NPU latency
    marks = {e: (core, cyc) for core, cyc, e in r["trace"]}
    intra = get_preset("tiny").latency_cycles()["intra"]
    assert marks[1][0] == 0 and marks[3][0] == 1 and marks[2][0] == 0
    assert marks[3][1] - marks[1][1] >= intra
    assert marks[2][1] - marks[3][1] >= intra
    assert r["tx_blocks"][0] >= 1 and r["tx_blocks"][1] >= 1


#: the ping-pong below on 2 dies x 1 AIV: finishing cycle and MARK trace [core, cycle, event],
#: pinned (a timing change must update them on purpose)
PINGPONG_CYCLES, PINGPONG_TRACE = 39, [[0, 5, 1], [1, 17, 3], [0, 31, 2]]


def test_small_system_same_on_every_simulator(simulator):
    """2 dies x 1 AIV: the specified memory and the pinned cycles and trace on every simulator,
    and everything (counters, pcs, waits) equal to Amaranth's on Icarus and Verilator.

    On :data:`SAMPLED`, the same system with a counter sampler: its Icarus and Verilator
    builds serve the sampler's test below too (two builds fewer in ``make test``), and the
    sampler changes no cycle (test_sampler_off_takes_nothing_and_changes_no_cycle, where
    SMALL and SAMPLED give these pinned cycles on Amaranth's simulator). Systems without a
    sampler run on Icarus and Verilator in every kernel's cross-simulator test."""
    reads = [[0, address(0, 2, 1)], [1, address(1, 2, 0)], [0, address(0, 3, 0)]]
    progs = pingpong_programs()
    got = run_sys(SAMPLED, progs, simulator=simulator, reads=reads,
                  hbm=[[0, address(0, 3, 0), 0xCAFE]])
    assert got["done"] == 1 and got["mem"] == [0x22, 0x11, 0xCAFE]
    assert (got["cycle"], got["trace"]) == (PINGPONG_CYCLES, PINGPONG_TRACE)
    if simulator != "pysim":
        assert got == run_sys(SAMPLED, progs, reads=reads, hbm=[[0, address(0, 3, 0), 0xCAFE]])


def test_remote_fetch_add_from_every_core_is_exact():
    sp = spec(("superpod", 2, 2, 1), aivs=2)     # 4 dies, intra-NPU and one-hop
    target = address(3, 1, 0)
    reps = 3
    r = run_sys(sp, fetch_add_programs(4, 2, target, reps), reads=[[3, target]], max_cycles=5000)
    assert r["done"] == 1
    assert r["mem"] == [reps * sum(range(1, 9))]


def test_remote_block_store_is_atomic_and_host_loaded_data_travels():
    """Rank 0 loads a block (host-written), stores it remotely; rank 1 polls the block's last word then checks word 0."""
    blk0 = address(0, 1, 0)
    dst = address(1, 4, 0)
    p0 = Program().li(10, blk0).li(11, dst).li(1, 0)
    p0.ldb(1, 10, 0).stb(1, 11, 0).fence().halt()
    hbm = [[0, blk0 + 4 * w, 0x100 + w] for w in range(7)] + [[0, blk0 + 28, 0x77]]
    # the flag is word 7 (the last modelled word): poll it, then word 0 must already be new
    p1 = Program().li(11, dst + 28).li(6, 0x77).poll(4, 11, 6, "eq").lw(5, 11, -28)
    p1.li(12, address(1, 5, 0)).sw(5, 12, 0).fence().halt()
    r = run_sys(SMALL, {(0, 0): p0, (1, 0): p1}, hbm=hbm,
                reads=[[1, dst + 4 * w] for w in range(8)] + [[1, address(1, 5, 0)]])
    assert r["done"] == 1
    assert r["mem"] == [0x100 + w for w in range(7)] + [0x77, 0x100]


def test_host_writes_imem_and_hbm_and_reads_back():
    # a program written through the host port runs; HBM words written by the host read back
    p = Program().li(10, address(1, 0, 3)).lw(4, 10, 0).addi(4, 4, 1).sw(4, 10, 4).fence().halt()
    r = run_sys(SMALL, {(1, 0): p}, hbm=[[1, address(1, 0, 3), 41], [0, address(0, 6, 5), 9]],
                reads=[[1, address(1, 0, 4)], [0, address(0, 6, 5)], [1, address(1, 0, 3)]])
    assert r["mem"] == [42, 9, 41]
    assert r["done"] == 1 and r["halted"] == [1, 1]   # rank 0's core is disabled: counts as halted


def test_done_cycle_count_of_halt():
    r = run_sys(SMALL, {(0, 0): Program().halt(), (1, 0): Program().nop().nop().halt()})
    assert r["done"] == 1 and r["cycle"] == 3


def test_lone_halt_counts_one_cycle():
    """run_control's count: a lone ``halt`` (the other rank's core disabled) gives cycle 1."""
    r = run_sys(SMALL, {(0, 0): Program().halt()})
    assert r["done"] == 1 and r["timeout"] == 0 and r["cycle"] == 1
    assert r["halted"] == [1, 1] and r["pc"][0] == 0 and r["fault"] == [0, 0]


def test_never_halting_program_times_out_and_names_the_wait():
    flag = address(1, 3, 2)
    p = Program().li(10, flag).li(6, 1).poll(4, 10, 6, "eq").halt()
    r = run_sys(SMALL, {(0, 0): p, (1, 0): Program().halt()}, max_cycles=150)
    assert r["timeout"] == 1 and r["done"] == 0 and r["cycle"] == 150
    assert r["waiting"] == [1, 0] and r["wait_addr"][0] == flag
    assert r["halted"] == [0, 1]


def test_trace_drops_and_counts_when_full():
    p = Program()
    for k in range(20):
        p.mark(k)
    p.halt()
    r = run_sys(SMALL, {(0, 0): p})
    assert len(r["trace"]) == 16 and r["trace_dropped"] == 4
    assert [e for _c, _t, e in r["trace"]] == list(range(16))
    assert [t for _c, t, _e in r["trace"]] == list(range(16))


def test_trace_merge_takes_every_cores_marks_in_turn():
    """The MARK trace merge (``trace_arb``) is round robin: both cores mark in every cycle (a
    MARK stalls its core until the merge takes it). The merge is always ready and stamps the
    cycle it takes an entry; with n = 2 requesters and a grant held H = 1 cycle, a core that
    keeps asking is served within n H = 2 cycles (at most n - 1 others first: the pointer
    moves past every grantee), so each core's consecutive marks are stamped at most 2 cycles
    apart, and its first at most 1 cycle after the first of all. Fixed priority would take
    all of core 0's marks first (tests/hw/test_fairness.py has the other arbiters)."""
    p = Program()
    for k in range(8):
        p.mark(k)
    p.halt()
    r = run_sys(SMALL, {(0, 0): p, (1, 0): p})
    assert len(r["trace"]) == 16 and r["trace_dropped"] == 0
    start = min(t for _c, t, _e in r["trace"])
    for core in (0, 1):
        stamps = [start - 1] + [t for c, t, _e in r["trace"] if c == core]
        assert len(stamps) == 9 and max(b - a for a, b in zip(stamps, stamps[1:])) <= 2, \
            (core, r["trace"])


def test_bad_topology_and_shape_name_the_parameter():
    timing = tiny_timing()
    with pytest.raises(ValueError, match="topology kind must be one of superpod, star, not 'ring'"):
        rejected(System, timing=timing, topology=("ring", 4))
    with pytest.raises(ValueError, match="topology 'star' takes 1 size"):
        rejected(System, timing=timing, topology=("star", 2, 2))
    with pytest.raises(TypeError, match="topology must be a tuple"):
        rejected(System, timing=timing, topology="star")
    with pytest.raises(ValueError, match=r"aivs_per_die must be in \[1, 256\], not 0"):
        rejected(System, timing=timing, topology=("star", 2), aivs_per_die=0)
    with pytest.raises(TypeError, match=r"aivs_per_die must be an integer, not 1.0"):
        rejected(System, timing=timing, topology=("star", 2), aivs_per_die=1.0)
    with pytest.raises(ValueError, match="n must be >= 2, not 1"):
        rejected(System, timing=timing, topology=("star", 1))
    with pytest.raises(TypeError, match=r"n must be an integer, not '2'"):
        rejected(System, timing=timing, topology=("star", "2"))
    with pytest.raises(ValueError, match=r"trace_depth must be in \[1, 65535\], not 0"):
        rejected(System, timing=timing, topology=("star", 2), trace_depth=0)
    with pytest.raises(TypeError, match="timing must be a FabricTiming"):
        rejected(System, timing=get_preset("tiny"), topology=("star", 2))
    with pytest.raises(ValueError, match="timing.hops lacks direct"):
        rejected(System, timing=tiny_timing("star"), topology=("superpod", 2, 1, 1))


def test_preset_shape_maxima_are_checked_by_the_factory():
    """System takes any shape; the JSON-facing factory checks it against the preset's maxima."""
    from epfabric.sw.tops import aiv_system
    with pytest.raises(ValueError, match=r"npus_per_board must be in \[1, 2\], not 3"):
        aiv_system(preset="tiny", topology=["superpod", 2, 3, 1])
    with pytest.raises(ValueError, match=r"unknown preset 'nope'"):
        aiv_system(preset="nope", topology=["superpod", 2, 1, 1])
    assert System.signature_for(timing=tiny_timing(), topology=("superpod", 2, 3, 1)).params[
        "ranks"] == 6


def test_verilog_has_one_die_module_shared_by_every_rank():
    """The simulation Verilog defines the die once; every rank instantiates it with its rank."""
    import re
    from epfabric.sim.backends.verilog import verilog_of
    text = verilog_of(spec(("superpod", 2, 2, 1)), "verilator")
    modules = re.findall(r"^module \\?(\S+?)[ (]", text, re.M)
    assert modules.count("epf_die") == 1
    assert not any(re.fullmatch(r"top\.die\d+(\..*)?", name) for name in modules)
    inst = re.findall(r"^\s*epf_die (\S+) \(", text, re.M)
    assert sorted(inst) == [f"die{r}" for r in range(4)]
    ranks = sorted(int(v, 16) for v in re.findall(r"\.rank_in\(2'h(\d)\)", text))
    assert ranks == [0, 1, 2, 3]


#: The flat Verilator build of these multi-die systems is the slowest part of the
#: test (20-40 s on 2 cores); Icarus runs the same shared-module Verilog in
#: ``make test``, and the native backend's cross-simulator tests step the same
#: modules. The Verilator case runs with ``make test-slow``.
SHARED_MODULE_SIMULATORS = ["pysim", "icarus", pytest.param("verilator", marks=pytest.mark.slow)]


@pytest.mark.parametrize("simulator", SHARED_MODULE_SIMULATORS)
def test_shared_core_module_gets_each_core_its_id(simulator):
    """One ``epf_aiv`` module serves every core of the die; ``csrr core_id`` still reads ``c``.

    The Verilog simulators run the shared core module with its id on a port
    (``core_id_in``), pysim the flat system with constant ids: every core
    stores its id and rank, and the expected words are computed here.
    """
    require_simulator(simulator)
    import re
    from epfabric.sim.backends.verilog import verilog_of
    sp = spec(("superpod", 2, 1, 1), aivs=3)
    if simulator != "pysim":
        text = verilog_of(sp, simulator)
        assert re.findall(r"^module \\?(\S+?)[ (]", text, re.M).count("epf_aiv") == 1
        assert sorted(re.findall(r"^\s*epf_aiv (\S+) \(", text, re.M)) == ["core0", "core1", "core2"]
    progs = {(r, c): Program().csrr(4, "core_id").csrr(5, "rank").li(10, address(r, 2, 2 * c))
             .sw(4, 10, 0).sw(5, 10, 4).mark(c).fence().halt()
             for r in range(2) for c in range(3)}
    reads = [[r, address(r, 2, 2 * c) + 4 * k] for r in range(2) for c in range(3) for k in range(2)]
    got = run_sys(sp, progs, simulator=simulator, reads=reads)
    assert got["done"] == 1
    assert got["mem"] == [v for r in range(2) for c in range(3) for v in (c, r)]
    assert sorted((core, event) for core, _cyc, event in got["trace"]) == [
        (r * 3 + c, c) for r in range(2) for c in range(3)]
    if simulator != "pysim":
        assert got == run_sys(sp, progs, reads=reads)


@pytest.mark.parametrize("simulator", SHARED_MODULE_SIMULATORS)
def test_shared_switch_modules_route_as_the_constant_switches(simulator):
    """Die, tier-1 and tier-2 switches as one Verilog module per kind, routes on a port.

    8 dies on two boards: every rank's core fetch-adds into rank 7 and stores
    its old value at home, so flits cross every switch tier. The Verilog
    simulators run the shared-switch Verilog, pysim the constant-route
    switches; the sum is computed here and everything must equal pysim's.
    """
    require_simulator(simulator)
    import re
    from epfabric.sim.backends.verilog import verilog_of
    sp = spec(("superpod", 2, 2, 2))
    if simulator != "pysim":
        text = verilog_of(sp, simulator)
        kinds = [m for m in re.findall(r"^module \\?(\S+?)[ (]", text, re.M)
                 if re.fullmatch(r"epf_switch\d+", m)]      # not their submodules (epf_switch0.arb0)
        assert len(kinds) == 3                    # die, tier-1 and tier-2 switches
        assert len(re.findall(r"^\s*epf_switch\d+ \S+ \(", text, re.M)) == 8 + 2 + 4
    target = address(7, 1, 0)
    progs = fetch_add_programs(8, 1, target, 2)
    reads = [[7, target]]
    got = run_sys(sp, progs, simulator=simulator, reads=reads, max_cycles=20000)
    assert got["done"] == 1
    assert got["mem"] == [2 * sum(range(1, 9))]
    # the link counters: no block, and each fetch-add a small request along its path to rank 7
    # and a small answer back (rank 7's own never enter the fabric), from the paths of
    # sw/ubep/traffic.py; and what the ranks sent (received) left (entered) them by a direct
    # link or their uplink
    from epfabric.sw.ubep.traffic import path_links
    want = {kind: [0, 0] for kind in SUPERPOD_HOPS}
    for r in range(7):
        for kind in path_links(r, 7, (2, 2, 2)) + path_links(7, r, (2, 2, 2)):
            want[kind][1] += 2
    assert got["links"] == want
    links = got["links"]
    assert sum(got["tx_blocks"]) == sum(links["direct"]) + sum(links["up"])
    assert sum(got["rx_blocks"]) == sum(links["direct"]) + sum(links["down"])
    if simulator != "pysim":
        assert got == run_sys(sp, progs, reads=reads, max_cycles=20000)


def test_switch_routes_from_a_port_need_the_table_length():
    from amaranth.hdl import Fragment
    from epfabric.hw.link import flit_layout
    from epfabric.hw.switch import Switch
    sw = Switch(ports=3, routes=[0, 2, 1, 1], route_port=True)
    Fragment.get(sw, None)
    plain = Switch.signature_of(ports=3, destinations=3, payload=flit_layout(ranks=3, data_bits=32),
                                counter_width=32, route_port=False)
    assert len(sw.routes_in) == 4 and "routes_in" not in plain.members


def test_die_module_takes_its_rank_from_a_port():
    """A shared system's die module takes its rank on ``rank_in`` and its cores are instances
    of one core module (``core_id_in`` driven by a constant); its modules are built only to
    be converted."""
    from amaranth.hdl import Fragment
    from epfabric.hw.die import Die
    from epfabric.hw.instances import Sharing
    assert "rank_in" in Die.signature_for(rank=None, ranks=4).members
    assert "rank_in" not in Die.signature_for(rank=1, ranks=4).members
    top = System(timing=tiny_timing(), topology=("superpod", 2, 1, 1), aivs_per_die=2,
                 shared=Sharing(has_reset=False))
    Fragment.get(top, None)
    parts = top.parts
    assert not any(part.built for part in parts.values())    # nothing built to be dropped
    die, core = parts["epf_die"].component(), parts["epf_aiv"]
    # the die wires its cores from the core's signature_for: the core is not built for it
    # (a built part is converted again even when its Verilog is cached)
    assert not core.built and "core_id_in" in core.signature.members
    assert [c.signature for c in die.cores] == [core.signature] * 2
    Fragment.get(die, None)
    assert core.component().signature == core.signature      # what the core builds, given
    Fragment.get(core.component(), None)
    with pytest.raises(TypeError, match="core_module"):
        rejected(Die, rank=None, ranks=4, core_module="epf_aiv")
    with pytest.raises(TypeError, match="shared must be a Sharing or None"):
        rejected(System, timing=tiny_timing(), topology=("superpod", 2, 1, 1), shared="epf_die")


def test_an_instancer_decides_what_an_instance_is():
    """The top asks the sharing's instancer for every die, link and switch instance (the
    native backend's records them instead, :mod:`epfabric.sim.backends.native_build`); the die
    module's cores stay instances inside it."""
    from amaranth.hdl import Fragment, Module
    from epfabric.hw.instances import Instancer, Sharing

    class Counting(Instancer):
        def __init__(self):
            self.seen = []

        def instance(self, module, iface, skip, consts):
            self.seen.append((module.name, dict(consts)))
            return Module()

    counting = Counting()
    top = System(timing=tiny_timing(), topology=("superpod", 2, 1, 1),
                 shared=Sharing(has_reset=False, instancer=counting))
    assert not counting.seen              # asked when the top is elaborated
    Fragment.get(top, None)
    modules = [name for name, _consts in counting.seen]
    assert modules.count("epf_die") == 2 and set(modules) <= set(top.parts)
    assert "epf_aiv" not in modules
    assert [c["rank_in"].value for n, c in counting.seen if n == "epf_die"] == [0, 1]
    with pytest.raises(TypeError, match="instancer must be an Instancer or None"):
        Sharing(has_reset=False, instancer=[])


def test_host_port_is_the_shared_signature():
    """The host port has every member: rank, all-ranks reads and run control."""
    sysc = System.signature_for(timing=tiny_timing(), topology=("superpod", 2, 2, 1),
                                aivs_per_die=2).create()
    members = sysc.signature.members["host"].signature.members
    assert set(members) == {"we", "target", "rank", "core", "addr", "wdata", "re", "rvalid",
                            "rdata", "start", "re_all", "rdata_all", "max_cycles", "cycle",
                            "running", "done", "timeout", "stop", "wrow", "wmask", "rrow_all"}
    assert sysc.host_read_latency == 2 + 1     # hbm_latency + the boundary register


async def read_all_intent(bench, addrs):
    """Write a different word at each address of every rank, then read them all back at once."""
    sysc = bench.component
    await host_write(bench, [[HostTarget.HBM.value, r, 0, a, 0x100 * r + k]
                             for r in range(sysc.ranks) for k, a in enumerate(addrs)])
    got = await host_read_all(bench, sysc.ranks, addrs)
    return {str(r): words for r, words in got.items()}


def test_host_reads_every_rank_at_once():
    """On the 4 dies x 2 AIVs of test_remote_fetch_add_from_every_core_is_exact (one design)."""
    addrs = [0, 4, 8]                                   # block 0, words 0..2
    got, _ = run(spec(("superpod", 2, 2, 1), aivs=2), read_all_intent, {"addrs": addrs})
    assert got == {str(r): [0x100 * r + k for k in range(3)] for r in range(4)}


async def host_read_timing(bench, words):
    """Host-write ``words`` ([[rank, addr, word]]), then read them back, one ``re`` per cycle.

    Returns the ticks from each read's ``re`` to its ``rvalid`` and the words read.
    """
    await host_write(bench, [[HostTarget.HBM.value, r, 0, a, w] for r, a, w in words])
    got = await host_read_pipelined(bench, [[r, a] for r, a, _w in words])
    return {"latency": [lat for lat, _w in got], "words": [w for _lat, w in got]}


def test_host_read_latency_is_exact_and_reads_pipeline():
    """A host read answers exactly ``host_read_latency`` ticks after ``re``, one read per cycle."""
    words = [[0, address(0, 6, 5), 9], [1, address(1, 0, 3), 41], [0, address(0, 2, 0), 0x22],
             [1, address(1, 7, 7), M32]]
    out, _ = run(SMALL, host_read_timing, {"words": words})
    latency = SMALL.interface().host_read_latency
    assert out["latency"] == [latency] * len(words)
    assert out["words"] == [w for _r, _a, w in words]


def test_a_testbench_gets_the_systems_ports_without_building_it():
    """What a testbench of the system's Verilog drives (cocotb, native) is an interface of
    the signature computed from the parameters: the flat system's ports, and the parameters
    the intents read (``ranks``, ``n_cores``, ``host_read_latency``), with nothing built."""
    from amaranth.hdl import Fragment
    sp = spec(("superpod", 2, 2, 1), aivs=2)
    bench = sp.interface()
    flat = sp.build()
    Fragment.get(flat, None)
    def ports(top):
        return [(path, member.flow, repr(member.shape)) for path, member, _v in top.signature.flatten(top)]
    assert ports(bench) == ports(flat) and len(ports(flat)) > 50
    assert ((bench.ranks, bench.aivs_per_die, bench.n_cores, bench.host_read_latency)
            == (flat.ranks, flat.aivs_per_die, flat.n_cores, flat.host_read_latency) == (4, 2, 8, 3))
    assert System.signature_for(timing=tiny_timing(), topology=("superpod", 2, 2, 1),
                                aivs_per_die=2, sample_depth=0).params == bench.signature.params
    with pytest.raises(TypeError, match="System has no parameter"):
        System.signature_for(topology=("superpod", 2, 2, 1), ranks=4)


# --- the counter sampler (sample_depth) ----------------------------------------------------------

#: 2 dies x 1 AIV with a counter sampler of 64 entries
SAMPLED = spec(("superpod", 2, 1, 1), aivs=1, sample_depth=64)

#: the sampled counters per rank, as ports (the sample entry's fields of the same names)
RANK_COUNTERS = {"tx_blocks": "fabric_tx_blocks", "rx_blocks": "fabric_rx_blocks",
                 "tx_stalls": "fabric_tx_stalls", "ub_blocks": "ub_blocks", "ub_words": "ub_words"}


def store_stream_programs(blocks=5):
    """Rank 0: ``blocks`` block stores and one word store to rank 1, one block store to its own
    memory, fence, halt; rank 1 halts. Known UB commits: rank 1 ``blocks`` blocks + 1 word,
    rank 0 one block (the UB port of a store's destination commits it)."""
    p0 = Program().li(10, address(1, 2, 0)).li(11, address(0, 3, 0)).li(5, 0x55).li(6, blocks)
    p0.label("loop").stb(0, 10, 0).addi(6, 6, -1).bne(6, 0, "loop")
    p0.sw(5, 10, 4).stb(0, 11, 0).fence().halt()
    return {(0, 0): p0, (1, 0): Program().halt()}


async def _counters_now(bench, ranks):
    out = {name: [await bench.get(f"{port}.{r}") for r in range(ranks)]
           for name, port in RANK_COUNTERS.items()}
    for what in ("blocks", "small"):
        out[f"link_{what}"] = [await bench.get(f"fabric_link_{what}.{k}")
                               for k in range(len(SUPERPOD_HOPS))]
    return out


async def sampled_run(bench, programs, every, live=False, max_cycles=2000):
    """Load ``programs``, write the sampler's interval ``every`` (CTRL SAMPLE_EVERY_REG), run;
    return the sampler's entries, ``sample_dropped``, the end-of-run counters and cycles and,
    with ``live``, every running cycle's counters as the ports show them (``{cycle: ...}``)."""
    from epfabric.hw.system import SAMPLE_EVERY_REG
    ranks = bench.component.ranks
    await host_write(bench, load_programs(programs) +
                     [[HostTarget.CTRL.value, 0, 0, SAMPLE_EVERY_REG, every]])
    seen = {}
    if live:
        bench.set("host.max_cycles", max_cycles)
        bench.set("host.start", 1)
        await bench.tick()
        bench.set("host.start", 0)
        await bench.tick()
        while not await bench.get("host.stop"):
            if await bench.get("host.running"):
                seen[await bench.get("host.cycle")] = await _counters_now(bench, ranks)
            await bench.tick()
        cycles = await bench.get("host.cycle")
    else:
        cycles = (await host_run(bench, max_cycles))["cycles"]
    count = await bench.get("sample_count")
    samples = []
    for k in range(count):
        bench.set("sample_raddr", k)
        await bench.tick()
        e = bench.decode("sample_rdata", await bench.get("sample_rdata"))
        samples.append({name: int(e[name]) if name == "cycle" else [int(v) for v in e[name]]
                        for name in ("cycle", *RANK_COUNTERS, "link_blocks", "link_small")})
    return {"cycles": cycles, "samples": samples, "dropped": await bench.get("sample_dropped"),
            "end": await _counters_now(bench, ranks), "live": seen}


def test_sampler_samples_the_live_counters_at_exact_cycles():
    """Every 3 cycles of a known store stream the sample memory holds exactly what the
    counters' ports show in that cycle: samples at cycles 0, 3, 6, ... up to the run's last,
    monotone, the last at most the end-of-run counters, which are the stream's commits."""
    every = 3
    r, _ = run(SAMPLED, sampled_run, {"programs": _assembled(store_stream_programs()),
                                       "every": every, "live": True})
    samples, live, end = r["samples"], r["live"], r["end"]
    assert sorted(live) == list(range(r["cycles"] + 1))          # running in cycles 0..N
    assert [s["cycle"] for s in samples] == list(range(0, r["cycles"] + 1, every))
    assert r["dropped"] == 0 and len(samples) > 10
    for s in samples:
        assert {k: v for k, v in s.items() if k != "cycle"} == live[s["cycle"]], s["cycle"]
    for a, b in zip(samples, samples[1:]):
        assert all(x <= y for k in a if k != "cycle" for x, y in zip(a[k], b[k]))
    assert all(x <= y for k in end for x, y in zip(samples[-1][k], end[k]))
    assert end["ub_blocks"] == [1, 5] and end["ub_words"] == [0, 1]
    assert end["tx_blocks"][0] == 6 and end["rx_blocks"][1] == 6     # 5 blocks + 1 word
    assert samples[0] == {"cycle": 0, **{k: [0] * len(v) for k, v in end.items()}}
    # the commits land over the run, not at one instant: the rate is visible
    ub1 = [s["ub_blocks"][1] for s in samples]
    assert len(set(ub1)) >= 4


def _assembled(programs):
    return [[r, c, p.assemble()] for (r, c), p in programs.items()]


def test_sampler_stops_when_full_and_counts_the_dropped():
    """A 4-entry sampler every cycle keeps cycles 0..3 and counts every later sample dropped."""
    r, _ = run(spec(("superpod", 2, 1, 1), aivs=1, sample_depth=4), sampled_run,
               {"programs": _assembled(store_stream_programs()), "every": 1})
    assert [s["cycle"] for s in r["samples"]] == [0, 1, 2, 3]
    assert r["dropped"] == r["cycles"] + 1 - 4 > 0


def test_sampler_off_takes_nothing_and_changes_no_cycle():
    """Interval 0 (the register's reset value) takes no sample; the ping-pong's cycles and
    MARKs are the pinned ones with the sampler built, and a system without it (sample_depth 0)
    has none of its ports."""
    r, _ = run(SAMPLED, sampled_run, {"programs": _assembled(pingpong_programs()), "every": 0})
    assert r["samples"] == [] and r["dropped"] == 0 and r["cycles"] == PINGPONG_CYCLES
    for system in (SAMPLED, SMALL):
        got = run_sys(system, pingpong_programs())
        assert (got["cycle"], got["trace"]) == (PINGPONG_CYCLES, PINGPONG_TRACE)
    plain, sampled = SMALL.interface(), SAMPLED.interface()
    names = {path[0] for path, _m, _v in plain.signature.flatten(plain)}
    assert not {n for n in names if n.startswith(("sample_", "ub_"))}
    extra = {path[0] for path, _m, _v in sampled.signature.flatten(sampled)} - names
    assert extra == {"sample_count", "sample_dropped", "sample_raddr", "sample_rdata",
                     "ub_blocks", "ub_words"}
    with pytest.raises(ValueError, match=r"sample_depth"):
        rejected(System, timing=tiny_timing(), topology=("superpod", 2, 1, 1), sample_depth=70000)


def test_sampler_same_on_every_simulator(hdl_simulator):
    """The store stream's samples every 4 cycles, bit for bit, on Icarus, Verilator and the
    native backend as on Amaranth's simulator."""
    args = {"programs": _assembled(store_stream_programs()), "every": 4}
    ref, _ = run(SAMPLED, sampled_run, args)
    got, _ = run(SAMPLED, sampled_run, args, simulator=hdl_simulator)
    assert len(ref["samples"]) > 5
    assert got == ref


# --- in-network expert parallelism (issue 31): stbm and stbr on IncSwitch fabrics -------------

#: 4 dies on 2 boards (one NPU of 2 dies each): direct links, tier-1 and tier-2 switches;
#: 64 instruction rows for test_in_network_switches_leave_other_traffic_as_it_was's programs
#: (one design for every test of in-network EP)
EP = spec(("superpod", 2, 1, 2), aivs=1, hbm_blocks=16, imem_depth=64, ep_window=8)
EP_RANKS = 4


def ep_programs():
    """Rank 0 multicasts its block 1 to block 4 of dies 1, 2, 3 (one ``stbm``, fenced: three
    acks). Dies 0, 2, 3 each contribute their block 1 to block 8 of die 1 (``stbr``): 2's and
    3's meet in board 1's tier-1 switch, that sum and 0's in die 1's switch. Die 1 polls the
    result's flag word, then copies the flag it saw to block 9."""
    mcast, red = 0b1110, 0b1101
    progs = {}
    p0 = Program().li(10, address(0, 1, 0)).li(11, address(0, 4, 0)).li(12, mcast).li(1, 0)
    p0.ldb(1, 10, 0).stbm(1, 11, 12, 0).fence()
    progs[(0, 0)] = p0
    for r in (0, 2, 3):
        p = progs.get((r, 0)) or Program().li(1, 0)
        p.li(13, address(r, 1, 0)).li(14, address(1, 8, 0)).li(15, red)
        p.ldb(1, 13, 0).stbr(1, 14, 15, 0)
        progs[(r, 0)] = p
    p1 = Program().li(11, address(1, 8, 0)).li(6, 0x0D0D0001).poll(4, 11, 6, "eq")
    p1.li(12, address(1, 9, 0)).sw(4, 12, 0).fence()
    progs[(1, 0)] = p1
    for p in progs.values():
        p.halt()
    return progs, mcast, red


def ep_hbm():
    """Block 1 of every die: the flag word 0x0D0D0001, three header words, then eight 16-bit
    lanes (r * 0x1000 + lane) as four words."""
    hbm = []
    for r in range(EP_RANKS):
        words = [0x0D0D0001, 0, 0, 0] + [((r * 0x1000 + 2 * k + 1) << 16) | (r * 0x1000 + 2 * k)
                                         for k in range(4)]
        hbm += [[r, address(r, 1, w), v] for w, v in enumerate(words)]
    return hbm


def ep_run(simulator):
    progs, _mcast, _red = ep_programs()
    reads = [[r, address(r, 4, w)] for r in range(EP_RANKS) for w in range(8)]
    reads += [[1, address(1, 8, w)] for w in range(8)] + [[1, address(1, 9, 0)]]
    return run_sys(EP, progs, hbm=ep_hbm(), reads=reads, max_cycles=4000, simulator=simulator)


def test_stbm_and_stbr_multicast_and_reduce_in_the_network():
    r = ep_run("pysim")
    _progs, mcast, red = ep_programs()
    assert r["done"] == 1 and not any(r["fault"])
    mem = r["mem"]
    src = [w for _, _, w in ep_hbm()[:8]]                 # rank 0's block 1
    for d in range(EP_RANKS):
        assert mem[8 * d:8 * d + 8] == (src if mcast >> d & 1 else [0] * 8), d
    result = mem[32:40]
    contributors = [d for d in range(EP_RANKS) if red >> d & 1]
    lanes = [sum(d * 0x1000 + k for d in contributors) & 0xFFFF for k in range(8)]
    assert result[:4] == [0x0D0D0001, 0, 0, 0]            # the header once, not summed
    assert result[4:] == [(lanes[2 * k + 1] << 16) | lanes[2 * k] for k in range(4)]
    assert mem[40] == 0x0D0D0001
    # tier-2: the multicast crosses once (dies 2 and 3 share the source's plane; board 1's
    # tier-1 switch copies it to both); the group goes up twice and comes down once (a
    # tier-1 switch does not sum groups leaving its board, so 2's and 3's contributions
    # are summed in the tier-2 plane: docs/concepts/inc-deadlock.md)
    assert r["links"]["t2_up"][0] == 1 + 2 and r["links"]["t2_down"][0] == 1 + 1


@pytest.mark.slow      # a 40 s Verilator build; tests/hw/test_inc_switch.py compares the switch
@pytest.mark.parametrize("hdl", ["icarus", "verilator"])
def test_stbm_and_stbr_are_the_same_on_verilog_simulators(hdl):
    require_simulator(hdl)
    assert ep_run(hdl) == ep_run("pysim")


def test_stbm_mask_bits_past_the_dies_name_no_die_and_owe_no_ack():
    """A mask of every bit: the block reaches the 3 other dies and the own one, and the fence
    waits for their 4 acks only (a core counting all 32 bits would wait forever)."""
    p = Program().li(10, address(0, 1, 0)).li(11, address(0, 4, 0)).li(12, -1).li(1, 0)
    p.ldb(1, 10, 0).stbm(1, 11, 12, 0).fence().halt()
    r = run_sys(EP, {(0, 0): p}, hbm=ep_hbm(), max_cycles=2000,
                reads=[[d, address(d, 4, 0)] for d in range(EP_RANKS)])
    assert r["done"] == 1 and not r["timeout"]
    assert r["mem"] == [0x0D0D0001] * EP_RANKS


def test_ep_stores_fault_without_the_unit():
    """On a machine without in-network EP, stbm is an illegal instruction: the core faults."""
    p = Program().li(12, 1).stbm(1, 0, 12, 0).halt()
    r = run_sys(SMALL, {(0, 0): p}, max_cycles=200)
    assert r["fault"][0] == 1


def test_in_network_switches_leave_other_traffic_as_it_was():
    """Every die stores a block and a flag word to every other die, fences and polls the flags
    of the others (unicast traffic on every link kind): on the machine with in-network
    switches (``ep_window``) the run is the one without them -- cycles, trace, link counters,
    memory -- so a comparison of CANN and UBEP with UBEP-INC may run all three on one build."""
    progs = {}
    for r in range(EP_RANKS):
        p = Program().li(1, 0).li(10, address(r, 1, 0)).ldb(1, 10, 0).li(6, 0x77)
        for d in range(EP_RANKS):
            if d != r:
                p.li(11, address(d, 4 + r, 0)).stb(1, 11, 0)
        p.fence()
        for d in range(EP_RANKS):
            if d != r:
                p.li(12, address(d, 2, r)).sw(6, 12, 0)
        for d in range(EP_RANKS):
            if d != r:
                p.li(12, address(r, 2, d)).poll(7, 12, 6, "eq")
        p.mark(9).halt()
        progs[(r, 0)] = p
    reads = [[d, address(d, 4 + r, w)] for d in range(EP_RANKS) for r in range(EP_RANKS)
             for w in range(8)]
    plain = spec(("superpod", 2, 1, 2), aivs=1, hbm_blocks=16, imem_depth=64)
    ep = EP                                                 # the same machine with ep_window
    assert {**plain.params, "ep_window": 8} == ep.params
    from amaranth.hdl import Fragment
    from epfabric.hw.inc_switch import IncSwitch
    from epfabric.hw.instances import Sharing

    def switch_kinds(s):
        top = s.build(shared=Sharing(has_reset=False))      # the switches are parts: not built
        Fragment.get(top, None)
        return {part.cls for name, part in top.parts.items() if name.startswith("epf_switch")}
    kinds = [switch_kinds(s) for s in (plain, ep)]
    assert IncSwitch not in kinds[0] and kinds[1] == {IncSwitch}   # the two machines differ
    runs = [run_sys(s, progs, hbm=ep_hbm(), reads=reads, max_cycles=6000) for s in (plain, ep)]
    assert runs[0]["done"] == 1 and not runs[0]["timeout"]
    assert runs[0]["links"]["t2_up"][0] > 0 and runs[0]["trace"]
    assert runs[0] == runs[1]
