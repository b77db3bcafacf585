"""The ``alltoall`` Token-Flag-Fusion kernel (sw/kernels/alltoall.py)."""

import numpy as np

from epfabric.sw.kernels import alltoall

from utils import machine


def test_every_block_arrives_once_in_place():
    m = machine()
    tok = alltoall.load(m, seed=5)
    report = m.run(20_000)
    verdict = alltoall.check(m, report, tok)
    assert verdict["correct"], verdict["problems"]
    assert verdict["blocks"] == m.ranks * m.config.cores


def test_checker_sees_a_wrong_block():
    m = machine()
    tok = alltoall.load(m, seed=5)
    report = m.run(20_000)
    wrong = tok.copy()
    wrong[1, 0, 0, 3] ^= np.uint64(1)                   # what rank 1 core 0 sent to rank 0
    verdict = alltoall.check(m, report, wrong)
    assert verdict["problems"] == ["rank 0 block from (rank 1, core 0) differs"]


def test_program_does_not_depend_on_data():
    """Different tokens, same programs: only memory contents change."""
    programs = []
    for seed in (1, 2):
        m = machine()
        alltoall.load(m, seed=seed)
        programs.append(dict(m._programs))
    assert programs[0] == programs[1]
    assert not np.array_equal(alltoall.tokens(m.config, 1), alltoall.tokens(m.config, 2))


def test_trace_too_small_for_the_done_marks_is_refused_and_detected():
    """Two MARKs per core: a smaller trace buffer would drop DONE marks (seen at 32 dies x 2 AIVs)."""
    import pytest
    cores = 2 * 2                                        # MACHINE: 2 ranks x 2 AIVs
    with pytest.raises(ValueError, match=f"trace_depth >= {2 * cores} .*not {2 * cores - 1}"):
        alltoall.load(machine(trace_depth=2 * cores - 1))
    m = machine(trace_depth=2 * cores)
    tok = alltoall.load(m, seed=5)
    report = m.run(20_000)
    assert alltoall.check(m, report, tok)["correct"]
    report.trace_dropped = 3                              # what a too-small buffer reports
    assert "the MARK trace dropped 3 events" in alltoall.check(m, report, tok)["problems"][0]


def test_machine_sizes_fit_the_kernel():
    from epfabric.sw.driver import MachineConfig
    cfg = MachineConfig("cm384", topology=("superpod", 2, 8, 2), aivs_per_die=2)   # 32 ranks
    sizes = alltoall.machine_sizes(cfg)
    longest = max(len(alltoall.program(cfg, r, c).assemble()) for r in range(32) for c in range(2))
    assert sizes["imem_depth"] >= longest > 256         # a fixed 256-word imem would not hold it
    assert sizes["hbm_blocks"] >= alltoall.blocks_needed(cfg)
    assert sizes["trace_depth"] >= alltoall.marks_needed(cfg) == 128
    assert all(v & (v - 1) == 0 for v in sizes.values())
