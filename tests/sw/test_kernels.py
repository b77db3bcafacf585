"""The kernel protocol and registry (sw/kernels/__init__.py): every kernel runs through ``epfabric run``."""

import json

import pytest

from epfabric.sim.backends.machine import backend
from epfabric.sim.cli import main
from epfabric.sw.assembler import Program
from epfabric.sw.isa import address
from epfabric.sw.kernels import KERNELS, Kernel, register, run_kernel


class Stamp(Kernel):
    """Throw-away kernel: every core writes (its rank, core id, a parameter) into its own block."""

    name = "stamp_for_test"
    description = "every core stamps its own block"
    params = {"value": 7}
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
    assert main(["run", stamp.name, "--preset", "tiny", "--param", "value=9",
                 "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["kernel"] == stamp.name and result["correct"] and result["params"] == {"value": 9}
    assert result["runs"][0]["config"]["hbm_blocks"] == 4          # the kernel sized its machine
    assert "correct" in capsys.readouterr().out


def test_the_checker_can_fail(stamp):
    result, _ = run_kernel(stamp, backend("pysim"), preset="tiny", params={"value": 3})
    assert result["correct"]
    broken = Stamp()
    broken.check = lambda m, r, inputs: Stamp.check(broken, m, r, inputs + 1)
    result, _ = run_kernel(broken, backend("pysim"), preset="tiny", params={"value": 3})
    assert not result["correct"] and len(result["problems"]) == 4


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
