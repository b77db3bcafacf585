"""The ``table4`` experiment (sim/lab/experiments/table4.py): both systems' dispatch by rank count."""

import pytest

from epfabric.hw.validate import UserError
from epfabric.sim.lab.experiments import EXPERIMENTS
from epfabric.sim.lab.experiments.table4 import PAPER, TOPOLOGIES

from utils import require_simulator

TABLE4 = EXPERIMENTS["table4"]
#: test_fig9's tiny machine (the kernel sizes the same machine: its Verilator build is shared)
#: (480 B tokens: one block for both systems)
TINY = dict(preset="tiny", ranks="2", aivs=2, experts=4, topk=2, batch=4, hidden_bytes=480, cap=0,
            backend="verilator")


@pytest.fixture(scope="module")
def tiny_rows():
    require_simulator("verilator")
    return TABLE4.run(**TINY)


@pytest.mark.slow     # 36 s (a Verilator build); the kernels: tests/sw/test_dispatch.py
def test_a_point_runs_both_systems_bit_exact(tiny_rows):
    from epfabric.sim.backends.machine import backend
    from epfabric.sw.kernels import KERNELS, run_kernel
    from epfabric.sw.presets import PRESETS
    (row,) = tiny_rows
    assert row["ranks"] == "2" and row["topology"] == TOPOLOGIES[2]
    assert row["correct"] and row["cann_correct"] and row["ubep_correct"], row
    assert row["cann_blocks"] == row["ubep_blocks"] == 1
    # the same run outside the experiment: the row is its cycles, in µs at the preset's cycle
    result = run_kernel(KERNELS["dispatch"], backend("verilator"), preset="tiny",
                        topology=("superpod", 2, 1, 1), aivs=2,
                        params={"system": "ubep", "experts": 4, "topk": 2, "batch": 4,
                                "hidden_blocks": 1})
    assert row["ubep_cycles"] == result.runs[0].cycles
    ns = PRESETS["tiny"].cycle_ns
    for system in ("cann", "ubep"):
        assert row[f"{system}_us"] == pytest.approx(row[f"{system}_cycles"] * ns / 1000)
        assert row[f"{system}_gbps"] > 0
    assert row["ratio"] == pytest.approx(row["ubep_us"] / row["cann_us"])
    assert row["wall_s"] > 0
    # no paper row at 2 ranks: nothing to hold against
    holds, line = TABLE4.verdict(tiny_rows)
    assert holds is None and "no paper row" in line


def test_the_grid_is_the_papers_rank_counts():
    p = TABLE4.resolve()
    assert [pt["ranks"] for pt in TABLE4.points(p)] == ["16", "32", "64"]
    assert [pt["topology"] for pt in TABLE4.points(p)] == [
        "superpod:2,8,1", "superpod:2,8,2", "superpod:2,8,4"]
    assert [pt["ranks"] for pt in TABLE4.points(p, quick=True)] == ["16"]
    assert (p["aivs"], p["batch"], p["topk"], p["experts"], p["hidden_bytes"]) == \
        (48, 128, 8, 256, 7168)


@pytest.mark.parametrize("ranks", ["12", "16,x", ""])
def test_a_rank_count_without_a_shape_is_refused(ranks):
    with pytest.raises(UserError, match="ranks must be"):
        TABLE4.resolve(ranks=ranks)


def test_the_paper_columns_and_the_figure(tmp_path):
    rows = [{"ranks": str(r), "aivs": 48, "batch": 128, "topk": 8, "experts": 256,
             "hidden_bytes": 7168, "cann_us": 50.0, "ubep_us": 60.0, "ratio": 1.2,
             "cann_gbps": 160.0, "ubep_gbps": 130.0, "correct": True, "wall_s": 1.0}
            for r in (16, 32)]
    rows = [{**r, **TABLE4.compare(r)} for r in rows]
    assert rows[1]["paper_ubep_us"] == PAPER[32][2]
    assert rows[0]["paper_ratio"] == pytest.approx(73 / 103)
    assert rows[0]["diff_ratio"] == pytest.approx(1.2 - 73 / 103)
    TABLE4.plot(rows, tmp_path / "t4.png")
    assert (tmp_path / "t4.png").stat().st_size > 1000
    assert "UBEP/CANN" in TABLE4.format(rows)
