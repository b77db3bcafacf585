"""The kernel protocol and registry (sw/kernels/__init__.py): every kernel runs through ``epfabric run``."""

import json

import pytest

from epfabric.sim.backends.machine import backend
from epfabric.sim.cli import main
from epfabric.sw.assembler import Program
from epfabric.sw.isa import address
from epfabric.sw.kernels import KERNELS, Kernel, register, run_kernel
from epfabric.sw.kernels.syncall import program as syncall_program
from epfabric.sw.machine import Machine
from epfabric.sw.param import Param


class Stamp(Kernel):
    """Throw-away kernel: every core writes (its rank, core id, a parameter) into its own block."""

    name = "stamp_for_test"
    description = "every core stamps its own block"
    params = (Param("value", 7, "the word every core stamps", int),)
    default_aivs = (2,)

    def sizes(self, config):
        return {"hbm_blocks": 4}

    def load(self, machine, params):
        for rank in range(machine.ranks):
            for core in range(machine.config.aivs_per_die):
                p = Program()
                p.li(1, address(rank, 1 + core))
                p.csrr(2, "rank")
                p.sw(2, 1, 0)
                p.csrr(2, "core_id")
                p.sw(2, 1, 4)
                p.li(2, params["value"])
                p.sw(2, 1, 8)
                p.fence()
                p.halt()
                machine.load_program(rank, core, p)
        return params["value"]

    def check(self, machine, report, inputs):
        problems = []
        for rank in range(machine.ranks):
            for core in range(machine.config.aivs_per_die):
                got = machine.read_mem(rank, address(0, 1 + core), 3)
                if got != [rank, core, inputs]:
                    problems.append(f"rank {rank} core {core}: {got}")
        return {"correct": not problems, "problems": problems}


@pytest.fixture
def stamp():
    kernel = register(Stamp())
    yield kernel
    del KERNELS[kernel.name]


def test_registry_has_every_kernel():
    assert {"pingpong", "syncall", "alltoall", "agrs"} <= set(KERNELS)
    for name, kernel in KERNELS.items():
        assert kernel.name == name and kernel.description


def test_a_new_kernel_runs_through_the_cli_without_cli_code(stamp, tmp_path, capsys):
    out = tmp_path / "r.json"
    assert main(["run", stamp.name, "--preset", "tiny", "--param", "value=9", "--max-cycles", "2000",
                 "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["kernel"] == stamp.name and result["correct"] and result["params"] == {"value": 9}
    assert result["runs"][0]["config"]["hbm_blocks"] == 4          # the kernel sized its machine
    assert "correct" in capsys.readouterr().out


def test_the_checker_can_fail(stamp):
    result = run_kernel(stamp, backend("pysim"), preset="tiny", params={"value": 3},
                        max_cycles=2000)
    assert result.correct
    broken = Stamp()
    broken.check = lambda m, r, inputs: Stamp.check(broken, m, r, inputs + 1)
    result = run_kernel(broken, backend("pysim"), preset="tiny", params={"value": 3},
                        max_cycles=2000)
    assert not result.correct and len(result.problems) == 4


@pytest.mark.parametrize("epochs, exc, message", [
    (0, ValueError, r"epochs must be in \[1, 99\], not 0"),       # reported `correct`, checking nothing
    (-1, ValueError, r"epochs must be in \[1, 99\], not -1"),
    (100, ValueError, r"epochs must be in \[1, 99\], not 100"),   # ENTER + 100 = LEAVE: marks collide
    (1.5, TypeError, r"epochs must be an integer, not 1.5"),
])
def test_syncall_epochs_are_checked_before_loading(epochs, exc, message):
    syncall = KERNELS["syncall"]
    m = Machine(backend=backend("pysim"), config=syncall.configs("tiny", aivs=1)[0])
    with pytest.raises(exc, match=message):
        syncall.load(m, {"epochs": epochs})
    assert not m._programs
    with pytest.raises(exc, match=message):
        syncall.resolve_params({"epochs": epochs})


def test_syncall_grows_its_memories_to_fit_the_epochs():
    """Many barriers need a longer program and more trace entries: sized, never truncated."""
    syncall = KERNELS["syncall"]
    default = syncall.configs("cm384", aivs=4, params={"epochs": 2})[0]
    many = syncall.configs("cm384", aivs=4, params={"epochs": 40})[0]
    assert (default.imem_depth, default.trace_depth) == (64, 64)
    assert many.imem_depth >= len(syncall_program(many, 0, 0, 40).assemble())
    assert many.trace_depth >= 2 * 40 * many.cores


@pytest.mark.parametrize("kernel, params, exc, message", [
    ("alltoall", {"seed": -1}, ValueError, "seed must be >= 0, not -1"),
    ("dispatch", {"seed": "x"}, TypeError, "seed must be an integer, not 'x'"),
    ("agrs", {"concurrent": "yes"}, TypeError, "concurrent must be a bool, not 'yes'"),
    ("agrs", {"barrier": 1}, TypeError, "barrier must be a bool, not 1"),
    ("agrs", {"counts": [1, 2]}, ValueError, r"counts must be 4 row counts in \[0, 4\], not \[1, 2\]"),
    ("agrs", {"counts": [1, 2, 3, 9]}, ValueError, r"counts\[3\] must be in \[0, 4\], not 9"),
])
def test_kernel_parameters_are_checked_before_a_run(kernel, params, exc, message):
    """Found by configs() (what `epfabric run` calls in prepare), not by numpy mid-run."""
    with pytest.raises(exc, match=message):
        KERNELS[kernel].configs(KERNELS[kernel].default_preset, params=params)


def test_unknown_parameter_and_bad_registration(stamp, capsys):
    assert main(["run", stamp.name, "--param", "colour=1"]) == 2
    err = capsys.readouterr().err.strip()
    assert "unknown parameter(s) colour for kernel stamp_for_test; valid: value=7" in err
    assert "\n" not in err
    with pytest.raises(ValueError, match="new and non-empty"):
        register(Stamp())
    with pytest.raises(TypeError, match="must be a Kernel"):
        register(object())
    with pytest.raises(ValueError, match="unknown kernel 'nope'"):
        run_kernel("nope", backend("pysim"))


def test_a_changed_preset_object_is_refused_not_run_as_the_named_one():
    """``run_kernel`` with a changed copy of a preset refuses it before anything runs (its
    name alone would run the unchanged machine); the named preset object itself is taken."""
    from epfabric.hw.validate import UserError
    from epfabric.sw.presets import PRESETS
    changed = PRESETS["tiny"].replace(cumsum_ratio=2.0)
    with pytest.raises(UserError, match=r"not a modified 'tiny' \(save it as a machine file"):
        run_kernel("pingpong", backend("pysim"), preset=changed)
    result = run_kernel("pingpong", backend("pysim"), preset=PRESETS["tiny"])
    assert result.correct and result.preset == "tiny"
