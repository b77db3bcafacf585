"""docs/tutorial.md runs as written: its code blocks, in order, in an empty folder.

A fenced block is

* ```` ```python title="NAME" ```` -- the content of file ``NAME``, written;
* ```` ```python ```` -- a script, run with this interpreter;
* ```` ```sh ```` -- shell commands, run by ``bash -e`` with this interpreter's folder first on
  ``PATH`` (``python`` and ``epfabric`` are the project's);
* anything else (```` ```text ````) -- shown, not run (a program with windows).

Each block must exit 0. The runs are the tutorial's: a tiny machine on pysim and Icarus.
"""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from utils import require_simulator

TUTORIAL = Path(__file__).resolve().parent.parent / "docs" / "tutorial.md"
FENCE = re.compile(r"^```(\w*)([^\n]*)\n(.*?)^```\s*$", re.M | re.S)


def blocks(text):
    """``[(kind, name, body)]`` of the fenced blocks of ``text``: kind ``file`` (name is the
    file), ``python``, ``sh``, or the fence's language for a block that is only shown."""
    out = []
    for lang, info, body in FENCE.findall(text):
        title = re.search(r'title="([^"]+)"', info)
        if lang == "python" and title:
            out.append(("file", title.group(1), body))
        else:
            out.append((lang or "text", None, body))
    return out


def test_the_block_reader_sees_each_kind():
    text = ('x\n```python title="a.py"\nA = 1\n```\n\n```python\nprint(1)\n```\n'
            '```sh\necho hi\n```\n```text\ngtkwave x\n```\n')
    assert blocks(text) == [("file", "a.py", "A = 1\n"), ("python", None, "print(1)\n"),
                            ("sh", None, "echo hi\n"), ("text", None, "gtkwave x\n")]


def test_the_tutorial_runs_as_written(tmp_path):
    require_simulator("icarus")
    found = blocks(TUTORIAL.read_text())
    kinds = [k for k, _n, _b in found]
    assert kinds.count("file") >= 3 and "python" in kinds and "sh" in kinds
    env = dict(os.environ, PATH=os.pathsep.join([str(Path(sys.executable).parent),
                                                 os.environ.get("PATH", "")]),
               EPFABRIC_QUIET="1")
    env.pop("PYTHONPATH", None)
    for i, (kind, name, body) in enumerate(found):
        if kind == "file":
            (tmp_path / name).write_text(body)
            continue
        if kind == "python":
            cmd = [sys.executable, "-c", body]
        elif kind == "sh":
            cmd = ["bash", "-e", "-c", body]
        else:
            continue
        run = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True,
                             timeout=900)
        assert run.returncode == 0, (f"block {i} ({kind}) failed:\n{body}\n--- stdout\n"
                                     f"{run.stdout[-3000:]}\n--- stderr\n{run.stderr[-3000:]}")
    assert (tmp_path / "ringsum-trace.json").stat().st_size > 1000
    assert (tmp_path / "ringsum.gtkw").is_file()
    assert "2,2,1" in (tmp_path / "results" / "ringsum-latency.csv").read_text()
