"""``epfabric fabric-speed``: cycles/s of a superpod fabric under saturating uniform traffic.

Front end of the ``fabric_speed`` experiment (:mod:`epfabric.sim.lab.experiments.fabric_speed`).
"""

import os

from ..backends.toolchain import check_opt, parse_backends
from ..lab.experiments import EXPERIMENTS
from ..lab.experiments.fabric_speed import DEFAULT_CYCLES
from .common import check_output, usable_backends, write_json

__all__ = ["add_arguments", "prepare"]

EXPERIMENT = EXPERIMENTS["fabric_speed"]


def add_arguments(parser):
    for p in EXPERIMENT.params:
        help_text = p.help if p.name != "cycles" else (
            "cycles per backend (default: " + ", ".join(f"{b} {c}" for b, c in DEFAULT_CYCLES.items())
            + ")")
        if p.name == "opt":
            help_text += f" (default {p.default}), written --opt=-O1"
        # --opt defaults to None here so that an --opt given without verilator is an error
        names = [f"--{p.name.replace('_', '-')}"] + (["--backend"] if p.name == "backends" else [])
        if p.name == "shape":            # --topology as every other command names it
            names, help_text = ["--topology", "--shape"], (
                "superpod:a,b,c or a,b,c: dies a NPU, NPUs a board, boards (default "
                f"{p.default}; --shape is the same)")
        parser.add_argument(*names, dest=p.name, type=p.type,
                            default=None if p.name == "opt" else p.default, help=help_text)
    parser.add_argument("--json", metavar="FILE",
                        help="write {runs, verilator_over_pysim, native_over_verilator} as JSON")


def prepare(args):
    backends = parse_backends("--backends", args.backends)
    if args.opt is not None:
        check_opt("--opt", args.opt, backends)
    args.shape = args.shape.removeprefix("superpod:")          # --topology's form, as in soak
    params = EXPERIMENT.resolve(**{p.name: getattr(args, p.name) for p in EXPERIMENT.params
                                   if getattr(args, p.name) is not None or p.name != "opt"})
    check_output(args.json, "--json")
    usable_backends("--backends", backends)

    def job():
        rows = EXPERIMENT.run(**params)
        print(f"fabric_speed: {params['preset']} superpod {params['shape']}, uniform saturating traffic")
        print(EXPERIMENT.format(rows))
        if args.json:
            by = {r["backend"]: r for r in rows}
            ratio = (round(by["verilator"]["cycles_per_s"] / by["pysim"]["cycles_per_s"], 1)
                     if "verilator" in by and "pysim" in by else None)
            native = (round(by["native"]["cycles_per_s"] / by["verilator"]["cycles_per_s"], 2)
                      if "native" in by and "verilator" in by else None)
            write_json(args.json, {"runs": rows, "verilator_over_pysim": ratio,
                                   "native_over_verilator": native, "load": os.getloadavg()},
                       recorded=True)
        return 0 if all(r["misrouted"] == 0 for r in rows) else 1
    return job
