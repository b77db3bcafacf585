"""Shared test helpers (one place; see STYLE.md 6)."""

from epfabric.sim.harness import ComponentSpec, run

__all__ = ["run_on_all", "ComponentSpec", "run", "VECTOR_SPEC"]

# One vector-unit configuration shared by the tests that need "a component":
# every distinct design costs a Verilator build (~15 s on 2 cores).
VECTOR_SPEC = ComponentSpec("epfabric.hw.vector_unit:VectorUnit",
                            {"lanes": 8, "width": 16, "max_len": 64})


def run_on_all(spec, intent, args, simulators, **kw):
    """Run ``intent`` on each simulator; return ``{sim: (result, cycles)}``."""
    return {sim: run(spec, intent, args, simulator=sim, **kw) for sim in simulators}
