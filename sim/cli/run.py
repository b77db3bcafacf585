"""``epfabric run KERNEL``: run a registered kernel on the simulated machine and check it.

Every kernel in :data:`epfabric.sw.kernels.KERNELS` is available with no code
here: the kernel chooses its default preset, shape and sizes, runs through
:func:`~epfabric.sw.kernels.run_kernel` and prints its own summary.

``--vcd FILE`` dumps the run on any backend (Amaranth's simulator: VCD;
Icarus and Verilator: their own tracing, VCD or — for a ``.fst`` name — FST;
Verilator builds a separate, tracing model only then) and writes
``FILE.gtkw`` (:func:`~epfabric.sim.backends.waveforms.machine_view`): zoomed on the
run (markers A/B on its start and end), per ``--vcd-scope`` die/core the
core's state, pc, wait address and MARK events, the die's UB port commits
and its links' occupancy. A kernel that runs several machines (``syncall``)
writes ``FILE``, ``FILE-2``, ...
"""

import json
import sys
from pathlib import Path

from ...hw.validate import UserError, check_int
from ...sw.config import parse_topology
from ...sw.kernels import KERNELS, run_kernel
from ...sw.machine import WatchdogTimeout
from ...sw.presets import get_preset, preset_names
from ..backends import SIMULATORS, missing_reason
from ..backends.machine import backend as make_backend
from ..backends.waveforms import Waveform, parse_scopes
from .common import check_output, max_cycles, parse_params, positive, write_json

__all__ = ["add_arguments", "prepare", "TRACE_SAMPLE_DEPTH", "AUTO_SAMPLE_EVERY"]

#: entries of the counter sampler ``--trace`` builds (MachineConfig.sample_depth)
TRACE_SAMPLE_DEPTH = 1024
#: ``--trace``'s first sampling interval when ``--sample-every`` is not given
AUTO_SAMPLE_EVERY = 8
#: without ``--sample-every``, a run with fewer samples than this, or with samples dropped,
#: runs again at the interval that gives it about TARGET_SAMPLES (cycles do not change)
MIN_SAMPLES, TARGET_SAMPLES = 200, 400


def add_arguments(parser):
    parser.epilog = ("A kernel parameter given as a list runs once per value (--system cann,ubep; "
                     "--roles and --counts separate values with ';': --roles '1,5,2;2,4,2'); "
                     "names match in any case (--system UBEP).")
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
    parser.add_argument("--knob", action="append", default=[], metavar="NAME=VALUE",
                        help="a die's runtime knob over the preset's (AIV kernels): "
                             "store_window=BLOCKS, syncall_cycles=CYCLES (with --syncall hard), "
                             "inject_rate=BYTES_PER_CYCLE*1024, vector_extra=CYCLES, read_extra=CYCLES; "
                             "e.g. --knob syncall_cycles=5000")
    taken = {a.dest for a in parser._actions}
    for name in sorted({n for k in KERNELS.values() for n in k.params} - taken):
        parser.add_argument(f"--{name.replace('_', '-')}", dest=f"kernel_{name}", default=None,
                            metavar="VALUE", help=_kernel_option_help(name))
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


def _kernel_option_help(name):
    """``--NAME``'s help: what it sets, its values where they are names, each kernel's default."""
    owners = [k for k in KERNELS.values() if name in k.params]
    choices = {tuple(k.choices[name]) for k in owners if name in k.choices}
    values = ", ".join(sorted({str(v) for c in choices for v in c}))
    defaults = {}
    for k in owners:
        default = k.params[name]
        defaults.setdefault("unset (the kernel chooses)" if default is None else repr(default),
                            []).append(k.name)
    text = "; ".join(f"{d} ({', '.join(ks)})" for d, ks in defaults.items())
    return (f"kernel parameter {name} (= --param {name}=VALUE)"
            + (f": one of {values}" if values else "") + f"; default {text}")


def _canonical(kernel, name, value):
    """``value`` as ``kernel`` names it when it differs only in case (``UBEP`` → ``ubep``)."""
    if isinstance(value, str):
        for choice in kernel.choices.get(name, ()):
            if isinstance(choice, str) and choice.lower() == value.lower():
                return choice
    return value


def _knobs(given, kernel, preset, topology, aivs):
    """``{name: value}`` of ``--knob NAME=VALUE`` options, each checked (name and range) on a
    machine of the kernel's before anything runs."""
    from ...hw.die import KNOBS, check_knob
    knobs = {}
    for text in given:
        name, eq, value = text.partition("=")
        if not eq or not value.strip().isdigit():
            raise UserError(f"--knob must be NAME=INTEGER (a knob of {', '.join(KNOBS)}), "
                            f"not {text!r}")
        knobs[name.strip()] = int(value)
    if knobs:
        config = kernel.configs(preset, topology, aivs, kernel.resolve_params({}))[0]
        if config.kind != "aiv":
            raise UserError(f"--knob: kernel {kernel.name} does not run on the AIV machine")
        for name, value in knobs.items():
            check_knob(name, value, config.max_outstanding)
    return knobs


def prepare(args):
    kernel = KERNELS[args.kernel]
    preset = get_preset(args.preset or kernel.default_preset).name
    positive("--aivs", args.aivs)
    max_cycles("--max-cycles", args.max_cycles)
    topology = parse_topology(args.topology) if args.topology else None
    params = parse_params(args.param)
    knobs = _knobs(args.knob, kernel, preset, topology, args.aivs)
    sweep = None                       # (name, [values]) of the one option given a list
    for key, value in vars(args).items():
        if key.startswith("kernel_") and value is not None:
            name = key[len("kernel_"):]
            option = f"--{name.replace('_', '-')}"
            if name not in kernel.params:
                valid = ", ".join(f"--{n.replace('_', '-')}" for n in kernel.params) or "none"
                raise UserError(f"{option} is not a parameter of kernel {kernel.name}; its "
                                f"parameters: {valid}")
            if name in params:
                raise UserError(f"{option} and --param {name}=... both given")
            if name in getattr(kernel, "sequence_params", ()):
                # a sequence-valued parameter: "1,5,2" is one value, ";" separates values
                values = [tuple(parse_params([f"{name}={x}"])[name] for x in v.split(","))
                          for v in value.split(";")]
            else:
                values = [_canonical(kernel, name, parse_params([f"{name}={v}"])[name])
                          for v in value.split(",")]
            if len(values) > 1:
                if sweep:
                    raise UserError(f"one option may list values, not {option} and "
                                    f"--{sweep[0].replace('_', '-')}")
                sweep = (name, values)
            params[name] = values[0]
    variants = [kernel.resolve_params({**params, **({sweep[0]: v} if sweep else {})})
                for v in (sweep[1] if sweep else [None])]
    if sweep and args.vcd:
        raise UserError(f"--vcd needs one value of --{sweep[0].replace('_', '-')}")
    # every configuration is built (and so validated) before anything runs
    configs = [c for p in variants for c in kernel.configs(preset, topology, args.aivs, p)]
    # a comparison whose machine one variant's serves for all (cann,ubep,ubep-inc): one build
    shared = getattr(kernel, "shared_machine", lambda variants: None)(variants) if sweep else None
    machines = None if shared is None else kernel.configs(preset, topology, args.aivs, shared)
    for option in ("json", "trace", "vcd"):
        check_output(getattr(args, option), f"--{option}")
    sampling = _sampling(args, configs)
    scopes = _check_waveform(args, configs)
    reason = missing_reason(args.backend)
    if reason:
        raise UserError(f"--backend {args.backend}: {reason}")

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
            for line in _compare(sweep, results):
                print(line)
            for line in _stage_table(sweep, results):
                print(line)
            same = _same_outputs(sweep, results)
            for line in same:
                print(line)
            status |= int(any(line.startswith("DIFFER") for line in same))
        _outputs(results, traced)
        return status

    def _outputs(results, traced, interrupted=False):
        if args.trace:
            _write_trace(args.trace, traced, get_preset(preset).cycle_ns,
                         getattr(kernel, "trace_spans", None),
                         getattr(kernel, "trace_phases", None))
        if args.json:
            doc = (results[0] if not sweep else
                   {"kernel": kernel.name, "sweep": sweep[0], "values": sweep[1][:len(results)],
                    "correct": all(r["correct"] for r in results), "results": results})
            write_json(args.json, {**doc, "interrupted": True} if interrupted else doc)

    def _runs(be, waveform, results, traced):
        """Run every variant into ``results``/``traced``; the exit status, ``None`` on a hang."""
        status = 0
        for value, params in zip(sweep[1] if sweep else [None], variants):
            try:
                result, reports = run_kernel(kernel, be, preset=preset, topology=topology,
                                             aivs=args.aivs, params=params,
                                             max_cycles=args.max_cycles, knobs=knobs,
                                             sampling=sampling, configs=machines)
                again = _resample(args, sampling, reports)
                if again:
                    result, reports = run_kernel(kernel, be, preset=preset, topology=topology,
                                                 aivs=args.aivs, params=params,
                                                 max_cycles=args.max_cycles, knobs=knobs,
                                                 sampling=(sampling[0], again), configs=machines)
                _say_dropped(reports)
            except WatchdogTimeout as exc:
                print(f"epfabric run {args.kernel}: {exc}", file=sys.stderr)
                _write_gtkw(waveform, scopes)      # the waveform shows where it hung
                return None
            _write_gtkw(waveform, scopes)
            for line in kernel.summary(result):
                print(line)
            print("correct" if result["correct"] else
                  "INCORRECT: " + "; ".join(result["problems"]))
            flows = getattr(kernel, "trace_flows", None) if args.trace else None
            run_configs = ((machines or kernel.configs(preset, topology, args.aivs, params))
                           if flows else [None] * len(reports))
            for run, report, config in zip(result["runs"], reports, run_configs):
                label = _run_label(sweep and (sweep[0], value), run, len(reports))
                shift = 0                  # the runs before this one (combine: its dispatch)
                for name, inner in getattr(report, "inner_runs", ()):
                    inner_flows = getattr(KERNELS.get(name), "trace_flows", None)
                    traced.append((f"{label} {name}".strip(), inner,
                                   inner_flows(config, params) if flows and inner_flows
                                   else None, 0))
                    shift += inner.cycles
                traced.append((label, report, flows(config, params) if flows else None, shift))
            results.append(result)
            status |= 0 if result["correct"] else 1
        return status
    return job


def _sampling(args, configs):
    """``(sample_depth, sample_every)`` of the counter sampler ``--trace`` builds, or ``None``
    (no ``--trace``, ``--sample-every 0``, or no AIV machine to sample)."""
    every = args.sample_every
    if every is not None and not args.trace:
        raise UserError("--sample-every needs --trace (the counter tracks are in the trace)")
    if every is not None:
        check_int("--sample-every", every, 0, (1 << 32) - 1)
        if not any(c.kind == "aiv" for c in configs):
            raise UserError(f"--sample-every: kernel {args.kernel} does not run on the AIV "
                            f"machine (its counters are not sampled)")
    if not args.trace or every == 0 or not any(c.kind == "aiv" for c in configs):
        return None
    return TRACE_SAMPLE_DEPTH, AUTO_SAMPLE_EVERY if every is None else every


def _all_reports(reports):
    """Every report of a kernel invocation, the runs its load made first included."""
    for report in reports:
        yield from (inner for _name, inner in getattr(report, "inner_runs", ()))
        yield report


def _resample(args, sampling, reports):
    """The interval of a second run when ``--sample-every`` was not given and a run got fewer
    than MIN_SAMPLES samples or dropped some (the longest run then gets ~TARGET_SAMPLES);
    ``None``: keep these runs. Says so when it runs again."""
    if sampling is None or args.sample_every is not None:
        return None
    sampled = [r for r in _all_reports(reports) if r.samples]
    if not sampled:
        return None
    longest = max(r.cycles for r in sampled)
    fewest = min(len(r.samples["cycles"]) for r in sampled)
    dropped = sum(r.samples["dropped"] for r in sampled)
    every = max(1, -(-longest // TARGET_SAMPLES))
    if (fewest >= MIN_SAMPLES and not dropped) or every == sampling[1]:
        return None
    why = (f"{dropped} counter samples did not fit" if dropped else
           f"{fewest} counter samples every {sampling[1]} cycles")
    print(f"{why}: running again with --sample-every {every} (the longest run is "
          f"{longest:,} cycles; the cycles do not change)")
    return every


def _say_dropped(reports):
    """One line per run whose sampler memory filled (its trace's rate tracks end early)."""
    for r in _all_reports(reports):
        s = r.samples
        if s and s["dropped"]:
            print(f"counter sampler: {s['depth']} samples every {s['every']} cycles cover cycles "
                  f"0..{s['cycles'][-1]:,} of {r.cycles:,}; {s['dropped']} dropped "
                  f"(--sample-every {max(1, -(-r.cycles // (s['depth'] - 1)))} covers the run)")


def _compare(sweep, results):
    """Latency of each value against the first, for every run (and a combine's dispatch): the
    kernel's own where it reports one (``latency_cycles``: daf's excludes set-up and
    re-arming), else the run's cycles (the kernel is the whole run)."""
    name, values = sweep
    lines = []
    base = results[0]["runs"]
    for value, result in zip(values[1:], results[1:]):
        for run0, run in zip(base, result["runs"]):
            pairs = [("", run0, run)]
            if "dispatch" in run and run["dispatch"].get("cycles"):
                pairs.insert(0, ("dispatch ", run0["dispatch"], run["dispatch"]))
            for label, a, b in pairs:
                key = ("latency_cycles" if a.get("latency_cycles") and b.get("latency_cycles")
                       else "cycles")
                if a[key]:
                    r = b[key] / a[key]
                    lines.append(f"{label}{result['kernel'] if not label else ''}".strip()
                                 + f": {name}={value} / {name}={values[0]} latency "
                                 f"{b[key]} / {a[key]} cycles = {r:.2f} "
                                 f"({100 * (1 - r):+.1f} % cut)")
    return lines


#: the payload digests a kernel's checker reports, per rank: what must be the same across systems
_DIGESTS = (("dispatch", "OUT", "out_payload_digest"), ("combine", "y", "y_payload_digest"))


def _same_outputs(sweep, results):
    """For a ``--system`` sweep whose runs all passed their checks: whether every system left
    the same outputs, compared by the checkers' per-rank payload digests (a dispatch's ``OUT``,
    a combine's ``y`` and its dispatch's ``OUT``). A line starting ``DIFFER`` names the first
    system and rank that differ (the run then exits 1). Empty for any other sweep, or when a
    kernel reports no digest. ``COUNTS`` and ``EXPAND`` are compared to numpy by each
    system's checker, so they need no digest here."""
    if sweep[0] != "system" or len(results) < 2 or not all(r["correct"] for r in results):
        return []
    lines = []
    for kernel, what, key in _DIGESTS:
        per_system = []                 # [[digests of each run of one system]]
        for result in results:
            runs = [run if key in run else (run.get("dispatch") or {}) for run in result["runs"]]
            per_system.append([run.get(key) for run in runs])
        if any(d is None for runs in per_system for d in runs):
            continue
        base = per_system[0]
        differ = None
        for value, runs in zip(sweep[1][1:], per_system[1:]):
            for i, (digests, ref) in enumerate(zip(runs, base)):
                if digests != ref:
                    rank = next((r for r, (a, b) in enumerate(zip(digests, ref)) if a != b),
                                min(len(digests), len(ref)))
                    differ = (f"DIFFER: {kernel} {what} of system={value} (run {i}, rank "
                              f"{rank}) is not system={sweep[1][0]}'s")
                    break
            if differ:
                break
        lines.append(differ or f"{kernel} outputs: {what} payloads identical across "
                               f"{', '.join(map(str, sweep[1]))} on all {len(base[0])} ranks")
    return lines


def _stage_table(sweep, results):
    """UBEP Fig. 8's stages side by side for a ``--system`` sweep of a dispatch (or a
    combine's dispatch): mean cycles over each kind of AIV (CANN's, UBEP's T- and C-AIVs),
    from each AIV's phase-end MARKs (:func:`~epfabric.sim.lab.experiments.ubep_runs.phase_stack`).
    Empty for any other sweep."""
    from ..lab.experiments.ubep_runs import STAGES, phase_stack
    if sweep[0] != "system":
        return []
    rows = []
    for value, result in zip(sweep[1], results):
        run = result["runs"][0]
        run = run.get("dispatch") if "dispatch" in run else run
        if not run or not run.get("phases"):
            return []
        groups = {}
        for phases in run["phases"].values():
            try:
                stack = phase_stack(value, phases)
            except KeyError:
                return []                      # not a dispatch's phases
            role = value if value == "cann" else ("T-AIVs" if "send" in phases else "C-AIVs")
            groups.setdefault(role, []).append(stack)
        for role, stacks in groups.items():
            label = role if role == value else f"{value} {role}"
            rows.append((f"{label} ({len(stacks)})",
                         [sum(st[s] for st in stacks) / len(stacks) for s in STAGES]))
    names = {"flag_verify": "flag+verify"}
    head = [names.get(s, s) for s in STAGES]
    width = max(len(r[0]) for r in rows)
    lines = ["dispatch stages (UBEP Fig. 8; cycles, mean over the AIVs of each kind):",
             "  " + " " * width + "".join(f"{h:>13}" for h in head)]
    lines += ["  " + f"{label:<{width}}" + "".join(f"{v:13.1f}" for v in vals)
              for label, vals in rows]
    return lines


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
    scopes = None
    for config in configs:
        if config.kind != "aiv":
            if args.vcd_scope is not None:
                raise UserError(f"--vcd-scope: the {config.kind} machine has no AIV cores")
            continue
        scopes = parse_scopes(args.vcd_scope or "0:0", ranks=config.ranks,
                              aivs=config.aivs_per_die)
    return scopes


def _write_gtkw(waveform, scopes):
    """Write the .gtkw of every dump ``waveform`` collected and say where they are."""
    from amaranth.hdl import Fragment
    from ...hw.instances import Sharing
    from ...hw.ub_port import UBOp
    from ..backends.waveforms import generic_view, machine_view, read_dump, write_gtkw
    if waveform is None:
        return
    for run in waveform.runs:
        dump = read_dump(run["path"])
        if scopes is not None and run["spec"].shares():
            # its shape and names: the top with its repeated blocks as parts (no die built),
            # and the core part for its state enum -- elaborated, as built designs are
            top = run["spec"].build(shared=Sharing(has_reset=False))
            core = top.parts["epf_aiv"].component()
            Fragment.get(top, None)
            Fragment.get(core, None)
            rows, markers, window = machine_view(top, dump, scopes, run["edges"],
                                                 core_state=core.state.shape(), ub_op=UBOp)
        else:
            rows, markers, window = generic_view(dump, run["edges"])
        gtkw = run["path"].with_suffix(".gtkw")
        missing = write_gtkw(gtkw, dump, rows, markers=markers, window=window,
                             comment=f"epfabric run on {run['simulator']}: marker A run start, "
                                     f"B run end")
        note = f" (not in this dump: {', '.join('.'.join(p) for p in missing)})" if missing else ""
        print(f"wrote {run['path']} + {gtkw.name}{note}: gtkwave {gtkw}")


def _run_label(swept, run, runs):
    """What tells a run apart in a trace: the swept value (``system=ubep``), the run's mode
    (moe-layer's ``inc``/``ring``) or its machine when a kernel runs several."""
    parts = [f"{swept[0]}={swept[1]}"] if swept else []
    if run.get("mode"):
        parts.append(str(run["mode"]))
    elif runs > 1:
        parts.append(f"{run['config'].get('aivs_per_die')} AIVs")
    return " ".join(parts)


def _write_trace(path, labelled, cycle_ns, spans=None, phases=None):
    """One trace of every ``(label, report, flows, offset)``: each run's ranks are processes
    named ``label: rank r`` (pids 1000 apart), its flow ids 1,000,000 apart; ``flows`` is the
    kernel's ``trace_flows`` of the run (or ``None``), see ``Report.chrome_trace``; the run's
    timestamps start ``offset`` cycles in (a combine after its dispatch; the slices'
    ``start_cycle``/``end_cycle`` stay the run's own). ``otherData["flows_unmatched"]`` sums
    the flows left out."""
    from ..output import write_atomic
    events, unmatched = [], 0
    for i, (label, rep, flows, offset) in enumerate(labelled):
        tr = rep.chrome_trace(cycle_ns, spans, label=label, phases=phases, flows=flows)
        unmatched += tr["otherData"]["flows_unmatched"]
        for ev in tr["traceEvents"]:  # one trace per run: separate them by pid range
            ev["pid"] = ev["pid"] + 1000 * i
            if "id" in ev:
                ev["id"] += 1_000_000 * i
            if "ts" in ev:
                ev["ts"] += offset * cycle_ns / 1000.0
        events += tr["traceEvents"]
    write_atomic(path, json.dumps({"traceEvents": events, "displayTimeUnit": "ns",
                                   "otherData": {"flows_unmatched": unmatched}}))
    print(f"wrote {path} (open in ui.perfetto.dev or chrome://tracing)")
