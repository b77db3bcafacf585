"""What a kernel invocation produced: a :class:`RunResult` holding one :class:`MachineRun` per machine.

:func:`~epfabric.sw.kernels.run_kernel` returns a :class:`RunResult`; ``epfabric run
--json`` writes its :meth:`RunResult.to_dict`, the same keys and values at every level
as the kernel's checker gave them:

.. code-block:: text

    {"kernel", "preset", "backend", "correct", "problems", "params",
     "runs": [{"config", "cycles", "ns", **check}, ...], **figures}

A run's ``check`` is what :meth:`~epfabric.sw.kernels.Kernel.check` returned:
``correct`` and ``problems`` (every kernel's) and the kernel's own figures (a daf's
``latency_cycles``, a dispatch's ``phases``, a combine's ``dispatch``: the figures of
the dispatch it ran first), read by name by that kernel's summary and by the
comparisons of :mod:`.compare`.
"""

from dataclasses import dataclass, field

from ..report import Report

__all__ = ["MachineRun", "RunResult"]


@dataclass
class MachineRun:
    """One machine run of a kernel invocation.

    Attributes
    ----------
    config : MachineConfig or AgrsConfig
        The machine it ran on.
    cycles : int
        Cycles until every core halted (the report's).
    ns : float
        The same in simulated nanoseconds.
    check : dict
        What the kernel's checker returned: ``correct`` (bool), ``problems`` (list of
        str) and the kernel's own figures, in the checker's order (the JSON's).
    report : Report
        The run's report (MARK trace, counters, samples); not in :meth:`to_dict`.
    inner_runs : list of (str, Report)
        The runs the kernel's ``load`` made before this one, named by their kernel
        (a combine's dispatch: :meth:`~epfabric.sw.kernels.Kernel.inner_runs`).
    """
    config: object
    cycles: int
    ns: float
    check: dict
    report: Report = field(default=None, repr=False)
    inner_runs: list = field(default_factory=list, repr=False)

    @property
    def correct(self):
        return self.check["correct"]

    @property
    def problems(self):
        return self.check["problems"]

    def to_dict(self):
        """``{"config", "cycles", "ns", **check}`` (the config as JSON)."""
        return {"config": self.config.to_dict(), "cycles": self.cycles, "ns": self.ns,
                **self.check}


@dataclass
class RunResult:
    """One kernel invocation (:func:`~epfabric.sw.kernels.run_kernel`).

    Attributes
    ----------
    kernel, preset, backend : str
        What ran, on which preset, on which simulator.
    params : dict
        The kernel's resolved parameters.
    runs : list of MachineRun
        One per machine configuration, in order.
    figures : dict
        Figures across the runs (:meth:`~epfabric.sw.kernels.Kernel.combine_runs`;
        moe-layer's ``cut``), empty for most kernels.
    """
    kernel: str
    preset: str
    backend: str
    params: dict
    runs: list
    figures: dict = field(default_factory=dict)

    @property
    def problems(self):
        """Every run's problems, in run order."""
        return [p for run in self.runs for p in run.problems]

    @property
    def correct(self):
        return not self.problems

    @property
    def reports(self):
        """The runs' reports, in run order."""
        return [run.report for run in self.runs]

    def all_reports(self):
        """Every report of the invocation: per run, those its load made first, then its own."""
        for run in self.runs:
            yield from (inner for _name, inner in run.inner_runs)
            yield run.report

    def to_dict(self):
        """The result as JSON (module docstring)."""
        return {"kernel": self.kernel, "preset": self.preset, "backend": self.backend,
                "correct": self.correct, "problems": self.problems, "params": self.params,
                "runs": [run.to_dict() for run in self.runs], **self.figures}
