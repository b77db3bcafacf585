"""The INC blocks' lane arithmetic (hw/lane_arith.py): sums equal numpy's, headers and tails pass.

Each case evaluates :func:`add_lanes` (or :func:`accumulate_lanes`, :func:`round_lanes`) on
Amaranth's simulator (they are combinational) and compares it with numpy's sums of the same
lanes -- wrapping integers, ``float32``, ``ml_dtypes.bfloat16`` (via
:func:`epfabric.sim.tb.fp_commands.reference`) -- independently of the blocks that use it
(tests/hw/test_inc_engine.py, test_inc_switch.py).
"""

import re

import numpy as np
import pytest
from amaranth.hdl import Module, Signal
from amaranth.sim import Simulator

from epfabric.hw.lane_arith import (accumulate_lanes, accumulator_width, add_lanes,
                                    identity_lanes, lane_bits, round_lanes, widen_lanes)
from epfabric.sim.tb.fp_commands import EDGE_BF16, EDGE_F32, operand_pools, reference


def evaluate(pairs, *, width, dtype, header_bits=0, build=None):
    """``add_lanes(a, b)`` of each ``(a, b)`` in ``pairs`` (integers of ``width`` bits), or
    ``build(m, a, b)`` (an expression of ``width`` bits)."""
    a, b = Signal(width), Signal(width)
    out = Signal(width)
    m = Module()
    m.d.comb += out.eq(build(m, a, b) if build else
                       add_lanes(a, b, dtype=dtype, header_bits=header_bits, m=m))
    got = []

    async def bench(ctx):
        for x, y in pairs:
            ctx.set(a, x)
            ctx.set(b, y)
            got.append(ctx.get(out))

    sim = Simulator(m)
    sim.add_testbench(bench)
    sim.run()
    return got


def pack(lanes, bits):
    """One integer of ``lanes`` (lane 0 in the low bits), each taken mod ``2**bits``."""
    return sum((int(v) & ((1 << bits) - 1)) << (bits * k) for k, v in enumerate(lanes))


@pytest.mark.parametrize("dtype, np_type", [("int32", np.int32), ("int16", np.int16),
                                            ("int8", np.int8)])
def test_integer_lanes_wrap_like_numpy(dtype, np_type):
    bits, lanes = lane_bits(dtype), 4
    info = np.iinfo(np_type)
    rng = np.random.default_rng(7)
    cases = [rng.integers(info.min, info.max, size=(2, lanes), endpoint=True)
             for _ in range(20)]
    cases.append(np.array([[info.max] * lanes, [1] * lanes]))       # every lane overflows
    cases.append(np.array([[info.min] * lanes, [-1] * lanes]))      # every lane underflows
    got = evaluate([(pack(x, bits), pack(y, bits)) for x, y in cases],
                   width=bits * lanes, dtype=dtype)
    for (x, y), value in zip(cases, got):
        with np.errstate(over="ignore"):
            want = x.astype(np_type) + y.astype(np_type)
        assert value == pack(want, bits), (x, y)


def test_header_and_tail_come_from_b_unsummed():
    # 8 header bits, two 16-bit lanes, 4 tail bits: 44 bits
    a = pack([0xAA], 8) | pack([0x1234, 0xFFFF], 16) << 8 | 0x5 << 40
    b = pack([0x3C], 8) | pack([0x0001, 0x0002], 16) << 8 | 0x9 << 40
    got, = evaluate([(a, b)], width=44, dtype="int16", header_bits=8)
    assert got == pack([0x3C], 8) | pack([0x1235, 0x0001], 16) << 8 | 0x9 << 40


def _pairs_in_lanes(a, b, bits, lanes):
    """Operand arrays as words of ``lanes`` lanes (padded with zeros to a whole word)."""
    pad = -len(a) % lanes
    a, b = (np.concatenate([v, np.zeros(pad, dtype=np.uint32)]).reshape(-1, lanes) for v in (a, b))
    return [(pack(x, bits), pack(y, bits)) for x, y in zip(a, b)], len(a) * lanes


def _unpack(words, bits, lanes):
    return [(w >> (bits * k)) & ((1 << bits) - 1) for w in words for k in range(lanes)]


@pytest.mark.parametrize("dtype, edges, op", [("fp32", EDGE_F32, "ADD"),
                                              ("bf16", EDGE_BF16, "ADD_BF16")])
def test_float_lanes_round_like_numpy(dtype, edges, op):
    """Every pair of edge values (zeros, subnormals, the ends of the normal range, infinities,
    NaNs with payloads, ties) and operands that cancel and tie: bit for bit numpy's
    ``float32`` sum, or for bf16 the ``float32`` sum rounded once by ``ml_dtypes``; a NaN is
    the canonical one."""
    bits, lanes = lane_bits(dtype), 4
    a = np.array([x for x in edges for _ in edges], dtype=np.uint32)
    b = np.array([y for _ in edges for y in edges], dtype=np.uint32)
    pa, pb, _ = operand_pools()
    if dtype == "fp32":                          # cancellations, ties, every exponent band
        a, b = np.concatenate([a, pa[::8]]), np.concatenate([b, pb[::8]])
    pairs, n = _pairs_in_lanes(a, b, bits, lanes)
    got = _unpack(evaluate(pairs, width=bits * lanes, dtype=dtype), bits, lanes)[:len(a)]
    want = reference(op, a, 0, b, fused=False)
    bad = [(hex(x), hex(y), hex(g), hex(w)) for x, y, g, w in zip(a, b, got, want) if g != w]
    assert not bad, bad[:10]


def test_bf16_accumulates_in_fp32_and_rounds_once():
    """A bf16 partial sum is fp32: widened, three contributions accumulated, rounded once.
    1 + 2**-9 + 2**-9 is 1 + 2**-8 (exact in fp32, a bf16 tie that rounds to even, 1), and
    1 + 3 * 2**-9 rounds up to 1 + 2**-7; bf16 steps would give 1 each time."""
    one, tiny = 0x3F80, 0x3B00                   # bf16 1.0 and 2**-9
    width, header = 16 * 2 + 8, 8

    def build(m, a, b):
        acc = widen_lanes(a, dtype="bf16", header_bits=header)
        for _ in range(2):
            acc = accumulate_lanes(m, acc, b, dtype="bf16", header_bits=header)
        return round_lanes(m, acc, dtype="bf16", header_bits=header, width=width)

    x = pack([0x11], 8) | pack([one, one], 16) << 8
    y = pack([0x22], 8) | pack([tiny, 0x3B40], 16) << 8     # 2**-9 and 1.5 * 2**-9
    got, = evaluate([(x, y)], width=width, dtype="bf16", build=build)
    assert got == pack([0x22], 8) | pack([0x3F80, 0x3F81], 16) << 8
    assert accumulator_width(width, dtype="bf16", header_bits=header) == 8 + 2 * 32
    assert identity_lanes(width, dtype="bf16", header_bits=header).value == \
        (0x8000_0000 << 8) | (0x8000_0000 << 40)


def test_a_float_identity_keeps_minus_zero():
    """``identity + x`` is ``x`` bit for bit, ``-0`` included (``+0`` would not be)."""
    def build(m, a, b):
        return accumulate_lanes(m, identity_lanes(64, dtype="fp32"), b, dtype="fp32")
    values = [0x8000_0000, 0x0000_0000, 0x0000_0001, 0xBF80_0000, 0x7F80_0000, 0x7F7F_FFFF]
    pairs, _ = _pairs_in_lanes(np.zeros(6, dtype=np.uint32), np.array(values, dtype=np.uint32),
                               32, 2)
    got = _unpack(evaluate(pairs, width=64, dtype="fp32", build=build), 32, 2)
    assert got == values


@pytest.mark.parametrize("dtype", ["fp16", "int0", "int", "uint16", "f32", 32, None])
def test_other_lane_types_are_refused(dtype):
    with pytest.raises(ValueError, match=r"dtype must be a lane type: an integer 'intN' .*"
                                         r"'fp32', 'bf16', not " + re.escape(repr(dtype))):
        lane_bits(dtype)
    with pytest.raises(ValueError, match=r"dtype must be a lane type"):
        add_lanes(Signal(32), Signal(32), dtype=dtype)


def test_float_lanes_need_a_module():
    with pytest.raises(ValueError, match=r"dtype 'fp32': floating-point lanes add logic to a "
                                         r"module; give m"):
        add_lanes(Signal(32), Signal(32), dtype="fp32")
