"""Race tops: a UB memory, a scripted writer and a hardware reader, unsafe and safe side by side.

The synchronization-race catalog (``epfabric races``) builds one of these
per scenario. Each :class:`RaceCase` holds

* a :class:`~epfabric.hw.ub_port.UBMemory` (UB port + HBM slice, read
  latency 1 cycle; read port 0 for the reader, read port 1 a monitor that
  re-reads the watched block every cycle so the waveform shows memory
  contents),
* a writer: a fixed script of UB requests (:class:`Step`) sent over two
  fabric lanes — a short one (:data:`FAST_LANE` cycles, small flag/count
  writes) and a long one (:data:`SLOW_LANE` cycles, bulk data) — modelling UB
  memory semantics, which do not order a later small write behind an earlier
  bulk one (UBEP §3.4 opening paragraph),
* a reader/poller FSM whose state is the ``reader_state`` signal
  (:class:`ReaderState`): ``flag_then_read`` (poll a flag word, then read the
  payload), ``sentinel`` (poll until the block's leading 32 B differ from a
  sentinel) or ``counter`` (poll a completion counter against thresholds),
* a watchdog that stops a reader waiting longer than ``watchdog`` cycles.

:class:`RaceTop` puts the ``unsafe`` and the ``safe`` variant of one scenario
side by side. What each scenario scripts is the catalog's business
(:mod:`epfabric.sim.experiments.races`); this module only builds hardware
from a :class:`Case` of integers.
"""

from dataclasses import dataclass

from amaranth.hdl import Module, Signal
from amaranth.lib import enum, wiring
from amaranth.lib.wiring import Out

from .ub_port import UBMemory, UBOp
from .validate import check_choice, check_int

__all__ = ["Step", "Case", "ReaderState", "RaceCase", "RaceTop", "row", "READERS",
           "FAST_LANE", "SLOW_LANE", "NEW_FLAG", "WATCHDOG"]

WATCHDOG = 120          # cycles a reader may wait before the watchdog fires
FAST_LANE = 1           # cycles: flag / count path
SLOW_LANE = 6           # cycles: bulk data path
NEW_FLAG = 0x0D0D       # TFF flag value (UBEP Figure 6(a) "F==0x0d0d")
READERS = ("flag_then_read", "sentinel", "counter")
#: Outputs of a RaceCase (and, prefixed ``unsafe_``/``safe_``, of a RaceTop).
OUTPUTS = ("done", "timeout", "stale", "observed", "done_cycle", "ack_cycle", "ops_done")


def row(words):
    """A memory row from 32-bit ``words`` (word 0 in the low bits)."""
    return sum((w & 0xFFFFFFFF) << (32 * k) for k, w in enumerate(words))


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

    def __post_init__(self):
        check_choice("reader", self.reader, READERS)
        for name in ("flag_block", "data_block", "start"):
            check_int(name, getattr(self, name), 0)
        for k, step in enumerate(self.steps):
            if not isinstance(step, Step):
                raise TypeError(f"steps[{k}] must be a Step, not {step!r}")


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
    case : Case
        Memory contents, writer script and reader of this variant.

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

    def __init__(self, *, case):
        if not isinstance(case, Case):
            raise TypeError(f"case must be a Case, not {case!r}")
        self.case = c = case
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
                            sentinel = row(list(c.sentinel))
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
    """The ``unsafe`` and ``safe`` variants of one scenario, side by side.

    Parameters
    ----------
    unsafe, safe : Case
        The two variants; every output of :class:`RaceCase` appears twice,
        prefixed ``unsafe_`` and ``safe_``.
    """

    def __init__(self, *, unsafe, safe):
        self.unsafe = RaceCase(case=unsafe)
        self.safe = RaceCase(case=safe)
        sig = {}
        for name in OUTPUTS:
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
        for name in OUTPUTS:
            m.d.comb += [getattr(self, f"unsafe_{name}").eq(getattr(self.unsafe, name)),
                         getattr(self, f"safe_{name}").eq(getattr(self.safe, name))]
        return m


