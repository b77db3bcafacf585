"""``epfabric.sw.buffer.Buffer``: the DeepEP-like dispatch/combine API over the machine."""

import numpy as np
import pytest

from epfabric.sim.backends.machine import backend
from epfabric.sw.buffer import Buffer, DispatchError
from epfabric.sw.ubep.reference import combine_out, dispatch_out
from epfabric.sw.ubep.workload import Workload
from utils import fast_simulator, require_simulator

# the dispatch/combine tests' shape: the same hardware, so one Verilator build serves all
SHAPE = dict(preset="tiny", topology=("superpod", 2, 1, 1), aivs=2, batch=4, topk=2, experts=4,
             max_cycles=5_000)       # every call takes < 1000 cycles: a hang fails in seconds


def _inputs(seed):
    w = Workload(ranks=2, batch=4, topk=2, experts=4, words=128, seed=seed)
    return w.x, w.topk_idx, w.topk_w


def _expert(rows, rank):
    """A user's expert: every 16-bit lane + (rank + 3), then x 3 (anything works)."""
    lo, hi = rows & 0xFFFF, rows >> 16
    lo, hi = (lo + rank + 3) * 3 & 0xFFFF, (hi + rank + 3) * 3 & 0xFFFF
    return hi << 16 | lo


# CANN's Buffer path is the combine kernel's (tested in CI); its two-round run is `slow`
@pytest.mark.parametrize("system", [pytest.param("cann", marks=pytest.mark.slow), "ubep"])
def test_two_rounds_back_to_back_without_a_reset(system):
    """Epochs 1 and 2 on one buffer: the counters, flags and counts of round 1 stay in memory."""
    require_simulator("verilator")
    buf = Buffer(backend("verilator"), system=system, **SHAPE)
    lo = 4 if system == "ubep" else 0                          # UBEP: words 0..3 are its header
    for seed in (1, 2):
        x, idx, wts = _inputs(seed)
        layout = buf.get_dispatch_layout(idx, 4)
        recv, per_expert, handle, rep = buf.dispatch(x, idx, wts)
        assert handle["epoch"] == seed
        w = Workload.from_arrays(x, idx, wts, 4)
        want = dispatch_out(w)[0]
        for d in range(2):
            assert np.array_equal(recv[d][:, :, lo:], want[d][:, :, lo:])
            assert sum(per_expert[d]) == len(want[d])
        assert layout[1].sum() == 2 * 4 * 2                     # every slot, once
        outs = [_expert(r, d) for d, r in enumerate(recv)]
        y, rep = buf.combine(outs, handle)
        ref = combine_out(w, outs)
        for s in range(2):
            assert np.array_equal(y[s][:, :, lo:], ref[s][:, :, lo:])
    # the SyncAll counters kept counting across the two rounds (cumulative, never reset)
    ctrl = buf._state[(0, buf.layout.CTRL)]
    assert ctrl[1] == 2                                          # the epoch word
    if system == "cann":
        # 3 dispatch barriers (2 experts a rank: UpdateTokenNumsOut's) x 2 AIVs x 2 rounds;
        # the combine's one barrier x 2 AIVs x 2
        assert ctrl[0] == 3 * 2 * 2 and ctrl[2] == 2 * 2
    with pytest.raises(ValueError, match="stale"):
        buf.combine(outs, {**handle, "epoch": 1})


def test_bad_inputs_are_named():
    buf = Buffer(backend("pysim"), system="ubep", **SHAPE)
    x, idx, wts = _inputs(1)
    with pytest.raises(ValueError, match="distinct experts"):
        bad = idx.copy()
        bad[0, 0, 1] = bad[0, 0, 0]
        buf.dispatch(x, bad, wts)
    with pytest.raises(ValueError, match=r"topk_weights must be integers in \[0, 65535\]"):
        buf.dispatch(x, idx, wts * 100000)
    with pytest.raises(ValueError, match="ranks must equal the Buffer's ranks"):
        buf.dispatch(x[:1], idx[:1], wts[:1])
    with pytest.raises(ValueError, match="num_experts"):
        buf.get_dispatch_layout(idx, 5)
    with pytest.raises(ValueError, match=r"^system='ubep-inc' needs switches that multicast "
                                         r"and reduce: this Buffer was built with system='ubep'; "
                                         r"build it with system='ubep-inc'"):
        buf.dispatch(x, idx, wts, system="ubep-inc")
    with pytest.raises(ValueError, match="system must be one of"):
        buf.dispatch(x, idx, wts, system="nccl")
    assert issubclass(DispatchError, RuntimeError)


def test_a_buffer_is_sized_by_its_shape_or_a_model():
    shape = {k: v for k, v in SHAPE.items() if k not in ("topk", "experts")}
    with pytest.raises(ValueError, match=r"Buffer needs topk and experts \(or a model\)"):
        Buffer(backend("pysim"), **shape)
    with pytest.raises(ValueError, match=r"Buffer needs experts \(or a model\)"):
        Buffer(backend("pysim"), topk=2, **shape)
    with pytest.raises(ValueError, match=r"topk=6 conflicts with model='glm-4.7' \(topk=8"):
        Buffer(backend("pysim"), model="glm-4.7", topk=6, **shape)
    with pytest.raises(ValueError, match="model must be one of deepseek-v3, qwen3-30b, glm-4.7"):
        Buffer(backend("pysim"), model="glm", **shape)
    buf = Buffer(backend("pysim"), topk=3, experts=6, system="cann", **shape)   # 3 a rank
    assert (buf.layout.epr, buf.layout.topk, buf.model) == (3, 3, None)


@pytest.fixture(scope="module")
def pysim_buf():
    """One pysim UBEP buffer for the checks that never reach a simulation."""
    return Buffer(backend("pysim"), system="ubep", **SHAPE)


@pytest.mark.parametrize("arg", ["x", "topk_idx", "topk_weights"])
def test_a_float_input_is_refused_not_truncated(pysim_buf, arg):
    """Softmax-style float weights used to become 0 (y all zeros, reported correct). With
    integer words for x, weights and ids must be integers; a float x is a float call (its
    own layout: tests/sw/test_buffer_float.py), never words truncated."""
    x, idx, wts = _inputs(1)
    given = {"x": x, "topk_idx": idx, "topk_weights": wts}
    given[arg] = given[arg].astype(np.float32)
    if arg == "topk_weights":
        given[arg] = given[arg] / given[arg].sum(axis=-1, keepdims=True)
    msg = (r"^x \(float32\) must be ranks x tokens x hidden, not shape \(2, 4, 1, 128\)$"
           if arg == "x" else rf"^{arg} must be an integer array \(.*\), not float32$")
    with pytest.raises(ValueError, match=msg):
        pysim_buf.dispatch(**given)
    with pytest.raises(ValueError, match=r"^topk_idx must be an integer array"):
        pysim_buf.get_dispatch_layout(idx.astype(np.float64), 4)


def test_batch_must_equal_the_buffers(pysim_buf):
    x, idx, wts = _inputs(1)
    with pytest.raises(ValueError, match=r"batch must equal the Buffer's batch \(4\), not 3"):
        pysim_buf.dispatch(x[:, :3], idx[:, :3], wts[:, :3])
    with pytest.raises(ValueError, match=r"topk must equal the Buffer's topk \(2\), not 1"):
        pysim_buf.dispatch(x, idx[:, :, :1], wts[:, :, :1])


def test_num_experts_must_be_the_buffers(pysim_buf):
    _, idx, _ = _inputs(1)
    with pytest.raises(ValueError, match=r"num_experts must be the Buffer's experts \(4\), not 8"):
        pysim_buf.get_dispatch_layout(idx, 8)


@pytest.mark.parametrize("value", [-1, 4])
def test_an_expert_id_outside_the_range_is_named(pysim_buf, value):
    """-1 (DeepEP's "no expert") used to count as expert E-1; E raised numpy's IndexError."""
    x, idx, wts = _inputs(1)
    bad = idx.copy()
    bad[1, 2, 1] = value
    msg = (rf"^topk_idx\[1, 2, 1\] \(rank 1, token 2, slot 1\) is {value}: expert ids must be "
           rf"in \[0, 4\)")
    with pytest.raises(ValueError, match=msg):
        pysim_buf.get_dispatch_layout(bad, 4)
    with pytest.raises(ValueError, match=msg):
        pysim_buf.dispatch(x, bad, wts)
    if value == -1:
        with pytest.raises(ValueError, match=r"cannot skip one \(DeepEP.s -1, no expert\)$"):
            pysim_buf.dispatch(x, bad, wts)
    bad = idx.copy()
    bad[1, 3, 1] = bad[1, 3, 0]
    with pytest.raises(ValueError, match=rf"^topk_idx\[1, 3\] \(rank 1, token 3\) names expert "
                                         rf"{bad[1, 3, 0]} twice: .*distinct experts"):
        pysim_buf.get_dispatch_layout(bad, 4)


def test_a_topology_string_is_parsed():
    buf = Buffer(backend("pysim"), system="ubep", **{**SHAPE, "topology": "superpod:2,1,1"})
    assert buf.config.topology == ("superpod", 2, 1, 1)
    with pytest.raises(ValueError, match="topology must look like superpod"):
        Buffer(backend("pysim"), system="ubep", **{**SHAPE, "topology": "superpod:two"})


def test_ubep_then_cann_on_one_buffer():
    """A CANN call after a UBEP one used to hang at SyncAll #1 (CTRL[0] lagged 2·A an epoch).

    Also: y comes back in the machine's word type, uint32, whatever x's integer dtype.
    On Verilator when present: the two-round test's build (the same machine).
    """
    buf = Buffer(backend(fast_simulator()), system="ubep", **SHAPE)
    for seed, system in ((1, "ubep"), (2, "cann")):
        x, idx, wts = _inputs(seed)
        x = x.astype(np.uint32)
        lo = 4 if system == "ubep" else 0
        recv, per_expert, handle, _ = buf.dispatch(x, idx, wts, system=system)
        assert handle["system"] == system
        w = Workload.from_arrays(x, idx, wts, 4)
        want = dispatch_out(w)[0]
        for d in range(2):
            assert recv[d].dtype == np.uint32
            assert np.array_equal(recv[d][:, :, lo:], want[d][:, :, lo:])
        outs = [_expert(r, d) for d, r in enumerate(recv)]
        with pytest.raises(ValueError, match=r"^expert_out\[0\] must be an integer array "
                                             r"\(32-bit words\), not float64$"):
            buf.combine([o.astype(np.float64) for o in outs], handle)
        y, _ = buf.combine(outs, handle)
        ref = combine_out(w, outs)
        for s in range(2):
            assert y[s].dtype == np.uint32
            assert np.array_equal(y[s][:, :, lo:], ref[s][:, :, lo:])
    ctrl = buf._state[(0, buf.layout.CTRL)]
    # as if epoch 1 had been CANN: 3 SyncAlls (two experts a rank) x 2 AIVs x 2 epochs
    assert (ctrl[0], ctrl[1], ctrl[2]) == (3 * 2 * 2, 2, 2 * 2)


def test_deepep_receive_fields_are_views_of_the_delivered_rows():
    """recv_topk_idx/weights, the per-expert list and recv_src_idx against numpy, and against
    what UBEP's TFF headers of the delivered rows say (source, token, expert, slot)."""
    from epfabric.sw.ubep.reference import counts, dispatch_order
    buf = Buffer(backend("pysim"), system="ubep", **SHAPE)
    x, idx, wts = _inputs(3)
    got = buf.dispatch(x, idx, wts)
    recv, per_expert, handle, _ = got                      # still the 4-tuple it was
    assert got.recv_x is recv and got.num_recv_tokens_per_expert_list is per_expert
    w = Workload.from_arrays(x, idx, wts, 4)
    assert per_expert == counts(w).sum(axis=2).tolist()
    for d, order in enumerate(dispatch_order(w)):
        want_idx = np.full((len(order), 2), -1)
        want_w = np.zeros((len(order), 2), dtype=np.int64)
        for p, (s, t, i) in enumerate(order):
            want_idx[p, i], want_w[p, i] = idx[s, t, i] - 2 * d, wts[s, t, i]
        assert np.array_equal(got.recv_topk_idx[d], want_idx)
        assert np.array_equal(got.recv_topk_weights[d], want_w)
        assert handle["recv_src_idx"][d].tolist() == [[s, t] for s, t, _ in order]
        # each row has exactly one slot set: DeepEP's rows x k over per-(token, expert) rows
        assert ((got.recv_topk_idx[d] >= 0).sum(axis=1) == 1).all()
        head = recv[d][:, 0, :4].astype(np.int64)          # [tag|epoch, s<<16|t, e<<8|i, b]
        slot = got.recv_topk_idx[d].argmax(axis=1)
        src = handle["recv_src_idx"][d]
        assert np.array_equal(head[:, 1], src[:, 0] << 16 | src[:, 1])
        assert np.array_equal(head[:, 2],
                              (got.recv_topk_idx[d].max(axis=1) + 2 * d) << 8 | slot)
