"""A floating-point unit fed from operand ROMs and checked by block checksums, for long soaks.

:class:`FpSoak` drives a :class:`~epfabric.hw.fp_unit.FpUnit` with no Python per
operand: element ``e`` (lane ``j`` of beat ``n`` is ``e = n * lanes + j``) takes its
operands from ROMs of :func:`~epfabric.sim.tb.fp_commands.operand_pools`, at
indices drawn from the hash ``h = lowbias32(key + e)`` (``key = lowbias32(seed)``):

* ``h[0:6]`` a group, ``h[6:12]`` and ``h[12:18]`` the ``a`` and ``b`` entries in it
  (``b`` takes ``a``'s index when ``h[30]`` is set, where half the pool is ``-a``
  moved by a few ulps: cancellations);
* ``h[18:30]`` of lane 0: the beat's scalar ``s``;
* for a bf16 operand, the high half of the pool word (its bf16 truncation).

With ``sweep`` set, ``a`` counts instead: a bf16 ``a`` is ``e mod 2**16`` (65536
elements pass every bf16 value), an fp32 ``a`` has ``e mod 2**16`` as its high half
and ``h[0:16]`` as its low half (every sign, exponent and leading fraction bits,
with random bits below the bf16 cut).

With ``mix`` set, beat ``n``'s operation is ``MIX_OPS[lowbias32(key ^ n) % 16]``,
else the ``op`` input. The consumer refuses results with probability
``stall / 2**16`` and the producer skips cycles with probability ``gap / 2**16``
(both from a hash of the cycle), so the handshake is exercised too.

Every result word ``y`` of element ``e`` adds ``lowbias32(y + e * 0x9E3779B9)``
(mod 2**32) to the checksum of its block of ``2**block_log2`` beats; the sums
are kept in a memory read after the run. :func:`expected_sums` computes the same
sums from :func:`~epfabric.sim.tb.fp_commands.reference` in numpy, vectorised,
so a block whose sums differ holds a wrong result (and :func:`soak_operands` gives
its operands back, to rerun it beat by beat). ``corrupt`` flips bit 0 of lane 0
of that result beat: the negative control.

:func:`lowbias32` (Chris Wellons' 32-bit integer hash) is written once and used
both as Amaranth logic and on numpy arrays.
"""

import time

import numpy as np
from amaranth.hdl import Array, Cat, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from ...hw.fp_unit import OP_FORMS, FpOp, FpUnit, check_unit_params
from ...hw.validate import check_int
from .fp_commands import operand_pools, reference

__all__ = ["FpSoak", "lowbias32", "soak_operands", "expected_results", "expected_sums", "run_soak",
           "run_soaks", "MIX_OPS"]

MASK32 = 0xFFFF_FFFF
GOLDEN = 0x9E37_79B9
#: Operations of a mixed run, indexed by 4 hash bits (every operation at least once).
MIX_OPS = [list(FpOp)[i % len(FpOp)] for i in range(16)]


def lowbias32(x, cut=lambda v: v & MASK32):
    """32-bit hash; ``cut`` truncates to 32 bits (numpy: the default; Amaranth: ``v[:32]``)."""
    x = cut(x)
    x = cut(x ^ (x >> 16))
    x = cut(x * 0x7FEB_352D)
    x = cut(x ^ (x >> 15))
    x = cut(x * 0x846C_A68B)
    return cut(x ^ (x >> 16))


def _hw_hash(x):
    return lowbias32(x, cut=lambda v: v[:32])


class FpSoak(wiring.Component):
    """An :class:`~epfabric.hw.fp_unit.FpUnit` under ROM operands, with block checksums.

    Parameters
    ----------
    lanes, latency, repeat_cycles, fused
        Of the unit under test.
    block_log2 : int
        A checksum block is ``2**block_log2`` beats.
    blocks : int
        Checksum memory depth: a run has at most ``blocks * 2**block_log2`` beats.

    Attributes
    ----------
    start : In(1)
        Pulse: sample the inputs below and start a run.
    op : In(FpOp)
        The operation, unless ``mix``.
    mix : In(1)
        Each beat's operation from a hash (:data:`MIX_OPS`).
    sweep : In(1)
        ``a`` counts instead of coming from the ROM (see the module docstring).
    seed : In(32)
        Operand and stall seed.
    beats : In(32)
        Beats of the run.
    stall, gap : In(16)
        Probability per cycle (units of 2**-16) of refusing a result / offering no beat.
    corrupt : In(32)
        Flip lane 0's bit 0 of this result beat (none if ``>= beats``).
    done : Out(1)
        Every result was received.
    cycle : Out(32)
        Cycles since ``start``.
    rd_addr : In(range(blocks))
        Block whose checksum ``rd_sum`` shows.
    rd_sum : Out(32)
    """

    def __init__(self, *, lanes=4, latency=None, repeat_cycles=None, fused=False,
                 block_log2=8, blocks=1024):
        self.block_log2 = check_int("block_log2", block_log2, 0, 16)
        self.blocks = check_int("blocks", blocks, 1, 1 << 16)
        self.unit_params = check_unit_params(lanes=lanes, latency=latency,
                                             repeat_cycles=repeat_cycles, fused=fused)
        self.lanes = lanes
        super().__init__({
            "start": In(1), "op": In(FpOp), "mix": In(1), "sweep": In(1), "seed": In(32),
            "beats": In(32),
            "stall": In(16), "gap": In(16), "corrupt": In(32),
            "done": Out(1), "cycle": Out(32),
            "rd_addr": In(range(blocks)), "rd_sum": Out(32),
        })

    def elaborate(self, platform):
        m = Module()
        unit = m.submodules.unit = FpUnit(**self.unit_params)
        pool_a, pool_b, pool_s = operand_pools()
        roms = {}
        for name, pool in (("a", pool_a), ("b", pool_b), ("s", pool_s)):
            roms[name] = m.submodules[f"rom_{name}"] = Memory(shape=32, depth=len(pool),
                                                               init=[int(x) for x in pool])
        sums = m.submodules.sums = Memory(shape=32, depth=self.blocks, init=[])

        active, key = Signal(), Signal(32)
        n_in, n_out = Signal(32), Signal(32)        # beats offered, results received
        with m.If(self.start):
            m.d.sync += [active.eq(1), key.eq(_hw_hash(self.seed)), n_in.eq(0), n_out.eq(0),
                         self.cycle.eq(0), self.done.eq(0)]
        with m.Elif(active & ~self.done):
            m.d.sync += self.cycle.eq(self.cycle + 1)

        cycle_hash = _hw_hash(key + self.cycle * GOLDEN)
        m.d.comb += [
            unit.i_stream.valid.eq(active & (n_in < self.beats) & (cycle_hash[16:] >= self.gap)),
            unit.o_stream.ready.eq(active & (cycle_hash[:16] >= self.stall)),
        ]
        with m.If(unit.i_stream.valid & unit.i_stream.ready):
            m.d.sync += n_in.eq(n_in + 1)
        self._operands(m, unit.i_stream.payload, roms, key, n_in)

        # --- results: checksum terms, block sums ---------------------------------------
        rsp = unit.o_stream.payload
        taken = unit.o_stream.valid & unit.o_stream.ready
        block_sum = Signal(32)
        total = sum((_hw_hash((Mux((n_out == self.corrupt) & (j == 0), rsp.y[j] ^ 1, rsp.y[j])
                               + (n_out * self.lanes + j) * GOLDEN)[:32])
                     for j in range(self.lanes)), block_sum)[:32]
        block_end = ((n_out[:self.block_log2] == (1 << self.block_log2) - 1)
                     | (n_out + 1 == self.beats))
        write = sums.write_port()
        m.d.comb += [write.addr.eq(n_out >> self.block_log2), write.data.eq(total),
                     write.en.eq(taken & block_end)]
        with m.If(self.start):
            m.d.sync += block_sum.eq(0)
        with m.Elif(taken):
            m.d.sync += [n_out.eq(n_out + 1), block_sum.eq(Mux(block_end, 0, total))]
            with m.If(n_out + 1 == self.beats):
                m.d.sync += self.done.eq(1)
        read = sums.read_port(domain="comb")
        m.d.comb += [read.addr.eq(self.rd_addr), self.rd_sum.eq(read.data)]
        return m

    def _operands(self, m, req, roms, key, n):
        """The request beat for beat ``n``: its operation, ROM operands, ``last``."""
        op = Signal(FpOp)
        table = Array(MIX_OPS)
        m.d.comb += op.eq(Mux(self.mix, table[_hw_hash(key ^ n)[:4]], self.op))
        forms = {o.value: f for o, f in OP_FORMS.items()}
        a_bf16 = Array(int(v in forms and forms[v].a_bf16) for v in range(16))[op.as_value()]
        b_bf16 = Array(int(v in forms and forms[v].b_bf16) for v in range(16))[op.as_value()]
        m.d.comb += [req.op.eq(op), req.last.eq(n + 1 == self.beats)]
        for j in range(self.lanes):
            h = Signal(32, name=f"h{j}")
            m.d.comb += h.eq(_hw_hash(key + n * self.lanes + j))     # n * lanes + j < 2**32
            ra, rb = roms["a"].read_port(domain="comb"), roms["b"].read_port(domain="comb")
            m.d.comb += [ra.addr.eq(h[:12]), rb.addr.eq(Mux(h[30], h[:12], Cat(h[:6], h[12:18])))]
            e = Signal(32, name=f"e{j}")
            m.d.comb += e.eq(n * self.lanes + j)
            swept = Mux(a_bf16, e[:16], Cat(h[:16], e[:16]))
            rom_a = Mux(a_bf16, ra.data >> 16, ra.data)
            m.d.comb += [req.a[j].eq(Mux(self.sweep, swept, rom_a)),
                         req.b[j].eq(Mux(b_bf16, rb.data >> 16, rb.data))]
            if j == 0:
                rs = roms["s"].read_port(domain="comb")
                m.d.comb += [rs.addr.eq(h[18:30]), req.s.eq(Mux(a_bf16, rs.data >> 16, rs.data))]


def soak_operands(*, seed, beats, lanes, op="ADD", mix=False, sweep=False):
    """``(ops, a, s, b)`` of a run in numpy: beat operations (names), ``a`` and ``b``
    (beats x lanes lane words), ``s`` (a word per beat), as :class:`FpSoak` presents them."""
    pool_a, pool_b, pool_s = operand_pools()
    key = lowbias32(np.uint64(seed))
    n = np.arange(beats, dtype=np.uint64)
    e = n[:, None] * np.uint64(lanes) + np.arange(lanes, dtype=np.uint64)
    h = lowbias32((key + e) & MASK32)
    ia = h & 0xFFF
    ib = np.where(h >> 30 & 1 == 1, ia, (h & 0x3F) | (h >> 12 & 0x3F) << 6)
    if mix:
        ops = [MIX_OPS[int(i)].name for i in lowbias32(key ^ n) & 0xF]
    else:
        ops = [FpOp[op].name] * beats
    a_bf16 = np.array([OP_FORMS[FpOp[o]].a_bf16 for o in ops])
    b_bf16 = np.array([OP_FORMS[FpOp[o]].b_bf16 for o in ops])
    a = np.where(a_bf16[:, None], pool_a[ia] >> 16, pool_a[ia])
    if sweep:
        a = np.where(a_bf16[:, None], e & 0xFFFF, (e & 0xFFFF) << 16 | (h & 0xFFFF))
    b = np.where(b_bf16[:, None], pool_b[ib] >> 16, pool_b[ib])
    s_word = pool_s[h[:, 0] >> 18 & 0xFFF]
    s = np.where(a_bf16, s_word >> 16, s_word)
    return ops, a.astype(np.uint32), s.astype(np.uint32), b.astype(np.uint32)


def expected_results(*, seed, beats, lanes, op="ADD", mix=False, sweep=False, fused=False):
    """Result words (beats x lanes) of a run, from the numpy reference."""
    ops, a, s, b = soak_operands(seed=seed, beats=beats, lanes=lanes, op=op, mix=mix,
                                 sweep=sweep)
    y = np.zeros_like(a)
    names = np.array(ops)
    for name in set(ops):
        rows = names == name
        y[rows] = reference(name, a[rows], s[rows][:, None], b[rows], fused=fused)
    return y


def expected_sums(*, seed, beats, lanes, block_log2, op="ADD", mix=False, sweep=False,
                  fused=False):
    """Block checksums of a run (see the module docstring), from the numpy reference."""
    y = expected_results(seed=seed, beats=beats, lanes=lanes, op=op, mix=mix, sweep=sweep,
                         fused=fused)
    e = np.arange(beats * lanes, dtype=np.uint64).reshape(beats, lanes)
    terms = lowbias32((y.astype(np.uint64) + e * GOLDEN) & MASK32).sum(axis=1)
    block = np.arange(beats) >> block_log2
    sums = np.zeros(int(block[-1]) + 1, dtype=np.uint64)
    np.add.at(sums, block, terms)
    return [int(x) & MASK32 for x in sums]


async def run_soak(bench, *, beats, seed=1, op="ADD", mix=False, sweep=False, stall=0, gap=0,
                   corrupt=None, timeout=None):
    """Harness intent: one run of :class:`FpSoak`; ``{"sums": [block sums], "cycles": n}``."""
    soak = bench.component
    check_int("beats", beats, 1, soak.blocks << soak.block_log2)
    blocks = -(-beats // (1 << soak.block_log2))
    for port, value in (("op", FpOp[op].value), ("mix", int(mix)), ("sweep", int(sweep)),
                        ("seed", seed),
                        ("beats", beats), ("stall", stall), ("gap", gap),
                        ("corrupt", MASK32 if corrupt is None else corrupt)):
        bench.set(port, value)
    bench.set("start", 1)
    await bench.tick()
    bench.set("start", 0)
    await bench.wait_high("done", timeout=timeout or 64 * beats + 1000)
    cycles = await bench.get("cycle")
    sums = []
    for k in range(blocks):
        bench.set("rd_addr", k)
        sums.append(int(await bench.get("rd_sum")))
    return {"sums": sums, "cycles": int(cycles)}


async def run_soaks(bench, *, runs, timeout=None):
    """Harness intent: ``runs`` (keyword dicts of :func:`run_soak`) one after the other in one
    simulation -- a start resets the soak's counters, key and checksums, and a run ends with
    every result taken, so the next starts from an empty unit. One simulator start instead of
    one a run (a Verilator run's start costs seconds, its cycles milliseconds). Returns
    :func:`run_soak`'s result of each run with its wall ``seconds``."""
    out = []
    for kw in runs:
        t0 = time.monotonic()
        result = await run_soak(bench, timeout=timeout, **kw)
        out.append({**result, "seconds": time.monotonic() - t0})
    return out
