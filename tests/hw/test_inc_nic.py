"""IncNic (hw/inc_nic.py): posted AG/RS/barrier on die HBM, both modes, against numpy.

A test-only top puts ``ranks`` NICs on ``star(tiny_timing("star"), ranks,
attach=1)`` with the :class:`IncEngine`, each NIC's memory port served by a
small memory model (READ_BLOCK answered 2 cycles later, WRITE_BLOCK committed
at the accepting edge and acknowledged with a coalesced count). The
testbench posts a band pipeline (CNT, then per band AG(j+1) ‖ [BAR] RS(j))
with random gaps, waits on the cumulative counters with a cycle bound, and
compares every rank's XG and RSIN regions with numpy.
"""

import numpy as np
import pytest
from amaranth.hdl import Elaboratable, Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.lib.memory import Memory
from amaranth.sim import Simulator

from epfabric.hw.aiv_core import MemOp, mem_req_layout, mem_rsp_layout
from epfabric.hw.inc_engine import Completion, IncEngine, IncOp
from epfabric.hw.inc_nic import IncNic, PostOp
from epfabric.hw.topology import star
from rejected import rejected
from utils import tiny_timing

DATA_BYTES = 32
LANES = DATA_BYTES // 4
HBM_LATENCY = 2


class MemModel(wiring.Component):
    """One die's HBM as seen by a router requester: reads answered ``HBM_LATENCY`` cycles later.

    A WRITE_BLOCK is committed at the edge it is accepted; its ack (count in
    data[0:16], coalesced) follows when the answer port is not carrying a read.
    ``ready`` is low one cycle in three, so requests also wait.
    """

    def __init__(self, depth, init):
        self.depth, self.init = depth, init
        super().__init__({"req": In(stream.Signature(mem_req_layout(DATA_BYTES))),
                          "rsp": Out(stream.Signature(mem_rsp_layout(DATA_BYTES)))})

    def elaborate(self, platform):
        m = Module()
        mem = m.submodules.mem = Memory(shape=8 * DATA_BYTES, depth=self.depth, init=self.init)
        self.mem = mem
        rp, wp = mem.read_port(), mem.write_port()
        phase = Signal(2)
        m.d.sync += phase.eq(Mux(phase == 2, 0, phase + 1))
        m.d.comb += self.req.ready.eq(phase != 2)
        req = self.req.payload
        take = self.req.valid & self.req.ready
        block = req.addr[9:24]
        m.d.comb += [rp.addr.eq(block), wp.addr.eq(block),
                     wp.data.eq(req.data), wp.en.eq(take & (req.op == MemOp.WRITE_BLOCK))]
        read1, read2, data2 = Signal(), Signal(), Signal(8 * DATA_BYTES)
        m.d.sync += [read1.eq(take & (req.op == MemOp.READ_BLOCK)), read2.eq(read1),
                     data2.eq(rp.data)]
        owed = Signal(16)
        ack = ~read2 & (owed != 0)
        m.d.comb += [self.rsp.valid.eq(read2 | ack),
                     self.rsp.payload.op.eq(Mux(read2, MemOp.READ_BLOCK, MemOp.WRITE_BLOCK)),
                     self.rsp.payload.data.eq(Mux(read2, data2, owed))]
        m.d.sync += owed.eq(Mux(ack, 0, owed) + wp.en)
        return m


class NicTop(Elaboratable):
    """``ranks`` NICs and memory models on a star switch with the INC engine."""

    def __init__(self, *, ranks, tmax, mode, slots, inits, hbm_blocks, bases):
        self.ranks = ranks
        self.nics = [IncNic(ranks=ranks, tmax=tmax, data_bytes=DATA_BYTES, mode=mode,
                            hbm_blocks=hbm_blocks, **bases) for _ in range(ranks)]
        self.mems = [MemModel(hbm_blocks, inits[r]) for r in range(ranks)]
        self.layout = self.nics[0].layout
        self.tmax, self.slots = tmax, slots

    def elaborate(self, platform):
        m = Module()
        n = self.ranks
        fabric = m.submodules.fabric = star(tiny_timing("star"), n, attach=1,
                                            payload=self.layout)
        engine = m.submodules.engine = IncEngine(ranks=n, tmax=self.tmax, lanes=LANES,
                                                 slots=self.slots)
        wiring.connect(m, engine.o_stream, fabric.attach_tx[0])
        wiring.connect(m, fabric.attach_rx[0], engine.i_stream)
        for r, (nic, mem) in enumerate(zip(self.nics, self.mems)):
            m.submodules[f"nic{r}"] = nic
            m.submodules[f"mem{r}"] = mem
            m.d.comb += nic.rank.eq(r)
            wiring.connect(m, nic.tx, fabric.tx[r])
            wiring.connect(m, fabric.rx[r], nic.rx)
            wiring.connect(m, nic.mem_req, mem.req)
            wiring.connect(m, mem.rsp, nic.mem_rsp)
        return m


def pack(row):
    """int32 lanes → one block word."""
    return sum((int(v) & 0xFFFFFFFF) << (32 * k) for k, v in enumerate(row))


def unpack(word):
    return np.array([(word >> (32 * k)) & 0xFFFFFFFF for k in range(LANES)],
                    dtype=np.uint32).view(np.int32)


def layout_of(ranks, tmax):
    xg, z = 0, ranks * tmax
    rsin = 2 * ranks * tmax
    blocks = 1 << (rsin + tmax - 1).bit_length()
    return {"xg_base": xg, "z_base": z, "rsin_base": rsin}, blocks


def make_case(ranks, tmax, seed):
    rng = np.random.default_rng(seed)
    # unequal: Tmax at rank 0, then decreasing, an empty rank (T_q = 0) from 4 ranks on
    counts = np.array([tmax - (q * tmax) // (ranks - 1) if ranks > 2 else tmax - q
                       for q in range(ranks)])
    rng.shuffle(counts[1:])
    own = rng.integers(-2**31, 2**31, size=(ranks, tmax, LANES), dtype=np.int64).astype(np.int32)
    z = rng.integers(-2**31, 2**31, size=(ranks, ranks * tmax, LANES),
                     dtype=np.int64).astype(np.int32)
    bases, blocks = layout_of(ranks, tmax)
    inits = []
    for r in range(ranks):
        words = [0] * blocks
        for c in range(counts[r]):
            words[bases["xg_base"] + r * tmax + c] = pack(own[r, c])
        for b in range(ranks * tmax):
            words[bases["z_base"] + b] = pack(z[r, b])
        inits.append(words)
    return {"counts": [int(c) for c in counts], "own": own, "z": z, "inits": inits,
            "bases": bases, "blocks": blocks}


def band_posts(ranks, tmax, beta, mode, counts):
    """Per rank: CNT for every rank, AG(0), then per band j: AG(j+1), [BAR], RS(j)."""
    bands = -(-tmax // beta)
    posts = [(PostOp.CNT, q, counts[q]) for q in range(ranks)]
    posts.append((PostOp.AG, 0, beta))
    for j in range(bands):
        if j + 1 < bands:
            posts.append((PostOp.AG, (j + 1) * beta, beta))
        if mode == "inc":
            posts.append((PostOp.BAR, 0, 0))
        posts.append((PostOp.RS, j * beta, beta))
    return posts, bands


def run_sim(top, bench_fn):
    sim = Simulator(top)
    sim.add_clock(1e-9)
    sim.add_testbench(bench_fn)
    sim.run()


def int32_sum(rows):
    total = np.sum(np.asarray(rows, dtype=np.int64), axis=0)
    return ((total + 2**31) % 2**32 - 2**31).astype(np.int32)


def expected_received(case, mode, ranks, tmax, r):
    """Blocks rank ``r``'s NIC writes: ``({XG block: word}, {RSIN block: word})``."""
    counts, bases, own, z = case["counts"], case["bases"], case["own"], case["z"]
    xg = {bases["xg_base"] + q * tmax + c: pack(own[q, c])
          for q in range(ranks) if q != r for c in range(counts[q])}
    # INC: the sum over the other ranks (the root adds its own in software);
    # ring: over all ranks (every hop, the root's included, adds its partial)
    senders = [q for q in range(ranks) if mode == "ring" or q != r]
    rsin = {bases["rsin_base"] + c: pack(int32_sum([z[q, r * tmax + c] for q in senders]))
            for c in range(counts[r])}
    return xg, rsin


def run_pipeline(ranks, tmax, beta, mode, seed, max_cycles=6_000, check_commit=False):
    """The band pipeline on every rank; with ``check_commit``, every cycle: a counter
    never exceeds the number of its blocks already holding their final data."""
    case = make_case(ranks, tmax, seed)
    counts = case["counts"]
    slots = 1 << (ranks * beta - 1).bit_length()
    top = NicTop(ranks=ranks, tmax=tmax, mode=mode, slots=slots, inits=case["inits"],
                 hbm_blocks=case["blocks"], bases=case["bases"])
    posts, bands = band_posts(ranks, tmax, beta, mode, counts)
    want_ag = [sum(counts) - counts[r] for r in range(ranks)]
    want_rs = list(counts)
    want_bar = bands if mode == "inc" else 0
    out = {}
    rng = np.random.default_rng(seed + 1)
    want_blocks = [expected_received(case, mode, ranks, tmax, r) for r in range(ranks)]

    async def bench(ctx):
        pending = [list(posts) for _ in range(ranks)]
        in_flight = 0          # cycles with AG and RS flits both in flight somewhere
        tx_ops = [[] for _ in range(ranks)]
        cycle, early = 0, 0
        while cycle < max_cycles:
            for r, nic in enumerate(top.nics):
                if pending[r] and rng.random() < 0.3:          # posts spread over time
                    op, a, b = pending[r][0]
                    ctx.set(nic.post.payload, {"op": op, "a": a, "b": b})
                    ctx.set(nic.post.valid, 1)
                else:
                    ctx.set(nic.post.valid, 0)
            await ctx.delay(0)
            took = [ctx.get(nic.post.valid) and ctx.get(nic.post.ready) for nic in top.nics]
            ops = set()         # flits on any NIC's tx or rx this cycle
            for r, nic in enumerate(top.nics):
                if ctx.get(nic.tx.valid) and ctx.get(nic.tx.ready):
                    op = IncOp(ctx.get(nic.tx.payload.op))
                    tx_ops[r].append(op)
                    ops.add(op)
                if ctx.get(nic.rx.valid) and ctx.get(nic.rx.ready):
                    ops.add(IncOp(ctx.get(nic.rx.payload.op)))
            in_flight += bool(ops & {IncOp.AG, IncOp.RING_AG}) and bool(
                ops & {IncOp.RS, IncOp.RING_RS})
            await ctx.tick()
            cycle += 1
            for r in range(ranks):
                if took[r]:
                    pending[r].pop(0)
            if check_commit:
                for r, (nic, mem) in enumerate(zip(top.nics, top.mems)):
                    for region, counter in zip(want_blocks[r], (nic.ag_count, nic.rs_count)):
                        landed = sum(ctx.get(mem.mem.data[b]) == w for b, w in region.items())
                        early += ctx.get(counter) > landed
            done = (not any(pending) and all(ctx.get(n.idle) for n in top.nics)
                    and [ctx.get(n.ag_count) for n in top.nics] == want_ag
                    and [ctx.get(n.rs_count) for n in top.nics] == want_rs
                    and [ctx.get(n.bar_count) for n in top.nics] == [want_bar] * ranks)
            if done:
                break
        out["cycles"], out["early"] = cycle, early
        out["pending"] = sum(map(len, pending))
        out["ag"] = [ctx.get(n.ag_count) for n in top.nics]
        out["rs"] = [ctx.get(n.rs_count) for n in top.nics]
        out["bar"] = [ctx.get(n.bar_count) for n in top.nics]
        out["both_cycles"] = in_flight
        out["tx_ops"] = tx_ops
        out["mem"] = [[ctx.get(mem.mem.data[b]) for b in range(case["blocks"])]
                      for mem in top.mems]

    run_sim(top, bench)
    return case, out, (want_ag, want_rs, want_bar)


@pytest.mark.parametrize("mode", ["inc", "ring"])
@pytest.mark.parametrize("ranks, tmax, beta", [(2, 4, 2), (4, 5, 2)])
def test_band_pipeline_equals_numpy(mode, ranks, tmax, beta):
    case, out, (want_ag, want_rs, want_bar) = run_pipeline(ranks, tmax, beta, mode, seed=ranks)
    assert out["pending"] == 0 and out["cycles"] < 6_000, f"did not finish: {out}"
    assert out["ag"] == want_ag
    assert out["rs"] == want_rs
    assert out["bar"] == [want_bar] * ranks
    counts, bases = case["counts"], case["bases"]
    own, z = case["own"], case["z"]
    for r in range(ranks):
        mem = out["mem"][r]
        for q in range(ranks):
            for c in range(counts[q]):
                got = unpack(mem[bases["xg_base"] + q * tmax + c])
                assert (got == own[q, c]).all(), (r, q, c)
            for c in range(counts[q], tmax):     # padding rows are never written
                assert mem[bases["xg_base"] + q * tmax + c] == 0, (r, q, c)
        for c in range(tmax):
            got = unpack(mem[bases["rsin_base"] + c])
            if c >= counts[r]:
                assert (got == 0).all(), (r, c)
                continue
            senders = [q for q in range(ranks) if mode == "ring" or q != r]
            want = np.zeros(LANES, dtype=np.int64)
            for q in senders:
                want += z[q, r * tmax + c]
            want = ((want + 2**31) % 2**32 - 2**31).astype(np.int32)
            assert (got == want).all(), (r, c, got, want)
        # Z is only read
        for b in range(ranks * tmax):
            assert (unpack(mem[bases["z_base"] + b]) == z[r, b]).all()
    # AG of band j+1 and RS of band j were on the links in the same cycles
    assert out["both_cycles"] > 0


def test_eight_ranks_inc():
    case, out, (want_ag, want_rs, want_bar) = run_pipeline(8, 2, 1, "inc", seed=8)
    assert out["pending"] == 0, f"did not finish: {out['cycles']} cycles"
    assert out["ag"] == want_ag and out["rs"] == want_rs and out["bar"] == [want_bar] * 8
    z, counts, bases = case["z"], case["counts"], case["bases"]
    for r in range(8):
        for c in range(counts[r]):
            want = sum(z[q, r * 2 + c].astype(np.int64) for q in range(8) if q != r)
            want = ((want + 2**31) % 2**32 - 2**31).astype(np.int32)
            assert (unpack(out["mem"][r][bases["rsin_base"] + c]) == want).all()


def _nic_on_memory(ranks, tmax, mode, rank):
    """``(nic, top)``: one rank's NIC on a zeroed memory of its layout, rank input tied."""
    bases, blocks = layout_of(ranks, tmax)
    nic = IncNic(ranks=ranks, tmax=tmax, data_bytes=DATA_BYTES, mode=mode, hbm_blocks=blocks,
                 **bases)
    mem = MemModel(blocks, [0] * blocks)

    class Top(Elaboratable):
        def elaborate(self, platform):
            m = Module()
            m.submodules.nic, m.submodules.mem = nic, mem
            wiring.connect(m, nic.mem_req, mem.req)
            wiring.connect(m, mem.rsp, nic.mem_rsp)
            m.d.comb += nic.rank.eq(rank)
            return m

    return nic, Top()


@pytest.mark.parametrize("mode", ["inc", "ring"])
def test_ag_and_rs_interleave_on_tx(mode):
    """One NIC, a slow tx (ready one cycle in 16): both engines hold a flit, tx alternates.

    The alternation comes from the held flit (the one not sent waits presented while the
    sent one's engine reads its next row), so fixed priority passes here too; the round robin
    itself is test_tx_round_robin_when_ag_and_rs_become_eligible_together's."""
    ranks, tmax = 2, 6
    nic, top = _nic_on_memory(ranks, tmax, mode, rank=1)
    out = {}

    async def bench(ctx):
        posts = [(PostOp.CNT, 0, tmax), (PostOp.CNT, 1, tmax),
                 (PostOp.AG, 0, tmax), (PostOp.RS, 0, tmax)]
        while posts:
            op, a, b = posts[0]
            ctx.set(nic.post.payload, {"op": op, "a": a, "b": b})
            ctx.set(nic.post.valid, 1)
            await ctx.delay(0)
            ready = ctx.get(nic.post.ready)
            await ctx.tick()
            if ready:
                posts.pop(0)
        ctx.set(nic.post.valid, 0)
        sent, stable = [], True
        held = None
        for cycle in range(2_000):
            ready = cycle % 16 == 15
            ctx.set(nic.tx.ready, ready)
            await ctx.delay(0)
            if ctx.get(nic.tx.valid):
                payload = ctx.get(nic.tx.payload.as_value())
                stable &= held is None or held == payload
                held = None if ready else payload
                if ready:
                    sent.append(IncOp(ctx.get(nic.tx.payload.op)))
            if len(sent) == 2 * tmax:
                break
            await ctx.tick()
        out["sent"], out["stable"] = sent, stable

    run_sim(top, bench)
    ag_op, rs_op = (IncOp.AG, IncOp.RS) if mode == "inc" else (IncOp.RING_AG, IncOp.RING_RS)
    # rank 1 of 2: tmax own rows to gather, tmax rows of rank 0's block to reduce
    assert sorted(out["sent"], key=lambda o: o.value) == [ag_op] * tmax + [rs_op] * tmax
    assert all(a != b for a, b in zip(out["sent"], out["sent"][1:])), out["sent"]
    assert out["stable"]


def test_tx_round_robin_when_ag_and_rs_become_eligible_together():
    """Ring mode, rank 1 of 3, rows of rank 0 passing through: after each own flit a passing
    row arrives, so the other engine's flit waits behind it (own rows are injected only while
    the forward queue is empty) and both engines hold a flit when it has left. Both become
    eligible in the same cycle, with no grant held, so the choice is the round robin's alone:
    it alternates, from RS (requester 0) on. Fixed priority would send all of one engine's
    rows first (test_ag_and_rs_interleave_on_tx alternates even then: its alternation comes
    from the held flit on a slow tx, not from the arbiter)."""
    ranks, tmax, me = 3, 6, 1
    nic, top = _nic_on_memory(ranks, tmax, "ring", rank=me)

    out = {"own": [], "passed": 0, "late": 0}

    def own_on_tx(ctx):
        """The own flit presented on tx (AG or RS), or None (nothing, or a passing row)."""
        if not ctx.get(nic.tx.valid):
            return None
        op = IncOp(ctx.get(nic.tx.payload.op))
        if op == IncOp.RING_AG and ctx.get(nic.tx.payload.root) == 0:
            return None                                 # rank 0's row, passing through
        return op

    async def send(ctx, own):
        """tx ready for one cycle: the flit presented leaves (an own flit if ``own``, else a
        passing row)."""
        ctx.set(nic.tx.ready, 1)
        await ctx.delay(0)
        assert ctx.get(nic.tx.valid)
        op = own_on_tx(ctx)
        assert (op is not None) == own, (own, op, out)
        await ctx.tick()
        ctx.set(nic.tx.ready, 0)
        if op is None:
            out["passed"] += 1
        else:
            out["own"].append(op)

    async def passing_row(ctx, c):
        """Rank 0's RING_AG row c arrives on rx (rank 1 writes and forwards it to rank 2)."""
        ctx.set(nic.rx.payload, {"dst": me, "src": 0, "op": IncOp.RING_AG, "root": 0,
                                 "epoch": 1, "offset": c, "length": tmax, "chunk": c,
                                 "compl": Completion.AG, "data": [c] * LANES})
        ctx.set(nic.rx.valid, 1)
        for _ in range(50):
            await ctx.delay(0)
            taken = ctx.get(nic.rx.ready)
            await ctx.tick()
            if taken:
                break
        ctx.set(nic.rx.valid, 0)

    async def bench(ctx):
        ctx.set(nic.tx.ready, 0)
        await passing_row(ctx, 0)          # before the posts: the engines fill behind it
        for op, a, b in [(PostOp.CNT, 0, tmax), (PostOp.CNT, 1, tmax), (PostOp.CNT, 2, tmax),
                         (PostOp.AG, 0, tmax), (PostOp.RS, 0, tmax)]:
            ctx.set(nic.post.payload, {"op": op, "a": a, "b": b})
            ctx.set(nic.post.valid, 1)
            await ctx.delay(0)
            assert ctx.get(nic.post.ready)
            await ctx.tick()
        ctx.set(nic.post.valid, 0)
        for row in range(1, 2 * tmax + 1):
            await ctx.tick().repeat(16)    # both engines read their next row meanwhile
            await send(ctx, own=False)     # the passing row leaves: the forward queue drains
            for wait in range(20):         # the round robin's choice is presented
                await ctx.delay(0)
                if own_on_tx(ctx) is not None:
                    break
                await ctx.tick()
            out["late"] += wait > 1
            if row < 2 * tmax:
                await passing_row(ctx, row % tmax)     # the next row arrives behind it
            await send(ctx, own=True)      # the chosen own flit leaves

    run_sim(top, bench)
    rs_op, ag_op = IncOp.RING_RS, IncOp.RING_AG
    assert sorted(out["own"], key=lambda o: o.value) == [ag_op] * tmax + [rs_op] * tmax
    assert out["own"] == [rs_op, ag_op] * tmax, out["own"]
    assert out["passed"] == 2 * tmax and out["late"] == 0


def test_post_to_tx_latency():
    """Cycle-cost table: post accepted → read presented 2 cycles later → tx L + 1 after."""
    ranks, tmax = 2, 2
    bases, blocks = layout_of(ranks, tmax)
    nic = IncNic(ranks=ranks, tmax=tmax, data_bytes=DATA_BYTES, mode="inc", hbm_blocks=blocks,
                 **bases)

    class Top(Elaboratable):
        def elaborate(self, platform):
            m = Module()
            m.submodules.nic = nic
            return m

    out = {}

    async def bench(ctx):
        ctx.set(nic.tx.ready, 1)
        for op, a, b in [(PostOp.CNT, 0, 2), (PostOp.AG, 0, 1)]:
            ctx.set(nic.post.payload, {"op": op, "a": a, "b": b})
            ctx.set(nic.post.valid, 1)
            await ctx.tick()
        ctx.set(nic.post.valid, 0)
        cycle, read_at, rsp_at = 0, None, None      # cycle 0: the edge after the AG post
        ctx.set(nic.mem_req.ready, 1)
        while cycle < 50:
            await ctx.delay(0)
            if ctx.get(nic.mem_req.valid) and read_at is None:
                read_at = cycle
                rsp_at = cycle + HBM_LATENCY
            ctx.set(nic.mem_rsp.valid, cycle == rsp_at)
            ctx.set(nic.mem_rsp.payload, {"op": MemOp.READ_BLOCK, "data": 1234})
            await ctx.delay(0)
            if ctx.get(nic.tx.valid):
                out["tx_at"] = cycle
                out["data0"] = ctx.get(nic.tx.payload.data[0])
                break
            await ctx.tick()
            cycle += 1
        out["read_at"] = read_at

    run_sim(Top(), bench)
    # the post was accepted at the edge before cycle 0: the read is presented 2 cycles later
    assert out["read_at"] == 1
    assert out["tx_at"] - out["read_at"] == HBM_LATENCY + 1
    assert out["data0"] == 1234


BASES = {"xg_base": 0, "z_base": 8, "rsin_base": 16}


@pytest.mark.parametrize("params, exc, match", [
    ({"ranks": 1}, ValueError, r"ranks must be in \[2, 256\], not 1"),
    ({"tmax": 0}, ValueError, r"tmax must be >= 1, not 0"),
    ({"data_bytes": 48}, ValueError, r"data_bytes must be a multiple of 32, not 48"),
    ({"data_bytes": 1024}, ValueError, r"data_bytes must be in \[32, 512\], not 1024"),
    ({"mode": "tree"}, ValueError, r"mode must be one of inc, ring, not 'tree'"),
    ({"hbm_blocks": 24}, ValueError, r"hbm_blocks must be a power of two, not 24"),
    ({"hbm_blocks": 16}, ValueError, r"rsin_base: region \[16, 20\) does not fit in hbm_blocks=16"),
    ({"z_base": 6}, ValueError, r"xg_base: region \[0, 8\) overlaps z_base's \[6, 14\)"),
    ({"xg_base": -1}, ValueError, r"xg_base must be >= 0, not -1"),
    ({"rsin_base": 2.0}, TypeError, r"rsin_base must be an integer, not 2.0"),
    ({"post_depth": 1}, ValueError, r"post_depth must be >= 2, not 1"),
])
def test_validation(params, exc, match):
    kw = {"ranks": 2, "tmax": 4, "data_bytes": 32, "mode": "inc", "hbm_blocks": 32, **BASES,
          **params}
    with pytest.raises(exc, match=match):
        rejected(IncNic, **kw)


@pytest.mark.parametrize("mode", ["inc", "ring"])
def test_counter_never_runs_ahead_of_the_committed_data(mode):
    """A core that sees a counter and then reads the block must see the data (INC-MoE §3.1)."""
    case, out, (want_ag, want_rs, _) = run_pipeline(3, 3, 2, mode, seed=3, check_commit=True)
    assert out["pending"] == 0 and out["ag"] == want_ag and out["rs"] == want_rs, out["cycles"]
    assert out["early"] == 0
