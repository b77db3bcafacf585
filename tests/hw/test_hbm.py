"""HBM slice (hw/hbm.py): latency, visibility rule, word select, parameters."""

import pytest
from amaranth.lib.wiring import In

from epfabric.hw.hbm import HBMSlice
from rejected import rejected
from utils import ComponentSpec, run

FACTORY = "epfabric.hw.hbm:HBMSlice"


def zero_inputs(bench):
    comp = bench.component
    for path, member, _ in comp.signature.flatten(comp):
        if member.flow == In:
            bench.set(".".join(str(p) for p in path), 0)


async def latency_probe(bench, *, words):
    """Write block 2, issue back-to-back reads; return answer cycles and data."""
    zero_inputs(bench)
    await bench.tick(4)
    bench.set("w.addr", 2)
    bench.set("w.data", sum((0x100 + k) << (32 * k) for k in range(words)))
    bench.set("w.en", (1 << words) - 1)
    await bench.tick()
    bench.set("w.en", 0)
    start = bench.cycle
    issued = [(2, 3), (2, 0), (1, 0), (2, words + 5)]
    answers = []
    for i in range(len(issued) + 40):
        if await bench.get("read.0.resp.valid"):
            raw = bench.decode("read.0.resp.payload", await bench.get("read.0.resp.payload"))
            answers.append([bench.cycle - start, int(raw.word)])
        if i < len(issued):
            bench.set("read.0.req.payload", {"addr": issued[i][0], "word": issued[i][1]})
            bench.set("read.0.req.valid", 1)
        else:
            bench.set("read.0.req.valid", 0)
        await bench.tick()
        if len(answers) == len(issued):
            break
    return answers


@pytest.mark.parametrize("latency", [1, 2, 5])
def test_read_latency_and_words(latency):
    out, _ = run(ComponentSpec(FACTORY, {"blocks": 4, "data_bytes": 64, "latency": latency,
                                         "read_ports": 1}), latency_probe, {"words": 16})
    assert [c for c, _ in out] == [latency + i for i in range(4)]   # pipelined, one per cycle
    assert [w for _, w in out] == [0x103, 0x100, 0, 0]               # unmodelled word reads 0


async def visibility(bench):
    """Latency 2: a read accepted in cycle t samples the row at the edge ending t+1.

    A write in cycle t+1 (same edge) is not seen; a write in cycle t is.
    """
    zero_inputs(bench)
    await bench.tick(4)
    seen = []
    for early in (False, True):
        bench.set("read.0.req.payload", {"addr": 0, "word": 0})
        bench.set("read.0.req.valid", 1)
        write = {"w.addr": 0, "w.data": 10 + early, "w.en": 1}
        if early:
            for k, v in write.items():
                bench.set(k, v)
        await bench.tick()                       # cycle t ends: request accepted
        bench.set("read.0.req.valid", 0)
        if not early:
            for k, v in write.items():
                bench.set(k, v)
        await bench.tick()                       # cycle t+1 ends: row sampled
        bench.set("w.en", 0)
        assert await bench.get("read.0.resp.valid")
        seen.append(int(bench.decode("read.0.resp.payload",
                                     await bench.get("read.0.resp.payload")).word))
    return seen


def test_same_cycle_write_not_visible():
    seen, _ = run(ComponentSpec(FACTORY, {"blocks": 2, "data_bytes": 32, "latency": 2,
                                          "read_ports": 1}), visibility)
    assert seen == [0, 11]


def test_hbm_on_all_simulators(simulator):
    """Every simulator against the specification: latency 3, pipelined, word select."""
    out, _ = run(ComponentSpec(FACTORY, {"blocks": 4, "data_bytes": 64, "latency": 3,
                                         "read_ports": 2}), latency_probe, {"words": 16},
                 simulator=simulator)
    assert out == [[3, 0x103], [4, 0x100], [5, 0], [6, 0]]


@pytest.mark.parametrize("kw, exc, match", [
    ({"data_bytes": 40}, ValueError, r"data_bytes must be a multiple of 32, not 40"),
    ({"data_bytes": 1024}, ValueError, r"data_bytes must be in \[32, 512\], not 1024"),
    ({"data_bytes": 64.0}, TypeError, r"data_bytes must be an integer, not 64.0"),
    ({"latency": 0}, ValueError, r"latency must be in \[1, 256\], not 0"),
    ({"latency": "2"}, TypeError, r"latency must be an integer, not '2'"),
    ({"read_ports": 0}, ValueError, r"read_ports must be >= 1, not 0"),
    ({"read_ports": True}, TypeError, r"read_ports must be an integer, not True"),
    ({"blocks": -1}, ValueError, r"blocks must be >= 1, not -1"),
    ({"blocks": 2.0}, TypeError, r"blocks must be an integer, not 2.0"),
    ({"blocks": 1, "init": [1, 2]}, ValueError, r"init has 2 rows but the slice has only 1 blocks"),
    # a row wider than the modelled block was truncated silently
    ({"data_bytes": 32, "init": [0, 1 << 256]}, ValueError,
     r"init\[1\] must be in \[0, 2\*\*256 - 1\] \(256-bit unsigned\), not a 257-bit value"),
    ({"init": [-1]}, ValueError, r"init\[0\] must be in \[0, 2\*\*512 - 1\] \(512-bit unsigned\), not -1"),
    ({"init": [1.5]}, TypeError, r"init\[0\] must be an integer, not 1.5"),
    ({"init": 5}, TypeError, r"init must be a sequence of rows \(ints\), not 5"),
])
def test_bad_parameters(kw, exc, match):
    with pytest.raises(exc, match=match):
        rejected(HBMSlice, **kw)
