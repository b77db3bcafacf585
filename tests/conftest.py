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
* Amaranth's simulator of a design is built once per test process, not once per backend:
  every test's pysim backends share one keep token (sim/backends/pysim.py ``_simulator``),
  so a later test's run on the same design resets the kept simulator instead of
  elaborating and compiling it again (that was 385 s of a cold run's 1,420 s of test
  time, 213 s of it repeats); harness runs (``run(spec, intent)``) share it too, from the
  session's start, so module-scoped fixtures share as well. A test
  that takes ``monkeypatch`` may change what a design elaborates to: its backends and
  harness runs get simulators of their own (the library's behaviour), so it never runs on
  one built before its patch.
* ``--waveforms`` (or ``EPFABRIC_WAVEFORMS=1``): the ``waveform`` fixture gives
  the test's name, and harness runs write ``waveforms/<name>.vcd`` + ``.gtkw``.
"""

import itertools
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
    from epfabric.sim.backends import pysim
    pysim.SIMULATOR_CACHE = SHARED_SIMULATORS
    _share_simulators(True)


#: the keep token every test's pysim backend shares (see the module docstring)
SHARED_KEEP = "tests"
#: designs a test process keeps simulators of (the library keeps 4)
SHARED_SIMULATORS = 8


#: the library's keep tokens and pysim runner, put back while a test that patches runs
_LIBRARY = {}


def _share_simulators(on):
    """Every pysim backend and harness run shares :data:`SHARED_KEEP` (``on``), or has a
    simulator of its own (the library's behaviour)."""
    from epfabric.sim.backends import machine, pysim
    if not _LIBRARY:
        _LIBRARY.update(tokens=machine._KEEP_TOKENS, run_pysim=pysim.run_pysim)
    if not on:
        machine._KEEP_TOKENS, pysim.run_pysim = _LIBRARY["tokens"], _LIBRARY["run_pysim"]
        return
    run_pysim = _LIBRARY["run_pysim"]

    def shared(spec, intent, args, waveform=None, keep=None):      # harness runs too
        return run_pysim(spec, intent, args, waveform, keep=SHARED_KEEP if keep is None else keep)

    machine._KEEP_TOKENS, pysim.run_pysim = itertools.repeat(SHARED_KEEP), shared


@pytest.fixture(autouse=True)
def _own_simulators_when_patching(request):
    """Sharing is on for the whole session (:func:`pytest_configure`), module-scoped fixtures
    included; a test that takes ``monkeypatch`` gets backends and harness runs of its own
    for its duration (the kept ones stay: built unpatched, valid after the undo)."""
    if "monkeypatch" not in request.fixturenames:
        yield
        return
    _share_simulators(False)
    try:
        yield
    finally:
        _share_simulators(True)


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


@pytest.fixture(autouse=True)
def _collect_after_each_test():
    """``EPFABRIC_GC_EACH_TEST=1``: collect garbage after every test, so that an elaboratable a
    test built and never elaborated warns (an error, pyproject.toml) in that test's teardown
    instead of in whichever later test the collector happens to run in."""
    yield
    if os.environ.get("EPFABRIC_GC_EACH_TEST") == "1":
        import gc
        gc.collect()
