"""Machines described in a file (sw/preset_file.py): a preset as TOML, read back field by field."""

import pytest

from epfabric.hw.validate import UserError
from epfabric.sim.backends.machine import backend
from epfabric.sw import preset_file
from epfabric.sw.kernels import pingpong, run_kernel
from epfabric.sw.preset_file import digest, pinned, preset_toml, read_preset
from epfabric.sw.presets import PRESETS, get_preset


def machine_file(tmp_path, text, name="machine.toml"):
    path = tmp_path / name
    path.write_text(text)
    return path


@pytest.mark.parametrize("name", list(PRESETS))
def test_every_built_in_preset_round_trips(name, tmp_path):
    """``epfabric presets --show NAME`` written to a file reads back as the same machine, named
    by its reference ``/abs/path.toml#DIGEST``."""
    built_in = PRESETS[name]
    path = machine_file(tmp_path, preset_toml(built_in))
    read = read_preset(path)
    assert read.name == f"{path.resolve()}#{digest(built_in)}"
    assert read.replace(name=name) == built_in
    assert get_preset(read.name) is read and pinned(str(path)) == read.name


def test_based_on_a_preset_changes_only_the_fields_given(tmp_path):
    path = machine_file(tmp_path, 'based_on = "cm384"\nlatency_intra_ns = "300 ns"\n'
                                  'send_window_bytes = 4096\n')
    read = read_preset(path)
    assert read.replace(name="cm384", description="") == PRESETS["cm384"].replace(
        latency_intra_ns=300.0, send_window_bytes=4096, description="")
    assert read.description == "cm384 with latency_intra_ns = 300.0, send_window_bytes = 4096"
    assert read.latency_cycles()["intra"] == 300


def test_one_field_changed_from_cm384_shows_in_the_cycles(tmp_path):
    """cm384 with a 20 ns intra-NPU latency (218 ns built in): pingpong's round trips,
    measured from the MARK trace, take 20 ns each way beyond the cores' own 5 cycles."""
    path = machine_file(tmp_path, 'based_on = "cm384"\nlatency_intra_ns = 20\n')
    result = run_kernel("pingpong", backend("pysim"), preset=str(path),
                        topology=("superpod", 2, 1, 1), aivs=2, max_cycles=2000)
    assert result.correct, result.problems
    assert result.preset == read_preset(path).name
    marks = {t["event"]: t["cycle"] for t in result.reports[0].marks(rank=0, core=0)}

    def one_way(k):
        seqs = [k * pingpong.ROUNDS + i + 1 for i in range(pingpong.ROUNDS)]
        return sum(marks[pingpong.END + s] - marks[pingpong.START + s] for s in seqs) / len(
            seqs) / 2
    assert (one_way(0), one_way(1)) == (5, 5 + 20)          # cycles (cm384: 1 ns a cycle)


@pytest.mark.parametrize("text, message", [
    ('based_on = "cm384"\nlatency_intra_ns = "218 us"\n',
     "latency_intra_ns is in ns, not us: '218 us'"),
    ('based_on = "cm384"\nbandwidth_gbytes_s = "392 Gb/s"\n',
     "bandwidth_gbytes_s is in GB/s, not Gb/s"),
    ('based_on = "cm384"\nlatency_one_hop_ns = -5\n',
     "latency_one_hop_ns must be in (0, 100000] ns, not -5.0"),
    ('based_on = "cm384"\nlatency_one_hop_ns = 0\n',
     "latency_one_hop_ns must be in (0, 100000] ns, not 0.0"),
    ('based_on = "cm384"\nlatency_intra_ns = nan\n', "latency_intra_ns must be a finite number"),
    ('based_on = "cm384"\nlatency_intra = 200\n',
     "unknown field 'latency_intra'; did you mean 'latency_intra_ns'?"),
    ('based_on = "cm384"\nlatency_intra_ns = \n', "not valid TOML: Invalid value (at line 2"),
    ('based_on = "cm385"\n', "based_on must be a built-in preset (cm384, "),
    ('based_on = "cm384"\naivs_per_die = 2.5\n', "aivs_per_die takes an integer, in [1, 256]"),
    ('based_on = "cm384"\nlatency_one_hop_ns = "none"\n', "latency_one_hop_ns cannot be none"),
    ('based_on = "cm384"\nsyncall = "medium"\n', "syncall must be one of soft, hard, not 'medium'"),
    ('based_on = "cm384"\ncontrol_bytes = 1024\n', "control_bytes must be in [1, 512], not 1024"),
    ('latency_one_hop_ns = 5\n', "topology is required"),
    ('name = "x"\n', "name: a machine file is named by its path"),
])
def test_a_bad_file_is_one_line_naming_the_file_and_the_field(text, message, tmp_path):
    path = machine_file(tmp_path, text)
    with pytest.raises(UserError) as info:
        read_preset(path)
    assert str(info.value).startswith(f"preset file {path}: {message}")
    assert "\n" not in str(info.value)


def test_a_missing_or_unreadable_file_is_one_line(tmp_path):
    with pytest.raises(UserError, match=r"^preset file .*missing\.toml: cannot read it \(No such"):
        get_preset(str(tmp_path / "missing.toml"))
    (tmp_path / "binary.toml").write_bytes(b"\xff\xfe")
    with pytest.raises(UserError, match=r"binary\.toml: not UTF-8 text$"):
        read_preset(tmp_path / "binary.toml")
    with pytest.raises(UserError, match=r"^preset file .*: a machine file's name ends in \.toml$"):
        read_preset(tmp_path)
    with pytest.raises(UserError, match=r"unknown preset 'cm38'; valid presets: cm384, .* or a "
                                        r"machine file NAME\.toml"):
        get_preset("cm38")


def test_a_reference_refuses_a_file_changed_since(tmp_path, monkeypatch):
    """Another process (a sweep's worker) resolves the reference by reading the file again:
    a file edited since is refused, not taken for the machine the reference names."""
    path = machine_file(tmp_path, 'based_on = "tiny"\n')
    ref = read_preset(path).name
    path.write_text('based_on = "tiny"\nlatency_intra_ns = 9\n')
    monkeypatch.setattr(preset_file, "_LOADED", {})              # a fresh process
    with pytest.raises(UserError, match=rf"changed since it was read: its values' digest is "
                                        rf"[0-9a-f]{{12}}, not {ref[-12:]}$"):
        get_preset(ref)


def test_a_changed_preset_saved_as_a_file_is_a_named_preset(tmp_path):
    """A changed copy of a built-in preset, saved: a reference a machine configuration takes
    (it refuses the changed object), equal to the copy, one file for equal values."""
    from epfabric.sw.config import MachineConfig
    from epfabric.sw.preset_file import saved_preset
    changed = PRESETS["tiny"].replace(send_buffers=2)
    with pytest.raises(UserError, match="not a modified 'tiny'"):
        MachineConfig(preset=changed)
    saved = saved_preset(changed, tmp_path)
    assert saved.replace(name="tiny") == changed
    assert MachineConfig(preset=saved.name).preset == saved.name
    assert saved_preset(changed, tmp_path).name == saved.name
    assert len(list(tmp_path.glob("*.toml"))) == 1
