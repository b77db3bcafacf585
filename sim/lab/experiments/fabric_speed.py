"""Fabric speed: simulated cycles per second of a superpod under saturating uniform traffic.

``epfabric fabric-speed [--backends pysim,verilator,native] [--cycles N] [--json FILE]``
(``make fabric-speed``) runs :class:`~epfabric.sim.tb.traffic.TrafficFabric` — by
default the 2-board × 16-die (32 ranks) ``cm384`` superpod, every rank
sending uniformly to the other 31 at full rate (UBEP §2.3 Insight 3) — on
each backend and reports

* ``elaborate_s`` (pysim: building the component and the simulator) or
  ``verilog_s`` + ``build_s`` (Verilator: Verilog generation, then the C++
  model build; cached by content, so a rerun reports the cache hit; native:
  the same for :mod:`~epfabric.sim.backends.native` -- the fabric has no
  shared modules, so its native design is one glue model, stepped by the C++
  top through ctypes instead of cocotb);
* ``run_s`` — wall time of ``await bench.wait_high("done")`` alone, measured
  inside the simulator process; no Python runs per cycle on Verilator (a
  native edge trigger), the hardware sources and sinks need no testbench;
* ``cycles_per_s`` = simulated cycles / ``run_s``;

and the Verilator / pysim and native / Verilator ratios of cycles per second
measured in the same invocation. Measured figures go to the ``--json`` file
the command writes, not into this docstring.
"""

import sys
import time

from tabulate import tabulate

from ...tb.traffic import TrafficFabric
from ....hw.topology import superpod_ranks
from ....hw.validate import UserError, check_choice, check_int
from ....sw.presets import get_preset, preset_names
from ...backends import ComponentSpec, missing_reason, run
from ...backends.cocotb_runner import build, build_dir_for
from ...backends.toolchain import OPT_LEVELS, parse_backends
from ...backends.verilog import verilog_of
from . import Experiment, Param, register

__all__ = ["traffic_fabric", "traffic_spec", "speed_intent", "run_backend", "DEFAULT_CYCLES",
           "SPEED_OPT", "FabricSpeed", "EXPERIMENT"]

#: Cycles per backend by default: a few hundred on pysim (~20 cycles/s at 32
#: ranks), enough on Verilator for a figure stable to a few per cent.
DEFAULT_CYCLES = {"pysim": 300, "icarus": 2_000, "verilator": 200_000, "native": 200_000}
SPEED_OPT = "-O2"


def traffic_fabric(*, preset="cm384", dies_per_npu=2, npus_per_board=8, boards=2, data_bytes=2):
    """JSON-facing factory of a :class:`TrafficFabric` (usable as a ComponentSpec)."""
    p = get_preset(preset)
    p.check_shape(dies_per_npu, npus_per_board, boards)
    return TrafficFabric(p.fabric_timing("superpod"), dies_per_npu, npus_per_board, boards,
                         data_bytes=data_bytes)


def _traffic_signature(*, preset="cm384", dies_per_npu=2, npus_per_board=8, boards=2,
                       data_bytes=2):
    """The signature of :func:`traffic_fabric`'s fabric, without building it (shape checked)."""
    return TrafficFabric.signature_of(traffic_ranks(preset=preset, dies_per_npu=dies_per_npu,
                                                     npus_per_board=npus_per_board, boards=boards))


#: what a testbench of the fabric's Verilog drives, without building it
traffic_fabric.signature_for = _traffic_signature


def traffic_ranks(*, preset="cm384", dies_per_npu=2, npus_per_board=8, boards=2, data_bytes=2):
    """Ranks of :func:`traffic_fabric` with these parameters, without building it (shape checked)."""
    get_preset(preset).check_shape(dies_per_npu, npus_per_board, boards)
    return superpod_ranks(dies_per_npu, npus_per_board, boards)


def traffic_spec(**params):
    """ComponentSpec of :func:`traffic_fabric` with ``params``."""
    return ComponentSpec("epfabric.sim.lab.experiments.fabric_speed:traffic_fabric", dict(params))


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


def run_backend(backend, cycles, *, params=None, opt=SPEED_OPT, drain=0):
    """Build and run one backend; return the JSON row."""
    params = dict(params or {})
    spec = traffic_spec(**params)
    ranks = traffic_ranks(**params)
    row = {"backend": backend, "ranks": ranks, "params": params}
    if backend == "pysim":
        from amaranth.sim import Simulator
        _say(f"[{backend}] elaborating {ranks}-rank fabric ...")
        t0 = time.monotonic()
        Simulator(spec.build())
        row["elaborate_s"] = round(time.monotonic() - t0, 2)
        _say(f"[{backend}] elaborated in {row['elaborate_s']:.1f} s")
    elif backend == "native":
        # The fabric has no shared modules: its native design is all glue, one
        # Verilated model stepped by the C++ top through ctypes (no cocotb).
        from ...backends.native import build_native
        from ...backends.native_build import native_design
        _say(f"[{backend}] generating Verilog ...")
        t0 = time.monotonic()
        design = native_design(spec)
        row["verilog_s"] = round(time.monotonic() - t0, 2)
        row["verilog_bytes"] = len(design["glue"]) + sum(map(len, design["modules"].values()))
        _say(f"[{backend}] Verilog {row['verilog_bytes'] / 1e6:.1f} MB in {row['verilog_s']:.1f} s; "
             f"building native model ({opt}) ...")
        t0 = time.monotonic()
        build_native(spec, opt)
        row["build_s"] = round(time.monotonic() - t0, 2)
        row["opt"] = opt
        _say(f"[{backend}] model ready in {row['build_s']:.1f} s")
    else:
        _say(f"[{backend}] generating Verilog ...")
        t0 = time.monotonic()
        text = verilog_of(spec, backend)
        row["verilog_s"] = round(time.monotonic() - t0, 2)
        row["verilog_bytes"] = len(text)
        bdir = build_dir_for(text, backend, False, opt)
        cached = (bdir / "built.ok").exists()
        _say(f"[{backend}] Verilog {len(text) / 1e6:.1f} MB in {row['verilog_s']:.1f} s; "
             + ("model cached" if cached else f"building model ({opt}) in {bdir} ..."))
        t0 = time.monotonic()
        build(spec, backend, False, opt)
        row["build_s"] = round(time.monotonic() - t0, 2)
        row["build_cached"] = cached
        if cached:
            row["build_s_original"] = float((bdir / "built.ok").read_text().strip() or 0)
        row["opt"] = opt
        _say(f"[{backend}] model ready in {row['build_s']:.1f} s")
    _say(f"[{backend}] running {cycles} cycles ...")
    t0 = time.monotonic()
    result, _ = run(spec, speed_intent, {"cycles": cycles, "ranks": ranks, "drain": drain},
                    simulator=backend, opt=opt)
    row["process_s"] = round(time.monotonic() - t0, 2)
    row.update({k: result[k] for k in ("cycles", "sent", "received", "misrouted")})
    row["run_s"] = round(result["run_s"], 3)
    row["cycles_per_s"] = round(result["cycles"] / result["run_s"], 1)
    row["blocks_per_cycle_per_rank"] = round(result["sent"] / result["cycles"] / ranks, 3)
    _say(f"[{backend}] {result['cycles']} cycles in {row['run_s']:.2f} s = "
         f"{row['cycles_per_s']:.0f} cycles/s; sent {result['sent']}, received {result['received']}")
    return row


class FabricSpeed(Experiment):
    """One row per backend: cycles/s of the loaded superpod fabric."""

    name = "fabric_speed"
    title = "simulated cycles per second of a superpod fabric under saturating uniform traffic"
    params = (
        Param("backends", "pysim,verilator", "comma-separated backends", str),
        Param("cycles", None, "cycles per backend (default: per backend, DEFAULT_CYCLES)", int),
        Param("pysim_cycles", None, "cycles on pysim (overrides cycles)", int),
        Param("preset", "cm384", f"preset ({', '.join(preset_names())})", str, tuple(preset_names())),
        Param("shape", "2,8,2", "dies_per_npu,npus_per_board,boards", str),
        Param("opt", SPEED_OPT, "Verilator C++ optimisation level", str),
    )

    def resolve(self, **given):
        p = super().resolve(**given)
        parse_backends("backends", p["backends"])
        check_choice("opt", p["opt"], OPT_LEVELS)
        try:
            dpn, npb, nb = (int(x) for x in p["shape"].split(","))
        except ValueError:
            raise UserError(f"shape must be three integers a,b,c, not {p['shape']!r}") from None
        get_preset(p["preset"]).check_shape(dpn, npb, nb)
        for name in ("cycles", "pysim_cycles"):
            if p[name] is not None:
                check_int(name, p[name], 1)
        return p

    #: wall-clock figures: points run one at a time, never beside each other
    parallel = False

    def points(self, params, quick=False):
        backends = [b for b in params["backends"].split(",") if b and not missing_reason(b)]
        shape = "2,2,2" if quick else params["shape"]
        out = []
        for b in backends:
            cycles = params["cycles"] if params["cycles"] is not None else DEFAULT_CYCLES[b]
            if b == "pysim" and params["pysim_cycles"] is not None:
                cycles = params["pysim_cycles"]
            if quick:
                cycles = min(cycles, 200 if b == "pysim" else 20_000)
            out.append({"backend": b, "cycles": cycles, "preset": params["preset"], "shape": shape,
                        "opt": "-O0" if quick else params["opt"]})
        return out

    def measure(self, point):
        dpn, npb, nb = (int(x) for x in point["shape"].split(","))
        params = {"preset": point["preset"], "dies_per_npu": dpn, "npus_per_board": npb,
                  "boards": nb, "data_bytes": 2}
        row = run_backend(point["backend"], point["cycles"], params=params, opt=point["opt"])
        row.pop("params", None)
        return row

    def verdict(self, rows):
        """No paper figure: ``None`` when every run moved traffic correctly, ``False`` otherwise.

        The papers give no simulator speed, so there is no number to hold against; a run that
        sent nothing, misrouted a block or received more than was sent measured a broken
        fabric, and the verdict says no."""
        rule = ("tolerance: none on correctness, no misrouted block, traffic sent and no more "
                "received than sent; no paper figure for speed")
        wrong = [r["backend"] for r in rows
                 if r.get("misrouted", 0) or not r.get("sent") or r.get("received", 0) > r["sent"]]
        if wrong:
            return False, f"broken run(s) on {', '.join(wrong)} ({rule})"
        by = {r["backend"]: r for r in rows}
        if "verilator" in by and "pysim" in by:
            x = by["verilator"]["cycles_per_s"] / by["pysim"]["cycles_per_s"]
            return None, f"Verilator {x:.0f}x Amaranth's simulator on the loaded fabric ({rule})"
        return None, f"cycles/s per backend (the papers give no simulator speed; {rule})"

    def plot(self, rows, path):
        from ..results.plot import save, subplots
        fig, (ax,) = subplots()
        ax.bar([r["backend"] for r in rows], [r["cycles_per_s"] for r in rows])
        ax.set_yscale("log")
        ax.set_ylabel("simulated cycles per second")
        save(fig, path, f"Fabric speed: {rows[0]['preset']} superpod {rows[0]['shape']} "
                        f"under uniform saturating traffic (no paper figure)")

    def format(self, rows):
        table = []
        for r in rows:
            gen = r.get("elaborate_s", r.get("verilog_s", 0.0))
            build_s = r.get("build_s_original", r.get("build_s")) if r["backend"] != "pysim" else None
            build_txt = "-" if build_s is None else f"{build_s:.1f}" + ("*" if r.get("build_cached") else "")
            table.append((r["backend"], f"{gen:.1f}", build_txt, r["cycles"], f"{r['run_s']:.2f}",
                          f"{r['cycles_per_s']:.0f}", f"{r['blocks_per_cycle_per_rank']:.3f}"))
        lines = [tabulate(table, headers=("backend", "elab/gen s", "build s", "cycles", "run s",
                                          "cycles/s", "blk/cyc/rank"),
                          disable_numparse=True, colalign=("right",) * 7)]
        if any(r.get("build_cached") for r in rows):
            lines.append("  * build time of the cached model (this invocation reused it)")
        by = {r["backend"]: r for r in rows}
        if "verilator" in by and "pysim" in by:
            ratio = round(by["verilator"]["cycles_per_s"] / by["pysim"]["cycles_per_s"], 1)
            lines.append(f"verilator / pysim: {ratio}x (cycles per second, same invocation)")
        if "native" in by and "verilator" in by:
            ratio = round(by["native"]["cycles_per_s"] / by["verilator"]["cycles_per_s"], 2)
            lines.append(f"native / verilator: {ratio}x (cycles per second, same invocation)")
        return "\n".join(lines)


EXPERIMENT = register(FabricSpeed())
