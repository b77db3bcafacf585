"""Verilog of a registered component, for FPGA flows (``epfabric verilog``).

Unlike simulation Verilog (:mod:`epfabric.sim.backends.verilog`) this keeps
the synchronous reset and converts the design as it is.
"""

from pathlib import Path

from .registry import build_component

__all__ = ["write_verilog"]


def write_verilog(name, params, out_dir, component=None):
    """Write ``<out_dir>/<name>.v`` (top module ``name``) and return its path; ``component``:
    the one ``build_component(name, params)`` gives, if the caller built it already."""
    from amaranth.back import verilog

    if component is None:
        component = build_component(name, params)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{name}.v"
    path.write_text(verilog.convert(component, name=name, emit_src=False))
    return path
