"""``epfabric demo`` (sim/lab/experiments/quaternary.py): the quaternary search on the simulated vector unit."""

import re

import pytest

from epfabric.sim.cli import main
from epfabric.sim.lab.experiments import EXPERIMENTS


@pytest.mark.parametrize("argv, entries", [
    (["--tokens", "16", "--experts", "64"], None),
    # 5 x top-3 = 15 entries on 4 lanes: the last beat of every VectorCount is partial
    (["--tokens", "5", "--topk", "3", "--experts", "16", "--lanes", "4", "--seed", "3"], 15),
])
def test_demo_matches_numpy(argv, entries, capsys):
    assert main(["demo", *argv, "--targets", "4"]) == 0
    out = capsys.readouterr().out
    assert "all lookups match numpy" in out
    assert out.count(" ok") == 4
    if entries:
        assert f"E has {entries} entries, 4 lanes" in out


def test_experiment_rows_match_numpy():
    rows = EXPERIMENTS["quaternary"].run(tokens=4, topk=2, experts=16, lanes=4, targets=3, seed=1)
    assert len(rows) == 3 and all(r["match"] for r in rows)
    assert all((r["expert"], r["offset"]) == (r["numpy_expert"], r["numpy_offset"]) for r in rows)
    assert rows[0]["count_cycles"] == -(-8 // 4) + 1    # ceil(entries / lanes) + 1
    # a partial last beat (7 entries on 4 lanes): every target, and each count from the unit
    rows = EXPERIMENTS["quaternary"].run(tokens=7, topk=1, experts=8, lanes=4, targets=7, seed=2)
    assert len(rows) == 7 and all(r["match"] for r in rows)
    assert all((r["expert"], r["offset"]) == (r["numpy_expert"], r["numpy_offset"]) for r in rows)
    assert rows[0]["count_cycles"] == -(-7 // 4) + 1


@pytest.mark.parametrize("argv, message", [
    (["--topk", "9", "--experts", "8"], r"topk \(9\) must not exceed (--)?experts \(8\)"),
    (["--tokens", "1", "--topk", "2", "--experts", "8", "--targets", "5"],
     r"targets \(5\) must not exceed tokens \* topk \(2\)"),
    (["--tokens", "0"], r"tokens must be >= 1, not 0"),
])
def test_demo_rejects_bad_input(argv, message, capsys):
    """One line, status 2, before anything is simulated (nothing printed on stdout)."""
    assert main(["demo", *argv]) == 2
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert err.startswith("epfabric demo: error: ") and "\n" not in err
    assert re.search(message, err)
    assert captured.out == ""
