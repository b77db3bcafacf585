"""What a machine run produced: :class:`Report`, and :class:`WatchdogTimeout` when it hung."""

import json
from dataclasses import asdict, dataclass, field

__all__ = ["Report", "WatchdogTimeout"]


class WatchdogTimeout(RuntimeError):
    """The run hit ``max_cycles`` before the machine finished; ``report`` says who waits on what."""

    def __init__(self, report):
        super().__init__(report.diagnosis)
        self.report = report


@dataclass
class Report:
    """What a run produced; :meth:`to_json` and :meth:`chrome_trace` serialise it.

    ``cores`` is one status dict per AIV core (``rank``, ``core``, ``pc``,
    ``halted``, ``fault``, ``waiting``, ``wait_addr``; empty for machines
    without cores); ``counters`` the machine's counters by name, one value
    per rank; ``trace`` the MARK records (:meth:`marks`).
    """
    config: dict
    backend: str
    cycles: int
    ns: float
    done: bool
    timeout: bool
    trace: list = field(default_factory=list)
    cores: list = field(default_factory=list)
    counters: dict = field(default_factory=dict)
    trace_dropped: int = 0
    diagnosis: str = ""
    extra: dict = field(default_factory=dict)

    def marks(self, event=None, rank=None, core=None):
        """MARK records, filtered; each is ``{"rank", "core", "cycle", "event"}``."""
        return [t for t in self.trace
                if (event is None or t["event"] == event) and (rank is None or t["rank"] == rank)
                and (core is None or t["core"] == core)]

    def to_dict(self):
        return asdict(self)

    def to_json(self, **kw):
        return json.dumps(self.to_dict(), **kw)

    def chrome_trace(self, cycle_ns, spans=None, label="", phases=None):
        """MARK events in the Chrome/Perfetto trace-event format (``chrome://tracing``).

        One process per rank, one thread per AIV, an instant event per MARK;
        timestamps in microseconds of simulated time. ``spans`` (``{start
        event: (end event, name)}``, a kernel's ``trace_spans``) turns each
        start MARK and the next end MARK of the same AIV into one slice
        called ``name`` (a "complete" event), so phases that overlap on
        different AIVs show side by side. ``label`` (e.g. ``"inc"``, ``"system=ubep"``)
        prefixes the process names, to tell runs in one file apart. ``phases``
        (``{phase-end event: name}``, a kernel's ``trace_phases``) turns an AIV's
        phase-end MARKs into back-to-back slices from cycle 0: each slice runs from
        the AIV's previous phase end to this one and is named after the phase.
        """
        events = []
        for rank in sorted({t["rank"] for t in self.trace}):
            events.append({"name": "process_name", "ph": "M", "pid": rank,
                           "args": {"name": f"{label}: rank {rank}" if label else
                                    f"rank {rank}"}})
        for rank, core in sorted({(t["rank"], t["core"]) for t in self.trace}):
            events.append({"name": "thread_name", "ph": "M", "pid": rank, "tid": core,
                           "args": {"name": f"aiv {core}"}})
        spans, phases = spans or {}, phases or {}
        ends = {end: (start, name) for start, (end, name) in spans.items()}
        open_ = {}                        # (rank, core, start event) -> [MARK, ...]
        last_end = {}                     # (rank, core) -> cycle its previous phase ended
        for t in self.trace:
            key = (t["rank"], t["core"])
            if t["event"] in phases:
                start = last_end.get(key, 0)
                events.append({"name": phases[t["event"]], "ph": "X", "pid": t["rank"],
                               "tid": t["core"], "ts": start * cycle_ns / 1000.0,
                               "dur": (t["cycle"] - start) * cycle_ns / 1000.0,
                               "args": {"start_cycle": start, "end_cycle": t["cycle"]}})
                last_end[key] = t["cycle"]
                continue
            if t["event"] in spans:
                open_.setdefault((*key, t["event"]), []).append(t)
                continue
            if t["event"] in ends and open_.get((*key, ends[t["event"]][0])):
                first = open_[(*key, ends[t["event"]][0])].pop(0)
                events.append({"name": ends[t["event"]][1], "ph": "X", "pid": t["rank"],
                               "tid": t["core"], "ts": first["cycle"] * cycle_ns / 1000.0,
                               "dur": (t["cycle"] - first["cycle"]) * cycle_ns / 1000.0,
                               "args": {"start_cycle": first["cycle"], "end_cycle": t["cycle"]}})
                continue
            events.append(self._instant(t, cycle_ns))
        for marks in open_.values():      # starts that never ended stay instants
            events += [self._instant(t, cycle_ns) for t in marks]
        return {"traceEvents": events, "displayTimeUnit": "ns"}

    @staticmethod
    def _instant(t, cycle_ns):
        return {"name": f"mark {t['event']}", "ph": "i", "s": "t", "pid": t["rank"],
                "tid": t["core"], "ts": t["cycle"] * cycle_ns / 1000.0,
                "args": {"cycle": t["cycle"], "event": t["event"]}}
