"""Drive the vector unit with a list of commands (a test intent).

:func:`run_commands` streams commands back to back into a
:class:`~epfabric.hw.vector_unit.VectorUnit`, collects the responses and
measures each command's latency in cycles; it runs unchanged on every
simulator (see :mod:`epfabric.sim.backends`). :func:`reference` is the numpy
model the results are checked against.
"""

import random

import numpy as np

from epfabric.hw.vector_unit import ELEMENTWISE as VECTOR_ELEMENTWISE
from epfabric.hw.vector_unit import Cond, VecOp

__all__ = ["command", "run_commands", "reference", "ELEMENTWISE"]

#: names of the operations answered one beat a beat
ELEMENTWISE = tuple(op.name for op in VECTOR_ELEMENTWISE)


def command(op, a, *, cond="LT", s=(0, 0, 0), b=None):
    """A JSON-serialisable command: ``op`` and ``cond`` by name, ``a``/``b`` lists."""
    a = [int(x) for x in a]
    return {"op": VecOp[op].name, "cond": Cond[cond].name, "s": [int(x) for x in s],
            "a": a, "b": [int(x) for x in (b if b is not None else [0] * len(a))]}


def _beats(bench, cmd, lanes):
    length = len(cmd["a"])
    n_beats = max(1, -(-length // lanes))
    pad = n_beats * lanes - length
    a = cmd["a"] + [0] * pad
    b = cmd["b"] + [0] * pad
    return [bench.pack("i_stream.payload", {
        "op": VecOp[cmd["op"]], "cond": Cond[cmd["cond"]], "length": length, "s": cmd["s"],
        "a": a[n * lanes:(n + 1) * lanes], "b": b[n * lanes:(n + 1) * lanes],
    }) for n in range(n_beats)]


def _result(cmd, rsps, lanes):
    length = len(cmd["a"])
    if cmd["op"] == "CMP":
        return [int(r.mask >> j & 1) for r in rsps for j in range(lanes)][:length]
    if cmd["op"] in ELEMENTWISE:                  # the others answer with their vec
        return [int(x) for r in rsps for x in r.vec][:length]
    r = rsps[-1]
    if cmd["op"] == "COUNT":
        return [int(x) for x in r.count]
    if cmd["op"] == "FIND_FIRST":
        return -1 if r.none else int(r.index)
    return int(r.sum)


async def run_commands(bench, commands, stall_prob=0.0, seed=0, timeout=100_000):
    """Harness intent: run ``commands``; return ``{"results": [...], "cycles": [...]}``.

    ``cycles[i]`` counts from the cycle command ``i``'s first beat is presented
    to the cycle its last response is valid (accepted). With ``stall_prob > 0``
    the consumer refuses responses at random (seeded), exercising backpressure.
    """
    lanes = bench.component.lanes
    rng = random.Random(seed)
    beats = []          # (command index, is first beat, raw payload)
    expected = []       # response beats per command
    for ci, cmd in enumerate(commands):
        raw = _beats(bench, cmd, lanes)
        beats += [(ci, n == 0, r) for n, r in enumerate(raw)]
        expected.append(len(raw) if cmd["op"] in ELEMENTWISE else 1)
    rsps = [[] for _ in commands]
    start, end = {}, {}
    bi, ci_out = 0, 0
    t0 = bench.cycle
    while ci_out < len(commands):
        if bench.cycle - t0 > timeout:
            raise TimeoutError(f"vector unit: no response for command {ci_out} "
                               f"after {timeout} cycles")
        if bi < len(beats):
            ci, first, raw = beats[bi]
            bench.set("i_stream.payload", raw)
            bench.set("i_stream.valid", 1)
            if first and ci not in start:
                start[ci] = bench.cycle
        else:
            bench.set("i_stream.valid", 0)
        ready = int(rng.random() >= stall_prob)
        bench.set("o_stream.ready", ready)
        in_ready = await bench.get("i_stream.ready")
        if ready and await bench.get("o_stream.valid"):
            rsp = bench.decode("o_stream.payload", await bench.get("o_stream.payload"))
            rsps[ci_out].append(rsp)
            if len(rsps[ci_out]) == expected[ci_out]:
                end[ci_out] = bench.cycle
                ci_out += 1
        if bi < len(beats) and in_ready:
            bi += 1
        await bench.tick()
    bench.set("i_stream.valid", 0)
    bench.set("o_stream.ready", 0)
    return {"results": [_result(c, r, lanes) for c, r in zip(commands, rsps)],
            "cycles": [end[i] - start[i] for i in range(len(commands))]}


_NP_COND = {"EQ": np.equal, "NE": np.not_equal, "LT": np.less, "LE": np.less_equal,
            "GT": np.greater, "GE": np.greater_equal}


def reference(cmd, width):
    """numpy model of one command's result (same encoding as :func:`run_commands`)."""
    a = np.array(cmd["a"], dtype=np.uint64)
    f = _NP_COND[cmd["cond"]]
    if cmd["op"] == "COUNT":
        return [int(f(a, np.uint64(s)).sum()) for s in cmd["s"]]
    if cmd["op"] == "CMP":
        return [int(x) for x in f(a, np.uint64(cmd["s"][0]))]
    if cmd["op"] == "FIND_FIRST":
        hit = np.flatnonzero(f(a, np.uint64(cmd["s"][0])))
        return int(hit[0]) if hit.size else -1
    if cmd["op"] == "ADD":
        return [(int(x) + int(y)) % (1 << width) for x, y in zip(cmd["a"], cmd["b"])]
    if cmd["op"] == "MULS":
        return [(int(x) * int(cmd["s"][0])) % (1 << width) for x in cmd["a"]]
    if cmd["op"] == "DUP":
        return [int(cmd["s"][0]) % (1 << width)] * len(cmd["a"])
    if cmd["op"] == "SUB":
        return [(int(x) - int(y)) % (1 << width) for x, y in zip(cmd["a"], cmd["b"])]
    if cmd["op"] == "ABS":            # two's complement: |x| of the signed value, mod 2**width
        return [(-int(x) if x >> (width - 1) else int(x)) % (1 << width) for x in cmd["a"]]
    if cmd["op"] == "MINS":
        return [min(int(x), int(cmd["s"][0]) % (1 << width)) for x in cmd["a"]]
    return int(sum(int(x) for x in a))
