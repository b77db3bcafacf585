"""``epfabric demo`` (sim/demo.py): the quaternary search on the simulated vector unit."""

from epfabric.sim.cli import main


def test_demo_matches_numpy(capsys):
    assert main(["demo", "--tokens", "16", "--experts", "64", "--targets", "4"]) == 0
    out = capsys.readouterr().out
    assert "all lookups match numpy" in out
    assert out.count(" ok") == 4


def test_demo_rejects_bad_input(capsys):
    assert main(["demo", "--topk", "9", "--experts", "8"]) == 2
    assert "--topk (9) must not exceed --experts (8)" in capsys.readouterr().err
