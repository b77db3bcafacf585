"""INC engine (hw/inc_engine.py): AG multicast, RS aggregation with slots, barrier, export, lint.

Unit intents drive the engine's streams directly on Amaranth's simulator; the
three-simulator check of the whole system is in test_inc_endpoint.py.
"""


import numpy as np
import pytest
from amaranth.back import verilog

from epfabric.hw.inc_engine import IncEngine, IncOp, inc_flit_layout, reduce_lanes
from epfabric.hw.lane_arith import add_latency
from epfabric.sw.lane_sums import ordered_sum, to_bits
from rejected import rejected
from utils import ComponentSpec, require_simulator, run

N, TMAX, LANES = 4, 4, 2
SPEC = ComponentSpec("epfabric.hw.inc_engine:IncEngine",
                     {"ranks": N, "tmax": TMAX, "lanes": LANES, "slots": 4})


def flit(op, src, root, chunk=0, data=(0, 0), epoch=1):
    return {"dst": N, "src": src, "op": op, "root": root, "epoch": epoch,
            "offset": root * TMAX + chunk, "length": TMAX, "chunk": chunk, "compl": 0,
            "data": [d & 0xFFFFFFFF for d in data]}


async def engine_intent(bench, flits, expect):
    """Offer ``flits`` in order while draining the output; return the outputs."""
    bench.set("o_stream.ready", 1)
    outs, pending = [], list(flits)
    cycles = 0
    while (pending or len(outs) < expect) and cycles < 1000:
        if pending:
            bench.set("i_stream.payload", pending[0])
            bench.set("i_stream.valid", 1)
        else:
            bench.set("i_stream.valid", 0)
        took = pending and await bench.get("i_stream.ready")
        if await bench.get("o_stream.valid"):
            f = bench.decode("o_stream.payload", await bench.get("o_stream.payload"))
            outs.append({"dst": int(f.dst), "root": int(f.root), "chunk": int(f.chunk),
                         "data": [int(f.data[k]) for k in range(LANES)], "cycle": bench.cycle})
        await bench.tick()
        cycles += 1
        if took:
            pending.pop(0)
    return outs


def _s32(v):
    return v - (1 << 32) if v >= 1 << 31 else v


def test_ag_multicast_to_all_but_root():
    outs, _ = run(SPEC, engine_intent, {"flits": [flit(IncOp.AG.value, 2, 2, 1, (7, -7))],
                                        "expect": N - 1})
    assert sorted(o["dst"] for o in outs) == [0, 1, 3]
    assert all(o["root"] == 2 and o["chunk"] == 1 and [_s32(d) for d in o["data"]] == [7, -7]
               for o in outs)
    # one copy per cycle (line rate of the engine port)
    assert [o["cycle"] for o in outs] == list(range(outs[0]["cycle"], outs[0]["cycle"] + N - 1))


def test_rs_reduces_interleaved_chunks_exactly():
    rng = np.random.default_rng(1)
    vals = rng.integers(-2**31, 2**31, size=(N, 3, LANES))
    root = 1
    order = []  # chunk-major, as the endpoints issue them; root 1 does not contribute
    for c in range(3):
        for s in range(N):
            if s != root:
                order.append(flit(IncOp.RS.value, s, root, c, tuple(int(x) for x in vals[s, c])))
    outs, _ = run(SPEC, engine_intent, {"flits": order, "expect": 3})
    assert [o["dst"] for o in outs] == [root] * 3
    want = vals[[s for s in range(N) if s != root]].astype(np.int32).sum(axis=0, dtype=np.int32)
    for o in outs:
        assert [_s32(d) for d in o["data"]] == want[o["chunk"]].tolist()


def test_rs_slot_conflict_waits_for_completion():
    # slots=4: chunk 0 of root 0 (key 0) and chunk 1 of root 0 (key 4 % 4 = 0) collide.
    fl = [flit(IncOp.RS.value, 1, 0, 0, (1, 1)), flit(IncOp.RS.value, 1, 0, 1, (5, 5)),
          flit(IncOp.RS.value, 2, 0, 0, (2, 2)), flit(IncOp.RS.value, 3, 0, 0, (3, 3))]
    # the second flit blocks the engine's input until chunk 0 completes, which
    # needs flits queued behind it: the documented deadlock. Offer the
    # conflicting flit last instead and it completes.
    fl = [fl[0], fl[2], fl[3], fl[1], flit(IncOp.RS.value, 2, 0, 1, (6, 6)),
          flit(IncOp.RS.value, 3, 0, 1, (7, 7))]
    outs, _ = run(SPEC, engine_intent, {"flits": fl, "expect": 2})
    assert [(o["chunk"], o["data"]) for o in outs] == [(0, [6, 6]), (1, [18, 18])]


async def barrier_intent(bench, flits, gap, cycles):
    """Offer ``flits`` one every ``gap`` cycles (at the earliest) for ``cycles`` cycles.

    Returns ``(arrivals, outs)``: the cycle each flit was accepted, and every
    output flit with its cycle.
    """
    bench.set("o_stream.ready", 1)
    arrivals, outs = [], []
    for cycle in range(cycles):
        offer = len(arrivals) < len(flits) and cycle >= gap * len(arrivals)
        if offer:
            bench.set("i_stream.payload", flits[len(arrivals)])
        bench.set("i_stream.valid", int(offer))
        took = offer and await bench.get("i_stream.ready")
        if await bench.get("o_stream.valid"):
            f = bench.decode("o_stream.payload", await bench.get("o_stream.payload"))
            outs.append({"dst": int(f.dst), "src": int(f.src), "op": f.op.value,
                         "cycle": bench.cycle})
        if took:
            arrivals.append(bench.cycle)
        await bench.tick()
    return arrivals, outs


def test_barrier_releases_every_nth_arrival():
    """Each round of N arrivals releases all N ranks once, right after the N-th arrival, never before."""
    gap = 2 * N                  # arrivals far enough apart to see when a release happens
    rounds = 2
    fl = [flit(IncOp.BARRIER.value, s, 0) for s in range(N)] * rounds
    (arrivals, outs), _ = run(SPEC, barrier_intent, {"flits": fl, "gap": gap,
                                                      "cycles": gap * N * rounds + 3 * N})
    assert len(arrivals) == N * rounds
    assert len(outs) == N * rounds, outs            # no echo of an arrival, no extra release
    for r in range(rounds):
        nth = arrivals[(r + 1) * N - 1]
        release = outs[r * N:(r + 1) * N]
        assert sorted(o["dst"] for o in release) == list(range(N)), release
        assert all(o["op"] == IncOp.BARRIER.value and o["src"] == N for o in release)
        # one copy per cycle, the first the cycle after the N-th arrival is accepted
        assert [o["cycle"] for o in release] == list(range(nth + 2, nth + 2 + N)), (nth, release)


def test_reduce_lanes_rejects_other_dtypes():
    from amaranth.hdl import Signal
    with pytest.raises(ValueError, match=r"dtype must be 'int32'.*'fp16'"):
        reduce_lanes(Signal(64), Signal(64), lanes=2, dtype="fp16")


@pytest.mark.parametrize("params, exc, match", [
    ({"ranks": 1, "tmax": 4}, ValueError, r"ranks must be >= 2, not 1"),
    ({"ranks": 4.0, "tmax": 4}, TypeError, r"ranks must be an integer, not 4.0"),
    ({"ranks": 4, "tmax": 0}, ValueError, r"tmax must be >= 1, not 0"),
    ({"ranks": 4, "tmax": 4, "lanes": 0}, ValueError, r"lanes must be >= 1, not 0"),
    ({"ranks": 4, "tmax": 4, "slots": 6}, ValueError, r"slots must be a power of two, not 6"),
    ({"ranks": 4, "tmax": 4, "slots": 0}, ValueError, r"slots must be >= 1, not 0"),
    ({"ranks": 4, "tmax": 4, "slots": "4"}, TypeError, r"slots must be an integer, not '4'"),
    ({"ranks": 4, "tmax": 4, "dtype": "int16"}, ValueError, r"dtype must be 'int32'.*'int16'"),
])
def test_engine_validation(params, exc, match):
    with pytest.raises(exc, match=match):
        rejected(IncEngine, **params)


def test_flit_layout_has_message_header():
    fields = dict(iter(inc_flit_layout(ranks=8, tmax=16, lanes=2)))
    assert {"dst", "src", "op", "root", "epoch", "offset", "length", "chunk", "compl",
            "data"} <= set(fields)


@pytest.mark.parametrize("dtype", ["int32", "bf16"])
def test_verilog_export_lints_clean(tmp_path, dtype):
    """The registered engine, and with bf16 lanes (the floating-point pipeline and the bf16
    widening and rounding), convert and lint clean."""
    require_simulator("verilator")
    from epfabric.sim.flows.lint import lint_file
    from epfabric.sim.flows.registry import build_component
    path = tmp_path / "inc_engine.v"
    path.write_text(verilog.convert(build_component("inc_engine", {"dtype": dtype}),
                                    name="inc_engine", emit_src=False))
    ok, msg = lint_file(path)
    assert ok, msg


def _spread_floats(rng, shape, dtype, binades):
    """Finite values of both signs over ``2**-binades..2**binades``."""
    x = (rng.choice([-1.0, 1.0], size=shape) * rng.uniform(1, 2, size=shape)
         * 2.0 ** rng.integers(-binades, binades + 1, size=shape)).astype(np.float32)
    return to_bits(x, dtype)


def _words(lanes16, dtype):
    """A flit's 32-bit words from its lanes (bf16: two a word, low half first)."""
    if dtype == "bf16":
        return [int(lo) | int(hi) << 16 for lo, hi in zip(lanes16[::2], lanes16[1::2])]
    return [int(v) for v in lanes16]


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_rs_float_sums_follow_the_arrival_order(dtype):
    """fp32 and bf16 RS contributions offered in a different source order per chunk: each
    result is bit for bit the fp32 sum in the order the engine took them, from ``-0``
    (bf16: rounded once, when it leaves). For fp32 the data are such that another
    order gives another result (the test sees the order); a bf16 result hides the order
    unless two fp32 sums straddle a bf16 rounding boundary, which
    :func:`test_rs_bf16_order_shows_through_a_tie` builds."""
    per_word = 2 if dtype == "bf16" else 1
    rng = np.random.default_rng(5)
    root, chunks = 2, 4
    srcs = [s for s in range(N) if s != root]
    vals = _spread_floats(rng, (N, chunks, LANES * per_word), dtype, 12)
    orders = [list(rng.permutation(srcs)) for _ in range(chunks)]
    fl = [flit(IncOp.RS.value, s, root, c, _words(vals[s, c], dtype))
          for c in range(chunks) for s in orders[c]]
    spec = ComponentSpec(SPEC.factory, {**SPEC.params, "dtype": dtype})
    outs, _ = run(spec, engine_intent, {"flits": fl, "expect": chunks})
    assert sorted(o["chunk"] for o in outs) == list(range(chunks))
    differs = False
    for o in outs:
        c = o["chunk"]
        want = ordered_sum(vals[orders[c], c], dtype, start=-0.0)
        assert o["data"] == _words(want, dtype), (c, o["data"], _words(want, dtype))
        differs |= bool((ordered_sum(vals[orders[c][::-1], c], dtype) != want).any())
    assert differs or dtype == "bf16"


def test_rs_bf16_order_shows_through_a_tie():
    """Six ranks, root 0: 2**25, 2**17 and three 1.5 (bf16). In that order the fp32 sum
    is 2**25 + 2**17 (each 1.5 is below half an fp32 ulp and lost), a bf16 tie, rounded to
    even: 2**25 (0x4C00). The 1.5s first make 4.5, and the sum rounds to 2**25 + 2**17 + 4,
    past the tie: 2**25 + 2**18 (0x4C01). The engine gives each order's result."""
    n = 6
    spec = ComponentSpec(SPEC.factory, {**SPEC.params, "ranks": n, "dtype": "bf16"})
    terms = {1: 0x4C00, 2: 0x4800, 3: 0x3FC0, 4: 0x3FC0, 5: 0x3FC0}

    def rs(src, chunk):
        return {"dst": n, "src": src, "op": IncOp.RS.value, "root": 0, "epoch": 1,
                "offset": chunk, "length": TMAX, "chunk": chunk, "compl": 0,
                "data": [terms[src], 0]}

    fl = [rs(s, 0) for s in (1, 2, 3, 4, 5)] + [rs(s, 1) for s in (3, 4, 5, 2, 1)]
    outs, _ = run(spec, engine_intent, {"flits": fl, "expect": 2})
    assert {o["chunk"]: o["data"][0] & 0xFFFF for o in outs} == {0: 0x4C00, 1: 0x4C01}
    for chunk, order in ((0, (1, 2, 3, 4, 5)), (1, (3, 4, 5, 2, 1))):
        want = {0: 0x4C00, 1: 0x4C01}[chunk]
        assert ordered_sum([terms[s] for s in order], "bf16", start=-0.0) == want


def test_a_float_contribution_holds_the_engine_for_the_sum():
    """A floating-point RS contribution occupies the engine ``1 + add_latency`` cycles (it is
    taken, summed, written): a chunk of three contributions offered back to back leaves
    ``3 * latency`` cycles after the int32 engine sends it, with 1 + 2 + 3 = 6."""
    lat = add_latency("fp32")
    fl = [flit(IncOp.RS.value, s, 0, 0, (0x3F80_0000 * (s == 1) + 0x4000_0000 * (s == 2)
                                         + 0x4040_0000 * (s == 3), 0)) for s in (1, 2, 3)]
    int_outs, _ = run(SPEC, engine_intent, {"flits": fl, "expect": 1})
    spec = ComponentSpec(SPEC.factory, {**SPEC.params, "dtype": "fp32"})
    fp_outs, _ = run(spec, engine_intent, {"flits": fl, "expect": 1})
    assert fp_outs[0]["cycle"] == int_outs[0]["cycle"] + 3 * lat
    assert fp_outs[0]["data"] == [0x40C0_0000, 0]


def test_rs_float_nan_and_infinity():
    """An infinity and a NaN among the contributions: the infinity, and the canonical NaN."""
    inf, nan, one = 0x7F80_0000, 0xFFC1_2345, 0x3F80_0000
    fl = [flit(IncOp.RS.value, s, 0, 0, (inf if s == 1 else one, nan if s == 3 else one))
          for s in (1, 2, 3)]
    spec = ComponentSpec(SPEC.factory, {**SPEC.params, "dtype": "fp32"})
    outs, _ = run(spec, engine_intent, {"flits": fl, "expect": 1})
    assert outs[0]["data"] == [inf, 0x7FC0_0000]
