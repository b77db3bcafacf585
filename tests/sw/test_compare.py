"""Comparisons of kernel runs (sw/kernels/compare.py): the latency cut, Fig. 8's stages, same outputs.

The inputs are hand-made :class:`~epfabric.sw.kernels.RunResult` objects: each expected line
is worked out by hand from their figures, not by running the code it checks.
"""

from epfabric.sw.kernels import MachineRun, RunResult
from epfabric.sw.kernels.compare import (STAGES, cut, latency_lines, phase_stack, same_outputs,
                                         stage_table, sweep_lines)


def _result(kernel, *checks, cycles=100):
    """A RunResult of ``kernel`` with one machine run per check dict (no simulation)."""
    return RunResult(kernel, "tiny", "pysim", {}, [
        MachineRun(None, check.pop("cycles", cycles), 0.0,
                   {"correct": True, "problems": [], **check}) for check in map(dict, checks)])


def test_the_comparison_line_uses_the_kernels_own_latency():
    """daf reports a latency that leaves out set-up and re-arming: the comparison uses it."""
    daf = [_result("daf", {"cycles": c, "latency_cycles": lat})
           for c, lat in ((300, 46), (290, 43))]
    assert latency_lines(("protocol", ["sw", "tff"]), daf) == [
        "daf: protocol=tff / protocol=sw latency 43 / 46 cycles = 0.93 (+6.5 % cut)"]
    dispatch = [_result("dispatch", {"cycles": c}) for c in (200, 150)]
    assert latency_lines(("system", ["cann", "ubep"]), dispatch) == [
        "dispatch: system=ubep / system=cann latency 150 / 200 cycles = 0.75 (+25.0 % cut)"]
    # a combine's dispatch first (its own figures), then the combine's run
    combine = [_result("combine", {"cycles": c, "dispatch": {"cycles": d}})
               for c, d in ((400, 300), (100, 150))]
    assert latency_lines(("system", ["cann", "ubep"]), combine) == [
        "dispatch: system=ubep / system=cann latency 150 / 300 cycles = 0.50 (+50.0 % cut)",
        "combine: system=ubep / system=cann latency 100 / 400 cycles = 0.25 (+75.0 % cut)"]


def test_a_system_sweep_prints_fig8s_stages_side_by_side():
    """Per kind of AIV, the mean of each stage (hand-worked from phase ends)."""
    cann = {"0.0": {"init": 10, "send": 30, "verify": 45, "cumsum": 50, "reorder": 70},
            "0.1": {"init": 20, "send": 40, "verify": 55, "cumsum": 60, "reorder": 90}}
    ubep = {"0.0": {"init": 12, "send": 40, "reorder": 90},
            "0.1": {"init": 12, "count": 20, "cumsum": 35, "reorder": 90}}
    results = [_result("dispatch", {"phases": cann}),
               _result("combine", {"dispatch": {"phases": ubep}})]
    lines = stage_table(("system", ["cann", "ubep"]), results)
    assert lines[1].split() == ["init", "sending", "flag+verify", "cumsum", "reorder"]
    assert lines[2].split() == ["cann", "(2)", "15.0", "20.0", "15.0", "5.0", "25.0"]
    assert lines[3].split() == ["ubep", "T-AIVs", "(1)", "12.0", "28.0", "0.0", "0.0", "50.0"]
    assert lines[4].split() == ["ubep", "C-AIVs", "(1)", "12.0", "0.0", "8.0", "15.0", "55.0"]
    assert stage_table(("seed", [1, 2]), results) == []
    assert stage_table(("system", ["cann"]), [_result("daf", {"phases": {"0.0": {"a": 1}}})]) == []


def test_a_system_sweep_says_whether_the_systems_outputs_are_the_same():
    """The checkers' per-rank payload digests: identical for every system -> one line per
    output; one rank's digest changed -> a DIFFER line naming the system and the rank."""
    sweep = ("system", ["cann", "ubep", "ubep-inc"])

    def combine(out, y, problems=()):
        return _result("combine", {"correct": not problems, "problems": list(problems),
                                   "y_payload_digest": y, "dispatch": {"out_payload_digest": out}})
    same = [combine(["a", "b"], ["c", "d"]) for _ in range(3)]
    assert same_outputs(sweep, same) == [
        "dispatch outputs: OUT payloads identical across cann, ubep, ubep-inc on all 2 ranks",
        "combine outputs: y payloads identical across cann, ubep, ubep-inc on all 2 ranks"]
    other = same[:2] + [combine(["a", "b"], ["c", "x"])]
    assert same_outputs(sweep, other)[1] == (
        "DIFFER: combine y of system=ubep-inc (run 0, rank 1) is not system=cann's")
    assert not same_outputs(("seed", [0, 1]), same[:2])
    failed = combine(["a", "b"], ["c", "d"], ["rank 0: YOUT differs"])
    assert not same_outputs(sweep, same[:2] + [failed])
    bounded = combine(["a", "b"], ["c", "x"])                 # bf16 ubep-inc: judged by a bound
    bounded.runs[0].check["y_rule"] = "bound"
    assert same_outputs(sweep, same[:2] + [bounded]) == [
        "dispatch outputs: OUT payloads identical across cann, ubep, ubep-inc on all 2 ranks",
        "combine outputs: y payloads identical across cann, ubep on all 2 ranks"]


def test_phase_stack_maps_phase_ends_to_fig8s_stages():
    """Each kind of AIV's phase-end MARKs land in Fig. 8's stages (hand-worked cases)."""
    cann = {"init": 10, "send": 30, "count_sync": 33, "verify": 45, "cumsum": 50, "reorder": 70}
    assert phase_stack("cann", cann) == {"init": 10, "sending": 20, "flag_verify": 15,
                                         "cumsum": 5, "reorder": 20}
    t_aiv = {"init": 12, "send": 40, "reorder": 90}
    assert phase_stack("ubep", t_aiv) == {"init": 12, "sending": 28, "flag_verify": 0,
                                          "cumsum": 0, "reorder": 50}
    c_aiv = {"init": 12, "count": 20, "cumsum": 35, "reorder": 90}
    assert phase_stack("ubep", c_aiv) == {"init": 12, "sending": 0, "flag_verify": 8,
                                          "cumsum": 15, "reorder": 55}


def test_the_cut_is_the_share_saved():
    assert cut(200, 150) == 0.25 and cut(4, 6) == -0.5 and cut(7, 7) == 0


def test_a_sweep_prints_latencies_then_stages_then_outputs_and_says_when_they_differ():
    """``epfabric run --system cann,ubep``'s lines in order; a DIFFER line is the exit status."""
    cann = {"0.0": {"init": 10, "send": 30, "verify": 45, "cumsum": 50, "reorder": 70}}
    ubep = {"0.0": {"init": 12, "send": 40, "reorder": 90}}
    results = [_result("dispatch", {"cycles": 200, "phases": cann, "out_payload_digest": ["a"]}),
               _result("dispatch", {"cycles": 150, "phases": ubep, "out_payload_digest": ["a"]})]
    lines, differ = sweep_lines(("system", ["cann", "ubep"]), results)
    assert lines[0].startswith("dispatch: system=ubep / system=cann latency 150 / 200 cycles")
    assert lines[1].startswith("dispatch stages (UBEP Fig. 8") and len(lines) == 6
    assert lines[-1] == "dispatch outputs: OUT payloads identical across cann, ubep on all 1 ranks"
    assert not differ
    results[1].runs[0].check["out_payload_digest"] = ["b"]
    lines, differ = sweep_lines(("system", ["cann", "ubep"]), results)
    assert differ and lines[-1].startswith("DIFFER: dispatch OUT of system=ubep (run 0, rank 0)")
    assert sweep_lines(("seed", [0, 1]), results) == (
        ["dispatch: seed=1 / seed=0 latency 150 / 200 cycles = 0.75 (+25.0 % cut)"], False)
    assert STAGES == ("init", "sending", "flag_verify", "cumsum", "reorder")
