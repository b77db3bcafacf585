"""Fairness of every port shared by a :class:`~epfabric.hw.arbiter.RoundRobin`, in its block.

Each test builds the block that owns the arbiter (or, for the die's INC post port and cube unit,
the die), keeps every requester asking, and checks that each is served within a bound derived
from round robin (the system's MARK trace merge is tested the same way in
``tests/hw/test_system.py``, on the system its other tests build):

    With ``n`` requesters and a grant held at most ``H`` cycles, a requester that keeps asking
    is served within ``n * H`` cycles (plus the block's pipeline latency). The arbiter's
    pointer moves past the grantee at every service, and the next grant goes to the first
    requester asking at or after the pointer; while requester ``i`` asks, each service goes
    to a requester in the cyclic interval from the pointer to ``i`` and moves the pointer
    beyond it, so at most ``n - 1`` others are served before ``i`` (each grant held at most
    ``H`` cycles), then ``i`` itself within ``H``.

``H`` is the longest a grant waits for the shared resource's ``ready``: here the sink is ready
one cycle in every ``P`` (``H = P``), the cube unit is busy ``cube_cycles`` a row. Fixed
priority (the lowest index wins) fails every test: a lower requester that asks again at once is
served before a higher one that waits, however long that one has waited. The mutations that
replace each round robin with fixed priority (``sim/verify/mutations.py``,
``*_fixed_priority``) name these tests.
"""

from amaranth.sim import Simulator

from epfabric.hw.aiv_core import MemOp
from epfabric.hw.inc_nic_memory import MemoryPort
from epfabric.hw.inc_nic_tx import TxSelect
from epfabric.hw.router_tx import TxMux
from epfabric.hw.router_ub import UBArbiter
from epfabric.hw.switch import SWITCH_LATENCY, Switch
from epfabric.sim.backends.host import host_write, load_programs
from epfabric.sw.assembler import Program
from utils import ComponentSpec, run

#: the sink's ready: one cycle in every P (a grant is held up to P cycles)
P = 2


def sink_ready(cycle):
    """The shared resource's ``ready`` in ``cycle``: high in the last cycle of every ``P``."""
    return int(cycle % P == P - 1)


def longest_waits(dut, requesters, cycles, drive=None):
    """Simulate ``dut`` for ``cycles`` cycles with every requester's ``valid`` held high.

    ``requesters`` are ``(valid, ready)`` signal pairs (served: ``ready`` high); ``drive(ctx,
    cycle)`` sets the other inputs of each cycle. Returns, per requester, the longest run of
    cycles it waited, up to and including the cycle it was served (a run still waiting at the
    end counts too: a starved requester's is the whole run).
    """
    longest = [0] * len(requesters)

    async def bench(ctx):
        waiting = [0] * len(requesters)
        for valid, _ready in requesters:
            ctx.set(valid, 1)
        for cycle in range(cycles):
            if drive:
                drive(ctx, cycle)
            await ctx.delay(0)
            for i, (_valid, ready) in enumerate(requesters):
                waiting[i] += 1
                longest[i] = max(longest[i], waiting[i])
                if ctx.get(ready):
                    waiting[i] = 0
            await ctx.tick()

    sim = Simulator(dut)
    sim.add_clock(1e-9)
    sim.add_testbench(bench)
    sim.run()
    return longest


def test_inc_nic_memory_port_serves_the_writer_and_every_reader_in_turn():
    """The INC NIC's memory port (``mem_arb``, ``hold=True``): the writer and the AG, RS and
    ring readers all ask; ``mem_req`` is ready one cycle in ``P``; reads are answered 3 cycles
    after they are taken. n = 4, H = P, no pipeline (the grant is on ``mem_req`` in the cycle
    of the requests): each requester is served within 4 P cycles.

    The readers here ask whatever ``read_busy`` says (the port does not gate them); the NIC's
    readers wait while a read is outstanding, and then a write served during every read moves
    the pointer back to the writer's successor, the AG reader, which then wins every read."""
    dut = MemoryPort(data_bytes=32)
    answers = []                    # cycles of the read answers due

    def drive(ctx, cycle):
        ctx.set(dut.mem_req.ready, sink_ready(cycle))
        ctx.set(dut.mem_rsp.valid, int(cycle in answers))
        ctx.set(dut.mem_rsp.payload.op, MemOp.READ_BLOCK)
        if (sink_ready(cycle) and ctx.get(dut.mem_req.valid)
                and ctx.get(dut.mem_req.payload.op) == MemOp.READ_BLOCK):
            answers.append(cycle + 3)

    waits = longest_waits(dut, [(s.valid, s.ready) for s in (dut.write, *dut.reads)], 48, drive)
    assert max(waits) <= 4 * P, waits


def test_inc_nic_tx_alternates_the_ag_and_rs_engines():
    """The INC NIC's ``tx`` (``tx_arb``, ``hold=True``): both engines hold a flit, ``inject``
    high, no row to forward (a forward waits for an empty own side by the bubble rule); ``tx``
    is ready one cycle in ``P``. n = 2, H = P, no pipeline: each within 2 P cycles."""
    dut = TxSelect(ranks=2, tmax=2, lanes=2)

    def drive(ctx, cycle):
        ctx.set(dut.inject, 1)
        ctx.set(dut.tx.ready, sink_ready(cycle))

    waits = longest_waits(dut, [(dut.rs.valid, dut.rs.ready), (dut.ag.valid, dut.ag.ready)], 24,
                          drive)
    assert max(waits) <= 2 * P, waits


def test_router_tx_serves_answers_acks_and_every_core_in_turn():
    """The die router's ``tx`` (``tx_arb`` of :class:`~epfabric.hw.router_tx.TxMux`): the RSP
    queue, the store acks and both cores' remote requests all ask; ``tx`` is ready one cycle
    in ``P``. n = 4, H = P, no pipeline (the flit is combinational): each within 4 P cycles."""
    dut = TxMux(ranks=2, aivs=2, hbm_blocks=8, data_bytes=32, max_outstanding=4)
    requesters = [(s.valid, s.ready) for s in (dut.answers, dut.acks, *dut.requests)]
    waits = longest_waits(dut, requesters, 48,
                          lambda ctx, cycle: ctx.set(dut.tx.ready, sink_ready(cycle)))
    assert max(waits) <= 4 * P, waits


def test_ub_port_serves_every_core_and_rx_in_turn():
    """The die's UB port (``arb`` of :class:`~epfabric.hw.router_ub.UBArbiter`): both cores'
    local stores and the REQ flits on ``rx`` all ask (the host, which wins outright, writes
    only while the cores are stopped: idle); ``ub_req`` is ready one cycle in ``P``.
    n = 3, H = P, no pipeline: each within 3 P cycles."""
    dut = UBArbiter(ranks=2, aivs=2, hbm_blocks=8, data_bytes=32)
    requesters = [(s.valid, s.ready) for s in (*dut.cores, dut.rx)]
    waits = longest_waits(dut, requesters, 36,
                          lambda ctx, cycle: ctx.set(dut.ub_req.ready, sink_ready(cycle)))
    assert max(waits) <= 3 * P, waits


def test_switch_output_serves_every_input_in_turn():
    """One output of the switch (``arb3``): all four inputs stream flits to port 3, which is
    ready one cycle in ``P``. The output register is loaded when empty or leaving
    (``ready = ~valid | out.ready``), so a grant is held at most P cycles: n = 4, H = P.
    A flit offered in cycle 0 leaves in cycle ``SWITCH_LATENCY`` at the earliest, so each
    input's first flit leaves by cycle ``SWITCH_LATENCY - 1 + 4 P`` and every next one
    within 4 P cycles of the one before."""
    ports, cycles = 4, 40
    dut = Switch(ports=ports, depth=2, data_bits=16, counter_width=16)
    left = {s: [] for s in range(ports)}          # cycles each input's flits leave port 3

    async def bench(ctx):
        for s, port in enumerate(dut.i_stream):
            ctx.set(port.payload, {"dst": 3, "src": s, "data": 0})
            ctx.set(port.valid, 1)
        out = dut.o_stream[3]
        for cycle in range(cycles):
            ctx.set(out.ready, sink_ready(cycle))
            await ctx.delay(0)
            if ctx.get(out.valid) and ctx.get(out.ready):
                left[ctx.get(out.payload.src)].append(cycle)
            await ctx.tick()

    sim = Simulator(dut)
    sim.add_clock(1e-9)
    sim.add_testbench(bench)
    sim.run()
    for s, times in left.items():
        gaps = [b - a for a, b in zip([SWITCH_LATENCY - 1] + times, times + [cycles])]
        assert max(gaps) <= ports * P, (s, left)


#: a die of 3 cores (the fewest where fixed priority starves one: see below) with the INC
#: network interface and cube unit, at its smallest sizes
CUBE_CYCLES = 2
INC_DIE = ComponentSpec("epfabric.hw.die:Die", {
    "rank": 0, "ranks": 2, "aivs": 3, "imem_depth": 16, "ubuf_rows": 1, "hbm_blocks": 8,
    "data_bytes": 32, "lanes": 2, "width": 16, "max_outstanding": 4, "hbm_latency": 2,
    "nic": {"mode": "inc", "tmax": 1, "xg_base": 0, "z_base": 2, "rsin_base": 4},
    "cube_cycles": CUBE_CYCLES})


async def pc_runs(bench, programs, cycles):
    """Load ``programs`` (one a core), start them; per core, the cycles spent at each pc."""
    n = len(programs)
    await host_write(bench, load_programs([[0, c, w] for c, w in enumerate(programs)], []))
    bench.set("host.start", 1)
    await bench.tick()
    bench.set("host.start", 0)
    spent = [{} for _ in range(n)]
    for _ in range(cycles):
        for i in range(n):
            pc = await bench.get(f"core_pc.{i}")
            spent[i][pc] = spent[i].get(pc, 0) + 1
        await bench.tick()
    return spent


def test_die_inc_posts_and_cube_rows_go_round_robin():
    """The die's INC post port (``inc_post_arb``) and cube unit (``cube_arb``), 3 cores, each
    posting k = 6 back-to-back ``inccnt`` and then computing k back-to-back ``cube`` rows.

    Posts: a core's post is offered from its instruction's first cycle and the interface
    takes one a cycle (a CNT post applies at once, the engines idle): n = 3, H = 1, and the
    core moves on in the cycle after, so it stays at a post at most 3 cycles.
    Cube rows: the core raises its request the cycle after it enters the cube; the unit
    serves one row ``cube_cycles`` (C) cycles, the next grant in the cycle after: n = 3,
    H = C, so a core stays at a cube at most 1 + 3 C cycles. (With fixed priority and two
    cores the cube rows would still alternate: the core just served asks again one cycle
    late; three cores make the third one starve.)"""
    k = 6
    p = Program()
    for _ in range(k):
        p.inccnt(0, 0)
    for _ in range(k):
        p.cube(0, 0, 0, 0)
    p.halt()
    words = p.assemble()
    cycles = 2 * k * (1 + 3 * CUBE_CYCLES)
    spent, _ = run(INC_DIE, pc_runs, {"programs": [words] * 3, "cycles": cycles})
    posts = [max(s.get(pc, 0) for pc in range(k)) for s in spent]
    cubes = [max(s.get(pc, 0) for pc in range(k, 2 * k)) for s in spent]
    assert max(posts) <= 3, ("inc_post_arb", posts, spent)
    assert max(cubes) <= 1 + 3 * CUBE_CYCLES, ("cube_arb", cubes, spent)
    assert all(2 * k in s for s in spent), spent                   # every core reached halt
