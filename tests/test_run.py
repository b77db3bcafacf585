"""``epfabric run`` (sim/run.py): kernels from the command line, JSON, Perfetto trace, VCD."""

import json

import pytest

from epfabric.sim.cli import main
from epfabric.sim.run import parse_topology

SMALL = ["--preset", "tiny", "--topology", "superpod:2,1,1", "--aivs", "2"]


def test_syncall_json_and_trace(tmp_path, capsys):
    out, trace = tmp_path / "out.json", tmp_path / "trace.json"
    assert main(["run", "syncall", *SMALL, "--json", str(out), "--trace", str(trace)]) == 0
    result = json.loads(out.read_text())
    assert result["correct"] and result["barrier_cycles"][0]["cores"] == 4
    assert result["barrier_cycles"][0]["cycles"] > 0
    events = json.loads(trace.read_text())["traceEvents"]
    marks = [e for e in events if e["ph"] == "i"]
    assert len(marks) == 4 * 2 * 2                     # 4 cores x 2 barriers x (enter, leave)
    assert {e["name"] for e in events if e["ph"] == "M"} == {"process_name", "thread_name"}
    assert "correct" in capsys.readouterr().out


def test_vcd_written(tmp_path):
    vcd = tmp_path / "a2a.vcd"
    assert main(["run", "alltoall", *SMALL, "--vcd", str(vcd)]) == 0
    assert vcd.stat().st_size > 0 and vcd.with_suffix(".gtkw").exists()


@pytest.mark.parametrize("argv, message", [
    (["run", "alltoall", "--preset", "nope"], "nope"),
    (["run", "alltoall", "--topology", "ring:4"], "topology must start with one of superpod, star"),
    (["run", "alltoall", "--topology", "superpod:2,x"], "--topology must look like"),
    (["run", "pingpong", "--vcd", "x.vcd", "--backend", "icarus"], "--vcd is written by the pysim backend"),
    (["run", "syncall", "--max-cycles", "0"], "--max-cycles must be >= 1, not 0"),
])
def test_bad_input_one_line(argv, message, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err


def test_watchdog_exit_code(capsys):
    assert main(["run", "alltoall", *SMALL, "--max-cycles", "20"]) == 1
    err = capsys.readouterr().err
    assert "watchdog: not every core halted within 20 cycles" in err
    assert "waits on address" in err or "still running" in err


def test_parse_topology():
    assert parse_topology("superpod:2,2,2") == ("superpod", 2, 2, 2)
    assert parse_topology("star:4") == ("star", 4)
