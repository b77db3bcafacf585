"""Waveforms a person can read (sim/waves/): dump headers, .gtkw files, ``epfabric run --vcd``.

The save files are checked the way GTKWave reads them: every trace names a
variable of the dump, the window GTKWave computes from ``[timestart]``, the
zoom and the signal pane holds the markers. Where GTKWave and Xvfb are
installed, GTKWave itself loads a race's save file and must display every
trace.
"""

import gzip
import os
import re
import shutil
import struct
import subprocess
from enum import Enum

import pytest

from epfabric.sim.backends import CLOCK_PERIOD_NS
from epfabric.sim.cli import main
from epfabric.sim.waves import (Comment, Group, Marker, Trace, Waveform, fit_gtkw, parse_scopes,
                                read_dump, read_gtkw, sanitize_vcd, write_gtkw, zoom_for)
from epfabric.sim.waves.dump import _lz4_block

from utils import require

SMALL = ["--preset", "tiny", "--topology", "superpod:2,1,1", "--aivs", "2"]


def counter_vcd(path, cycles=200, root=("bench", "top")):
    """A VCD of a 1 ns clock (``CLOCK_PERIOD_NS``) and a cycle counter (1 fs units, as Amaranth
    writes): cycle c starts at (c - 0.5) ns."""
    lines = ["$timescale 1 fs $end"]
    lines += [f"$scope module {s} $end" for s in root]
    lines += ["$var wire 1 ! clk $end", "$var wire 8 \" cycle $end",
              "$var wire 2 # state $end", "$var string 1 $ mode $end",
              "$var wire 4 % \\req.op $end"]
    lines += ["$upscope $end"] * len(root) + ["$enddefinitions $end", "#0", "0!", "b0 \"",
                                               "b0 #", "sIDLE $", "b0 %"]
    for c in range(1, cycles + 1):
        lines += [f"#{c * 1_000_000 - 500_000}", "1!", f"b{c:b} \"", f"b{c % 3:b} #",
                  f"#{c * 1_000_000}", "0!"]
    path.write_text("\n".join(lines) + "\n")
    return path


class State(Enum):
    IDLE = 0
    RUN = 1
    HALT = 2


# --- dump headers -------------------------------------------------------------------------------

def test_vcd_header_names_as_gtkwave_spells_them(tmp_path):
    dump = read_dump(counter_vcd(tmp_path / "c.vcd"))
    assert dump.format == "vcd" and dump.timescale == pytest.approx(1e-15)
    assert dump.end() == 200 * 1_000_000
    cycle = dump.find("cycle")
    assert cycle.scope == ("bench", "top") and cycle.gtkw_name == "bench.top.cycle[7:0]"
    assert dump.find("mode").gtkw_name == "bench.top.mode"          # a string: no range
    assert dump.find("req.op").gtkw_name == "bench.top.\\req.op[3:0]"
    assert dump.find("nope") is None and dump.find("bench", "cycle") is None
    changes = dump.changes([cycle])
    assert dump.value_at(cycle, 7 * 1_000_000 - 500_000, changes) == "111"


def test_vcd_header_verilator_style(tmp_path):
    """Verilator: ports also under $rootio, ranges after the name, dotted struct fields."""
    path = tmp_path / "v.vcd"
    path.write_text("$timescale 1ps $end\n $scope module $rootio $end\n"
                    "  $var wire 1 ! host__running $end\n $upscope $end\n"
                    " $scope module top $end\n  $var wire 1 ! host__running $end\n"
                    "  $scope module die1 $end\n   $scope module core0 $end\n"
                    "    $var wire 3 \" state [2:0] $end\n"
                    "    $var wire 16 # trace__payload.event [15:0] $end\n"
                    "    $var wire 16 # trace__payload$61.event [15:0] $end\n"
                    "   $upscope $end\n  $upscope $end\n $upscope $end\n"
                    "$enddefinitions $end\n#0\n0!\n#10\n1!\n")
    dump = read_dump(path)
    assert dump.timescale == pytest.approx(1e-12)
    assert dump.find("host__running").scope == ("top",)
    assert dump.find("die1", "core0", "state").gtkw_name == "top.die1.core0.state[2:0]"
    assert (dump.find("die1", "core0", "trace__payload.event").gtkw_name
            == "top.die1.core0.\\trace__payload.event[15:0]")


def test_lz4_block():
    # 5 literals, then a 7-byte match at offset 1 (overlapping), then 20 literals (extended length)
    block = bytes([0x53]) + b"abcde" + bytes([1, 0]) + bytes([0xF0, 5]) + b"x" * 20
    assert _lz4_block(block, 32) == b"abcde" + b"e" * 7 + b"x" * 20
    with pytest.raises(ValueError, match="does not decode to 31 bytes"):
        _lz4_block(block, 31)


def _fst(hier_kind, hierarchy):
    """A minimal FST: a header block (1 ps) and one hierarchy block."""
    header = struct.pack(">QQdQQQQQb", 0, 1234, 2.0, 0, 2, 3, 2, 1, -12).ljust(321, b"\0")
    out = bytes([0]) + struct.pack(">Q", len(header) + 8) + header
    if hier_kind == 4:
        body = struct.pack(">Q", len(hierarchy)) + gzip.compress(hierarchy)
    else:   # LZ4, one literal-only sequence
        n = len(hierarchy)
        lit = bytes([0xF0]) + bytes([255] * ((n - 15) // 255)) + bytes([(n - 15) % 255])
        body = struct.pack(">Q", n) + lit + hierarchy
    return out + bytes([hier_kind]) + struct.pack(">Q", len(body) + 8) + body


@pytest.mark.parametrize("kind", [4, 6])
def test_fst_header(tmp_path, kind):
    hier = (bytes([254, 0]) + b"top\0\0" + bytes([16, 0]) + b"host__running\0" + bytes([1, 0])
            + bytes([254, 0]) + b"core0\0\0" + bytes([16, 0]) + b"state [2:0]\0" + bytes([3, 0])
            + bytes([21, 0]) + b"mode\0" + bytes([0, 0])
            + bytes([16, 0]) + b"running_alias\0" + bytes([1, 1]) + bytes([255, 255]))
    path = tmp_path / "x.fst"
    path.write_bytes(_fst(kind, hier))
    dump = read_dump(path)
    assert dump.format == "fst" and dump.timescale == pytest.approx(1e-12) and dump.end() == 1234
    state = dump.find("core0", "state")
    assert state.gtkw_name == "top.core0.state[2:0]" and state.size == 3
    assert dump.find("core0", "mode").is_string
    assert dump.find("core0", "running_alias").ident == dump.find("host__running").ident


def test_sanitize_vcd(tmp_path):
    """Yosys's `$auto$verilog_backend.cc:N:dump_module$M` wires make GTKWave's VCD parser exit."""
    path = tmp_path / "s.vcd"
    body = "#0\n0!\n#5\n1!\n"
    path.write_text("$scope module top $end\n$var wire 1 ! $auto$verilog_backend.cc:2355:"
                    "dump_module$2 $end\n$var wire 1 ! a:b [0:0] $end\n$upscope $end\n"
                    "$enddefinitions $end\n" + body)
    sanitize_vcd(path)
    text = path.read_text()
    assert "$auto$verilog_backend.cc_2355_dump_module$2 $end" in text and "a_b [0:0]" in text
    header = text.partition("$enddefinitions")[0]
    assert text.endswith(body) and ":" not in re.sub(r"\[\d+:\d+\]", "", header)


# --- save files ---------------------------------------------------------------------------------

def test_write_gtkw_window_markers_groups(tmp_path):
    vcd = counter_vcd(tmp_path / "c.vcd")
    gtkw = tmp_path / "c.gtkw"
    at = lambda c: c * 1_000_000 - 500_000                   # noqa: E731 (cycle c starts)
    rows = [Comment("what this shows"),
            Group("first", [Comment("look here"), Trace(("cycle",), "cycle", fmt="dec"),
                            Trace(("state",), "state", enum=State),
                            Group("details", [Trace(("mode",), "mode")], closed=True)]),
            Trace(("missing",), "gone")]
    missing = write_gtkw(gtkw, vcd, rows, markers=[Marker("goes wrong @40", at(40)),
                                                   Marker("acts @44", at(44))],
                         window=(at(30), at(50)))
    assert missing == [("missing",)]
    save = read_gtkw(gtkw)
    assert save.dumpfile == str(vcd.resolve())
    assert save.traces == ["bench.top.cycle[7:0]", "bench.top.state[1:0]", "bench.top.mode"]
    assert save.aliases["bench.top.state[1:0]"] == "state"
    assert save.groups == ["first", "details"] and "look here" in save.comments
    assert save.marker_names == {"A": "goes wrong @40", "B": "acts @44"}
    assert save.primary == save.markers["A"] == at(40) and save.markers["B"] == at(44)
    t0, t1 = save.window(end=read_dump(vcd).end())
    assert t0 == at(30) and t1 == pytest.approx(at(50), rel=0.02)
    # an enum stored as a number gets a translate filter; a string needs none
    (filt,) = save.filters
    assert filt.endswith("c.State.txt") and open(filt).read().split() == [
        "0", "IDLE", "1", "RUN", "2", "HALT"]
    assert "@800200\n-first" in gtkw.read_text() and "@1000200\n-first" in gtkw.read_text()


def test_window_at_the_end_falls_back_to_the_whole_dump(tmp_path):
    """GTKWave ignores [timestart] when a page after it runs past the end; don't rely on it."""
    vcd = counter_vcd(tmp_path / "c.vcd", cycles=40)
    gtkw = tmp_path / "c.gtkw"
    write_gtkw(gtkw, vcd, [Trace(("cycle",))], markers=[Marker("late", 39_500_000)],
               window=(30_000_000, 40_000_000))
    save = read_gtkw(gtkw)
    assert save.timestart == 0
    t0, t1 = save.window(end=40_000_000)
    assert t0 == 0 and t1 == pytest.approx(40_000_000, rel=0.02)


def test_zoom_formula():
    # GTKWave shows 2**-zoom / 200 units per pixel
    z = zoom_for(1_000_000, 1000)
    assert 2 ** -z / 200 * 1000 == pytest.approx(1_000_000)
    assert zoom_for(1, 1000) == 0.0          # never closer than 1 unit per 200 px


def test_fit_gtkw_zooms_an_amaranth_save_file(tmp_path):
    vcd = counter_vcd(tmp_path / "c.vcd")
    gtkw = tmp_path / "c.gtkw"
    gtkw.write_text(f'[dumpfile] "{vcd}"\n[treeopen] top.\n@22\nbench.top.cycle[7:0]\n')
    fit_gtkw(gtkw, vcd)
    save = read_gtkw(gtkw)
    assert save.timestart == 0 and save.traces == ["bench.top.cycle[7:0]"]
    t0, t1 = save.window()
    assert t0 == 0 and t1 == pytest.approx(read_dump(vcd).end(), rel=0.02)


def test_parse_scopes():
    assert parse_scopes("1:0, 0:1,1", ranks=2, aivs=2) == [(1, 0), (0, 1), (1, 1)]
    with pytest.raises(ValueError, match=r"--vcd-scope die must be in \[0, 1\], not 2"):
        parse_scopes("2:0", ranks=2, aivs=1)
    with pytest.raises(ValueError, match=r"--vcd-scope core must be in \[0, 0\], not 1"):
        parse_scopes("0:1", ranks=2, aivs=1)
    with pytest.raises(ValueError, match=r"--vcd-scope must look like DIE:CORE"):
        parse_scopes("x", ranks=2, aivs=1)


# --- epfabric run --vcd --------------------------------------------------------------------------

def check_run_waveform(dump_path, die=1, core=0, cycles=None):
    """The .gtkw of a machine run: traces exist, A/B on the run's start/end, window holds both;
    with ``cycles`` (the run's, as printed) A to B spans that many ns, one per cycle."""
    gtkw = dump_path.with_suffix(".gtkw")
    save = read_gtkw(gtkw)
    dump = read_dump(dump_path)
    names = {v.gtkw_name for v in dump.vars}
    assert save.traces and set(save.traces) <= names, set(save.traces) - names
    assert {"run control", f"die {die} core {core}", f"die {die} UB port",
            f"die {die} links"} <= set(save.groups)
    for wanted in ("state", "pc", "wait_addr", "MARK", "MARK event", "commit"):
        assert wanted in save.aliases.values(), wanted
    assert any(a.endswith("in flight") for a in save.aliases.values())
    assert save.marker_names == {"A": "run start", "B": "run end"}
    start, end = save.markers["A"], save.markers["B"]
    assert start < end
    t0, t1 = save.window(end=dump.end())
    assert t0 < start < end < t1 and t1 - t0 < 1.5 * (end - start)     # the run, not the session
    if dump.format == "vcd":      # the markers sit on the edges of host.running
        running = dump.find("host__running")
        changes = dump.changes([running])
        assert dump.value_at(running, start, changes) == "1"
        assert dump.value_at(running, start - 1, changes) == "0"
        assert dump.value_at(running, end, changes) == "0"
    if cycles is not None:       # waveform time = model time: one cycle is 1 ns
        assert abs((end - start) * dump.timescale * 1e9 - cycles) <= CLOCK_PERIOD_NS
    return save


def printed_cycles(out):
    """The cycle count of ``epfabric run``'s ``[backend] N cycles in`` line."""
    (n,) = re.findall(r"^\[\w+\] (\d+) cycles in ", out, re.M)
    return int(n)


@pytest.mark.parametrize("simulator", ["pysim", "icarus",
                                       pytest.param("verilator", marks=pytest.mark.slow)],
                         indirect=True)
def test_run_vcd_on_every_backend(simulator, tmp_path, capsys):
    """``epfabric run KERNEL --vcd`` works on every backend (each simulator's own tracing).

    Verilator builds a separate tracing model of the machine for this (about a
    minute on a cold cache): ``make test-slow``. Its tracing path is covered in
    ``make test`` by :func:`test_race_waveform_on_every_simulator` on a small top.
    """
    vcd = tmp_path / "pp.vcd"
    assert main(["run", "pingpong", *SMALL, "--backend", simulator, "--vcd", str(vcd),
                 "--vcd-scope", "1:0", "--max-cycles", "2000"]) == 0
    out = capsys.readouterr().out
    assert f"wrote {vcd} + pp.gtkw" in out
    save = check_run_waveform(vcd, cycles=printed_cycles(out))
    state = next(t for t, a in save.aliases.items() if a == "state")
    if simulator == "pysim":
        assert not save.filters          # Amaranth writes enum states as strings
    else:
        assert state.endswith("[2:0]") and any(f.endswith("._State.txt") for f in save.filters)
    from epfabric.sim.backends.cocotb_runner import fst_missing
    if simulator != "pysim" and not fst_missing(simulator):   # FST too: much smaller
        fst = tmp_path / "pp.fst"
        assert main(["run", "pingpong", *SMALL, "--backend", simulator, "--vcd", str(fst),
                     "--vcd-scope", "1:0", "--max-cycles", "2000"]) == 0
        check_run_waveform(fst, cycles=printed_cycles(capsys.readouterr().out))
        assert fst.stat().st_size * 5 < vcd.stat().st_size


def test_race_waveform_on_every_simulator(simulator, tmp_path):
    """A race top traced by each simulator: same measured cycles, a .gtkw whose markers sit on them."""
    from epfabric.sim.backends import ComponentSpec, run
    from epfabric.sim.lab.experiments import races
    spec = ComponentSpec("epfabric.sim.lab.experiments.races:race_top", {"scenario": "torn_read"})
    wave = Waveform(tmp_path / f"torn-{simulator}.vcd", watch=("unsafe.done",))
    result, ran = run(spec, races._race_intent, simulator=simulator, waveform=wave)
    if simulator != "pysim":      # the same hardware: the same measured outputs
        assert result == races.run_scenario("torn_read", waveform=False)["measured"]
    assert result["unsafe"]["wrong"] == 1 and result["safe"]["wrong"] == 0
    (run_info,) = wave.runs
    dump = read_dump(run_info["path"])
    gtkw, cycles = races.write_race_gtkw("torn_read", run_info["path"], result)
    save = read_gtkw(gtkw)
    names = {v.gtkw_name for v in dump.vars}
    assert set(save.traces) <= names, set(save.traces) - names
    cycle = dump.find("unsafe", "cycle")
    changes = dump.changes([cycle])
    assert int(dump.value_at(cycle, save.markers["A"], changes), 2) == result["unsafe"]["wrong_cycle"]
    t0, t1 = save.window(end=dump.end())
    assert t0 < save.markers["A"] < t1
    # unsafe.done rises one clock edge into the cycle after done_cycle: the watch saw it
    (rise,) = [t for t, v in run_info["edges"]["unsafe.done"] if v == 1]
    (done,) = [t for t, v in changes[cycle.ident] if int(v, 2) == result["unsafe"]["done_cycle"] + 1]
    assert abs(dump.to_units(rise) - done) <= dump.to_units(CLOCK_PERIOD_NS * 1e-9) // 2
    # the waveform's time is the model's, 1 ns a cycle: the dump ends at the run's cycles in ns
    # (± one cycle), cycle c starts at (c - 0.5) ns (its rising edge) and marker A sits there
    def ns(t):
        return t * dump.timescale * 1e9
    assert dump.to_units(CLOCK_PERIOD_NS * 1e-9) == round(1e-9 / dump.timescale)
    assert abs(ns(dump.end()) - ran) <= CLOCK_PERIOD_NS
    assert ns(done) == pytest.approx(result["unsafe"]["done_cycle"] + 1 - 0.5)
    assert ns(save.markers["A"]) == pytest.approx(result["unsafe"]["wrong_cycle"] - 0.5)
    if simulator != "pysim":      # enum states by name through a translate filter
        assert any(f.endswith(".ReaderState.txt") for f in save.filters)


def test_one_dump_per_run(tmp_path):
    """A kernel that runs several machines (syncall) gets FILE, FILE-2, ...: each run its own dump."""
    from epfabric.sim.backends import ComponentSpec, run
    from epfabric.sim.lab.experiments import races
    wave = Waveform(tmp_path / "r.vcd", watch=("unsafe.done",))
    spec = ComponentSpec("epfabric.sim.lab.experiments.races:race_top", {"scenario": "torn_read"})
    for _ in range(2):
        result, _cycles = run(spec, races._race_intent, waveform=wave)
    assert [r["path"].name for r in wave.runs] == ["r.vcd", "r-2.vcd"]
    assert all(r["simulator"] == "pysim" and r["spec"] == spec for r in wave.runs)
    (rise,) = [t for t, v in wave.runs[1]["edges"]["unsafe.done"] if v == 1]
    dump = read_dump(tmp_path / "r-2.vcd")
    assert dump.to_units(rise) == dump.changes([dump.find("unsafe", "done")])[
        dump.find("unsafe", "done").ident][-1][0]
    assert result["unsafe"]["done"] == 1


@pytest.mark.parametrize("argv, message", [
    (["--vcd", "x.fst"], "--vcd 'x.fst': Amaranth's simulator writes VCD only; name a .vcd file "
                         "or use --backend icarus/verilator"),
    (["--vcd-scope", "1:0"], "--vcd-scope needs --vcd"),
    (["--vcd", "x.vcd", "--vcd-scope", "2:0"], r"--vcd-scope die must be in \[0, 1\], not 2"),
    (["--vcd", "x.vcd", "--vcd-scope", "0:5"], r"--vcd-scope core must be in \[0, 1\], not 5"),
])
def test_bad_waveform_options(argv, message, capsys, no_simulation, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["run", "pingpong", *SMALL, *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert re.search(message, err) and "\n" not in err, err


# --- GTKWave itself, where installed ------------------------------------------------------------

TCL = """set f [open "{out}" w]
foreach s [gtkwave::getDisplayedSignals] {{ puts $f $s }}
close $f
gtkwave::/File/Quit
"""


def test_gtkwave_displays_every_trace(tmp_path, monkeypatch):
    require("GTKWave", None if shutil.which("gtkwave") and shutil.which("xvfb-run")
            else "gtkwave and xvfb-run not on PATH (optional, not installed by CI)", optional=True)
    from epfabric.sim.lab.experiments import races
    monkeypatch.setenv("EPFABRIC_WAVEFORM_DIR", str(tmp_path))
    row = races.run_scenario("checksum_stale_blocks")
    out, script = tmp_path / "shown.txt", tmp_path / "list.tcl"
    script.write_text(TCL.format(out=out))
    subprocess.run(["xvfb-run", "-a", "gtkwave", "-S", str(script), row["gtkw"]],
                   capture_output=True, timeout=120, env={**os.environ, "HOME": str(tmp_path)})
    shown = out.read_text().split("\n")[:-1]
    assert len(shown) == len(read_gtkw(row["gtkw"]).traces) > 20
