"""The ``syncall`` barrier kernel (sw/kernels/syncall.py) and its checker."""

import pytest

from epfabric.sw.assembler import Program
from epfabric.sw.config import MachineConfig
from epfabric.sw.kernels import syncall

from utils import machine

KERNEL = syncall.KERNEL


def test_barrier_holds_every_core_until_the_last_arrives():
    m = machine()
    epochs = KERNEL.load(m, {"epochs": 2})
    assert epochs == 2
    report = m.run(2_000)
    verdict = KERNEL.check(m, report, epochs)
    assert verdict["correct"], verdict["problems"]
    assert len(verdict["barrier_cycles"]) == 2 and min(verdict["barrier_cycles"]) > 0
    assert verdict["cycles_per_barrier"] == max(verdict["barrier_cycles"])
    assert verdict["cores"] == m.config.cores == 4
    for e in (1, 2):   # the property itself, from the MARK timestamps
        last_in = max(t["cycle"] for t in report.marks(event=syncall.ENTER + e))
        first_out = min(t["cycle"] for t in report.marks(event=syncall.LEAVE + e))
        assert first_out > last_in


@pytest.mark.parametrize("late", [(0, 1), (1, 0), (1, 1)])
def test_barrier_waits_for_a_late_core(late):
    """The kernel's own barrier with one core arriving late: nobody leaves before it arrives.

    ``late`` is (rank, core): a non-leader on rank 0, the leader of rank 1, a non-leader on
    rank 1. Both barriers are checked; the run needs ~200 cycles.
    """
    m = machine()
    epochs = KERNEL.load(m, {"epochs": 2})
    rank, core = late
    m.load_program(rank, core, _delayed(syncall.program(m.config, rank, core, epochs=2)))
    report = m.run(2_000)
    verdict = KERNEL.check(m, report, epochs)
    assert verdict["correct"], verdict["problems"]
    for e in (1, 2):
        arrival = report.marks(event=syncall.ENTER + e, rank=rank, core=core)[0]["cycle"]
        first_out = min(t["cycle"] for t in report.marks(event=syncall.LEAVE + e))
        assert first_out > arrival, (e, first_out, arrival)


def test_checker_catches_a_broken_barrier():
    """A barrier whose leader does not wait for the others is reported, not passed."""
    m = machine()
    epochs = KERNEL.load(m, {"epochs": 1})

    lazy = MachineConfig(**{**m.config.to_dict(), "aivs_per_die": 1})
    for rank in range(m.ranks):      # leaders wait for one core only: core 1 comes late
        m.load_program(rank, 0, syncall.program(lazy, rank, 0, epochs=1))
    slow = syncall.program(m.config, 0, 1, epochs=1)
    m.load_program(0, 1, _delayed(slow))
    report = m.run(2_000)
    verdict = KERNEL.check(m, report, epochs)
    assert not verdict["correct"]
    assert any("left at cycle" in p or "counter" in p for p in verdict["problems"])


def test_configs_sweep_aivs_per_die():
    """``epfabric run syncall`` runs one machine per AIV count unless --aivs names one."""
    assert [c.aivs_per_die for c in KERNEL.configs("tiny")] == [1, 2, 4]
    assert [c.aivs_per_die for c in KERNEL.configs("tiny", aivs=2)] == [2]
    assert all(c.hbm_blocks == 4 for c in KERNEL.configs("tiny"))


def _delayed(program, spins=40):
    """``program`` preceded by a busy loop, so its core arrives late."""
    p = Program()
    p.li(15, spins)
    p.label("spin")
    p.addi(15, 15, -1)
    p.bne(15, 0, "spin")
    return p.assemble() + program.assemble()


def test_a_barrier_waiting_for_a_core_too_many_names_its_counter():
    """The watchdog names the word a hung core polls by its role in the barrier."""
    from epfabric.sw.machine import WatchdogTimeout
    m = machine()
    KERNEL.load(m, {"epochs": 1})
    greedy = MachineConfig(**{**m.config.to_dict(), "aivs_per_die": 3})  # waits for 3 of 2
    for rank in range(m.ranks):
        for core in range(m.config.aivs_per_die):
            m.load_program(rank, core, syncall.program(greedy, rank, core, epochs=1))
    with pytest.raises(WatchdogTimeout) as info:
        m.run(400)
    text = str(info.value)
    assert "= SYNC[0] (this die's arrivals)" in text or "= SYNC[2] (this die's release)" in text
    assert "outside the kernel's layout" not in text, text
