"""The INC blocks' lane arithmetic (hw/lane_arith.py): sums equal numpy's, headers and tails pass.

Each case evaluates :func:`add_lanes` on Amaranth's simulator (it is combinational) and
compares it with numpy's wrapping sums of the same lanes, independently of the blocks
that use it (tests/hw/test_inc_engine.py, test_inc_switch.py).
"""

import re

import numpy as np
import pytest
from amaranth.hdl import Module, Signal
from amaranth.sim import Simulator

from epfabric.hw.lane_arith import add_lanes, lane_bits


def evaluate(pairs, *, width, dtype, header_bits=0):
    """``add_lanes(a, b)`` of each ``(a, b)`` in ``pairs`` (integers of ``width`` bits)."""
    a, b = Signal(width), Signal(width)
    out = Signal(width)
    m = Module()
    m.d.comb += out.eq(add_lanes(a, b, dtype=dtype, header_bits=header_bits))
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


@pytest.mark.parametrize("dtype", ["fp16", "bf16", "int0", "int", "uint16", 32, None])
def test_other_lane_types_are_refused(dtype):
    with pytest.raises(ValueError, match=r"dtype must be an integer lane type 'intN' .*not "
                                         + re.escape(repr(dtype))):
        lane_bits(dtype)
    with pytest.raises(ValueError, match=r"dtype must be an integer lane type"):
        add_lanes(Signal(32), Signal(32), dtype=dtype)
