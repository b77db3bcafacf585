"""``epfabric verilog`` (sim/flows/export.py) and the component registry: every component converts and lints."""

import re

import pytest

from epfabric.sim.cli import main
from epfabric.sim.cli.common import parse_params
from epfabric.sim.flows.export import write_verilog
from epfabric.sim.flows.lint import WAIVERS, lint_file
from epfabric.sim.flows.registry import build_component, registered

from utils import require_simulator


def test_vector_unit_is_registered():
    assert "vector_unit" in registered()


@pytest.mark.parametrize("name", list(registered()))
def test_every_component_converts_and_lints(name, tmp_path):
    assert main(["verilog", name, "-o", str(tmp_path)]) == 0
    path = tmp_path / f"{name}.v"
    assert f"module {name}(" in path.read_text()
    require_simulator("verilator")
    ok, msg = lint_file(path)
    assert ok, msg


def test_param_override(tmp_path):
    """--param reaches the constructor: fewer lanes give a narrower request port."""
    import re
    widths = {}
    for lanes in (4, 8):
        out = tmp_path / str(lanes)
        assert main(["verilog", "vector_unit", "--param", f"lanes={lanes}", "-o", str(out)]) == 0
        text = (out / "vector_unit.v").read_text()
        widths[lanes] = int(re.search(r"input \[(\d+):0\] i_stream__payload;", text).group(1)) + 1
    # a and b each carry `lanes` 16-bit elements
    assert widths[8] - widths[4] == 2 * 4 * 16


def test_unknown_component(capsys, tmp_path):
    assert main(["verilog", "nope", "-o", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0
    assert "unknown component 'nope'" in err and "vector_unit" in err


def test_unknown_parameter(capsys, tmp_path):
    assert main(["verilog", "vector_unit", "--param", "lanez=4", "-o", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "unknown parameter(s) lanez for vector_unit" in err and "lanes=8" in err


def test_bad_parameter_value(capsys, tmp_path):
    assert main(["verilog", "vector_unit", "--param", "lanes=0", "-o", str(tmp_path)]) == 2
    assert "lanes must be in [1, 256], not 0" in capsys.readouterr().err


def test_output_that_is_a_file_is_refused_before_anything_is_written(capsys, tmp_path):
    afile = tmp_path / "afile"
    afile.write_text("")
    for out, message in ((afile, f"--output {str(afile)!r} is a file, not a folder"),
                         (afile / "sub", f"--output {str(afile / 'sub')!r}: {str(afile)!r} is a file")):
        assert main(["verilog", "hbm", "-o", str(out)]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("epfabric verilog: error: ") and "\n" not in err and message in err


def test_all_into_a_folder_that_cannot_be_made_is_one_line(capsys, tmp_path, monkeypatch):
    """``--all -o`` under a regular file, a name the file system refuses, or no name: refused
    before a component is built."""
    import epfabric.sim.cli.verilog as command
    monkeypatch.setattr(command, "build_component", lambda *a: pytest.fail("built"))
    afile = tmp_path / "afile"
    afile.write_text("")
    too_long = tmp_path / ("x" * 300) / "v"
    for out, message in ((afile / "sub" / "v", f"{str(afile)!r} is a file, not a folder"),
                         (too_long, "cannot create this folder (File name too long)"),
                         ("", "--output must name a folder, not ''")):
        assert main(["verilog", "--all", "-o", str(out)]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("epfabric verilog: error: ") and "\n" not in err and message in err
    assert [p.name for p in tmp_path.iterdir()] == ["afile"]


def test_parse_params():
    assert parse_params(["a=3", "b=x", "c=[1, 2]"]) == {"a": 3, "b": "x", "c": [1, 2]}
    with pytest.raises(ValueError, match="--param must look like key=value, not 'oops'"):
        parse_params(["oops"])
    with pytest.raises(ValueError, match="unknown component"):
        build_component("nope")


def test_write_verilog_keeps_the_reset(tmp_path):
    """Export Verilog (FPGA flows) keeps the synchronous reset that simulation Verilog drops."""
    path = write_verilog("vector_unit", {"lanes": 4}, tmp_path / "out")
    assert path == tmp_path / "out" / "vector_unit.v"
    text = path.read_text()
    assert "module vector_unit(" in text and "input rst;" in text
    assert WAIVERS.name == "lint.vlt" and WAIVERS.exists()


def test_param_with_all_is_refused(capsys, tmp_path):
    assert main(["verilog", "--all", "--param", "lanes=4", "-o", str(tmp_path)]) == 2
    assert "--param cannot be combined with --all" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


def test_simulation_verilog_is_cached_on_disk_per_design_and_per_module(tmp_path, monkeypatch):
    """A fresh process reads the design's Verilog from disk; another shape reuses the shared modules."""
    from epfabric.sim.backends import ComponentSpec
    from epfabric.sim.backends import verilog as simulation
    from utils import system_spec
    monkeypatch.setenv("EPFABRIC_BUILD_DIR", str(tmp_path))
    monkeypatch.setattr(simulation, "_VERILOG", {})
    two = system_spec(("superpod", 2, 1, 1), 2)
    text = simulation.verilog_of(two, "verilator")
    cached = sorted(p.name.split("-")[0] for p in (tmp_path / "verilog").glob("*.v"))
    # the design, and the die, core, links and the die switch as modules
    assert cached.count("design") == 1 and cached.count("module") >= 4
    monkeypatch.setattr(simulation, "_VERILOG", {})         # as in a new process
    monkeypatch.setattr(ComponentSpec, "build", lambda self: pytest.fail("Amaranth ran again"))
    assert simulation.verilog_of(two, "verilator") == text
    monkeypatch.undo()
    monkeypatch.setenv("EPFABRIC_BUILD_DIR", str(tmp_path))
    monkeypatch.setattr(simulation, "_VERILOG", {})
    # 4 dies: the flit is wider (ranks), so a new top, die, links and switches,
    # but the core (its ports do not depend on ranks) is not converted again
    four = system_spec(("superpod", 2, 2, 1), 2)
    before = set((tmp_path / "verilog").glob("module-*.v"))
    parts = set(re.findall(r"^module (epf_\w+)\(", simulation.verilog_of(four, "verilator"), re.M))
    new = set((tmp_path / "verilog").glob("module-*.v")) - before
    assert "epf_aiv" in parts and len(new) == len(parts) - 1
    # a different source is a different key
    path = simulation._cache_path("design", "x")
    monkeypatch.setattr(simulation, "source_hash", lambda: "other")
    assert simulation._cache_path("design", "x") != path
