"""``epfabric synth NAME [--param k=v ...] [--target T] [--device D] [--pnr] [--json FILE]``.

Synthesis (Yosys) and place-and-route (nextpnr) report of a registered
component for an FPGA, from the YoWASP wheels (:mod:`epfabric.sim.flows.synth`).
``--all`` reports every registered component at its defaults and the FPGA
top at a few AIV counts, as a CSV and a Markdown table with what fits.
"""

import os
import sys

from ...hw.validate import UserError
from ..flows.registry import build_component, registered
from ..flows.synth import (DEFAULT_AIVS, FPGA_TOP, TARGETS, SynthError, check_device, check_target,
                           csv_text, markdown_table, missing_tool, scaling, synth_dir, synthesize,
                           synthesize_all)
from .common import check_output, parse_params, positive, write_json

__all__ = ["add_arguments", "prepare"]


def add_arguments(parser):
    parser.add_argument("name", nargs="?", help="component name (`epfabric verilog --list`); "
                        "omit with --all")
    parser.add_argument("--param", action="append", default=[], metavar="KEY=VALUE",
                        help="override a constructor parameter (Python literal)")
    parser.add_argument("--target", default="ecp5",
                        help=f"FPGA family: {', '.join(TARGETS)} (default ecp5)")
    parser.add_argument("--device", default=None,
                        help="device (default: ecp5 LFE5UM5G-85F, ice40 iCE40HX8K, xilinx xc7)")
    parser.add_argument("--package", default=None,
                        help="package for --pnr (default: the device's usual one, ECP5 CABGA381)")
    parser.add_argument("--pnr", action="store_true",
                        help="place and route (ecp5, ice40): Fmax, utilisation, critical path")
    parser.add_argument("--io", action="store_true",
                        help="--pnr on ecp5: place with I/O buffers on package pins (a board top "
                             "such as fpga_die) instead of out of context")
    parser.add_argument("--freq", type=float, default=None, metavar="MHZ",
                        help="clock nextpnr aims at (default 200 on ecp5, 100 on ice40); "
                             "a miss is reported, not an error")
    parser.add_argument("--json", default=None, metavar="FILE", help="write the report as JSON")
    parser.add_argument("--all", action="store_true",
                        help=f"every registered component, and {FPGA_TOP} at several AIV counts")
    parser.add_argument("--aivs", default=None, metavar="N,N,...",
                        help=f"AIV counts of {FPGA_TOP} for --all (default "
                             f"{','.join(map(str, DEFAULT_AIVS))})")
    parser.add_argument("--csv", default=None, metavar="FILE",
                        help="--all: CSV file (default build/synth/<target>.csv)")
    parser.add_argument("--markdown", default=None, metavar="FILE",
                        help="--all: Markdown table file (default build/synth/<target>.md)")
    parser.add_argument("--jobs", type=int, default=None,
                        help="--all: designs synthesised at once (default: the cores)")
    parser.add_argument("--force", action="store_true",
                        help="rerun the tools even when build/synth has this design's report")


def _aivs(text):
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise UserError(f"--aivs must be comma-separated integers, not {text!r}") from None
    if len(values) < 2 or any(v < 1 for v in values) or len(set(values)) != len(values):
        raise UserError(f"--aivs needs two or more distinct counts >= 1, not {text!r}")
    return sorted(values)


def _summary_lines(r):
    res = r["resources"]
    lines = [f"{r['name']} ({' '.join(f'{k}={v!r}' for k, v in r['params'].items())}) "
             f"on {r['target']} {r['device']}" + (" [cached]" if r.get("cached") else ""),
             "  resources: " + ", ".join(f"{k} {res[k]}" for k in
                                         ("lut", "ff", "bram", "dsp", "carry", "lutram", "logic"))]
    for m in r["memories"]:
        lines.append(f"  memory {m['name']} {m['depth']}x{m['width']} "
                     f"({m['read_ports']} read port{'s' * (m['read_ports'] != 1)}): "
                     f"{m['mapped']} - {m['why']}")
    if "fmax_mhz" in r:
        lines.append(f"  Fmax {r['fmax_mhz']} MHz (target {r['target_freq_mhz']:g}, "
                     f"{r['pnr_mode']}); utilisation {r['utilisation_pct']} % ({r['binding']}): "
                     + ", ".join(f"{k} {u['used']}/{u['available']}"
                                 for k, u in r["utilisation"].items()))
        if r.get("critical_path"):
            lines.append(f"  critical path: {r['critical_path']['summary']}")
    lines.append(f"  work folder: {r.get('pnr_dir') or r['work_dir']}")
    return lines


def prepare(args):
    table = registered()
    target = check_target(args.target).name
    device, package = check_device(target, args.device, args.package)
    if args.package is not None and not args.pnr:
        raise UserError("--package applies only with --pnr")
    if args.freq is not None and (args.freq <= 0 or args.freq != args.freq):
        raise UserError(f"--freq must be a positive number of MHz, not {args.freq!r}")
    if args.freq is not None and not args.pnr:
        raise UserError("--freq applies only with --pnr")
    if args.io and not args.pnr:
        raise UserError("--io applies only with --pnr")
    if args.io and args.all:
        raise UserError("--io applies to one board top, not --all")
    reason = missing_tool(target, args.pnr)
    if reason:
        raise UserError(reason)
    json_path = check_output(args.json, "--json")

    if args.all:
        if args.name or args.param:
            raise UserError("--all takes no component name and no --param")
        aivs = _aivs(args.aivs) if args.aivs is not None else list(DEFAULT_AIVS)
        jobs = positive("--jobs", args.jobs) or max(1, os.cpu_count() or 1)
        if FPGA_TOP in table:
            fpga, defaults = table[FPGA_TOP]
            for a in aivs:      # bad counts fail here; nothing is built
                fpga.signature_for(**{**defaults, "aivs": a})
        default = synth_dir() / target
        csv_path = check_output(args.csv or f"{default}.csv", "--csv")
        md_path = check_output(args.markdown or f"{default}.md", "--markdown")
        if args.csv is None or args.markdown is None:
            synth_dir().mkdir(parents=True, exist_ok=True)

        def run_all():
            from ..output import write_atomic
            reports = synthesize_all(target=target, device=device.name, package=args.package,
                                     pnr=args.pnr, freq_mhz=args.freq, aivs=aivs, jobs=jobs,
                                     force=args.force)
            summary = scaling(reports, target, device.name)
            write_atomic(csv_path, csv_text(reports, summary))
            md = markdown_table(reports, summary, f"{device.name}"
                                + (f"-{package}" if args.pnr else ""))
            write_atomic(md_path, md)
            print(md, end="")
            print(f"wrote {csv_path}\nwrote {md_path}")
            if json_path:
                write_json(json_path, {"reports": reports, "scaling": summary}, recorded=True)
            return 1 if any("error" in r for r in reports) else 0
        return run_all

    for option in ("csv", "markdown", "jobs", "aivs"):
        if getattr(args, option) is not None:
            raise UserError(f"--{option} applies only with --all")
    if not args.name:
        raise UserError(f"give a component name or --all; registered: {', '.join(table)}")
    params = parse_params(args.param)
    component = build_component(args.name, params)     # bad names/parameters fail here

    def job():
        try:
            report = synthesize(args.name, params, target=target, device=device.name,
                                package=args.package, pnr=args.pnr, freq_mhz=args.freq,
                                io=args.io, force=args.force, component=component)
        except SynthError as exc:        # a tool failed on the design: not bad input
            print(f"epfabric synth: {exc}", file=sys.stderr)
            return 1
        print("\n".join(_summary_lines(report)))
        if json_path:
            write_json(json_path, report, recorded=True)
        return 0
    return job
