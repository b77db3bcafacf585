"""``epfabric.sw.buffer.Buffer`` with what a DeepEP user passes: bf16, fp16 or fp32 ``x``, float
weights, ``y`` in ``x``'s dtype (the layout and the roundings: sw/buffer.py's docstring)."""

import importlib.util
import subprocess
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from epfabric.hw.validate import UserError
from epfabric.sim.backends.machine import backend
from epfabric.sw.buffer import ELEMS_PER_BLOCK, Buffer
from epfabric.sw.kernels import KERNELS
from epfabric.sw.ubep.reference import combine_out, dispatch_out
from epfabric.sw.ubep.workload import Workload
from utils import machine_simulator, require

# test_buffer.py's shape; a ubep-inc buffer's bf16 machine is tests/sw/test_combine_bf16.py's
# native build (the float rounds below run on it)
SHAPE = dict(preset="tiny", topology=("superpod", 2, 1, 1), aivs=2, batch=4, topk=2, experts=4,
             max_cycles=5_000)
BF16 = ml_dtypes.bfloat16


def _routing(seed):
    """Distinct top-2 experts of 4 and softmax weights (float32) per token, 2 ranks x 4 tokens."""
    rng = np.random.default_rng(seed)
    logits = rng.standard_normal((2, 4, 4))
    idx = np.argsort(-logits, axis=-1)[..., :2]
    top = np.exp(np.take_along_axis(logits, idx, -1))
    return idx, (top / top.sum(-1, keepdims=True)).astype(np.float32)


def _expert(e, rows):
    """Expert ``e``'s stand-in FFN, elementwise in fp32 (not a bf16 value in general)."""
    return rows.astype(np.float32) * np.float32(0.37 * (e + 1)) + np.float32(0.1 * e - 0.15)


def _numpy_order(x, idx, weights):
    """``y`` of the documented order, written out here: ``o`` = bf16(expert row), ``w`` =
    bf16(weight), ``acc = o_0·w_0``, ``acc += o_i·w_i`` in fp32, ``y = bf16(acc)``."""
    w = weights.astype(BF16).astype(np.float32)
    y = np.zeros(x.shape, dtype=BF16)
    for s, t in np.ndindex(*idx.shape[:2]):
        acc = None
        for i, e in enumerate(idx[s, t]):
            term = _expert(e, x[s, t]).astype(BF16).astype(np.float32) * w[s, t, i]
            acc = term if acc is None else acc + term
        y[s, t] = acc.astype(BF16)
    return y


@pytest.fixture(scope="module")
def buf():
    """A pysim UBEP buffer for the checks that never reach a simulation."""
    return Buffer(backend("pysim"), system="ubep", **SHAPE)


def _inputs(seed=0, dtype=BF16):
    idx, wts = _routing(seed)
    x = np.random.default_rng(seed + 10).standard_normal((2, 4, ELEMS_PER_BLOCK))
    return x.astype(dtype), idx, wts


def _bad(case):
    """``(x, topk_idx, topk_weights)`` made bad in one way (test_bad_inputs)."""
    x, idx, wts = _inputs()
    if case == "float64 x":
        x = x.astype(np.float64)
    elif case == "float8 x":
        x = x.astype(ml_dtypes.float8_e4m3fn)
    elif case == "complex x":
        x = x.astype(np.float32).astype(np.complex64)
    elif case == "NaN weight":
        wts[1, 2, 0] = np.nan
    elif case == "weights of the wrong shape":
        wts = wts[..., 0]
    elif case == "infinite x":
        x[0, 3, 17] = np.inf
    elif case == "x past bf16":
        x = x.astype(np.float32)
        x[1, 0, 5] = 3.4e38
    elif case == "x of another hidden":
        x = x[..., :100]
    elif case == "integer x, float weights":
        x = np.zeros((2, 4, 1, 128), dtype=np.uint32)
    return x, idx, wts


BAD = {
    "float64 x": r"x must be bfloat16, float16 or float32, not float64; convert it first",
    "float8 x": r"x must be bfloat16, float16 or float32, not float8_e4m3fn, or integer 32-bit",
    "complex x": r"x must be bfloat16, float16 or float32, not complex64",
    "NaN weight": r"topk_weights\[1, 2, 0\] \(rank 1, token 2, slot 0\) is nan: weights must "
                  r"be finite",
    "weights of the wrong shape": r"topk_weights must have topk_idx's shape \(2, 4, 2\), not "
                                  r"\(2, 4\)",
    "infinite x": r"x\[0, 3, 17\] is inf: the combine is checked bit for bit",
    "x past bf16": r"x\[1, 0, 5\] is 3.4e\+38 \(bf16 rounds it to inf\)",
    "x of another hidden": r"hidden must equal the Buffer's hidden \(240\), not 100",
    "integer x, float weights": r"topk_weights must be an integer array \(the hardware sums "
                                r"16-bit integer lanes when x is integer words\), not float32",
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_inputs_are_one_line_errors_before_any_run(buf, no_simulation, case):
    with pytest.raises(UserError, match="^" + BAD[case]) as err:
        buf.dispatch(*_bad(case))
    assert "\n" not in str(err.value)
    assert buf.epoch == 0


def test_bf16_on_the_in_network_system_goes_to_the_run(no_simulation):
    """A float call with ``system="ubep-inc"`` is taken (the combine kernel sums bf16 in the
    switches): the buffer checks it and goes on to the run (here: the no-simulation guard)."""
    inc = Buffer(backend("pysim"), system="ubep-inc", **SHAPE)
    assert inc.config.ep_window
    with pytest.raises(AssertionError, match="a simulation was started"):
        inc.dispatch(*_inputs())


@pytest.mark.slow           # a native build of its own (about 85 s cold); the kernel's in-network
def test_an_in_network_bf16_round_is_within_the_kernels_bound():   # bf16 runs in CI
    """Dispatch and combine of bf16 rows with float weights on ``system="ubep-inc"``: the
    buffer's check (the kernel's: y within the in-network bound, sw/ubep/bf16.py) passes and
    y is x's dtype, close to the plain numpy sum of the same rounded inputs."""
    inc = Buffer(backend(machine_simulator()), system="ubep-inc", **SHAPE)
    x, idx, wts = _inputs(3)
    recv = inc.dispatch(x, idx, wts)
    outs = [(r.astype(np.float32) * 0.5).astype(BF16) for r in recv.recv_x]
    y, _ = inc.combine(outs, recv.handle)
    assert all(np.asarray(v).dtype == BF16 for v in y)
    for s in range(2):
        want = np.zeros((4, x.shape[2]))
        for t in range(4):
            for i in range(2):
                w = float(np.float32(wts[s, t, i]).astype(BF16))
                want[t] += w * 0.5 * x[s, t].astype(np.float64)
        got = np.asarray(y[s]).astype(np.float64)
        assert np.allclose(got, want, rtol=2 ** -6, atol=2 ** -6 * np.abs(want).max())


def test_hidden_sizes_the_blocks(no_simulation):
    shape = dict(SHAPE)
    assert Buffer(backend("pysim"), hidden=241, **shape).params["hidden_blocks"] == 2
    assert Buffer(backend("pysim"), hidden=200, **shape).hidden == 200
    with pytest.raises(UserError, match=r"^hidden=500 needs 3 blocks of 240 bf16 elements; "
                                        r"hidden_blocks=2 hold 480$"):
        Buffer(backend("pysim"), hidden=500, hidden_blocks=2, **shape)


def test_fp16_and_fp32_reach_the_machine_rounded_to_bf16_and_come_back(buf):
    """The host's conversions (no run): nearest-even to bf16 in words 8..127 of each block,
    words 0..7 zero; back to the caller's dtype (fp16 past its range: inf)."""
    ties = np.array([1 + 2 ** -8, 1 + 3 * 2 ** -8, 65504, -2 ** -20], dtype=np.float32)
    x = np.zeros((1, ELEMS_PER_BLOCK), dtype=np.float32)
    x[0, :4] = ties
    words = buf._words(x.astype(BF16))
    assert words.shape == (1, 1, 128) and not words[0, 0, :8].any()
    assert words[0, 0, 8] == 0x3F80 | 0x3F82 << 16             # 1.0 (tie to even), 1 + 2^-6
    back = buf._values(words, np.float32)
    assert back[0, :4].tolist() == [1.0, 1 + 2 ** -6, 65536.0, -2 ** -20]
    assert np.isinf(buf._values(words, np.float16)[0, 2])
    assert buf._values(words, np.float16).dtype == np.float16


def test_float_rounds_on_the_bf16_machine():
    """fp32 x on CANN, then bf16 x on UBEP, on one buffer: the receive fields, bad expert
    outputs refused before the combine runs, and y bit for bit the documented order.

    On the native backend when present: tests/sw/test_combine_bf16.py's build. The buffer is
    built with ``system="ubep-inc"`` (its machine runs every system; each call names its
    own): its float calls then run on the combine kernel's ``ubep-inc`` bf16 machine at this
    shape, the machine test_combine_bf16 runs CANN, UBEP and UBEP-INC on.
    """
    fp = Buffer(backend(machine_simulator()), system="ubep-inc", **SHAPE)
    for seed, system, dtype in ((1, "cann", np.float32), (2, "ubep", BF16)):
        x, idx, wts = _inputs(seed, dtype)
        recv = fp.dispatch(x, idx, wts, system=system)
        assert fp.config.fp is False and recv.handle["machine"].config.fp
        rounded = x.astype(BF16)
        for d in range(2):
            assert recv.recv_x[d].dtype == dtype
            src = recv.handle["recv_src_idx"][d]
            assert np.array_equal(recv.recv_x[d], rounded[src[:, 0], src[:, 1]].astype(dtype))
            assert recv.recv_topk_weights[d].dtype == np.float32
            rows, cols = np.nonzero(recv.recv_topk_idx[d] >= 0)
            assert np.array_equal(recv.recv_topk_weights[d][rows, cols],
                                  wts[src[rows, 0], src[rows, 1], cols])
        outs = [np.stack([_expert(d * 2 + i.max(), row) for row, i in zip(rows, ids)])
                for d, (rows, ids) in enumerate(zip(recv.recv_x, recv.recv_topk_idx))]
        bad = [o.copy() for o in outs]
        bad[1][0, 3] = np.nan
        with pytest.raises(UserError, match=r"^expert_out\[1\]\[0, 3\] is nan"):
            fp.combine(bad, recv.handle)
        with pytest.raises(UserError, match=rf"^expert_out\[0\] must be {len(outs[0])} x 240"):
            fp.combine([outs[0][:, :10], outs[1]], recv.handle)
        y, _ = fp.combine(outs, recv.handle)
        want = _numpy_order(rounded, idx, wts)
        for s in range(2):
            assert y[s].dtype == dtype
            assert np.array_equal(y[s].astype(BF16).view(np.uint16), want[s].view(np.uint16))


def _integer_round(buf, seed, system=None):
    """One integer dispatch + combine on ``buf``, each against numpy (UBEP's payload words)."""
    w0 = Workload(ranks=2, batch=4, topk=2, experts=4, words=128, seed=seed)
    recv, per_expert, handle, _ = buf.dispatch(w0.x, w0.topk_idx, w0.topk_w, system=system)
    want = dispatch_out(w0)[0]
    for d in range(2):
        assert np.array_equal(recv[d][:, :, 4:], want[d][:, :, 4:])
        assert sum(per_expert[d]) == len(want[d])
    outs = [(r.astype(np.uint64) * 3 + d) & 0xFFFF_FFFF for d, r in enumerate(recv)]
    y, _ = buf.combine(outs, handle)
    ref = combine_out(w0, outs)
    for s in range(2):
        assert np.array_equal(y[s][:, :, 4:], ref[s][:, :, 4:])
    return handle


def test_an_in_network_buffer_runs_an_integer_round():
    """``system="ubep-inc"``: the in-network dispatch and combine through the Buffer, integer
    words (16-bit lanes), against numpy."""
    inc = Buffer(backend("pysim"), system="ubep-inc", **SHAPE)
    assert _integer_round(inc, 1)["system"] == "ubep-inc"


@pytest.mark.slow           # a minute of pysim (three rounds); one in-network round runs above
def test_an_in_network_buffer_switches_systems():
    """UBEP, then UBEP-INC, then CANN on one in-network buffer (its layout holds every
    system's regions; each call's epoch tags the flags an earlier call left)."""
    inc = Buffer(backend("pysim"), system="ubep-inc", **SHAPE)
    for seed, system in ((1, "ubep"), (2, "ubep-inc"), (3, "cann")):
        assert _integer_round(inc, seed, system)["system"] == system


def test_tensors_in_tensors_out():
    """PyTorch is optional: with it, bf16 tensors in give bf16 tensors out."""
    require("PyTorch", None if importlib.util.find_spec("torch") else "not installed",
            optional=True)
    import torch
    fp = Buffer(backend(machine_simulator()), system="ubep-inc", **SHAPE)   # as above: one build
    x, idx, wts = _inputs(3)
    xt = torch.from_numpy(x.astype(np.float32)).to(torch.bfloat16)
    recv = fp.dispatch(xt, torch.from_numpy(idx), torch.from_numpy(wts), system="ubep")
    assert all(r.dtype == torch.bfloat16 for r in recv.recv_x)
    outs = [torch.from_numpy(np.stack([_expert(d * 2 + i.max(), row) for row, i in
                                       zip(rows.float().numpy(), ids.numpy())]))
            for d, (rows, ids) in enumerate(zip(recv.recv_x, recv.recv_topk_idx))]
    y, _ = fp.combine(outs, recv.handle)
    assert y[0].dtype == torch.bfloat16
    want = _numpy_order(xt.float().numpy().astype(BF16), idx, wts)
    assert np.array_equal(torch.stack(y).float().numpy(), want.astype(np.float32))


@pytest.mark.slow           # pysim, the bf16 machine: the same path runs natively above
def test_the_readmes_deepep_script_prints_what_the_readme_says(tmp_path):
    """The README's runnable DeepEP-style script, run as written in an empty folder, prints
    the lines the README shows under it (its last check: every element of y within the
    stated bound of the plain numpy layer)."""
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    after = readme.split("Runnable as is", 1)[1]
    script = after.split("```python\n", 1)[1].split("```", 1)[0]
    printed = after.split("prints\n```\n", 1)[1].split("```", 1)[0]
    run = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True,
                         text=True, timeout=600)
    assert run.returncode == 0, run.stderr
    assert run.stdout == printed
    assert run.stdout.rstrip().endswith("True")
