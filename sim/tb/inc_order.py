"""The order in which an in-switch reduction adds, measured, and what a canonical order would cost.

The hardware (:class:`~epfabric.hw.inc_reduce.ReduceUnit`) adds a group's contributions in
arrival order: one partial sum per group, nothing else buffered. A *canonical* order --
the group's contributors by source, whatever the arrival order -- would make a
floating-point result independent of timing, at the price of holding every contribution
that arrives before one it must follow. :func:`trace` runs reduction traffic through a
:class:`~epfabric.hw.inc_switch.StarIncSwitch` on Amaranth's simulator and records each
contribution the unit takes (cycle, group, source), each release and the unit's open
slots; :func:`costs` replays the arrivals through both orders with the unit's pipelined
sum (a group's adds ``latency + 1`` cycles apart, the unit's hazard rule) and reports the
storage each needs and when each group completes. The arrival-order figures are the
hardware's own (its takes already obey the rule); the canonical ones are a model over the
same arrivals with no limit on adds of different groups in one cycle, so a lower bound on
its delays.

``python -m epfabric.sim.tb.inc_order`` prints both for fp32 traffic under random stalls.
"""

import random

__all__ = ["trace", "costs", "main"]


def trace(*, dtype="fp32", groups=24, seed=11, stall_p=0.3, offer_p=0.8, cycles=2000):
    """Reduction traffic (:func:`~epfabric.sim.tb.inc_traffic.reduction_queues`, 4 dies) through
    a ``StarIncSwitch(dtype=dtype)`` under random stalls.

    Returns ``{"arrivals": [(cycle, (dst, block), src)], "releases": {(dst, block): cycle},
    "max_open": int, "cycles": int, "latency": int}``: the unit's takes, the cycle each
    group's sum left the unit, the most slots open at once, the cycle of the last
    delivery.
    """
    from amaranth.sim import Simulator

    from ...hw.inc_switch import StarIncSwitch
    from .inc_traffic import deliveries, reduction_queues

    ranks, header = 4, 128
    dut = StarIncSwitch(ranks=ranks, window=8, header_bits=header, dtype=dtype)
    queues, _want = reduction_queues(random.Random(seed), ranks, groups, window=8,
                                     lanes=(256 - header) // 16, header_bits=header)
    expect = deliveries([q for q in queues])
    unit, rng = dut.unit, random.Random(seed)
    seen = {"arrivals": [], "releases": {}, "max_open": 0, "cycles": 0,
            "latency": unit.latency}

    async def bench(ctx):
        # the offers and stalls of :func:`~epfabric.sim.tb.inc_traffic.traffic_intent`
        pending, offered, got = [list(q) for q in queues], [None] * ranks, 0
        for cycle in range(cycles):
            for s in range(ranks):
                if offered[s] is None and pending[s] and rng.random() < offer_p:
                    offered[s] = pending[s].pop(0)
                    ctx.set(dut.i_stream[s].payload, offered[s])
                ctx.set(dut.i_stream[s].valid, int(offered[s] is not None))
            for p in range(ranks):
                ctx.set(dut.o_stream[p].ready, int(rng.random() >= stall_p))
            taken = [s for s in range(ranks) if offered[s] is not None
                     and ctx.get(dut.i_stream[s].ready)]
            got += sum(ctx.get(dut.o_stream[p].valid) & ctx.get(dut.o_stream[p].ready)
                       for p in range(ranks))
            i, o = unit.i_stream, unit.o_stream
            if ctx.get(i.valid) and ctx.get(i.ready):
                f = ctx.get(i.payload)
                seen["arrivals"].append((cycle, (int(f.dst), int(f.addr.block)), int(f.src)))
            if ctx.get(o.valid) and ctx.get(o.ready):
                f = ctx.get(o.payload)
                seen["releases"].setdefault((int(f.dst), int(f.addr.block)), cycle)
            seen["max_open"] = max(seen["max_open"], ctx.get(unit.o_open))
            await ctx.tick()
            for s in taken:
                offered[s] = None
            if got >= expect:
                seen["cycles"] = cycle
                return
        raise TimeoutError(f"{got} of {expect} deliveries after {cycles} cycles")

    sim = Simulator(dut)
    sim.add_clock(1e-9)
    sim.add_testbench(bench)
    sim.run()
    return seen


def _replay(arrivals, latency, rank):
    """Start cycle of each arrival's add when a group's adds go in the order ``rank(arrival)``
    and one starts ``latency + 1`` cycles after the one before it (the unit's hazard
    rule); ``(starts, done)``, ``done`` per group the cycle its sum is out."""
    by_group = {}
    for k, (cycle, group, src) in enumerate(arrivals):
        by_group.setdefault(group, []).append((rank(k, cycle, src), cycle, k))
    starts, done = {}, {}
    for group, items in by_group.items():
        ready = None
        for _r, cycle, k in sorted(items):
            start = cycle if ready is None else max(cycle, ready)
            starts[k] = start
            ready = start + latency + 1
        done[group] = ready
    return starts, done


def costs(run):
    """Both orders over one :func:`trace`: ``{"arrival": {...}, "canonical": {...}}``, each with
    ``max_waiting`` (contributions taken but not yet added, at once), ``max_storage``
    (open groups plus waiting contributions, in flits of partial sums or data), and
    ``mean_done``/``max_done`` (cycles from a group's first arrival to its sum)."""
    arrivals, lat = run["arrivals"], run["latency"]
    first = {}
    for cycle, group, _src in arrivals:
        first.setdefault(group, cycle)
    out = {}
    for name, rank in (("arrival", lambda k, cycle, src: k),
                       ("canonical", lambda k, cycle, src: src)):
        starts, done = _replay(arrivals, lat, rank)
        events = []
        for k, (cycle, group, _src) in enumerate(arrivals):
            events += [(cycle, 1, 0), (starts[k], -1, 0)]          # waiting from take to add
        for group, end in done.items():
            events += [(first[group], 0, 1), (end, 0, -1)]          # a group holds a slot
        waiting = storage = open_ = max_wait = max_store = 0
        for _t, dw, do in sorted(events, key=lambda e: (e[0], e[1] + e[2])):
            waiting += dw
            open_ += do
            max_wait, max_store = max(max_wait, waiting), max(max_store, waiting + open_)
        spans = [done[g] - first[g] for g in done]
        out[name] = {"max_waiting": max_wait, "max_storage": max_store,
                     "mean_done": sum(spans) / len(spans), "max_done": max(spans)}
    return out


def main():
    """Print, for 16-bit integer, fp32 and bf16 lanes, the hardware's figures and both orders'
    costs."""
    for dtype in ("int16", "fp32", "bf16"):
        run = trace(dtype=dtype)
        print(f"{dtype}: 4 dies, 24 groups, stalls 0.3: {len(run['arrivals'])} contributions, "
              f"sum latency {run['latency']}; hardware: last delivery at cycle {run['cycles']}, "
              f"at most {run['max_open']} slots open")
        for name, c in costs(run).items():
            print(f"  {name:9}: at most {c['max_waiting']} contributions held besides the "
                  f"partial sums; first arrival to sum {c['mean_done']:.1f} cycles on average, "
                  f"{c['max_done']} at most")


if __name__ == "__main__":
    main()
