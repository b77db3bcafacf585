"""Packaging: every folder of code is a package the wheel installs, with its data files.

setup.py discovers the packages under ``hw/``, ``sw/`` and ``sim/`` with
``find_packages``, which only sees folders with an ``__init__.py``: a folder
of modules without one would import from a checkout (as a namespace package)
and be missing from the wheel. ``.ci/wheel-check`` builds the wheel and runs
the main job from it; these checks are the cheap half that runs with the tests.
"""

import tomllib
from pathlib import Path

from setuptools import find_packages

ROOT = Path(__file__).resolve().parent.parent
TOPS = ("hw", "sw", "sim")


def code_folders():
    return sorted({p.parent for top in TOPS for p in (ROOT / top).rglob("*.py")
                   if "__pycache__" not in p.parts})


def test_every_folder_of_modules_is_a_package():
    missing = [str(d.relative_to(ROOT)) for d in code_folders() if not (d / "__init__.py").exists()]
    assert not missing, f"folders without __init__.py (left out of the wheel): {missing}"


def test_setup_discovers_every_package():
    found = set()
    for top in TOPS:
        found |= {f"epfabric.{top}"} | {f"epfabric.{top}.{p}" for p in find_packages(ROOT / top)}
    expected = {"epfabric." + ".".join(d.relative_to(ROOT).parts) for d in code_folders()}
    assert expected <= found, f"not discovered: {sorted(expected - found)}"


def test_data_files_are_package_data():
    """Every non-Python file the code reads next to itself is declared as package data."""
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    for top in TOPS:
        for path in (ROOT / top).rglob("*"):
            if path.suffix in (".vlt", ".cpp", ".h"):
                package = "epfabric." + ".".join(path.parent.relative_to(ROOT).parts)
                assert any(path.match(glob) for glob in data.get(package, ())), \
                    f"{path.relative_to(ROOT)} is not package data of {package}"
