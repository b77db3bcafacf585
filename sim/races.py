"""Catalog of synchronization races, each a small hardware top you can watch.

``epfabric races [--scenario NAME] [--json FILE]`` runs every scenario on
Amaranth's simulator, writes ``waveforms/<scenario>.vcd`` + ``.gtkw`` and
prints what the unsafe and the safe variant did. Each scenario top holds two
independent copies side by side — ``unsafe`` and ``safe`` — each made of

* a :class:`~epfabric.hw.ub_port.UBMemory` (UB port + HBM slice, read latency
  1 cycle; read port 0 for the reader, read port 1 a monitor that re-reads
  the watched block every cycle so the waveform shows memory contents),
* a writer: a fixed script of UB requests sent over two fabric lanes — a
  short one (1 cycle, small flag/count writes) and a long one (6 cycles, bulk
  data) — modelling UB memory semantics, which do not order a later small
  write behind an earlier bulk one (UBEP §3.4 opening paragraph),
* a reader/poller FSM whose state is the ``reader_state`` signal,
* a watchdog that stops a reader waiting longer than ``WATCHDOG`` cycles and
  reports what it was waiting on.

Outcomes are measured from the simulation (stale word counts, timeouts,
counter values), never written down in advance.

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

import json
from dataclasses import dataclass
from pathlib import Path

from amaranth.hdl import Module, Signal
from amaranth.lib import enum, wiring
from amaranth.lib.wiring import Out

from ..hw.ub_port import UBMemory, UBOp
from ..sw import dataflag
from .harness import ComponentSpec, run, waveform_dir

__all__ = ["SCENARIOS", "RaceCase", "RaceTop", "run_scenario", "run_catalog",
           "add_arguments", "main", "WATCHDOG"]

WATCHDOG = 120          # cycles a reader may wait before the watchdog fires
FAST_LANE = 1           # cycles: flag / count path
SLOW_LANE = 6           # cycles: bulk data path
NEW_FLAG = 0x0D0D       # TFF flag value (UBEP Figure 6(a) "F==0x0d0d")


@dataclass(frozen=True)
class Step:
    """One writer request: issue at cycle ``at`` (or later) on ``lane``."""
    at: int
    lane: int                # 0 short lane, 1 long lane
    op: UBOp
    addr: int
    word: int = 0
    data: int = 0
    fence: bool = False      # wait until every earlier request is acknowledged


@dataclass(frozen=True)
class Case:
    """One variant of a scenario: memory, writer script, reader program."""
    data_bytes: int
    non_atomic: bool
    init: tuple
    steps: tuple
    reader: str              # "flag_then_read", "sentinel", "counter"
    flag_block: int = 0
    data_block: int = 0
    expect: int = 0          # expected flag / data row
    sentinel: tuple = ()
    counter_reset: bool = False
    start: int = 0           # cycle the reader starts polling


def _row(words):
    return sum((w & 0xFFFFFFFF) << (32 * k) for k, w in enumerate(words))


def _torn(safe):
    words = 32                                      # data_bytes 128: flag field + 96 B payload
    old = _row([0] + [0] * 7 + [0xAAAA0000 | k for k in range(8, words)])
    new = _row([NEW_FLAG] + [0] * 7 + [0xBBBB0000 | k for k in range(8, words)])
    return Case(data_bytes=128, non_atomic=not safe, init=(old,),
                steps=(Step(4, 0, UBOp.BLOCK_WRITE, 0, data=new),),
                reader="flag_then_read", flag_block=0, data_block=0, expect=new)


def _overtake(safe):
    new = _row([0xCCCC0000 | k for k in range(16)])
    old = _row([0xAAAA0000 | k for k in range(16)])
    return Case(data_bytes=64, non_atomic=False, init=(0, old),
                steps=(Step(4, 1, UBOp.BLOCK_WRITE, 1, data=new),
                       Step(5, 0, UBOp.WORD_WRITE, 0, 0, NEW_FLAG, fence=safe)),
                reader="flag_then_read", flag_block=0, data_block=1, expect=new)


def _sentinel(safe):
    sentinel = dataflag.RESERVED_SENTINEL if safe else dataflag.ZERO_SENTINEL
    sentinel = tuple(int(w) for w in sentinel)
    # the payload: an all-zero token (e.g. a padded row); leading 32 B are zero
    payload = _row([0] * 8 + [0x5A5A0000 | k for k in range(8, 16)])
    return Case(data_bytes=64, non_atomic=False, init=(_row(list(sentinel)),),
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


class ReaderState(enum.Enum, shape=4):
    """Reader/poller FSM state (shown in the waveform)."""
    START = 0
    POLL = 1        # request the flag / sentinel / counter
    POLL_WAIT = 2
    READ = 3        # request the payload block
    READ_WAIT = 4
    RESET = 5       # write 0 to the counter (unsafe counter scenario)
    RESET_WAIT = 6
    DONE = 7
    TIMEOUT = 8     # watchdog fired


class RaceCase(wiring.Component):
    """Port + HBM + writer + reader + watchdog for one variant of a scenario.

    Parameters
    ----------
    scenario : str
        A key of :data:`SCENARIOS`.
    safe : bool
        Build the safe variant.

    Attributes
    ----------
    done, timeout : Out(1)
        The reader finished / the watchdog fired.
    stale : Out(8)
        Payload words the reader found different from what was written.
    observed : Out(32)
        Last polled word (flag, first sentinel word or counter).
    done_cycle, ack_cycle : Out(16)
        Cycle the reader finished (or the watchdog fired); cycle of the last
        write acknowledgement.
    ops_done : Out(2)
        Operations the counter reader completed.
    """

    def __init__(self, *, scenario, safe):
        if scenario not in SCENARIOS:
            raise ValueError(f"scenario must be one of {', '.join(SCENARIOS)}, not {scenario!r}")
        self.scenario = scenario
        self.safe = bool(safe)
        self.case = SCENARIOS[scenario](self.safe)
        c = self.case
        self.mem = UBMemory(blocks=4, data_bytes=c.data_bytes, non_atomic=c.non_atomic,
                            beat_bytes=32, latency=1, read_ports=2, init=list(c.init))
        self.words = c.data_bytes // 4
        super().__init__({
            "done": Out(1), "timeout": Out(1), "stale": Out(8), "observed": Out(32),
            "done_cycle": Out(16), "ack_cycle": Out(16), "ops_done": Out(2),
        })
        self.reader_state = Signal(ReaderState, name="reader_state")
        self.mem_flag = Signal(32, name="mem_flag")
        self.mem_payload = [Signal(32, name=f"mem_payload{i}") for i in range(2)]
        self.lane_valid = [Signal(name=f"lane{i}_valid") for i in range(2)]
        self.watchdog = Signal(16, name="watchdog")

    def gtkw_traces(self):
        return [self.reader_state, self.observed, self.mem_flag, *self.mem_payload,
                self.mem.commit_valid, self.mem.commit_beat, self.mem.i_req.valid,
                *self.lane_valid, self.stale, self.done, self.timeout, self.watchdog]

    def elaborate(self, platform):
        m = Module()
        c = self.case
        m.submodules.mem = mem = self.mem
        cycle = Signal(16)
        m.d.sync += cycle.eq(cycle + 1)

        # monitor: read the watched block every cycle (memory contents in the waveform)
        watched = c.data_block
        m.d.comb += [mem.read[1].req.valid.eq(1), mem.read[1].req.payload.addr.eq(watched)]
        with m.If(mem.read[1].resp.valid):
            blk = mem.read[1].resp.payload.block
            m.d.sync += [self.mem_flag.eq(blk[:32]),
                         self.mem_payload[0].eq(blk.word_select(8 if self.words > 8 else 1, 32)),
                         self.mem_payload[1].eq(blk.word_select(self.words - 1, 32))]

        # writer: scripted steps onto two single-slot delay lanes
        layout = mem.i_req.payload.shape()
        lanes = []
        for i, latency in enumerate((FAST_LANE, SLOW_LANE)):
            lane = {"valid": self.lane_valid[i], "count": Signal(8, name=f"lane{i}_count"),
                    "req": Signal(layout, name=f"lane{i}_req"), "latency": latency}
            lanes.append(lane)
        step = Signal(range(len(c.steps) + 1))
        sent = Signal(8)
        acked = Signal(8)
        with m.Switch(step):
            for k, s in enumerate(c.steps):
                with m.Case(k):
                    lane = lanes[s.lane]
                    ready = (cycle >= s.at) & ~lane["valid"]
                    if s.fence:
                        ready &= acked == sent
                    with m.If(ready):
                        m.d.sync += [lane["valid"].eq(1), lane["count"].eq(lane["latency"]),
                                     lane["req"].eq(layout.const({"op": s.op, "addr": s.addr,
                                                                   "word": s.word, "data": s.data})),
                                     step.eq(step + 1), sent.eq(sent + 1)]

        # merge: reader's own writes first, then the short lane, then the long one
        reader_req_valid = Signal()
        reader_req = Signal(layout)
        arrived = [l["valid"] & (l["count"] == 0) for l in lanes]
        for l in lanes:
            with m.If(l["valid"] & (l["count"] != 0)):
                m.d.sync += l["count"].eq(l["count"] - 1)
        with m.If(reader_req_valid):
            m.d.comb += [mem.i_req.valid.eq(1), mem.i_req.payload.eq(reader_req)]
        with m.Elif(arrived[0]):
            m.d.comb += [mem.i_req.valid.eq(1), mem.i_req.payload.eq(lanes[0]["req"])]
            with m.If(mem.i_req.ready):
                m.d.sync += lanes[0]["valid"].eq(0)
        with m.Elif(arrived[1]):
            m.d.comb += [mem.i_req.valid.eq(1), mem.i_req.payload.eq(lanes[1]["req"])]
            with m.If(mem.i_req.ready):
                m.d.sync += lanes[1]["valid"].eq(0)
        m.d.comb += mem.o_resp.ready.eq(1)
        reader_acked = Signal()
        with m.If(mem.o_resp.valid):
            with m.If(mem.o_resp.payload.op == UBOp.WORD_WRITE):
                m.d.comb += reader_acked.eq(c.counter_reset)
            with m.If(~reader_acked):
                m.d.sync += [acked.eq(acked + 1), self.ack_cycle.eq(cycle)]

        # reader / poller
        st = self.reader_state
        rd = mem.read[0]
        resp = rd.resp.payload
        epoch = Signal(2)
        m.d.comb += self.ops_done.eq(epoch)
        m.d.sync += self.watchdog.eq(self.watchdog + 1)
        with m.If((st != ReaderState.DONE) & (st != ReaderState.TIMEOUT)
                  & (self.watchdog >= WATCHDOG)):
            m.d.sync += [st.eq(ReaderState.TIMEOUT), self.done_cycle.eq(cycle)]
        with m.Else():
            with m.Switch(st):
                with m.Case(ReaderState.START):
                    with m.If(cycle >= c.start):
                        m.d.sync += st.eq(ReaderState.POLL)
                with m.Case(ReaderState.POLL):
                    poll_block = c.flag_block if c.reader == "flag_then_read" else c.data_block
                    m.d.comb += [rd.req.valid.eq(1), rd.req.payload.addr.eq(poll_block),
                                 rd.req.payload.word.eq(0)]
                    m.d.sync += st.eq(ReaderState.POLL_WAIT)
                with m.Case(ReaderState.POLL_WAIT):
                    with m.If(rd.resp.valid):
                        m.d.sync += [self.observed.eq(resp.word), st.eq(ReaderState.POLL)]
                        if c.reader == "flag_then_read":
                            with m.If(resp.word == NEW_FLAG):
                                m.d.sync += st.eq(ReaderState.READ)
                        elif c.reader == "sentinel":
                            sentinel = _row(list(c.sentinel))
                            with m.If(resp.block[:256] != sentinel):
                                m.d.sync += [st.eq(ReaderState.READ)]
                        else:   # counter: operation `epoch` needs 2 signals
                            threshold = Signal(32)
                            if c.counter_reset:
                                m.d.comb += threshold.eq(2)
                            else:
                                m.d.comb += threshold.eq((epoch + 1) * 2)
                            with m.If(resp.word >= threshold):
                                m.d.sync += epoch.eq(epoch + 1)
                                with m.If(epoch == 1):
                                    m.d.sync += [st.eq(ReaderState.DONE),
                                                 self.done_cycle.eq(cycle), self.done.eq(1)]
                                with m.Else():
                                    m.d.sync += st.eq(ReaderState.RESET if c.counter_reset
                                                      else ReaderState.POLL)
                with m.Case(ReaderState.READ):
                    m.d.comb += [rd.req.valid.eq(1), rd.req.payload.addr.eq(c.data_block)]
                    m.d.sync += st.eq(ReaderState.READ_WAIT)
                with m.Case(ReaderState.READ_WAIT):
                    with m.If(rd.resp.valid):
                        first = 8 if c.reader == "flag_then_read" and c.flag_block == c.data_block else 0
                        mismatches = [resp.block.word_select(k, 32) != ((c.expect >> (32 * k)) & 0xFFFFFFFF)
                                      for k in range(first, self.words)]
                        total = sum(x.as_unsigned() for x in mismatches) if mismatches else 0
                        m.d.sync += [self.stale.eq(total), st.eq(ReaderState.DONE),
                                     self.done_cycle.eq(cycle), self.done.eq(1)]
                with m.Case(ReaderState.RESET):
                    m.d.comb += [reader_req_valid.eq(1),
                                 reader_req.eq(layout.const({"op": UBOp.WORD_WRITE,
                                                             "addr": c.data_block, "word": 0,
                                                             "data": 0}))]
                    with m.If(mem.i_req.ready):
                        m.d.sync += st.eq(ReaderState.RESET_WAIT)
                with m.Case(ReaderState.RESET_WAIT):
                    with m.If(reader_acked):
                        m.d.sync += st.eq(ReaderState.POLL)
        m.d.comb += self.timeout.eq(st == ReaderState.TIMEOUT)
        return m


class RaceTop(wiring.Component):
    """The ``unsafe`` and ``safe`` variants of one scenario, side by side."""

    def __init__(self, *, scenario):
        self.unsafe = RaceCase(scenario=scenario, safe=False)
        self.safe = RaceCase(scenario=scenario, safe=True)
        sig = {}
        for name in ("done", "timeout", "stale", "observed", "done_cycle", "ack_cycle",
                     "ops_done"):
            shape = self.unsafe.signature.members[name].shape
            sig[f"unsafe_{name}"] = Out(shape)
            sig[f"safe_{name}"] = Out(shape)
        super().__init__(sig)

    def gtkw_traces(self):
        return [*self.unsafe.gtkw_traces(), *self.safe.gtkw_traces()]

    def elaborate(self, platform):
        m = Module()
        m.submodules.unsafe = self.unsafe
        m.submodules.safe = self.safe
        for name in ("done", "timeout", "stale", "observed", "done_cycle", "ack_cycle",
                     "ops_done"):
            m.d.comb += [getattr(self, f"unsafe_{name}").eq(getattr(self.unsafe, name)),
                         getattr(self, f"safe_{name}").eq(getattr(self.safe, name))]
        return m


async def _race_intent(bench):
    """Tick until both variants finish or time out; return their measured outputs."""
    names = ("done", "timeout", "stale", "observed", "done_cycle", "ack_cycle", "ops_done")
    for _ in range(WATCHDOG + 20):
        if all([await bench.get(f"{v}_done") or await bench.get(f"{v}_timeout")
                for v in ("unsafe", "safe")]):
            break
        await bench.tick()
    await bench.tick(2)
    return {v: {n: await bench.get(f"{v}_{n}") for n in names} for v in ("unsafe", "safe")}


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
    if name not in SCENARIOS:
        raise ValueError(f"scenario must be one of {', '.join(SCENARIOS)}, not {name!r}")
    spec = ComponentSpec("epfabric.sim.races:RaceTop", {"scenario": name})
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


def add_arguments(parser):
    parser.add_argument("--scenario", action="append", choices=list(SCENARIOS),
                        help="run only this scenario (repeatable; default: all)")
    parser.add_argument("--json", metavar="FILE", help="write the catalog as JSON")


def main(args):
    rows = run_catalog(args.scenario)
    header = ("scenario", "unsafe outcome", "safe outcome", "waveform")
    table = [(r["scenario"], r["unsafe_outcome"], r["safe_outcome"], r["vcd"]) for r in rows]
    for line in [header, *table]:
        print(" | ".join(line))
    if args.json:
        out = [{k: r[k] for k in ("scenario", "unsafe_outcome", "safe_outcome",
                                  "race_observed_unsafe", "race_observed_safe", "vcd")}
               for r in rows]
        Path(args.json).write_text(json.dumps(out, indent=2) + "\n")
    return 0
