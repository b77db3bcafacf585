"""INC engine (hw/inc_engine.py): AG multicast, RS aggregation with slots, barrier, export, lint.

Unit intents drive the engine's streams directly on Amaranth's simulator; the
three-simulator check of the whole system is in test_inc_endpoint.py.
"""


import numpy as np
import pytest
from amaranth.back import verilog

from epfabric.hw.inc_engine import IncEngine, IncOp, inc_flit_layout, reduce_lanes
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
        IncEngine(**params)


def test_flit_layout_has_message_header():
    fields = dict(iter(inc_flit_layout(ranks=8, tmax=16, lanes=2)))
    assert {"dst", "src", "op", "root", "epoch", "offset", "length", "chunk", "compl",
            "data"} <= set(fields)


def test_verilog_export_lints_clean(tmp_path):
    require_simulator("verilator")
    from epfabric.sim.flows.lint import lint_file
    from epfabric.sim.flows.registry import build_component
    path = tmp_path / "inc_engine.v"
    path.write_text(verilog.convert(build_component("inc_engine"), name="inc_engine",
                                    emit_src=False))
    ok, msg = lint_file(path)
    assert ok, msg
