"""The bf16 combine (``--dtype bf16``; sw/ubep/bf16.py, sw/ubep/combine.py, sw/ubep/ubep_inc.py):
bf16 rows, fp32 weights and sums; CANN's and UBEP's in a fixed order on the cores' fp
instructions, bit-exact with numpy; UBEP-INC's pre-sums added in the switches in arrival order,
within the error bound of that sum (bf16.inc_bound)."""

import functools

import ml_dtypes
import numpy as np
import pytest

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


def test_the_in_network_machine_sums_bf16_in_its_switches():
    """``ubep-inc`` with bf16: fp cores, bf16 lanes in every in-network switch, and UBuf room
    for the fp32 pre-sums; its configuration serves CANN's and UBEP's runs too."""
    c = K.configs(*SHAPE, K.resolve_params({**SMALL, "system": "ubep-inc"}))[0]
    assert c.fp and c.ep_window and c.ep_dtype == "bf16"
    int16 = K.configs(*SHAPE, K.resolve_params({**SMALL, "system": "ubep-inc",
                                                 "dtype": "int16"}))[0]
    assert int16.ep_dtype == "int16" and not int16.fp


def _terms(topk, experts, ranks=4, batch=8):
    """``(w, expert_out, products)`` of a drawn workload of ``ranks`` dies."""
    params = K.resolve_params({**SMALL, "batch": batch, "topk": topk, "experts": experts,
                               "system": "cann"})
    w = workload_of(params, ranks, 128)
    experts_out = bf16.expert_outputs(w, dispatch_out(w)[0])
    return w, experts_out, bf16.products(w, experts_out)


def _network_sum(x, dies_of, root, rng):
    """One arrival order of the in-network combine over the products ``x`` (``(k, ...)``,
    float32) of one token: each die's pre-sum (its terms in order, fp32, rounded to bf16),
    then random merges of the others' pre-sums -- a switch adds 2 or more partial sums from
    ``-0`` in a random order in fp32 and rounds to bf16 -- and the root's add of its own
    pre-sum (fp32, rounded). The model of the module docstring of sw/ubep/bf16.py."""
    bf = lambda v: v.astype(ml_dtypes.bfloat16).astype(np.float32)
    pre = {}
    for i, d in enumerate(dies_of):
        pre[d] = x[i] if d not in pre else pre[d] + x[i]
    own = bf(pre.pop(root)) if root in pre else None
    parts = [bf(v) for v in pre.values()]
    while len(parts) > 1:
        n = int(rng.integers(2, len(parts) + 1))
        rng.shuffle(parts)
        acc = np.full_like(parts[0], -0.0)
        for v in parts[:n]:
            acc = acc + v
        parts = [bf(acc)] + parts[n:]
    if not parts:
        return own
    return parts[0] if own is None else bf(parts[0] + own)


def _words(y):
    bits = y.astype(ml_dtypes.bfloat16).view(np.uint16).astype(np.uint64)
    return bits[..., 0] | bits[..., 1] << 16


def _orders(topk, experts, ranks, trials, drop=False):
    """``(w, expert_out, [y])``: ``y`` of random arrival orders (:func:`_network_sum`) of every
    token of every source; with ``drop``, each token's last term left out."""
    w, out, prods = _terms(topk, experts, ranks)
    rng = np.random.default_rng(5)
    runs = []
    for _ in range(trials):
        ys = []
        for s, x in enumerate(prods):
            y = np.empty(x.shape[:1] + x.shape[2:], dtype=np.float32)
            for t in range(w.batch):
                dies = [int(e) // w.epr for e in w.topk_idx[s][t]]
                keep = slice(0, topk - 1) if drop else slice(None)
                y[t] = _network_sum(x[t][keep], dies[keep], s, rng)
            ys.append(_words(y))
        runs.append(ys)
    return w, out, runs


def test_every_arrival_order_is_within_the_bound(monkeypatch):
    """The bound holds for random merge trees and orders of top-6 over 8 dies (up to 6 dies a
    token, so up to 6 roundings to bf16) and is not vacuous (an error reaches a good share of
    it); its ``D`` roundings are needed: the bound of one rounding (``D`` = 1 for every token)
    is broken by the same sums."""
    w, out, runs = _orders(topk=6, experts=16, ranks=8, trials=3)
    verdicts = [bf16.inc_check(ys, w, out, first_word=4) for ys in runs]
    assert all(not v["bad"] for v in verdicts)
    assert 0.25 < max(v["max_error_over_bound"] for v in verdicts) <= 1
    assert max(v["max_dies"] for v in verdicts) >= 4
    monkeypatch.setattr(bf16, "inc_dies", lambda w, s: np.ones(w.batch, dtype=int))
    assert any(bf16.inc_check(ys, w, out, first_word=4)["bad"] for ys in runs)


def test_a_dropped_contribution_is_past_the_bound():
    w, out, runs = _orders(topk=4, experts=8, ranks=4, trials=1, drop=True)
    verdict = bf16.inc_check(runs[0], w, out, first_word=4)
    assert verdict["bad"] and verdict["max_error_over_bound"] > 1


def test_the_bound_is_the_documented_formula():
    """``((1 + 2^-24)^k (1 + 2^-8)^D − 1) Σ|x_i|``, per element and token; in ulps where no
    terms cancel: about ``D``."""
    x = np.array([[[1.0, -3.0]], [[2.0, 0.5]], [[0.25, 0.0]]], dtype=np.float32)  # (BS=3, k=1, 2)
    x = np.repeat(x, 2, axis=1)                                                    # k = 2
    got = bf16.inc_bound(x, [1, 2, 3])
    u, ub = 2.0 ** -24, 2.0 ** -8
    want = [((1 + u) ** 2 * (1 + ub) ** d - 1) * 2 * np.abs(x[t, 0].astype(np.float64))
            for t, d in enumerate([1, 2, 3])]
    assert got == pytest.approx(np.array(want), rel=1e-12)
    w, out, _ = _terms(4, 8)
    v = bf16.inc_check(bf16.combine_out(w, out), w, out)
    assert 3 < v["same_sign_bound_ulps"] < 4.1 and v["max_dies"] == 4


@functools.lru_cache(maxsize=None)
def _native_run(system):
    """One run of ``system`` on the machine of the ``ubep-inc`` run (bf16 lanes in its
    switches): the three systems share one build, as ``epfabric run --system
    cann,ubep,ubep-inc`` does."""
    from epfabric.sim.backends.machine import backend
    from epfabric.sw.machine import Machine
    require_simulator("native")
    params = K.resolve_params({**SMALL, "system": system})
    config = K.configs(*SHAPE, K.resolve_params({**SMALL, "system": "ubep-inc"}))[0]
    m = Machine(backend=backend("native"), config=config)
    inputs = K.load(m, params, max_cycles=KERNEL_CASE_MAX_CYCLES)
    return m, m.run(KERNEL_CASE_MAX_CYCLES), inputs


@pytest.mark.parametrize("system", ["cann", "ubep"])
def test_bf16_combine_is_bit_exact(system):
    m, report, inputs = _native_run(system)
    verdict = K.check(m, report, inputs)
    assert verdict["correct"], verdict["problems"]
    assert verdict["y_rule"] == "exact"


def test_the_in_network_bf16_combine_is_within_its_bound():
    """UBEP-INC with bf16 lanes in its switches: dispatch and combine correct, ``y`` within the
    bound (judged, not compared bit for bit), its figures reported, the fixed order's error
    beside it within half an ulp (one rounding). Two dies, top-2: a merge has two addends,
    so no arrival order shows here; the bound's test above covers many."""
    m, report, inputs = _native_run("ubep-inc")
    verdict = K.check(m, report, inputs)
    assert verdict["correct"], verdict["problems"]
    assert verdict["dispatch"]["correct"]
    assert verdict["y_rule"] == "bound"
    assert 0 < verdict["y_max_error_over_bound"] <= 1
    assert 0 < verdict["y_max_error_ulps"] <= verdict["y_same_sign_bound_ulps"]
    assert verdict["y_fixed_max_error_ulps"] <= 0.5 + 1e-6


def test_the_in_network_checker_sees_a_dropped_contribution(monkeypatch):
    """Rank 0's token 1 read back as the sum without its last expert's product (on whichever
    die): past the bound."""
    m, report, inputs = _native_run("ubep-inc")
    w, expert_ref = inputs[0], inputs[4]
    lay = layout_of(m.config, inputs[1])
    x = bf16.products(w, expert_ref)[0][1, :-1].sum(axis=0)      # (blocks, words, 2)
    wrong = _words(x)
    yout, read = m.address(0, lay.YOUT), m.read_mem

    def read_mem(rank, addr, n):
        words = list(read(rank, addr, n))
        if rank == 0 and addr == yout:
            at = 1 * lay.hidden_blocks * 128
            for b in range(lay.hidden_blocks):
                words[at + b * 128 + 4:at + b * 128 + 128] = wrong[b, 4:].tolist()
        return words

    monkeypatch.setattr(m, "read_mem", read_mem)
    verdict = K.check(m, report, inputs)
    assert verdict["problems"] == [f"rank 0: YOUT token 1 of 4 is past its error bound "
                                   f"(bf16.inc_bound)"]


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
