"""Layering: ``sim`` → ``sw`` → ``hw``, one way, checked on the AST of every module.

Every ``import`` and ``from ... import`` anywhere in a module (top level or
inside a function: a lazy import is still a dependency) is resolved to the
``epfabric`` package it names. ``hw`` may import neither ``sw`` nor ``sim``;
``sw`` may not import ``sim``. That makes the package graph acyclic.
"""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("hw", "sw", "sim")
#: package → packages it may import
ALLOWED = {"hw": {"hw"}, "sw": {"sw", "hw"}, "sim": {"sim", "sw", "hw"}}


def modules(package):
    return sorted((ROOT / package).rglob("*.py"))


def imported_packages(path, package, source=None):
    """``{(epfabric package, line)}`` a module imports (absolute or relative)."""
    rel = path.relative_to(ROOT / package).with_suffix("")
    parts = [package, *rel.parts]
    if parts[-1] == "__init__":
        parts = parts[:-1]
    is_pkg = path.name == "__init__.py"
    found = set()
    source = path.read_text() if source is None else source
    for node in ast.walk(ast.parse(source, str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                name = alias.name.split(".")
                if name[0] == "epfabric" and len(name) > 1:
                    found.add((name[1], node.lineno))
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0:
                name = (node.module or "").split(".")
                if name[0] == "epfabric":
                    found.add((name[1] if len(name) > 1 else
                               node.names[0].name, node.lineno))
            else:
                base = parts if is_pkg else parts[:-1]
                up = node.level - 1
                if up >= len(base):
                    # above the package: epfabric.<module or first imported name>
                    target = (node.module or "").split(".")[0] or node.names[0].name
                    found.add((target, node.lineno))
                else:
                    found.add((base[0], node.lineno))
    return {(pkg, line) for pkg, line in found if pkg in PACKAGES}


@pytest.mark.parametrize("package", PACKAGES)
def test_imports_go_one_way(package):
    bad = []
    for path in modules(package):
        for target, line in imported_packages(path, package):
            if target not in ALLOWED[package]:
                bad.append(f"{path.relative_to(ROOT)}:{line} imports epfabric.{target}")
    assert not bad, "layering violations:\n" + "\n".join(bad)


def test_the_checker_sees_relative_and_lazy_imports():
    """A planted violation in each form is found (so the check above can fail)."""
    source = ("from ..sw import presets\n"
              "def f():\n    from epfabric.sim import backends\n"
              "import epfabric.sw.isa\n"
              "from . import link\n")
    found = {t for t, _line in imported_packages(ROOT / "hw" / "probe.py", "hw", source)}
    assert found == {"sw", "sim", "hw"}
