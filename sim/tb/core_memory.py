"""Run programs on a standalone AIV core against a Python memory model.

:func:`run_programs` is a test intent (it runs unchanged on pysim,
Icarus and Verilator, see :mod:`epfabric.sim.backends`): for each program it
writes the instruction memory through ``imem_w``, pulses ``start`` and then,
every cycle, answers ``mem_req`` from a dict memory with a fixed latency,
collects MARK events and stops when the core halts. It is the test fixture
of :mod:`epfabric.hw.aiv_core`, not the system memory: the die wires the core
to the HBM slice and the UB port instead.

Memory model
------------
``memory`` maps byte addresses (word aligned) to 32-bit words; absent words
read 0. A request accepted in cycle *t* takes effect in cycle *t* and is
answered in cycle *t + latency* (answers queue one per cycle if they
collide). READ_BLOCK / WRITE_BLOCK move the ``data_bytes`` leading bytes of
the 512 B block at ``addr & ~511``. ``events`` are scheduled writes
``[cycle, addr, value]`` (cycles counted from ``start``) applied by the model
itself, e.g. to release a POLL.

In-network EP stores (a core built with ``ep=True``)
---------------------------------------------------
A ``stbm`` (WRITE_MCAST) writes its block once and is acknowledged by one answer counting
every die of its mask (as the dies' coalesced acks add up); a ``stbr`` (WRITE_RED) is only
recorded (``requests`` rows then end with the mask): nobody answers a contribution.

INC units (a core built with ``inc=True``)
-----------------------------------------
The model also plays the die's network interface and cube unit: every post
on ``inc_post`` is accepted at once and recorded (``posts``: ``[cycle, op, a,
b]``); ``inc_counters`` are scheduled counter values ``[cycle, ctr, value]``
(``ctr`` 0 AG, 1 RS, 2 barrier); the cube unit grants a raised ``cube_req``
in the cycle it sees it and pulses ``cube_done`` ``cube_cycles - 1`` cycles
later (as the die's unit does when it is free).
"""

from epfabric.hw.aiv_core import MemOp

__all__ = ["run_programs", "MEM_LATENCY"]

MEM_LATENCY = 3


async def _load(bench, words):
    bench.set("imem_w.en", 1)
    for i, word in enumerate(words):
        bench.set("imem_w.addr", i)
        bench.set("imem_w.data", word)
        await bench.tick()
    bench.set("imem_w.en", 0)


async def run_program(bench, words, memory, *, latency=MEM_LATENCY, events=(), max_cycles=5000,
                      rank=0, trace_stall_every=0, inc_counters=(), cube_cycles=4, vector_extra=0,
                      read_extra=0, poll_extra=0):
    """Run one program to HALT; return a result dict (see :func:`run_programs`)."""
    core = bench.component
    nwords = core.data_bytes // 4
    mem = {int(k): int(v) & 0xFFFFFFFF for k, v in memory.items()}
    events = sorted((int(c), int(a), int(v)) for c, a, v in events)
    await _load(bench, words)
    bench.set("rank", rank)
    bench.set("mem_req.ready", 1)
    # what a die drives: the whole store window, a barrier of one core (bar costs 1), and its
    # vector_extra, read_extra and poll_extra knobs
    bench.set("store_window", core.max_outstanding)
    bench.set("bar_go", 1)
    bench.set("vector_extra", vector_extra)
    bench.set("read_extra", read_extra)
    bench.set("poll_extra", poll_extra)
    bench.set("start", 1)
    await bench.tick()
    bench.set("start", 0)
    t0 = bench.cycle
    # MARK times are reported relative to the core's cycle counter at start:
    # simulators hold reset for different lengths, so absolute counts differ.
    c0 = await bench.get("cycle")
    pending = []   # (due cycle, op, data)
    trace, requests = [], []
    inc = getattr(core, "inc", False)
    counters = sorted((int(c), int(k), int(v)) for c, k, v in inc_counters)
    posts, cube_left = [], 0
    if inc:
        bench.set("inc_post.ready", 1)
    while True:
        now = bench.cycle - t0
        while events and events[0][0] <= now:
            _, addr, value = events.pop(0)
            mem[addr & ~3] = value & 0xFFFFFFFF
        while counters and counters[0][0] <= now:
            _, k, value = counters.pop(0)
            bench.set(f"inc_counts.{k}", value & 0xFFFFFFFF)
        if inc:
            if cube_left == 0 and await bench.get("cube_req"):
                cube_left = cube_cycles
            bench.set("cube_done", int(cube_left == 1))
            cube_left = max(0, cube_left - 1)
            if await bench.get("inc_post.valid"):
                post = bench.decode("inc_post.payload", await bench.get("inc_post.payload"))
                posts.append([now, int(post.op), int(post.a), int(post.b)])
        if await bench.get("halted"):
            break
        if pending and pending[0][0] <= now:
            _, op, payload = pending.pop(0)
            bench.set("mem_rsp.payload", {"op": op, "data": payload})
            bench.set("mem_rsp.valid", 1)
        else:
            bench.set("mem_rsp.valid", 0)
        trace_ready = 0 if trace_stall_every and now % trace_stall_every else 1
        bench.set("trace.ready", trace_ready)
        if now >= max_cycles:
            return {"timeout": True, "pc": await bench.get("pc"),
                    "waiting": await bench.get("waiting"),
                    "wait_addr": await bench.get("wait_addr"), "cycles": now}
        if await bench.get("mem_req.valid"):
            req = bench.decode("mem_req.payload", await bench.get("mem_req.payload"))
            op = MemOp(req.op)
            addr = int(req.addr) & ~3
            value = int(req.data)
            base = addr & ~511
            ep_op = op in (MemOp.WRITE_MCAST, MemOp.WRITE_RED)
            requests.append([now, op.name, addr] + ([int(req.mask)] if ep_op else []))
            if op == MemOp.READ_WORD:
                out = mem.get(addr, 0)
            elif op == MemOp.WRITE_WORD:
                mem[addr] = value & 0xFFFFFFFF
                out = 1                                   # an ack of one store
            elif op == MemOp.FETCH_ADD:
                out = mem.get(addr, 0)
                mem[addr] = (out + value) & 0xFFFFFFFF
            elif op == MemOp.READ_BLOCK:
                out = sum(mem.get(base + 4 * w, 0) << (32 * w) for w in range(nwords))
            elif op == MemOp.WRITE_RED:
                out = None                                # a contribution: nobody answers
            else:
                for w in range(nwords):
                    mem[base + 4 * w] = (value >> (32 * w)) & 0xFFFFFFFF
                out = bin(int(req.mask)).count("1") if op == MemOp.WRITE_MCAST else 1
                op = MemOp.WRITE_BLOCK if op == MemOp.WRITE_MCAST else op   # the acks' op
            if out is not None:
                due = max([now + latency] + [p[0] + 1 for p in pending])
                pending.append((due, op, out))
        if trace_ready and await bench.get("trace.valid"):
            ev = bench.decode("trace.payload", await bench.get("trace.payload"))
            trace.append([int(ev.core), (int(ev.cycle) - c0) & 0xFFFFFFFF, int(ev.event)])
        await bench.tick()
    # drain the acks of posted stores the program did not fence
    bench.set("mem_rsp.valid", 0)
    while pending:
        _, op, payload = pending.pop(0)
        bench.set("mem_rsp.payload", {"op": op, "data": payload})
        bench.set("mem_rsp.valid", 1)
        await bench.tick()
    bench.set("mem_rsp.valid", 0)
    await bench.tick()
    return {"timeout": False, "cycles": now, "pc": await bench.get("pc"),
            "fault": await bench.get("fault"),
            "memory": {str(k): v for k, v in sorted(mem.items())},
            "trace": trace, "requests": requests, **({"posts": posts} if inc else {})}


async def run_programs(bench, programs):
    """Harness intent: run each ``{"words", "memory", ...}`` in turn; return their results.

    Each result has ``cycles`` (from the ``start`` edge to the cycle
    ``halted`` is first seen high, i.e. the program's cycle count including
    its HALT), ``memory`` (``{str(byte address): word}``), ``trace``
    (``[core, cycle, event]``, cycle counted from the program's first cycle), ``requests`` (``[cycle, op, addr]``),
    ``pc`` and ``fault``; or ``timeout`` with the watchdog view.
    """
    results = []
    for prog in programs:
        kw = {k: v for k, v in prog.items() if k not in ("words", "memory")}
        results.append(await run_program(bench, prog["words"], prog.get("memory", {}), **kw))
    return results
