"""``epfabric presets`` (sim/cli/presets.py), and ``--preset FILE.toml`` on ``epfabric run``."""

import json
import sys

import pytest

from epfabric.sim.cli import main
from epfabric.sw.kernels import pingpong
from epfabric.sw.preset_file import read_preset
from epfabric.sw.presets import PRESETS

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib


def test_presets_lists_every_built_in_machine(capsys):
    assert main(["presets"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["preset", "machine", "models"]
    assert [line.split()[0] for line in lines[1:]] == list(PRESETS)
    assert "superpod 2x8x16, 48 AIVs/die, 392 GB/s, 218/929/2500 ns" in lines[1]


def test_show_prints_a_machine_file_that_reads_back_equal(tmp_path, capsys):
    assert main(["presets", "--show", "cm384"]) == 0
    text = capsys.readouterr().out
    assert tomllib.loads(text)["latency_intra_ns"] == 218.0
    assert "# one-way latency of a 512 B store to the other die" in text
    assert '# To change a few fields only, keep those lines and add: based_on = "cm384"' in text
    out = tmp_path / "cm384.toml"
    assert main(["presets", "--show", "cm384", "-o", str(out)]) == 0
    assert out.read_text() == text and capsys.readouterr().out == f"wrote {out}\n"
    assert read_preset(out).replace(name="cm384") == PRESETS["cm384"]


def test_show_a_file_checks_it_and_prints_what_it_resolves_to(tmp_path, capsys):
    path = tmp_path / "slow.toml"
    path.write_text('based_on = "tiny"\nlatency_intra_ns = "11 ns"\n')
    assert main(["presets", "--show", str(path)]) == 0
    text = capsys.readouterr().out
    assert text.startswith(f"# {read_preset(path).name}: tiny\n")
    assert '\ndescription = "tiny with latency_intra_ns = 11.0"\n' in text
    assert "\nlatency_intra_ns = 11.0\n" in text and "based_on" not in text


@pytest.mark.parametrize("argv, message", [
    (["presets", "-o", "x.toml"], "--output needs --show NAME"),
    (["presets", "--show", "cm38"], "unknown preset 'cm38'; valid presets: cm384, "),
    (["presets", "--show", "cm384", "-o", "/missing-folder/x.toml"],
     "--output '/missing-folder/x.toml': folder '/missing-folder' does not exist"),
])
def test_presets_bad_input_is_one_line(argv, message, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("epfabric presets: error: ") and message in err and "\n" not in err


def test_run_takes_a_machine_file(tmp_path, capsys):
    """tiny's machine file with one line changed (8 -> 11 ns within the NPU): pingpong
    measures the new latency, and the run is 3 cycles longer per crossing of the NPU than
    tiny's 141 (tests/sw/test_pingpong.py): a ping and a pong a round, and the ack of the last
    pong its fence waits for. The JSON names the file's reference."""
    path = tmp_path / "tiny.toml"
    assert main(["presets", "--show", "tiny", "-o", str(path)]) == 0
    path.write_text(path.read_text().replace("latency_intra_ns = 8.0", "latency_intra_ns = 11"))
    out = tmp_path / "run.json"
    assert main(["run", "pingpong", "--preset", str(path), "--topology", "superpod:2,1,1",
                 "--aivs", "2", "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["preset"] == read_preset(path).name and result["correct"]
    (run,) = result["runs"]
    assert run["latency_ns"] == {"intra": 11 + run["core_overhead_ns"]}
    assert run["cycles"] == 141 + (2 * pingpong.ROUNDS + 1) * (11 - 8)
    assert "correct" in capsys.readouterr().out


def test_run_refuses_a_bad_machine_file_in_one_line(tmp_path, capsys, no_simulation):
    path = tmp_path / "bad.toml"
    path.write_text('based_on = "cm384"\nlatency_intra_ns = -218\n')
    assert main(["run", "pingpong", "--preset", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (f"epfabric run: error: preset file {path}: latency_intra_ns must be in "
                   f"(0, 100000] ns, not -218.0")
