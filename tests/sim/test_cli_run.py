"""``epfabric run`` (sim/cli/run.py): registered kernels from the command line, JSON, Perfetto trace, VCD.

Bad input exits with status 2 and one line on stderr *before* anything is
simulated: the tests that check it make every simulation fail loudly.
"""

import json
import os

import pytest

from epfabric.hw.validate import UserError, UserTypeError, check_int
from epfabric.sim.cli import main, make_parser
from epfabric.sw.kernels import KERNELS

SMALL = ["--preset", "tiny", "--topology", "superpod:2,1,1", "--aivs", "2"]


def test_every_registered_kernel_is_a_choice():
    parser = make_parser()
    sub = next(a for a in parser._subparsers._group_actions)
    run_parser = sub.choices["run"]
    (kernel_arg,) = [a for a in run_parser._actions if a.dest == "kernel"]
    assert list(kernel_arg.choices) == sorted(KERNELS)
    assert {"alltoall", "pingpong", "syncall", "agrs"} <= set(KERNELS)


def test_syncall_json_and_trace(tmp_path, capsys):
    out, trace = tmp_path / "out.json", tmp_path / "trace.json"
    assert main(["run", "syncall", *SMALL, "--max-cycles", "2000", "--json", str(out),
                 "--trace", str(trace)]) == 0
    text = out.read_text()
    assert text.endswith("}\n")                         # written whole (sim/output.write_atomic)
    result = json.loads(text)
    assert result["kernel"] == "syncall" and result["preset"] == "tiny"
    assert result["backend"] == "pysim" and result["params"] == {"epochs": 2}
    assert result["correct"] and result["problems"] == []
    (run,) = result["runs"]                             # --aivs 2: one machine, not the 1/2/4 sweep
    assert run["cores"] == 4 and run["aivs_per_die"] == 2
    assert run["config"]["topology"] == ["superpod", 2, 1, 1]
    assert len(run["barrier_cycles"]) == 2 and run["cycles_per_barrier"] > 0
    events = json.loads(trace.read_text())["traceEvents"]
    marks = [e for e in events if e["ph"] == "i"]
    assert len(marks) == 4 * 2 * 2                     # 4 cores x 2 barriers x (enter, leave)
    assert {e["name"] for e in events if e["ph"] == "M"} == {"process_name", "thread_name"}
    assert sorted(os.listdir(tmp_path)) == ["out.json", "trace.json"]   # no temporary files left
    assert "correct" in capsys.readouterr().out


def test_moe_layer_sequence_options_json_and_slices(tmp_path):
    """--roles 1,1,1 and --counts 3,2 are one value each; JSON has the cut and the band times;
    the Perfetto trace has AG, FFN and RS slices. ``--sample-every 0`` (no counter sampler;
    the sampler's tracks are test_both_systems_in_one_trace's): the machines are then
    tests/sw/test_moe_layer.py's small case's."""
    out, trace = tmp_path / "out.json", tmp_path / "trace.json"
    assert main(["run", "moe-layer", "--preset", "tiny", "--ranks", "2", "--counts", "3,2",
                 "--experts", "4", "--topk", "2", "--roles", "1,1,1", "--bands", "2",
                 "--sample-every", "0", "--json", str(out), "--trace", str(trace)]) == 0
    result = json.loads(out.read_text())
    assert result["correct"] and result["params"]["roles"] == [1, 1, 1]
    assert result["params"]["counts"] == [3, 2]
    inc, ring = result["runs"]
    assert result["cut"] == 1 - inc["cycles"] / ring["cycles"]
    assert len(inc["band_times"]) == 2 and len(ring["band_times"]) == 1
    events = json.loads(trace.read_text())["traceEvents"]
    assert {e["name"] for e in events if e["ph"] == "X"} == {"AG", "FFN", "RS"}
    assert sorted(e["args"]["name"] for e in events if e["name"] == "process_name") == [
        "inc: rank 0", "inc: rank 1", "ring: rank 0", "ring: rank 1"]       # which run is which


def test_param_json_and_vcd(tmp_path):
    out, vcd = tmp_path / "a2a.json", tmp_path / "a2a.vcd"
    assert main(["run", "alltoall", *SMALL, "--param", "seed=7", "--max-cycles", "2000",
                 "--json", str(out), "--vcd", str(vcd)]) == 0
    result = json.loads(out.read_text())
    assert result["params"] == {"seed": 7} and result["correct"]
    (run,) = result["runs"]
    assert run["blocks"] == 2 * 4 and run["dies"] == 2 and run["aivs_per_die"] == 2
    assert vcd.stat().st_size > 0 and vcd.with_suffix(".gtkw").exists()


@pytest.mark.parametrize("argv, message", [
    (["run", "alltoall", "--preset", "nope"], "unknown preset 'nope'"),
    (["run", "alltoall", "--topology", "ring:4"],
     "topology kind must be one of superpod, star, not 'ring'"),
    (["run", "alltoall", "--topology", "superpod:2,x"],
     "topology must look like superpod:2,2,2 or star:4, not 'superpod:2,x'"),
    (["run", "alltoall", "--topology", "superpod:3,1,1"], "dies_per_npu must be in [1, 2], not 3"),
    (["run", "pingpong", "--vcd", "x.fst"], "--vcd 'x.fst': Amaranth's simulator writes VCD only"),
    (["run", "syncall", "--max-cycles", "0"], "--max-cycles must be in [1, 4294967295], not 0"),
    (["run", "alltoall", "--aivs", "0"], "--aivs must be >= 1, not 0"),
    (["run", "alltoall", "--aivs", "-1"], "--aivs must be >= 1, not -1"),
    (["run", "alltoall", "--aivs", "300"], "aivs_per_die must be in [1, 256], not 300"),
    (["run", "alltoall", "--param", "sed=1"], "unknown parameter(s) sed for kernel alltoall; valid: seed=0"),
    (["run", "alltoall", "--param", "oops"], "--param must look like key=value, not 'oops'"),
    (["run", "agrs", "--aivs", "2"], "agrs has no AIV cores"),
    (["run", "agrs", "--param", "mode='x'"], "mode must be one of inc, ring, not 'x'"),
    (["run", "alltoall", "--json", "/missing-folder/x.json"],
     "--json '/missing-folder/x.json': folder '/missing-folder' does not exist"),
    (["run", "alltoall", "--trace", "/missing-folder/t.json"], "--trace '/missing-folder/t.json'"),
    (["run", "pingpong", "--batch", "4"],
     "--batch is not a parameter of kernel pingpong; its parameters: none"),
    (["run", "dispatch", "--system", "cann,mpi"], "system must be one of cann, ubep, ubep-inc, not 'mpi'"),
    (["run", "dispatch", "--system", "cann,ubep", "--batch", "4,8"],
     "one option may list values, not --system and --batch"),
    (["run", "dispatch", "--batch", "4", "--param", "batch=8"],
     "--batch and --param batch=... both given"),
    (["run", "combine", "--system", "cann,ubep", "--vcd", "t.vcd"],
     "--vcd needs one value of --system"),
    (["run", "combine", "--system", "cann,cann"],
     "--system cann,cann: 'cann' is listed twice; give each value once"),
    (["run", "moe-layer", "--roles", "1,5,2;2,4,2;1,5,2"],
     "--roles 1,5,2;2,4,2;1,5,2: (1, 5, 2) is listed twice; give each value once"),
    (["run", "dispatch", "--cap", "0"], "cap must be in [1, 32], not 0"),
    (["run", "syncall", "--epochs", "0"], "epochs must be in [1, 99], not 0"),
    (["run", "syncall", "--epochs", "99", "--aivs", "128"],
     "epochs=99 on 512 cores needs 101376 MARK trace entries; the trace holds at most 65535"),
    (["run", "syncall", "--max-cycles", str(1 << 32)],
     "--max-cycles must be in [1, 4294967295], not 4294967296"),
    (["run", "alltoall", "--seed", "-1"], "seed must be >= 0, not -1"),
    (["run", "agrs", "--param", "concurrent=yes"], "concurrent must be a bool, not 'yes'"),
    (["run", "agrs", "--param", "counts=[1,2]"], "counts must be 4 row counts in [0, 4], not [1, 2]"),
    (["run", "moe-layer", "--roles", "1,5"],
     "roles must be (gather, compute, reduce) AIV counts, not (1, 5)"),
    (["run", "moe-layer", "--roles", "1,5,2;1,6", "--ranks", "4"],
     "roles must be (gather, compute, reduce) AIV counts, not (1, 6)"),
    (["run", "moe-layer", "--ranks", "2", "--counts", "3,2,1"],
     "counts must give 2 token counts (one per rank), not (3, 2, 1)"),
    (["run", "pingpong", "--vcd", "."], "--vcd '.' is a folder, not a file"),
    (["run", "pingpong", "--trace", "."], "--trace '.' is a folder, not a file"),
    (["run", "alltoall", "--backend", "native", "--vcd", "x.vcd"],
     "--vcd 'x.vcd': the native backend writes no waveforms"),
    (["run", "dispatch", "--knob", "syncall_cycles"],
     "--knob must be NAME=INTEGER (a knob of store_window, syncall_cycles, inject_rate, "
     "vector_extra, read_extra, poll_extra), not 'syncall_cycles'"),
    (["run", "dispatch", "--knob", "window=3"],
     "knob must be one of store_window, syncall_cycles, inject_rate, vector_extra, read_extra, "
     "poll_extra, not 'window'"),
    (["run", "dispatch", "--knob", "store_window=513"], "store_window must be in [1, 512], not 513"),
    (["run", "agrs", "--knob", "store_window=2"],
     "--knob: kernel agrs does not run on the AIV machine"),
    (["run", "alltoall", "--sample-every", "8"],
     "--sample-every needs --trace (the counter tracks are in the trace)"),
    (["run", "alltoall", "--trace", "t.json", "--sample-every", "-1"],
     "--sample-every must be in [0, 4294967295], not -1"),
    (["run", "agrs", "--trace", "t.json", "--sample-every", "8"],
     "--sample-every: kernel agrs does not run on the AIV machine (its counters are not sampled)"),
])
def test_bad_input_one_line_before_any_simulation(argv, message, capsys, no_simulation):
    assert main(argv) == 2
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert err.startswith("epfabric run: error: ")
    assert message in err and "\n" not in err
    assert captured.out == ""


def test_a_missing_simulator_is_one_line(monkeypatch, capsys, no_simulation):
    """A backend that cannot run here (Icarus not installed) is bad input, not a traceback."""
    monkeypatch.setattr("epfabric.sim.cli.run.missing_reason",
                        lambda b: "Icarus Verilog not found (iverilog/vvp not on PATH)"
                        if b == "icarus" else None)
    assert main(["run", "alltoall", "--backend", "icarus"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == ("epfabric run: error: --backend icarus: Icarus Verilog not found "
                   "(iverilog/vvp not on PATH)")


def test_a_shape_refused_while_programs_are_made_is_one_line(capsys):
    """UBEP needs a CalCumSum AIV and a sender: --aivs 1 is refused in one line (exit 2)."""
    assert main(["run", "dispatch", "--preset", "tiny", "--system", "ubep", "--aivs", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("epfabric run: error: ") and "aivs must be >= 2, not 1" in err
    assert "\n" not in err


def test_ctrl_c_is_interrupted_and_exit_130(monkeypatch, capsys):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt
    monkeypatch.setattr("epfabric.sim.cli.run.run_kernel", interrupted)
    assert main(["run", "alltoall"]) == 130
    assert capsys.readouterr().err.strip() == "epfabric run: interrupted"


def test_json_folder_is_an_error_not_a_file(tmp_path, capsys, no_simulation):
    assert main(["run", "alltoall", "--json", str(tmp_path)]) == 2
    assert f"--json {str(tmp_path)!r} is a folder, not a file" in capsys.readouterr().err


def _canned(kernel="alltoall", problems=()):
    """What run_kernel returns for a small alltoall (no simulation)."""
    from epfabric.sw.config import MachineConfig
    from epfabric.sw.kernels import MachineRun, RunResult
    from epfabric.sw.report import Report
    config = MachineConfig("tiny", topology=("superpod", 2, 1, 1), aivs_per_die=2)
    report = Report(config=config.to_dict(), backend="pysim", cycles=100, ns=100.0, done=True,
                    timeout=False)
    run = MachineRun(config, 100, 100.0, {"correct": not problems, "problems": list(problems),
                                          "blocks": 8, "dies": 2, "aivs_per_die": 2}, report)
    return RunResult(kernel, "tiny", "pysim", {"seed": 0}, [run])


def test_json_is_written_atomically(tmp_path, monkeypatch, capsys):
    """A write that fails leaves the previous file intact and no temporary file behind."""
    out = tmp_path / "r.json"
    monkeypatch.setattr("epfabric.sim.cli.run.run_kernel", lambda *a, **k: _canned())
    assert main(["run", "alltoall", *SMALL, "--json", str(out)]) == 0
    first = out.read_text()
    from epfabric.sim import __version__
    # the result as the kernel gave it, with the version that wrote it first
    doc = json.loads(first)
    assert doc == {"epfabric": __version__, **_canned().to_dict()} and first.endswith("\n")
    assert list(doc) == ["epfabric", "kernel", "preset", "backend", "correct", "problems",
                         "params", "runs"]
    assert list(doc["runs"][0])[:6] == ["config", "cycles", "ns", "correct", "problems", "blocks"]
    assert doc["runs"][0]["config"]["topology"] == ["superpod", 2, 1, 1]
    assert f"wrote {out}" in capsys.readouterr().out

    def broken_replace(src, dst):
        raise OSError("disk full")
    monkeypatch.setattr("epfabric.sim.output.os.replace", broken_replace)
    second = _canned(problems=["a different result"])
    monkeypatch.setattr("epfabric.sim.cli.run.run_kernel", lambda *a, **k: second)
    with pytest.raises(OSError, match="disk full"):
        main(["run", "alltoall", *SMALL, "--json", str(out)])
    assert out.read_text() == first                     # the old result, whole
    assert os.listdir(tmp_path) == ["r.json"]           # the temporary file was removed


def test_write_atomic_never_leaves_a_partial_file(tmp_path):
    from epfabric.sim.output import write_atomic
    path = tmp_path / "x.json"
    assert write_atomic(path, '{"a": 1}\n') == path and json.loads(path.read_text()) == {"a": 1}
    with pytest.raises(TypeError):
        write_atomic(path, object())                    # fails while writing
    assert path.read_text() == '{"a": 1}\n' and os.listdir(tmp_path) == ["x.json"]


def test_watchdog_exit_code(capsys):
    assert main(["run", "alltoall", *SMALL, "--max-cycles", "20"]) == 1
    err = capsys.readouterr().err
    assert "watchdog: not every core halted within 20 cycles" in err
    assert "waits on address" in err or "still running" in err


def test_commands_and_experiments_are_registered():
    from epfabric.sim.cli import COMMANDS
    from epfabric.sim.lab.experiments import EXPERIMENTS
    assert [name for name, _, _ in COMMANDS] == ["run", "presets", "verilog", "demo", "races",
                                                 "calibrate",
                                                 "agrs", "bench", "fabric-speed", "reproduce",
                                                 "figures", "synth", "prove", "soak", "mutate",
                                                 "pages"]
    assert set(EXPERIMENTS) == {"table2", "fig6", "eq5", "payload", "races", "speed",
                                "fabric_speed", "quaternary", "fig3b", "fig7a", "fig7b", "fig7c",
                                "fig8", "fig9", "fig10", "fig13", "fig14", "incmoe-layer", "table4",
                                "mechanisms", "training", "validation", "inc-ep"}
    assert all(e.name == name and e.title for name, e in EXPERIMENTS.items())


def test_a_bug_inside_the_job_is_not_bad_input(monkeypatch, capsys):
    """A plain ValueError raised while the work runs is a bug: its traceback, not exit 2."""
    def broken(*args, **kwargs):
        raise ValueError("internal: an index the kernel computed is out of range")
    monkeypatch.setattr("epfabric.sim.cli.run.run_kernel", broken)
    with pytest.raises(ValueError, match="internal: an index"):
        main(["run", "alltoall"])
    assert "error:" not in capsys.readouterr().err


@pytest.mark.parametrize("exc", [ValueError("internal bug"), TypeError("internal bug")])
def test_a_bug_in_prepare_is_not_bad_input(exc, monkeypatch, capsys):
    """Only UserError is bad input; a plain ValueError/TypeError from prepare propagates."""
    def prepare(args):
        raise exc
    monkeypatch.setattr("epfabric.sim.cli.run.prepare", prepare)
    with pytest.raises(type(exc), match="internal bug"):
        main(["run", "alltoall"])
    assert "error:" not in capsys.readouterr().err


def test_user_error_is_a_value_error_and_type_error_kind():
    """UserError keeps ``except ValueError`` callers working; UserTypeError is both."""
    assert issubclass(UserError, ValueError) and not issubclass(UserError, TypeError)
    assert issubclass(UserTypeError, UserError) and issubclass(UserTypeError, TypeError)
    with pytest.raises(UserTypeError, match="ranks must be an integer, not 2.0"):
        check_int("ranks", 2.0, 1)
    with pytest.raises(UserError, match=r"ranks must be >= 1, not 0"):
        check_int("ranks", 0, 1)


def _run_help():
    sub = next(a for a in make_parser()._subparsers._group_actions)
    return sub.choices["run"]


def test_help_gives_each_kernel_options_values_and_defaults():
    helps = {a.dest: a.help for a in _run_help()._actions}
    assert helps["kernel_system"] == ("kernel parameter system (= --param system=VALUE): CANN "
                                      "EP's BSP kernel, UBEP's, or UBEP's on switches that "
                                      "multicast and reduce; one of cann, ubep, ubep-inc; "
                                      "default 'cann' (dispatch, combine)")
    assert ("dispatch: a negative control of system='cann'; combine: a negative control of "
            "system='ubep' or 'ubep-inc'; daf: ") in helps["kernel_broken"]   # each kernel's help
    assert "one of sp, sw, tff; default unset (the kernel chooses)" in helps["kernel_sync"]
    assert helps["kernel_protocol"].endswith("one of dc, sp, sw, tff; default 'tff' (daf)")
    assert helps["kernel_mode"].endswith("one of both, inc, ring; default 'inc' (agrs); "
                                         "'both' (moe-layer)")
    kernel = next(a for a in _run_help()._actions if a.dest == "kernel")
    assert "dispatch: MoE token dispatch (CANN EP's BSP kernel or UBEP's: --system)" in kernel.help
    assert "names match in any case" in _run_help().format_help().replace("\n", " ")


def test_a_name_matches_in_any_case(monkeypatch):
    """--system UBEP,Cann is --system ubep,cann (the kernel's names)."""
    from epfabric.sim.cli.run import prepare
    seen = []
    monkeypatch.setattr("epfabric.sim.cli.run.run_kernel",
                        lambda kernel, be, **kw: seen.append(kw["params"]["system"]) or 1 / 0)
    args = make_parser().parse_args(["run", "dispatch", *SMALL, "--system", "UBEP,Cann"])
    job = prepare(args)
    with pytest.raises(ZeroDivisionError):
        job()
    assert seen == ["ubep"]
    with pytest.raises(UserError, match="system must be one of cann, ubep, ubep-inc, not 'UBEPP'"):
        prepare(make_parser().parse_args(["run", "dispatch", *SMALL, "--system", "UBEPP"]))


def test_both_systems_in_one_trace(tmp_path, capsys):
    """--system cann,ubep --trace: each system's ranks are processes of their own, named; every
    AIV's run is tiled by slices named after its phases (UBEP Fig. 8's stages)."""
    trace, out = tmp_path / "t.json", tmp_path / "r.json"
    assert main(["run", "dispatch", *SMALL, "--batch", "2", "--topk", "1", "--experts", "2",
                 "--system", "cann,ubep", "--trace", str(trace), "--json", str(out)]) == 0
    events = json.loads(trace.read_text())["traceEvents"]
    printed = capsys.readouterr().out
    # each system's short run had too few counter samples at the first interval and ran
    # again at one a cycle (the same cycles); the machine is the sampler's
    assert printed.count("counter samples every 8 cycles: running again with "
                         "--sample-every 1") == 2
    assert {r["config"]["sample_depth"] for result in json.loads(out.read_text())["results"]
            for r in result["runs"]} == {1024}
    names = {e["pid"]: e["args"]["name"] for e in events if e["name"] == "process_name"}
    assert sorted(names.values()) == ["system=cann: rank 0", "system=cann: rank 1",
                                      "system=ubep: rank 0", "system=ubep: rank 1"]
    marks = {names[e["pid"]].split(":")[0] for e in events if e["ph"] in ("i", "X")}
    assert marks == {"system=cann", "system=ubep"}           # both runs' MARKs are in the file
    tracks = {}
    for e in events:
        if e["ph"] == "X":
            tracks.setdefault((names[e["pid"]].split(":")[0], e["pid"], e["tid"]), []).append(e)
    cann = ["Init", "Token-Sending", "SendFlag: count + fence", "SyncAll 1", "SendFlag: status",
            "Flag Verification", "SyncAll 2", "CalCumSum", "Token-Reordering"]
    ubep = (["Init", "Token-Sending", "Token-Reordering"],                       # T-AIV
            ["Init", "TokenCnt", "CalCumSum", "Token-Reordering"])               # C-AIV
    assert len(tracks) == 2 * 2 * 2                          # 2 systems x 2 ranks x 2 AIVs
    for (system, _, _), slices in tracks.items():
        slices.sort(key=lambda e: e["args"]["start_cycle"])
        got = [e["name"] for e in slices]
        assert got == cann if system == "system=cann" else got in ubep, (system, got)
        assert slices[0]["args"]["start_cycle"] == 0
        for a, b in zip(slices, slices[1:]):                  # back to back: they tile the run
            assert a["args"]["end_cycle"] == b["args"]["start_cycle"]
            assert a["ts"] + a["dur"] == pytest.approx(b["ts"])
    import re
    ubep_cycles, cann_cycles = map(int, re.search(r"latency (\d+) / (\d+) cycles",
                                                  printed).groups())
    # a line per run of bytes per link class, measured data blocks beside the exact count and
    # the closed form: 2 dies of one NPU use only their direct links
    links = re.findall(r"^  links \(bytes; data blocks measured, exact, closed form\): direct "
                       r"([\d,]+) B \((\d+) blocks \+ (\d+) small; exact (\d+) / closed form "
                       r"([\d.]+)\), up 0 B ", printed, re.M)
    assert len(links) == 2
    runs = [run for result in json.loads(out.read_text())["results"] for run in result["runs"]]
    held = [(r["system"], r["links"]["exact"]["direct"], r["links"]["measured"]["direct"]["bytes"])
            for r in runs]
    assert held == [(system, int(exact), int(nbytes.replace(",", "")))
                    for system, (nbytes, _b, _s, exact, _c) in zip(("cann", "ubep"), links)]
    for nbytes, blocks, small, exact, _closed in links:
        assert blocks == exact and int(blocks) > 0
        assert int(nbytes.replace(",", "")) == 512 * int(blocks) + 32 * int(small)   # tiny's
    _check_flows_and_counters(json.loads(trace.read_text()), names,
                              {"system=cann": cann_cycles, "system=ubep": ubep_cycles})


def _check_flows_and_counters(doc, names, run_cycles):
    """The flow arrows and counter tracks of test_both_systems_in_one_trace's file."""
    from epfabric.sw.kernels.dispatch import workload_of
    events = doc["traceEvents"]
    assert doc["otherData"] == {"flows_unmatched": 0}
    slices = {}
    for e in events:
        if e["ph"] == "X":
            slices.setdefault((e["pid"], e["tid"], e["name"]), []).append(e)

    def inside(e, name):                      # a slice of that name on e's thread holds e
        return any(x["ts"] <= e["ts"] <= x["ts"] + x["dur"]
                   for x in slices.get((e["pid"], e["tid"], name), ()))
    starts = {e["id"]: e for e in events if e["ph"] == "s"}
    ends = {e["id"]: e for e in events if e["ph"] == "f"}
    assert len(starts) == len([e for e in events if e["ph"] == "s"])    # ids unique
    assert starts.keys() == ends.keys() and starts
    pairs = {}                                # (system, flow name) -> {(src, dst) thread pairs}
    for i, s in starts.items():
        f = ends[i]
        assert f["name"] == s["name"] and f["bp"] == "e" and f["cat"] == s["cat"] == "flow"
        assert f["ts"] >= s["ts"]
        assert s["pid"] // 1000 == f["pid"] // 1000                       # one run's ranks
        assert inside(s, s["args"]["slice"]) and inside(f, f["args"]["slice"]), (s, f)
        system = names[s["pid"]].split(":")[0]
        pairs.setdefault((system, s["name"]), set()).add(
            ((s["pid"] % 1000, s["tid"]), (f["pid"] % 1000, f["tid"])))
    # CANN, 2 ranks x 2 AIVs, 2 experts: AIV a writes expert a's status to rank a, entry
    # q = s, which AIV q of rank a verifies
    assert pairs.pop(("system=cann", "status flag")) == {
        ((s, a), (a, s)) for s in range(2) for a in range(2)}
    # UBEP: every token arrow ends on the rank of a routed expert, one per (source, dest. rank)
    k = KERNELS["dispatch"]
    params = k.resolve_params({"system": "ubep", "batch": 2, "topk": 1, "experts": 2})
    config = k.configs("tiny", ("superpod", 2, 1, 1), 2, params)[0]
    w = workload_of(params, 2, config.words_per_block)
    routed = {(s, int(e) // w.epr) for s in range(2) for e in w.topk_idx[s].reshape(-1)}
    tokens = pairs.pop(("system=ubep", "tokens"))
    assert {(src[0], dst[0]) for src, dst in tokens} == routed
    assert all(src[1] == 0 for src, _ in tokens)              # the T-AIV (C = 1 of 2 AIVs)
    # counts from each rank's C-AIV (1) to the pair's reordering AIV (q mod 2) and to the
    # CalCumSum of the C-AIV of the expert's rank, which reads CNT[q] for q < (l1 = 1) * 2
    count = pairs.pop(("system=ubep", "count"))
    assert {src for src, _ in count} == {(0, 1), (1, 1)}
    assert {(src, dst) for src, dst in count if dst[1] == 1} == {
        ((s, 1), (d, 1)) for s in range(2) for d in range(2)}
    # offsets: rank d's CalCumSum (AIV 1) publishes OFFS[q] for q = 0, 1 to AIV q mod 2
    assert pairs.pop(("system=ubep", "offset")) == {((d, 1), (d, q)) for d in range(2)
                                                     for q in range(2)}
    assert not pairs
    # counters: one end-of-run sample per (run, rank, counter), at the run's last cycle
    counters = [e for e in events if e["ph"] == "C"]
    assert all(list(e["args"]) == ["value"] for e in counters)
    _check_rate_tracks([e for e in counters if "end-of-run" not in e["name"]], names,
                       run_cycles, counters)
    by_run = {}
    for e in counters:
        if e["name"].endswith("end-of-run total)"):
            by_run.setdefault(names[e["pid"]].split(":")[0], []).append(e)
    assert sorted(by_run) == ["system=cann", "system=ubep"]
    from epfabric.hw.topology import SUPERPOD_HOPS
    for system, evs in by_run.items():
        # 5 per rank (the fabric's 3, the UB port's 2 that come with the sampler); the link
        # counters (blocks, small per kind) once for the machine, on rank 0
        assert len({(e["pid"], e["name"]) for e in evs}) == len(evs) == \
            2 * 5 + 2 * len(SUPERPOD_HOPS)
        machine = [e for e in evs if "(machine, end-of-run total)" in e["name"]]
        assert len(machine) == 2 * len(SUPERPOD_HOPS) and {e["pid"] % 1000 for e in machine} == {0}
        assert {e["ts"] for e in evs} == {run_cycles[system] / 1000.0}   # tiny: 1 ns cycles
        last = max(x["ts"] + x["dur"] for (pid, _, _), xs in slices.items() for x in xs
                   if names[pid].startswith(system))
        assert evs[0]["ts"] >= last - 1e-9                    # after every AIV's last phase
        value = {(e["pid"] % 1000, e["name"].split()[0]): e["args"]["value"] for e in evs}
        assert sum(value[r, "tx_blocks"] for r in range(2)) == \
            sum(value[r, "rx_blocks"] for r in range(2))      # every flit sent was delivered
        for s in range(2):                                    # at least its remote tokens
            remote = sum(int(e) // w.epr != s for e in w.topk_idx[s].reshape(-1))
            assert value[s, "tx_blocks"] >= remote * w.hidden_blocks


def _check_rate_tracks(rates, names, run_cycles, counters):
    """The counter sampler's rate tracks of test_both_systems_in_one_trace's file: per system
    and rank the die link's tx/rx flits and the UB port's commits, the direct links' flits for
    the machine; each sampled every cycle of these short runs (the sampler's second run at
    the interval that gives ~400 samples), inside the run, and adding up to its end-of-run
    total."""
    tracks = {}
    for e in rates:
        tracks.setdefault((names[e["pid"]].split(":")[0], e["pid"] % 1000, e["name"]), []).append(e)
    for system in ("system=cann", "system=ubep"):
        got = {(rank, name) for s, rank, name in tracks if s == system}
        want = {(r, f"{what} (rank {r})") for r in range(2)
                for what in ("link tx flits/µs", "link rx flits/µs", "UB block commits/µs",
                             "UB word commits/µs")}
        want |= {(0, "direct links: block flits/µs (machine)"),
                 (0, "direct links: small flits/µs (machine)")}
        assert want <= got and all("stalled" in name for _r, name in got - want), got - want
    totals = {(names[e["pid"]].split(":")[0], e["pid"] % 1000, e["name"].split()[0]):
              e["args"]["value"] for e in counters if "end-of-run" in e["name"]}
    counter_of = {"link tx flits/µs": "tx_blocks", "link rx flits/µs": "rx_blocks",
                  "UB block commits/µs": "ub_blocks", "UB word commits/µs": "ub_words",
                  "direct links: block flits/µs": "link_blocks.direct",
                  "direct links: small flits/µs": "link_small.direct"}
    for (system, rank, name), evs in tracks.items():
        end = run_cycles[system] / 1000.0                  # tiny: 1 ns cycles
        assert len(evs) == run_cycles[system] + 1, (name, len(evs))   # one step a cycle + 0
        assert [e["ts"] for e in evs] == sorted(e["ts"] for e in evs)
        assert evs[0]["ts"] == 0 and evs[-1]["ts"] == pytest.approx(end)
        assert evs[-1]["args"]["value"] == 0 and all(e["args"]["value"] >= 0 for e in evs)
        label = name.rsplit(" (", 1)[0]
        if label in counter_of:                            # the rates add up to the total
            area = sum(a["args"]["value"] * (b["ts"] - a["ts"]) for a, b in zip(evs, evs[1:]))
            assert area == pytest.approx(totals[system, rank, counter_of[label]]), name


def _routing_file(tmp_path, ranks=2):
    import numpy as np
    idx = np.array([[[0, 1], [0, 3], [3, 0], [1, 3]], [[0, 2], [1, 0], [3, 2], [0, 1]]])
    path = tmp_path / "routing.npz"
    np.savez(path, topk_idx=idx[:ranks])
    return str(path), idx


def test_dispatch_replays_a_routing_file(tmp_path, capsys):
    """--routing FILE is the kernel parameter routing: batch and topk come from the file."""
    import numpy as np
    path, idx = _routing_file(tmp_path)
    out = tmp_path / "r.json"
    assert main(["run", "dispatch", "--preset", "tiny", "--topology", "superpod:2,1,1",
                 "--aivs", "2", "--experts", "4", "--routing", path, "--json", str(out)]) == 0
    assert "BS 4, top-2, 4 experts" in capsys.readouterr().out
    result = json.loads(out.read_text())
    assert result["params"]["routing"] == path and result["correct"]
    assert result["runs"][0]["recv_count"] == np.bincount(idx.ravel(), minlength=4) \
        .reshape(2, 2).tolist()
    assert "--routing" in _run_help().format_help()


def test_a_routing_file_of_other_ranks_is_one_line(tmp_path, capsys, no_simulation):
    path, _ = _routing_file(tmp_path, ranks=1)
    assert main(["run", "dispatch", "--preset", "tiny", "--topology", "superpod:2,1,1",
                 "--aivs", "2", "--experts", "4", "--routing", path]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (f"epfabric run: error: routing={path!r} has 1 ranks (its shape (1, 4, 2)); "
                   f"the machine has 2")


def test_a_knob_changes_the_run_as_it_says(capsys):
    """``--syncall hard --knob syncall_cycles=N``: CANN's three SyncAlls (two experts a rank:
    UpdateTokenNumsOut's third) each hold the dies N cycles longer than at 0
    (tests/sw/test_dispatch.py has the exact accounting)."""
    cycles = []
    for wait in (0, 300):
        assert main(["run", "dispatch", *SMALL, "--batch", "4", "--topk", "2", "--experts", "4",
                     "--backend", "pysim", "--syncall", "hard",
                     "--knob", f"syncall_cycles={wait}"]) == 0
        out = capsys.readouterr().out
        assert "correct" in out
        cycles.append(int(out.split(" cycles = ")[0].rsplit(" ", 1)[1].replace(",", "")))
    assert cycles[1] - cycles[0] == 3 * 300


def test_a_combines_trace_shows_its_dispatch_first(tmp_path, capsys):
    """``run combine --trace``: the dispatch run the combine loads from is in the file as its
    own processes (``dispatch: rank r``, with its phases and arrows), and the combine's
    timeline starts where the dispatch's ended."""
    trace = tmp_path / "c.json"
    assert main(["run", "combine", *SMALL, "--batch", "2", "--topk", "1", "--experts", "2",
                 "--system", "ubep", "--sample-every", "1", "--trace", str(trace)]) == 0
    doc = json.loads(trace.read_text())
    events = doc["traceEvents"]
    names = {e["pid"]: e["args"]["name"] for e in events if e["name"] == "process_name"}
    assert sorted(names.values()) == ["dispatch: rank 0", "dispatch: rank 1", "rank 0", "rank 1"]
    slices = [e for e in events if e["ph"] == "X"]
    first = {n: [e for e in slices if names[e["pid"]].startswith("dispatch") == (n == "d")]
             for n in ("d", "c")}
    assert {e["name"] for e in first["d"]} >= {"Init", "Token-Sending", "Token-Reordering"}
    assert {e["name"] for e in first["c"]} >= {"Combine init", "Combine send", "Combine sum"}
    dispatch_end = max(e["ts"] + e["dur"] for e in first["d"])
    combine_start = min(e["ts"] for e in first["c"])
    # the combine's cycle 0 is the dispatch run's end (its last core's halt, after its last MARK)
    dispatch_cycles = int(capsys.readouterr().out.split("after a dispatch of ")[1].split()[0]
                          .replace(",", ""))
    assert combine_start == pytest.approx(dispatch_cycles / 1000, abs=1e-9)
    assert dispatch_end <= combine_start
    flows = {e["name"] for e in events if e["ph"] == "s"}
    assert {"tokens", "count", "answers"} <= flows
    assert doc["otherData"] == {"flows_unmatched": 0}


def test_version_is_the_installed_packages(capsys):
    """``epfabric --version`` prints the installed distribution's version and exits 0."""
    from importlib.metadata import version
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out.split() == ["epfabric", version("epfabric")]


def test_ctrl_c_in_a_sweep_keeps_the_runs_that_finished(tmp_path, monkeypatch, capsys):
    """Ctrl-C during a sweep's second run: exit 130, "interrupted", and --json holds the first
    run, marked interrupted."""
    calls = []

    def first_then_interrupted(*args, **kwargs):
        calls.append(kwargs["params"])
        if len(calls) > 1:
            raise KeyboardInterrupt
        return _canned()
    monkeypatch.setattr("epfabric.sim.cli.run.run_kernel", first_then_interrupted)
    out = tmp_path / "r.json"
    assert main(["run", "alltoall", *SMALL, "--seed", "0,1", "--json", str(out)]) == 130
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["epfabric run alltoall: interrupted after 1 of 2 runs; --json holds them",
                   "epfabric run: interrupted"]
    doc = json.loads(out.read_text())
    assert doc["interrupted"] and doc["values"] == [0] and len(doc["results"]) == 1


def test_a_comparison_with_ubep_inc_runs_every_system_on_one_machine(tmp_path, capsys):
    """--system cann,ubep,ubep-inc: every run on the machine whose switches multicast and
    reduce (one build), and CANN's and UBEP's runs on it are their runs on their own machine
    (ep_window 0), cycle for cycle. At the small dispatch/combine case (BS 4, top-2, 4
    experts): both machines are the ones tests/sw/test_dispatch.py, test_combine.py and
    test_buffer*.py build."""
    from epfabric.sim.backends.machine import backend
    from epfabric.sw.kernels import run_kernel
    out = tmp_path / "r.json"
    shape = ["--batch", "4", "--topk", "2", "--experts", "4"]
    assert main(["run", "dispatch", *SMALL, *shape, "--backend", "pysim",
                 "--system", "cann,ubep,ubep-inc", "--json", str(out)]) == 0
    assert ("dispatch outputs: OUT payloads identical across cann, ubep, ubep-inc on all 2 "
            "ranks") in capsys.readouterr().out.splitlines()
    runs = [r["runs"][0] for r in json.loads(out.read_text())["results"]]
    assert all(r["config"] == runs[2]["config"] for r in runs) and runs[2]["config"]["ep_window"]
    for system, shared in zip(("cann", "ubep"), runs):
        alone = run_kernel("dispatch", backend("pysim"), preset="tiny",
                           topology=("superpod", 2, 1, 1), aivs=2,
                           params={"batch": 4, "topk": 2, "experts": 4, "system": system})
        assert alone.runs[0].config.ep_window == 0 and alone.correct
        assert ((alone.runs[0].cycles, alone.runs[0].check["phases"])
                == (shared["cycles"], shared["phases"])), system


def test_a_combine_sweep_compares_its_dispatchs_out_and_its_y(capsys):
    """A combine's runs carry their dispatch's OUT digests too: both lines are printed (on
    the ``ubep-inc`` machine of the small case, test_combine.py's)."""
    shape = ["--batch", "4", "--topk", "2", "--experts", "4"]
    assert main(["run", "combine", *SMALL, *shape, "--backend", "pysim",
                 "--system", "cann,ubep,ubep-inc"]) == 0
    lines = capsys.readouterr().out.splitlines()
    for what, kernel in (("OUT", "dispatch"), ("y", "combine")):
        assert (f"{kernel} outputs: {what} payloads identical across cann, ubep, ubep-inc on "
                f"all 2 ranks") in lines
