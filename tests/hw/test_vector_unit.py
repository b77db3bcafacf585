"""Vector unit (hw/vector_unit.py) against the numpy model, on all simulators."""

import random

import pytest

from epfabric.hw.vector_unit import Cond, VecOp, VectorUnit
from epfabric.sim.tb.vector_commands import command, reference, run_commands

from utils import VECTOR_SPEC as SPEC
from rejected import rejected
from utils import run

LANES, WIDTH, MAX_LEN = (SPEC.params[k] for k in ("lanes", "width", "max_len"))
OPS = [op.name for op in VecOp]


def random_commands(op, n, seed, *, width=WIDTH, max_len=MAX_LEN):
    """``n`` random commands of ``op``; small value ranges so comparisons hit often."""
    rng = random.Random(seed)
    cmds = []
    for _ in range(n):
        length = rng.choice([1, 2, LANES - 1, LANES, LANES + 1, rng.randint(1, max_len), max_len])
        hi = rng.choice([3, 16, (1 << width) - 1])
        a = [rng.randint(0, hi) for _ in range(length)]
        b = [rng.randint(0, (1 << width) - 1) for _ in range(length)]
        s = [rng.randint(0, hi) for _ in range(3)]
        cmds.append(command(op, a, b=b, s=s, cond=rng.choice([c.name for c in Cond])))
    return cmds


@pytest.mark.parametrize("op", OPS)
def test_random_against_numpy_pysim(op):
    """1000 seeded random commands per operation, with random backpressure."""
    cmds = random_commands(op, 1000, seed=OPS.index(op))
    out, _ = run(SPEC, run_commands, {"commands": cmds, "stall_prob": 0.2, "seed": 7})
    for i, cmd in enumerate(cmds):
        assert out["results"][i] == reference(cmd, WIDTH), f"command {i}: {cmd}"


def test_cycle_formula():
    """A command of length L takes ceil(L/lanes) + LATENCY cycles (no stalls)."""
    lengths = [1, 7, 8, 9, 16, 17, 33, 64]
    cmds = [command(op, list(range(length)), s=(3, 5, 9)) for op in OPS for length in lengths]
    out, _ = run(SPEC, run_commands, {"commands": cmds})
    for cmd, cycles in zip(cmds, out["cycles"]):
        length = len(cmd["a"])
        assert cycles == -(-length // LANES) + VectorUnit.LATENCY, (cmd["op"], length)
        assert cycles == VectorUnit.cycles(length, LANES)


def test_three_pivots_in_one_pass():
    """COUNT evaluates three scalars in the time of one (the mapper's three pivots)."""
    a = list(range(40))
    out, _ = run(SPEC, run_commands, {"commands": [command("COUNT", a, s=(5, 20, 35))]})
    assert out["results"][0] == [5, 20, 35]
    assert out["cycles"][0] == VectorUnit.cycles(40, LANES)


#: total cycles of the mixed set below (12 commands of each operation, the valu ones since
#: 367 cycles; 221 before them), and the sum of its per-command latencies (pinned:
#: a timing change must update them on purpose)
MIXED_TOTAL, MIXED_LATENCY_SUM = 367, 565


def test_same_on_every_simulator(simulator):
    """A shared mixed set with backpressure on every simulator.

    Results against numpy; no command faster than its specified cost
    (``VectorUnit.cycles``; stalls only add); Amaranth's cycle counts pinned,
    and the Verilog simulators' equal to Amaranth's.
    """
    cmds = [c for op in OPS for c in random_commands(op, 12, seed=100 + OPS.index(op))]
    expected = [reference(c, WIDTH) for c in cmds]
    args = {"commands": cmds, "stall_prob": 0.25, "seed": 3}
    out, total = run(SPEC, run_commands, args, simulator=simulator)
    assert out["results"] == expected
    for cmd, cycles in zip(cmds, out["cycles"]):
        assert cycles >= VectorUnit.cycles(len(cmd["a"]), LANES), cmd
    if simulator == "pysim":
        assert (total, sum(out["cycles"])) == (MIXED_TOTAL, MIXED_LATENCY_SUM)
    else:
        ref, ref_total = run(SPEC, run_commands, args)
        assert out["cycles"] == ref["cycles"]
        assert total == ref_total


def test_waveform_written(tmp_path, monkeypatch):
    monkeypatch.setenv("EPFABRIC_WAVEFORM_DIR", str(tmp_path))
    run(SPEC, run_commands, {"commands": [command("COUNT", [1, 2, 3], s=(2, 3, 4))]},
        waveform="vector_unit_count")
    vcd = (tmp_path / "vector_unit_count.vcd").read_text()
    gtkw = (tmp_path / "vector_unit_count.gtkw").read_text()
    assert "o_stream__valid" in vcd or "o_stream.valid" in vcd
    assert "pos" in gtkw


@pytest.mark.parametrize("kw, exc, match", [
    ({"lanes": 0}, ValueError, r"lanes must be in \[1, 256\], not 0"),
    ({"lanes": 2.5}, TypeError, r"lanes must be an integer, not 2.5"),
    ({"width": 65}, ValueError, r"width must be in \[1, 64\], not 65"),
    ({"max_len": 0}, ValueError, r"max_len must be in"),
    ({"width": True}, TypeError, r"width must be an integer, not True"),
])
def test_bad_parameters(kw, exc, match):
    with pytest.raises(exc, match=match):
        rejected(VectorUnit, **kw)
