"""Curated mutation testing: break the hardware or a kernel on purpose, one way at a time.

Each mutation (:mod:`epfabric.sim.verify.mutations`, plain data) is one or more
exact text replacements in one source file and the pytest node ids that
should notice it. :func:`run_mutation`

1. copies the tracked tree (``git ls-files``, working-tree contents) into a
   temporary folder — the checkout itself is never touched;
2. applies the mutation; every ``old`` text must occur exactly once, or the
   mutation is stale and :class:`StaleMutation` names it and its file;
3. points the imports at the copy: epfabric is installed editable, so a
   plain ``import epfabric`` would load the *checkout's* unmutated code. A
   shim folder first on ``PYTHONPATH`` holds an ``epfabric`` package whose
   ``hw``, ``sw`` and ``sim`` are links into the copy, and Python's path
   finder runs before the editable finder;
4. proves it (:func:`sanity_check`): a subprocess with the test environment
   imports the mutated module and checks that its file is the copy's and
   holds the mutated text, and that the Verilog cache key
   (:func:`~epfabric.sim.backends.verilog.source_hash`) is the copy's, not
   the checkout's;
5. runs the listed tests in the copy under a timeout, recording each test's
   outcome through this module's pytest hooks (``-p epfabric.sim.verify.mutate``).

Caches: the Verilog cache is keyed by a hash of the copy's ``hw/``, ``sw/``
and ``sim/lab/experiments/`` sources, so a mutated tree never finds an
unmutated design; Verilator builds are keyed by the Verilog text. Both may
therefore be shared between mutations (``cache``); result caches and
waveforms stay in the copy.

A mutation is *caught* when at least one of its tests fails (or errors).
A mutation documented as harmless carries its reason and is not expected
to be caught.
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from ...hw.validate import UserError
from ..output import kill_group

__all__ = ["Mutation", "Outcome", "StaleMutation", "load_mutations", "select", "copy_tree",
           "apply", "make_shim", "test_env", "sanity_check", "run_tests", "run_mutation",
           "summary_line", "format_seconds", "pytest_runtest_logstart", "pytest_runtest_logreport",
           "pytest_collectreport"]

#: environment variable naming the file the pytest hooks append outcomes to
LOG_ENV = "EPFABRIC_MUTATE_LOG"


class StaleMutation(RuntimeError):
    """A mutation's text no longer matches its file exactly once."""


@dataclass(frozen=True)
class Mutation:
    """One named way of breaking the code (see :mod:`epfabric.sim.verify.mutations`)."""
    name: str
    file: str
    edits: tuple            # ((old, new), ...): each old text occurs exactly once in file
    description: str
    tests: tuple            # pytest node ids that should fail
    harmless: str = ""      # why nothing can catch it, if it is harmless
    timeout: float = 300.0  # seconds for all of its tests

    @classmethod
    def from_dict(cls, d):
        edits = d["edits"] if "edits" in d else [(d["old"], d["new"])]
        return cls(name=d["name"], file=d["file"], edits=tuple(tuple(e) for e in edits),
                   description=d["description"], tests=tuple(d.get("tests", ())),
                   harmless=d.get("harmless", ""), timeout=float(d.get("timeout", 300.0)))

    def module(self):
        """Dotted name of the mutated module (``hw/ub_port.py`` -> ``epfabric.hw.ub_port``), or
        of the package holding a file that is not Python (``sim/backends/native_top.cpp`` ->
        ``epfabric.sim.backends``)."""
        if Path(self.file).suffix != ".py":
            return "epfabric." + ".".join(Path(self.file).parent.parts)
        parts = Path(self.file).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        return "epfabric." + ".".join(parts)


def load_mutations():
    """Every curated mutation, in order."""
    from .mutations import MUTATIONS
    return [Mutation.from_dict(d) for d in MUTATIONS]


def select(mutations, only):
    """``mutations`` named in ``only`` (a comma-separated string, or None for all)."""
    if only is None:
        return list(mutations)
    names = [n.strip() for n in only.split(",")]
    known = {m.name for m in mutations}
    unknown = [n for n in names if n not in known]
    if not names or unknown:
        raise UserError(f"--only must name mutations from --list, not {only!r}")
    return [m for m in mutations if m.name in names]


def repo_root():
    """The checkout this module belongs to."""
    return Path(__file__).resolve().parents[2]


def copy_tree(src, dst):
    """Copy the files git tracks in ``src`` (as they are in its work tree) into ``dst``."""
    src, dst = Path(src), Path(dst)
    names = subprocess.run(["git", "ls-files", "-z"], cwd=src, check=True,
                           capture_output=True).stdout.decode().split("\0")
    for name in filter(None, names):
        source = src / name
        if not source.is_file():        # deleted in the work tree
            continue
        target = dst / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target)
    return dst


def apply(mutation, root):
    """Apply ``mutation`` to the tree at ``root``; :class:`StaleMutation` unless each text matches once."""
    path = Path(root) / mutation.file
    if not path.is_file():
        raise StaleMutation(f"mutation {mutation.name} no longer applies to {mutation.file}: "
                            f"no such file")
    text = path.read_text()
    for k, (old, new) in enumerate(mutation.edits):
        found = text.count(old)
        if found != 1:
            first = old.strip().splitlines()[0] if old.strip() else old
            raise StaleMutation(f"mutation {mutation.name} no longer applies to {mutation.file}: "
                                f"edit {k} matches {found} times, not once ({first!r})")
        text = text.replace(old, new)
    path.write_text(text)
    return path


def make_shim(root):
    """A folder holding an ``epfabric`` package whose parts are the copy's ``hw``, ``sw``, ``sim``."""
    shim = Path(root) / ".mutate-shim"
    pkg = shim / "epfabric"
    pkg.mkdir(parents=True, exist_ok=True)
    (pkg / "__init__.py").write_text('"""epfabric from a mutation copy (sim/verify/mutate.py)."""\n')
    for part in ("hw", "sw", "sim"):
        link = pkg / part
        if not link.exists():
            link.symlink_to(Path(root).resolve() / part, target_is_directory=True)
    return shim


def test_env(root, cache=None):
    """Environment of a test run in the copy at ``root``: imports and outputs point into it."""
    root = Path(root).resolve()
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(make_shim(root)), str(root / "tests")])
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["EPFABRIC_BUILD_DIR"] = str(Path(cache).resolve() if cache else root / "build" / "sim")
    for var, sub in (("EPFABRIC_WAVEFORM_DIR", "waveforms"),
                     ("EPFABRIC_RESULT_CACHE", "build/results"),
                     ("EPFABRIC_FORMAL_DIR", "build/formal"),
                     ("EPFABRIC_SYNTH_DIR", "build/synth")):
        env[var] = str(root / sub)
    env["EPFABRIC_QUIET"] = "1"
    env.pop(LOG_ENV, None)
    return env


_PROBE = r"""
import importlib, json, sys
from pathlib import Path
root, module, needle, name = Path(sys.argv[1]).resolve(), sys.argv[2], sys.argv[3], sys.argv[4]
import epfabric
mod = importlib.import_module(module)
target = Path(mod.__file__) if not name else Path(mod.__file__).parent / name
from epfabric.sim.backends import verilog as simulation
from epfabric.sim.verify import mutate
where = getattr(epfabric, "__file__", None)
print(json.dumps({"epfabric": str(Path(where).resolve()) if where else
                  f"a namespace package {list(epfabric.__path__)}",
                  "module": str(target.resolve()),
                  "mutated": needle in target.read_text(),
                  "source_root": str(Path(simulation.__file__).resolve().parents[2]),
                  "source_hash": simulation.source_hash(),
                  "harness": str(Path(mutate.__file__).resolve())}))
"""


def sanity_check(mutation, root, env):
    """Prove that the test run imports the mutated copy; return what the probe saw.

    Raises ``RuntimeError`` if the mutated module, the Verilog cache key or
    the harness itself would come from anywhere but the copy.
    """
    root = Path(root).resolve()
    needle = mutation.edits[0][1]
    name = "" if Path(mutation.file).suffix == ".py" else Path(mutation.file).name
    done = subprocess.run([sys.executable, "-c", _PROBE, str(root), mutation.module(), needle,
                           name],
                          cwd=root, env=env, capture_output=True, text=True, timeout=120)
    if done.returncode:
        raise RuntimeError(f"mutation {mutation.name}: sanity check failed:\n{done.stderr}")
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    problems = []
    for key in ("epfabric", "module", "harness"):
        if not Path(seen[key]).is_relative_to(root):
            problems.append(f"{key} imported from {seen[key]}, not from the copy {root}")
    if not seen["mutated"]:
        problems.append(f"{seen['module']} does not hold the mutated text")
    if Path(seen["source_root"]) != root:
        problems.append(f"the Verilog cache is keyed by {seen['source_root']}, not the copy")
    if problems:
        raise RuntimeError(f"mutation {mutation.name}: sanity check failed: " + "; ".join(problems))
    return seen


# --- pytest hooks (loaded in the copy's test run with ``-p epfabric.sim.verify.mutate``) ---------------

def _log(record):
    path = os.environ.get(LOG_ENV)
    if path:
        with open(path, "a") as f:
            f.write(json.dumps(record) + "\n")


def pytest_runtest_logstart(nodeid, location):
    _log({"nodeid": nodeid, "when": "start", "outcome": "started"})


def pytest_runtest_logreport(report):
    if report.when == "call" or report.outcome != "passed":
        _log({"nodeid": report.nodeid, "when": report.when, "outcome": report.outcome})


def pytest_collectreport(report):
    if report.failed:           # a test file that no longer imports fails all of its tests
        _log({"nodeid": report.nodeid, "when": "collect", "outcome": "failed"})


# --- running -----------------------------------------------------------------------------------

def _outcomes(log_path):
    """``{nodeid: "failed" | "passed" | "skipped" | "started"}`` from the hooks' log."""
    result = {}
    if not Path(log_path).exists():
        return result
    for line in Path(log_path).read_text().splitlines():
        r = json.loads(line)
        now = result.get(r["nodeid"])
        if r["outcome"] == "failed" or now == "failed":
            result[r["nodeid"]] = "failed"
        elif r["when"] == "start":
            result.setdefault(r["nodeid"], "started")
        else:
            result[r["nodeid"]] = r["outcome"]
    return result


def run_tests(tests, root, env, timeout):
    """Run pytest node ids ``tests`` in ``root``; ``(outcomes, timed_out, output)``.

    ``outcomes`` maps each listed id to ``failed``, ``passed``, ``skipped``,
    ``timeout`` (running when the time ran out) or ``not run``.
    """
    log = Path(root) / ".mutate-log.jsonl"
    log.unlink(missing_ok=True)
    env = dict(env, **{LOG_ENV: str(log)})
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
           "-p", "epfabric.sim.verify.mutate", "-o", "addopts=", "-p", "no:xdist", "--no-header",
           "-rN", *tests]
    proc = subprocess.Popen(cmd, cwd=root, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    timed_out = False
    try:
        output, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        kill_group(proc)
        output, _ = proc.communicate()
    seen = _outcomes(log)
    outcomes = {}
    for test in tests:
        # a parametrised id without its [case] stands for all of its cases, a file for its tests
        mine = {k: v for k, v in seen.items()
                if k == test or k.startswith(test + "[") or k.startswith(test + "::")
                or (k and test.startswith(k + "::"))}      # its file failed to collect
        if not mine:
            outcomes[test] = "not run"
        elif "failed" in mine.values():
            outcomes[test] = "failed"
        elif "started" in mine.values():
            outcomes[test] = "timeout"
        elif "passed" in mine.values():
            outcomes[test] = "passed"
        else:
            outcomes[test] = "skipped"
    return outcomes, timed_out, output


@dataclass
class Outcome:
    """What one mutation did to its tests (one row of ``build/mutations.json``)."""
    mutation: Mutation
    caught_by: list = field(default_factory=list)
    not_caught_by: list = field(default_factory=list)
    other: dict = field(default_factory=dict)      # timeout / skipped / not run
    seconds: float = 0.0
    error: str = ""
    probe: dict = field(default_factory=dict)

    @property
    def caught(self):
        return bool(self.caught_by)

    @property
    def ok(self):
        """Caught, or documented harmless, and run without a harness error."""
        return not self.error and (self.caught or bool(self.mutation.harmless))

    def to_dict(self):
        m = self.mutation
        row = {"mutation": m.name, "file": m.file, "description": m.description,
               "caught_by": self.caught_by, "not_caught_by": self.not_caught_by,
               "seconds": round(self.seconds, 1)}
        if self.other:
            row["not_finished"] = self.other
        if m.harmless:
            row["harmless"] = m.harmless
        if self.error:
            row["error"] = self.error
        return row


def run_mutation(mutation, source=None, cache=None, keep=False):
    """Copy ``source``, apply ``mutation``, prove the imports, run its tests; an :class:`Outcome`."""
    source = Path(source or repo_root())
    start = time.monotonic()
    tmp = Path(tempfile.mkdtemp(prefix=f"epfabric-mutate-{mutation.name}-"))
    result = Outcome(mutation)
    try:
        root = copy_tree(source, tmp / "tree")
        apply(mutation, root)
        env = test_env(root, cache)
        try:
            result.probe = sanity_check(mutation, root, env)
        except (RuntimeError, subprocess.TimeoutExpired) as exc:
            result.error = str(exc)
            return result
        outcomes, _, output = run_tests(list(mutation.tests), root, env, mutation.timeout)
        for test, outcome in outcomes.items():
            if outcome == "failed":
                result.caught_by.append(test)
            elif outcome == "passed":
                result.not_caught_by.append(test)
            else:
                result.other[test] = outcome
        missing = [t for t, o in outcomes.items() if o == "not run"]
        if missing and not result.caught_by and "timeout" not in outcomes.values():
            tail = "\n".join(output.strip().splitlines()[-5:])
            result.error = f"tests not run: {', '.join(missing)}\n{tail}"
    except StaleMutation as exc:
        result.error = str(exc)
    finally:
        result.seconds = time.monotonic() - start
        if not keep:
            shutil.rmtree(tmp, ignore_errors=True)
    return result


def format_seconds(seconds):
    """``"9 min 12 s"`` / ``"41 s"``."""
    seconds = round(seconds)
    return f"{seconds // 60} min {seconds % 60} s" if seconds >= 60 else f"{seconds} s"


def summary_line(outcomes, seconds):
    """``mutate: 14/14 caught (1 documented harmless) in 9 min 12 s``."""
    real = [o for o in outcomes if not o.mutation.harmless]
    harmless = len(outcomes) - len(real)
    line = f"mutate: {sum(o.caught and not o.error for o in real)}/{len(real)} caught"
    if harmless:
        line += f" ({harmless} documented harmless)"
    errors = sum(bool(o.error) for o in outcomes)
    if errors:
        line += f", {errors} could not run"
    return f"{line} in {format_seconds(seconds)}"
