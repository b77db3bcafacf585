"""Kernels: programs generated from the configuration only, each paired with a checker.

Every kernel is a :class:`Kernel` registered in :data:`KERNELS` (name →
kernel); ``epfabric run NAME`` and the experiments find kernels there and
run them through :func:`run_kernel`, so adding a kernel never touches the
CLI. The protocol (docs/contributing.md "Style", PyMTL3's ``gen_mem_image`` + ``verify``):

* ``name``, ``description`` — the registry key and one line for ``--help``;
* ``params`` — the kernel's own parameters (a seed, epochs, ...), each a
  :class:`~epfabric.sw.param.Param` (name, default, help, type, choices; ``epfabric
  run NAME --NAME v`` or ``--param k=v``), checked by :meth:`Kernel.resolve_params`;
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
  plus the kernel's figures (a :class:`~.result.MachineRun`'s ``check``);
* ``summary(result)`` — the lines ``epfabric run`` prints of a
  :class:`~.result.RunResult`.

Optional hooks, declared here with defaults that do nothing:

* ``inner_runs(inputs)`` — the runs ``load`` made before the kernel's own (a
  combine's dispatch), named by their kernel;
* ``trace_spans``, ``trace_phases``, ``trace_flows(config, params)`` — the slices
  and flow arrows of ``epfabric run --trace`` (:meth:`~epfabric.sw.report.Report.chrome_trace`);
* ``shared_machine(variants)`` — of a comparison's variants, the one whose machines
  run them all (one build for ``--system cann,ubep,ubep-inc``);
* ``combine_runs(runs)`` — figures across one invocation's runs.

Programs depend on the configuration only, never on data (docs/spec/design.md).
"""

from dataclasses import replace

from ...hw.validate import UserError, check_int
from ..config import MachineConfig, preset_name
from ..machine import Machine
from ..presets import get_preset
from .result import MachineRun, RunResult

__all__ = ["Kernel", "KERNELS", "register", "run_kernel", "machine_run", "run_label", "pow2_at_least",
           "MachineRun", "RunResult"]

#: name → :class:`Kernel`, filled by :func:`register` (the kernel modules below register theirs).
KERNELS = {}


def pow2_at_least(n):
    """The smallest power of two >= ``max(1, n)``."""
    return 1 << (max(1, n) - 1).bit_length()


class Kernel:
    """Base class of the kernel protocol (see the module docstring)."""

    name = ""
    description = ""
    #: the kernel's parameters, :class:`~epfabric.sw.param.Param` s in order
    params = ()
    #: preset when the user names none
    default_preset = "tiny"
    #: AIVs per die when the user names none (one machine per value)
    default_aivs = (2,)
    #: watchdog limit when the user names none
    default_max_cycles = 200_000
    #: ``{start event: (end event, slice name)}``: MARK pairs of one AIV that ``epfabric run
    #: --trace`` draws as one slice (:meth:`~epfabric.sw.report.Report.chrome_trace`)
    trace_spans = {}
    #: ``{phase-end event: phase name}``: an AIV's phase ends, drawn as back-to-back slices
    trace_phases = {}

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

    def inner_runs(self, inputs):
        """``[(kernel name, Report)]`` of the machine runs :meth:`load` made before the
        kernel's own, from the inputs it returned (default: none)."""
        return []

    def trace_flows(self, config, params):
        """Flow arrows of a run's trace (``Report.chrome_trace``'s ``flows``; default: none)."""
        return []

    def shared_machine(self, variants):
        """Of a comparison's ``variants`` (resolved parameters), the one whose machines run
        them all, or ``None`` (default: each variant runs on its own machines)."""
        return None

    def combine_runs(self, runs):
        """Figures across the :class:`~.result.MachineRun` s of one invocation, the result's
        ``figures`` (default: none)."""
        return {}

    def summary(self, result):
        """Lines to print for ``result`` (:func:`run_kernel`); default: cycles per run."""
        return [f"{self.name} on {result.preset} [{result.backend}]: "
                + "; ".join(f"{r.cycles} cycles ({r.ns:.0f} ns)" for r in result.runs)]

    def trace_runs(self, result, swept=None, flows=False):
        """``[(label, report, flows, offset)]`` of ``result``'s runs for one trace file
        (:func:`~epfabric.sw.report.chrome_traces`): each run after the runs its load made
        first (labelled by their kernel, e.g. ``dispatch``), and offset by their cycles;
        labels by :func:`run_label`; with ``flows``, each run's flow arrows
        (:meth:`trace_flows` of the run's kernel), else ``None``."""
        out = []
        for run in result.runs:
            label = run_label(swept, run, len(result.runs))
            shift = 0                  # the runs before this one (combine: its dispatch)
            for name, inner in run.inner_runs:
                out.append((f"{label} {name}".strip(), inner,
                            KERNELS[name].trace_flows(run.config, result.params) if flows
                            else None, 0))
                shift += inner.cycles
            out.append((label, run.report,
                        self.trace_flows(run.config, result.params) if flows else None, shift))
        return out

    @property
    def defaults(self):
        """``{parameter: default}``, in :attr:`params` order."""
        return {p.name: p.default for p in self.params}

    def param(self, name):
        """The :class:`~epfabric.sw.param.Param` called ``name``; ``KeyError`` if none."""
        for p in self.params:
            if p.name == name:
                return p
        raise KeyError(f"kernel {self.name} has no parameter {name!r}")

    def resolve_params(self, params):
        """``params`` over the defaults, each checked by its :class:`~epfabric.sw.param.Param`
        (type, choices, minimum: a seed numpy's generator would refuse mid-run); ``UserError``
        naming an unknown parameter."""
        params = dict(params or {})
        defaults = self.defaults
        unknown = sorted(set(params) - set(defaults))
        if unknown:
            valid = ", ".join(f"{k}={v!r}" for k, v in defaults.items()) or "none"
            raise UserError(f"unknown parameter(s) {', '.join(unknown)} for kernel {self.name}; "
                            f"valid: {valid}")
        params = {**defaults, **params}
        for p in self.params:
            p.check(params[p.name])
        return params


def register(kernel):
    """Add ``kernel`` to :data:`KERNELS` (a name may be registered once); return it."""
    if not isinstance(kernel, Kernel):
        raise TypeError(f"kernel must be a Kernel, not {kernel!r}")
    if not kernel.name or kernel.name in KERNELS:
        raise ValueError(f"kernel name must be new and non-empty, not {kernel.name!r}")
    KERNELS[kernel.name] = kernel
    return kernel


def run_label(swept, run, runs):
    """What tells a :class:`~.result.MachineRun` apart in a trace: the swept value
    (``swept``: ``("system", "ubep")`` → ``system=ubep``), the run's mode (moe-layer's
    ``inc``/``ring``) or its machine when a kernel runs several (``runs`` > 1)."""
    parts = [f"{swept[0]}={swept[1]}"] if swept else []
    if run.check.get("mode"):
        parts.append(str(run.check["mode"]))
    elif runs > 1:
        parts.append(f"{run.config.to_dict().get('aivs_per_die')} AIVs")
    return " ".join(parts)


def run_kernel(kernel, backend, *, preset=None, topology=None, aivs=None, params=None,
               max_cycles=None, knobs=None, sampling=None, configs=None):
    """Run ``kernel`` (a name or a :class:`Kernel`) on ``backend``; return its :class:`RunResult`.

    The result holds one :class:`MachineRun` per configuration (its report, the
    checker's verdict and figures, the runs the kernel's load made first); its
    ``to_dict()`` is ``{"kernel", "preset", "backend", "correct", "problems",
    "params", "runs"}`` with ``{"config", "cycles", "ns", **check}`` per run. Every
    argument is validated before anything is simulated. A hung run raises
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
    preset = preset_name(preset or kernel.default_preset)
    params = kernel.resolve_params(params)
    if aivs is not None:
        check_int("aivs", aivs, 1)
    max_cycles = kernel.default_max_cycles if max_cycles is None else max_cycles
    check_int("max_cycles", max_cycles, 1, (1 << 32) - 1)
    configs = kernel.configs(preset, topology, aivs, params) if configs is None else list(configs)
    if sampling is not None:
        depth, every = sampling
        configs = [replace(c, sample_depth=depth) if c.kind == "aiv" else c for c in configs]
    runs = []
    for config in configs:
        machine = Machine(backend=backend, config=config)
        if sampling is not None and config.kind == "aiv":
            machine.set_sampling(every)
        for name, value in (knobs or {}).items():
            machine.set_knob(name, value)
        inputs = (kernel.load(machine, params, max_cycles=max_cycles) if kernel.load_runs
                  else kernel.load(machine, params))
        runs.append(machine_run(kernel, machine, machine.run(max_cycles), inputs))
    return RunResult(kernel.name, preset, backend.name, params, runs, kernel.combine_runs(runs))


def machine_run(kernel, machine, report, inputs):
    """The :class:`MachineRun` of ``kernel``'s run on ``machine``: its ``report`` judged by the
    kernel's checker against ``inputs`` (what its ``load`` returned)."""
    check = kernel.check(machine, report, inputs)
    if not isinstance(check, dict) or not {"correct", "problems"} <= set(check):
        raise TypeError(f"kernel {kernel.name}: check must return a dict with 'correct' and "
                        f"'problems', not {check!r}")
    return MachineRun(machine.config, report.cycles, report.ns, check, report,
                      kernel.inner_runs(inputs))


# The kernels of this package register themselves on import.
from . import agrs, alltoall, combine, daf, dispatch, moe_layer, pingpong, syncall   # noqa: E402,F401
