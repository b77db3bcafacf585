"""``epfabric soak`` (sim/verify/soak.py, sim/tb/soak.py): the scoreboarded random-traffic fabric soak.

CI runs a small fabric on Amaranth's simulator, checks that the hardware
scoreboard catches a duplicated block (negative control) and that the CLI
reports and exits as documented; the 10^5-block soaks of the 32-rank cm384
superpod on Verilator are ``slow``.
"""

import json

import pytest

from epfabric.sim.cli import main
from epfabric.sim.verify.soak import kernel_soak, ok, run_soak
from epfabric.sw.kernels import MachineRun, RunResult

from utils import require_simulator

SMALL = (2, 2, 1)       # 4 ranks


@pytest.mark.parametrize("pattern", ["uniform", "hotspot"])
def test_small_soak_on_pysim(pattern):
    row = run_soak(blocks_per_rank=25, pattern=pattern, seed=7, backend="pysim", shape=SMALL)
    assert row["blocks"] == row["sent"] == row["received"] == 100
    assert row["lost"] == row["misrouted"] == row["out_of_order"] == 0 and ok(row)
    assert row["cycles"] > 100 / 4          # the stalls and the offer rate cost cycles


def test_scoreboard_catches_a_duplicate():
    row = run_soak(blocks_per_rank=10, pattern="uniform", seed=3, backend="pysim", shape=SMALL,
                   duplicate_first=True)
    assert row["out_of_order"] >= 1 and not ok(row)


def test_cli(tmp_path, capsys):
    out = tmp_path / "soak.json"
    assert main(["soak", "--backend", "pysim", "--shape", "2,2,1", "--blocks", "40",
                 "--pattern", "hotspot", "--seed", "5", "--json", str(out)]) == 0
    rows = json.loads(out.read_text())["rows"]
    assert len(rows) == 1 and rows[0]["ok"] and rows[0]["received"] == 40
    assert "hotspot  seed 5: 40 / 40 blocks moved" in capsys.readouterr().out
    assert main(["soak", "--offer", "1.5"]) == 2
    assert main(["soak", "--shape", "2,x,1"]) == 2


def test_the_shape_is_a_topology_like_every_other_command(monkeypatch):
    """--topology superpod:2,2,1 (as run and reproduce spell it), or the old --shape 2,2,1."""
    import epfabric.sim.cli.soak as soak
    from epfabric.sim.cli import make_parser
    seen = []

    def record(**kw):
        seen.append(kw["shape"])
        raise KeyError("stop here")
    monkeypatch.setattr(soak, "run_soak", record)
    for argv in (["--topology", "superpod:2,2,1"], ["--shape", "2,2,1"]):
        with pytest.raises(KeyError, match="stop here"):
            soak.prepare(make_parser().parse_args(["soak", "--backend", "pysim", *argv]))()
    assert seen == [(2, 2, 1), (2, 2, 1)]


@pytest.mark.parametrize("argv, message", [
    (["--seed", "-1"], "--seed must be in [0, 4294967295], not -1"),
    (["--kernel", "alltoall", "--seed", "1", "--seed", "2"],
     "--kernel takes one --seed (it draws every run's seed), not 2: [1, 2]"),
    (["--kernel", "alltoall", "--runs", "0"], "--runs must be >= 1, not 0"),
    (["--json", "."], "--json '.' is a folder, not a file"),
    (["--topology", "superpod:2,x,1"], "--topology must be superpod:a,b,c (or a,b,c), not "),
    (["--inc", "--kernel", "alltoall"], "--inc and --kernel are two different soaks: give one"),
    (["--adversarial"], "--adversarial is a pattern of the --inc soak: give --inc too"),
    (["--kernel", "combine", "--param", "system=mpi"], "system must be one of"),
    (["--kernel", "combine", "--param", "seed=3"], "--param seed=...: the soak draws every "),
    (["--kernel", "combine", "--preset", "nosuch"], "nosuch"),
])
def test_bad_input_one_line_before_any_simulation(argv, message, capsys, no_simulation):
    assert main(["soak", "--backend", "pysim", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("epfabric soak: error: ") and "\n" not in err and message in err


def test_kernel_soak_checks_every_run():
    rows = kernel_soak("alltoall", runs=2, seed=4, backend="pysim",
                       shapes=((("superpod", 2, 1, 1), 1),))
    assert len(rows) == 2 and all(r["correct"] for r in rows)
    assert rows[0]["seed"] != rows[1]["seed"]
    assert main(["soak", "--kernel", "no_such_kernel"]) == 2


def test_an_inc_kernel_soak_draws_shapes_it_can_run(monkeypatch):
    """``--param system=ubep-inc`` draws from the shapes with a T- and a C-AIV and tier-2 links
    and passes its parameters to every run (the runs themselves: tests/sw/test_combine.py)."""
    from epfabric.sim.verify.soak import INC_KERNEL_SHAPES
    assert all(aivs >= 2 for _, aivs in INC_KERNEL_SHAPES)
    assert any(topo[3] > 1 for topo, _ in INC_KERNEL_SHAPES)          # two boards: tier-2
    calls = []

    def fake(kernel, be, *, preset, topology, aivs, params):
        calls.append((preset, (topology, aivs), params))
        return RunResult(kernel, preset, "pysim", params,
                         [MachineRun(None, 1, 1.0, {"correct": True, "problems": []})])
    monkeypatch.setattr("epfabric.sw.kernels.run_kernel", fake)
    rows = kernel_soak("combine", runs=12, seed=0, backend="pysim", preset="cm384",
                       params={"system": "ubep-inc"})
    assert len(rows) == 12 and all(r["correct"] for r in rows)
    assert {shape for _, shape, _ in calls} <= set(INC_KERNEL_SHAPES)
    assert len({shape for _, shape, _ in calls}) > 1
    assert all(p["system"] == "ubep-inc" and pr == "cm384" for pr, _, p in calls)
    assert len({p["seed"] for _, _, p in calls}) == 12


@pytest.mark.slow
@pytest.mark.verilator
@pytest.mark.parametrize("pattern", ["uniform", "hotspot"])
def test_cm384_soak_100k_blocks(pattern):
    require_simulator("verilator")
    row = run_soak(blocks_per_rank=3125, pattern=pattern, seed=1, backend="verilator")
    assert row["ranks"] == 32 and row["blocks"] == 100_000
    assert ok(row), row


def test_inc_soak_delivers_everything_once(tmp_path, capsys):
    """``soak --inc``: multicasts, unicasts and reductions on 8 dies with stalls, all checked."""
    out = tmp_path / "inc.json"
    assert main(["soak", "--inc", "--backend", "pysim", "--seed", "3", "--blocks", "12",
                 "--json", str(out)]) == 0
    (row,) = json.loads(out.read_text())["rows"]
    assert row["ok"] and row["problems"] == [] and row["deliveries"] == row["expected"] > 100
    assert row["multicasts"] == 8 * 12 and row["t2_blocks"] > 0
    assert "inc seed 3:" in capsys.readouterr().out


def test_inc_soak_names_a_lost_delivery(monkeypatch):
    """The soak's checker is not vacuous: a fabric that drops one multicast copy fails it."""
    from epfabric.sim.tb import inc_traffic
    from epfabric.sim.verify.soak import inc_soak
    real = inc_traffic.traffic_intent

    async def lossy(bench, **kw):
        res = await real(bench, **kw)
        first = next(p for p, g in enumerate(res["got"][0]) if any(f["mcast"] for f in g))
        flits = res["got"][0][first]
        flits.remove(next(f for f in flits if f["mcast"]))
        return res
    monkeypatch.setattr(inc_traffic, "traffic_intent", lossy)
    row = inc_soak(seed=1, multicasts=4, backend="pysim")
    assert not row["ok"]
    assert any("check_multicast" in p for p in row["problems"])
    assert any("deliveries" in p and "expected" in p for p in row["problems"])


@pytest.mark.slow
def test_adversarial_inc_soak_drains_the_two_board_plane_ring():
    """The plane ring of docs/concepts/inc-deadlock.md at 16 dies (tiny timing, window 64,
    Amaranth's simulator): while tier-1 units summed groups leaving their board, the two
    tier-1 units waited on each other through tier-2 plane 0 and the watchdog ended the run
    at 14 of 128 results; with the tier-1 units summing only their own board's groups,
    every result arrives once with its exact sum."""
    from epfabric.sim.verify.soak import inc_soak
    row = inc_soak(shape=(1, 8, 2), seed=1, multicasts=0, groups=64, offer=0.99, stall=0.0,
                   backend="pysim", preset="tiny", adversarial=True)
    assert row["window"] == 64 and row["groups"] == 128
    assert row["ok"] and row["stuck"] is None, row["problems"]
    assert row["deliveries"] == row["expected"] == 128
    # every contribution from the other board crossed tier-2 unsummed: 2 a group
    assert row["t2_blocks"] == 2 * 128


@pytest.mark.slow
@pytest.mark.verilator
def test_adversarial_inc_soak_64_dies_100k():
    """The plane ring at 64 dies (``superpod:2,8,4``: two pairs of boards, tiny timing) on
    all 16 tier-2 planes: 512 groups per destination, 98,304 contributions, receivers stalling
    30 % of cycles: nothing lost, duplicated or stuck (docs/concepts/inc-deadlock.md). (Two
    boards of 32 dies need a 64-port tier-1 switch, whose Verilog conversion runs out of
    Yosys's WebAssembly memory.)"""
    require_simulator("verilator")
    from epfabric.sim.verify.soak import inc_soak
    row = inc_soak(shape=(2, 8, 4), seed=1, multicasts=0, groups=512, offer=0.99, stall=0.3,
                   backend="verilator", preset="tiny", adversarial=True, planes=16)
    assert row["ranks"] == 64 and row["contributions"] == 98_304
    assert row["ok"], row["problems"]


def test_the_plane_ring_pattern():
    """Every group of ``plane_ring_queues`` has a pair on the other board and one contributor
    of the destination's board in another NPU, all on plane 0; multicasts keep serial order."""
    import random
    from epfabric.sim.tb.inc_traffic import plane_ring_queues
    shape = (2, 4, 2)                                  # 8 dies a board, NPUs of 2
    queues, want, sent = plane_ring_queues(random.Random(1), shape, 3, lanes=2, multicasts=2)
    assert sorted(want) == [(d, b) for d in (0, 8) for b in range(3)]
    for (dst, _b), (mask, n, _h, _sums) in want.items():
        dies = [r for r in range(16) if mask >> r & 1]
        home = [r for r in dies if r // 8 == dst // 8]
        assert n == 3 and len(home) == 1 and home[0] // 2 != dst // 2
    assert sum(map(len, queues)) == 6 * 3 + 2 * 3 * 2 and len(sent) == 12
    for q in queues:
        serials = [f["data"] for f in q if f["mcast"]]
        assert serials == sorted(serials)
    with pytest.raises(ValueError, match="two boards"):
        plane_ring_queues(random.Random(1), (2, 2, 1), 1, lanes=2)


@pytest.mark.slow
def test_adversarial_inc_soak_checks_its_pattern():
    """The plane ring on the 8-die ``--inc`` shape with a few groups and multicasts on plane 0
    drains and passes every check (the 16-die case that does not: the slow test above)."""
    from epfabric.sim.verify.soak import inc_soak
    row = inc_soak(shape=(2, 2, 2), seed=2, multicasts=1, groups=2, backend="pysim",
                   preset="tiny", adversarial=True)
    assert row["ok"] and row["stuck"] is None, row["problems"]
    assert row["groups"] == 4 and row["contributions"] == 12 and row["multicasts"] == 4
    assert row["deliveries"] == row["expected"] == 4 + 4 * 4
