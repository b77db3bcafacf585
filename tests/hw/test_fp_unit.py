"""Floating-point lanes (hw/fp_unit.py, hw/fp_lanes.py) bit-exact against numpy, on pysim
and Verilator.

The reference (sim/tb/fp_commands.py) is numpy's float32, ml_dtypes' bfloat16 and an
exact fused multiply-add, each checked here against Python's fractions. On pysim every
operation runs on its edge cases (zeros, subnormals, the ends of the normal range,
infinities, NaNs, ties) and on a few thousand shaped random operands, beat by beat.
On Verilator the soak top (sim/tb/fp_soak.py) runs operands from ROMs with no Python per
operand and compares block checksums with numpy's; the slow test runs 10**6 operands
per operation in each rounding mode.
"""

import itertools

import numpy as np
import pytest
from amaranth.hdl import Fragment
from rejected import rejected

from epfabric.hw.fp_lanes import F32
from epfabric.hw.fp_unit import OP_FORMS, FpOp, FpUnit, lane_steps, register_points
from epfabric.sim.tb.fp_commands import (EDGE_BF16, EDGE_F32, beat, exact_fma32, fma32,
                                         operand_pools, reference, run_beats)
from epfabric.sim.tb.fp_soak import (MIX_OPS, expected_results, expected_sums, run_soak,
                                     run_soaks, soak_operands)

from utils import ComponentSpec, require_simulator, run

LANES = 4
OPS = [op.name for op in FpOp]
UNIT = {fused: ComponentSpec("epfabric.hw.fp_unit:FpUnit", {"lanes": LANES, "fused": fused})
        for fused in (False, True)}
#: the Verilator soak top: 1024 blocks of 256 beats (up to 2**20 operands a run)
SOAK = {fused: ComponentSpec("epfabric.sim.tb.fp_soak:FpSoak",
                             {"lanes": LANES, "fused": fused, "block_log2": 8, "blocks": 1024})
        for fused in (False, True)}
#: a small soak top for pysim
SMALL_SOAK = ComponentSpec("epfabric.sim.tb.fp_soak:FpSoak",
                           {"lanes": LANES, "block_log2": 3, "blocks": 32})


def _f32(bits):
    return np.asarray(bits, dtype=np.uint32).view(np.float32)


# --- the reference itself -----------------------------------------------------------------

def test_fused_reference_against_fractions():
    """fma32 (round-to-odd in float64) equals exact rational arithmetic rounded once."""
    pool_a, pool_b, pool_s = operand_pools()
    rng = np.random.default_rng(5)
    picks = rng.integers(0, 4096, (3, 4000))
    a, b, s = pool_a[picks[0]], pool_b[picks[1]], pool_s[picks[2]]
    a, b = np.concatenate([a, pool_a[picks[0]]]), np.concatenate([b, pool_b[picks[0]]])
    s = np.concatenate([s, pool_s[picks[2]]])     # second half: b = -a moved (cancellation)
    edge = np.array(EDGE_F32[::3], dtype=np.uint32)
    ea, es, eb = (x.ravel() for x in np.meshgrid(edge, edge, edge))
    a, s, b = np.concatenate([a, ea]), np.concatenate([s, es]), np.concatenate([b, eb])
    got = reference("AXPY", a, s, b, fused=True)
    want = [exact_fma32(int(x), int(y), int(z)) for x, y, z in zip(a, s, b)]
    assert [int(g) for g in got] == want
    # the two modes differ on these operands (else the fused tests would prove nothing)
    assert (got != reference("AXPY", a, s, b, fused=False)).sum() > 100


def test_fma32_cancellation_keeps_the_product_error():
    x, y = np.float32(1 + 2 ** -12), np.float32(1 - 2 ** -12)
    p = np.float32(x * y)                      # 1 - 2**-24 rounds to 1 - 2**-24: exact
    assert fma32(x, y, -p) == 0
    x = np.float32(1 + 2 ** -20)
    p = np.float32(x * x)                      # 1 + 2**-19 + 2**-40: rounds off 2**-40
    assert fma32(x, x, -p) == np.float32(2 ** -40)
    assert (x * x - p) == 0


# --- pysim: edge cases and random operands, beat by beat ----------------------------------

def _uses(op):
    form = OP_FORMS[FpOp[op]]
    return form.use_s, form.use_b, form.a_bf16, form.b_bf16


def edge_cases(op):
    """``(a, s, b)`` element arrays covering the op's edge values (combinations)."""
    use_s, use_b, a_bf16, b_bf16 = _uses(op)
    fa = EDGE_BF16 if a_bf16 else EDGE_F32
    fb = EDGE_BF16 if b_bf16 else EDGE_F32
    if use_s and use_b:
        fa, fb = fa[::3], fb[::3]
        combos = itertools.product(fa[::2], fa, fb)            # s, a, b
    elif use_s:
        combos = itertools.product(fa, fa, [0])
    elif use_b:
        combos = itertools.product([0], fa, fb)
    else:
        combos = itertools.product([0], fa, [0])
    s, a, b = (np.array(v, dtype=np.uint32) for v in zip(*combos))
    if op == "CAST_F32_BF16":          # every rounding case at the bf16 cut: ties, odd/even
        lows = np.array([0x0000, 0x0001, 0x7FFF, 0x8000, 0x8001, 0xFFFF], dtype=np.uint32)
        highs = np.array(EDGE_BF16, dtype=np.uint32)
        hh, ll = np.meshgrid(highs, lows)
        a = np.concatenate([a, (hh << 16 | ll).ravel()])
        s = b = np.zeros_like(a)
    return a, s, b


def cancellations(op, n, seed):
    """Multiply-adds whose ``b`` is the rounded product negated, moved by a few ulps."""
    _, _, a_bf16, b_bf16 = _uses(op)
    pool_a, _, pool_s = operand_pools()
    rng = np.random.default_rng(seed)
    a, s = pool_a[rng.integers(0, 4096, n)], pool_s[rng.integers(0, 4096, n)]
    if a_bf16:
        a, s = a >> 16, s >> 16
    wa, ws = ((a << 16) if a_bf16 else a), ((s << 16) if a_bf16 else s)
    with np.errstate(all="ignore"):
        p = (_f32(wa) * _f32(ws)).view(np.uint32) ^ 0x8000_0000
    b = (p.astype(np.int64) + rng.integers(-2, 3, n)).astype(np.uint32)
    if b_bf16:
        b = b >> 16
    return a, s, b


def exponent_sweep(op, seed):
    """Sums of ``a*s`` and ``b`` ``d`` binades apart, ``d`` in -64..64, 8 each, both signs:
    every placement of the addend (far below, jammed, inside, dominant) and their edges."""
    _, _, a_bf16, b_bf16 = _uses(op)
    rng = np.random.default_rng(seed)
    d = np.repeat(np.arange(-64, 65), 8)
    ea = rng.integers(80, 170, d.size)

    def value(exp):
        zeros = rng.choice(np.array([0, 0, 8, 16, 23]), d.size)
        man = rng.integers(0, 1 << 23, d.size) >> zeros << zeros
        return (rng.integers(0, 2, d.size) << 31 | exp << 23 | man).astype(np.uint32)

    a, b = value(ea), value(ea + d)
    s = rng.choice(np.array([0x3F80_0000, 0x3FC0_0000, 0xBF80_0000, 0x3F9A_5A5B],
                            dtype=np.uint32), d.size)
    return (a >> 16 if a_bf16 else a), (s >> 16 if a_bf16 else s), (b >> 16 if b_bf16 else b)


def check_beats(op, a, s, b, *, fused, stall_prob=0.0, seed=0):
    """Run elements ``a``, ``s``, ``b`` (one ``s`` per beat: elements grouped by ``s``)
    on pysim and assert every result word equals the reference."""
    beats, rows = [], []
    for value in dict.fromkeys(int(x) for x in s):
        idx = np.flatnonzero(s == value)
        for k in range(0, len(idx), LANES):
            chunk = idx[k:k + LANES]
            pad = LANES - len(chunk)
            beats.append(beat(op, list(a[chunk]) + [0] * pad, list(b[chunk]) + [0] * pad, value))
            rows.append(chunk)
    out, _ = run(UNIT[fused], run_beats, {"beats": beats, "stall_prob": stall_prob,
                                           "seed": seed})
    want = reference(op, a, s, b, fused=fused)
    bad = []
    for chunk, ys in zip(rows, out["y"]):
        for j, i in enumerate(chunk):
            if ys[j] != want[i]:
                bad.append(f"a={a[i]:#010x} s={s[i]:#010x} b={b[i]:#010x}: "
                           f"{ys[j]:#010x}, want {int(want[i]):#010x}")
    assert not bad, f"{op} fused={fused}: {len(bad)} of {len(a)} wrong:\n" + "\n".join(bad[:20])
    return len(a)


@pytest.mark.parametrize("fused", [False, True], ids=["two_roundings", "fused"])
@pytest.mark.parametrize("op", OPS)
def test_edge_and_random_operands_pysim(op, fused):
    """Every operation, bit-exact: its edge combinations, an exponent-difference sweep for
    the sums, cancellations for the multiply-adds and 128 shaped random operands (32 for
    a fused unit's operations without a product), with random backpressure."""
    a, s, b = edge_cases(op)
    parts = [(a, s, b)]
    if OP_FORMS[FpOp[op]].use_b:
        parts.append(exponent_sweep(op, seed=OPS.index(op)))
    if OP_FORMS[FpOp[op]].use_s and OP_FORMS[FpOp[op]].use_b:
        parts.append(cancellations(op, 512, seed=OPS.index(op)))
    # the volume is the Verilator soak's (2**16 operands in CI, 10**6 an operation slow); here
    # the edge cases, sweeps and cancellations, and a few random beats through the pipeline
    random_beats = 32 if not fused or FpOp[op] in (FpOp.AXPY, FpOp.AXPY_BF16,
                                                   FpOp.AXPY_MIX) else 8
    _, ra, rs, rb = soak_operands(seed=100 + OPS.index(op), beats=random_beats, lanes=LANES, op=op)
    parts.append((ra.ravel(), np.repeat(rs, LANES), rb.ravel()))
    a, s, b = (np.concatenate(v) for v in zip(*parts))
    checked = check_beats(op, a, s, b, fused=fused, stall_prob=0.2, seed=OPS.index(op))
    assert checked >= 4 * random_beats


def test_special_results_pysim():
    """Named IEEE 754 cases, one beat each (fp32 unless noted)."""
    one, two, half, inf, nan = 0x3F80_0000, 0x4000_0000, 0x3F00_0000, F32.inf, F32.nan
    max_f, min_sub = 0x7F7F_FFFF, 0x0000_0001
    cases = [  # op, a, s, b, expected
        ("ADD", 0x0000_0000, 0, 0x8000_0000, 0x0000_0000),        # +0 + -0 = +0
        ("ADD", 0x8000_0000, 0, 0x8000_0000, 0x8000_0000),        # -0 + -0 = -0
        ("ADD", one, 0, one | 1 << 31, 0),                        # x - x = +0
        ("ADD", inf, 0, inf | 1 << 31, nan),                      # inf - inf
        ("ADD", 0x7FC1_2345, 0, one, nan),                        # payload dropped
        ("ADD", max_f, 0, 0x7300_0000, inf),                      # max + half ulp: tie to even
        ("ADD", max_f, 0, 0x72FF_FFFF, max_f),                    # just below the tie
        ("ADD", one, 0, 0x3380_0000, one),                        # 1 + 2**-24: tie, even
        ("ADD", one | 1, 0, 0x3380_0000, one | 2),                # odd: rounds up
        ("ADD", 0x0080_0000, 0, 0x8000_0001, 0x007F_FFFF),        # subnormal result
        ("MULS", inf, 0, 0, nan),                                 # inf * 0
        ("MULS", 0x1F80_0000, 0x1280_0000, 0, 0x0000_0000),       # 2**-64 * 2**-90: to +0
        ("MULS", 0x2000_0000, 0x1F80_0000, 0, 0x0040_0000),       # 2**-127: subnormal
        ("MULS", 0x1A80_0000, 0x1A00_0000, 0, min_sub),           # 2**-74 * 2**-75
        ("MULS", 0x1A00_0000, 0x1A00_0000, 0, 0),                 # 2**-150: tie, to even 0
        ("MULS", 0x1A40_0000, 0x1A00_0000, 0, min_sub),           # 1.5 * 2**-150 -> 2**-149
        ("MULS", 0x9A40_0000, 0x1A00_0000, 0, min_sub | 1 << 31),
        ("MULS", max_f, two, 0, inf),                             # overflow
        ("MULS", max_f | 1 << 31, two, 0, inf | 1 << 31),
        ("MULS", min_sub, 0x4A80_0000, 0, 0x0040_0000),           # subnormal input, exact
        ("AXPY", inf, 0, inf | 1 << 31, nan),                     # inf*0 + -inf
        ("AXPY", inf, one, inf | 1 << 31, nan),                   # inf - inf
        ("AXPY", inf, one, one, inf),
        ("AXPY", 0x0000_0000, one, 0x8000_0000, 0),               # +0*1 + -0 = +0
        ("AXPY", 0x8000_0000, one, 0x8000_0000, 0x8000_0000),     # -0*1 + -0 = -0
        ("AXPY", one, half, 0xBF00_0000, 0),                      # exact cancellation: +0
        ("CAST_BF16_F32", 0x7F81, 0, 0, nan),                     # sNaN -> canonical
        ("CAST_BF16_F32", 0x0001, 0, 0, 0x0001_0000),             # subnormal, exact
        ("CAST_F32_BF16", 0x7F7F_8000, 0, 0, 0x7F80),             # tie at max -> inf
        ("CAST_F32_BF16", 0x7F80_0001, 0, 0, 0x7FC0),             # sNaN -> canonical
        ("CAST_F32_BF16", 0x0000_8000, 0, 0, 0x0000),             # subnormal tie, even
        ("CAST_F32_BF16", 0x0001_8000, 0, 0, 0x0002),             # subnormal tie, odd
        ("ADD_BF16", 0x3F80, 0, 0x3B80, 0x3F80),                  # 1 + 2**-8: tie, even
        ("MULS_BF16", 0x7F7F, 0x4000, 0, 0x7F80),                 # overflow
        ("AXPY_MIX", 0x3F80, 0x3F80, 0xBF80_0000, 0),             # 1*1 - 1 = +0
    ]
    for fused in (False, True):
        for op, a, s, b, want in cases:
            assert reference(op, [a], [s], [b], fused=fused)[0] == want, (op, hex(a))
        beats = [beat(op, [a] * LANES, [b] * LANES, s) for op, a, s, b, _ in cases]
        out, _ = run(UNIT[fused], run_beats, {"beats": beats})
        got = [ys[0] for ys in out["y"]]
        assert got == [c[-1] for c in cases], [
            (c[0], hex(c[1]), hex(g), hex(c[-1])) for c, g in zip(cases, got) if g != c[-1]]


def test_two_roundings_differ_from_fused_on_the_unit():
    """The product's error survives in fused mode only (1+2**-20)**2 - RN(...)."""
    x = 0x3F80_0008                  # 1 + 2**-20
    p = int(np.float32(_f32([x])[0] * _f32([x])[0]).view(np.uint32)) ^ 1 << 31
    got = {}
    for fused in (False, True):
        out, _ = run(UNIT[fused], run_beats, {"beats": [beat("AXPY", [x] * LANES, [p] * LANES, x)]})
        got[fused] = out["y"][0][0]
    assert got == {False: 0, True: 0x2B80_0000}      # +0 and 2**-40


# --- timing, handshake, parameters --------------------------------------------------------

@pytest.mark.parametrize("latency, repeat_cycles", [(None, None), (1, None), (3, 24), (9, 40)])
def test_latency_and_repeat_rate(latency, repeat_cycles):
    """Beat n is accepted in cycle n * repeat_cycles // (64 // lanes); its result is valid
    `latency` cycles later; the last beat's result comes at FpUnit.cycles(beats)."""
    params = {"lanes": LANES, "latency": latency, "repeat_cycles": repeat_cycles}
    unit = FpUnit(**params)
    Fragment.get(unit, None)                 # built to read its resolved timing
    n = 40
    beats = [beat("ADD", [i, 0, 0, 0], [0] * LANES, last=i == n - 1) for i in range(n)]
    out, _ = run(ComponentSpec("epfabric.hw.fp_unit:FpUnit", params), run_beats, {"beats": beats})
    per_repeat = 64 // LANES
    assert out["accepted"] == [i * unit.repeat_cycles // per_repeat for i in range(n)]
    assert out["valid"] == [t + unit.latency for t in out["accepted"]]
    assert out["valid"][-1] == unit.cycles(n)
    assert [y[0] for y in out["y"]] == list(range(n))    # x + (+0) = x for these subnormals
    assert out["last"] == [0] * (n - 1) + [1]


def test_latency_default_is_one_register_per_step():
    units = FpUnit(), FpUnit(fused=True)
    for unit in units:
        Fragment.get(unit, None)
    assert units[0].latency == len(lane_steps(False)) == 10
    assert units[1].latency == len(lane_steps(True)) == 7


def test_register_points():
    assert register_points(6, 6) == (set(range(6)), 0)
    assert register_points(6, 9) == (set(range(6)), 3)
    assert register_points(6, 1) == ({5}, 0)
    assert register_points(7, 3) == ({2, 4, 6}, 0)
    for steps, latency in itertools.product((6, 7), range(1, 8)):
        after, extra = register_points(steps, latency)
        assert len(after) + extra == latency and steps - 1 in after


@pytest.mark.parametrize("kw, exc, match", [
    ({"lanes": 3}, ValueError, r"lanes must be a power of two, not 3"),
    ({"lanes": 128}, ValueError, r"lanes must be in \[1, 64\], not 128"),
    ({"lanes": 4.0}, TypeError, r"lanes must be an integer, not 4.0"),
    ({"latency": 0}, ValueError, r"latency must be in \[1, 64\], not 0"),
    ({"lanes": 4, "repeat_cycles": 15}, ValueError,
     r"repeat_cycles must be in \[16, 4096\], not 15"),
    ({"fused": 1}, TypeError, r"fused must be a bool, not 1"),
])
def test_bad_parameters(kw, exc, match):
    with pytest.raises(exc, match=match):
        rejected(FpUnit, **kw)


# --- the soak top: pysim cross-check, negative control, Verilator -------------------------

def test_soak_top_matches_its_numpy_mirror_pysim():
    """The ROM operand generator and checksums in hardware equal soak_operands/expected_sums
    (mixed operations, stalls and gaps), and a corrupted result fails exactly its block."""
    args = {"beats": 64, "seed": 1, "mix": True, "stall": 20_000, "gap": 20_000}
    want = expected_sums(seed=1, beats=64, lanes=LANES, block_log2=3, mix=True)
    out, _ = run(SMALL_SOAK, run_soak, args)
    assert out["sums"] == want
    bad, _ = run(SMALL_SOAK, run_soak, {**args, "corrupt": 19})
    assert [k for k, (g, w) in enumerate(zip(bad["sums"], want)) if g != w] == [19 >> 3]
    ops, *_ = soak_operands(seed=1, beats=64, lanes=LANES, mix=True)
    assert set(ops) == {op.name for op in MIX_OPS}
    for op in ("CAST_F32_BF16", "ADD_BF16"):       # counting operands, fp32 and bf16
        swept = {"beats": 40, "seed": 2, "op": op, "sweep": True}
        out, _ = run(SMALL_SOAK, run_soak, swept)
        assert out["sums"] == expected_sums(lanes=LANES, block_log2=3, **swept)


def _soak_on_verilator(fused, runs):
    """``runs``: ``[(op or None for mixed, beats, seed, sweep)]``, one after the other in one
    Verilator simulation (:func:`run_soaks`); asserts every block checksum and returns
    ``[(label, operands, seconds)]``."""
    require_simulator("verilator")
    kws = [{"op": op or "ADD", "mix": op is None, "sweep": sweep} for op, _b, _s, sweep in runs]
    outs, _ = run(SOAK[fused], run_soaks,
                  {"runs": [{"beats": beats, "seed": seed, "stall": 3000, "gap": 3000, **kw}
                            for (_op, beats, seed, _sw), kw in zip(runs, kws)]},
                  simulator="verilator")
    assert len(outs) == len(runs)
    done = []
    for (op, beats, seed, sweep), kw, out in zip(runs, kws, outs):
        want = expected_sums(seed=seed, beats=beats, lanes=LANES, block_log2=8, fused=fused, **kw)
        wrong = [k for k, (g, w) in enumerate(zip(out["sums"], want)) if g != w]
        if wrong:
            first = wrong[0] << 8
            y = expected_results(seed=seed, beats=first + 256, lanes=LANES, fused=fused, **kw)
            pytest.fail(f"{op or 'mixed'} fused={fused}: blocks {wrong[:10]} differ "
                        f"(of {len(want)}); rerun beats {first}..{first + 255} beat by beat "
                        f"(soak_operands) to see which; first expected words {y[first][:2]}")
        done.append((f"{op or 'mixed'}{' (sweep)' if sweep else ''}", beats * LANES,
                     out["seconds"]))
    return done


@pytest.mark.parametrize("fused", [False, True], ids=["two_roundings", "fused"])
def test_soak_verilator(fused):
    """A mixed run of 2**16 operands (at least 4,168 of every operation) and counting sweeps:
    every bf16 value through both casts and as ``a`` of a bf16 sum, every high half of an
    fp32 through the cast to bf16, against numpy; the five runs in one simulator start. Runs
    of one operation each (10**6 operands) are the ``slow`` test below."""
    runs = [(None, 1 << 14, 1, False)]
    runs += [(op, 1 << 14, 20 + i, True) for i, op in
             enumerate(("CAST_BF16_F32", "CAST_F32_BF16", "ADD_BF16", "MULS_BF16"))]
    _soak_on_verilator(fused, runs)


@pytest.mark.slow
@pytest.mark.parametrize("fused", [False, True], ids=["two_roundings", "fused"])
def test_soak_million_operands_verilator(fused, capsys):
    """10**6 operands (250,000 beats of 4 lanes) of every operation, and a mixed run."""
    runs = [(op, 250_000, 1000 + i, False) for i, op in enumerate(OPS)]
    runs += [(None, 250_000, 999, False)]
    done = _soak_on_verilator(fused, runs)
    with capsys.disabled():
        for label, operands, seconds in done:
            print(f"\nfp soak fused={fused} {label}: {operands} operands, 0 wrong, {seconds:.1f} s")
