"""What a kernel invocation produced (sw/kernels/result.py): typed results, their JSON, the hooks."""

import json

import pytest

from epfabric.sim.backends.machine import backend
from epfabric.sw.config import MachineConfig
from epfabric.sw.kernels import KERNELS, Kernel, MachineRun, RunResult, run_kernel, run_label
from epfabric.sw.report import Report

CONFIG = MachineConfig("tiny", topology=("superpod", 2, 1, 1), aivs_per_die=2)


def _run(cycles, problems=(), **figures):
    report = Report(config=CONFIG.to_dict(), backend="pysim", cycles=cycles, ns=float(cycles),
                    done=True, timeout=False)
    return MachineRun(CONFIG, cycles, float(cycles),
                      {"correct": not problems, "problems": list(problems), **figures}, report)


def test_the_json_keeps_the_checkers_order_and_the_results_keys():
    """``to_dict``: the run's config as JSON, then cycles and ns, then the checker's dict as it
    gave it; the result's keys in their order, the figures across runs last."""
    result = RunResult("k", "tiny", "pysim", {"seed": 1},
                       [_run(10, z=1, a=2), _run(20, ["rank 0: wrong"], mode="inc")], {"cut": 0.5})
    doc = result.to_dict()
    assert list(doc) == ["kernel", "preset", "backend", "correct", "problems", "params", "runs",
                         "cut"]
    assert list(doc["runs"][0]) == ["config", "cycles", "ns", "correct", "problems", "z", "a"]
    assert doc["runs"][0]["config"] == CONFIG.to_dict() and doc["runs"][1]["cycles"] == 20
    assert doc["correct"] is False and doc["problems"] == ["rank 0: wrong"]
    assert (result.correct, result.problems) == (False, ["rank 0: wrong"])
    assert result.runs[1].correct is False and result.runs[0].correct is True
    assert json.loads(json.dumps(doc)) == doc                   # plain JSON


def test_every_report_with_the_runs_a_load_made_first():
    first, second = _run(5), _run(7)
    inner = _run(3).report
    second.inner_runs = [("dispatch", inner)]
    result = RunResult("k", "tiny", "pysim", {}, [first, second])
    assert result.reports == [first.report, second.report]
    assert list(result.all_reports()) == [first.report, inner, second.report]


def test_a_run_is_labelled_by_the_swept_value_its_mode_or_its_machine():
    assert run_label(("system", "ubep"), _run(1), 1) == "system=ubep"
    assert run_label(None, _run(1, mode="inc"), 2) == "inc"
    assert run_label(None, _run(1), 2) == "2 AIVs" and run_label(None, _run(1), 1) == ""


class Plain(Kernel):
    """A kernel that declares none of the optional hooks."""
    name = "plain_for_test"


def test_the_optional_hooks_have_defaults_that_do_nothing():
    k = Plain()
    assert k.inner_runs(object()) == [] and k.trace_flows(CONFIG, {}) == []
    assert k.shared_machine([{}, {}]) is None and k.combine_runs([_run(1)]) == {}
    assert k.trace_spans == {} and k.trace_phases == {} and k.params == () and k.defaults == {}
    # a combine keeps the dispatch its load ran: the report and the kernel that made it
    assert KERNELS["combine"].inner_runs((None,) * 5 + ("report",)) == [("dispatch", "report")]
    result = RunResult("plain_for_test", "tiny", "pysim", {}, [_run(4)])
    (entry,) = k.trace_runs(result, ("seed", 3), flows=True)
    assert entry == ("seed=3", result.runs[0].report, [], 0)


def test_a_checker_that_returns_no_verdict_is_refused():
    class NoVerdict(Kernel):
        name = "no_verdict_for_test"

        def sizes(self, config):
            return {"hbm_blocks": 4, "imem_depth": 8}

        def load(self, machine, params):
            from epfabric.sw.assembler import Program
            p = Program()
            p.halt()
            for rank in range(machine.ranks):
                for core in range(machine.config.aivs_per_die):
                    machine.load_program(rank, core, p)

        def check(self, machine, report, inputs):
            return {"ok": True}
    with pytest.raises(TypeError, match="check must return a dict with 'correct' and 'problems'"):
        run_kernel(NoVerdict(), backend("pysim"), preset="tiny", max_cycles=200)
