"""UB write port (hw/ub_port.py): atomic commit, non-atomic tearing, word ops, fetch-add.

Every intent runs on pysim, Icarus and Verilator (``simulator`` fixture) and
its result and cycle count must equal the pysim reference.
"""

import functools
import random

import pytest
from amaranth.lib.wiring import In

from epfabric.hw.ub_port import UBMemory, UBOp, UBPort, request_layout
from epfabric.sim.backends.testbench import SimulationError, wait_until
from rejected import rejected
from utils import ComponentSpec, run

FACTORY = "epfabric.hw.ub_port:UBMemory"
LATENCY = 2
#: cycles any single wait may take: every operation here completes in < 20 (16 beats + L + 2)
BOUND = 64


def spec(**params):
    base = {"blocks": 4, "data_bytes": 64, "latency": LATENCY, "read_ports": 1}
    return ComponentSpec(FACTORY, {**base, **params})


def block_of(write_id, words):
    """Block whose word k is ``write_id << 8 | k`` (little-endian row value)."""
    return sum(((write_id << 8) | k) << (32 * k) for k in range(words))


def ids_of(row, words):
    return {(row >> (32 * k)) >> 8 & 0xFFFFFF for k in range(words)}


def zero_inputs(bench):
    """Drive every input port to 0 (the cocotb bench leaves unset inputs at Z)."""
    comp = bench.component
    for path, member, _value in comp.signature.flatten(comp):
        if member.flow == In:
            bench.set(".".join(str(p) for p in path), 0)


async def send(bench, op, addr, word=0, value=0):
    """Present one request until accepted; return the cycle it was accepted in."""
    bench.set("i_req.payload", {"op": op, "addr": addr, "word": word, "data": value})
    bench.set("i_req.valid", 1)
    await wait_until(bench, "i_req.ready", timeout=BOUND)
    accepted = bench.cycle
    await bench.tick()
    bench.set("i_req.valid", 0)
    return accepted


async def ack(bench):
    """Wait for the next answer; return (cycle, op, old)."""
    bench.set("o_resp.ready", 1)
    await wait_until(bench, "o_resp.valid", timeout=BOUND)
    raw = bench.decode("o_resp.payload", await bench.get("o_resp.payload"))
    cycle = bench.cycle
    await bench.tick()
    return cycle, raw.op, int(raw.old)


async def load(bench, addr, word=0):
    """Read block ``addr``; return (issue cycle, answer cycle, block, word)."""
    bench.set("read.0.req.payload", {"addr": addr, "word": word})
    bench.set("read.0.req.valid", 1)
    issued = bench.cycle
    await bench.tick()
    bench.set("read.0.req.valid", 0)
    await wait_until(bench, "read.0.resp.valid", timeout=BOUND)
    raw = bench.decode("read.0.resp.payload", await bench.get("read.0.resp.payload"))
    return issued, bench.cycle, int(raw.block), int(raw.word)


async def directed(bench, *, words, beats):
    """Block/word writes, fetch-add and their cycle costs; returns observations."""
    out = {}
    zero_inputs(bench)
    bench.set("o_resp.ready", 1)
    blk = block_of(7, words)
    t0 = await send(bench, UBOp.BLOCK_WRITE, 1, 0, blk)
    t_ack, _, _ = await ack(bench)
    out["block_ack_after"] = t_ack - t0
    _, t_ans, row, word3 = await load(bench, 1, 3)
    out["block_readback_ok"] = row == blk
    out["word3"] = word3
    # word write into the flag field, then an unmodelled word (dropped)
    await send(bench, UBOp.WORD_WRITE, 1, 0, 0xD0D0D0D0)
    await ack(bench)
    await send(bench, UBOp.WORD_WRITE, 1, 100, 0x12345678)
    await ack(bench)
    _, _, row, w0 = await load(bench, 1, 0)
    out["flag_word"] = w0
    out["rest_unchanged"] = (row >> 32) == (blk >> 32)
    _, _, _, w100 = await load(bench, 1, 100)
    out["unmodelled_word"] = w100
    # fetch-add: old values come back; the cost is L + 1 cycles
    olds = []
    t0 = await send(bench, UBOp.FETCH_ADD, 2, 5, 3)
    t_ack, _, old = await ack(bench)
    out["fetch_add_ack_after"] = t_ack - t0
    olds.append(old)
    for addend in (4, 0xFFFFFFFF):
        await send(bench, UBOp.FETCH_ADD, 2, 5, addend)
        olds.append((await ack(bench))[2])
    _, _, _, final = await load(bench, 2, 5)
    out["fetch_add_olds"] = olds
    out["fetch_add_final"] = final
    # throughput: n back-to-back block writes with o_resp always ready
    n = 6
    bench.set("o_resp.ready", 1)
    start = bench.cycle
    accepted = 0
    acks = 0
    bench.set("i_req.valid", 1)
    while acks < n:
        if bench.cycle - start > n * BOUND:
            raise SimulationError(f"{acks} of {n} block writes answered")
        bench.set("i_req.payload", {"op": UBOp.BLOCK_WRITE, "addr": accepted % 4, "word": 0,
                                    "data": block_of(100 + accepted, words)})
        bench.set("i_req.valid", int(accepted < n))
        fire = accepted < n and await bench.get("i_req.ready")
        acks += await bench.get("o_resp.valid")
        await bench.tick()
        accepted += int(bool(fire))
    bench.set("i_req.valid", 0)
    out["blocks_cycles"] = bench.cycle - start
    # back-pressure: o_resp not ready holds the answer and stalls the next request
    bench.set("o_resp.ready", 0)
    bench.set("i_req.payload", {"op": UBOp.WORD_WRITE, "addr": 3, "word": 1, "data": 11})
    bench.set("i_req.valid", 1)
    await bench.tick()
    bench.set("i_req.payload", {"op": UBOp.WORD_WRITE, "addr": 3, "word": 1, "data": 22})
    stalled = 0
    for _ in range(beats + 3):
        stalled += 1 - await bench.get("i_req.ready")
        await bench.tick()
    out["stalled_cycles"] = stalled
    bench.set("o_resp.ready", 1)
    await bench.tick(2)
    bench.set("i_req.valid", 0)
    await bench.tick(beats + 2)
    _, _, _, w = await load(bench, 3, 1)
    out["after_backpressure"] = w
    return out


async def interleavings(bench, *, seed, trials, words, window=12):
    """Random concurrent block writes and polling reads; count mixed blocks read.

    Each trial is one random schedule: over ``window`` cycles the writer offers
    a block write (to block 0 or 1, every word tagged with a fresh write id)
    with probability 0.4 a cycle and the reader issues a read with probability
    0.6; then both drain. A read answer is *mixed* when its words carry more
    than one write id.
    """
    rng = random.Random(seed)
    zero_inputs(bench)
    bench.set("o_resp.ready", 1)
    await bench.tick(LATENCY + 1)  # flush the read pipeline of any pre-reset Z
    next_id = 1
    reads = mixed = writes = acks = 0
    for _trial in range(trials):
        offering = False
        outstanding = 0
        cycle = 0
        while cycle < window or offering or outstanding or acks < writes:
            if cycle > window + BOUND:
                raise SimulationError(f"trial {_trial}: {acks} of {writes} writes answered, "
                                      f"{outstanding} reads outstanding")
            if await bench.get("read.0.resp.valid"):
                raw = await bench.get("read.0.resp.payload")
                row = raw & ((1 << (32 * words)) - 1)
                outstanding -= 1
                reads += 1
                mixed += len(ids_of(row, words)) > 1
            acks += await bench.get("o_resp.valid")
            if not offering and cycle < window and rng.random() < 0.4:
                bench.set("i_req.payload", {"op": UBOp.BLOCK_WRITE, "addr": rng.randrange(2),
                                            "word": 0, "data": block_of(next_id, words)})
                bench.set("i_req.valid", 1)
                next_id += 1
                offering = True
            fire = offering and await bench.get("i_req.ready")
            if cycle < window and rng.random() < 0.6:
                bench.set("read.0.req.payload", {"addr": rng.randrange(2), "word": 0})
                bench.set("read.0.req.valid", 1)
                outstanding += 1
            else:
                bench.set("read.0.req.valid", 0)
            await bench.tick()
            cycle += 1
            if fire:
                offering = False
                writes += 1
                bench.set("i_req.valid", 0)
    return {"reads": reads, "mixed": mixed, "writes": writes}


@functools.lru_cache(maxsize=None)
def reference(name, params, args):
    """pysim result and cycles of an intent (the reference for the other simulators)."""
    intent = INTENTS[name]
    return run(spec(**dict(params)), intent, dict(args), simulator="pysim")


INTENTS = {"directed": directed, "interleavings": interleavings}


def check_same_as_pysim(simulator, name, params, args):
    got = run(spec(**dict(params)), INTENTS[name], dict(args), simulator=simulator)
    ref = reference(name, params, args)
    assert got == ref, f"{simulator} differs from pysim: {got} != {ref}"
    return got


ATOMIC = (("non_atomic", False),)
TORN = (("non_atomic", True), ("beat_bytes", 32))


def test_directed_atomic(simulator):
    (out, cycles) = check_same_as_pysim(simulator, "directed", ATOMIC,
                                        (("words", 16), ("beats", 1)))
    assert out["block_ack_after"] == 1           # committed at accept, answered next cycle
    assert out["block_readback_ok"] and out["word3"] == (7 << 8) | 3
    assert out["flag_word"] == 0xD0D0D0D0 and out["rest_unchanged"]
    assert out["unmodelled_word"] == 0
    assert out["fetch_add_olds"] == [0, 3, 7]
    assert out["fetch_add_final"] == 6            # 7 + 0xFFFFFFFF wraps to 6
    assert out["fetch_add_ack_after"] == LATENCY + 1
    assert out["blocks_cycles"] == 6 + 1          # one block per cycle, +1 for the last answer
    assert out["stalled_cycles"] >= 3
    assert out["after_backpressure"] == 22


def test_directed_non_atomic(simulator):
    (out, _cycles) = check_same_as_pysim(simulator, "directed", TORN,
                                         (("words", 16), ("beats", 16)))
    assert out["block_ack_after"] == 16           # 512 B / 32 B beats, one beat per cycle
    assert out["block_readback_ok"]
    assert out["blocks_cycles"] == 6 * 16 + 1
    assert out["fetch_add_olds"] == [0, 3, 7]


@pytest.mark.parametrize("data_bytes", [32, 64, 128])
def test_cycles_do_not_depend_on_data_bytes(data_bytes):
    words = data_bytes // 4
    base = run(spec(data_bytes=64, **dict(TORN)), directed, {"words": 16, "beats": 16})
    got = run(spec(data_bytes=data_bytes, **dict(TORN)), directed, {"words": words, "beats": 16})
    assert got[1] == base[1]
    assert got[0]["blocks_cycles"] == base[0]["blocks_cycles"]


PROPERTY_ARGS = (("seed", 2024), ("trials", 500), ("words", 16))


def test_property_atomic_never_mixed(simulator):
    """≥ 500 seeded random interleavings: the atomic port never shows a mixed block."""
    out, _ = check_same_as_pysim(simulator, "interleavings", ATOMIC, PROPERTY_ARGS)
    assert out["writes"] > 500 and out["reads"] > 2000
    assert out["mixed"] == 0


def test_property_non_atomic_tears(simulator):
    """The same 500 interleavings over the non-atomic port catch mixed blocks."""
    out, _ = check_same_as_pysim(simulator, "interleavings", TORN, PROPERTY_ARGS)
    assert out["reads"] > 2000
    assert out["mixed"] >= 1


def test_request_layout_fields():
    layout = request_layout(blocks=16, data_bytes=64)
    assert {name for name, _ in layout} == {"op", "addr", "word", "data"}
    assert layout.size == 2 + 4 + 7 + 512


@pytest.mark.parametrize("kw, exc, match", [
    ({"data_bytes": 48}, ValueError, r"data_bytes must be a multiple of 32, not 48"),
    ({"data_bytes": 16}, ValueError, r"data_bytes must be in \[32, 512\], not 16"),
    ({"data_bytes": "64"}, TypeError, r"data_bytes must be an integer, not '64'"),
    ({"blocks": 0}, ValueError, r"blocks must be >= 1, not 0"),
    ({"blocks": 1.5}, TypeError, r"blocks must be an integer, not 1.5"),
    ({"non_atomic": True, "beat_bytes": 24}, ValueError, r"beat_bytes must divide 512, not 24"),
    ({"non_atomic": True, "beat_bytes": 6}, ValueError,
     r"beat_bytes must be a multiple of 4, not 6"),
    ({"non_atomic": True, "beat_bytes": 1024}, ValueError,
     r"beat_bytes must be in \[4, 512\], not 1024"),
    ({"non_atomic": True, "beat_bytes": 32.0}, TypeError,
     r"beat_bytes must be an integer, not 32.0"),
])
def test_bad_parameters(kw, exc, match):
    with pytest.raises(exc, match=match):
        rejected(UBPort, **kw)
    with pytest.raises(exc, match=match):
        rejected(UBMemory, **kw)


def test_non_atomic_must_be_bool():
    with pytest.raises(TypeError, match=r"non_atomic must be a bool, not 1"):
        rejected(UBPort, non_atomic=1)


@pytest.mark.parametrize("read_ports, exc, match", [
    (0, ValueError, r"read_ports must be >= 1, not 0"),
    (1.0, TypeError, r"read_ports must be an integer, not 1.0"),
])
def test_bad_read_ports(read_ports, exc, match):
    with pytest.raises(exc, match=match):
        rejected(UBMemory, read_ports=read_ports)
