"""Shared test helpers (one place; see STYLE.md 6)."""

from epfabric.sim.harness import ComponentSpec, run

__all__ = ["run_on_all", "ComponentSpec", "run"]


def run_on_all(spec, intent, args, simulators, **kw):
    """Run ``intent`` on each simulator; return ``{sim: (result, cycles)}``."""
    return {sim: run(spec, intent, args, simulator=sim, **kw) for sim in simulators}
