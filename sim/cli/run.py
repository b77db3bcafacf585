"""``epfabric run KERNEL``: run a registered kernel on the simulated machine and check it.

Every kernel in :data:`epfabric.sw.kernels.KERNELS` is available with no code
here: each of its parameters (:class:`~epfabric.sw.param.Param`) is an option, the
kernel chooses its default preset, shape and sizes, runs through
:func:`~epfabric.sw.kernels.run_kernel` and prints its own summary; a parameter given
a list runs once per value, compared by :mod:`epfabric.sw.kernels.compare`.

``--vcd FILE`` dumps the run on any backend (Amaranth's simulator: VCD;
Icarus and Verilator: their own tracing, VCD or — for a ``.fst`` name — FST;
Verilator builds a separate, tracing model only then) and writes
``FILE.gtkw`` (:func:`~epfabric.sim.waves.machine_view`): zoomed on the
run (markers A/B on its start and end), per ``--vcd-scope`` die/core the
core's state, pc, wait address and MARK events, the die's UB port commits
and its links' occupancy. A kernel that runs several machines (``syncall``)
writes ``FILE``, ``FILE-2``, ...
"""

import json
import sys
from pathlib import Path

from ...hw.validate import UserError
from ...sw.config import parse_topology
from ...sw.kernels import KERNELS, compare, run_kernel
from ...sw.machine import WatchdogTimeout
from ...sw.presets import get_preset, preset_names
from ...sw.report import chrome_traces
from ..backends import SIMULATORS, missing_reason
from ..backends.machine import backend as make_backend
from ..output import write_atomic
from ..waves import Waveform, scopes_for, write_run_views
from .common import check_output, max_cycles, parse_params, positive, write_json
from .kernel_options import add_kernel_options, kernel_options, option, parse_knobs
from .sampling import (AUTO_SAMPLE_EVERY, MIN_SAMPLES, TARGET_SAMPLES, TRACE_SAMPLE_DEPTH,
                       resample, sampling, say_dropped)

__all__ = ["add_arguments", "prepare"]


def add_arguments(parser):
    parser.epilog = ("A kernel parameter given as a list runs once per value (--system cann,ubep; "
                     "--roles and --counts separate values with ';': --roles '1,5,2;2,4,2'); "
                     "names match in any case (--system UBEP).")
    parser.add_argument("kernel", choices=sorted(KERNELS),
                        help="kernel to run: " + "; ".join(f"{k.name}: {k.description}"
                                                          for k in KERNELS.values()))
    parser.add_argument("--preset", default=None,
                        help=f"preset ({', '.join(preset_names())}) or a machine file FILE.toml "
                             "(epfabric presets --show cm384); default: the kernel's")
    parser.add_argument("--backend", choices=SIMULATORS, default="pysim", help="simulator")
    parser.add_argument("--topology", default=None,
                        help="machine shape, e.g. superpod:2,2,2 or star:4 (default: the kernel's)")
    parser.add_argument("--aivs", type=int, default=None,
                        help="AIVs per die (default: the kernel's; syncall sweeps 1, 2, 4)")
    parser.add_argument("--param", action="append", default=[], metavar="KEY=VALUE",
                        help="a kernel parameter (Python literal), e.g. --param seed=3")
    parser.add_argument("--knob", action="append", default=[], metavar="NAME=VALUE",
                        help="a die's runtime knob over the preset's (AIV kernels): "
                             "store_window=BLOCKS, syncall_cycles=CYCLES (with --syncall hard), "
                             "inject_rate=BYTES_PER_CYCLE*1024, vector_extra=CYCLES, read_extra=CYCLES "
                             "(a copy's start), poll_extra=CYCLES (a scalar read of global memory); "
                             "e.g. --knob syncall_cycles=5000")
    add_kernel_options(parser)
    parser.add_argument("--max-cycles", type=int, default=None,
                        help="watchdog limit per run in cycles (default: the kernel's)")
    parser.add_argument("--json", metavar="FILE", help="write the result as JSON")
    parser.add_argument("--trace", metavar="FILE",
                        help="write a Chrome/Perfetto trace-event JSON: per-AIV phase slices, "
                             "flow arrows and counter tracks of the die links and UB ports "
                             "sampled during the run (AIV kernels)")
    parser.add_argument("--sample-every", type=int, default=None, metavar="CYCLES",
                        help="with --trace: sample the counters every CYCLES cycles into a "
                             f"{TRACE_SAMPLE_DEPTH}-entry memory (0: no sampler); default: "
                             f"every {AUTO_SAMPLE_EVERY}, and a run given fewer than "
                             f"{MIN_SAMPLES} samples or more than fit runs once more at the "
                             f"interval that gives it ~{TARGET_SAMPLES}")
    parser.add_argument("--vcd", metavar="FILE",
                        help="write a waveform of the run + FILE.gtkw: FILE.vcd on every backend, "
                             "FILE.fst on icarus/verilator (smaller)")
    parser.add_argument("--vcd-scope", metavar="DIE:CORE[,...]", default=None,
                        help="cores the .gtkw shows (e.g. 1:0,0:1; a bare DIE: all its cores); "
                             "default 0:0")


def prepare(args):
    kernel = KERNELS[args.kernel]
    preset = get_preset(args.preset or kernel.default_preset).name
    positive("--aivs", args.aivs)
    max_cycles("--max-cycles", args.max_cycles)
    topology = parse_topology(args.topology) if args.topology else None
    params = parse_params(args.param)
    knobs = parse_knobs(args.knob, kernel, preset, topology, args.aivs)
    sweep = kernel_options(args, kernel, params)
    values = sweep[1] if sweep else [None]
    variants = [kernel.resolve_params({**params, **({sweep[0]: v} if sweep else {})})
                for v in values]
    if sweep and args.vcd:
        raise UserError(f"--vcd needs one value of {option(sweep[0])}")
    # every configuration is built (and so validated) before anything runs
    configs = [c for p in variants for c in kernel.configs(preset, topology, args.aivs, p)]
    # a comparison whose machine one variant's serves for all (cann,ubep,ubep-inc): one build
    shared = kernel.shared_machine(variants) if sweep else None
    machines = None if shared is None else kernel.configs(preset, topology, args.aivs, shared)
    for out in ("json", "trace", "vcd"):
        check_output(getattr(args, out), f"--{out}")
    sampler = sampling(args, configs)
    scopes = _check_waveform(args, configs)
    reason = missing_reason(args.backend)
    if reason:
        raise UserError(f"--backend {args.backend}: {reason}")
    shape = dict(preset=preset, topology=topology, aivs=args.aivs, max_cycles=args.max_cycles,
                 knobs=knobs, configs=machines)

    def job():
        waveform = Waveform(Path(args.vcd).resolve(), watch=("host.running",)) if args.vcd else None
        be = make_backend(args.backend, verbose=True, waveform=waveform)
        results, traced, status = [], [], 0
        try:
            status = _runs(be, waveform, results, traced)
        except KeyboardInterrupt:
            written = [o for o in ("--json", "--trace") if getattr(args, o[2:])]
            if results and written:   # Ctrl-C: keep what finished (a sweep's first systems)
                _outputs(results, traced, interrupted=True)
                print(f"epfabric run {args.kernel}: interrupted after {len(results)} of "
                      f"{len(variants)} runs; {' and '.join(written)} "
                      f"{'hold' if len(written) > 1 else 'holds'} them",
                      file=sys.stderr)
            raise
        if status is None:
            return 1
        if sweep:
            lines, differ = compare.sweep_lines(sweep, results)
            for line in lines:
                print(line)
            status |= int(differ)
        _outputs(results, traced)
        return status

    def _outputs(results, traced, interrupted=False):
        if args.trace:
            doc = chrome_traces(traced, get_preset(preset).cycle_ns, kernel.trace_spans,
                                kernel.trace_phases)
            write_atomic(args.trace, json.dumps(doc))
            print(f"wrote {args.trace} (open in ui.perfetto.dev or chrome://tracing)")
        if args.json:
            docs = [r.to_dict() for r in results]
            doc = (docs[0] if not sweep else
                   {"kernel": kernel.name, "sweep": sweep[0], "values": sweep[1][:len(results)],
                    "correct": all(r.correct for r in results), "results": docs})
            write_json(args.json, {**doc, "interrupted": True} if interrupted else doc)

    def _runs(be, waveform, results, traced):
        """Run every variant into ``results``/``traced``; the exit status, ``None`` on a hang."""
        status = 0
        for value, params in zip(values, variants):
            try:
                result = run_kernel(kernel, be, params=params, sampling=sampler, **shape)
                again = resample(args, sampler, result)
                if again:
                    result = run_kernel(kernel, be, params=params, sampling=(sampler[0], again),
                                        **shape)
                say_dropped(result)
            except WatchdogTimeout as exc:
                print(f"epfabric run {args.kernel}: {exc}", file=sys.stderr)
                write_run_views(waveform, scopes)      # the waveform shows where it hung
                return None
            write_run_views(waveform, scopes)
            for line in kernel.summary(result):
                print(line)
            print("correct" if result.correct else "INCORRECT: " + "; ".join(result.problems))
            if args.trace:
                traced += kernel.trace_runs(result, sweep and (sweep[0], value), flows=True)
            results.append(result)
            status |= 0 if result.correct else 1
        return status
    return job


def _check_waveform(args, configs):
    """Validate ``--vcd``/``--vcd-scope`` against the backend and every configuration; return
    the ``(die, core)`` pairs to show (``None`` for a machine without AIV cores)."""
    if args.vcd_scope is not None and not args.vcd:
        raise UserError("--vcd-scope needs --vcd")
    if not args.vcd:
        return None
    if args.backend == "native":
        raise UserError(f"--vcd {args.vcd!r}: the native backend writes no waveforms; "
                        "use --backend verilator, icarus or pysim")
    if Path(args.vcd).suffix == ".fst":
        from ..backends.cocotb_runner import fst_missing
        reason = fst_missing(args.backend)
        if reason:
            raise UserError(f"--vcd {args.vcd!r}: {reason}; name a .vcd file"
                            + (" or use --backend icarus/verilator" if args.backend == "pysim"
                                else ""))
    return scopes_for(args.vcd_scope, configs)
