"""The ``agrs`` kernel (sw/kernels/agrs.py) on an AG/RS machine (sw/config.py ``AgrsConfig``).

The experiment and CLI over it (and the cross-simulator runs) are in
tests/sim/test_agrs.py; the endpoints' hardware in tests/hw/test_inc_endpoint.py.
"""

import functools

import numpy as np
import pytest

from epfabric.hw.host import HostTarget
from epfabric.sim.backends.machine import backend
from epfabric.sw.config import AgrsConfig
from epfabric.sw.isa import address
from epfabric.sw.kernels import KERNELS, run_kernel
from epfabric.sw.kernels.agrs import KERNEL, bound_gbps, make_case, reference
from epfabric.sw.machine import Machine, WatchdogTimeout

# the small AG/RS machine of tests/sim/test_agrs.py (one build per simulator)
SMALL = {"tmax": 2, "lanes": 1, "slots": 16}
CASE = {"counts": [2, 1, 0, 2], "seed": 11}


def small_machine():
    return Machine(backend=backend("pysim"), config=AgrsConfig("tiny", ranks=4, **SMALL))


@functools.lru_cache(maxsize=None)
def small_run():
    return run_kernel("agrs", backend("pysim"), preset="tiny", topology=("star", 4),
                      params={**SMALL, **CASE}, max_cycles=5000)


def test_registered_with_its_defaults():
    assert KERNELS["agrs"] is KERNEL
    assert KERNEL.default_preset == "incmoe-testbed"
    assert set(KERNEL.defaults) == {"mode", "tmax", "lanes", "slots", "counts", "seed",
                                    "concurrent", "barrier", "dtype"}
    (cfg,) = KERNEL.configs("incmoe-testbed")
    assert cfg == AgrsConfig("incmoe-testbed", ranks=4, mode="inc", tmax=4, lanes=2, slots=16)
    assert cfg.kind == "agrs" and cfg.topology == ("star", 4)


def test_make_case_and_reference():
    case = make_case(ranks=3, tmax=2, lanes=2, counts=[2, 0, 1], seed=4)
    assert [len(rows) for rows in case["ag_in"]] == [2, 0, 1]
    assert np.array(case["rs_in"]).shape == (3, 6, 2)
    gathered, out = reference(case, ranks=3, tmax=2)
    assert sorted(gathered) == [0, 1, 4]                  # rank q's rows at q * tmax
    assert gathered[4] == case["ag_in"][2][0]
    total = np.array(case["rs_in"], dtype=np.int64).sum(axis=0)
    wrapped = ((total + 2**31) % 2**32 - 2**31).tolist()  # int32 wrap-around
    assert out == [wrapped[0:2], [], wrapped[4:5]]
    assert make_case(ranks=2, tmax=3, lanes=1)["counts"] == [3, 3]
    with pytest.raises(ValueError, match=r"counts\[0\] must be in \[0, 2\], not 3"):
        make_case(ranks=3, tmax=2, lanes=1, counts=[3, 0, 1])
    with pytest.raises(ValueError, match=r"counts must be 3 row counts in \[0, 2\], not \[1, 1\]"):
        make_case(ranks=3, tmax=2, lanes=1, counts=[1, 1])


def test_bounds_are_eq4_and_eq5():
    assert bound_gbps("incmoe-testbed", "inc", 4) == 200.0                # 2 * BW
    assert bound_gbps("incmoe-testbed", "ring", 4) == pytest.approx(4 / 3 * 100.0)


@pytest.mark.parametrize("call, exc, match", [
    (lambda: KERNEL.configs("tiny", ("superpod", 2, 1, 1)), ValueError,
     r"agrs runs on a star topology \(star:N\), not \('superpod', 2, 1, 1\)"),
    (lambda: KERNEL.configs("tiny", ("star", 4), 2), ValueError, "agrs has no AIV cores"),
    (lambda: KERNEL.configs("tiny", ("star", 4), None, {"mode": "tree"}), ValueError,
     "mode must be one of inc, ring, not 'tree'"),
    (lambda: KERNEL.configs("tiny", ("star", 4), None, {"slots": 12}), ValueError,
     "slots must be a power of two, not 12"),
    (lambda: KERNEL.configs("tiny", ("star", 4), None, {"tmax": 1.5}), TypeError,
     "tmax must be an integer, not 1.5"),
    (lambda: KERNEL.configs("tiny", ("star", 4), None, {"lane": 1}), ValueError,
     "unknown parameter"),
    # the padded layout must fit a rank's 2**22 host-addressable blocks: (2N+1)*tmax <= 2**22
    (lambda: KERNEL.configs("tiny", ("star", 4), None, {"tmax": 466034}), ValueError,
     r"tmax must be at most 466033 at ranks 4 \(a rank addresses 2\*\*22 blocks"),
    (lambda: AgrsConfig("tiny", ranks=1), ValueError, r"must be >= 2, not 1"),
    (lambda: AgrsConfig("nope"), ValueError, "unknown preset 'nope'"),
])
def test_bad_configuration_is_refused(call, exc, match):
    with pytest.raises(exc, match=match):
        call()


def test_load_writes_buffers_and_control_registers():
    m = small_machine()
    case = KERNEL.load(m, KERNEL.resolve_params({**CASE, "concurrent": False, "barrier": True}))
    assert case["counts"] == CASE["counts"]
    writes = m.session(100)["writes"]
    ctrl = {w[3]: w[4] for w in writes if w[0] == HostTarget.CTRL.value}
    cm = m.config.control_map
    assert ctrl == {**{cm["counts"] + q: c for q, c in enumerate(CASE["counts"])},
                    cm["concurrent"]: 0, cm["barrier"]: 1}
    hbm = [w for w in writes if w[0] == HostTarget.HBM.value]
    mm = m.config.memory_map
    assert len(hbm) == sum(CASE["counts"]) + 4 * 4 * 2      # own AG rows + every rank's partials
    assert [3, 0, address(0, mm["ag"] + 3 * 2 + 1), case["ag_in"][3][1][0] & 0xFFFFFFFF] in \
        [w[1:] for w in hbm]
    assert not any(w[0] in (HostTarget.IMEM.value, HostTarget.ENABLE.value) for w in writes)


def test_run_matches_numpy():
    result = small_run()
    assert result.correct, result.problems
    (run,) = result.runs
    report = run.report
    assert run.check["errors"] == 0 and run.check["mode"] == "inc"
    assert run.cycles == report.cycles > 0
    assert run.check["bytes"] == 4 * 2 * 512                   # ranks * max(counts) rows of 512 B
    assert report.config["kind"] == "agrs" and report.cores == [] and report.trace == []
    assert set(report.counters) == {"ag_count", "rs_count", "slot_stalls"}
    assert report.counters["rs_count"] == CASE["counts"]       # rows of its shard each rank reduced
    assert run.check["slot_stalls"] == report.counters["slot_stalls"][0]


def test_checker_sees_a_wrong_row():
    m = small_machine()
    case = KERNEL.load(m, KERNEL.resolve_params(CASE))
    report = m.run(5000)
    assert KERNEL.check(m, report, case)["correct"]
    wrong = {**case, "ag_in": [list(map(list, rows)) for rows in case["ag_in"]]}
    wrong["ag_in"][1][0][0] += 1                               # rank 1's only row
    verdict = KERNEL.check(m, report, wrong)
    assert not verdict["correct"] and verdict["errors"] == 4    # every rank gathered it
    assert verdict["problems"] == [f"rank {r}: gathered row 2 differs" for r in range(4)]


def test_watchdog_names_the_machine_and_its_counters():
    m = small_machine()
    KERNEL.load(m, KERNEL.resolve_params(CASE))
    with pytest.raises(WatchdogTimeout, match=r"^watchdog: the agrs machine did not finish within "
                                              r"10 cycles; counters: ag_count \["):
        m.run(10)
    assert m.last_report.timeout and m.last_report.cycles == 10


def test_largest_layout_that_fits_is_accepted():
    """max_tmax is the largest tmax whose (2N+1)*tmax blocks fit 2**22 (no run)."""
    from epfabric.hw.inc_endpoint import agrs_memory_map
    from epfabric.sw.kernels.agrs import check_fits, max_bytes, max_tmax
    for n in (2, 4, 8, 64, 256):
        t = max_tmax(n)
        assert agrs_memory_map(n, t)["end"] <= 1 << 22 < agrs_memory_map(n, t + 1)["end"]
        assert KERNEL.configs("tiny", ("star", n), None, {"tmax": t})[0].tmax == t
        assert check_fits("S", max_bytes("tiny", n), preset="tiny", ranks=n) == t * n * 512
    assert (max_tmax(4), max_tmax(8)) == (466033, 246723)


@pytest.mark.parametrize("dtype, mode", [
    ("fp32", "inc"), pytest.param("bf16", "ring", marks=pytest.mark.slow),
    pytest.param("bf16", "inc", marks=pytest.mark.slow)])
def test_a_float_reduce_scatter_is_checked_by_its_order(dtype, mode):
    """Floating-point RS on the small machine: the INC engine's shards within the any-order
    bound (arrival order), the ring's bit-exact in the ring's order; the verdict names the
    rule and the largest error (in ulps of the exact sum, and as a share of the bound)."""
    result = run_kernel("agrs", backend("pysim"), preset="tiny", topology=("star", 4),
                        params={**SMALL, **CASE, "dtype": dtype, "mode": mode}, max_cycles=5000)
    assert result.correct, result.problems
    (run,) = result.runs
    assert run.check["rule"] == ("exact" if mode == "ring" else "bound")
    assert 0 <= run.check["max_error_over_bound"] <= 1 and run.check["max_error_ulps"] >= 0
    case = make_case(ranks=4, tmax=2, lanes=1, counts=CASE["counts"], seed=11, dtype=dtype)
    words = np.array(case["rs_in"], dtype=np.int64)
    assert words.shape == (4, 8, 1) and 0 <= words.min() and words.max() < 2**32
