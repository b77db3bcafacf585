"""Hardware tops from configurations: where a preset name becomes cycles and integers.

Backends construct a machine's top in another process from a JSON
``ComponentSpec`` (``factory`` + parameters); the factories named by
:attr:`MachineConfig.factory <epfabric.sw.config.MachineConfig.factory>` and
:attr:`AgrsConfig.factory <epfabric.sw.config.AgrsConfig.factory>` live
here. Hardware (``epfabric.hw``) never resolves a preset: it receives a
:class:`~epfabric.hw.topology.FabricTiming` in cycles.
"""

from ..hw.agrs_system import AgrsSystem
from ..hw.system import System
from .config import AgrsConfig, MachineConfig
from .presets import get_preset

__all__ = ["aiv_system", "agrs_system"]


def aiv_system(*, shared=None, **fields):
    """:class:`~epfabric.hw.system.System` of a :class:`MachineConfig` given as a dict; ``shared``
    as for the system (Verilog with one module per repeated block)."""
    return System(**_system_params(fields), shared=shared)


def _aiv_system_signature(**fields):
    """The :meth:`~epfabric.hw.system.System.signature_for` of :func:`aiv_system`'s system."""
    return System.signature_for(**_system_params(fields))


#: what a testbench of the system's Verilog drives, without building it
aiv_system.signature_for = _aiv_system_signature


def _system_params(fields):
    """The :class:`~epfabric.hw.system.System` parameters of a machine configuration's dict."""
    cfg = MachineConfig(**{**fields, "topology": tuple(fields["topology"])})
    params = cfg.to_dict()
    preset = get_preset(params.pop("preset"))
    topology = tuple(params.pop("topology"))
    if cfg.has_nic:
        for k in ("nic_mode", "nic_tmax", "inc_slots"):
            del params[k]
        regions = cfg.nic_regions
        params.update(nic={"mode": cfg.nic_mode, "tmax": cfg.nic_tmax, "xg_base": regions["xg"],
                           "z_base": regions["z"], "rsin_base": regions["rsin"]},
                      inc_slots=cfg.inc_slots, cube_cycles=preset.cube_cycles())
    window = params.pop("ep_window", 0)
    dtype = params.pop("ep_dtype", "int16")
    if window:
        params.update(ep_inc={"window": window, **({"dtype": dtype} if dtype != "int16" else {})})
    if params.pop("fp", False):
        params["fp"] = {k: params.pop(k) for k in cfg.fp_params}
    return dict(timing=preset.fabric_timing(topology[0]), topology=topology, **params)


def agrs_system(**fields):
    """:class:`~epfabric.hw.agrs_system.AgrsSystem` of an :class:`AgrsConfig` given as a dict."""
    return AgrsSystem(**_agrs_params(fields))


def _agrs_system_signature(**fields):
    """The :meth:`~epfabric.hw.agrs_system.AgrsSystem.signature_for` of :func:`agrs_system`'s
    system."""
    return AgrsSystem.signature_for(**_agrs_params(fields))


#: what a testbench of the system's Verilog drives, without building it
agrs_system.signature_for = _agrs_system_signature


def _agrs_params(fields):
    """The :class:`~epfabric.hw.agrs_system.AgrsSystem` parameters of a configuration's dict."""
    params = AgrsConfig(**fields).to_dict()
    preset = get_preset(params.pop("preset"))
    return dict(timing=preset.fabric_timing("star"), **params)
