"""Simulated cycles per second of a superpod fabric under saturating uniform traffic.

``python -m epfabric.sim.fabric_speed [--backends pysim,verilator] [--cycles N] [--json FILE]``

Runs :class:`~epfabric.hw.traffic.TrafficFabric` — by default the 2-board ×
16-die (32 ranks) ``cm384`` superpod, every rank sending uniformly to the other
31 at full rate (UBEP §2.3 Insight 3) — on each backend and reports

* ``elaborate_s`` (pysim: building the component and the simulator) or
  ``verilog_s`` + ``build_s`` (Verilator: Verilog generation, then the C++
  model build; cached by content, so a rerun reports the cache hit);
* ``run_s`` — wall time of ``await bench.wait_high("done")`` alone, measured
  inside the simulator process; no Python runs per cycle on Verilator (a
  native edge trigger), the hardware sources and sinks need no testbench;
* ``cycles_per_s`` = simulated cycles / ``run_s``;

and the Verilator / pysim ratio of cycles per second measured in the same
invocation. Verilator models are built at ``-O2`` by default (tests use
``-O0``); ``--opt=-O0`` for a quick build.

Measured at commit c281376 (Verilator models with only the top module
public), 2 shared cores at load average 3.5-4.8 from other jobs; 32 ranks,
``--opt=-O0 --cycles 100000 --pysim-cycles 3000``: pysim elaborates in 15 s
and runs 29 cycles/s averaged over 3000 cycles (faster over the first few
hundred, before two-hop traffic, 2500 cycles away, arrives); Verilator:
Verilog 6.8 MB in 49 s, model build 67 s, 4858 cycles/s over 10^5 cycles;
ratio 166x in the same invocation. (Before c281376, with every signal public:
-O0 build 165 s, 939 cycles/s; the -O2 build of that 45 MB of C++ ran past
15 minutes.) Sources offer every cycle and send 0.68 blocks/cycle of the
0.77 their link allows: the rest is head-of-line blocking under uniform
traffic. Counts are identical across builds and simulators.
"""

import argparse
import json
import os
import sys
import time
from pathlib import Path

from ..hw.traffic import TrafficFabric
from ..sw.presets import get_preset
from . import harness
from .harness import ComponentSpec
from .tools import SIMULATORS, missing_reason

__all__ = ["traffic_fabric", "traffic_spec", "speed_intent", "measure", "main",
           "DEFAULT_CYCLES", "SPEED_OPT"]

#: Cycles per backend by default: a few hundred on pysim (~20 cycles/s at 32
#: ranks), enough on Verilator for a figure stable to a few per cent.
DEFAULT_CYCLES = {"pysim": 300, "icarus": 2_000, "verilator": 200_000}
SPEED_OPT = "-O2"


def traffic_fabric(*, preset="cm384", dies_per_npu=2, npus_per_board=8, boards=2, data_bytes=2):
    """JSON-facing factory of a :class:`TrafficFabric` (usable as a ComponentSpec)."""
    return TrafficFabric(get_preset(preset), dies_per_npu, npus_per_board, boards,
                         data_bytes=data_bytes)


def traffic_spec(**params):
    """ComponentSpec of :func:`traffic_fabric` with ``params``."""
    return ComponentSpec("epfabric.sim.fabric_speed:traffic_fabric", dict(params))


async def speed_intent(bench, cycles, ranks, drain=0):
    """Harness intent: run the sources ``cycles`` cycles; wall time around the wait for ``done``.

    ``drain`` extra cycles afterwards let in-flight blocks arrive (not timed).
    """
    bench.set("cycles_to_run", cycles)
    bench.set("start", 1)
    await bench.tick()
    bench.set("start", 0)
    c0 = bench.cycle
    t0 = time.monotonic()
    await bench.wait_high("done")
    wall = time.monotonic() - t0
    ran = bench.cycle - c0
    at_done = {"sent": await bench.get("sent_total"), "received": await bench.get("received_total")}
    if drain:
        await bench.tick(drain)
    out = {"cycles": ran, "run_s": wall, "cycle_reg": await bench.get("cycle"),
           "sent": await bench.get("sent_total"), "received": await bench.get("received_total"),
           "misrouted": await bench.get("misrouted"), "at_done": at_done,
           "received_per_rank": [await bench.get(f"received.{r}") for r in range(ranks)],
           "sent_per_rank": [await bench.get(f"sent.{r}") for r in range(ranks)]}
    return out


def _say(text):
    print(text, file=sys.stderr, flush=True)


def measure(backend, cycles, *, params=None, opt=SPEED_OPT, drain=0):
    """Build and run one backend; return the JSON row."""
    params = dict(params or {})
    spec = traffic_spec(**params)
    probe = spec.build()
    probe._MustUse__silence = True   # built only to learn its rank count
    ranks = probe.ranks
    row = {"backend": backend, "ranks": ranks, "params": params}
    if backend == "pysim":
        from amaranth.sim import Simulator
        _say(f"[{backend}] elaborating {ranks}-rank fabric ...")
        t0 = time.monotonic()
        Simulator(spec.build())
        row["elaborate_s"] = round(time.monotonic() - t0, 2)
        _say(f"[{backend}] elaborated in {row['elaborate_s']:.1f} s")
    else:
        _say(f"[{backend}] generating Verilog ...")
        t0 = time.monotonic()
        text = harness.verilog_of(spec, backend)
        row["verilog_s"] = round(time.monotonic() - t0, 2)
        row["verilog_bytes"] = len(text)
        bdir = harness.build_dir_for(text, backend, False, opt)
        cached = (bdir / "built.ok").exists()
        _say(f"[{backend}] Verilog {len(text) / 1e6:.1f} MB in {row['verilog_s']:.1f} s; "
             + ("model cached" if cached else f"building model ({opt}) in {bdir} ..."))
        t0 = time.monotonic()
        harness._build(spec, backend, False, opt)
        row["build_s"] = round(time.monotonic() - t0, 2)
        row["build_cached"] = cached
        if cached:
            row["build_s_original"] = float((bdir / "built.ok").read_text().strip() or 0)
        row["opt"] = opt
        _say(f"[{backend}] model ready in {row['build_s']:.1f} s")
    _say(f"[{backend}] running {cycles} cycles ...")
    t0 = time.monotonic()
    result, _ = harness.run(spec, speed_intent, {"cycles": cycles, "ranks": ranks, "drain": drain},
                            simulator=backend, opt=opt)
    row["process_s"] = round(time.monotonic() - t0, 2)
    row.update({k: result[k] for k in ("cycles", "sent", "received", "misrouted")})
    row["run_s"] = round(result["run_s"], 3)
    row["cycles_per_s"] = round(result["cycles"] / result["run_s"], 1)
    row["blocks_per_cycle_per_rank"] = round(result["sent"] / result["cycles"] / ranks, 3)
    _say(f"[{backend}] {result['cycles']} cycles in {row['run_s']:.2f} s = "
         f"{row['cycles_per_s']:.0f} cycles/s; sent {result['sent']}, received {result['received']}")
    return row


def _parser():
    p = argparse.ArgumentParser(prog="python -m epfabric.sim.fabric_speed", description=__doc__.split("\n")[0])
    p.add_argument("--backends", default="pysim,verilator", help="comma-separated backends")
    p.add_argument("--cycles", type=int, default=None,
                   help="cycles per backend (default: pysim %(pysim)d, verilator %(verilator)d)"
                   .replace("%(pysim)d", str(DEFAULT_CYCLES["pysim"]))
                   .replace("%(verilator)d", str(DEFAULT_CYCLES["verilator"])))
    p.add_argument("--pysim-cycles", type=int, default=None, help="override --cycles for pysim")
    p.add_argument("--preset", default="cm384")
    p.add_argument("--shape", default="2,8,2", help="dies_per_npu,npus_per_board,boards")
    p.add_argument("--opt", default=SPEED_OPT,
                   help="Verilator C++ optimisation level, written --opt=-O0 (default %(default)s)")
    p.add_argument("--json", metavar="FILE", help="write {runs, verilator_over_pysim} as JSON")
    return p


def main(argv=None):
    args = _parser().parse_args(argv)
    backends = [b for b in args.backends.split(",") if b]
    for b in backends:
        if b not in SIMULATORS:
            raise SystemExit(f"--backends: unknown backend {b!r}; valid: {', '.join(SIMULATORS)}")
    try:
        dpn, npb, nb = (int(x) for x in args.shape.split(","))
    except ValueError:
        raise SystemExit(f"--shape must be three integers a,b,c, not {args.shape!r}") from None
    params = {"preset": args.preset, "dies_per_npu": dpn, "npus_per_board": npb, "boards": nb,
              "data_bytes": 2}
    os.environ.setdefault("EPFABRIC_BUILD_DIR", str(Path.cwd() / "build" / "sim"))
    runs = []
    for b in backends:
        reason = missing_reason(b)
        if reason:
            _say(f"skip {b}: {reason}")
            continue
        cycles = args.cycles if args.cycles is not None else DEFAULT_CYCLES[b]
        if b == "pysim" and args.pysim_cycles is not None:
            cycles = args.pysim_cycles
        runs.append(measure(b, cycles, params=params, opt=args.opt))
    by = {r["backend"]: r for r in runs}
    ratio = None
    if "verilator" in by and "pysim" in by:
        ratio = round(by["verilator"]["cycles_per_s"] / by["pysim"]["cycles_per_s"], 1)
    print(f"fabric_speed: {args.preset} superpod {dpn}x{npb}x{nb} "
          f"({runs[0]['ranks'] if runs else '?'} ranks), uniform saturating traffic")
    print(f"{'backend':>10} {'elab/gen s':>10} {'build s':>8} {'cycles':>8} {'run s':>8} "
          f"{'cycles/s':>10} {'blk/cyc/rank':>12}")
    for r in runs:
        gen = r.get("elaborate_s", r.get("verilog_s", 0.0))
        build = r.get("build_s_original", r.get("build_s")) if r["backend"] != "pysim" else None
        build_txt = "-" if build is None else f"{build:.1f}" + ("*" if r.get("build_cached") else "")
        print(f"{r['backend']:>10} {gen:>10.1f} {build_txt:>8} {r['cycles']:>8} {r['run_s']:>8.2f} "
              f"{r['cycles_per_s']:>10.0f} {r['blocks_per_cycle_per_rank']:>12.3f}")
    if any(r.get("build_cached") for r in runs):
        print("  * build time of the cached model (this invocation reused it)")
    if ratio is not None:
        print(f"verilator / pysim: {ratio}x (cycles per second, same invocation)")
    if args.json:
        Path(args.json).write_text(json.dumps({"runs": runs, "verilator_over_pysim": ratio,
                                               "load": os.getloadavg()}, indent=2) + "\n")
        print(f"wrote {args.json}")
    return 0 if all(r["misrouted"] == 0 for r in runs) else 1


if __name__ == "__main__":
    # Through the importable module, so the intent's name resolves in the
    # simulator process (``__main__.speed_intent`` would not).
    from epfabric.sim import fabric_speed
    sys.exit(fabric_speed.main())
