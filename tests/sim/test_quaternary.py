"""``epfabric demo`` (sim/experiments/quaternary.py): the quaternary search on the simulated vector unit."""

import re

import pytest

from epfabric.sim.cli import main
from epfabric.sim.experiments import EXPERIMENTS


def test_demo_matches_numpy(capsys):
    assert main(["demo", "--tokens", "16", "--experts", "64", "--targets", "4"]) == 0
    out = capsys.readouterr().out
    assert "all lookups match numpy" in out
    assert out.count(" ok") == 4


def test_experiment_rows_match_numpy():
    rows = EXPERIMENTS["quaternary"].run(tokens=4, topk=2, experts=16, lanes=4, targets=3, seed=1)
    assert len(rows) == 3 and all(r["match"] for r in rows)
    assert all((r["expert"], r["offset"]) == (r["numpy_expert"], r["numpy_offset"]) for r in rows)
    assert rows[0]["count_cycles"] == -(-8 // 4) + 1    # ceil(entries / lanes) + 1


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
