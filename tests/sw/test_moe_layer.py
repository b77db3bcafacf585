"""The INC-MoE layer kernel (sw/kernels/moe_layer.py, sw/incmoe/): bit-exact, every simulator.

Every run is checked by the kernel against numpy (docs/spec/kernels.md §4): each rank's
output rows, every gathered row (and nothing beyond a rank's count), every
partial, every reduced row the switch delivered and the completion
counters. So a correct run at several band counts, role splits and tail
settings, and in both modes, is the statement that the result does not
depend on them and that INC and the ring give the same bits. The ``tiny``
preset keeps these on Amaranth's simulator short; the timing figures use
``incmoe-testbed`` (sim/lab/experiments/incmoe_layer.py).
"""

import functools

import numpy as np
import pytest

from epfabric.sim.backends.machine import backend
from epfabric.sw.kernels import KERNELS, RunResult, machine_run, run_kernel
from epfabric.sw.machine import Machine, WatchdogTimeout
from utils import require_simulator, simulators

K = KERNELS["moe-layer"]
#: the cross-simulator case: 2 ranks x 3 AIVs, unequal counts, 2 bands, both modes
SMALL = dict(ranks=2, counts=(3, 2), experts=4, topk=2, roles=(1, 1, 1), bands=2, mode="both")


@functools.lru_cache(maxsize=None)
def pysim_run(mode):
    """``(machine, report, inputs)`` of SMALL's ``mode`` run (its machine of that mode) on
    Amaranth's simulator, cached per process: SMALL's pysim :func:`outcome` is these two
    runs, and the checker's test judges the INC one again."""
    params = K.resolve_params(SMALL)
    config = next(c for c in K.configs("tiny", params=params) if c.nic_mode == mode)
    m = Machine(backend=backend("pysim"), config=config)
    inputs = K.load(m, params)
    return m, m.run(50_000), inputs


@functools.lru_cache(maxsize=None)
def outcome(simulator, **extra):
    params = {**SMALL, **extra}
    if simulator == "pysim" and not extra:          # run_kernel's result of the runs above
        runs = [machine_run(K, *pysim_run(mode)) for mode in ("inc", "ring")]
        result = RunResult(K.name, "tiny", "pysim", K.resolve_params(params), runs,
                           K.combine_runs(runs))
    else:
        result = run_kernel(K, backend(simulator), preset="tiny", params=params,
                            max_cycles=50_000)
    return result, [(r.cycles, r.trace, r.counters) for r in result.reports]


def test_small_case_is_correct_in_both_modes():
    result, runs = outcome("pysim")
    assert result.correct, result.problems
    assert [r.check["mode"] for r in result.runs] == ["inc", "ring"]
    assert result.figures["cut"] == 1 - runs[0][0] / runs[1][0]
    inc = result.runs[0]
    # one barrier per band; every role marked every band (gather, compute, reduce)
    assert runs[0][2]["inc_bar"] == [2, 2] and runs[1][2]["inc_bar"] == [1, 1]
    for band in inc.check["band_times"]:
        for role in ("ag", "ffn", "rs"):
            start, end = band[role]
            assert start is not None and end is not None and start <= end
    # the pipeline: band 1's AllGather is under way while band 0's FFN runs, and band 0's
    # ReduceScatter starts before band 1's FFN has ended
    b0, b1 = inc.check["band_times"]
    assert b1["ag"][0] < b0["ffn"][1] and b0["rs"][0] < b1["ffn"][1]


def test_trace_has_ag_ffn_and_rs_slices():
    from epfabric.sw.report import Report
    result, runs = outcome("pysim")
    cycles, trace, counters = runs[0]
    report = Report(config={}, backend="pysim", cycles=cycles, ns=float(cycles), done=True,
                    timeout=False, trace=trace)
    slices = [e for e in report.chrome_trace(1.0, K.trace_spans)["traceEvents"] if e["ph"] == "X"]
    names = [e["name"] for e in slices]
    # per rank: AG of 2 bands (gather 0), FFN of 2 bands (1 compute AIV), RS of 2 bands (1 reducer)
    assert sorted(names) == sorted(["AG"] * 4 + ["FFN"] * 4 + ["RS"] * 4)


# Icarus in CI. Verilator and native: their own builds of the two INC machines (44 s and 35 s
# of a cold `make test`); test_agrs runs the INC machine (its NICs, INC engine and INC cores)
# on both, and test_aiv_core the INC core's programs (cube included) on Icarus.
@pytest.mark.parametrize("simulator", simulators("icarus", "verilator", "native",
                                                 slow=("verilator", "native")))
def test_same_cycles_trace_and_counters_on_every_simulator(simulator):
    require_simulator(simulator)
    result, runs = outcome(simulator)
    assert result.correct, result.problems
    assert runs == outcome("pysim")[1]


@pytest.mark.parametrize("counts, experts, topk, bands, roles, tail", [
    pytest.param((5, 3, 0, 2), 8, 3, 1, (1, 1, 1), 0, marks=pytest.mark.slow),
    pytest.param((5, 3, 0, 2), 8, 3, 3, (2, 2, 1), 2, marks=pytest.mark.slow),   # 40 s of pysim
    ((4, 0, 2), 6, 2, 3, (2, 2, 1), 2)])                                        # 21 s
def test_unequal_ranks_one_without_tokens(counts, experts, topk, bands, roles, tail):
    """Unequal counts with a rank at 0 tokens, more than two ranks: no deadlock, bit-exact,
    in both modes."""
    result, _ = outcome("pysim", ranks=len(counts), counts=counts, experts=experts, topk=topk,
                        bands=bands, roles=roles, tail=tail)
    assert result.correct, result.problems
    assert {r.check["mode"] for r in result.runs} == {"inc", "ring"}


@pytest.mark.slow
def test_eight_ranks():
    result, _ = outcome("pysim", ranks=8, counts=(2, 0, 3, 1, 2, 2, 1, 3), experts=16, topk=2,
                        bands=2, roles=(1, 1, 1), tail=1)
    assert result.correct, result.problems


def test_the_checker_sees_a_wrong_result():
    """Checked against numpy for real: the same run judged against other expert weights fails."""
    m, report, inputs = pysim_run("inc")
    assert K.check(m, report, inputs)["correct"]
    case = inputs["case"]
    wrong = {**inputs, "case": type(case)(**{**case.__dict__, "b": case.b + np.uint32(1)})}
    problems = K.check(m, report, wrong)["problems"]
    assert any("output rows differ" in p for p in problems)
    assert any("partials" in p for p in problems)


def test_a_hang_is_diagnosed():
    """Stopped mid-layer, the watchdog names what each unfinished core waits on."""
    params = K.resolve_params({**SMALL, "mode": "inc"})
    config = K.configs("tiny", params=params)[0]
    m = Machine(backend=backend("pysim"), config=config)
    K.load(m, params)
    with pytest.raises(WatchdogTimeout) as info:
        m.run(60)
    assert "waits on" in info.value.report.diagnosis


@pytest.mark.parametrize("params, match", [
    ({"mode": "mesh"}, r"mode must be one of inc, ring, both, not 'mesh'"),
    ({"counts": (3, 2, 1)}, r"counts must give 2 token counts"),
    ({"counts": (0, 0)}, r"at least one rank a token"),
    ({"roles": (1, 1)}, r"roles must be \(gather, compute, reduce\) AIV counts"),
    ({"roles": (1, 0, 1)}, r"roles\[1\] \(compute\) must be in \[1, 64\], not 0"),
    ({"tail": 3}, r"tail must be in \[0, 2\], not 3"),
    ({"experts": 5}, r"experts must be a multiple of ranks \(2\), not 5"),
    ({"tmax": 2}, r"tmax=2 \(rows per rank block\) is below the largest token count 3"),
    ({"slots": 2}, r"slots=2 is below ranks \* beta = 4"),
    ({"ranks": 8, "counts": (), "experts": 8, "bands": 600, "roles": (1, 5, 2)},
     r"bands=600 on 8 ranks with roles \(1, 5, 2\) need 72000 MARK trace entries"),
])
def test_bad_parameters_are_named(params, match):
    with pytest.raises(ValueError, match=match):
        K.configs("tiny", params={**SMALL, **params})


def test_gathers_stay_within_a_band_of_the_release(monkeypatch):
    """Three gather AIVs, one of them slow: gather 0 posts a band's AllGather only after every
    gather copied its rows (a gather may not run a band ahead and stand in for a slow one)."""
    from epfabric.sw.incmoe import program as prog
    original = prog._Emitter.gather

    def slow_gather_1(self, g):
        if g == 1:
            for _ in range(150):
                self.p.nop()
        original(self, g)
    monkeypatch.setattr(prog._Emitter, "gather", slow_gather_1)
    result = run_kernel(K, backend("pysim"), preset="tiny", max_cycles=50_000,
                        params=dict(ranks=2, counts=(8, 8), experts=4, topk=2, roles=(3, 1, 1),
                                    bands=4, mode="inc"))
    assert result.correct, result.problems


def test_a_one_cycle_cube_row(monkeypatch):
    """A preset whose cube takes one cycle per row: the die's unit answers in the request's own
    cycle (no combinational loop through the request), and the layer is still correct."""
    from epfabric.sw.presets import Preset
    slow_cycles = outcome("pysim")[1][0][0]           # SMALL's INC run, 8-cycle rows
    monkeypatch.setattr(Preset, "cube_cycles", lambda self: 1)
    fast = run_kernel(K, backend("pysim"), preset="tiny", params={**SMALL, "mode": "inc"},
                      max_cycles=50_000)
    assert fast.correct, fast.problems
    assert fast.runs[0].cycles < slow_cycles


def test_no_interface_on_a_tearing_port():
    from epfabric.sw.config import MachineConfig
    with pytest.raises(ValueError, match="nic_mode with non_atomic_port=True"):
        MachineConfig("tiny", topology=("star", 2), nic_mode="inc", nic_tmax=4, inc_slots=16,
                      hbm_blocks=64, non_atomic_port=True)
