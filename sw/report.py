"""What a machine run produced: :class:`Report`, and :class:`WatchdogTimeout` when it hung.

:func:`chrome_traces` puts several runs' Chrome/Perfetto traces in one file
(``epfabric run --trace``: every system of a comparison, a combine after its dispatch).
"""

import json
from dataclasses import asdict, dataclass, field

__all__ = ["Report", "WatchdogTimeout", "RATE_TRACKS", "MAX_RATE_STEPS", "rate_track",
           "chrome_traces"]

#: ``{counter: (track label, scale)}`` of the sampled counters' rate tracks
#: (:meth:`Report.chrome_trace`): the track shows ``scale`` x the counter's increase per µs;
#: ``scale`` ``None``: per cent of the interval's cycles (``tx_stalls``: the share of cycles
#: the die's link held its ``tx`` off). ``tx_blocks`` and ``rx_blocks`` count every flit of
#: the die's link (a data block or a small one).
RATE_TRACKS = {"tx_blocks": ("link tx flits/µs", 1.0), "rx_blocks": ("link rx flits/µs", 1.0),
               "tx_stalls": ("link tx stalled %", None),
               "ub_blocks": ("UB block commits/µs", 1.0),
               "ub_words": ("UB word commits/µs", 1.0)}

#: Most steps of one rate track (samples beyond are merged: every k-th is kept)
MAX_RATE_STEPS = 500


def rate_track(name):
    """``(label, scale)`` of counter ``name``'s rate track (:data:`RATE_TRACKS`; a link kind's
    ``link_blocks.up`` is ``"up links: block flits/µs"``)."""
    if name in RATE_TRACKS:
        return RATE_TRACKS[name]
    what, _, kind = name.partition(".")
    if what in ("link_blocks", "link_small") and kind:
        return f"{kind} links: {'block' if what == 'link_blocks' else 'small'} flits/µs", 1.0
    return f"{name}/µs", 1.0


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

    ``samples`` (a machine with a counter sampler, ``MachineConfig.sample_depth``; else
    ``{}``): ``every`` (the interval in cycles, 0 = the sampler was off), ``depth``,
    ``dropped`` (samples the full memory could not hold: the run's later ones), ``cycles``
    (each sample's cycle) and ``values``: ``{counter: [series, ...]}`` with one series per
    rank (one for the machine-wide link counters), each the counter's cumulative value at
    every sample -- the same counters, names and order as :attr:`counters`
    (``tx_blocks``, ``rx_blocks``, ``tx_stalls``, ``ub_blocks``, ``ub_words``,
    ``link_blocks.<kind>``, ``link_small.<kind>``).
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
    samples: dict = field(default_factory=dict)

    def marks(self, event=None, rank=None, core=None):
        """MARK records, filtered; each is ``{"rank", "core", "cycle", "event"}``."""
        return [t for t in self.trace
                if (event is None or t["event"] == event) and (rank is None or t["rank"] == rank)
                and (core is None or t["core"] == core)]

    def to_dict(self):
        return asdict(self)

    def to_json(self, **kw):
        return json.dumps(self.to_dict(), **kw)

    def chrome_trace(self, cycle_ns, spans=None, label="", phases=None, flows=None):
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

        ``flows`` (``[(name, (rank, core, slice), (rank, core, slice))]``, a
        kernel's ``trace_flows``: a message the sender's slice writes and the
        receiver's slice waits for) become flow arrows: a ``"s"`` event just inside
        the start of the sender AIV's first slice of that name (half a cycle in,
        at most half the slice: the message is written after the slice starts) and
        a ``"f"`` event (``"bp": "e"``, bound to its enclosing slice) just inside
        the end of the receiver's first slice of that name (the receiver has
        seen the message by the time that slice ends), ids from 1 in list order.
        A flow whose slice is not in the trace, or whose end would precede its
        start, is left out and counted in ``otherData["flows_unmatched"]``.

        Counters (``"C"`` events): every counter of :attr:`counters` -- cumulative totals
        read once, after the run stopped -- has a track ``"<counter> (end-of-run total)"``
        per rank with one sample at the run's last cycle (``cycles``); a counter with one
        value for the whole machine (the link kinds', ``inc_slot_stalls``) goes on rank 0's
        process, named ``"... (machine, end-of-run total)"``.

        With :attr:`samples` (the counter sampler), each sampled counter also gets a
        *rate* track (:data:`RATE_TRACKS`; e.g. ``"link tx flits/µs (rank 3)"``,
        ``"UB block commits/µs (rank 0)"``, ``"direct links: block flits/µs (machine)"``):
        from each sample to the next (the last to the end-of-run total at ``cycles``) the
        counter's increase per microsecond of simulated time (``tx_stalls``: per cent of the
        cycles), as a step that holds until the next sample, then 0 at ``cycles``. A rate
        and not the cumulative count, because Perfetto draws a counter as a step line: a
        cumulative count is a staircase whose slope must be read by eye, a rate is a level
        -- a saturated link is a plateau at its bandwidth, a stall a drop to 0, and two
        systems side by side compare at a glance (the totals are on their own tracks). A
        counter that stayed 0 the whole run gets no rate track; more than
        :data:`MAX_RATE_STEPS` intervals are merged into that many (every k-th sample:
        exact, the counters are cumulative).
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
        flow_events, unmatched = self._flows(events, flows or (), cycle_ns)
        events += flow_events + self._counter_events(cycle_ns) + self._rate_events(cycle_ns)
        return {"traceEvents": events, "displayTimeUnit": "ns",
                "otherData": {"flows_unmatched": unmatched}}

    @staticmethod
    def _flows(events, flows, cycle_ns):
        """``("s", "f")`` event pairs of ``flows`` (:meth:`chrome_trace`) between the slices
        in ``events``; and how many flows were left out."""
        slices = {}                       # (rank, core, name) -> its first slice's cycles
        for e in events:
            if e["ph"] == "X":
                slices.setdefault((e["pid"], e["tid"], e["name"]),
                                  (e["args"]["start_cycle"], e["args"]["end_cycle"]))
        out, unmatched = [], 0
        for name, src, dst in flows:
            a, b = slices.get(tuple(src)), slices.get(tuple(dst))
            if a is None or b is None:
                unmatched += 1
                continue
            start = a[0] + min(0.5, (a[1] - a[0]) / 2)      # cycles: inside the sender's slice
            end = b[1] - min(0.5, (b[1] - b[0]) / 2)        # and inside the receiver's
            if end < start:
                unmatched += 1
                continue
            fid = len(out) // 2 + 1
            common = {"name": name, "cat": "flow", "id": fid}
            out.append({**common, "ph": "s", "pid": src[0], "tid": src[1],
                        "ts": start * cycle_ns / 1000.0, "args": {"slice": src[2]}})
            out.append({**common, "ph": "f", "bp": "e", "pid": dst[0], "tid": dst[1],
                        "ts": end * cycle_ns / 1000.0, "args": {"slice": dst[2]}})
        return out, unmatched

    def _counter_events(self, cycle_ns):
        """One ``"C"`` event per counter and rank at the run's end (:meth:`chrome_trace`)."""
        ranks = sorted({c["rank"] for c in self.cores} | {t["rank"] for t in self.trace})
        ts = self.cycles * cycle_ns / 1000.0
        out = []
        for name, values in self.counters.items():
            values = list(values)
            if len(values) == 1 and len(ranks) != 1:
                tracks = [(ranks[0] if ranks else 0, f"{name} (machine, end-of-run total)")]
            else:                         # one value per rank
                tracks = [(ranks[i] if len(ranks) == len(values) else i,
                           f"{name} (end-of-run total)") for i in range(len(values))]
            out += [{"name": track, "ph": "C", "pid": pid, "ts": ts, "args": {"value": value}}
                    for (pid, track), value in zip(tracks, values)]
        return out

    def _rate_events(self, cycle_ns):
        """The rate tracks of :attr:`samples` (:meth:`chrome_trace`)."""
        if not self.samples or not self.samples.get("cycles"):
            return []
        ranks = sorted({c["rank"] for c in self.cores} | {t["rank"] for t in self.trace})
        cycles = list(self.samples["cycles"])
        out = []
        for name, series in self.samples["values"].items():
            label, scale = rate_track(name)
            end = list(self.counters.get(name, ()))
            for i, values in enumerate(series):
                points = list(zip(cycles, values))
                if len(end) == len(series) and self.cycles > cycles[-1]:
                    points.append((self.cycles, end[i]))
                if not any(v for _c, v in points):
                    continue
                step = -(-(len(points) - 1) // MAX_RATE_STEPS) if len(points) > 1 else 1
                points = points[::step] + ([points[-1]] if (len(points) - 1) % step else [])
                if len(series) == 1 and len(ranks) != 1:
                    pid, track = (ranks[0] if ranks else 0), f"{label} (machine)"
                else:
                    pid = ranks[i] if len(ranks) == len(series) else i
                    track = f"{label} (rank {pid})"
                for (c0, v0), (c1, v1) in zip(points, points[1:]):
                    rate = (100.0 * (v1 - v0) / (c1 - c0) if scale is None else
                            (v1 - v0) * scale / ((c1 - c0) * cycle_ns / 1000.0))
                    out.append({"name": track, "ph": "C", "pid": pid,
                                "ts": c0 * cycle_ns / 1000.0, "args": {"value": rate}})
                out.append({"name": track, "ph": "C", "pid": pid,
                            "ts": points[-1][0] * cycle_ns / 1000.0, "args": {"value": 0}})
        return out

    @staticmethod
    def _instant(t, cycle_ns):
        return {"name": f"mark {t['event']}", "ph": "i", "s": "t", "pid": t["rank"],
                "tid": t["core"], "ts": t["cycle"] * cycle_ns / 1000.0,
                "args": {"cycle": t["cycle"], "event": t["event"]}}


def chrome_traces(labelled, cycle_ns, spans=None, phases=None):
    """One trace of every ``(label, report, flows, offset)``: each run's ranks are processes
    named ``label: rank r`` (pids 1000 apart), its flow ids 1,000,000 apart; ``flows`` is the
    kernel's ``trace_flows`` of the run (or ``None``), see :meth:`Report.chrome_trace`; the
    run's timestamps start ``offset`` cycles in (a combine after its dispatch; the slices'
    ``start_cycle``/``end_cycle`` stay the run's own). ``otherData["flows_unmatched"]`` sums
    the flows left out."""
    events, unmatched = [], 0
    for i, (label, rep, flows, offset) in enumerate(labelled):
        tr = rep.chrome_trace(cycle_ns, spans, label=label, phases=phases, flows=flows)
        unmatched += tr["otherData"]["flows_unmatched"]
        for ev in tr["traceEvents"]:  # one trace per run: separate them by pid range
            ev["pid"] = ev["pid"] + 1000 * i
            if "id" in ev:
                ev["id"] += 1_000_000 * i
            if "ts" in ev:
                ev["ts"] += offset * cycle_ns / 1000.0
        events += tr["traceEvents"]
    return {"traceEvents": events, "displayTimeUnit": "ns",
            "otherData": {"flows_unmatched": unmatched}}
