"""The ``inc-ep`` experiment's grid (sim/lab/experiments/inc_ep.py); its verdict is in test_verdicts."""

import pytest

from epfabric.hw.validate import UserError
from epfabric.sim.lab.experiments.inc_ep import EXPERIMENT, SHAPES


def test_32_dies_run_on_the_native_backend_only():
    params = EXPERIMENT.resolve(ranks="32", blocks="1,14", seeds=2, backend="native")
    points = EXPERIMENT.points(params)
    assert [(p["topology"], p["hidden_blocks"], p["seed"], p["max_blocks"]) for p in points] == \
        [(SHAPES[32], b, s, 14) for b in (1, 14) for s in (0, 1)]
    assert {p["experts"] for p in points} == {64} and {p["topk"] for p in points} == {8}
    for backend in ("verilator", "icarus"):
        with pytest.raises(UserError, match=rf"^ranks=32 needs backend native, not '{backend}': "
                                            r"the flat model of 32 dies"):
            EXPERIMENT.points(EXPERIMENT.resolve(ranks="16,32", backend=backend))
    assert len(EXPERIMENT.points(EXPERIMENT.resolve(ranks="16", backend="verilator"))) == 15


def test_64_dies_run_on_four_boards_on_native_and_other_counts_are_refused():
    points = EXPERIMENT.points(EXPERIMENT.resolve(ranks="64", blocks="1", seeds=1,
                                                  backend="native"))
    assert [(p["topology"], p["experts"], p["topk"]) for p in points] == \
        [("superpod:2,8,4", 128, 8)]
    with pytest.raises(UserError, match=r"^ranks=64 needs backend native"):
        EXPERIMENT.points(EXPERIMENT.resolve(ranks="64", backend="verilator"))
    with pytest.raises(UserError, match=r"^ranks must be of 4, 8, 16, 32, 64, not 128$"):
        EXPERIMENT.points(EXPERIMENT.resolve(ranks="128", backend="native"))
