"""sim/backends/pysim.py: Amaranth's simulator as a backend, and its cheaper write enables."""

import random

import pytest
from amaranth.hdl import Cat, Module
from amaranth.lib.memory import Memory
from amaranth.sim import Simulator, _pyrtl

from epfabric.sim.backends import pysim


def test_the_write_enable_compiler_is_replaced():
    """Importing the backend replaces the one ``Cat`` of Amaranth's simulator compiler."""
    assert pysim is not None and _pyrtl.Cat is not Cat


@pytest.mark.parametrize("width, granularity", [(32, 8), (24, 1), (16, 16)])
def test_partial_writes_store_what_a_byte_mask_model_does(width, granularity):
    """Random writes with random enable bits (one bit, several, a whole row) through a write
    port of ``granularity``: the memory holds exactly what the mask says, read back each
    cycle, on the simulator with the replaced enable mask."""
    m = Module()
    m.submodules.mem = mem = Memory(shape=width, depth=4, init=[])
    wp, rp = mem.write_port(granularity=granularity), mem.read_port(domain="comb")
    lanes = width // granularity
    rng = random.Random(width + granularity)
    model = [0] * 4
    sim = Simulator(m)
    sim.add_clock(1e-6)
    seen = []

    async def bench(ctx):
        for _ in range(200):
            addr, data, en = rng.randrange(4), rng.getrandbits(width), rng.getrandbits(lanes)
            ctx.set(wp.addr, addr)
            ctx.set(wp.data, data)
            ctx.set(wp.en, en)
            await ctx.tick()
            mask = sum(((1 << granularity) - 1) << (granularity * i)
                       for i in range(lanes) if en >> i & 1)
            model[addr] = model[addr] & ~mask | data & mask
            ctx.set(wp.en, 0)
            for a in range(4):
                ctx.set(rp.addr, a)
                seen.append((ctx.get(rp.data), model[a]))

    sim.add_testbench(bench)
    sim.run()
    assert len(seen) == 800 and all(got == want for got, want in seen)
