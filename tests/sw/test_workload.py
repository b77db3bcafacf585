"""Routing replay (``routing=FILE``): a workload's routing and weights from a .npz/.npy file."""

import numpy as np
import pytest

from epfabric.sim.backends.machine import backend
from epfabric.sw.kernels import KERNELS, run_kernel
from epfabric.sw.machine import Machine
from epfabric.sw.ubep.workload import Workload, read_routing
from utils import SMALL_DISPATCH, fast_simulator

K = KERNELS["dispatch"]
SMALL = SMALL_DISPATCH          # the small case (tests/utils.py), shared with other files
SHAPE = dict(preset="tiny", topology=("superpod", 2, 1, 1), aivs=2)
#: 2 ranks x 4 tokens x top-2, skewed: expert 0 takes 6 of the 16 slots, expert 2 only 2
IDX = np.array([[[0, 1], [0, 3], [3, 0], [1, 3]],
                [[0, 2], [1, 0], [3, 2], [0, 1]]], dtype=np.int32)
WTS = (np.arange(IDX.size, dtype=np.int16).reshape(IDX.shape) % 7) + 1


def _npz(tmp_path, name="routing.npz", **arrays):
    path = tmp_path / name
    np.savez(path, **arrays) if name.endswith(".npz") else np.save(path, arrays["topk_idx"])
    return str(path)


@pytest.mark.parametrize("system", ["cann", "ubep"])
def test_replayed_routing_is_delivered_bit_exact(tmp_path, system):
    """The run takes the file's routing (batch, topk from its shape); counts = numpy's bincount.
    (The machine is the small dispatch case's, test_programs_do_not_depend_on_the_routing_file:
    its build in tests/sw/test_dispatch.py serves this run.)"""
    path = _npz(tmp_path, topk_idx=IDX, topk_weights=WTS)
    result = run_kernel(K, backend(fast_simulator()), **SHAPE,
                        params={"experts": 4, "system": system, "routing": path})
    assert result.correct, result.problems
    assert (result.params["batch"], result.params["topk"]) == (4, 2)
    want = np.bincount(IDX.reshape(-1), minlength=4).reshape(2, 2)   # [rank, local expert]
    assert result.runs[0].check["recv_count"] == want.tolist()
    assert want.tolist() != [[4, 4], [4, 4]]                          # not what a draw gives


def test_the_workload_replays_the_file_and_keeps_the_seeds_tokens(tmp_path):
    params = K.resolve_params({"experts": 4, "routing": _npz(tmp_path, topk_idx=IDX,
                                                             topk_weights=WTS)})
    from epfabric.sw.kernels.dispatch import workload_of
    w = workload_of(params, 2, 8)
    drawn = Workload(ranks=2, batch=4, topk=2, experts=4, words=8)
    assert np.array_equal(w.topk_idx, IDX) and np.array_equal(w.topk_w, WTS)
    assert np.array_equal(w.x, drawn.x)
    # a .npy holds the routing only: the weights stay the seed's
    npy = K.resolve_params({"experts": 4, "routing": _npz(tmp_path, "r.npy", topk_idx=IDX)})
    w = workload_of(npy, 2, 8)
    assert np.array_equal(w.topk_idx, IDX) and np.array_equal(w.topk_w, drawn.topk_w)


def test_programs_do_not_depend_on_the_routing_file(tmp_path):
    """The same configuration and programs as a drawn routing's: only the data differs."""
    path = _npz(tmp_path, topk_idx=IDX)
    for system in ("cann", "ubep"):
        drawn = K.resolve_params({**SMALL, "system": system})
        replay = K.resolve_params({"experts": 4, "system": system, "routing": path})
        cfg = K.configs("tiny", SHAPE["topology"], 2, drawn)[0]
        assert K.configs("tiny", SHAPE["topology"], 2, replay)[0] == cfg
        loaded = []
        for params in (drawn, replay):
            m = Machine(backend=backend("pysim"), config=cfg)
            w = K.load(m, params)[0]
            loaded.append((dict(m._programs), w.topk_idx))
        assert loaded[0][0] == loaded[1][0]
        assert np.array_equal(loaded[1][1], IDX) and not np.array_equal(loaded[0][1], IDX)


@pytest.mark.parametrize("arrays, params, message", [
    ({"topk_idx": IDX[:1]}, {}, r"^routing='.*routing\.npz' has 1 ranks \(its shape \(1, 4, 2\)"
                                r"\); the machine has 2$"),
    ({"topk_idx": np.where(IDX == 3, 4, IDX)}, {},
     r"^routing topk_idx\[0, 1, 1\] \(rank 0, token 1, slot 1\) is 4: expert ids must be in "
     r"\[0, 4\)$"),
    ({"topk_idx": np.where(IDX == 1, 0, IDX)}, {},
     r"^routing topk_idx\[0, 0, 1\] \(rank 0, token 0, slot 1\) repeats expert 0 of slot 0"),
    ({"topk_idx": IDX}, {"batch": 8},
     r"^batch=8 conflicts with routing='.*' \(batch=4 from its shape \(2, 4, 2\)\); give one"),
    ({"topk_idx": IDX}, {"topk": 3},
     r"^topk=3 conflicts with routing='.*' \(topk=2 from its shape"),
    ({"topk_idx": IDX.astype(np.float64)}, {},
     r"^routing='.*': topk_idx must be an integer array, not float64$"),
    ({"topk_idx": IDX, "topk_weights": WTS / 7}, {},
     r"^routing='.*': topk_weights must be an integer array, not float64$"),
    ({"topk_idx": IDX, "topk_weights": np.where(IDX == 2, 70000, WTS.astype(np.int32))}, {},
     r"^routing topk_weights\[1, 0, 1\] \(rank 1, token 0, slot 1\) is 70000: weights are "
     r"16-bit, in \[0, 65535\]$"),
    ({"topk_idx": IDX, "weights": WTS}, {},
     r"^routing='.*' must hold topk_idx \(and optionally topk_weights\), not topk_idx, "
     r"weights$"),
    ({"topk_idx": IDX}, {"hot": 1}, r"^hot=1 draws a routing; routing='.*' replays one"),
])
def test_bad_routing_is_named_before_any_simulation(tmp_path, arrays, params, message,
                                                    no_simulation):
    path = _npz(tmp_path, **arrays)
    with pytest.raises(ValueError, match=message):
        run_kernel(K, backend("pysim"), **SHAPE,
                   params={"experts": 4, "routing": path, **params})


def test_a_missing_or_foreign_file_is_named(tmp_path, no_simulation):
    with pytest.raises(ValueError, match=r"^routing='.*nope\.npz': no such file$"):
        K.resolve_params({"routing": str(tmp_path / "nope.npz")})
    (tmp_path / "r.txt").write_text("0 1\n")
    with pytest.raises(ValueError, match=r"^routing='.*r\.txt' must be a \.npz"):
        read_routing(tmp_path / "r.txt")
    with pytest.raises(ValueError, match=r"^routing must be the path of a \.npz or \.npy file, "
                                         r"not 3$"):
        K.resolve_params({"routing": 3})
