"""The held-out validation's verdicts, statistics, scatter and rounds, on synthetic rows.

No simulation runs here: the rows are what each item's experiment writes, built by
``tests/utils.heldout_rows`` at the paper's numbers (or inside their tolerances), then
changed one way at a time.
"""

import pytest

from epfabric.sim.lab.experiments import EXPERIMENTS
from epfabric.sim.lab.experiments.agreement import statistics
from epfabric.sim.lab.experiments.heldout import ITEMS, NUMBERS, Number, judge_seed, spearman
from epfabric.sim.lab.experiments.rounds import PREREGISTRATION, read_rounds, rounds_line
from utils import heldout_item_rows, heldout_rows

VALIDATION = EXPERIMENTS["validation"]


def test_rows_at_the_papers_numbers_hold_every_item_and_meet_the_goal():
    s = VALIDATION.summary(heldout_rows())
    assert all(i["holds"] and i["holding"] == 3 for i in s["items"].values())
    assert not any(i["trend_only"] for i in s["items"].values())
    assert s["goal"]["met"] is True and s["stats"]["ran"] == 31
    holds, line = VALIDATION.verdict(heldout_rows())
    assert holds is True and line.startswith("9 of 9 items hold")


def test_a_trend_without_its_numbers_is_reported_trend_only_and_not_counted():
    """fig13 rising 29 -> 34 % but 15 points low: the trend holds, the magnitude does not."""
    rows = heldout_rows(fig13={"improvement": (0.14, 0.16, 0.19)})
    item = VALIDATION.summary(rows)["items"]["fig13"]
    assert (item["magnitude"], item["trend"], item["trend_only"]) == (False, True, True)
    assert item["holds"] is False and item["holding"] == 0
    holds, line = VALIDATION.verdict(rows)
    assert line.startswith("8 of 9 items hold") and "trend only (not counted): fig13" in line
    table, _ = VALIDATION.table(rows)
    fig13 = next(r for r in table if r["item"] == "fig13")
    assert (fig13["magnitude"], fig13["trend"], fig13["trend only"], fig13["holds"]) == (
        "no", "yes", "yes", "no")


def test_numbers_inside_with_the_trend_broken_do_not_hold_and_are_not_trend_only():
    """fig13 at 34 / 31 / 29 %: each within ±10 points of the paper's, falling with k."""
    rows = heldout_rows(fig13={"improvement": (0.34, 0.31, 0.29)})
    item = VALIDATION.summary(rows)["items"]["fig13"]
    assert (item["magnitude"], item["trend"], item["trend_only"], item["holds"]) == (
        True, False, False, False)


def test_an_item_holds_on_two_seeds_of_three_not_on_one():
    bad = {"ubep": (95.0, 110.0, 130.0)}                 # 30 % slow at every rank count
    two = [r for r in heldout_rows(seeds=(0, 1)) if r["item"] == "table4"] + \
        [r for r in heldout_rows(seeds=(2,), table4=bad) if r["item"] == "table4"]
    one = [r for r in heldout_rows(seeds=(0,)) if r["item"] == "table4"] + \
        [r for r in heldout_rows(seeds=(1, 2), table4=bad) if r["item"] == "table4"]
    assert VALIDATION.summary(two)["items"]["table4"]["holds"] is True
    assert VALIDATION.summary(one)["items"]["table4"]["holds"] is False
    # one seed run (a quick run) cannot make an item hold: at least two must; one seed that
    # holds leaves it undecided ("not run"), as does one that fails (two seeds could hold)
    alone = [r for r in heldout_rows(seeds=(0,)) if r["item"] == "table4"]
    assert VALIDATION.summary(alone)["items"]["table4"]["holding"] == 1
    assert VALIDATION.summary(alone)["items"]["table4"]["holds"] is None
    alone = [r for r in heldout_rows(seeds=(0,), table4=bad) if r["item"] == "table4"]
    assert VALIDATION.summary(alone)["items"]["table4"]["holds"] is None
    # the goal's Table 4 part asks for the ratio on every seed: one seed off fails it
    goal = VALIDATION.summary(heldout_rows(seeds=(0, 1)) + [
        r for r in heldout_rows(seeds=(2,), table4=bad)])["goal"]
    assert goal["table4_ratio"] is False and goal["met"] is False


def test_each_number_is_judged_at_its_own_tolerance():
    table4 = heldout_item_rows("table4", ubep=(73.0 * 1.19, 86.0, 101.0),
                               cann=(103.0 * 1.19, 120.0, 139.0))
    assert judge_seed("table4", table4)["magnitude"] is True          # 19 % and ratio kept
    table4 = heldout_item_rows("table4", ubep=(73.0 * 1.21, 86.0, 101.0),
                               cann=(103.0 * 1.21, 120.0, 139.0))
    assert judge_seed("table4", table4)["magnitude"] is False         # 21 %
    # the ratio alone: every µs inside ±20 %, UBEP/CANN 0.86 at 16 ranks (0.709 ± 0.04)
    table4 = heldout_item_rows("table4", cann=(85.0, 120.0, 139.0))
    assert judge_seed("table4", table4)["magnitude"] is False
    assert judge_seed("fig14", heldout_item_rows("fig14", best=(10, 15, 11, 2, 1)))[
        "magnitude"] is True                                          # 3 off at BS 8
    assert judge_seed("fig14", heldout_item_rows("fig14", best=(9, 15, 11, 2, 1)))[
        "magnitude"] is False                                         # 4 off


def test_a_grid_without_the_papers_points_is_not_run_not_guessed():
    """fig14 swept over C 1-4 only (the reduced experiment's grid): its best C is not the
    paper's argmin over 1-16, so no number, no trend, no verdict."""
    rows = [r for r in heldout_item_rows("fig14") if r["cumsum_aivs"] <= 4]
    seed = judge_seed("fig14", rows)
    assert set(seed["values"].values()) == {None}
    assert (seed["magnitude"], seed["trend"], seed["holds"]) == (None, None, False)
    assert "not run" in seed["words"]
    every = heldout_rows(fig14=None) + [{"item": "fig14", "seed": s, **r}
                                        for s in (0, 1, 2) for r in rows]
    s = VALIDATION.summary(every)
    assert s["items"]["fig14"]["magnitude"] is None and s["stats"]["ran"] == 26
    assert s["goal"]["mape"] is None and s["goal"]["met"] is None
    # fig10 at the experiment's reduced 8/16/32 ranks: the 64-rank numbers are not run
    fig10 = [dict(r, ranks={16: 8, 32: 16, 64: 32}[r["ranks"]])
             for r in heldout_item_rows("fig10")]
    assert set(judge_seed("fig10", fig10)["values"].values()) == {None}


def test_there_are_31_numbers_as_the_preregistration_counts_them():
    assert len(NUMBERS) == 31
    per_item = {name: len(item.numbers) for name, item in ITEMS.items()}
    assert per_item == {"table4": 4, "fig3b": 3, "fig7a": 2, "fig7c": 4, "fig8": 2, "fig9": 3,
                        "fig10": 5, "fig13": 3, "fig14": 5}
    assert all("preregistration.md §6, row " + name in item.source
               for name, item in ITEMS.items())


def test_mape_and_the_log_correlation_on_a_hand_example():
    """paper 1, 10, 100 against model 2, 10, 100: MAPE (100 + 0 + 0) / 3 %; r of
    log10 (0, 1, 2) and (0.30103, 1, 2) = 1.69897 / (√2 · 1.20763) = 0.99480."""
    entries = [("x", Number(str(p), p, "us", 1.0, None), m)
               for p, m in ((1.0, 2.0), (10.0, 10.0), (100.0, 100.0))]
    s = statistics(entries)
    assert s["mape"] == pytest.approx(100 / 3)
    assert s["r"] == pytest.approx(0.99480, abs=1e-5)
    assert s["rho"] == pytest.approx(1.0) and s["marked"] == []
    # a model value <= 0 enters the log correlation at 1 % of the paper's, and is marked
    entries[0] = ("x", entries[0][1], -1.0)
    s = statistics(entries)
    assert s["marked"] == ["x 1.0"] and s["mape"] == pytest.approx(200 / 3)
    # log10 (0, 1, 2) against (-2, 1, 2): r = 4 / (√2 · √(26/3)) = 0.96077
    assert s["r"] == pytest.approx(0.96077, abs=1e-5)
    # a number that did not run enters nothing
    entries[1] = ("x", entries[1][1], None)
    assert statistics(entries)["ran"] == 2


def test_spearman_ranks_ties_at_their_average():
    assert spearman([8, 16, 32, 64, 128], [13, 15, 11, 2, 1]) == pytest.approx(-0.9)
    assert spearman([1, 2, 3, 4], [1, 1, 2, 2]) == pytest.approx(0.8944, abs=1e-4)
    assert spearman([1, 2, 3], [5, 5, 5]) is None


def test_the_scatter_is_written(tmp_path):
    VALIDATION.plot(heldout_rows(fig13={"improvement": (0.14, 0.16, 0.19)}),
                    tmp_path / "validation.png")
    assert (tmp_path / "validation.png").stat().st_size > 20_000


def test_the_rounds_are_read_from_the_preregistration():
    rounds = read_rounds(PREREGISTRATION.read_text())
    assert [r["round"] for r in rounds][:2] == ["0", "1"]
    line = rounds_line()
    assert line.startswith(f"{len(rounds)} rounds (preregistration §12): 0 (before this page)")
    text = ("# x\n\n## 12. Rounds\n\n| round | committed | what it set or changed | why |\n"
            "|---|---|---|---|\n| 0 | a | b | c |\n| 1 | d | e | f |\n| 2 | g | h | i |\n"
            "\n## 13. Next\n| 9 | no | no | no |\n")
    assert [r["changed"] for r in read_rounds(text)] == ["b", "e", "h"]
    with pytest.raises(ValueError, match="no section '## 12. Rounds'"):
        read_rounds("# nothing here\n")
    assert rounds_line(PREREGISTRATION.parent / "missing.md").endswith(
        "is not in this installation")


def test_fig10_and_fig14_run_the_papers_grid_for_the_validation():
    """fig14: C 1-16 at 64 ranks × 48 AIVs, E 64, every BS; quick keeps the machine and drops
    points. fig10: 16/32/64 ranks × 48 AIVs, every g; quick keeps the ranks."""
    params = VALIDATION.resolve(items="fig14,fig10", seeds="0")
    import json
    points = [dict(p, point=json.loads(p["point"])) for p in VALIDATION.points(params)]
    fig14 = [p["point"] for p in points if p["item"] == "fig14"]
    assert {(p["ranks"], p["aivs"], p["experts"], p["topology"]) for p in fig14} == {
        (64, 48, 64, "superpod:2,8,4")}
    assert {(p["batch"], p["cumsum_aivs"]) for p in fig14} == {
        (b, c) for b in (8, 16, 32, 64, 128) for c in range(1, 17)}
    fig10 = [p["point"] for p in points if p["item"] == "fig10"]
    assert {(p["ranks"], p["bytes"]) for p in fig10} == {
        (n, g) for n in (16, 32, 64) for g in (16, 64, 256, 1024, 4096, 10240)}
    assert {p["aivs"] for p in fig10} == {48}
    quick = [json.loads(p["point"]) for p in VALIDATION.points(params, quick=True)]
    assert {(p["ranks"], p["aivs"]) for p in quick} == {(64, 48), (16, 48), (32, 48)}
