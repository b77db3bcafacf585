"""``Report.chrome_trace`` (sw/report.py): flow arrows between phase slices and counter tracks.

Synthetic reports, no simulation: the whole file runs in well under a second.
(tests/sim/test_cli_run.py checks the same on a real dispatch through ``epfabric run``.)
"""

import json

from epfabric.sw.kernels import KERNELS
from epfabric.sw.report import Report

#: phase-end MARK -> slice name (two phases per AIV)
PHASES = {1: "Send", 2: "Wait"}


def report(marks, counters=None, cycles=100):
    trace = [{"rank": r, "core": c, "cycle": cyc, "event": ev} for r, c, cyc, ev in marks]
    return Report(config={}, backend="pysim", cycles=cycles, ns=2.0 * cycles, done=True,
                  timeout=False, trace=trace, counters=counters or {},
                  cores=[{"rank": r, "core": c} for r in range(2) for c in range(2)])


def events_of(doc, ph):
    return [e for e in doc["traceEvents"] if e["ph"] == ph]


def test_flows_bind_inside_the_sender_and_receiver_slices():
    """A flow starts half a cycle into the sender's slice and ends half a cycle before the end of
    the receiver's, on their threads; ids pair the two events; the file is JSON."""
    rep = report([(0, 0, 10, 1), (0, 0, 30, 2), (1, 1, 20, 1), (1, 1, 50, 2)])
    flows = [("msg", (0, 0, "Send"), (1, 1, "Wait")), ("back", (1, 1, "Send"), (0, 0, "Wait"))]
    doc = json.loads(json.dumps(rep.chrome_trace(2.0, phases=PHASES, flows=flows)))
    starts, ends = events_of(doc, "s"), events_of(doc, "f")
    assert [(e["id"], e["name"], e["pid"], e["tid"], e["ts"]) for e in starts] == [
        (1, "msg", 0, 0, 0.5 * 2 / 1000), (2, "back", 1, 1, 0.5 * 2 / 1000)]
    assert [(e["id"], e["name"], e["pid"], e["tid"], e["ts"], e["bp"]) for e in ends] == [
        (1, "msg", 1, 1, 49.5 * 2 / 1000, "e"), (2, "back", 0, 0, 29.5 * 2 / 1000, "e")]
    assert doc["otherData"] == {"flows_unmatched": 0}


def test_a_flow_without_its_slices_or_going_back_in_time_is_left_out():
    """No slice of that name on the thread, or a receiver slice that ends before the sender's
    starts: no arrow is drawn, and the trace says how many were left out."""
    rep = report([(0, 0, 10, 1), (0, 0, 30, 2), (1, 1, 40, 1), (1, 1, 50, 2)])
    flows = [("gone", (0, 0, "Send"), (1, 0, "Wait")),          # AIV 1.0 has no slices
             ("back in time", (1, 1, "Wait"), (0, 0, "Wait")),  # 40..50 -> ends at 30
             ("ok", (0, 0, "Send"), (1, 1, "Wait"))]
    doc = rep.chrome_trace(1.0, phases=PHASES, flows=flows)
    assert [e["name"] for e in events_of(doc, "s")] == ["ok"]
    assert [e["id"] for e in events_of(doc, "f")] == [1]
    assert doc["otherData"] == {"flows_unmatched": 2}


def test_a_zero_length_slice_keeps_its_flow_on_its_boundary():
    """Half a cycle in, at most half the slice: a zero-length slice's flow sits on its edge."""
    rep = report([(0, 0, 10, 1), (0, 0, 10, 2), (1, 1, 10, 1), (1, 1, 12, 2)])
    doc = rep.chrome_trace(1.0, phases=PHASES, flows=[("m", (0, 0, "Wait"), (1, 1, "Wait"))])
    (s,), (f,) = events_of(doc, "s"), events_of(doc, "f")
    assert s["ts"] == 10 / 1000 and f["ts"] == 11.5 / 1000


def test_counters_are_one_end_of_run_sample_per_rank():
    """The report's counters are totals read after the run: one "C" event per counter and
    rank at the run's last cycle, with the total; a single machine-wide value on rank 0."""
    rep = report([(0, 0, 10, 1), (1, 1, 20, 1)], cycles=80,
                 counters={"tx_blocks": [3, 5], "tx_stalls": [0, 7], "inc_slot_stalls": [4]})
    counters = events_of(rep.chrome_trace(2.0, phases=PHASES), "C")
    assert [(e["pid"], e["name"], e["ts"], e["args"]) for e in counters] == [
        (0, "tx_blocks (end-of-run total)", 0.16, {"value": 3}),
        (1, "tx_blocks (end-of-run total)", 0.16, {"value": 5}),
        (0, "tx_stalls (end-of-run total)", 0.16, {"value": 0}),
        (1, "tx_stalls (end-of-run total)", 0.16, {"value": 7}),
        (0, "inc_slot_stalls (machine, end-of-run total)", 0.16, {"value": 4})]
    marks = [e["ts"] for e in rep.chrome_trace(2.0)["traceEvents"] if e["ph"] == "i"]
    assert all(c["ts"] >= t for c in counters for t in marks)   # after every MARK


def sampled(cycles, values, end, every=10, dropped=0, run_cycles=None):
    """A report with counter samples (``values``: ``{counter: [series per rank]}``) and the
    end-of-run totals ``end``."""
    rep = report([(0, 0, 5, 1), (1, 1, 6, 1)], counters=end,
                 cycles=run_cycles if run_cycles is not None else cycles[-1] + 5)
    rep.samples = {"every": every, "depth": 64, "dropped": dropped, "cycles": cycles,
                   "values": values}
    return rep


def test_sampled_counters_become_rate_tracks_between_samples():
    """Between samples (and from the last to the end-of-run total) each track holds the
    counter's increase per µs -- tx_stalls as per cent of the cycles -- at the interval's
    start, then 0 at the run's end; a counter that stayed 0 has no rate track; the end-of-run
    totals keep their own tracks."""
    rep = sampled([0, 10, 20], {"tx_blocks": [[0, 4, 4], [0, 1, 6]],
                                "tx_stalls": [[0, 5, 5], [0, 0, 0]],
                                "link_blocks.up": [[0, 2, 3]], "ub_words": [[0, 0, 0], [0, 0, 0]]},
                  {"tx_blocks": [4, 6], "tx_stalls": [5, 0], "link_blocks.up": [3],
                   "ub_words": [0, 0]}, run_cycles=30)
    doc = json.loads(json.dumps(rep.chrome_trace(2.0)))       # 2 ns cycles: 10 cycles = 0.02 µs
    rates = {}
    for e in events_of(doc, "C"):
        if "end-of-run" not in e["name"]:
            rates.setdefault((e["pid"], e["name"]), []).append((round(e["ts"], 9),
                                                                 e["args"]["value"]))
    assert rates == {
        (0, "link tx flits/µs (rank 0)"): [(0.0, 200.0), (0.02, 0.0), (0.04, 0.0), (0.06, 0)],
        (1, "link tx flits/µs (rank 1)"): [(0.0, 50.0), (0.02, 250.0), (0.04, 0.0), (0.06, 0)],
        (0, "link tx stalled % (rank 0)"): [(0.0, 50.0), (0.02, 0.0), (0.04, 0.0), (0.06, 0)],
        (0, "up links: block flits/µs (machine)"): [(0.0, 100.0), (0.02, 50.0), (0.04, 0.0),
                                                    (0.06, 0)]}
    totals = [e["name"] for e in events_of(doc, "C") if "end-of-run" in e["name"]]
    assert len(totals) == 2 + 2 + 1 + 2


def test_many_samples_merge_into_at_most_max_rate_steps_exactly():
    """2000 samples become at most MAX_RATE_STEPS steps, every k-th sample kept: the rates
    still add up to the counter's total (they are cumulative)."""
    from epfabric.sw.report import MAX_RATE_STEPS
    n = 2000
    cycles = list(range(0, 2 * n, 2))
    series = [c // 3 for c in cycles]
    rep = sampled(cycles, {"rx_blocks": [series]}, {"rx_blocks": [series[-1] + 7]},
                  run_cycles=cycles[-1] + 21)
    track = [e for e in events_of(rep.chrome_trace(1.0), "C") if "flits/µs" in e["name"]]
    assert len(track) - 1 <= MAX_RATE_STEPS and len(track) > MAX_RATE_STEPS // 2
    assert track[0]["ts"] == 0 and track[-1]["ts"] == rep.cycles / 1000
    total = sum(a["args"]["value"] * (b["ts"] - a["ts"]) for a, b in zip(track, track[1:]))
    assert abs(total - (series[-1] + 7)) < 1e-6


def test_kernel_flow_rules_name_real_slices():
    """dispatch's and combine's trace_flows name slices their trace_phases make, for both
    systems; a negative control that skips the wait draws none."""
    names = {"dispatch": set(KERNELS["dispatch"].trace_phases.values()),
             "combine": set(KERNELS["combine"].trace_phases.values())}
    for kernel in ("dispatch", "combine"):
        k = KERNELS[kernel]
        for system in ("cann", "ubep"):
            params = k.resolve_params({"system": system, "batch": 4, "topk": 2, "experts": 8})
            config = k.configs("tiny", ("superpod", 2, 2, 1), 4, params)[0]
            flows = k.trace_flows(config, params)
            assert flows and len(set(flows)) == len(flows)
            for _name, src, dst in flows:
                assert src[2] in names[kernel] and dst[2] in names[kernel]
                assert all(0 <= x[0] < config.ranks and 0 <= x[1] < 4 for x in (src, dst))
    d, c = KERNELS["dispatch"], KERNELS["combine"]
    p = d.resolve_params({"system": "cann", "broken": "no_flag_wait", "experts": 8})
    assert d.trace_flows(d.configs("tiny", ("superpod", 2, 2, 1), 4, p)[0], p) == []
    p = c.resolve_params({"system": "ubep", "broken": "no_flag_poll", "experts": 8})
    assert c.trace_flows(c.configs("tiny", ("superpod", 2, 2, 1), 4, p)[0], p) == []
