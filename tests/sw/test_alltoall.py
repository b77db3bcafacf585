"""The ``alltoall`` Token-Flag-Fusion kernel (sw/kernels/alltoall.py)."""

import numpy as np
import pytest

from epfabric.sw.isa import address
from epfabric.sw.kernels import KERNELS, alltoall

from utils import machine

KERNEL = alltoall.KERNEL


def test_registered_under_its_name():
    assert KERNELS["alltoall"] is KERNEL and KERNEL.defaults == {"seed": 0}


def test_every_block_arrives_once_in_place():
    m = machine()
    tok = KERNEL.load(m, {"seed": 5})
    report = m.run(1_000)                                # ~60 cycles needed
    verdict = KERNEL.check(m, report, tok)
    assert verdict["correct"], verdict["problems"]
    assert verdict["blocks"] == m.ranks * m.config.cores
    # exactly once: every rank sent and received one block per (core, destination) —
    # a second copy of a block would leave memory as it is but count here
    senders = m.config.cores
    assert report.counters["tx_blocks"] == [m.config.aivs_per_die * m.ranks] * m.ranks
    assert report.counters["rx_blocks"] == [senders] * m.ranks
    # ... and nowhere else: outside the receive blocks every word is what the host placed
    recv, send = alltoall.layout(m.config)
    words = m.config.hbm_blocks * 128
    for d in range(m.ranks):
        got = np.array(m.read_mem(d, address(0, 0), words)).reshape(-1, 128)
        want = np.zeros_like(got)
        for c in range(m.config.aivs_per_die):
            for dst in range(m.ranks):
                want[send + c * m.ranks + dst, :m.config.words_per_block] = tok[d, c, dst]
        outside = [b for b in range(m.config.hbm_blocks) if not recv <= b < recv + senders]
        assert np.array_equal(got[outside], want[outside]), d


def test_checker_sees_a_wrong_block():
    m = machine()
    tok = KERNEL.load(m, {"seed": 5})
    report = m.run(1_000)
    wrong = tok.copy()
    wrong[1, 0, 0, 3] ^= np.uint64(1)                   # what rank 1 core 0 sent to rank 0
    verdict = KERNEL.check(m, report, wrong)
    assert verdict["problems"] == ["rank 0 block from (rank 1, core 0) differs"]
    assert not verdict["correct"]


def test_program_does_not_depend_on_data():
    """Different tokens, same programs: only memory contents change."""
    programs = []
    for seed in (1, 2):
        m = machine()
        KERNEL.load(m, {"seed": seed})
        programs.append(dict(m._programs))
    assert programs[0] == programs[1]
    assert not np.array_equal(alltoall.tokens(m.config, 1), alltoall.tokens(m.config, 2))


def test_trace_too_small_for_the_done_marks_is_refused_and_detected():
    """Two MARKs per core: a smaller trace buffer would drop DONE marks (seen at 32 dies x 2 AIVs)."""
    cores = 2 * 2                                        # MACHINE: 2 ranks x 2 AIVs
    with pytest.raises(ValueError, match=f"trace_depth >= {2 * cores} .*not {2 * cores - 1}"):
        KERNEL.load(machine(trace_depth=2 * cores - 1), {"seed": 0})
    m = machine(trace_depth=2 * cores)
    tok = KERNEL.load(m, {"seed": 5})
    report = m.run(1_000)
    assert KERNEL.check(m, report, tok)["correct"]
    report.trace_dropped = 3                              # what a too-small buffer reports
    assert "the MARK trace dropped 3 events" in KERNEL.check(m, report, tok)["problems"][0]


def test_too_few_hbm_blocks_is_refused():
    m = machine(hbm_blocks=4)                            # MACHINE needs 1 + 4 + 4 blocks
    with pytest.raises(ValueError, match=f"alltoall needs hbm_blocks >= "
                                         f"{alltoall.blocks_needed(m.config)}, not 4"):
        KERNEL.load(m, {"seed": 0})


def test_machine_sizes_fit_the_kernel():
    from epfabric.sw.config import MachineConfig
    cfg = MachineConfig("cm384", topology=("superpod", 2, 8, 2), aivs_per_die=2)   # 32 ranks
    sizes = alltoall.machine_sizes(cfg)
    longest = max(len(alltoall.program(cfg, r, c).assemble()) for r in range(32) for c in range(2))
    assert sizes["imem_depth"] >= longest > 256         # a fixed 256-word imem would not hold it
    assert sizes["hbm_blocks"] >= alltoall.blocks_needed(cfg)
    assert sizes["trace_depth"] >= alltoall.marks_needed(cfg) == 128
    assert all(v & (v - 1) == 0 for v in sizes.values())
    # the kernel's own configuration of that shape is sized by machine_sizes
    (config,) = KERNEL.configs("cm384", ("superpod", 2, 8, 2), 2)
    assert {k: getattr(config, k) for k in sizes} == sizes


def test_the_watchdog_names_the_receive_and_send_slots():
    m = machine()
    KERNELS["alltoall"].load(m, KERNELS["alltoall"].resolve_params({}))
    recv, send = alltoall.layout(m.config)
    assert m.describe(recv + 1, 0) == "RECV block 1 word 0"
    assert m.describe(send, 5) == "SEND block 0 word 5"
    assert m.describe(0, 0) == "outside the kernel's layout (block 0)"
