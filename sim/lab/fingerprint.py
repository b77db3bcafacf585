"""Behaviour fingerprints: what a refactoring must leave unchanged, recorded and compared.

``python -m epfabric.sim.lab.fingerprint -o FILE`` runs a fixed set of
cases and writes, for each, what the machine did: its cycles, a digest of
its MARK trace, core states, counters and samples, a digest of every word
read back from its memory, and the kernel checker's verdict and figures.
``--compare OLD.json`` runs the same set and lists every case whose
fingerprint differs (exit 1), so a change that should not change behaviour
(moving logic between components, renaming, splitting files) is checked
against the tree before it. Cases:

* every registered kernel at its default shape: on Amaranth's simulator (the
  flat design: nothing shared or skipped) where the run is short, on the
  native backend where it is long (``cm384``, the INC-MoE layer);
* dispatch and combine of the three systems at ``make run``'s shape, and on
  ``cm384-fit`` with every timing knob on, on the native backend (shared
  modules, idle-die skipping, backdoor loading);
* the race catalog and the quick grids of the experiments named in
  :data:`EXPERIMENT_NAMES` (``--experiments``), with wall times and other
  host-dependent columns (:data:`VOLATILE`) left out.
"""

import argparse
import hashlib
import json
import re
import sys
import time

import numpy as np

__all__ = ["KERNEL_CASES", "EXPERIMENT_NAMES", "kernel_fingerprint", "experiment_fingerprint",
           "collect", "differences", "main"]

_RUN = dict(preset="cm384", topology=("superpod", 2, 2, 1), aivs=4)
_RUN_PARAMS = dict(batch=16, topk=4, experts=8)

#: (label, kernel, backend, run_kernel arguments)
KERNEL_CASES = [
    *[(f"{k}-default", k, "pysim", {}) for k in ("syncall", "alltoall", "agrs")],
    *[(f"{k}-default", k, "native", {})
      for k in ("pingpong", "dispatch", "combine", "daf", "moe-layer")],
    *[(f"{k}-{s}-run-shape", k, "native", dict(**_RUN, params=dict(_RUN_PARAMS, system=s)))
      for k in ("dispatch", "combine") for s in ("cann", "ubep", "ubep-inc")],
    *[(f"dispatch-{s}-cm384-fit", "dispatch", "native",
       dict(preset="cm384-fit", topology=("superpod", 2, 2, 1), aivs=4,
            params=dict(_RUN_PARAMS, system=s))) for s in ("cann", "ubep")],
]

#: experiments whose quick grids are compared (deterministic rows; speed experiments are not)
EXPERIMENT_NAMES = ("table2", "eq5", "fig6", "payload", "quaternary", "races", "mechanisms",
                    "fig10", "fig9", "incmoe-layer", "inc-ep", "fig3b", "fig7a", "fig7c", "fig8",
                    "fig13", "fig14")

#: row keys that depend on the host, not the model (wall times, rates of the simulator)
VOLATILE = re.compile(r"(wall|seconds|_s$|per_s|cycles_s|speed|elapsed|time_s|build|path|file)",
                      re.I)


def _digest(obj):
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=_plain).encode()).hexdigest()[:16]


def _plain(value):
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (np.floating,)):
        return float(value)
    if isinstance(value, (set, frozenset)):
        return sorted(value)
    return repr(value)


def kernel_fingerprint(kernel_name, backend_name, kwargs):
    """One kernel invocation's fingerprint: per machine run, cycles and digests."""
    from ...sw.kernels import KERNELS
    from ...sw.machine import Machine
    from ..backends.machine import backend as make_backend
    kernel = KERNELS[kernel_name]
    backend = make_backend(backend_name)
    preset = kwargs.get("preset") or kernel.default_preset
    params = kernel.resolve_params(kwargs.get("params"))
    max_cycles = kernel.default_max_cycles
    configs = kernel.configs(preset, kwargs.get("topology"), kwargs.get("aivs"), params)
    runs = []
    for config in configs:
        machine = Machine(backend=backend, config=config)
        for name, value in kwargs.get("knobs", {}).items():
            machine.set_knob(name, value)
        inputs = (kernel.load(machine, params, max_cycles=max_cycles) if kernel.load_runs
                  else kernel.load(machine, params))
        report = machine.run(max_cycles)
        inner = kernel.inner_runs(inputs)
        verdict = kernel.check(machine, report, inputs)
        d = report.to_dict()
        readback = getattr(machine, "_readback", None)
        runs.append({
            "cycles": report.cycles, "done": report.done,
            "trace": _digest(d["trace"]), "cores": _digest(d["cores"]),
            "counters": _digest(d["counters"]), "samples": _digest(d["samples"]),
            "memory": _digest([np.asarray(r).tolist() for r in readback]) if readback else None,
            "inner": _digest([(name, _stable(rep.to_dict())) for name, rep in inner]),
            "correct": bool(verdict["correct"]),
            "verdict": _digest({k: v for k, v in verdict.items() if not VOLATILE.search(k)}),
        })
    return runs


def _stable(value):
    if isinstance(value, dict):
        return {k: _stable(v) for k, v in sorted(value.items()) if not VOLATILE.search(str(k))}
    if isinstance(value, (list, tuple)):
        return [_stable(v) for v in value]
    if isinstance(value, float):
        return round(value, 9)
    return value


def experiment_fingerprint(name):
    """The quick grid's rows of experiment ``name``, host-dependent columns left out."""
    from .experiments import EXPERIMENTS
    exp = EXPERIMENTS[name]
    params = exp.resolve()
    rows = []
    for point in exp.points(params, True):
        rows += exp.rows_of(point, exp.measure(point))
    return [_stable(r) for r in rows]


def collect(kernels=True, experiments=EXPERIMENT_NAMES, only=None, log=print):
    """``{case label: fingerprint}`` of every case (``only``: labels to keep)."""
    out = {}
    if kernels:
        for label, kernel, backend, kwargs in KERNEL_CASES:
            if only and label not in only:
                continue
            t = time.time()
            out[label] = kernel_fingerprint(kernel, backend, kwargs)
            log(f"[fingerprint] {label}: {[r['cycles'] for r in out[label]]} cycles "
                f"({time.time() - t:.0f} s)")
    for name in experiments:
        label = f"experiment:{name}"
        if only and label not in only:
            continue
        t = time.time()
        rows = experiment_fingerprint(name)
        out[label] = {"rows": len(rows), "digest": _digest(rows), "data": rows}
        log(f"[fingerprint] {label}: {len(rows)} rows ({time.time() - t:.0f} s)")
    return out


def differences(old, new):
    """Labels of the cases in both whose fingerprints differ, with a line each."""
    lines = []
    for label in sorted(set(old) & set(new)):
        a, b = old[label], new[label]
        if isinstance(a, dict) and "digest" in a:
            if a["digest"] != b["digest"]:
                first = next((i for i, (x, y) in enumerate(zip(a["data"], b["data"])) if x != y),
                             min(len(a["data"]), len(b["data"])))
                lines.append(f"{label}: rows differ (first at row {first})")
        elif a != b:
            lines.append(f"{label}: {a} != {b}")
    return lines


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m epfabric.sim.lab.fingerprint",
                                 description=__doc__.split("\n")[0])
    ap.add_argument("-o", "--output", required=True, help="JSON file to write")
    ap.add_argument("--compare", metavar="OLD", help="a fingerprint to compare with (exit 1 if any differ)")
    ap.add_argument("--experiments", default=",".join(EXPERIMENT_NAMES),
                    help="experiments whose quick grids to include ('' for none)")
    ap.add_argument("--no-kernels", action="store_true", help="leave the kernel cases out")
    ap.add_argument("--only", default="", help="comma-separated case labels to run")
    args = ap.parse_args(argv)
    only = {s for s in args.only.split(",") if s}
    exps = tuple(s for s in args.experiments.split(",") if s)
    new = collect(kernels=not args.no_kernels, experiments=exps, only=only)
    with open(args.output, "w") as f:
        json.dump(new, f, indent=1, sort_keys=True)
    if args.compare:
        with open(args.compare) as f:
            old = json.load(f)
        diff = differences(old, new)
        missing = sorted(set(new) - set(old))
        for line in diff:
            print("DIFFERS", line)
        print(f"[fingerprint] {len(set(old) & set(new)) - len(diff)} of {len(set(old) & set(new))} "
              f"cases identical" + (f"; not in {args.compare}: {', '.join(missing)}" if missing else ""))
        return 1 if diff else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
