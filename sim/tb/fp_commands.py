"""Drive the floating-point unit with beats (a test intent), and its numpy reference.

:func:`run_beats` streams beats into a :class:`~epfabric.hw.fp_unit.FpUnit` and
collects the results; it runs unchanged on every simulator. :func:`reference`
computes what each operation must return, from its definition, in numpy:
fp32 arithmetic is numpy's ``float32`` (IEEE 754, ties to even, subnormals kept),
bf16 rounding is ``ml_dtypes.bfloat16``'s, and the fused multiply-add is
:func:`fma32` (exact, via round-to-odd in float64); :func:`exact_fma32`, with
Python's fractions, checks :func:`fma32`. Results are bits; every NaN is the
unit's canonical NaN, the one place the unit is specified beyond IEEE 754.
"""

import random
from fractions import Fraction

import numpy as np

from ...hw.fp_lanes import BF16, F32
from ...hw.fp_unit import FpOp

__all__ = ["reference", "fma32", "exact_fma32", "run_beats", "beat", "EDGE_F32", "EDGE_BF16",
           "operand_pools", "POOL_SEED", "BF16_SOURCES"]

#: Operations whose ``a`` and ``s`` (and for some ``b``) are bf16 (the lane's low 16 bits).
BF16_SOURCES = {"CAST_BF16_F32": "as", "ADD_BF16": "asb", "MULS_BF16": "as",
                "AXPY_BF16": "asb", "AXPY_MIX": "as"}

#: fp32 values where IEEE 754 behaviour is decided: zeros, subnormals, the normal
#: range's ends, infinities, quiet and signalling NaNs with payloads, and neighbours of 1.
EDGE_F32 = [
    0x0000_0000, 0x8000_0000, 0x0000_0001, 0x8000_0001, 0x0000_0003, 0x007F_FFFF, 0x807F_FFFF,
    0x0040_0000, 0x0080_0000, 0x8080_0000, 0x00C0_0000, 0x0100_0000, 0x3F80_0000, 0xBF80_0000,
    0x3F80_0001, 0x3F7F_FFFF, 0xBF7F_FFFF, 0x3FC0_0000, 0x4000_0000, 0xC040_0000, 0x3400_0000,
    0x3380_0000, 0x3380_0001, 0x5F80_0000, 0x1F80_0000, 0x1FC0_0000, 0x4B80_0000, 0x4B80_0001,
    0x7F7F_FFFF, 0xFF7F_FFFF, 0x7F00_0000, 0x7F7F_8000, 0x7F80_0000, 0xFF80_0000, 0x7FC0_0000,
    0xFFC1_2345, 0x7F80_0001, 0x7FBF_FFFF, 0x3F80_8000, 0x3F81_8000, 0x0000_8000, 0x0001_8000,
]

#: bf16 counterparts (the high halves that matter for bf16 operands).
EDGE_BF16 = [
    0x0000, 0x8000, 0x0001, 0x8001, 0x007F, 0x0080, 0x8080, 0x3F80, 0xBF80, 0x3F81, 0x3F7F,
    0x4000, 0xC040, 0x3B80, 0x3B00, 0x7F7F, 0xFF7F, 0x7F00, 0x7F80, 0xFF80, 0x7FC0, 0xFFC1,
    0x7F81, 0x0040, 0x0100, 0x4380, 0x4381,
]


def _f32(bits):
    return np.asarray(bits, dtype=np.uint32).view(np.float32)


def _widen(bits):
    """bf16 in the low 16 bits -> float32 (exact)."""
    return (np.asarray(bits, dtype=np.uint32) << 16).view(np.float32)


def _to_bf16(x):
    import ml_dtypes
    out = np.asarray(x, dtype=np.float32).astype(ml_dtypes.bfloat16).view(np.uint16)
    return np.where(np.isnan(x), BF16.nan, out).astype(np.uint32)


def _bits32(x):
    return np.where(np.isnan(x), F32.nan, x.view(np.uint32)).astype(np.uint32)


def fma32(a, s, b):
    """``a*s + b`` rounded once to float32 (arrays of float32).

    The product is exact in float64 (48 bits); the float64 sum is turned into its
    round-to-odd value with the exact error (TwoSum): 53 >= 24 + 2 bits, so
    rounding that to float32 rounds the exact sum. Non-finite operands fall through
    to float64 arithmetic, which gives the IEEE special results.
    """
    a64, s64, b64 = (np.asarray(v, dtype=np.float32).astype(np.float64) for v in (a, s, b))
    with np.errstate(all="ignore"):
        p = a64 * s64
        t = p + b64
        bv = t - p
        err = (p - (t - bv)) + (b64 - bv)
        even = (t.view(np.uint64) & 1) == 0
        fix = np.isfinite(t) & np.isfinite(err) & (err != 0) & even
        t = np.where(fix, np.nextafter(t, np.where(err > 0, np.inf, -np.inf)), t)
        return t.astype(np.float32)


def _fraction(bits):
    sign = -1 if bits >> 31 else 1
    exp, man = (bits >> 23) & 0xFF, bits & 0x7F_FFFF
    if exp == 0:
        return sign * Fraction(man, 1 << 149)
    return sign * Fraction(man | 1 << 23) * Fraction(2) ** (exp - 150)


def exact_fma32(a, s, b):
    """Bits of ``a*s + b`` rounded once to fp32, with fractions (scalar bits in, bits out)."""
    xs = [np.float32(_f32(v)) for v in (a, s, b)]
    if not all(np.isfinite(x) for x in xs):
        with np.errstate(all="ignore"):
            r = np.float32(np.float64(xs[0]) * np.float64(xs[1]) + np.float64(xs[2]))
        return int(_bits32(np.array([r]))[0])
    q = _fraction(a) * _fraction(s) + _fraction(b)
    if q == 0:
        exact_zero_sign = (a ^ s) >> 31 & b >> 31 if (_fraction(a) * _fraction(s) == 0
                                                       and _fraction(b) == 0) else 0
        return exact_zero_sign << 31
    sign, q = (1 << 31 if q < 0 else 0), abs(q)
    e = q.numerator.bit_length() - q.denominator.bit_length()
    if Fraction(2) ** e > q:
        e -= 1
    ulp = Fraction(2) ** (max(e, -126) - 23)
    n, rem = divmod(q, ulp)
    if rem > ulp / 2 or (rem == ulp / 2 and n % 2):
        n += 1
    value = n * ulp
    if value >= Fraction(2) ** 128:
        return sign | F32.inf
    return sign | int(np.array([float(value)], dtype=np.float32).view(np.uint32)[0])


def reference(op, a, s, b, *, fused):
    """Result bits of ``op`` (a name) on operand bits ``a``, ``s``, ``b`` (uint32 arrays).

    A bf16 operand is in the low 16 bits, and so is a bf16 result.
    """
    a, s, b = (np.broadcast_to(np.asarray(v, dtype=np.uint32), np.shape(a)) for v in (a, s, b))

    def axpy(x, y, z):
        if fused:
            return fma32(x, y, z)
        with np.errstate(all="ignore"):
            return x * y + z

    with np.errstate(all="ignore"):
        if op == "ADD":
            return _bits32(_f32(a) + _f32(b))
        if op == "MULS":
            return _bits32(_f32(a) * _f32(s))
        if op == "AXPY":
            return _bits32(axpy(_f32(a), _f32(s), _f32(b)))
        if op == "CAST_BF16_F32":
            return _bits32(_widen(a & 0xFFFF))
        if op == "CAST_F32_BF16":
            return _to_bf16(_f32(a))
        if op == "ADD_BF16":
            return _to_bf16(_widen(a & 0xFFFF) + _widen(b & 0xFFFF))
        if op == "MULS_BF16":
            return _to_bf16(_widen(a & 0xFFFF) * _widen(s & 0xFFFF))
        if op == "AXPY_BF16":
            return _to_bf16(axpy(_widen(a & 0xFFFF), _widen(s & 0xFFFF), _widen(b & 0xFFFF)))
        if op == "AXPY_MIX":
            return _bits32(axpy(_widen(a & 0xFFFF), _widen(s & 0xFFFF), _f32(b)))
    raise ValueError(f"op must be one of {', '.join(o.name for o in FpOp)}, not {op!r}")


#: Seed of the operand pools (fixed: the soak top's ROMs are built from them).
POOL_SEED = 20_260_401


def operand_pools(seed=POOL_SEED):
    """``(a, b, s)`` pools of fp32 bits: 64 groups of 64 ``a``/``b`` values, 4096 ``s`` values.

    A group's ``a`` and ``b`` share an exponent band (subnormal, near the smallest
    normal, near overflow, or anywhere), so sums and multiply-adds cancel and
    tie; half the ``b`` are a ``-a`` of the same index moved by at most 2 ulps.
    Fractions have random trailing zeros (exact results, ties); each group holds
    special values. ``s`` is near 1 (exact powers of two among them) or anywhere.
    """
    rng = np.random.default_rng(seed)
    groups, per = 64, 64
    specials = np.array([0x0, 0x8000_0000, 0x7F80_0000, 0xFF80_0000, 0x7FC0_0000, 0x7F80_0001,
                         0x7F7F_FFFF, 0x0080_0000, 0x0000_0001, 0x807F_FFFF, 0x3F80_0000,
                         0xFFC0_0001], dtype=np.uint64)

    def shaped(n, center, spread):
        exp = np.clip(center + rng.integers(-spread, spread + 1, n), 0, 254).astype(np.uint64)
        zeros = rng.choice(np.array([0, 0, 0, 4, 12, 16, 20, 23], dtype=np.uint64), n)
        man = rng.integers(0, 1 << 23, n, dtype=np.uint64) >> zeros << zeros
        return rng.integers(0, 2, n, dtype=np.uint64) << 31 | exp << 23 | man

    centers = np.concatenate([np.zeros(4), np.arange(1, 5), np.arange(250, 254),
                              rng.integers(120, 136, 4), rng.integers(1, 255, groups - 16)])
    a = np.concatenate([shaped(per, int(c), 2) for c in centers])
    b = np.concatenate([shaped(per, int(c), 2) for c in centers])
    slots = np.arange(groups)[:, None] * per + np.arange(per - 4, per)
    a[slots] = rng.choice(specials, slots.shape)
    b[slots] = rng.choice(specials, slots.shape)
    mirror = rng.random(a.size) < 0.5
    moved = ((a ^ 0x8000_0000) + rng.integers(-2, 3, a.size).astype(np.uint64)) & 0xFFFF_FFFF
    b = np.where(mirror, moved, b)
    s = shaped(4096, 127, 3)
    wide = rng.random(4096) < 0.25
    s = np.where(wide, shaped(4096, 127, 127), s)
    exact = rng.random(4096) < 0.1
    s = np.where(exact, rng.integers(0, 2, 4096, dtype=np.uint64) << 31
                 | rng.integers(120, 135, 4096, dtype=np.uint64) << 23, s)
    odd = rng.random(4096) < 0.03
    s = np.where(odd, rng.choice(specials, 4096), s)
    return tuple(x.astype(np.uint32) for x in (a, b, s))


def beat(op, a, b=None, s=0, last=0):
    """A JSON-serialisable beat: ``op`` by name, lane words ``a`` and ``b``, scalar ``s``."""
    b = [0] * len(a) if b is None else b
    return {"op": FpOp[op].name, "a": [int(x) for x in a], "b": [int(x) for x in b],
            "s": int(s), "last": int(last)}


async def run_beats(bench, beats, stall_prob=0.0, seed=0, timeout=100_000):
    """Harness intent: stream ``beats`` (see :func:`beat`) and return their results.

    Returns ``{"y": [[lane words] per beat], "last": [...], "accepted": [cycle of each
    beat's acceptance], "valid": [cycle each result was valid and taken]}``. With
    ``stall_prob > 0`` the consumer refuses results at random (seeded).
    """
    rng = random.Random(seed)
    raw = [bench.pack("i_stream.payload", {**b, "op": FpOp[b["op"]]}) for b in beats]
    ys, lasts, accepted, valid = [], [], [], []
    t0, sent = bench.cycle, 0
    while len(ys) < len(beats):
        if bench.cycle - t0 > timeout:
            raise TimeoutError(f"fp unit: {len(ys)} of {len(beats)} results after {timeout} cycles")
        bench.set("i_stream.valid", int(sent < len(raw)))
        if sent < len(raw):
            bench.set("i_stream.payload", raw[sent])
        ready = int(rng.random() >= stall_prob)
        bench.set("o_stream.ready", ready)
        if sent < len(raw) and await bench.get("i_stream.ready"):
            accepted.append(bench.cycle - t0)
            sent += 1
        if ready and await bench.get("o_stream.valid"):
            rsp = bench.decode("o_stream.payload", await bench.get("o_stream.payload"))
            ys.append([int(y) for y in rsp.y])
            lasts.append(int(rsp.last))
            valid.append(bench.cycle - t0)
        await bench.tick()
    bench.set("i_stream.valid", 0)
    bench.set("o_stream.ready", 0)
    return {"y": ys, "last": lasts, "accepted": accepted, "valid": valid}
