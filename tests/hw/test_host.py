"""The host port (hw/host.py): signature members, registered inputs, run-control counting.

The run control is checked on a minimal top (:class:`Countdown`, finished
``work`` cycles after it starts), cycle by cycle and through the shared
host-side sequence (:func:`epfabric.sim.backends.host.host_run`); the AIV
system's count (a lone ``halt`` gives cycle 1) is in test_system.py.
"""

import pytest
from amaranth.hdl import Fragment, Module, Signal, Value
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from epfabric.hw.host import RUN_OUTPUTS, HostSignature, HostTarget, register_inputs, run_control
from epfabric.sim.backends.host import host_run

from utils import ComponentSpec, run

BASE = {"we", "target", "core", "addr", "wdata", "re", "rvalid", "rdata", "start"}


class Countdown(wiring.Component):
    """A top with the run-control host port whose machine finishes ``work`` cycles after start."""

    def __init__(self):
        super().__init__({"host": In(HostSignature(run=True)), "work": In(8)})

    def elaborate(self, platform):
        m = Module()
        h = register_inputs(m, self.host)
        left = Signal(8)
        with m.If(h["start"]):
            m.d.sync += left.eq(self.work)
        with m.Elif(self.host.running & (left != 0)):
            m.d.sync += left.eq(left - 1)
        run_control(m, self.host, start=h["start"], finished=left == 0, max_cycles=h["max_cycles"])
        return m


SPEC = ComponentSpec("test_host:Countdown")


def test_members_by_option():
    def members(**kw):
        return HostSignature(**kw).members

    assert set(members()) == BASE
    assert set(members(ranks=4)) == BASE | {"rank"}
    assert set(members(ranks=4, all_ranks=True)) == BASE | {"rank", "re_all", "rdata_all"}
    assert set(members(run=True)) == BASE | {"max_cycles", *RUN_OUTPUTS}
    assert set(RUN_OUTPUTS) == {"cycle", "running", "done", "timeout", "stop"}
    full = members(ranks=3, cores=5, all_ranks=True, run=True)
    # named from the host's side: Out is driven by the host, In answers it
    assert {n for n, m in full.items() if m.flow == Out} == {
        "we", "target", "rank", "core", "addr", "wdata", "re", "start", "re_all", "max_cycles"}
    assert {n for n, m in full.items() if m.flow == In} == {
        "rvalid", "rdata", "rdata_all", *RUN_OUTPUTS}
    assert full["rank"].shape == range(3) and full["core"].shape == range(5)
    assert full["rdata_all"].dimensions == (3,) and full["cycle"].shape == 32
    assert members()["core"].shape == range(2)      # one core still gets a 1-bit core member
    assert members()["target"].shape is HostTarget
    assert [t.value for t in HostTarget] == [0, 1, 2, 3, 4, 5]
    assert [t.name for t in HostTarget] == ["IMEM", "HBM", "ENABLE", "CTRL", "HBM_BLOCK", "IMEM_ROW"]
    rows = members(row_bits=256)                    # row writes: a row and one mask bit per word
    assert set(rows) == BASE | {"wrow", "wmask", "rrow"}
    assert set(members(ranks=2, all_ranks=True, row_bits=256)) == BASE | {
        "rank", "re_all", "rdata_all", "wrow", "wmask", "rrow_all"}
    assert rows["wrow"].shape == 256 and rows["wmask"].shape == 8 and rows["wrow"].flow == Out
    with pytest.raises(ValueError, match="row_bits must be a multiple of 32, not 40"):
        HostSignature(row_bits=40)


@pytest.mark.parametrize("kw, exc, match", [
    ({"ranks": 0}, ValueError, r"ranks must be >= 1, not 0"),
    ({"ranks": 2.0}, TypeError, r"ranks must be an integer, not 2.0"),
    ({"cores": 0}, ValueError, r"cores must be >= 1, not 0"),
    ({"cores": "1"}, TypeError, r"cores must be an integer, not '1'"),
    ({"all_ranks": 1}, TypeError, r"all_ranks must be a bool, not 1"),
    ({"run": "yes"}, TypeError, r"run must be a bool, not 'yes'"),
])
def test_bad_parameters(kw, exc, match):
    with pytest.raises(exc, match=match):
        HostSignature(**kw)


def test_register_inputs_registers_every_host_driven_member():
    host = HostSignature(run=True).flip().create(path=("host",))     # a top's host port
    m = Module()
    regs = register_inputs(m, host)
    assert set(regs) == {"we", "target", "core", "addr", "wdata", "re", "start", "max_cycles"}
    for name, reg in regs.items():
        reg = Value.cast(reg)              # the target register is an enum view
        assert reg.name == f"host_{name}_q" and len(reg) == len(Value.cast(getattr(host, name)))
    Fragment.get(m, None)                  # the registers elaborate


async def run_trace(bench, work, max_cycles, ticks):
    """Pulse start and record ``[running, done, timeout, stop, cycle]`` after each tick."""
    bench.set("work", work)
    bench.set("host.max_cycles", max_cycles)
    bench.set("host.start", 1)
    trace = []
    for k in range(ticks):
        await bench.tick()
        bench.set("host.start", 0)
        trace.append([await bench.get(f"host.{name}")
                      for name in ("running", "done", "timeout", "stop", "cycle")])
    return trace


@pytest.mark.parametrize("work", [0, 1, 5])
def test_run_control_counts_cycles_until_finished(work):
    """start acts one edge after it is sampled; ``cycle`` counts the cycles not yet finished."""
    trace, _ = run(SPEC, run_trace, {"work": work, "max_cycles": 100, "ticks": work + 6})
    assert trace[0] == [0, 0, 0, 0, 0]                        # start only sampled so far
    for k in range(work + 1):                                 # running, counting
        assert trace[1 + k] == [1, 0, 0, 0, k]
    for row in trace[work + 2:]:                              # done, count frozen
        assert row == [0, 1, 0, 1, work]


def test_watchdog_stops_at_max_cycles():
    trace, _ = run(SPEC, run_trace, {"work": 50, "max_cycles": 7, "ticks": 14})
    assert trace[1] == [1, 0, 0, 0, 0]
    stops = [k for k, row in enumerate(trace) if row[3]]
    assert stops[0] == 1 + 7
    for row in trace[1 + 7:]:
        assert row == [0, 0, 1, 1, 7]


async def host_runs(bench, runs):
    """:func:`host_run` for each ``[work, max_cycles]`` in turn, on one simulation."""
    out = []
    for work, max_cycles in runs:
        bench.set("work", work)
        out.append(await host_run(bench, max_cycles))
    return out


@pytest.mark.parametrize("work, max_cycles, want", [
    (0, 100, {"cycles": 0, "done": 1, "timeout": 0}),
    (9, 100, {"cycles": 9, "done": 1, "timeout": 0}),
    (50, 12, {"cycles": 12, "done": 0, "timeout": 1}),
])
def test_host_run_reports_the_run(work, max_cycles, want):
    out, _ = run(SPEC, host_runs, {"runs": [[work, max_cycles]]})
    assert out == [want]


def test_host_run_twice_reports_the_second_run():
    """A registered start clears the previous run's ``stop`` one edge late: host_run waits for it."""
    out, _ = run(SPEC, host_runs, {"runs": [[3, 100], [9, 100], [50, 4], [2, 100]]})
    assert out == [{"cycles": 3, "done": 1, "timeout": 0}, {"cycles": 9, "done": 1, "timeout": 0},
                   {"cycles": 4, "done": 0, "timeout": 1}, {"cycles": 2, "done": 1, "timeout": 0}]
