"""The synchronization-race catalog (``epfabric races``): each scenario a hardware top you can watch.

Every scenario runs its unsafe and its safe variant side by side on
Amaranth's simulator (a :class:`~epfabric.hw.race.RaceTop`: UB memory,
scripted writer, hardware reader and watchdog per variant), writes
``waveforms/<scenario>.vcd`` + ``.gtkw`` and reports what each variant did.
Outcomes are measured from the simulation (stale word counts, timeouts,
counter values), never written down in advance. This module holds the
scenarios' scripts (:data:`SCENARIOS`: scenario → ``case(safe)`` building a
:class:`~epfabric.hw.race.Case`); the hardware is in :mod:`epfabric.hw.race`.

Scenarios
---------
torn_read
    TFF block (flag word + payload) over a ``non_atomic`` port (32 B beats):
    the reader sees the new flag, then reads a partly old payload. The atomic
    port commits the block in one cycle and never tears (UBEP §2.3 Insight 2).
flag_overtakes_data
    Payload block on the long lane, flag word on the short lane, no fence:
    the flag lands first and the reader consumes stale data. Stop-and-wait
    (data, wait for its commit acknowledgement, then flag) does not.
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
"""

from ...hw.race import NEW_FLAG, OUTPUTS, WATCHDOG, Case, RaceTop, Step, row
from ...hw.ub_port import UBOp
from ...hw.validate import check_choice
from ...sw import dataflag
from ..backends import ComponentSpec, run
from ..output import waveform_dir
from . import Experiment, Param, register

__all__ = ["SCENARIOS", "race_top", "run_scenario", "run_catalog", "Races", "EXPERIMENT"]


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


SCENARIOS = {
    "torn_read": _torn,
    "flag_overtakes_data": _overtake,
    "sentinel_collision": _sentinel,
    "counter_reset_race": _counter,
}


async def _race_intent(bench):
    """Tick until both variants finish or time out; return their measured outputs."""
    for _ in range(WATCHDOG + 20):
        if all([await bench.get(f"{v}_done") or await bench.get(f"{v}_timeout")
                for v in ("unsafe", "safe")]):
            break
        await bench.tick()
    await bench.tick(2)
    return {v: {n: await bench.get(f"{v}_{n}") for n in OUTPUTS} for v in ("unsafe", "safe")}


def _describe(scenario, case, r):
    """(outcome text, race observed?) from one variant's measured outputs."""
    if r["timeout"]:
        waited = {"sentinel_collision": "block 0 leading 32 B == sentinel",
                  "counter_reset_race": "counter (block 2 word 0) to reach the threshold",
                  }.get(scenario, f"flag word (block {case.flag_block} word 0)")
        text = (f"watchdog at cycle {r['done_cycle']}: reader still polling {waited}; last value "
                f"0x{r['observed']:x}, ops done {r['ops_done']}, last write acked at cycle "
                f"{r['ack_cycle']}")
        return text, True
    if scenario in ("torn_read", "flag_overtakes_data"):
        if r["stale"]:
            return (f"reader saw flag 0x{r['observed']:x} then {r['stale']} stale payload words "
                    f"(cycle {r['done_cycle']})"), True
        return f"reader saw flag 0x{r['observed']:x} then an intact payload (cycle {r['done_cycle']})", False
    if scenario == "sentinel_collision":
        return f"arrival detected at cycle {r['done_cycle']}", False
    return (f"both operations completed (counter {r['observed']}, cycle {r['done_cycle']})",
            r["ops_done"] != 2)


def run_scenario(name, *, waveform=True):
    """Run one scenario; return its catalog row (a dict, see module docstring)."""
    check_choice("scenario", name, SCENARIOS)
    spec = ComponentSpec("epfabric.sim.experiments.races:race_top", {"scenario": name})
    result, _cycles = run(spec, _race_intent, simulator="pysim",
                          waveform=name if waveform else None)
    unsafe_text, unsafe_race = _describe(name, SCENARIOS[name](False), result["unsafe"])
    safe_text, safe_race = _describe(name, SCENARIOS[name](True), result["safe"])
    return {"scenario": name, "unsafe_outcome": unsafe_text, "safe_outcome": safe_text,
            "race_observed_unsafe": unsafe_race, "race_observed_safe": safe_race,
            "vcd": str(waveform_dir() / f"{name}.vcd") if waveform else None,
            "measured": result}


def run_catalog(names=None, *, waveform=True):
    """Run the given scenarios (default: all) and return their rows."""
    return [run_scenario(n, waveform=waveform) for n in (names or list(SCENARIOS))]


def race_top(*, scenario):
    """JSON-facing factory: the :class:`~epfabric.hw.race.RaceTop` of ``scenario``."""
    check_choice("scenario", scenario, SCENARIOS)
    return RaceTop(unsafe=SCENARIOS[scenario](False), safe=SCENARIOS[scenario](True))


class Races(Experiment):
    """One row per scenario: what the unsafe and the safe variant did, and the waveform."""

    name = "races"
    title = "synchronization races: unsafe vs safe variant of each, measured, with waveforms"
    paper = "UBEP §3.4; INC-MoE §3.1"
    headline = ("an atomic 512 B write never tears; data-as-flag needs a fence, a reserved "
                "sentinel or cumulative counters to be safe")
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
                                  "race_observed_safe", "vcd")}

    def verdict(self, rows):
        bad = [r["scenario"] for r in rows
               if not r["race_observed_unsafe"] or r["race_observed_safe"]]
        if bad:
            return False, f"expected race missing or safe variant failing in {', '.join(bad)}"
        return True, (f"all {len(rows)} unsafe variants show their race "
                      f"({', '.join(r['scenario'] for r in rows)}); no safe variant does")

    def plot(self, rows, path):
        from ..results.plot import table_figure
        table_figure(self, rows, path, ["scenario", "unsafe_outcome", "safe_outcome"])

    def format(self, rows):
        header = ("scenario", "unsafe outcome", "safe outcome", "waveform")
        table = [(r["scenario"], r["unsafe_outcome"], r["safe_outcome"], str(r["vcd"]))
                 for r in rows]
        return "\n".join(" | ".join(line) for line in [header, *table])


EXPERIMENT = register(Races())
