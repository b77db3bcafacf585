"""The host-port protocol as testbench coroutines (:mod:`epfabric.hw.host`).

Every top with a :class:`~epfabric.hw.host.HostSignature` — the AIV system,
the AG/RS system, a single die — is loaded, started and read back through
these, on every simulator: the machine session
(:mod:`epfabric.sim.backends.machine`) and the hardware tests use the same
sequence. ``port`` is the host port's path (``"host"``).
"""

import time

from ...hw.host import HostTarget
from .. import output
from .testbench import SimulationError

__all__ = ["host_write", "host_read", "host_read_pipelined", "host_read_all", "host_read_blocks",
           "host_run", "load_programs"]


async def host_write(bench, writes, *, port="host"):
    """Write ``[target, rank, core, addr, word]`` entries, one per cycle, in order.

    A row write (HBM_BLOCK, IMEM_ROW) has two more fields, ``wrow`` and
    ``wmask`` (integers), and needs a port with ``row_bits``.
    """
    direct = getattr(bench, "backdoor_writes", None)
    if direct is not None and port == "host":
        writes = direct(writes)     # the native backend writes large loads into memory itself
    has_rank = bench.has_port(f"{port}.rank")
    has_row = bench.has_port(f"{port}.wrow")
    t0 = last = time.monotonic()
    for i, (target, rank, core, addr, word, *row) in enumerate(writes):
        if i % 4096 == 4095:      # a long load (a large machine: one write a cycle) says so
            now = time.monotonic()
            if now - t0 >= output.PROGRESS_AFTER_S and now - last >= output.PROGRESS_AFTER_S:
                last = now
                output.progress(f"loading: {i + 1} of {len(writes)} host writes in "
                                f"{now - t0:.0f} s")
        bench.set(f"{port}.we", 1)
        bench.set(f"{port}.target", int(target))
        if has_rank:
            bench.set(f"{port}.rank", rank)
        elif rank:
            raise SimulationError(f"{port} has no rank member; cannot write rank {rank}")
        bench.set(f"{port}.core", core)
        bench.set(f"{port}.addr", addr)
        bench.set(f"{port}.wdata", word)
        if row:
            if not has_row:
                raise SimulationError(f"{port} has no wrow member; cannot write a row")
            bench.set(f"{port}.wrow", row[0])
            bench.set(f"{port}.wmask", row[1])
        await bench.tick()
    bench.set(f"{port}.we", 0)


def load_programs(programs, hbm=()):
    """Host writes for ``programs`` (``[[rank, core, words]]``) and ``hbm`` (``[[rank, addr, word]]``).

    Each program is followed by its core's enable bit.
    """
    writes = []
    for rank, core, words in programs:
        writes += [[HostTarget.IMEM.value, rank, core, k, w] for k, w in enumerate(words)]
        writes.append([HostTarget.ENABLE.value, rank, core, 0, 1])
    writes += [[HostTarget.HBM.value, rank, 0, addr, w] for rank, addr, w in hbm]
    return writes


async def host_read(bench, reads, *, port="host", timeout=1000):
    """Words at ``[[rank, addr], ...]``, one read at a time (waits for ``rvalid``)."""
    has_rank = bench.has_port(f"{port}.rank")
    out = []
    for rank, addr in reads:
        if has_rank:
            bench.set(f"{port}.rank", rank)
        bench.set(f"{port}.addr", addr)
        bench.set(f"{port}.re", 1)
        await bench.tick()
        bench.set(f"{port}.re", 0)
        waited = 0
        while not await bench.get(f"{port}.rvalid"):
            waited += 1
            if waited > timeout:
                raise SimulationError(f"{port}.rvalid never rose after a read of {addr:#x}")
            await bench.tick()
        out.append(await bench.get(f"{port}.rdata"))
    return out


async def host_read_pipelined(bench, reads, *, port="host", drain=16):
    """Issue ``[[rank, addr], ...]`` one ``re`` per cycle; return ``[(latency, word), ...]``.

    ``latency`` is the ticks from a read's ``re`` to its ``rvalid`` (answers
    come back in order). For tests that pin a top's host read latency.
    """
    has_rank = bench.has_port(f"{port}.rank")
    issued, answers = [], []
    for k in range(len(reads) + drain):
        if await bench.get(f"{port}.rvalid"):
            answers.append((bench.cycle, await bench.get(f"{port}.rdata")))
        if k < len(reads):
            rank, addr = reads[k]
            if has_rank:
                bench.set(f"{port}.rank", rank)
            bench.set(f"{port}.addr", addr)
            bench.set(f"{port}.re", 1)
            issued.append(bench.cycle)
        else:
            bench.set(f"{port}.re", 0)
        await bench.tick()
    if len(answers) != len(reads):
        raise SimulationError(f"{len(reads)} reads, {len(answers)} answers within {drain} cycles")
    return [(c - t, w) for t, (c, w) in zip(issued, answers)]


async def host_read_all(bench, ranks, addrs, *, port="host", lane="rdata_all", drain=1000):
    """``{rank: [word at each of addrs]}`` for every rank, one address per cycle (``re_all``), pipelined.

    ``lane="rrow_all"`` answers each address's whole block instead of its word. A read
    still unanswered ``drain`` cycles after the last one was issued is a hang of the host
    port: ``SimulationError`` names it (instead of waiting forever).
    """
    out = {r: [] for r in range(ranks)}
    i = got = 0
    n = len(addrs)
    quiet = 0
    while got < n:
        if i < n:
            bench.set(f"{port}.re_all", 1)
            bench.set(f"{port}.addr", addrs[i])
            i += 1
        else:
            bench.set(f"{port}.re_all", 0)
            quiet += 1
            if quiet > drain:
                raise SimulationError(f"{port}: {n - got} of {n} read-back addresses "
                                      f"unanswered {drain} cycles after the last read (first: "
                                      f"{addrs[got]:#x}); the host port does not answer")
        await bench.tick()
        if await bench.get(f"{port}.rvalid"):
            for r in range(ranks):
                out[r].append(await bench.get(f"{port}.{lane}.{r}"))
            got += 1
    bench.set(f"{port}.re_all", 0)
    return out


async def host_read_blocks(bench, ranks, blocks, words_per_block, *, port="host", rows=True):
    """``{rank: [words]}``: every modelled word of each block in ``blocks``, every rank.

    With ``rows`` and ``rrow_all`` (a port with ``row_bits``) one block per
    cycle, pipelined; otherwise one word per cycle (:func:`host_read_all`).
    Same words either way. The native backend reads a large read-back of a
    finished run straight from the models' memories (``backdoor_read_blocks``).
    """
    direct = getattr(bench, "backdoor_read_blocks", None)
    if direct is not None and port == "host":
        got = direct(ranks, blocks, words_per_block)
        if got is not None:
            return got
    if not (rows and bench.has_port(f"{port}.rrow_all.0")):
        addrs = [b << 9 | w << 2 for b in blocks for w in range(words_per_block)]
        return await host_read_all(bench, ranks, addrs, port=port)
    rows = await host_read_all(bench, ranks, [b << 9 for b in blocks], port=port, lane="rrow_all")
    mask = (1 << 32) - 1
    return {r: [row >> 32 * w & mask for row in got for w in range(words_per_block)]
            for r, got in rows.items()}


async def host_run(bench, max_cycles, *, port="host", slack=1000):
    """Set the watchdog, pulse ``start`` and wait for ``stop`` (natively on cocotb).

    Returns ``{"cycles", "done", "timeout"}`` as the top reports them. The
    wait itself gives up ``slack`` cycles after ``max_cycles`` (the top's own
    watchdog must have stopped it by then).
    """
    bench.set(f"{port}.max_cycles", max_cycles)
    bench.set(f"{port}.start", 1)
    await bench.tick()
    bench.set(f"{port}.start", 0)
    # Tops register their host inputs: the edge above only sampled start, the
    # next one acts on it (clears the previous run's stop). Wait for it, or a
    # second run in one simulation would see the first run's stop.
    await bench.tick()
    await bench.wait_high(f"{port}.stop", timeout=max_cycles + slack)
    return {"cycles": await bench.get(f"{port}.cycle"), "done": await bench.get(f"{port}.done"),
            "timeout": await bench.get(f"{port}.timeout")}
