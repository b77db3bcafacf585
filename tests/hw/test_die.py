"""Die (hw/die.py): local store/load/fetch-add/poll cycle costs, remote requests as flits, REQ flits applied and answered."""

import pytest
from amaranth.hdl import Fragment

from epfabric.hw.aiv_core import MemOp
from epfabric.hw.die import KNOBS, Die, FlitKind, flit_layout
from epfabric.hw.host import HostTarget
from epfabric.hw.isa import address
from epfabric.sim.backends.host import host_read, host_read_pipelined, host_write, load_programs
from epfabric.sw.assembler import Program

from rejected import rejected
from utils import ComponentSpec, run

RANK = 1
PARAMS = {"rank": RANK, "ranks": 2, "aivs": 2, "imem_depth": 32, "ubuf_rows": 2, "hbm_blocks": 8,
          "data_bytes": 32, "lanes": 4, "width": 16, "max_outstanding": 4, "hbm_latency": 2}
SPEC = ComponentSpec("epfabric.hw.die:Die", PARAMS)
L = PARAMS["hbm_latency"]


def tx_record(f, cycle):
    """A flit seen on ``tx`` as a dict (data: its low 32 bits)."""
    return {"cycle": cycle, "dst": int(f.dst), "kind": FlitKind(f.kind).name,
            "op": MemOp(f.op).name, "core": int(f.core), "block": int(f.addr.block),
            "word": int(f.addr.word), "data": int(f.data) & 0xFFFFFFFF, "small": int(f.small)}


async def die_run(bench, programs, hbm=None, rx_flits=(), reads=(), max_cycles=400, ack_remote=True,
                  knobs=None):
    """Load ``programs`` ({core: words}), ``hbm`` ({byte addr: word}) and ``knobs`` ({name:
    value}, hw/die.py KNOBS), run to quiescence.

    ``rx_flits`` are ``[cycle, fields]`` offered on ``rx`` from that cycle on;
    remote REQ flits of the cores are answered (acks / zero data) after 5
    cycles when ``ack_remote``. Returns cycles, tx flits and the words at ``reads``.
    """
    n = bench.component.aivs
    # the die's host port has no rank member: every write and read is rank 0's
    await host_write(bench, load_programs(
        [[0, int(core), words] for core, words in programs.items()],
        [[0, int(addr), value] for addr, value in (hbm or {}).items()])
        + [[HostTarget.CTRL.value, 0, 0, KNOBS[k], v] for k, v in (knobs or {}).items()])
    bench.set("tx.ready", 1)
    bench.set("host.start", 1)
    await bench.tick()
    bench.set("host.start", 0)
    pending = sorted(([int(c), f] for c, f in rx_flits), key=lambda e: e[0])
    answers = []     # (due, fields) answers of the test's "remote rank"
    tx, accepted, now = [], [], 0
    while now < max_cycles:
        # offer the next due rx flit (test REQs first, then answers to the die's REQs)
        offer = None
        if pending and pending[0][0] <= now:
            offer = ("p", pending[0][1])
        elif answers and answers[0][0] <= now:
            offer = ("a", answers[0][1])
        bench.set("rx.valid", int(offer is not None))
        if offer:
            bench.set("rx.payload", offer[1])
        if await bench.get("tx.valid"):
            f = bench.decode("tx.payload", await bench.get("tx.payload"))
            rec = tx_record(f, now)
            tx.append(rec)
            if rec["kind"] == "REQ" and ack_remote:    # a store's ack acknowledges 1 store
                stored = rec["op"] in ("WRITE_WORD", "WRITE_BLOCK")
                answers.append((now + 5, {"dst": RANK, "src": rec["dst"], "kind": FlitKind.RSP.value,
                                          "op": f.op, "core": rec["core"], "data": int(stored)}))
        if offer and await bench.get("rx.ready"):
            accepted.append(now)
            (pending if offer[0] == "p" else answers).pop(0)
        halted = [await bench.get(f"core_halted.{i}") for i in range(n)]
        outs = [await bench.get(f"core_outstanding.{i}") for i in range(n)]
        if all(halted) and not any(outs) and not pending and not answers and not offer:
            break
        await bench.tick()
        now += 1
    bench.set("rx.valid", 0)
    cycles = now
    # let the RSP queue drain into tx
    for _ in range(12):
        if await bench.get("tx.valid"):
            f = bench.decode("tx.payload", await bench.get("tx.payload"))
            tx.append(tx_record(f, now))
        await bench.tick()
        now += 1
    words = await host_read(bench, [[0, int(addr)] for addr in reads])
    out = {str(addr): w for addr, w in zip(reads, words)}
    return {"cycles": cycles, "tx": tx, "accepted": accepted, "mem": out,
            "pc": [await bench.get(f"core_pc.{i}") for i in range(n)],
            "fault": [await bench.get(f"core_fault.{i}") for i in range(n)]}


def run_die(programs, **kw):
    programs = {str(k): (v.assemble() if isinstance(v, Program) else v) for k, v in programs.items()}
    kw["reads"] = list(kw.get("reads", [])) + [local(7)]     # where _timed stores its count
    result, _ = run(SPEC, die_run, {"programs": programs, **kw})
    return result


def local(block, word=0):
    return address(RANK, block, word)


def _timed(body, *, t0=1, t1=2):
    """``csrr t0, cycle; body; csrr t1, cycle; sw (t1 - t0) to block 7 word 0``: the body's cycles."""
    p = Program()
    p.li(10, local(7))
    p.csrr(t0, "cycle")
    body(p)
    p.csrr(t1, "cycle")
    p.sub(3, t1, t0)
    p.sw(3, 10, 0)
    p.fence()
    p.halt()
    return p


def _cost(result):
    # csrr..csrr measures the body plus the first csrr itself
    return result["mem"][str(local(7))] - 1


def test_host_hbm_write_read_and_halt():
    p = Program().halt()
    r = run_die({0: p}, hbm={local(3, 5): 0xDEADBEEF, local(0, 0): 7}, reads=[local(3, 5), local(0, 0)])
    assert r["mem"][str(local(3, 5))] == 0xDEADBEEF and r["mem"][str(local(0, 0))] == 7
    assert r["cycles"] == 1          # halt only: done the cycle after start
    assert r["tx"] == []


def test_local_store_costs_one_cycle_and_is_visible_next_cycle():
    p = _timed(lambda p: (p.li(5, 0x55), p.sw(5, 10, 4)), t0=1, t1=2)
    r = run_die({0: p}, reads=[local(7, 1)])
    assert r["mem"][str(local(7, 1))] == 0x55
    assert _cost(r) == 1 + 1     # li (1) + sw (1)


def test_local_load_costs_1_plus_L():
    p = _timed(lambda p: p.lw(4, 10, 8))
    r = run_die({0: p}, hbm={local(7, 2): 9})
    assert _cost(r) == 1 + L


def test_local_fetch_add_costs_2_plus_L_and_returns_old():
    def body(p):
        p.li(5, 3)
        p.fadd(4, 10, 5)        # word 0 of block 7: old value 40
    p = _timed(body)
    p2 = Program().li(10, local(6)).li(5, 3)
    p2.fadd(4, 10, 5).fadd(4, 10, 5).sw(4, 10, 4).halt()   # word 0: 40 -> 46, word 1 = 43
    r = run_die({0: p}, hbm={local(7): 40})
    assert _cost(r) == 1 + (2 + L)
    r = run_die({0: p2}, hbm={local(6): 40}, reads=[local(6), local(6, 1)])
    assert (r["mem"][str(local(6))], r["mem"][str(local(6, 1))]) == (46, 43)


def test_fetch_add_from_both_cores_is_exact():
    def prog():
        p = Program().li(10, local(5)).li(5, 1).li(6, 10)
        p.label("loop")
        p.fadd(4, 10, 5)
        p.addi(6, 6, -1)
        p.bne(6, 0, "loop")
        p.halt()
        return p
    r = run_die({0: prog(), 1: prog()}, reads=[local(5)])
    assert r["mem"][str(local(5))] == 20


def test_poll_waits_for_the_other_core_store():
    c0 = Program().li(10, local(4)).li(5, 0).li(2, 7)
    c0.poll(4, 10, 2, "eq").sw(4, 10, 4).fence().halt()       # poll word 0 == 7, copy to word 1
    c1 = Program().li(10, local(4)).li(3, 20).label("spin").addi(3, 3, -1).bne(3, 0, "spin")
    c1.li(2, 7).sw(2, 10, 0).fence().halt()
    r = run_die({0: c0, 1: c1}, reads=[local(4, 1)])
    assert r["mem"][str(local(4, 1))] == 7
    assert r["fault"] == [0, 0]


async def host_read_timing(bench, words):
    """Host-write ``words`` ([[addr, word]]), then read them back to back, one ``re`` per cycle.

    Returns the ticks from each read's ``re`` to its ``rvalid`` and the words read.
    """
    await host_write(bench, [[HostTarget.HBM.value, 0, 0, a, w] for a, w in words])
    got = await host_read_pipelined(bench, [[0, a] for a, _w in words])
    return {"latency": [lat for lat, _w in got], "words": [w for _lat, w in got]}


@pytest.mark.parametrize("where, answer, cost", [
    # local: the UB port commits the store and answers the next cycle; the core counts
    # the ack the cycle after it arrives, then the fence issues
    ("local", None, 1 + 2),
    # remote: the REQ leaves in the store's cycle, the test's remote rank answers 5 cycles
    # later (accepted at once); counted one cycle after, as locally
    ("remote", 5, 1 + 5 + 1),
])
def test_fence_waits_for_the_store_acknowledgement(where, answer, cost):
    """``sw; fence`` costs exactly the store, its answer's way back and one cycle to count it."""
    target = local(3, 2) if where == "local" else address(0, 3, 2)
    setup = Program().li(11, target).li(5, 0x77)

    def body(p):
        p.sw(5, 11, 0)
        p.fence()
    r = run_die({0: setup.assemble() + _timed(body).assemble()})
    assert _cost(r) == cost
    reqs = [f for f in r["tx"] if f["kind"] == "REQ"]
    if answer is None:
        assert not reqs and r["accepted"] == []
    else:
        assert len(reqs) == 1 and r["accepted"] == [reqs[0]["cycle"] + answer]


def test_host_read_latency_is_hbm_latency_and_reads_pipeline():
    """A host read answers exactly ``hbm_latency`` ticks after ``re``; one read per cycle."""
    words = [[local(3, 5), 0xDEADBEEF], [local(0, 0), 7], [local(7, 7), 0x1234],
             [local(3, 5), 0xDEADBEEF]]
    out, _ = run(SPEC, host_read_timing, {"words": words})
    assert out["latency"] == [L] * len(words)
    assert out["words"] == [w for _a, w in words]


def test_die_host_port_has_no_rank_and_no_run_control():
    members = Die.signature_for(**PARAMS).members["host"].signature.members
    assert set(members) == {"we", "target", "core", "addr", "wdata", "re", "rvalid", "rdata",
                            "start", "wrow", "wmask", "rrow"}


def test_remote_requests_become_flits_and_answers_return():
    """A core's remote store, block store and load leave as REQ flits; the answers complete them."""
    remote = address(0, 3, 2)
    p = Program().li(10, remote).li(5, 0x77)
    p.sw(5, 10, 0).stb(0, 10, 0).lw(6, 10, 0).fence().halt()
    r = run_die({1: p})
    reqs = [f for f in r["tx"] if f["kind"] == "REQ"]
    assert [(f["op"], f["dst"], f["core"], f["block"], f["word"]) for f in reqs] == [
        ("WRITE_WORD", 0, 1, 3, 2), ("WRITE_BLOCK", 0, 1, 3, 2), ("READ_WORD", 0, 1, 3, 2)]
    assert reqs[0]["data"] == 0x77
    # no die overhead on the way out: sw issues in cycle 4 (after li + li: lui+addi, li)
    assert reqs[0]["cycle"] == len(Program().li(10, remote).li(5, 0x77))
    assert reqs[1]["cycle"] == reqs[0]["cycle"] + 1


def test_incoming_req_flits_applied_and_answered():
    """REQ flits from rank 0: word store, block store (atomic), fetch-add, word and block loads."""
    blk = 0x0102030405060708_1112131415161718_2122232425262728_3132333435363738
    def req(op, block, word, data, core=0):
        return {"dst": RANK, "src": 0, "kind": FlitKind.REQ.value, "op": op.value, "core": core,
                "addr": {"block": block, "word": word}, "data": data}
    flits = [[0, req(MemOp.WRITE_WORD, 2, 1, 0xABC)],
             [0, req(MemOp.WRITE_BLOCK, 3, 0, blk, core=1)],
             [0, req(MemOp.FETCH_ADD, 2, 1, 5)],
             # loads are served by a read port, not behind the UB port's fetch-add: a core
             # never has a load behind its own fetch-add (both block), so offer them later
             [10, req(MemOp.READ_WORD, 2, 1, 0)],
             [10, req(MemOp.READ_BLOCK, 3, 0, 0, core=1)]]
    r = run_die({0: Program().halt()}, rx_flits=flits, reads=[local(2, 1), local(3, 0), local(3, 7)])
    assert [r["mem"][str(a)] for a in (local(2, 1), local(3, 0), local(3, 7))] == [
        0xABC + 5, blk & 0xFFFFFFFF, blk >> 224]
    rsps = [f for f in r["tx"] if f["kind"] == "RSP"]
    # store acks are counted per (src, core) and sent as an ack of 1 store each here (tx idle:
    # nothing to coalesce); every answer but the block is a small flit
    assert [(f["op"], f["dst"], f["core"], f["data"], f["small"]) for f in rsps] == [
        ("WRITE_BLOCK", 0, 0, 1, 1), ("WRITE_BLOCK", 0, 1, 1, 1), ("FETCH_ADD", 0, 0, 0xABC, 1),
        ("READ_WORD", 0, 0, 0xABC + 5, 1), ("READ_BLOCK", 0, 1, blk & 0xFFFFFFFF, 0)]
    # a store is committed in the cycle its flit is accepted; its ack leaves 2 cycles later
    assert r["accepted"][0] == 0
    assert rsps[0]["cycle"] == 2


def test_bad_parameters_name_themselves():
    with pytest.raises(ValueError, match=r"rank must be in \[0, 1\], not 2"):
        rejected(Die, rank=2, ranks=2)
    with pytest.raises(ValueError, match="hbm_blocks must be a power of two, not 6"):
        rejected(Die, hbm_blocks=6)
    with pytest.raises(TypeError, match="aivs must be an integer, not '2'"):
        rejected(Die, aivs="2")
    with pytest.raises(ValueError, match=r"hbm_latency must be in \[1, 256\], not 0"):
        rejected(Die, hbm_latency=0)
    with pytest.raises(TypeError, match=r"max_outstanding must be an integer, not 4.0"):
        rejected(Die, max_outstanding=4.0)
    with pytest.raises(ValueError, match="data_bytes"):
        flit_layout(2, 2, 16, 8)
    die = Die(ranks=4, aivs=2, max_outstanding=4)
    Fragment.get(die, None)
    assert die.rsp_depth == 3 * 2    # data answers only


def test_fp_cores_only_when_asked():
    """``fp=True`` builds every core with the floating-point instructions and the unit's shape;
    the default builds the cores of before (the other fp parameters unused)."""
    die = Die(aivs=2, data_bytes=64, fp=True, fp_lanes=8, fp_latency=5, fp_repeat_cycles=12)
    Fragment.get(die, None)
    assert [(c.fp, c.fp_lanes, c.fp_latency, c.fp_repeat_cycles, c.fp_fused)
            for c in die.cores] == [(True, 8, 5, 12, False)] * 2
    plain = Die(aivs=2, fp_lanes=64)
    Fragment.get(plain, None)
    assert not any(c.fp for c in plain.cores)
    with pytest.raises(TypeError, match="fp must be a bool, not 1"):
        rejected(Die, fp=1)


def _state_of(fragment):
    """``(registers, write enables)`` of an elaborated design: every signal a clocked
    statement assigns, every clocked memory read port's data, every memory write enable."""
    from amaranth.hdl._mem import MemoryInstance
    regs, wens = {}, []

    def walk(frag):
        if isinstance(frag, MemoryInstance):
            wens.extend(port._en for port in frag._write_ports)
            regs.update((id(p._data), p._data) for p in frag._read_ports if p._domain != "comb")
        for domain, statements in frag.statements.items():
            if domain != "comb":
                for st in statements:
                    regs.update((id(s), s) for s in st._lhs_signals())
        for sub, _name, _loc in frag.subfragments:
            walk(sub)
    walk(fragment)
    return list(regs.values()), wens


def _random_program(rng, core, polls):
    """Local and remote stores, loads, fetch-adds, block moves, vector adds, delay loops, a
    poll of this core's flag (``polls``: written by an rx flit), halting with or without a
    fence (with: stores may still be unacknowledged at the halt)."""
    p = Program()
    p.li(12, 0).li(13, 512).li(14, 8)
    for k in range(rng.randint(2, 7)):
        block, word = rng.randrange(6), rng.randrange(8)
        kind = rng.choice(["sw", "sw", "lw", "fadd", "stb", "ldb", "vadd", "delay", "remote_sw",
                           "remote_lw", "remote_stb", "bar"])
        here = address(0 if kind.startswith("remote") else RANK, block, word)
        p.li(10, here).li(5, rng.randrange(1 << 16))
        if kind in ("sw", "remote_sw"):
            p.sw(5, 10, 0)
        elif kind in ("lw", "remote_lw"):
            p.lw(6, 10, 0)
        elif kind == "fadd":
            p.fadd(6, 10, 5)
        elif kind == "stb":
            p.li(10, local(block)).stb(12, 10, 0)
        elif kind == "ldb":
            p.li(10, local(block)).ldb(13, 10, 0)
        elif kind == "vadd":
            p.vadd(12, 12, 14, 13)
        elif kind == "remote_stb":
            p.stb(12, 10, 0)
        elif kind == "bar":
            p.bar()
        else:
            p.li(7, rng.randint(1, 12)).label(f"d{k}").addi(7, 7, -1).bne(7, 0, f"d{k}")
        if polls and k == 0:
            p.li(10, local(6, core)).li(5, 1).poll(6, 10, 5, "eq")
    if rng.random() < 0.5:
        p.fence()
    return p.halt()


@pytest.mark.parametrize("seed", range(4))
def test_idle_means_the_next_edge_changes_nothing(seed):
    """Randomized proof of ``Die.idle`` (the native backend skips a die's edge while it is 1):
    random programs of 3 cores (one left disabled in some seeds), polls released by incoming
    flits, remote requests answered late, barriers (``bar``), random knobs (store window,
    barrier wait, injection limit), and incoming stores, fetch-adds and loads before and
    long after the cores halt. At every edge where ``idle`` is 1, no memory write port is
    enabled and no register of the die -- every clocked assignment of every block, found by
    walking the elaborated design -- changes; the die is idle often enough for this to say
    something, and busy in between. Seeds 2 and 3 build the die with its UB commit counters
    (``ub_counters``, the system's sampler's): they keep ``idle`` exact too."""
    import random

    from amaranth.hdl import Fragment
    from amaranth.sim import Simulator

    from epfabric.sim.backends.pysim import PysimTestbench

    rng = random.Random(seed)
    params = {**PARAMS, "aivs": 3, "imem_depth": 128}
    die = Die(**params, ub_counters=seed >= 2)
    fragment = Fragment.get(die, None)
    regs, wens = _state_of(fragment)
    assert ("ub_blocks" in {r.name for r in regs}) == (seed >= 2)
    assert len(regs) > 100 and wens
    cores = [0, 1] if seed % 2 else [0, 1, 2]
    polls = {c: rng.random() < 0.7 for c in cores}
    programs = {str(c): _random_program(rng, c, polls[c]).assemble() for c in cores}

    def req(op, block, word, data):
        return {"dst": RANK, "src": 0, "kind": FlitKind.REQ.value, "op": op.value,
                "core": rng.randrange(2), "addr": {"block": block, "word": word}, "data": data}
    ops = [MemOp.WRITE_WORD, MemOp.WRITE_BLOCK, MemOp.FETCH_ADD, MemOp.READ_WORD,
           MemOp.READ_BLOCK]
    flits = sorted([[rng.randrange(500), req(rng.choice(ops), rng.randrange(6), rng.randrange(8),
                                             rng.randrange(1 << 16))] for _ in range(12)]
                   + [[rng.randrange(20, 200), req(MemOp.WRITE_WORD, 6, c, 1)]
                      for c in cores if polls[c]], key=lambda f: f[0])
    seen = {"idle": 0, "busy": 0}
    knobs = {"store_window": rng.randint(1, params["max_outstanding"]),
             "syncall_cycles": rng.randrange(20), "inject_rate": rng.choice([0, 40 * 1024])}

    class Checked(PysimTestbench):
        async def tick(self, n=1):
            for _ in range(n):
                ctx = self._ctx
                idle = ctx.get(die.idle)
                if idle:
                    assert not any(ctx.get(en) for en in wens), f"a memory written at {self.cycle}"
                    before = [ctx.get(r) for r in regs]
                await ctx.tick()
                self.cycle += 1
                if idle:
                    changed = [r.name for r, b in zip(regs, before) if ctx.get(r) != b]
                    assert not changed, f"idle at cycle {self.cycle - 1}, yet {changed} changed"
                seen["idle" if idle else "busy"] += 1

    sim = Simulator(fragment)
    sim.add_clock(1e-9)

    async def bench(ctx):
        await die_run(Checked(ctx, die), programs, rx_flits=flits, max_cycles=700, knobs=knobs)
    sim.add_testbench(bench)
    sim.run()
    assert seen["idle"] > 100 and seen["busy"] > 100, seen
