"""Verilog for simulation: what Icarus and Verilator compile.

Differs from ``epfabric verilog`` (FPGA flows) in two ways, both measured to
matter for Verilator's speed and both invisible in results: the ``sync``
domain is reset-less for Verilator, and tops that repeat a block define it
once (``hierarchical_verilog``). See :func:`verilog_of`.
"""

import sys
import time

from ..output import PROGRESS_AFTER_S, progress

__all__ = ["verilog_of", "has_reset", "TOPLEVEL"]

#: Name of the top module in simulation Verilog.
TOPLEVEL = "top"

# Amaranth's simulator and Verilog back end recurse over expression trees; wide
# designs exceed Python's default limit.
sys.setrecursionlimit(max(sys.getrecursionlimit(), 20000))

_VERILOG = {}


def verilog_of(spec, simulator="verilator"):
    """Simulation Verilog of ``spec``'s component for ``simulator``, top module ``top``.

    Memoised per process. For Verilator the ``sync`` domain is *reset-less*:
    every register starts at its init value through a Verilog initialiser, as
    in Amaranth's simulator, and there is no ``rst`` port. With a ``rst``
    input, the next-state logic of every register reads a top-level input and
    Verilator re-evaluates all of it on every ``eval()`` (its
    input-combinational region); measured on the 4-die machine, that was
    most of the run time. Icarus keeps the synchronous reset and the bench
    pulses it at start: Icarus does not run ``always @*`` blocks at time 0,
    and the reset's edges are what first evaluates them. Register values are
    the same either way (reset values are the init values); the
    cross-simulator tests check cycles and results are identical.
    ``epfabric verilog`` (for FPGA flows) keeps the reset.
    """
    from amaranth.back import verilog
    from amaranth.hdl import ClockDomain
    reset_less = not has_reset(simulator)
    key = (spec.to_json(), reset_less)
    if key not in _VERILOG:
        t0 = time.monotonic()
        kw = {"missing_domain": lambda name: ClockDomain(name, reset_less=True)} if reset_less else {}
        top, parts = spec.build(), {}
        if hasattr(top, "hierarchical_verilog"):
            # Repeated blocks as one shared module (e.g. System's dies): the
            # text, and the Verilator C++ to compile, no longer grow per copy.
            top, parts = top.hierarchical_verilog(reset=not reset_less)
        texts = [verilog.convert(top, name=TOPLEVEL, emit_src=False, **kw)]
        texts += [verilog.convert(part, name=name, emit_src=False, **kw) for name, part in parts.items()]
        _VERILOG[key] = "\n".join(texts)
        dt = time.monotonic() - t0
        if dt > PROGRESS_AFTER_S:
            progress(f"Verilog of {spec.factory.rpartition(':')[2]}: "
                      f"{len(_VERILOG[key]) / 1e6:.1f} MB in {dt:.0f} s")
    return _VERILOG[key]


def has_reset(simulator):
    """Whether ``simulator``'s Verilog has a ``rst`` port (see :func:`verilog_of`)."""
    return simulator != "verilator"
