"""The shared CANN-vs-UBEP dispatch runs of the UBEP experiments (sim/lab/experiments/ubep_runs.py)."""

import pytest

from epfabric.hw.validate import UserError
from epfabric.sim.backends.machine import backend
from epfabric.sim.lab.experiments import EXPERIMENTS
from epfabric.sim.lab.experiments.ubep_runs import (ENVELOPE, cap_for, compare_systems, config_of,
                                                    grid, measure_dispatch, shape_of)
from epfabric.sw.kernels import run_kernel
from epfabric.sw.kernels.compare import STAGES, phase_stack
from utils import ENVELOPE_TINY, require_simulator   # one machine (build) for every run below

UBEP_FIGURES = ("fig3b", "fig7a", "fig7b", "fig7c", "fig8", "fig13", "fig14")
#: the native backend (Verilator models of the die, links and switches, stepped from C++):
#: the same cycles as the flat model (cross-simulator tests), a cheaper build
TINY = {"preset": "tiny", "backend": "native", "aivs": 4}
CELL = {"ranks": 2, "topology": "superpod:2,1,1", "experts": 8, "batch": 8, "topk": 2,
        "hidden_blocks": 1, "seed": 3}


def tiny_grid(cells, **kw):
    """Points on the tiny preset's two dies of 4 AIVs, all on one machine (native)."""
    require_simulator("native")
    points = grid(cells, **{**TINY, **kw}, envelope=ENVELOPE_TINY)
    assert all({k: p[k] for k in ENVELOPE_TINY} == ENVELOPE_TINY for p in points)
    return points


@pytest.mark.parametrize("name", UBEP_FIGURES)
def test_a_quick_grid_builds_one_machine_per_shape(name):
    e = EXPERIMENTS[name]
    points = e.points(e.resolve(), quick=True)
    configs = {}
    for p in points:
        configs.setdefault(p["topology"], set()).add(config_of(p))
    assert all(len(c) == 1 for c in configs.values()), configs
    # every quick grid of these figures runs on the 8-die machine (fig7b adds the 4-die one)
    assert set(configs) <= {shape_of(8), shape_of(4)}


def test_the_envelope_holds_what_the_kernel_would_size_for_a_quick_grid():
    from epfabric.sw.kernels import KERNELS
    from epfabric.sw.config import parse_topology
    e = EXPERIMENTS["fig7a"]
    for p in e.points(e.resolve(), quick=True):
        params = {k: p[k] for k in ("batch", "topk", "experts", "hidden_blocks", "cap", "seed")}
        want = KERNELS["dispatch"].configs("cm384", parse_topology(p["topology"]), p["aivs"],
                                           params)[0]
        for field in ENVELOPE:
            assert getattr(want, field) <= p[field], (field, p["batch"])


@pytest.mark.slow
def test_the_envelope_changes_no_cycle():
    """A machine sized by the kernel and one sized by the envelope run the same cycles and MARKs.

    Slow: a second Verilator build only for this comparison (96 s of `make test` on CI's
    2 cores, which the INC-MoE layer's tests needed)."""
    point = tiny_grid([CELL])[0]
    for system in ("cann", "ubep"):
        a = measure_dispatch(point, system)
        result = run_kernel("dispatch", backend("native"), preset="tiny",
                            topology=("superpod", 2, 1, 1), aivs=4,
                            params={**{k: CELL[k] for k in ("experts", "batch", "topk",
                                                            "hidden_blocks", "seed")},
                                    "cap": point["cap"], "system": system})
        run = result.runs[0]
        assert run.config.imem_depth < point["imem_depth"]     # a different machine
        assert run.correct
        assert (run.cycles, run.check["phases"]) == (a["cycles"], a["phases"])


@pytest.mark.slow     # 34 s; the measures each figure reads are pinned by the other tests
def test_compare_systems_splits_each_run_into_a2a_and_bsp():
    row, runs = compare_systems(tiny_grid([CELL])[0])
    for system in ("cann", "ubep"):
        m = runs[system]
        assert m["a2a"] == max(m["send"].values())
        assert 0 < m["a2a"] < m["cycles"] == row[f"{system}_cycles"]
        assert row[f"{system}_bsp"] == m["cycles"] - m["a2a"]
        assert row[f"{system}_sync_share"] == pytest.approx(m["bsp"] / m["cycles"])
    assert len(runs["cann"]["send"]) == 2 * 4                   # every CANN AIV sends
    assert len(runs["ubep"]["send"]) == 2 * runs["ubep"]["senders"] < 2 * 4
    assert row["improvement"] == pytest.approx(1 - row["ubep_cycles"] / row["cann_cycles"])


def test_every_aiv_of_a_run_has_the_stages_of_its_role():
    """CANN: every AIV sends, verifies and reorders; UBEP: T-AIVs send and have no flag or
    CalCumSum stage, C-AIVs send nothing and count; no stage is negative, none ends after
    the run."""
    point = tiny_grid([CELL])[0]
    for system in ("cann", "ubep"):
        m = measure_dispatch(point, system)
        roles = {"t": 0, "c": 0}
        for key, phases in m["phases"].items():
            stack = phase_stack(system, phases)
            assert all(v >= 0 for v in stack.values()), (system, key, stack)
            assert phases["reorder"] <= m["cycles"]
            if system == "cann":
                assert min(stack[s] for s in ("init", "sending", "flag_verify", "reorder")) > 0
            elif "send" in phases:
                roles["t"] += 1
                assert stack["sending"] > 0 and stack["flag_verify"] == stack["cumsum"] == 0
            else:
                roles["c"] += 1
                assert stack["sending"] == 0 and stack["flag_verify"] > 0
        if system == "ubep":
            assert roles["t"] == len(m["send"]) and roles["c"] == len(m["phases"]) - roles["t"] > 0


def test_a_wrong_result_is_an_error_not_a_figure(monkeypatch):
    from epfabric.sw.kernels import KERNELS
    kernel = KERNELS["dispatch"]
    check = kernel.check

    def wrong(machine, report, inputs):
        verdict = check(machine, report, inputs)
        return {**verdict, "correct": False, "problems": ["rank 0: OUT token 3 differs"]}

    monkeypatch.setattr(kernel, "check", wrong)
    with pytest.raises(RuntimeError, match="ubep dispatch at .* is wrong: rank 0: OUT token 3"):
        measure_dispatch(tiny_grid([CELL])[0], "ubep")


def test_cap_keeps_uniform_routing_under_it_and_stays_within_the_batch():
    assert cap_for(8, 8, 256) == 8                 # small batches: the batch itself
    assert cap_for(128, 8, 256) == 16              # mean 4: 4x the mean
    assert cap_for(128, 8, 32) == 128
    with pytest.raises(UserError, match="ranks must be one of 4, 8, 16, 32, not 12"):
        shape_of(12)


#: rows each figure's verdict must refuse: UBEP slower than CANN (the sensitivity figures),
#: a cut of 0 (Fig. 8's band is 34.7-52.4 % +-10 points), one C best everywhere (Fig. 14's
#: trend needs the best group to vary)
SAY_NO = {"fig8": lambda r: dict(r, cut=0.0),
          "fig14": lambda r: dict(r, cycles=r["cumsum_aivs"])}


@pytest.mark.parametrize("name, cells, aivs", [
    ("fig7a", [{**CELL, "batch": b} for b in (4, 8)], 4),
    ("fig7b", [{**CELL, "experts": 8}], 4),
    ("fig7c", [{**CELL, "experts": e} for e in (4, 8)], 4),
    ("fig13", [{**CELL, "topk": k} for k in (1, 2)], 4),
    ("fig8", [{**CELL, "batch": b} for b in (4, 8)], 4),
    ("fig14", [{**CELL, "batch": b, "cumsum_aivs": c} for b in (4, 8) for c in (1, 2)], 4),
])
def test_an_experiment_measures_judges_and_draws_a_small_grid(name, cells, aivs, tmp_path):
    """CI's smoke of each figure: real runs on two tiny dies, the verdict and the PNG from them."""
    e = EXPERIMENTS[name]
    rows = []
    for point in tiny_grid(cells, aivs=aivs):
        rows += e.rows_of(point, e.measure(point))
    holds, line = e.verdict(rows)
    assert isinstance(holds, bool) and line
    refuse = SAY_NO.get(name, lambda r: dict(r, improvement=-0.1))
    no, why = e.verdict([refuse(r) for r in rows])
    assert no is False, (name, why)
    e.plot(rows, tmp_path / f"{name}.png")
    assert (tmp_path / f"{name}.png").stat().st_size > 5000
    if name == "fig8":
        assert {r["system"] for r in rows} == {"cann", "ubep"}
        assert {r["role"] for r in rows if r["system"] == "ubep"} == {"T", "C"}
        for r in rows:
            assert sum(r[s] for s in STAGES) <= r["run_cycles"]
    elif name == "fig14":
        from epfabric.sim.lab.experiments.ubep_cumsum import best_groups
        for (ranks, batch), c in best_groups(rows).items():
            cell = [r for r in rows if r["batch"] == batch]
            assert min(cell, key=lambda r: r["cycles"])["cycles"] == \
                next(r["cycles"] for r in cell if r["cumsum_aivs"] == c)
    else:
        for r in rows:
            assert r["improvement"] == pytest.approx(1 - r["ubep_cycles"] / r["cann_cycles"])
            assert "paper_improvement" in r or name == "fig13"


def test_fig3b_measures_every_sender_count_on_one_machine():
    e = EXPERIMENTS["fig3b"]
    point = {**tiny_grid([{**CELL, "cumsum_aivs": 1}], aivs=4)[0], "senders": "1,2,3"}
    point.pop("cumsum_aivs")
    rows = e.measure(point)
    assert [r["senders"] for r in rows] == [1, 2, 3]
    assert rows[0]["eff"] == 1.0
    for r in rows:
        assert r["eff"] == pytest.approx(rows[0]["t_send"] / (r["senders"] * r["t_send"]))
        assert 0 < r["t_send"] < r["cycles"]
