"""The AIV core's units (hw/aiv_*.py): each claims its own instructions and is silent otherwise.

The core joins the units' register and UBuf ports by OR (:mod:`epfabric.hw.aiv_units`): that
is right only if every opcode belongs to one unit at most and a unit drives those ports only
while it executes. Their behaviour is tested through the core (tests/hw/test_aiv_core.py).
"""

import random

import pytest
from amaranth.lib.wiring import Out
from amaranth.sim import Simulator

from epfabric.hw.aiv_fp import FpSequencer
from epfabric.hw.aiv_inc import IncUnit
from epfabric.hw.aiv_lsu import LoadStoreUnit
from epfabric.hw.aiv_scalar import ScalarUnit
from epfabric.hw.aiv_vector import VectorSequencer
from epfabric.hw.isa import INSTRUCTIONS, Opcode
from rejected import rejected

UBUF = {"ubuf_rows": 2, "data_bytes": 32}
UNITS = {
    "scalar": lambda: ScalarUnit(imem_depth=64),
    "lsu": lambda: LoadStoreUnit(max_outstanding=7, ep=True, **UBUF),
    "vector": lambda: VectorSequencer(lanes=4, width=16, **UBUF),
    "inc": lambda: IncUnit(**UBUF),
    "fp": lambda: FpSequencer(lanes=2, **UBUF),
}
#: instructions the core's FSM executes itself
CORE_OPS = {"BAR", "MARK", "HALT"}


def _ports(unit):
    """``(acts, driven)``: what shows the unit executes an instruction, and every signal it
    drives into the ports the core ORs together (its register and UBuf ports)."""
    reg_w = getattr(unit, "reg_w", [])             # the fp unit writes no register
    shared = [reg_w] if hasattr(reg_w, "en") else list(reg_w)
    for name in ("ubuf_r", "ubuf_w"):
        port = getattr(unit, name, None)
        if port is not None:
            shared += [port] if hasattr(port, "addr") else list(port)
    driven = [getattr(p, n) for p in shared for n, member in p.signature.members.items()
              if member.flow == Out]
    acts = [p.en for p in shared if hasattr(p, "en")]
    if hasattr(unit, "ctl"):
        acts += [unit.ctl.hold, unit.ctl.enter]
    acts += [getattr(unit, n) for n in ("jump",) if hasattr(unit, n)]
    acts += [getattr(unit, n).valid for n in ("mem_req", "inc_post") if hasattr(unit, n)]
    return acts, driven


#: operands under which every instruction of a unit shows (a branch taken in one of the two)
OPERANDS = [dict(a=5, b=5, c=5, u=5, d=5, eff=0, imm=0), dict(a=1, b=2, c=3, u=4, d=5, eff=0, imm=0)]


def _claims(make):
    """``(claimed opcodes, ports driven while idle)`` of the unit ``make`` builds."""
    unit = make()
    acts, driven = _ports(unit)
    run = unit.run if hasattr(unit, "run") else unit.ctl.run
    claimed, idle = set(), set()
    rng = random.Random(1)

    async def bench(ctx):
        for op in Opcode:
            ctx.set(unit.issue.op, op)
            for operands in [*OPERANDS, *({k: rng.getrandbits(32) for k in OPERANDS[0]}
                                          for _ in range(4))]:
                for name, value in operands.items():
                    ctx.set(getattr(unit.issue, name), value)
                ctx.set(run, 0)
                idle.update((op.name, v.name) for v in driven if ctx.get(v))
                ctx.set(run, 1)
                if any(ctx.get(a) for a in acts):
                    claimed.add(op.name)

    sim = Simulator(unit)
    sim.add_testbench(bench)
    sim.run()
    return claimed, idle


@pytest.fixture(scope="module")
def claims():
    return {name: _claims(make) for name, make in UNITS.items()}


def test_every_instruction_belongs_to_one_unit(claims):
    owners = {}
    for name, (claimed, _idle) in claims.items():
        for op in claimed:
            owners.setdefault(op, []).append(name)
    shared = {op: names for op, names in owners.items() if len(names) > 1}
    assert not shared
    table = {ins.mnemonic.upper() for ins in INSTRUCTIONS}
    # a fence with no store outstanding (a unit just built) shows nothing
    assert set(owners) == table - CORE_OPS - {"FENCE"}


def test_a_unit_drives_nothing_while_it_does_not_execute(claims):
    assert {name: sorted(idle)[:5] for name, (_c, idle) in claims.items() if idle} == {}


@pytest.mark.parametrize("make, kw, exc, match", [
    (ScalarUnit, {"imem_depth": 100}, ValueError, r"imem_depth must be a power of two, not 100"),
    (LoadStoreUnit, {"max_outstanding": 0}, ValueError,
     r"max_outstanding must be in \[1, 4095\], not 0"),
    (LoadStoreUnit, {"ep": 1}, TypeError, r"ep must be a bool, not 1"),
    (LoadStoreUnit, {"ep_dies": 65}, ValueError, r"ep_dies must be in \[1, 64\], not 65"),
    (VectorSequencer, {"lanes": 1, "width": 16}, ValueError,
     r"lanes \* width must be a multiple of 32"),
    (VectorSequencer, {"ubuf_rows": 3}, ValueError, r"ubuf_rows must be a power of two, not 3"),
    (IncUnit, {"data_bytes": 48}, ValueError, r"data_bytes must be a multiple of 32, not 48"),
    (FpSequencer, {"lanes": 1}, ValueError, r"fp_lanes must be in \[2, 64\], not 1"),
    (FpSequencer, {"lanes": 32}, ValueError, r"fp_lanes \* 32 must divide data_bytes \* 8"),
    (FpSequencer, {"lanes": 2, "latency": 0}, ValueError, r"fp_latency must be in \[1, 64\]"),
    (FpSequencer, {"lanes": 2, "repeat_cycles": 31}, ValueError,
     r"fp_repeat_cycles must be in \[32, 4096\], not 31"),
    (FpSequencer, {"lanes": 2, "latency": 3, "repeat_cycles": 130}, ValueError,
     r"fp_repeat_cycles must be at most \(fp_latency \+ 1\) \* \(64 // fp_lanes\) \+ 1 = 129"),
    (FpSequencer, {"fused": 1}, TypeError, r"fp_fused must be a bool, not 1"),
])
def test_bad_parameters(make, kw, exc, match):
    with pytest.raises(exc, match=match):
        rejected(make, **kw)
