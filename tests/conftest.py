"""pytest configuration: simulator parametrisation and waveform requests.

* ``simulator`` fixture: tests that take it run once per simulator (pysim,
  icarus, verilator). A missing simulator skips with its reason, or fails when
  ``EPFABRIC_REQUIRE_ALL_SIMULATORS=1`` (set by ``.ci/run``).
* ``--waveforms`` (or ``EPFABRIC_WAVEFORMS=1``): the ``waveform`` fixture gives
  the test's name, and harness runs write ``waveforms/<name>.vcd`` + ``.gtkw``.
"""

import os
import re

import pytest

from epfabric.sim.backends import SIMULATORS, missing_reason


def pytest_addoption(parser):
    parser.addoption("--waveforms", action="store_true",
                     help="write waveforms/<test name>.vcd and .gtkw for harness runs")


def pytest_configure(config):
    # Builds and waveforms are written relative to the repository, not the cwd.
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    os.environ.setdefault("EPFABRIC_BUILD_DIR", os.path.join(root, "build", "sim"))
    os.environ.setdefault("EPFABRIC_WAVEFORM_DIR", os.path.join(root, "waveforms"))


@pytest.fixture(params=SIMULATORS)
def simulator(request):
    sim = request.param
    reason = missing_reason(sim)
    if reason:
        if os.environ.get("EPFABRIC_REQUIRE_ALL_SIMULATORS") == "1":
            pytest.fail(f"{sim} required (EPFABRIC_REQUIRE_ALL_SIMULATORS=1) but {reason}")
        pytest.skip(f"{sim}: {reason}")
    return sim


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
