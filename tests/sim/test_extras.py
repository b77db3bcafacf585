"""``epfabric.sim.extras``: a missing optional dependency is one line naming the extra to install."""

import pytest

from epfabric.hw.validate import UserError
from epfabric.sim import extras
from epfabric.sim.backends import toolchain


def test_a_missing_module_names_its_extra():
    reason = extras.missing("cluster", ["no_such_module_epfabric"])
    assert reason == ("the Python package 'no_such_module_epfabric' is not installed, needed for "
                      "Dask scheduling (epfabric reproduce --scheduler): "
                      "pip install 'epfabric[cluster]'")
    with pytest.raises(UserError, match=r"pip install 'epfabric\[fpga\]'"):
        extras.require("fpga", ["no_such_module_epfabric"])


def test_installed_modules_are_not_reported():
    assert extras.missing("cluster", ["json"]) is None
    extras.require("verilator", ["os"])


def test_every_extra_is_declared_in_pyproject():
    """The extras this module names are the ones pip knows (pyproject.toml), and [all] has them."""
    import tomllib
    from pathlib import Path
    project = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())["project"]
    declared = project["optional-dependencies"]
    assert set(extras.EXTRAS) <= set(declared)
    assert declared["all"] == [f"epfabric[{','.join(k for k in declared if k != 'all')}]"]


def test_a_simulator_without_its_extra_names_it(monkeypatch):
    """The Verilator backend without cocotb: the reason names [verilator], not a traceback."""
    real = extras.importlib.util.find_spec
    monkeypatch.setattr(extras.importlib.util, "find_spec",
                        lambda name, *a: None if name == "cocotb" else real(name, *a))
    monkeypatch.setattr(toolchain, "verilator_root", lambda: "/somewhere")
    monkeypatch.setattr(toolchain.shutil, "which", lambda name: "/usr/bin/" + name)
    assert toolchain.missing_reason("verilator") == (
        "the Python package 'cocotb' is not installed, needed for the verilator and native "
        "backends: pip install 'epfabric[verilator]'")
    assert toolchain.missing_reason("native") is None      # native needs no cocotb
    assert "epfabric[icarus]" in toolchain.missing_reason("icarus")
