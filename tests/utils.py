"""Shared test helpers (one place; see docs/contributing.md "Style")."""

from epfabric.sim.backends import ComponentSpec, run

__all__ = ["require", "require_simulator", "kernel_cases", "run_on_all", "ComponentSpec", "run",
           "VECTOR_SPEC", "MACHINE", "machine",
           "system_spec", "TINY_TIMING", "tiny_timing"]

# One vector-unit configuration shared by the tests that need "a component":
# every distinct design costs a Verilator build (~15 s on 2 cores).
VECTOR_SPEC = ComponentSpec("epfabric.hw.vector_unit:VectorUnit",
                            {"lanes": 8, "width": 16, "max_len": 64})


def require(what, reason, *, optional=False):
    """Skip the test when ``reason`` (why ``what`` cannot run here) is set.

    Under ``EPFABRIC_REQUIRE_ALL_SIMULATORS=1`` (CI) the test fails instead,
    so a missing simulator or tool is never a silent pass — except for a tool
    docs/getting-started.md declares ``optional`` (GTKWave): CI does not install it. Every
    test that needs a tool goes through here; none calls ``pytest.skip`` itself.
    """
    import os

    import pytest

    if not reason:
        return
    if not optional and os.environ.get("EPFABRIC_REQUIRE_ALL_SIMULATORS") == "1":
        pytest.fail(f"{what} required (EPFABRIC_REQUIRE_ALL_SIMULATORS=1) but {reason}")
    pytest.skip(f"{what}: {reason}")


def require_dask():
    """:func:`require` for Dask distributed (the ``cluster`` extra: ``--scheduler``)."""
    import importlib.util
    require("dask distributed", None if importlib.util.find_spec("distributed")
            else "dask[distributed] is not installed (pip install 'epfabric[cluster]')")


def require_simulator(sim):
    """:func:`require` for simulator ``sim`` (pysim, icarus, verilator)."""
    from epfabric.sim.backends import missing_reason
    require(sim, missing_reason(sim))


def simulators(*names, slow=()):
    """Parameters of a ``simulator``/``hdl_simulator`` argument: ``names``, those in ``slow``
    marked ``slow`` (run by ``make test-slow``: their builds would push a cold ``make test``
    past 10 minutes, and another test cross-checks the same hardware on that simulator)."""
    import pytest
    return [pytest.param(n, marks=pytest.mark.slow) if n in slow else n for n in names]


def fast_simulator():
    """Verilator when present (a small case's build is shared by the tests), else Amaranth's."""
    from epfabric.sim.backends import missing_reason
    return "pysim" if missing_reason("verilator") else "verilator"


def machine_simulator():
    """The native backend when present (the UBEP experiments' 4-AIV machine is built for it:
    :func:`four_aiv_machine` runs share that build), else Amaranth's simulator."""
    from epfabric.sim.backends import missing_reason
    return "pysim" if missing_reason("native") else "native"


#: watchdog of the small dispatch/combine cases (each takes < 800 cycles): a hang fails in seconds
KERNEL_CASE_MAX_CYCLES = 4_000


def kernel_cases(kernel, small, shape):
    """``(pysim_run, outcome)`` of a kernel's small case, cached per process.

    ``pysim_run(system)`` is ``(machine, report, inputs)`` on Amaranth's
    simulator (one run per system, reused by every test that reads it);
    ``outcome(simulator, system)`` is ``(result, trace, counters)`` on any
    simulator (``result`` a :class:`~epfabric.sw.kernels.RunResult`), the pysim one derived
    from ``pysim_run``.
    """
    import functools

    from epfabric.sim.backends.machine import backend
    from epfabric.sw.kernels import RunResult, machine_run, run_kernel
    from epfabric.sw.machine import Machine

    @functools.lru_cache(maxsize=None)
    def pysim_run(system):
        params = kernel.resolve_params({**small, "system": system})
        config = kernel.configs(shape["preset"], shape["topology"], shape["aivs"], params)[0]
        m = Machine(backend=backend("pysim"), config=config)
        inputs = (kernel.load(m, params, max_cycles=KERNEL_CASE_MAX_CYCLES) if kernel.load_runs
                  else kernel.load(m, params))
        return m, m.run(KERNEL_CASE_MAX_CYCLES), inputs

    @functools.lru_cache(maxsize=None)
    def outcome(simulator, system="cann"):
        if simulator == "pysim":
            m, report, inputs = pysim_run(system)
            runs = [machine_run(kernel, m, report, inputs)]
            params = kernel.resolve_params({**small, "system": system})
            return (RunResult(kernel.name, shape["preset"], "pysim", params, runs,
                              kernel.combine_runs(runs)), report.trace, report.counters)
        result = run_kernel(kernel, backend(simulator),
                            params={**small, "system": system},
                            max_cycles=KERNEL_CASE_MAX_CYCLES, **shape)
        reports = result.reports
        return result, reports[0].trace, reports[0].counters

    return pysim_run, outcome


def larger_machine(kernel, params, shape, **sizes):
    """The machine ``kernel`` sizes for ``params`` on ``shape``, with ``sizes`` raised."""
    import dataclasses
    config = kernel.configs(shape["preset"], shape["topology"], shape["aivs"], params)[0]
    return dataclasses.replace(config, **sizes)


#: the UBEP experiments' test machine (tests/sim/test_ubep_runs.py): the tiny preset's two dies
#: of 4 AIVs, sized for every small dispatch case (up to BS 16 x top-8 over 10 experts, and the
#: GLM-shaped one, whose unrolled programs take 8 K instructions); one native build serves them
ENVELOPE_TINY = {"hbm_blocks": 1024, "ubuf_rows": 16, "imem_depth": 8192, "trace_depth": 128}


def four_aiv_machine(kernel, params):
    """The shared 2-die x 4-AIV tiny machine (:data:`ENVELOPE_TINY`), checked to hold ``params``."""
    shape = dict(preset="tiny", topology=("superpod", 2, 1, 1), aivs=4)
    return larger_machine(kernel, params, shape, **ENVELOPE_TINY)


def cm384_machine():
    """The flag tests' machine: two cm384 dies (a flag takes 218 ns to the other one) of 2 AIVs,
    sized for the small dispatch/combine case with 4-block tokens (with 2, a token's last
    block still arrives before the receiver reaches it); one native build serves every run
    on it (:func:`run_on_machine`)."""
    from epfabric.sw.kernels import KERNELS
    shape = dict(preset="cm384", topology=("superpod", 2, 1, 1), aivs=2)
    return larger_machine(KERNELS["combine"], {"batch": 4, "topk": 2, "experts": 4,
                                               "hidden_blocks": 4}, shape)


#: watchdog of the runs on :func:`cm384_machine` (each takes < 10,000 cycles)
CM384_MAX_CYCLES = 50_000


def run_on_machine(kernel, simulator, config, params, max_cycles=KERNEL_CASE_MAX_CYCLES):
    """One run of ``kernel`` at ``params`` on the machine ``config``; its figures
    (``{"cycles", **check}``: a :class:`~epfabric.sw.kernels.MachineRun`'s cycles and check).

    ``config`` may be larger than what the kernel sizes for ``params`` (asserted, not
    assumed): one Verilator build then serves several shapes.
    """
    from epfabric.sim.backends.machine import backend
    from epfabric.sw.machine import Machine
    params = kernel.resolve_params(params)
    need = kernel.configs(config.preset, config.topology, config.aivs_per_die, params)[0]
    for size in ("hbm_blocks", "ubuf_rows", "imem_depth", "trace_depth"):
        assert getattr(need, size) <= getattr(config, size), (size, need, config)
    m = Machine(backend=backend(simulator), config=config)
    inputs = (kernel.load(m, params, max_cycles=max_cycles) if kernel.load_runs
              else kernel.load(m, params))
    report = m.run(max_cycles)
    return {"cycles": report.cycles, **kernel.check(m, report, inputs)}


def run_on_all(spec, intent, args, simulators, **kw):
    """Run ``intent`` on each simulator; return ``{sim: (result, cycles)}``."""
    return {sim: run(spec, intent, args, simulator=sim, **kw) for sim in simulators}


# One small machine shared by the driver/kernel tests (2 dies of one NPU,
# 2 AIVs each, tiny preset): every distinct system is another Verilator build.
MACHINE = dict(topology=("superpod", 2, 1, 1), aivs_per_die=2, hbm_blocks=16, imem_depth=128)


def store_program(rank, values):
    """A core program that stores ``values`` to words ``0, 1, ...`` of region 3 of ``rank``
    (MARK ``10 + i`` after each), fences and halts."""
    from epfabric.sw.assembler import Program
    from epfabric.sw.isa import address
    p = Program()
    for i, v in enumerate(values):
        p.li(1, v)
        p.li(2, address(rank, 3, i))
        p.sw(1, 2, 0)
        p.mark(10 + i)
    p.fence()
    p.halt()
    return p


def machine(simulator="pysim", **overrides):
    """A :class:`~epfabric.sw.machine.Machine` of the shared test configuration."""
    from epfabric.sim.backends.machine import backend
    from epfabric.sw.machine import Machine
    return Machine("tiny", backend=backend(simulator), **{**MACHINE, **overrides})


def system_spec(topology, aivs=1, **fields):
    """ComponentSpec of the AIV system top (:func:`epfabric.sw.tops.aiv_system`) on the tiny preset."""
    params = {"preset": "tiny", "topology": list(topology), "aivs_per_die": aivs, "imem_depth": 32,
              "ubuf_rows": 2, "hbm_blocks": 8, "data_bytes": 32, "lanes": 4, "trace_depth": 16,
              **fields}
    return ComponentSpec("epfabric.sw.tops:aiv_system", params)


def tiny_timing(topology="superpod"):
    """The tiny preset's :class:`~epfabric.hw.topology.FabricTiming`."""
    from epfabric.sw.presets import get_preset
    return get_preset("tiny").fabric_timing(topology)


TINY_TIMING = None   # use tiny_timing(): presets are built lazily


# --- held-out validation rows (no simulation) ---------------------------------------------

#: fig10 (ranks, g) -> (SW, TFF, DC, SP) latencies in µs inside every tolerance and panel of
#: the preregistration's fig10 row (cut 26.1-54.2 %, 3.7-4.6 us at R64 16 B, 1.43 us mean
#: saving at 10,240 B)
HELDOUT_FIG10 = {16: {"small": (3.6, 2.3, 2.5, 2.2), 10240: (3.6, 2.6, 2.6, 2.6)},
                 32: {"small": (7.0, 4.5, 4.8, 4.2), 10240: (5.6, 4.1, 4.1, 4.1)},
                 64: {"small": (10.0, 6.3, 5.4, 5.8), 64: (12.0, 7.0, 5.5, 6.0),
                      10240: (6.9, 5.1, 5.1, 5.1)}}


def heldout_item_rows(item, **change):
    """One seed's rows of a held-out ``item`` at the Round 1 shape, each number at (or, for
    fig10, inside the tolerance of) the paper's; ``change`` replaces the listed values:
    table4 ``ubep``/``cann`` (µs at 16/32/64), fig13 ``improvement`` (k 2/4/8), fig14
    ``best`` (best C at BS 8..128)."""
    if item == "table4":
        cann, ubep = change.get("cann", (103.0, 120.0, 139.0)), change.get("ubep", (73.0, 86.0, 101.0))
        return [{"ranks": str(n), "aivs": 48, "cann_us": c, "ubep_us": u, "ratio": u / c,
                 "correct": True} for n, c, u in zip((16, 32, 64), cann, ubep)]
    if item == "fig3b":
        effs = {8: 1.0, 16: 0.767, 24: 0.576, 32: 0.456, 47: 0.311}
        return [{"ranks": 16, "aivs": 48, "senders": n, "eff": e, "t_send": 8000 / (n * e)}
                for n, e in effs.items()]
    base = {"ranks": 64, "aivs": 48}
    if item == "fig7a":
        return [{**base, "batch": b, "improvement": 0.359 if b == 128 else 0.464}
                for b in (8, 16, 32, 64, 128)]
    if item == "fig7c":
        return [{**base, "experts": e, "improvement": x, "cann_sync_share": 0.70,
                 "ubep_sync_share": 0.30, "cann_a2a": 100, "ubep_a2a": 110}
                for e, x in ((128, 0.386), (256, 0.419))]
    if item == "fig8":
        rows = []
        for b, cut, cycles in ((32, 0.347, 60_000), (64, 0.45, 80_000), (128, 0.524, 130_000)):
            common = {**base, "batch": b, "cut": cut, "preset": "cm384"}
            rows += [{**common, "system": "cann", "role": "all", "run_cycles": cycles},
                     {**common, "system": "ubep", "role": "T", "init": 100, "sending": 1000,
                      "flag_verify": 0, "cumsum": 0, "run_cycles": cycles},
                     {**common, "system": "ubep", "role": "C", "init": 100, "sending": 0,
                      "flag_verify": 300, "cumsum": 300, "run_cycles": cycles}]
        return rows
    if item == "fig9":
        return [{"dies": 64, "aivs": 48, "variant": v, "max_us": m, "correct": True,
                 "max_over_mean": 1.05 if v == "ubep" else 1.5}
                for v, m in (("cann-slot", 62.2), ("cann-expert", 62.2), ("ubep-nomap", 48.1),
                             ("ubep", 43.5))]
    if item == "fig10":
        rows = []
        for n, by in HELDOUT_FIG10.items():
            for g in (16, 64, 256, 1024, 4096, 10240):
                sw, tff, dc, sp = by.get(g, by["small"])
                rows.append({"ranks": n, "aivs": 48, "bytes": g, "sw_ns": 1000 * sw,
                             "tff_ns": 1000 * tff, "dc_ns": 1000 * dc, "sp_ns": 1000 * sp})
        return rows
    if item == "fig13":
        imp = change.get("improvement", (0.29, 0.31, 0.34))
        return [{**base, "topk": k, "improvement": x} for k, x in zip((2, 4, 8), imp)]
    if item == "fig14":
        best = change.get("best", (13, 15, 11, 2, 1))
        return [{**base, "batch": b, "cumsum_aivs": c, "cycles": 1000 + 10 * abs(c - at)}
                for b, at in zip((8, 16, 32, 64, 128), best) for c in range(1, 17)]
    raise ValueError(f"no held-out item {item!r}")


def heldout_rows(seeds=(0, 1, 2), **items):
    """Validation rows of every held-out item on ``seeds``; ``items`` maps an item to the
    ``change`` of :func:`heldout_item_rows` (or to ``None``: the item did not run)."""
    names = ("table4", "fig3b", "fig7a", "fig7c", "fig8", "fig9", "fig10", "fig13", "fig14")
    return [{"item": item, "seed": seed, **r} for seed in seeds for item in names
            if items.get(item, {}) is not None
            for r in heldout_item_rows(item, **items.get(item, {}))]


# --- the small dispatch case's machine, for tests that need any 2-die x 2-AIV machine -----

#: the small dispatch/combine case (``SMALL`` of tests/sw/test_dispatch.py, test_combine.py and
#: test_workload.py)
SMALL_DISPATCH = {"batch": 4, "topk": 2, "experts": 4}


def small_dispatch_machine(simulator):
    """A :class:`~epfabric.sw.machine.Machine` of :data:`SMALL_DISPATCH`'s configuration (tiny,
    2 dies x 2 AIVs; the combine's is the same): on Verilator the dispatch and combine tests
    build it anyway, so a test that needs some 2 x 2 machine on Verilator runs on that build
    instead of building :data:`MACHINE` (which only Amaranth, Icarus and native runs share)."""
    from epfabric.sim.backends.machine import backend
    from epfabric.sw.kernels import KERNELS
    from epfabric.sw.machine import Machine
    config = KERNELS["dispatch"].configs("tiny", ("superpod", 2, 1, 1), 2, SMALL_DISPATCH)[0]
    return Machine(backend=backend(simulator), config=config)
