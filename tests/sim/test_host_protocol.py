"""The host-port protocol coroutines (sim/backends/host.py), without a simulator."""

import pytest

from epfabric.sim import output
from epfabric.sim.backends.host import host_read_all, host_write
from epfabric.sim.backends.testbench import SimulationError


class _Bench:
    """Records what host_write drives; every port exists, ticks cost nothing."""

    def __init__(self):
        self.ticks, self.sets = 0, []

    def has_port(self, path):
        return True

    def set(self, path, value):
        self.sets.append((path, value))

    async def tick(self, n=1):
        self.ticks += n

    async def get(self, path):
        return 0                                 # a port that never answers


def _drive(coro):
    try:
        coro.send(None)
    except StopIteration:
        return


def test_a_long_load_reports_progress(monkeypatch, capsys):
    """One write per cycle; past PROGRESS_AFTER_S (here 0) a load names how far it got, every
    4096 writes at most (S1's 1.8 M instruction words loaded for minutes without a word)."""
    monkeypatch.setattr(output, "PROGRESS_AFTER_S", 0.0)
    monkeypatch.delenv("EPFABRIC_QUIET", raising=False)
    bench = _Bench()
    _drive(host_write(bench, [[1, 0, 0, 4 * i, i] for i in range(10_000)]))
    assert bench.ticks == 10_000 and bench.sets[-1] == ("host.we", 0)
    lines = capsys.readouterr().err.splitlines()
    assert [line.split(" host writes")[0] for line in lines] == [
        "[epfabric] loading: 4096 of 10000", "[epfabric] loading: 8192 of 10000"]


def test_a_short_load_is_quiet(capsys):
    bench = _Bench()
    _drive(host_write(bench, [[1, 0, 0, 4 * i, i] for i in range(10_000)]))
    assert capsys.readouterr().err == ""


def test_a_read_back_the_port_never_answers_is_an_error_not_a_hang():
    """A host port whose rvalid never rises (a model skipped while busy did that) ends the
    read-back ``drain`` cycles after its last read, naming the unanswered reads."""
    bench = _Bench()
    with pytest.raises(SimulationError, match=r"^host: 3 of 3 read-back addresses unanswered 50 "
                                              r"cycles after the last read \(first: 0x10\)"):
        _drive(host_read_all(bench, 2, [0x10, 0x14, 0x18], drain=50))
    assert bench.ticks == 3 + 50
