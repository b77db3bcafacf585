"""The synchronization-race catalog (``epfabric races``): each scenario a hardware top you can watch.

Every scenario runs its unsafe and its safe variant side by side on
Amaranth's simulator (a :class:`~epfabric.sim.tb.race.RaceTop`: UB memory,
scripted writer, hardware reader and watchdog per variant), writes
``waveforms/<scenario>.vcd`` + ``.gtkw`` and reports what each variant did.
Outcomes are measured from the simulation (stale word counts, timeouts,
counter values, and the cycle each variant first went wrong, measured by the
hardware: :mod:`epfabric.sim.tb.race`), never written down in advance. This
module holds the scenarios' scripts (:data:`SCENARIOS`: name →
:class:`Scenario`, whose ``case(safe)`` builds a :class:`~epfabric.sim.tb.race.Case`);
the hardware is in :mod:`epfabric.sim.tb.race`.

The ``.gtkw`` opens zoomed on the race window with named markers: **A** on
the cycle the unsafe variant first goes wrong (also the primary marker, so
the signal pane shows the values there), **B** on the cycle the safe variant
acts, **C** where the unsafe variant's watchdog fires (if it does). The two
variants are groups with comment rows saying which is which and what to look
at (see ``waveforms/README.md``).

Scenarios
---------
torn_read
    TFF block (flag word + payload) over a ``non_atomic`` port (32 B beats):
    the reader sees the new flag, then reads a partly old payload. The atomic
    port commits the block in one cycle and never tears (UBEP §2.3 Insight 2).
flag_overtakes_data
    Stop-and-wait without a fence: payload block on the long lane, flag word
    on the short lane: the flag lands first and the reader consumes stale
    data. Stop-and-wait (data, wait for its commit acknowledgement, then
    flag) does not.
sentinel_collision
    Sentinel Polling with a zero sentinel and a payload whose leading 32 B are
    zero: arrival is never detected and the watchdog ends the run with a
    diagnosis. The reserved sentinel encoding (UBEP §3.4 "Correctness and
    safety assumptions") detects the same payload.
counter_reset_race
    A completion counter reset between two operations erases a signal of the
    next operation that arrived before the reset, so operation 1 never
    completes. Cumulative counters against monotonically increasing epoch
    thresholds (INC-MoE §3.1) lose nothing.
checksum_stale_blocks
    Data-for-Checksum (UBEP §3.4, Figure 6(b)) over stale blocks: epoch 2
    resends epoch 1's two tokens in swapped order, and its checksum packet
    (short lane) overtakes the data (long lane). The checksum is a sum, so
    the stale markers of epoch 1 add up to it and the receiver consumes the
    old blocks. With the epoch mixed into every block's marker (hence into
    the checksum) the stale blocks no longer match and the receiver waits
    for the new ones.
"""

from dataclasses import dataclass

from amaranth.hdl import Fragment

from ...tb.race import NEW_FLAG, OUTPUTS, WATCHDOG, Case, RaceTop, Step, marker, row
from ....hw.ub_port import UBOp
from ....hw.validate import check_choice
from ....sw import dataflag
from ...backends import ComponentSpec, run
from ...output import waveform_dir
from ...waves import Comment, Group, Marker, Trace, Waveform, read_dump, write_gtkw
from . import Experiment, Param, register

__all__ = ["SCENARIOS", "Scenario", "race_top", "run_scenario", "run_catalog", "write_race_gtkw",
           "Races", "EXPERIMENT"]


def _torn(safe):
    words = 32                                      # data_bytes 128: flag field + 96 B payload
    old = row([0] + [0] * 7 + [0xAAAA0000 | k for k in range(8, words)])
    new = row([NEW_FLAG] + [0] * 7 + [0xBBBB0000 | k for k in range(8, words)])
    return Case(data_bytes=128, non_atomic=not safe, init=(old,),
                steps=(Step(4, 0, UBOp.BLOCK_WRITE, 0, data=new),),
                reader="flag_then_read", flag_block=0, data_block=0, expect=new)


def _overtake(safe):
    new = row([0xCCCC0000 | k for k in range(16)])
    old = row([0xAAAA0000 | k for k in range(16)])
    return Case(data_bytes=64, non_atomic=False, init=(0, old),
                steps=(Step(4, 1, UBOp.BLOCK_WRITE, 1, data=new),
                       Step(5, 0, UBOp.WORD_WRITE, 0, 0, NEW_FLAG, fence=safe)),
                reader="flag_then_read", flag_block=0, data_block=1, expect=new)


def _sentinel(safe):
    sentinel = dataflag.RESERVED_SENTINEL if safe else dataflag.ZERO_SENTINEL
    sentinel = tuple(int(w) for w in sentinel)
    # the payload: an all-zero token (e.g. a padded row); leading 32 B are zero
    payload = row([0] * 8 + [0x5A5A0000 | k for k in range(8, 16)])
    return Case(data_bytes=64, non_atomic=False, init=(row(list(sentinel)),),
                steps=(Step(4, 1, UBOp.BLOCK_WRITE, 0, data=payload),),
                reader="sentinel", data_block=0, expect=payload, sentinel=sentinel)


def _counter(safe):
    add = UBOp.FETCH_ADD
    steps = (Step(2, 0, add, 2, 0, 1), Step(3, 0, add, 2, 0, 1),    # operation 0: two signals
             Step(4, 0, add, 2, 0, 1),                               # operation 1, early sender
             Step(30, 1, add, 2, 0, 1))                              # operation 1, late sender
    return Case(data_bytes=64, non_atomic=False, init=(), steps=steps, reader="counter",
                data_block=2, counter_reset=not safe, start=12)


def _token(tid, epoch, tagged):
    """A 64 B DC block: 32 B marker (token header; word 7 the epoch when ``tagged``) + payload."""
    head = [0x70000000 | tid << 8 | k for k in range(7)] + [epoch if tagged else 0]
    return row(head + [0x0E000000 | epoch << 16 | tid << 8 | k for k in range(8, 16)])


def _checksum(safe):
    # Epoch 1 left token A in block 1 and token B in block 2, with its checksum
    # in block 0 (word 0 = epoch, word 1 = sum of markers: docs/spec/kernels.md §1.7 DC).
    # Epoch 2 sends B to block 1 and A to block 2: the same markers, swapped.
    a1, b1 = _token(0xA, 1, safe), _token(0xB, 1, safe)
    b2, a2 = _token(0xB, 2, safe), _token(0xA, 2, safe)
    chk1 = row([1, (marker(a1) + marker(b1)) & 0xFFFFFFFF])
    chk2 = row([2, (marker(b2) + marker(a2)) & 0xFFFFFFFF])
    return Case(data_bytes=64, non_atomic=False, init=(chk1, a1, b1),
                steps=(Step(4, 1, UBOp.BLOCK_WRITE, 1, data=b2),
                       Step(4, 0, UBOp.BLOCK_WRITE, 0, data=chk2),      # no fence: overtakes
                       Step(4, 1, UBOp.BLOCK_WRITE, 2, data=a2)),
                reader="checksum", flag_block=0, data_block=1, batch=2, flag=2,
                expect=(b2, a2))


@dataclass(frozen=True)
class Scenario:
    """One catalog entry: the two variants' hardware and how a waveform explains them.

    ``unsafe``/``safe``: the variant's group title; ``look_unsafe``/``look_safe``:
    comment rows (what to look at); ``wrong``/``act``: names of markers A and B;
    ``key``: the signals shown first (the others go in a closed "details" group).
    """
    case: object
    summary: str
    unsafe: str
    safe: str
    look_unsafe: tuple
    look_safe: tuple
    wrong: str
    act: str
    key: tuple


SCENARIOS = {
    "torn_read": Scenario(
        _torn, "a TFF block (flag + payload) over a UB port",
        "UNSAFE: non-atomic port, 32 B a cycle", "SAFE: atomic port, one commit",
        ("block commits 32 B a cycle (ub_beat),",
         "flag first: reader sees 0d0d mid-block",
         "A: its payload read returns old words",
         "(mem_payload1 still AAAA..)"),
        ("the whole block commits in one cycle",
         "B: the same read returns the new payload"),
        "unsafe: torn read", "safe: intact read",
        ("reader_state", "observed", "stale", "wrong", "mem_flag", "mem_payload0",
         "mem_payload1", "ub_commit", "ub_beat")),
    "flag_overtakes_data": Scenario(
        _overtake, "stop-and-wait without fence: flag (short lane) vs data (long lane)",
        "UNSAFE: flag sent without a fence", "SAFE: flag after the data's ack",
        ("lane1 carries the data, lane0 the flag:",
         "the flag commits while data is in flight",
         "A: payload read returns the old block"),
        ("fence: lane0 (flag) waits for the ack",
         "B: payload read returns the new block"),
        "unsafe: stale read", "safe: new data read",
        ("reader_state", "observed", "stale", "wrong", "mem_flag", "mem_payload0",
         "mem_payload1", "lane0_valid", "lane1_valid", "ub_commit", "ub_addr")),
    "sentinel_collision": Scenario(
        _sentinel, "Sentinel Polling: a payload equal to the sentinel",
        "UNSAFE: zero sentinel, zero-led payload", "SAFE: reserved sentinel 7e5a7e5a",
        ("the payload commits; mem_flag stays 0",
         "A: a poll after the ack still reads the",
         "sentinel: arrival missed; C: watchdog"),
        ("B: first poll after the commit sees",
         "mem_flag != sentinel and reads"),
        "unsafe: arrival missed", "safe: payload read",
        ("reader_state", "observed", "wrong", "timeout", "mem_flag", "mem_payload0",
         "ub_commit", "ub_op")),
    "counter_reset_race": Scenario(
        _counter, "completion counter reset between operations",
        "UNSAFE: counter reset to 0 per op", "SAFE: cumulative counter (2, then 4)",
        ("op 1's early fetch-add lands first;",
         "A: the reset commits over count 3 and",
         "erases it; op 1 never completes (C)"),
        ("thresholds grow per epoch (INC-MoE 3.1)",
         "B: counter reaches 4: op 1 completes"),
        "unsafe: signal erased", "safe: op 1 done",
        ("reader_state", "observed", "ops_done", "wrong", "timeout", "mem_flag", "ub_op",
         "ub_commit")),
    "checksum_stale_blocks": Scenario(
        _checksum, "Data-for-Checksum: a checksum over stale blocks",
        "UNSAFE: checksum = sum of plain markers", "SAFE: epoch mixed into every marker",
        ("epoch 2 resends tokens A,B swapped; its",
         "checksum (lane0) lands before the data:",
         "old markers sum to the new checksum",
         "A: reader consumes the old blocks"),
        ("old markers carry epoch 1: no match",
         "B: sum matches once both blocks land"),
        "unsafe: stale batch", "safe: new batch",
        ("reader_state", "observed", "checksum", "marker_sum", "stale", "wrong",
         "mem_marker0", "mem_marker1", "ub_commit", "ub_addr")),
}


#: Cycles simulated after both variants finish: the waveform runs on past its window
#: (GTKWave opens at a saved start time only if a whole page fits before the end).
TAIL = 48


async def _race_intent(bench):
    """Tick until both variants finish or time out; return their measured outputs."""
    for _ in range(WATCHDOG + 20):
        if all([await bench.get(f"{v}.done") or await bench.get(f"{v}.timeout")
                for v in ("unsafe", "safe")]):
            break
        await bench.tick()
    await bench.tick(TAIL)
    return {v: {n: await bench.get(f"{v}.{n}") for n in OUTPUTS} for v in ("unsafe", "safe")}


def _describe(name, case, r):
    """(outcome text, race observed?) from one variant's measured outputs."""
    wrong = r["wrong_cycle"] if r["wrong"] else None
    text = []
    if name == "sentinel_collision" and wrong is not None:
        text.append(f"arrival missed at cycle {wrong} (a poll after the write's ack still "
                    f"read the sentinel)")
    if name == "counter_reset_race" and wrong is not None:
        text.append(f"reset at cycle {wrong} erased a signal of operation 1")
    if r["timeout"]:
        waited = {"sentinel_collision": "block 0 leading 32 B == sentinel",
                  "counter_reset_race": "counter (block 2 word 0) to reach the threshold",
                  }.get(name, f"flag word (block {case.flag_block} word 0)")
        text.append(f"watchdog at cycle {r['done_cycle']}: reader still polling {waited}; last "
                    f"value 0x{r['observed']:x}, ops done {r['ops_done']}, last write acked at "
                    f"cycle {r['ack_cycle']}")
    elif name in ("torn_read", "flag_overtakes_data", "checksum_stale_blocks"):
        what = "flag" if name != "checksum_stale_blocks" else "epoch"
        if r["stale"]:
            text.append(f"reader saw {what} 0x{r['observed']:x}, then consumed {r['stale']} stale "
                        f"payload words at cycle {wrong}")
        else:
            text.append(f"reader saw {what} 0x{r['observed']:x}, then consumed an intact payload "
                        f"at cycle {r['done_cycle']}")
    elif name == "sentinel_collision":
        text.append(f"arrival detected, payload read at cycle {r['done_cycle']}")
    else:
        text.append(f"both operations completed (counter {r['observed']}, cycle "
                    f"{r['done_cycle']})")
    return "; ".join(text), bool(r["wrong"] or r["timeout"])


def _cycle_times(dump):
    """``(at, first_commit)``: ``at(cycle)`` is the time (dump units) the cycle counter becomes
    ``cycle``; ``first_commit`` the first cycle either variant's UB port commits."""
    var = dump.find("unsafe", "cycle")
    commits = [dump.find(v, "ub_commit") for v in ("unsafe", "safe")]
    changes = dump.changes([var, *commits])
    times = {}
    for t, value in changes[var.ident]:
        times.setdefault(int(value, 2), t)
    period = times[2] - times[1]

    def at(cycle):
        return times.get(cycle, times[1] + (cycle - 1) * period)

    def cycle_of(t):
        return max(c for c, tc in times.items() if tc <= t)
    rises = [t for c in commits for t, v in changes[c.ident] if v == "1"]
    return at, cycle_of(min(rises)) if rises else 0


def write_race_gtkw(name, vcd, measured, gtkw=None):
    """Write ``<vcd stem>.gtkw`` for scenario ``name``; return ``(path, {marker name: cycle})``.

    Markers: A on the unsafe variant's ``wrong_cycle``, B on the safe
    variant's ``done_cycle`` (one marker naming both when they coincide), C
    on the unsafe watchdog (if it fired); the window spans the writer's first
    request to past A and B, with A and B in its middle third or so.
    """
    sc = SCENARIOS[name]
    dump = read_dump(vcd)
    at, first_commit = _cycle_times(dump)
    u, s = measured["unsafe"], measured["safe"]
    cycles = {}
    if u["wrong"]:
        cycles[sc.wrong] = u["wrong_cycle"]
    if s["done"]:
        if cycles.get(sc.wrong) == s["done_cycle"]:
            cycles[f"{sc.wrong} | {sc.act}"] = cycles.pop(sc.wrong)
        else:
            cycles[sc.act] = s["done_cycle"]
    if u["timeout"]:
        cycles["unsafe: watchdog"] = u["done_cycle"]
    # the race window: from the first commit (what the readers race against) to past A and B
    focus = [c for label, c in cycles.items() if "watchdog" not in label] or [first_commit]
    lo = max(0, min(first_commit, *focus) - 1)
    hi = max(focus) + 4
    # the names and shapes of the signals a variant shows are the built top's (internal
    # signals: no signature says them); elaborated, as a built design is (a small one)
    top = RaceTop(unsafe=sc.case(False), safe=sc.case(True))
    Fragment.get(top, None)
    rows = [Comment(f"{name}: {sc.summary}"), Trace(("unsafe", "cycle"), "cycle", fmt="dec")]
    for variant, title, look in (("unsafe", sc.unsafe, sc.look_unsafe),
                                 ("safe", sc.safe, sc.look_safe)):
        traces = [_trace(variant, sig) for sig in getattr(top, variant).gtkw_traces()]
        key = sorted((t for t in traces if t.label in sc.key), key=lambda t: sc.key.index(t.label))
        rest = [t for t in traces if t.label not in sc.key]
        rows.append(Group(title, [*(Comment(t) for t in look), *key,
                                  Group(f"{variant} details", rest, closed=True)]))
    markers = [Marker(f"{label} @{c}", at(c)) for label, c in cycles.items()]
    gtkw = gtkw or vcd.with_suffix(".gtkw")
    missing = write_gtkw(gtkw, dump, rows, markers=markers, window=(at(lo), at(hi)),
                         comment=f"epfabric races --scenario {name}: marker A (unsafe goes "
                                 f"wrong), B (safe acts), C (unsafe watchdog)")
    if missing:
        raise RuntimeError(f"{name}: signals missing from {vcd}: {missing}")
    return gtkw, cycles


_DEC = {"cycle", "stale", "ub_beat", "ub_addr", "watchdog", "ops_done", "done_cycle"}


def _trace(variant, obj):
    from amaranth.hdl import Shape, Value
    sig = Value.cast(obj)
    shape = obj.shape()
    enum = shape if not isinstance(shape, Shape) else None
    fmt = "bin" if len(sig) == 1 else "dec" if sig.name in _DEC else "hex"
    return Trace((variant, sig.name), sig.name, fmt=fmt, enum=enum)


def run_scenario(name, *, waveform=True):
    """Run one scenario; return its catalog row (a dict, see module docstring)."""
    check_choice("scenario", name, SCENARIOS)
    spec = ComponentSpec("epfabric.sim.lab.experiments.races:race_top", {"scenario": name})
    wave = Waveform(waveform_dir() / f"{name}.vcd") if waveform else None
    result, _cycles = run(spec, _race_intent, simulator="pysim", waveform=wave)
    sc = SCENARIOS[name]
    unsafe_text, unsafe_race = _describe(name, sc.case(False), result["unsafe"])
    safe_text, safe_race = _describe(name, sc.case(True), result["safe"])
    u, s = result["unsafe"], result["safe"]
    out = {"scenario": name, "unsafe_outcome": unsafe_text, "safe_outcome": safe_text,
           "race_observed_unsafe": unsafe_race, "race_observed_safe": safe_race,
           "unsafe_wrong_cycle": u["wrong_cycle"] if u["wrong"] else None,
           "safe_act_cycle": s["done_cycle"] if s["done"] else None,
           "vcd": None, "gtkw": None, "measured": result}
    if waveform:
        vcd = wave.runs[0]["path"]
        gtkw, _ = write_race_gtkw(name, vcd, result)
        out.update(vcd=str(vcd), gtkw=str(gtkw))
    return out


def run_catalog(names=None, *, waveform=True):
    """Run the given scenarios (default: all) and return their rows."""
    return [run_scenario(n, waveform=waveform) for n in (names or list(SCENARIOS))]


def race_top(*, scenario):
    """JSON-facing factory: the :class:`~epfabric.sim.tb.race.RaceTop` of ``scenario``."""
    check_choice("scenario", scenario, SCENARIOS)
    sc = SCENARIOS[scenario]
    return RaceTop(unsafe=sc.case(False), safe=sc.case(True))


class Races(Experiment):
    """One row per scenario: what the unsafe and the safe variant did, and the waveform."""

    name = "races"
    title = "synchronization races: unsafe vs safe variant of each, measured, with waveforms"
    paper = "UBEP §3.4; INC-MoE §3.1"
    headline = ("an atomic 512 B write never tears; data-as-flag needs a fence, a reserved "
                "sentinel, an epoch in the checksum or cumulative counters to be safe")
    params = (
        Param("scenarios", None, "comma-separated scenarios (default: all)", str),
        Param("waveform", True, "write waveforms/<scenario>.vcd + .gtkw", bool),
    )

    def resolve(self, **given):
        p = super().resolve(**given)
        for n in (p["scenarios"].split(",") if p["scenarios"] else ()):
            check_choice("scenario", n, SCENARIOS)
        return p

    def points(self, params, quick=False):
        names = params["scenarios"].split(",") if params["scenarios"] else list(SCENARIOS)
        return [{"scenario": n, "waveform": params["waveform"]} for n in names]

    def measure(self, point):
        r = run_scenario(point["scenario"], waveform=point["waveform"])
        return {k: r[k] for k in ("unsafe_outcome", "safe_outcome", "race_observed_unsafe",
                                  "race_observed_safe", "unsafe_wrong_cycle", "safe_act_cycle",
                                  "vcd", "gtkw")}

    def verdict(self, rows):
        bad = [r["scenario"] for r in rows
               if not r["race_observed_unsafe"] or r["race_observed_safe"]]
        # a yes/no outcome per run, not a measured number: no tolerance, every unsafe variant
        # must race and no safe one may
        rule = "tolerance: none, every unsafe variant races and no safe one does"
        if bad:
            return False, (f"expected race missing or safe variant failing in {', '.join(bad)} "
                           f"({rule})")
        return True, (f"all {len(rows)} unsafe variants show their race "
                      f"({', '.join(r['scenario'] for r in rows)}); no safe variant does ({rule})")

    def plot(self, rows, path):
        from ..results.plot import table_figure
        table_figure(self, rows, path, ["scenario", "unsafe_outcome", "safe_outcome"])

    def format(self, rows):
        header = ("scenario", "unsafe outcome", "safe outcome", "waveform")
        table = [(r["scenario"], r["unsafe_outcome"], r["safe_outcome"],
                  str(r["gtkw"] or r["vcd"])) for r in rows]
        return "\n".join(" | ".join(line) for line in [header, *table])


EXPERIMENT = register(Races())
