"""``epfabric run KERNEL``: run a registered kernel on the simulated machine and check it.

Every kernel in :data:`epfabric.sw.kernels.KERNELS` is available with no code
here: the kernel chooses its default preset, shape and sizes, runs through
:func:`~epfabric.sw.kernels.run_kernel` and prints its own summary.
"""

import json
import os
import sys
from pathlib import Path

from ...sw.config import parse_topology
from ...sw.kernels import KERNELS, run_kernel
from ...sw.machine import WatchdogTimeout
from ...sw.presets import get_preset, preset_names
from ..backends import SIMULATORS
from ..backends.machine import backend as make_backend
from .common import check_output, parse_params, positive, write_json

__all__ = ["add_arguments", "prepare"]


def add_arguments(parser):
    parser.add_argument("kernel", choices=sorted(KERNELS),
                        help="kernel to run: " + "; ".join(f"{k.name}: {k.description}"
                                                          for k in KERNELS.values()))
    parser.add_argument("--preset", default=None,
                        help=f"preset ({', '.join(preset_names())}); default: the kernel's")
    parser.add_argument("--backend", choices=SIMULATORS, default="pysim", help="simulator")
    parser.add_argument("--topology", default=None,
                        help="machine shape, e.g. superpod:2,2,2 or star:4 (default: the kernel's)")
    parser.add_argument("--aivs", type=int, default=None,
                        help="AIVs per die (default: the kernel's; syncall sweeps 1, 2, 4)")
    parser.add_argument("--param", action="append", default=[], metavar="KEY=VALUE",
                        help="a kernel parameter (Python literal), e.g. --param seed=3")
    parser.add_argument("--max-cycles", type=int, default=None,
                        help="watchdog limit per run in cycles (default: the kernel's)")
    parser.add_argument("--json", metavar="FILE", help="write the result as JSON")
    parser.add_argument("--trace", metavar="FILE",
                        help="write the MARK trace (Chrome/Perfetto trace-event JSON)")
    parser.add_argument("--vcd", metavar="FILE", help="write a VCD (+ .gtkw) of the run (pysim)")


def prepare(args):
    kernel = KERNELS[args.kernel]
    preset = get_preset(args.preset or kernel.default_preset).name
    positive("--aivs", args.aivs)
    positive("--max-cycles", args.max_cycles)
    topology = parse_topology(args.topology) if args.topology else None
    params = kernel.resolve_params(parse_params(args.param))
    # every configuration is built (and so validated) before anything runs
    kernel.configs(preset, topology, args.aivs, params)
    for option in ("json", "trace", "vcd"):
        check_output(getattr(args, option), f"--{option}")
    if args.vcd and args.backend != "pysim":
        raise ValueError("--vcd is written by the pysim backend; use --backend pysim")

    def job():
        waveform, old_wdir = None, os.environ.get("EPFABRIC_WAVEFORM_DIR")
        if args.vcd:
            vcd = Path(args.vcd).resolve()
            os.environ["EPFABRIC_WAVEFORM_DIR"] = str(vcd.parent)
            waveform = vcd.stem
        be = make_backend(args.backend, verbose=True, waveform=waveform)
        try:
            result, reports = run_kernel(kernel, be, preset=preset, topology=topology,
                                         aivs=args.aivs, params=params, max_cycles=args.max_cycles)
        except WatchdogTimeout as exc:
            print(f"epfabric run {args.kernel}: {exc}", file=sys.stderr)
            return 1
        finally:
            if args.vcd:  # the waveform folder was redirected for this run only
                if old_wdir is None:
                    os.environ.pop("EPFABRIC_WAVEFORM_DIR", None)
                else:
                    os.environ["EPFABRIC_WAVEFORM_DIR"] = old_wdir
        for line in kernel.summary(result):
            print(line)
        print("correct" if result["correct"] else "INCORRECT: " + "; ".join(result["problems"]))
        if args.json:
            write_json(args.json, result)
        if args.trace:
            _write_trace(args.trace, reports, get_preset(preset).cycle_ns)
        return 0 if result["correct"] else 1
    return job


def _write_trace(path, reports, cycle_ns):
    from ..output import write_atomic
    events = []
    for i, rep in enumerate(reports):
        tr = rep.chrome_trace(cycle_ns)["traceEvents"]
        for ev in tr:  # one trace per run: separate them by pid range
            ev["pid"] = ev["pid"] + 1000 * i
        events += tr
    write_atomic(path, json.dumps({"traceEvents": events, "displayTimeUnit": "ns"}))
    print(f"wrote {path} (open in ui.perfetto.dev or chrome://tracing)")
