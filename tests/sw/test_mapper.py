"""Quaternary search (sw/mapper.py) against the numpy reference."""

import asyncio

import numpy as np
import pytest

from epfabric.sw.mapper import quaternary_search, reference_lookup


def numpy_count3(expert_list):
    arr = np.asarray(expert_list)

    async def count3(pivots):
        return [int((arr < p).sum()) for p in pivots]
    return count3


@pytest.mark.parametrize("n_experts", [1, 2, 3, 4, 5, 7, 16, 64, 256, 257])
def test_every_target_matches_numpy(n_experts):
    rng = np.random.default_rng(n_experts)
    # Skewed routing leaves many experts empty: the search must skip them.
    expert_list = rng.zipf(1.5, 300) % n_experts
    count3 = numpy_count3(expert_list)
    for target in range(len(expert_list)):
        expert, offset, _ = asyncio.run(quaternary_search(count3, target, n_experts))
        assert (expert, offset) == reference_lookup(expert_list, target, n_experts)


def test_steps_are_logarithmic_base_four():
    """256 experts: four narrowing steps plus the final count (UBEP: 4-5 steps)."""
    expert_list = np.arange(256).repeat(2)
    _, _, counts = asyncio.run(quaternary_search(numpy_count3(expert_list), 300, 256))
    assert counts == 5


def test_bad_expert_count():
    with pytest.raises(ValueError, match="n_experts must be >= 1, not 0"):
        asyncio.run(quaternary_search(numpy_count3([0]), 0, 0))
