"""``epfabric run KERNEL``: run a kernel on the simulated machine and check it.

Kernels (programs generated from the configuration only, each with a checker):

* ``pingpong`` — one-way latency per distance class (``latency_ns``), plus the
  cores' own overhead measured by a round trip that never leaves the die
  (``core_overhead_ns``), next to the fabric's class latencies;
* ``alltoall`` — every AIV of every rank sends one Token-Flag-Fusion block to
  every rank; receivers poll the flags; checked block by block against numpy;
* ``syncall`` — a two-level software barrier (fetch-add + poll) over every
  AIV, for several AIV counts per die (``barrier_cycles``); a check that no
  core left a barrier before the last one arrived.
"""

import json
import os
import sys
from pathlib import Path

from epfabric.sw.driver import Machine, MachineConfig, WatchdogTimeout
from epfabric.sw.kernels import alltoall, pingpong, syncall
from epfabric.sw.presets import get_preset, preset_names

from .machine import backend as make_backend
from .tools import SIMULATORS

__all__ = ["run_pingpong", "run_syncall", "KERNELS", "add_arguments", "main"]


def _superpod(preset):
    """The smallest superpod with all three distance classes the preset allows."""
    return ("superpod", min(2, preset.dies_per_npu), min(2, preset.npus_per_board),
            min(2, preset.boards))


def run_pingpong(preset_name, backend, max_cycles=200_000, topology=None, aivs=None):
    """Run ``pingpong``; return ``(result dict, [reports])``."""
    preset = get_preset(preset_name)
    machine = Machine(preset_name, backend=backend, topology=topology or _superpod(preset),
                      aivs_per_die=aivs or 2, hbm_blocks=8, imem_depth=128)
    pingpong.load(machine)
    report = machine.run(max_cycles)
    verdict = pingpong.check(machine, report, preset.cycle_ns)
    lat = verdict["latency_ns"]
    overhead = lat.pop("local", None)
    fabric = {c: preset.latency_ns()[c] for c in lat}
    expected = {c: fabric[c] + overhead for c in lat} if overhead is not None else {}
    result = {
        "kernel": "pingpong", "preset": preset_name, "backend": backend.name,
        "cycles": report.cycles, "correct": verdict["correct"], "problems": verdict["problems"],
        "latency_ns": lat,
        "core_overhead_ns": overhead,
        "fabric_latency_ns": fabric,
        "expected_latency_ns": expected,
        "error_pct": {c: 100.0 * (lat[c] - expected[c]) / expected[c] for c in expected},
        "config": report.config,
    }
    return result, [report]


def run_syncall(preset_name, backend, max_cycles=200_000, topology=None, aivs=None, epochs=2):
    """Run ``syncall`` for each AIV count per die; return ``(result dict, [reports])``."""
    preset = get_preset(preset_name)
    topology = topology or ("superpod", min(2, preset.dies_per_npu),
                            min(2, preset.npus_per_board), 1)
    rows, reports, problems = [], [], []
    for a in ([aivs] if aivs else (1, 2, 4)):
        machine = Machine(preset_name, backend=backend, topology=topology, aivs_per_die=a,
                          hbm_blocks=4)
        syncall.load(machine, epochs)
        report = machine.run(max_cycles)
        verdict = syncall.check(machine, report, epochs)
        problems += verdict["problems"]
        rows.append({"cores": machine.config.cores, "aivs_per_die": a, "dies": machine.ranks,
                     "cycles": max(verdict["barrier_cycles"]) if verdict["barrier_cycles"] else None,
                     "per_barrier_cycles": verdict["barrier_cycles"],
                     "ns": (max(verdict["barrier_cycles"]) * preset.cycle_ns
                            if verdict["barrier_cycles"] else None)})
        reports.append(report)
    result = {"kernel": "syncall", "preset": preset_name, "backend": backend.name,
              "correct": not problems, "problems": problems, "barrier_cycles": rows,
              "epochs": epochs, "topology": list(topology)}
    return result, reports


def run_alltoall(preset_name, backend, max_cycles=200_000, topology=None, aivs=None, seed=0):
    """Run ``alltoall``; return ``(result dict, [reports])``."""
    preset = get_preset(preset_name)
    topology = topology or ("superpod", min(2, preset.dies_per_npu), 1, 1)
    shape = MachineConfig(preset_name, topology=topology, aivs_per_die=aivs or 2)
    machine = Machine(preset_name, backend=backend, topology=topology, aivs_per_die=aivs or 2,
                      **alltoall.machine_sizes(shape))
    tok = alltoall.load(machine, seed)
    report = machine.run(max_cycles)
    verdict = alltoall.check(machine, report, tok)
    result = {"kernel": "alltoall", "preset": preset_name, "backend": backend.name,
              "cycles": report.cycles, "ns": report.ns, "correct": verdict["correct"],
              "problems": verdict["problems"], "blocks": verdict["blocks"],
              "topology": list(machine.config.topology), "aivs_per_die": machine.config.aivs_per_die,
              "dies": machine.ranks, "config": report.config}
    return result, [report]


KERNELS = {"pingpong": run_pingpong, "syncall": run_syncall, "alltoall": run_alltoall}


def parse_topology(text):
    """``"superpod:2,2,2"`` or ``"star:4"`` → a topology tuple."""
    kind, _, sizes = text.partition(":")
    try:
        nums = tuple(int(x) for x in sizes.split(",")) if sizes else ()
    except ValueError:
        raise ValueError(f"--topology must look like superpod:2,2,2 or star:4, not {text!r}") from None
    return (kind, *nums)


def _print(result):
    if result["kernel"] == "pingpong":
        print(f"pingpong on {result['preset']} [{result['backend']}]: "
              f"core overhead {result['core_overhead_ns']:.1f} ns one-way")
        print(f"{'class':>8} {'one-way ns':>11} {'fabric ns':>10} {'fabric+overhead':>16} {'error':>7}")
        for c in result["latency_ns"]:
            print(f"{c:>8} {result['latency_ns'][c]:>11.1f} {result['fabric_latency_ns'][c]:>10.1f} "
                  f"{result['expected_latency_ns'][c]:>16.1f} {result['error_pct'][c]:>+6.2f}%")
    elif result["kernel"] == "alltoall":
        print(f"alltoall on {result['preset']} [{result['backend']}]: {result['dies']} dies x "
              f"{result['aivs_per_die']} AIVs, {result['blocks']} TFF blocks, "
              f"{result['cycles']} cycles ({result['ns']:.0f} ns)")
    else:
        print(f"syncall on {result['preset']} [{result['backend']}], topology "
              f"{tuple(result['topology'])}, {result['epochs']} barriers back to back:")
        print(f"{'cores':>6} {'AIVs/die':>9} {'barrier cycles':>15} {'ns':>9}")
        for r in result["barrier_cycles"]:
            print(f"{r['cores']:>6} {r['aivs_per_die']:>9} {r['cycles']:>15} {r['ns']:>9.1f}")
    print("correct" if result["correct"] else "INCORRECT: " + "; ".join(result["problems"]))


def add_arguments(parser):
    parser.add_argument("kernel", choices=sorted(KERNELS), help="kernel to run")
    parser.add_argument("--preset", default=None,
                        help=f"preset ({', '.join(preset_names())}); default: cm384 for "
                             f"pingpong, tiny for syncall")
    parser.add_argument("--backend", choices=SIMULATORS, default="pysim", help="simulator")
    parser.add_argument("--topology", default=None,
                        help="machine shape, e.g. superpod:2,2,2 or star:4 (default: per kernel)")
    parser.add_argument("--aivs", type=int, default=None,
                        help="AIVs per die (default: per kernel; syncall sweeps 1, 2, 4)")
    parser.add_argument("--max-cycles", type=int, default=200_000,
                        help="watchdog limit per run (cycles)")
    parser.add_argument("--json", metavar="FILE", help="write the result as JSON")
    parser.add_argument("--trace", metavar="FILE",
                        help="write the MARK trace (Chrome/Perfetto trace-event JSON)")
    parser.add_argument("--vcd", metavar="FILE", help="write a VCD (+ .gtkw) of the run (pysim)")


def main(args):
    preset = args.preset or ("cm384" if args.kernel == "pingpong" else "tiny")
    get_preset(preset)
    if args.max_cycles < 1:
        raise ValueError(f"--max-cycles must be >= 1, not {args.max_cycles}")
    waveform, old_wdir = None, os.environ.get("EPFABRIC_WAVEFORM_DIR")
    if args.vcd:
        if args.backend != "pysim":
            raise ValueError("--vcd is written by the pysim backend; use --backend pysim")
        vcd = Path(args.vcd).resolve()
        vcd.parent.mkdir(parents=True, exist_ok=True)
        os.environ["EPFABRIC_WAVEFORM_DIR"] = str(vcd.parent)
        waveform = vcd.stem
    be = make_backend(args.backend, verbose=True, waveform=waveform)
    try:
        result, reports = KERNELS[args.kernel](
            preset, be, max_cycles=args.max_cycles,
            topology=parse_topology(args.topology) if args.topology else None, aivs=args.aivs)
    except WatchdogTimeout as exc:
        print(f"epfabric run {args.kernel}: {exc}", file=sys.stderr)
        return 1
    finally:
        if args.vcd:  # the waveform folder was redirected for this run only
            if old_wdir is None:
                os.environ.pop("EPFABRIC_WAVEFORM_DIR", None)
            else:
                os.environ["EPFABRIC_WAVEFORM_DIR"] = old_wdir
    _print(result)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
        print(f"wrote {args.json}")
    if args.trace:
        cycle_ns = get_preset(preset).cycle_ns
        events = []
        for i, rep in enumerate(reports):
            tr = rep.chrome_trace(cycle_ns)["traceEvents"]
            for ev in tr:  # one trace per run: separate them by pid range
                ev["pid"] = ev["pid"] + 1000 * i
            events += tr
        Path(args.trace).write_text(json.dumps({"traceEvents": events, "displayTimeUnit": "ns"}))
        print(f"wrote {args.trace} (open in ui.perfetto.dev or chrome://tracing)")
    return 0 if result["correct"] else 1
