"""``epfabric agrs``: one AllGather and one ReduceScatter, in-network (INC) or ring, timed.

INC-MoE §3.2 (Table 1, Eq. 4–5) and Fig. 6: an AG plus an RS of ``S`` bytes
each over ``N`` ranks at ``BW`` per direction take ``2(N-1)/N * S/BW`` on a
ring (overlapped or not) and ``S/BW`` in-network when overlapped, i.e.
equivalent bandwidths (``2S / time``) of at most ``N/(N-1) * BW`` (ring) and
``2 * BW`` (concurrent INC).

The hardware (:class:`~epfabric.hw.inc_endpoint.AgrsSystem`) is loaded through
its host port, started, and read back when ``done``; no Python runs per cycle
except waiting. Results are checked against numpy: the gather buffer of every
rank equals every rank's rows in the padded layout, and the reduced shard of
rank ``r`` equals the int32 (wrapping) sum of all ranks' partials of block
``r``. Cycles become ns and Gb/s only through the preset.

Small ``S`` is latency-bound (the left of the Fig. 6-shaped table that
``--sweep`` prints). With one-way latency ``L`` (rank -> switch -> rank,
~1000 cycles = 1 us for ``incmoe-testbed``) and ``B = 512 B / BW`` per block
(~41 cycles at 100 Gb/s):

* concurrent INC: ``t ~ L + S/BW`` — every block crosses one up-link, the
  engine (line rate, no store-and-forward of a whole message) and one
  down-link, and AG and RS load opposite directions of each link;
* concurrent ring: ``t ~ (N-1) * L + 2(N-1)/N * S/BW`` — a row reaches its
  last rank only after ``N-1`` hops, each a full up/down trip through the
  switch plus the endpoint's receive-and-forward.

So the equivalent bandwidth ``2S/t`` rises with ``S`` for both, reaching half
its bound near ``S = L*BW`` (INC, ~12.5 KB) and ``S = N/2 * L*BW`` (ring,
~25 KB at N=4), and the INC time reduction is *larger* than Eq. 5 at small
``S`` (its latency term is ``N-1`` times shorter) and tends to
``(N-2)/(2(N-1))`` from above as ``S`` grows. This differs from INC-MoE
Fig. 6, where the emulated switch's per-message fixed costs made INC *lose*
efficiency at small ``S`` while the ring stayed flat; their sizes (tens of
MiB and up) are far into the bandwidth-bound regime here. ``S`` in the sweep
stops at 512 KiB per collective because by then both curves are within
~3 % of their bounds, and larger ``S`` only adds simulation time.
"""

import argparse
import json
import sys

import numpy as np

from ..sw.presets import get_preset, preset_names
from .harness import ComponentSpec, SimulationError, run
from .tools import SIMULATORS

__all__ = ["system_spec", "make_case", "reference", "agrs_intent", "measure", "sweep",
           "bound_gbps", "add_arguments", "main"]

BUF_AG, BUF_RS, BUF_OUT = 0, 1, 2
POLL = 64  # cycles between polls of `done` (the same on every simulator)


def system_spec(*, preset, ranks, mode, tmax, lanes=2, slots=16):
    return ComponentSpec("epfabric.hw.inc_endpoint:AgrsSystem",
                         {"preset": preset, "ranks": ranks, "mode": mode, "tmax": tmax,
                          "lanes": lanes, "slots": slots})


def make_case(*, ranks, tmax, lanes, counts=None, seed=0):
    """Random int32 inputs for one AG + RS: ``{"counts", "ag_in", "rs_in"}`` (lists).

    ``ag_in[r]`` are rank r's own ``counts[r]`` rows; ``rs_in[r]`` its partials
    of the whole padded buffer (``ranks * tmax`` rows).
    """
    rng = np.random.default_rng(seed)
    if counts is None:
        counts = [tmax] * ranks
    ag_in = [rng.integers(-2**31, 2**31, size=(c, lanes), dtype=np.int64).tolist() for c in counts]
    rs_in = rng.integers(-2**31, 2**31, size=(ranks, ranks * tmax, lanes), dtype=np.int64).tolist()
    return {"counts": list(counts), "ag_in": ag_in, "rs_in": rs_in}


def reference(case, *, ranks, tmax):
    """numpy results: ``(ag[r] rows that must be present, out[r])``."""
    counts = case["counts"]
    gathered = {}
    for q in range(ranks):
        for i in range(counts[q]):
            gathered[q * tmax + i] = case["ag_in"][q][i]
    rs = np.array(case["rs_in"], dtype=np.int64).astype(np.int32)
    total = rs.sum(axis=0, dtype=np.int32)  # wrapping int32 sum
    out = [total[r * tmax: r * tmax + counts[r]].astype(np.int64).tolist() for r in range(ranks)]
    return gathered, out


def _pack(row):
    return sum((int(v) & 0xFFFFFFFF) << (32 * k) for k, v in enumerate(row))


def _unpack(raw, lanes):
    out = []
    for k in range(lanes):
        v = (raw >> (32 * k)) & 0xFFFFFFFF
        out.append(v - (1 << 32) if v >= 1 << 31 else v)
    return out


async def _write(bench, r, buf, addr, row):
    bench.set("host_rank", r)
    bench.set("host_buf", buf)
    bench.set("host_addr", addr)
    bench.set("host_wdata", _pack(row))
    bench.set("host_we", 1)
    await bench.tick()


async def _read(bench, r, buf, addr, lanes):
    bench.set("host_rank", r)
    bench.set("host_buf", buf)
    bench.set("host_addr", addr)
    return _unpack(await bench.get("host_rdata"), lanes)


async def agrs_intent(bench, ranks, tmax, lanes, cases, concurrent, barrier=False,
                      timeout=10_000_000, check=True):
    """Harness intent: per case load, start, wait for ``done``, read back and compare.

    Counters are never reset between cases. Returns per case
    ``{"cycles", "correct", "errors"}`` plus the final cumulative counters.
    """
    bench.set("concurrent", int(concurrent))
    bench.set("barrier", int(barrier))
    results = []
    for case in cases:
        if "ag_in" not in case:  # a seed spec: large cases do not fit the harness's env var
            case = make_case(ranks=ranks, tmax=tmax, lanes=lanes, counts=case["counts"],
                             seed=case["seed"])
        counts = case["counts"]
        for r in range(ranks):
            for i in range(counts[r]):
                await _write(bench, r, BUF_AG, r * tmax + i, case["ag_in"][r][i])
            for a in range(ranks * tmax):
                await _write(bench, r, BUF_RS, a, case["rs_in"][r][a])
        bench.set("host_we", 0)
        for r in range(ranks):
            bench.set(f"counts.{r}", counts[r])
        bench.set("start", 1)
        await bench.tick()
        bench.set("start", 0)
        waited = 0
        while not await bench.get("done"):
            if waited > timeout:
                raise SimulationError(f"agrs: no done after {timeout} cycles")
            await bench.tick(POLL)
            waited += POLL
        cycles = await bench.get("cycles")
        errors = 0
        if check:
            gathered, out = reference(case, ranks=ranks, tmax=tmax)
            for r in range(ranks):
                for addr, row in gathered.items():
                    if await _read(bench, r, BUF_AG, addr, lanes) != row:
                        errors += 1
                for i, row in enumerate(out[r]):
                    if await _read(bench, r, BUF_OUT, i, lanes) != row:
                        errors += 1
        results.append({"cycles": cycles, "correct": check and errors == 0, "errors": errors})
    counters = {"ag": [await bench.get(f"ag_count.{r}") for r in range(ranks)],
                "rs": [await bench.get(f"rs_count.{r}") for r in range(ranks)],
                "slot_stalls": await bench.get("slot_stalls")}
    return {"ops": results, "counters": counters}


def bound_gbps(preset, mode, ranks):
    """Equivalent-bandwidth bound in Gb/s: ring ``N/(N-1)*BW``, INC ``2*BW`` (INC-MoE Eq. 4–5)."""
    bw = get_preset(preset).bandwidth_gbits_s
    return 2 * bw if mode == "inc" else ranks / (ranks - 1) * bw


def measure(*, preset="incmoe-testbed", ranks=4, nbytes, mode="inc", concurrent=True,
            backend="pysim", lanes=2, slots=16, seed=0, check=True, tmax=None):
    """Run one AG + one RS of ``nbytes`` each; return the report dict (CLI JSON keys).

    ``tmax`` is the padded layout's capacity in rows per rank (default: just
    ``nbytes``); a larger one lets several sizes share one hardware build
    (cycle counts do not depend on it).
    """
    p = get_preset(preset)
    if not isinstance(ranks, int) or isinstance(ranks, bool) or ranks < 2:
        raise ValueError(f"ranks must be an integer >= 2, not {ranks!r}")
    if mode not in ("inc", "ring"):
        raise ValueError(f"mode must be 'inc' or 'ring', not {mode!r}")
    unit = ranks * p.block_bytes
    if not isinstance(nbytes, int) or isinstance(nbytes, bool) or nbytes < unit or nbytes % unit:
        raise ValueError(f"bytes must be a positive multiple of ranks * block_bytes ({unit}), "
                         f"not {nbytes!r}")
    if backend not in SIMULATORS:
        raise ValueError(f"backend must be one of {', '.join(SIMULATORS)}, not {backend!r}")
    rows = nbytes // unit
    if tmax is None:
        tmax = rows
    elif not isinstance(tmax, int) or isinstance(tmax, bool) or tmax < rows:
        raise ValueError(f"tmax must be an integer >= bytes / (ranks * block_bytes) = {rows}, "
                         f"not {tmax!r}")
    case = {"counts": [rows] * ranks, "seed": seed}
    spec = system_spec(preset=p.name, ranks=ranks, mode=mode, tmax=tmax, lanes=lanes, slots=slots)
    result, _ = run(spec, agrs_intent, {"ranks": ranks, "tmax": tmax, "lanes": lanes,
                                        "cases": [case], "concurrent": concurrent,
                                        "check": check}, simulator=backend)
    op = result["ops"][0]
    cycles = op["cycles"]
    ns = p.ns(cycles)
    equiv = 2 * nbytes * 8 / ns  # Gb/s
    bound = bound_gbps(p, mode, ranks)
    return {"mode": mode, "ranks": ranks, "bytes": nbytes, "concurrent": concurrent,
            "preset": p.name, "backend": backend, "cycles": cycles, "ns": ns,
            "equiv_bw_gbps": equiv, "bound_gbps": bound, "fraction_of_bound": equiv / bound,
            "correct": op["correct"], "slot_stalls": result["counters"]["slot_stalls"]}


#: Rows per rank of the default sweep (S = ranks * 512 B * rows): 2 KiB to
#: 512 KiB at N=4, from latency-bound to bandwidth-bound.
SWEEP_ROWS = (1, 2, 4, 8, 16, 32, 64, 128, 256)


def sweep(*, preset="incmoe-testbed", ranks=4, sizes=None, backend="verilator", lanes=1):
    """Fig. 6-shaped table: concurrent ring and INC equivalent bandwidth vs ``S`` at ``ranks``.

    All sizes run on one hardware build per mode (the padded layout sized for
    the largest ``S``; smaller ones use fewer rows), so a sweep costs two
    builds.
    """
    p = get_preset(preset)
    unit = ranks * p.block_bytes
    if sizes is None:
        sizes = [unit * t for t in SWEEP_ROWS]
    if not sizes:
        raise ValueError("sizes must name at least one size")
    for s in sizes:
        if not isinstance(s, int) or isinstance(s, bool) or s < unit or s % unit:
            raise ValueError(f"sizes must be positive multiples of ranks * block_bytes ({unit}), "
                             f"not {s!r}")
    tmax = max(sizes) // unit
    rows = []
    for s in sizes:
        ring = measure(preset=preset, ranks=ranks, nbytes=s, mode="ring", backend=backend,
                       lanes=lanes, tmax=tmax)
        inc = measure(preset=preset, ranks=ranks, nbytes=s, mode="inc", backend=backend,
                      lanes=lanes, tmax=tmax)
        rows.append({"bytes": s, "ring": ring, "inc": inc,
                     "gain": inc["equiv_bw_gbps"] / ring["equiv_bw_gbps"] - 1,
                     "reduction": 1 - inc["cycles"] / ring["cycles"]})
    return rows


def format_sweep(rows, ranks):
    lines = [f"concurrent AG+RS, N={ranks}: equivalent bandwidth 2S/time (Gb/s)",
             f"{'S':>10} {'ring':>8} {'%bound':>7} {'INC':>8} {'%bound':>7} {'gain':>7} "
             f"{'t cut':>7} {'ok':>3}"]
    for row in rows:
        ring, inc = row["ring"], row["inc"]
        lines.append(f"{_size(row['bytes']):>10} {ring['equiv_bw_gbps']:>8.1f} "
                     f"{100 * ring['fraction_of_bound']:>6.1f}% {inc['equiv_bw_gbps']:>8.1f} "
                     f"{100 * inc['fraction_of_bound']:>6.1f}% {100 * row['gain']:>+6.1f}% "
                     f"{100 * row['reduction']:>6.1f}% "
                     f"{'yes' if ring['correct'] and inc['correct'] else 'NO':>3}")
    lines.append(f"(t cut: 1 - t_INC/t_ring; Eq. 5 bound (N-2)/(2(N-1)) = "
                 f"{100 * (ranks - 2) / (2 * (ranks - 1)):.1f}%)")
    return "\n".join(lines)


def _size(b):
    for unit, div in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if b >= div and b % div == 0:
            return f"{b // div} {unit}"
    return f"{b} B"


def format_report(rep):
    return (f"{rep['mode']} AG+RS ({'concurrent' if rep['concurrent'] else 'sequential'}), "
            f"N={rep['ranks']}, S={_size(rep['bytes'])} on {rep['backend']}: "
            f"{rep['cycles']} cycles = {rep['ns']:.0f} ns, equivalent {rep['equiv_bw_gbps']:.1f} "
            f"Gb/s, bound {rep['bound_gbps']:.1f} Gb/s ({100 * rep['fraction_of_bound']:.1f} %), "
            f"{'correct' if rep['correct'] else 'WRONG'}")


def add_arguments(parser):
    parser.add_argument("--ranks", type=int, default=4, help="ranks N (default 4)")
    parser.add_argument("--bytes", type=int, default=None,
                        help="bytes S per collective, a multiple of N*512 (default N*512*16)")
    parser.add_argument("--mode", choices=("inc", "ring"), default="inc")
    parser.add_argument("--concurrent", action="store_true", help="AG and RS at once (Fig. 6)")
    parser.add_argument("--backend", choices=SIMULATORS, default=None,
                        help="simulator (default pysim; verilator with --sweep)")
    parser.add_argument("--preset", default="incmoe-testbed", help=f"one of {', '.join(preset_names())}")
    parser.add_argument("--lanes", type=int, default=None,
                        help="int32 lanes simulated per block (default 2; 1 with --sweep)")
    parser.add_argument("--sweep", action="store_true",
                        help="Fig. 6 table: concurrent ring vs INC over several S "
                             "(default backend for it: verilator)")
    parser.add_argument("--sizes", default=None,
                        help="with --sweep: comma-separated S in bytes (default N*512*"
                             + "{" + ",".join(map(str, SWEEP_ROWS)) + "})")
    parser.add_argument("--json", metavar="FILE", help="also write the report as JSON")


def main(args):
    try:
        if args.sweep:
            sizes = None
            if args.sizes:
                try:
                    sizes = [int(x) for x in args.sizes.split(",")]
                except ValueError:
                    raise ValueError(f"sizes must be comma-separated integers, "
                                     f"not {args.sizes!r}") from None
            rows = sweep(preset=args.preset, ranks=args.ranks, sizes=sizes,
                         backend=args.backend or "verilator",
                         lanes=1 if args.lanes is None else args.lanes)
            print(format_sweep(rows, args.ranks))
            report = {"sweep": rows}
            ok = all(r["ring"]["correct"] and r["inc"]["correct"] for r in rows)
        else:
            nbytes = args.bytes if args.bytes is not None else args.ranks * 512 * 16
            report = measure(preset=args.preset, ranks=args.ranks, nbytes=nbytes, mode=args.mode,
                             concurrent=args.concurrent, backend=args.backend or "pysim",
                             lanes=2 if args.lanes is None else args.lanes)
            print(format_report(report))
            ok = report["correct"]
    except ValueError as exc:
        print(f"epfabric agrs: error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)
            f.write("\n")
    return 0 if ok else 1


if __name__ == "__main__":
    # Through the importable module, so the harness finds `agrs_intent` by name
    # (as `__main__.agrs_intent` it cannot be imported inside cocotb).
    from epfabric.sim import agrs as _agrs
    _parser = argparse.ArgumentParser(prog="epfabric agrs", description=__doc__.splitlines()[0])
    _agrs.add_arguments(_parser)
    sys.exit(_agrs.main(_parser.parse_args()))
