"""The fp unit through the machine: MachineConfig ``fp`` -> sw/tops -> System -> Die -> cores."""

import pytest
from amaranth.hdl import Fragment

from epfabric.hw.validate import UserError
from epfabric.sw.config import MachineConfig
from epfabric.sw.tops import _system_params, aiv_system


def test_default_machine_has_no_fp():
    cfg = MachineConfig()
    assert not any(k.startswith("fp") for k in cfg.to_dict())
    assert "fp" not in _system_params(cfg.to_dict())
    system = aiv_system(**cfg.to_dict())
    Fragment.get(system, None)              # built to be inspected
    assert not any(core.fp for die in system.dies for core in die.cores)


def test_fp_machine_builds_fp_cores():
    cfg = MachineConfig(fp=True, fp_lanes=2, fp_fused=True)
    d = cfg.to_dict()
    assert d["fp"] is True and d["fp_lanes"] == 2
    assert _system_params(d)["fp"] == {"fp_lanes": 2, "fp_latency": None,
                                       "fp_repeat_cycles": None, "fp_fused": True}
    system = aiv_system(**d)
    Fragment.get(system, None)
    cores = [core for die in system.dies for core in die.cores]
    assert cores and all(c.fp and c.fp_lanes == 2 and c.fp_fused for c in cores)


def test_fp_shape_without_fp_is_refused():
    with pytest.raises(UserError, match="need fp=True"):
        MachineConfig(fp_lanes=8)


def test_bad_fp_shape_names_the_field():
    with pytest.raises(UserError, match="fp_lanes"):
        MachineConfig(fp=True, fp_lanes=3)
