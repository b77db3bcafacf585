"""Rules of the test suite itself.

Every skip goes through ``tests/utils.require`` (or the ``simulator`` /
``hdl_simulator`` fixtures, which call it), so ``EPFABRIC_REQUIRE_ALL_SIMULATORS=1``
(CI) turns a missing simulator or tool into a failure instead of a silent skip.
"""

import ast
import pathlib

TESTS = pathlib.Path(__file__).parent

#: files still skipping on their own, to be routed through utils.require (owned elsewhere)
NOT_YET_ROUTED = set()


def direct_skips(path):
    """``(line, what)`` of every pytest.skip / skipif / importorskip in ``path``."""
    tree = ast.parse(path.read_text(), filename=str(path))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in ("skip", "skipif", "importorskip"):
            base = node.value
            if isinstance(base, ast.Attribute):          # pytest.mark.skipif
                base = base.value
            if isinstance(base, ast.Name) and base.id == "pytest":
                out.append((node.lineno, node.attr))
    return out


def test_every_skip_goes_through_require():
    offenders = {}
    for path in sorted(TESTS.rglob("*.py")):
        rel = path.relative_to(TESTS).as_posix()
        if rel == "utils.py":
            continue                                     # require() itself
        skips = direct_skips(path)
        if skips:
            offenders[rel] = skips
    assert set(offenders) <= NOT_YET_ROUTED, {k: v for k, v in offenders.items()
                                               if k not in NOT_YET_ROUTED}


def test_the_rule_sees_a_direct_skip(tmp_path):
    bad = tmp_path / "test_x.py"
    bad.write_text("import pytest\n\n@pytest.mark.skipif(True, reason='x')\ndef test_a():\n"
                   "    pytest.skip('no tool')\n")
    assert direct_skips(bad) == [(3, "skipif"), (5, "skip")]


#: Amaranth's file-wide option that stops reporting the elaboratables a file creates
LINTER_SILENCE = "# amaranth: UnusedElaboratable=no"


def test_only_refused_constructions_go_unreported():
    """Only ``tests/rejected.py`` (constructions a test expects to raise) may stop Amaranth
    from reporting the elaboratables it creates: anywhere else a component built and never
    elaborated must fail the suite."""
    silenced = [p.relative_to(TESTS).as_posix() for p in sorted(TESTS.rglob("*.py"))
                if p.read_text().startswith(LINTER_SILENCE)]
    root = TESTS.parent
    code = [p.relative_to(root).as_posix() for top in ("hw", "sw", "sim")
            for p in sorted((root / top).rglob("*.py")) if p.read_text().startswith(LINTER_SILENCE)]
    assert silenced == ["rejected.py"] and code == []
