"""The bf16 combine (``--dtype bf16``; sw/ubep/bf16.py, sw/ubep/combine.py): bf16 rows, fp32
weights and sums in a fixed order on the cores' fp instructions, bit-exact with numpy."""

import functools

import ml_dtypes
import numpy as np
import pytest

from epfabric.hw.validate import UserError
from epfabric.sw.kernels import KERNELS
from epfabric.sw.kernels.dispatch import layout_of, workload_of
from epfabric.sw.ubep import bf16
from epfabric.sw.ubep.reference import dispatch_order, dispatch_out
from utils import KERNEL_CASE_MAX_CYCLES, require_simulator

K = KERNELS["combine"]
SMALL = {"batch": 4, "topk": 2, "experts": 4, "dtype": "bf16"}
SHAPE = ("tiny", ("superpod", 2, 1, 1), 2)


def _workload(topk=3):
    params = K.resolve_params({**SMALL, "topk": topk, "system": "cann"})
    return workload_of(params, 2, 128)


def test_the_reference_is_the_documented_order():
    """Element by element (float32 arrays over a block's 256 elements): acc = o0·w0,
    acc += oi·wi, bf16(acc); and for this data a bf16 accumulator (rounding after every add)
    differs somewhere, so the checker tells the accumulators apart."""
    w = _workload()
    experts = bf16.expert_outputs(w, dispatch_out(w)[0])
    want = bf16.combine_out(w, experts)
    where = {(s, t, i): (d, p) for d, rows in enumerate(dispatch_order(w))
             for p, (s, t, i) in enumerate(rows)}

    def elems(words):
        halves = np.stack([words & 0xFFFF, words >> 16]).astype(np.uint16)
        return halves.view(ml_dtypes.bfloat16)

    rounded = 0
    for s in range(w.ranks):
        wts = bf16.weights_f32(w.topk_w[s])
        for t in range(w.batch):
            terms = []
            for i in range(w.topk):
                d, p = where[(s, t, i)]
                terms.append(elems(experts[d][p][0]).astype(np.float32) * wts[t, i])
            acc = terms[0]
            for x in terms[1:]:
                acc = acc + x
            half = terms[0].astype(ml_dtypes.bfloat16)
            for x in terms[1:]:
                half = (half.astype(np.float32) + x).astype(ml_dtypes.bfloat16)
            assert acc.dtype == np.float32
            assert (elems(want[s][t, 0]).view(np.uint16)
                    == acc.astype(ml_dtypes.bfloat16).view(np.uint16)).all()
            rounded += int((half != acc.astype(ml_dtypes.bfloat16)).sum())
    assert rounded


def test_the_data_is_finite_bf16_and_the_weights_are_exact():
    w = _workload()
    for rows in bf16.expert_outputs(w, dispatch_out(w)[0]):
        halves = np.stack([rows & 0xFFFF, rows >> 16]).astype(np.uint16)
        assert np.isfinite(halves.view(ml_dtypes.bfloat16).astype(np.float32)).all()
    bits = bf16.weight_bits(w.topk_w[0])
    assert ((bits.astype(np.uint32) << 16).view(np.float32) == bf16.weights_f32(w.topk_w[0])).all()


def test_ulps():
    one, next_up = 0x3F80, 0x3F81
    assert bf16.ulps(np.array([one | one << 16]), np.array([next_up | one << 16])) == 1
    assert bf16.ulps(np.array([0x8000]), np.array([0x0000])) == 0      # -0 and +0
    assert bf16.ulps(np.array([0x8001]), np.array([0x0001])) == 2


def test_int16_stays_the_default_and_bf16_machines_have_fp():
    assert K.resolve_params({})["dtype"] == "int16"
    plain = K.configs(*SHAPE, K.resolve_params({**SMALL, "dtype": None}))[0]
    fp = K.configs(*SHAPE, K.resolve_params(SMALL))[0]
    assert not plain.fp and "fp" not in plain.to_dict()
    assert fp.fp and fp.ubuf_rows >= plain.ubuf_rows


def test_bf16_on_the_in_network_combine_is_refused():
    with pytest.raises(UserError, match="int16 lanes only"):
        K.resolve_params({**SMALL, "system": "ubep-inc"})


@functools.lru_cache(maxsize=None)
def _native_run(system):
    from epfabric.sim.backends.machine import backend
    from epfabric.sw.machine import Machine
    require_simulator("native")
    params = K.resolve_params({**SMALL, "system": system})
    m = Machine(backend=backend("native"), config=K.configs(*SHAPE, params)[0])
    inputs = K.load(m, params, max_cycles=KERNEL_CASE_MAX_CYCLES)
    return m, m.run(KERNEL_CASE_MAX_CYCLES), inputs


@pytest.mark.parametrize("system", ["cann", "ubep"])
def test_bf16_combine_is_bit_exact(system):
    m, report, inputs = _native_run(system)
    verdict = K.check(m, report, inputs)
    assert verdict["correct"], verdict["problems"]


def test_cann_and_ubep_give_the_same_bf16_y():
    digests = {s: K.check(*_native_run(s))["y_payload_digest"] for s in ("cann", "ubep")}
    assert digests["cann"] == digests["ubep"]


def test_the_checker_sees_a_wrong_bf16_bit(monkeypatch):
    """One bit of one bf16 element of ``y`` read back wrong: the lowest mantissa bit of element
    19 of rank 1's token 2."""
    m, report, inputs = _native_run("cann")
    lay = layout_of(m.config, inputs[1])
    yout, read = m.address(0, lay.YOUT), m.read_mem

    def read_mem(rank, addr, n):
        words = list(read(rank, addr, n))
        if rank == 1 and addr == yout:
            words[2 * lay.hidden_blocks * 128 + 9] ^= 1 << 16
        return words

    monkeypatch.setattr(m, "read_mem", read_mem)
    verdict = K.check(m, report, inputs)
    assert verdict["problems"] == ["rank 1: YOUT token 2 of 4 differs from numpy"]
