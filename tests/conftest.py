"""pytest configuration: simulator parametrisation and waveform requests.

* ``simulator`` fixture: tests that take it run once per simulator (pysim,
  icarus, verilator); ``hdl_simulator``: once per Verilog simulator (icarus,
  verilator, native), for tests that compare a run against Amaranth's
  simulator — a ``[pysim]`` case of such a test would compare pysim with
  itself. ``native`` (Verilated modules stepped from a C++ top) is the same
  Verilator model in pieces; the comparison tests are where it must agree. A missing
  simulator skips with its reason, or fails when
  ``EPFABRIC_REQUIRE_ALL_SIMULATORS=1`` (set by ``.ci/run``): both fixtures, and
  every test that needs a tool, go through :func:`utils.require_simulator`.
* Verilator builds at ``-O0`` unless ``EPFABRIC_VERILATOR_OPT`` says otherwise
  (short runs, many builds: the build dominates).
* ``--waveforms`` (or ``EPFABRIC_WAVEFORMS=1``): the ``waveform`` fixture gives
  the test's name, and harness runs write ``waveforms/<name>.vcd`` + ``.gtkw``.
"""

import os
import re

import pytest

from epfabric.sim.backends import SIMULATORS
from utils import require_simulator


def pytest_addoption(parser):
    parser.addoption("--waveforms", action="store_true",
                     help="write waveforms/<test name>.vcd and .gtkw for harness runs")


def pytest_configure(config):
    # Builds and waveforms are written relative to the repository, not the cwd.
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    os.environ.setdefault("EPFABRIC_BUILD_DIR", os.path.join(root, "build", "sim"))
    os.environ.setdefault("EPFABRIC_WAVEFORM_DIR", os.path.join(root, "waveforms"))
    # The tests' runs are short and their Verilator builds many: -O0 hot code builds in about
    # 60 % of -O1's time (Makefile, `run`); the cycles are the same at every level.
    os.environ.setdefault("EPFABRIC_VERILATOR_OPT", "-O0")


@pytest.fixture(params=[s for s in SIMULATORS if s != "native"])
def simulator(request):
    require_simulator(request.param)
    return request.param


@pytest.fixture(params=[s for s in SIMULATORS if s != "pysim"])
def hdl_simulator(request):
    """icarus, verilator or native: the run a test compares with Amaranth's simulator."""
    require_simulator(request.param)
    return request.param


@pytest.fixture
def waveform(request):
    wanted = request.config.getoption("--waveforms") or os.environ.get("EPFABRIC_WAVEFORMS") == "1"
    if not wanted:
        return None
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", request.node.name).strip("_")


@pytest.fixture
def no_simulation(monkeypatch):
    """Any attempt to build or run a simulation fails the test (bad input must stop earlier)."""
    def forbidden(*args, **kwargs):
        raise AssertionError("a simulation was started")
    monkeypatch.setattr("epfabric.sim.backends.pysim.run_pysim", forbidden)
    monkeypatch.setattr("epfabric.sim.backends.cocotb_runner.run_cocotb", forbidden)
    monkeypatch.setattr("epfabric.sim.backends.cocotb_runner.build", forbidden)
    monkeypatch.setattr("epfabric.sim.backends.native.run_native", forbidden)
    monkeypatch.setattr("epfabric.sim.backends.native.build_native", forbidden)
