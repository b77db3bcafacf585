"""Kernels: programs generated from the configuration only, each paired with a checker.

Every kernel is a :class:`Kernel` registered in :data:`KERNELS` (name →
kernel); ``epfabric run NAME`` and the experiments find kernels there and
run them through :func:`run_kernel`, so adding a kernel never touches the
CLI. The protocol (docs/contributing.md "Style", PyMTL3's ``gen_mem_image`` + ``verify``):

* ``name``, ``description`` — the registry key and one line for ``--help``;
* ``params`` — ``{name: default}`` of the kernel's own parameters (a seed,
  epochs, ...; ``epfabric run NAME --param k=v``);
* ``configs(preset, topology, aivs, params)`` — the machine configurations
  one invocation runs (usually one; ``syncall`` sweeps AIV counts); by
  default a :class:`~epfabric.sw.config.MachineConfig` of the kernel's
  default shape, sized by ``sizes``;
* ``sizes(config)`` — the configuration fields the kernel needs
  (``hbm_blocks``, ``imem_depth``, ``trace_depth``), read from its shape;
* ``load(machine, params)`` — programs and inputs onto the machine; returns
  the inputs the checker needs;
* ``check(machine, report, inputs)`` — compares the run with a numpy
  reference; returns at least ``{"correct": bool, "problems": [str, ...]}``
  plus the kernel's figures;
* ``summary(result)`` — the lines ``epfabric run`` prints.

Programs depend on the configuration only, never on data (docs/spec/design.md).
"""

from dataclasses import replace

from ...hw.validate import UserError, check_int
from ..config import MachineConfig
from ..machine import Machine
from ..presets import get_preset

__all__ = ["Kernel", "KERNELS", "register", "run_kernel", "pow2_at_least"]

#: name → :class:`Kernel`, filled by :func:`register` (the kernel modules below register theirs).
KERNELS = {}


def pow2_at_least(n):
    """The smallest power of two >= ``max(1, n)``."""
    return 1 << (max(1, n) - 1).bit_length()


class Kernel:
    """Base class of the kernel protocol (see the module docstring)."""

    name = ""
    description = ""
    #: ``{parameter: default}``
    params = {}
    #: preset when the user names none
    default_preset = "tiny"
    #: AIVs per die when the user names none (one machine per value)
    default_aivs = (2,)
    #: watchdog limit when the user names none
    default_max_cycles = 200_000
    #: parameters whose value is a sequence: on the command line ``--roles 1,5,2`` is one
    #: value and ``;`` separates the values of a sweep
    sequence_params = ()
    #: ``{parameter: its values}`` of the parameters that take one of a few names (the
    #: command line lists them in its help and matches them in any case)
    choices = {}

    def default_topology(self, preset):
        """The machine shape when the user names none (default: the two dies of one NPU)."""
        return ("superpod", min(2, preset.dies_per_npu), 1, 1) if preset.topology == "superpod" \
            else ("star", preset.ranks)

    def sizes(self, config):
        """MachineConfig fields this kernel needs for ``config``'s shape (default: none)."""
        return {}

    def configs(self, preset, topology=None, aivs=None, params=None):
        """The configurations one invocation runs (see the module docstring)."""
        self.resolve_params(params)       # every parameter checked before any machine exists
        p = get_preset(preset)
        topology = tuple(topology) if topology is not None else self.default_topology(p)
        out = []
        for a in ([aivs] if aivs is not None else self.default_aivs):
            shape = MachineConfig(p.name, topology=topology, aivs_per_die=a)
            out.append(MachineConfig(p.name, topology=topology, aivs_per_die=a, **self.sizes(shape)))
        return out

    #: ``load`` itself runs the machine (e.g. the combine runs its dispatch first)
    #: and takes ``max_cycles``, the caller's watchdog for that run
    load_runs = False

    def load(self, machine, params):
        raise NotImplementedError

    def check(self, machine, report, inputs):
        raise NotImplementedError

    def combine_runs(self, runs):
        """Figures across the runs of one invocation, added to the result (default: none)."""
        return {}

    def summary(self, result):
        """Lines to print for ``result`` (:func:`run_kernel`); default: cycles per run."""
        return [f"{self.name} on {result['preset']} [{result['backend']}]: "
                + "; ".join(f"{r['cycles']} cycles ({r['ns']:.0f} ns)" for r in result["runs"])]

    def resolve_params(self, params):
        """``params`` over the defaults; ``UserError`` naming an unknown parameter or a bad seed."""
        params = dict(params or {})
        unknown = sorted(set(params) - set(self.params))
        if unknown:
            valid = ", ".join(f"{k}={v!r}" for k, v in self.params.items()) or "none"
            raise UserError(f"unknown parameter(s) {', '.join(unknown)} for kernel {self.name}; "
                            f"valid: {valid}")
        params = {**self.params, **params}
        if "seed" in params:     # numpy's generator would refuse it mid-run
            check_int("seed", params["seed"], 0)
        return params


def register(kernel):
    """Add ``kernel`` to :data:`KERNELS` (a name may be registered once); return it."""
    if not isinstance(kernel, Kernel):
        raise TypeError(f"kernel must be a Kernel, not {kernel!r}")
    if not kernel.name or kernel.name in KERNELS:
        raise ValueError(f"kernel name must be new and non-empty, not {kernel.name!r}")
    KERNELS[kernel.name] = kernel
    return kernel


def run_kernel(kernel, backend, *, preset=None, topology=None, aivs=None, params=None,
               max_cycles=None, knobs=None, sampling=None, configs=None):
    """Run ``kernel`` (a name or a :class:`Kernel`) on ``backend``; return ``(result, reports)``.

    ``result`` is ``{"kernel", "preset", "backend", "correct", "problems",
    "params", "runs"}`` with one entry per configuration in ``runs``:
    ``{"config", "cycles", "ns", **check}``. Every argument is validated
    before anything is simulated. A hung run raises
    :class:`~epfabric.sw.machine.WatchdogTimeout`. ``knobs`` (``{name: value}``) set the
    dies' runtime knobs over the preset's (:meth:`~epfabric.sw.machine.Machine.set_knob`).
    ``sampling`` (``(depth, every)``) gives every AIV machine a counter sampler of ``depth``
    entries sampling every ``every`` cycles (:meth:`~epfabric.sw.machine.Machine.set_sampling`;
    the reports' ``samples``); it never changes a run's cycles. ``configs``: the machines to
    run on instead of the kernel's own for ``params`` (larger ones, as one machine for a
    comparison of systems: ``epfabric run --system cann,ubep,ubep-inc``); one too small for
    the run fails while loading (a write past its memory or its program store).
    """
    if isinstance(kernel, str):
        if kernel not in KERNELS:
            raise UserError(f"unknown kernel {kernel!r}; registered: {', '.join(sorted(KERNELS))}")
        kernel = KERNELS[kernel]
    preset = get_preset(preset or kernel.default_preset).name
    params = kernel.resolve_params(params)
    if aivs is not None:
        check_int("aivs", aivs, 1)
    max_cycles = kernel.default_max_cycles if max_cycles is None else max_cycles
    check_int("max_cycles", max_cycles, 1, (1 << 32) - 1)
    configs = kernel.configs(preset, topology, aivs, params) if configs is None else list(configs)
    if sampling is not None:
        depth, every = sampling
        configs = [replace(c, sample_depth=depth) if c.kind == "aiv" else c for c in configs]
    runs, reports, problems = [], [], []
    for config in configs:
        machine = Machine(backend=backend, config=config)
        if sampling is not None and config.kind == "aiv":
            machine.set_sampling(every)
        for name, value in (knobs or {}).items():
            machine.set_knob(name, value)
        inputs = (kernel.load(machine, params, max_cycles=max_cycles) if kernel.load_runs
                  else kernel.load(machine, params))
        report = machine.run(max_cycles)
        if hasattr(kernel, "inner_runs"):      # runs load() made first (combine: its dispatch)
            report.inner_runs = kernel.inner_runs(inputs)
        verdict = kernel.check(machine, report, inputs)
        problems += verdict["problems"]
        runs.append({"config": config.to_dict(), "cycles": report.cycles, "ns": report.ns,
                     **verdict})
        reports.append(report)
    result = {"kernel": kernel.name, "preset": preset, "backend": backend.name,
              "correct": not problems, "problems": problems, "params": params, "runs": runs}
    result.update(kernel.combine_runs(runs))
    return result, reports


# The kernels of this package register themselves on import.
from . import agrs, alltoall, combine, daf, dispatch, moe_layer, pingpong, syncall   # noqa: E402,F401
