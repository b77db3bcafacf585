"""``epfabric mutate`` (sim/verify/mutate.py, sim/verify/mutations.py): the harness, not the suite.

Copies, exact-once edits, stale mutations, imports pinned to the copy, the
cache key, per-test outcomes, the JSON and the summary line. Only two tiny
mutation runs (a second each); ``make mutate`` runs the suite.
"""

import json
import re
import subprocess
from pathlib import Path

import pytest

from epfabric.sim.verify import mutate
from epfabric.sim.cli import main
from epfabric.sim.backends.verilog import source_hash

ROOT = Path(__file__).resolve().parents[2]
MUTATIONS = mutate.load_mutations()
BY_NAME = {m.name: m for m in MUTATIONS}
SWITCH_LINE = "            m.d.comb += g.eq(Mux(load, grant, 0))\n"
SWITCH_TEST = ("tests/hw/test_switch.py::"
               "test_round_robin_shares_an_output_equally_and_backpressures")


def fake(name="fake", old=SWITCH_LINE, new=SWITCH_LINE, tests=(SWITCH_TEST,), **kw):
    return mutate.Mutation(name=name, file="hw/switch.py", edits=((old, new),),
                           description="a test mutation", tests=tuple(tests), **kw)


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    """One copy of the tracked tree, shared (read-only) by the tests below."""
    return mutate.copy_tree(ROOT, tmp_path_factory.mktemp("tree"))


def test_the_suite_is_curated():
    assert len(MUTATIONS) >= 12
    assert len(BY_NAME) == len(MUTATIONS)                     # names are unique
    for m in MUTATIONS:
        assert re.fullmatch(r"[a-z0-9_]+", m.name), m.name
        assert m.tests and m.description and m.timeout <= 300, m.name
        assert m.file.split("/")[0] in ("hw", "sw", "sim"), m.name
    assert {m.name for m in MUTATIONS if m.harmless} == {"mapper_pivots_unclamped",
                                                         "inc_ag_copy_to_root",
                                                         "ubep_sw_no_fence"}


def test_copy_is_the_tracked_tree(tree):
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, check=True, capture_output=True,
                             text=True).stdout.split()
    copied = {str(p.relative_to(tree)) for p in tree.rglob("*") if p.is_file()}
    assert copied == {t for t in tracked if (ROOT / t).is_file()}
    assert (tree / "hw/switch.py").read_text() == (ROOT / "hw/switch.py").read_text()


@pytest.mark.parametrize("name", list(BY_NAME))
def test_every_mutation_applies_once_and_only_to_its_copy(name, tmp_path, tree):
    m = BY_NAME[name]
    dst = tmp_path / m.file
    dst.parent.mkdir(parents=True)
    dst.write_text((tree / m.file).read_text())
    before = (ROOT / m.file).read_text()
    mutate.apply(m, tmp_path)
    after = dst.read_text()
    assert after != before
    for old, new in m.edits:
        assert old != new and new in after
    assert (ROOT / m.file).read_text() == before             # the checkout is never touched


@pytest.mark.parametrize("name", list(BY_NAME))
def test_every_listed_test_exists(name):
    for test in BY_NAME[name].tests:
        path, _, func = test.partition("::")
        func = func.split("[")[0]
        assert (ROOT / path).is_file(), test
        if func:                                            # else the whole file
            assert re.search(rf"^def {func}\(", (ROOT / path).read_text(), re.M), test


def test_a_stale_mutation_fails_loudly_naming_itself_and_its_file(tmp_path, tree):
    (tmp_path / "hw").mkdir()
    (tmp_path / "hw/switch.py").write_text((tree / "hw/switch.py").read_text())
    with pytest.raises(mutate.StaleMutation,
                       match=r"^mutation gone no longer applies to hw/switch.py: edit 0 matches "
                             r"0 times"):
        mutate.apply(fake("gone", old="no such text\n"), tmp_path)
    with pytest.raises(mutate.StaleMutation, match=r"mutation twice no longer applies to "
                                                   r"hw/switch.py: edit 0 matches \d+ times"):
        mutate.apply(fake("twice", old="m.d.comb"), tmp_path)
    outcome = mutate.run_mutation(fake("gone", old="no such text\n"))
    assert outcome.error.startswith("mutation gone no longer applies to hw/switch.py")
    assert not outcome.ok and "error" in outcome.to_dict()


def test_the_copy_is_what_runs_and_its_cache_key_differs(tmp_path, tree):
    """The probe imports the mutated module from the copy; the Verilog cache key is the copy's."""
    m = BY_NAME["switch_drops_loser"]
    root = mutate.copy_tree(ROOT, tmp_path / "tree")
    mutate.apply(m, root)
    seen = mutate.sanity_check(m, root, mutate.test_env(root))
    assert seen["module"] == str(root.resolve() / "hw/switch.py") and seen["mutated"]
    assert Path(seen["epfabric"]).is_relative_to(root.resolve())
    assert seen["source_hash"] != source_hash()            # no unmutated Verilog is served
    # without the shim the editable install would import the checkout: the probe says so
    env = mutate.test_env(root)
    env["PYTHONPATH"] = ""
    with pytest.raises(RuntimeError, match="sanity check failed: epfabric imported from"):
        mutate.sanity_check(m, root, env)


def test_outcomes_of_a_caught_and_an_uncaught_run():
    """End to end on one switch test (~1 s each): a real mutation is caught, a no-op is not."""
    caught = mutate.run_mutation(BY_NAME["switch_drops_loser"])
    assert caught.caught and caught.ok and not caught.error
    assert set(caught.caught_by) == set(BY_NAME["switch_drops_loser"].tests)
    noop = mutate.run_mutation(fake("noop"))
    assert noop.caught_by == [] and noop.not_caught_by == [SWITCH_TEST] and not noop.ok


def test_a_test_file_that_no_longer_imports_counts_as_failing():
    """A mutation that removes a name a test file imports fails that file's tests."""
    gone = mutate.Mutation(name="gone", file="sim/tb/race.py",
                           edits=(("def marker(block_row):", "def markers(block_row):"),),
                           description="", tests=("tests/hw/test_race.py::test_bad_case",))
    outcome = mutate.run_mutation(gone)
    assert outcome.caught_by == ["tests/hw/test_race.py::test_bad_case"], outcome.error


def test_cli_list_and_bad_only(capsys):
    assert main(["mutate", "--list"]) == 0
    out = capsys.readouterr().out
    for m in MUTATIONS:
        assert m.name in out
        assert all(t in out for t in m.tests)
    assert "[harmless]" in out
    assert main(["mutate", "--only", "switch_drops_loser,nope"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == ("epfabric mutate: error: --only must name mutations from --list, "
                   "not 'switch_drops_loser,nope'")
    assert main(["mutate", "-j", "0"]) == 2
    assert capsys.readouterr().err.strip() == "epfabric mutate: error: --jobs must be >= 1, not 0"


def test_cli_json_and_summary(tmp_path, monkeypatch, capsys):
    """The table's shape and the summary line, on canned outcomes (no test run)."""
    harmless = BY_NAME["mapper_pivots_unclamped"]
    real = BY_NAME["switch_drops_loser"]

    def canned(m, **kw):
        o = mutate.Outcome(m, seconds=61.0)
        if m.name == real.name:
            o.caught_by = list(m.tests)
        else:
            o.not_caught_by = list(m.tests)
        return o
    monkeypatch.setattr(mutate, "run_mutation", canned)
    out = tmp_path / "m.json"
    assert main(["mutate", "--only", f"{real.name},{harmless.name}", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert f"[1/2] {real.name}: caught in 1 min 1 s" in text
    assert f"[2/2] {harmless.name}: not caught: documented harmless" in text
    assert re.search(r"^mutate: 1/1 caught \(1 documented harmless\) in \d+ s$", text, re.M)
    rows = json.loads(out.read_text())["rows"]
    assert [r["mutation"] for r in rows] == [real.name, harmless.name]
    assert set(rows[0]) == {"mutation", "file", "description", "caught_by", "not_caught_by",
                            "seconds"}
    assert rows[0]["caught_by"] == list(real.tests) and rows[0]["seconds"] == 61.0
    assert rows[1]["harmless"] == harmless.harmless and rows[1]["caught_by"] == []

    # a real mutation not caught: exit 1
    monkeypatch.setattr(mutate, "run_mutation",
                        lambda m, **kw: mutate.Outcome(m, not_caught_by=list(m.tests)))
    assert main(["mutate", "--only", real.name, "--json", str(out)]) == 1
    assert "NOT CAUGHT" in capsys.readouterr().out


def test_summary_line():
    outs = [mutate.Outcome(BY_NAME["switch_drops_loser"], caught_by=["t"]),
            mutate.Outcome(BY_NAME["link_latency_short"], caught_by=["t"]),
            mutate.Outcome(BY_NAME["mapper_pivots_unclamped"])]
    assert mutate.summary_line(outs, 552) == "mutate: 2/2 caught (1 documented harmless) in 9 min 12 s"
    assert mutate.format_seconds(41.4) == "41 s"


def test_a_file_that_is_not_python_is_probed_through_its_package():
    """The C++ top of the native backend can be mutated: the probe imports its package."""
    m = BY_NAME["native_skips_busy_models"]
    assert m.module() == "epfabric.sim.backends"
    assert BY_NAME["switch_drops_loser"].module() == "epfabric.hw.switch"
