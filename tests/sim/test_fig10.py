"""The ``fig10`` experiment (sim/lab/experiments/fig10.py): Data-as-Flag vs stop-and-wait latency."""

import pytest

from epfabric.sim.lab.experiments import EXPERIMENTS
from epfabric.sim.lab.experiments.fig10 import DAF, PAPER, QUICK_SIZES, TOPOLOGIES, machine_config
from epfabric.sw.kernels.daf import PROTOCOLS

from utils import require_simulator

FIG10 = EXPERIMENTS["fig10"]
ONE_HOP = 929           # cm384 one-hop latency, cycles (= ns)


@pytest.fixture(scope="module")
def tiny_row():
    """4 dies over two NPUs (one hop apart) x 1 AIV, 16 B, on Amaranth's simulator; the machine
    sized for 16 B only (the cycle counts do not depend on the sizing)."""
    point = {**FIG10.resolve(backend="pysim", aivs=1), "ranks": 4, "bytes": 16, "max_bytes": 16}
    return FIG10.rows_of(point, FIG10.measure(point))


def test_smoke_row_has_the_latencies_of_the_protocols(tiny_row):
    row, = tiny_row
    assert row["correct"] and row["blocks_raw"] == row["blocks_tff"] == 1
    # SW: the data's trip, the ack's trip back (fence), the flag's trip; DaF: the data's trip
    assert 3 * ONE_HOP < row["sw_ns"] < 4 * ONE_HOP, row
    for p in DAF:
        assert ONE_HOP < row[f"{p}_ns"] < 2 * ONE_HOP, (p, row)
        assert row[f"{p}_cut"] == pytest.approx(1 - row[f"{p}_ns"] / row["sw_ns"])
    assert row["best"] == min(DAF, key=lambda p: row[f"{p}_ns"])
    assert row["gain_us"] == pytest.approx((row["sw_ns"] - row[f"{row['best']}_ns"]) / 1000)
    assert row["sp_rearm_ns"] > 0
    assert (row["paper_cut_low"], row["paper_cut_high"]) == (PAPER["cut_low"], PAPER["cut_high"])
    assert row["paper_gain_us_low"] == PAPER["gain_small_us_low"]          # 16 B is "small"


def test_verdict_and_figure(tiny_row, tmp_path):
    _, line = FIG10.verdict(tiny_row)
    assert "every DaF faster than SW: yes" in line and "4 ranks: -" in line
    # the paper's numbers and shape (cut 50 %, 4 us saved at 16 B; every DaF faster than SW,
    # DC the worst DaF, SP the best) hold; the same ordering at a 40 % cut saving 0.4 us does not
    paper = [dict(tiny_row[0], sw_ns=8000, tff_ns=4500, dc_ns=5000, sp_ns=4000, worst_daf="dc")]
    assert FIG10.verdict(paper)[0] is True
    assert FIG10.verdict([dict(paper[0], worst_daf="tff")])[0] is False
    small = [dict(tiny_row[0], sw_ns=1000, tff_ns=700, dc_ns=800, sp_ns=600, worst_daf="dc")]
    holds, line = FIG10.verdict(small)
    assert holds is False and "tolerance ±0.5 us: OUTSIDE" in line
    # a row where stop-and-wait wins does not hold, and says so
    slow = [dict(tiny_row[0], tff_ns=tiny_row[0]["sw_ns"] + 1)]
    holds, line = FIG10.verdict(slow)
    assert holds is False and "every DaF faster than SW: NO" in line
    FIG10.plot(tiny_row, tmp_path / "fig10.png")
    assert (tmp_path / "fig10.png").stat().st_size > 10_000


def test_one_machine_per_rank_count():
    """Every point of a rank count runs on one configuration (one Verilator build)."""
    params = FIG10.resolve()
    points = FIG10.points(params)
    assert {(p["ranks"], p["bytes"]) for p in points} == {
        (r, g) for r in (8, 16, 32) for g in (16, 64, 256, 1024, 4096, 10240)}
    quick = FIG10.points(params, quick=True)
    assert {p["ranks"] for p in quick} == {8} and [p["bytes"] for p in quick] == list(QUICK_SIZES)
    cfg = machine_config("cm384", 8, 4)
    assert cfg.topology == ("superpod", *TOPOLOGIES[8]) and cfg.ranks == 8
    assert len(PROTOCOLS) == 4


@pytest.mark.parametrize("given, message", [
    ({"backend": "spice"}, "backend must be one of"),
    ({"aivs": 0}, r"aivs must be >= 1, not 0"),
    ({"preset": "tiny"}, r"preset must be one of cm384, cm384-ascend, cm384-fit, not 'tiny'"),
    ({"opt": "-O3"}, r"opt must be one of -O0, -O1, not '-O3'"),
])
def test_bad_parameters_are_named(given, message):
    with pytest.raises(ValueError, match=message):
        FIG10.resolve(**given)


def test_unknown_rank_count_is_refused():
    with pytest.raises(ValueError, match="ranks must be one of 4, 8, 16, 32, 64, not 12"):
        machine_config("cm384", 12, 4)


@pytest.mark.slow
def test_the_quick_grid_keeps_the_papers_direction_and_ordering():
    """8 dies, g = 16 B .. 10 KB: every Data-as-Flag protocol beats stop-and-wait by more than a
    one-hop trip, DC is the slowest of them at 16 B, SP the fastest or within 5 %. (The verdict
    also compares the cut and the saving with the paper's; this test does not pin that part.)"""
    require_simulator("verilator")
    params = FIG10.resolve()
    rows = []
    for point in FIG10.points(params, quick=True):
        rows += FIG10.rows_of(point, FIG10.measure(point))
    holds, line = FIG10.verdict(rows)
    # the direction and the ordering hold; the cut (59-65 %) and the saving (1.9 us at every g)
    # were outside the paper's 31.0-57.1 % and 3.7-4.6 / ~1 us (docs/results.md): not pinned here
    assert "every DaF faster than SW: yes" in line and "16 B / 8 ranks: dc" in line, line
    for r in rows:
        assert all(r["sw_ns"] - r[f"{p}_ns"] > ONE_HOP for p in DAF), r
    small = min(rows, key=lambda r: r["bytes"])
    assert small["worst_daf"] == "dc"
    big = max(rows, key=lambda r: r["bytes"])
    assert big["dc_ns"] > big["sp_ns"] and big["blocks_raw"] == 20 and big["blocks_tff"] == 22
