"""Race tops: a UB memory, a scripted writer and a hardware reader, unsafe and safe side by side.

The synchronization-race catalog (``epfabric races``) builds one of these
per scenario. Each :class:`RaceCase` holds

* a :class:`~epfabric.hw.ub_port.UBMemory` (UB port + HBM slice, read
  latency 1 cycle; read port 0 for the reader, one more per watched block: a
  monitor that re-reads the block every cycle so the waveform shows memory
  contents — ``mem_*``, as a read issued the cycle before sees them, i.e.
  what the reader's own read returns in the same cycle),
* a writer: a fixed script of UB requests (:class:`Step`) sent over two
  fabric lanes — a short one (:data:`FAST_LANE` cycles, small flag/count
  writes) and a long one (:data:`SLOW_LANE` cycles, bulk data) — modelling UB
  memory semantics, which do not order a later small write behind an earlier
  bulk one (UBEP §3.4 opening paragraph),
* a reader/poller FSM whose state is the ``reader_state`` signal
  (:class:`ReaderState`), one of :data:`READERS`:

  ``flag_then_read``
      poll word 0 of the flag block until it equals ``flag``, then read the
      payload (TFF, or a separate flag word);
  ``sentinel``
      poll until the data block's leading 32 B differ from a sentinel (SP);
  ``counter``
      poll a completion counter against thresholds;
  ``checksum``
      Data-for-Checksum (UBEP §3.4, Figure 6(b)): poll word 0 of the checksum
      block until it equals ``flag`` (the epoch), latch word 1 (the checksum),
      then read the ``batch`` data blocks and sum their markers (the eight
      leading words of each block, mod 2**32) until the sum equals the
      checksum — re-reading the batch while it does not,

* a watchdog that stops a reader waiting longer than :data:`WATCHDOG` cycles.

Every variant also *measures* the cycle it first goes wrong (``wrong``,
``wrong_cycle``), in hardware:

============================  =================================================
reader                        goes wrong in the cycle ...
============================  =================================================
``flag_then_read``,           the payload read the reader consumes returns
``checksum``                  stale words (``stale`` > 0 one cycle later)
``sentinel``                  a poll issued after every write was acknowledged
                              still reads the sentinel: the arrival is missed
``counter``                   the reader's counter reset commits over a count
                              that already holds a signal of the next operation
============================  =================================================

:class:`RaceTop` puts the ``unsafe`` and the ``safe`` variant of one scenario
side by side. What each scenario scripts is the catalog's business
(:mod:`epfabric.sim.lab.experiments.races`); this module only builds hardware
from a :class:`Case` of integers.

Signal names
------------
Every signal a waveform shows is created in :meth:`RaceCase.__init__` with
its own name (:meth:`RaceCase.gtkw_traces` lists them in display order) and
driven from the variant's children, and :class:`RaceTop` exposes the two
variants' ports as its own interface instead of copying them, so a waveform of
a race top has no generated ``$N`` names for any of them:
``top.unsafe.reader_state``, ``top.safe.mem_flag``, ... A child's ports carry
its prefix (``w_`` the writer's, ``r_`` the reader's): seen from the variant,
where the ports of every child are named too, no two share a name.
"""

from dataclasses import dataclass

from amaranth.hdl import Cat, Elaboratable, Module, Signal
from amaranth.lib import enum, stream, wiring
from amaranth.lib.wiring import In, Out

from ...hw.hbm import ReadPortSignature
from ...hw.ub_port import UBMemory, UBOp, request_layout
from ...hw.validate import UserError, UserTypeError, check_choice, check_int

__all__ = ["Step", "Case", "ReaderState", "Watchdog", "ScriptedWriter", "Reader", "RaceCase",
           "RaceTop", "row", "READERS", "OUTPUTS",
           "FAST_LANE", "SLOW_LANE", "NEW_FLAG", "WATCHDOG", "BLOCKS", "NO_CYCLE"]

WATCHDOG = 120          # cycles a reader may wait before the watchdog fires
FAST_LANE = 1           # cycles: flag / count path
SLOW_LANE = 6           # cycles: bulk data path
NEW_FLAG = 0x0D0D       # TFF flag value (UBEP Figure 6(a) "F==0x0d0d")
BLOCKS = 4              # DataBlocks in a race top's UB memory
NO_CYCLE = 0xFFFF       # ``wrong_cycle`` of a variant that never went wrong
READERS = ("flag_then_read", "sentinel", "counter", "checksum")
#: Outputs of a RaceCase (and, as ``unsafe.NAME`` / ``safe.NAME``, of a RaceTop).
OUTPUTS = ("done", "timeout", "stale", "observed", "done_cycle", "ack_cycle", "ops_done",
           "wrong", "wrong_cycle")
#: Words of a block's Data-as-Flag field / DC marker (the leading 32 B).
FLAG_WORDS = 8


def row(words):
    """A memory row from 32-bit ``words`` (word 0 in the low bits)."""
    return sum((w & 0xFFFFFFFF) << (32 * k) for k, w in enumerate(words))


def marker(block_row):
    """DC marker of a memory row: its eight leading 32-bit words summed mod 2**32."""
    return sum((block_row >> (32 * k)) & 0xFFFFFFFF for k in range(FLAG_WORDS)) & 0xFFFFFFFF


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
    """One variant of a scenario: memory, writer script, reader program.

    ``expect`` is the row the reader should consume from ``data_block`` (an
    int), or one row per block of the batch ``data_block .. data_block +
    batch - 1`` (a tuple); ``flag`` is the word-0 value the ``flag_then_read``
    and ``checksum`` readers wait for.
    """
    data_bytes: int
    non_atomic: bool
    init: tuple
    steps: tuple
    reader: str              # one of READERS
    flag_block: int = 0
    data_block: int = 0
    expect: object = 0       # expected data row(s)
    sentinel: tuple = ()
    counter_reset: bool = False
    start: int = 0           # cycle the reader starts polling
    batch: int = 1           # data blocks the reader reads
    flag: int = NEW_FLAG     # word 0 of the flag block that releases the reader

    def __post_init__(self):
        check_choice("reader", self.reader, READERS)
        for name in ("flag_block", "data_block", "start", "flag"):
            check_int(name, getattr(self, name), 0)
        check_int("batch", self.batch, 1, BLOCKS)
        for name in ("flag_block", "data_block"):
            check_int(name, getattr(self, name), 0, BLOCKS - 1)
        if self.data_block + self.batch > BLOCKS:
            raise UserError(f"data_block + batch must be <= {BLOCKS}, not "
                            f"{self.data_block} + {self.batch}")
        if len(self.expects) != self.batch:
            raise UserError(f"expect must be one row or {self.batch} rows, not {self.expect!r}")
        for k, step in enumerate(self.steps):
            if not isinstance(step, Step):
                raise UserTypeError(f"steps[{k}] must be a Step, not {step!r}")

    @property
    def expects(self):
        """The expected rows, one per batch block."""
        return tuple(self.expect) if isinstance(self.expect, (tuple, list)) else (self.expect,)

    @property
    def poll_block(self):
        """The block the reader polls."""
        return self.flag_block if self.reader in ("flag_then_read", "checksum") else self.data_block


class ReaderState(enum.Enum, shape=4):
    """Reader/poller FSM state (shown by name in the waveform)."""
    START = 0
    POLL = 1        # request the flag / sentinel / counter / checksum
    POLL_WAIT = 2
    READ = 3        # request a payload block
    READ_WAIT = 4
    RESET = 5       # write 0 to the counter (unsafe counter scenario)
    RESET_WAIT = 6
    DONE = 7
    TIMEOUT = 8     # watchdog fired


def _word(blk, k):
    """32-bit word ``k`` of block row ``blk``."""
    return blk.word_select(k, 32)


def _block_marker(blk):
    """DC marker of block row ``blk``: its eight leading words summed mod 2**32."""
    return sum(_word(blk, k) for k in range(FLAG_WORDS))[:32]


class Watchdog(wiring.Component):
    """Cycles since reset, and whether a reader has waited too long.

    Parameters
    ----------
    limit : int
        Cycles after which ``expired`` rises (default :data:`WATCHDOG`).

    Attributes
    ----------
    count : Out(16)
        Cycles since reset.
    expired : Out(1)
        ``count >= limit``.
    """

    def __init__(self, *, limit=WATCHDOG):
        self.limit = check_int("limit", limit, 1, 0xFFFF)
        super().__init__({"count": Out(16), "expired": Out(1)})

    def elaborate(self, platform):
        m = Module()
        m.d.sync += self.count.eq(self.count + 1)
        m.d.comb += self.expired.eq(self.count >= self.limit)
        return m


class ScriptedWriter(wiring.Component):
    """The writer of a race variant: a fixed script of UB requests over two fabric lanes.

    Step ``k`` (:class:`Step`) waits for cycle ``at``, for its lane to be free and, with
    ``fence``, for every earlier request's acknowledgement; it then holds its lane for the
    lane's latency (:data:`FAST_LANE`, :data:`SLOW_LANE`: a single-slot delay line) and is
    offered on ``w_req``, the short lane's request before the long one's. The ports carry
    the prefix ``w_`` so that, seen from the variant, every signal has one name.

    Parameters
    ----------
    steps : sequence of Step
        The script, in issue order.
    data_bytes : int
        Modelled bytes of a block (the UB request layout).

    Attributes
    ----------
    w_cycle : In(16)
        Cycles since reset.
    w_ack : In(1)
        A request of the script is acknowledged this cycle.
    w_req : Out(stream.Signature(request_layout(...)))
        The request that has crossed its lane.
    w_lanes : Out(2)
        Lane ``i`` holds a request.
    w_all_acked : Out(1)
        Every request of the script has been acknowledged.

    Raises
    ------
    TypeError
        If a step is not a :class:`Step`.
    """

    def __init__(self, *, steps, data_bytes):
        self.steps = tuple(steps)
        for k, step in enumerate(self.steps):
            if not isinstance(step, Step):
                raise UserTypeError(f"steps[{k}] must be a Step, not {step!r}")
        layout = request_layout(blocks=BLOCKS, data_bytes=data_bytes)
        super().__init__({"w_cycle": In(16), "w_ack": In(1),
                          "w_req": Out(stream.Signature(layout)),
                          "w_lanes": Out(2), "w_all_acked": Out(1)})

    def elaborate(self, platform):
        m = Module()
        cycle, out = self.w_cycle, self.w_req
        layout = out.payload.shape()
        lanes = []
        for i, latency in enumerate((FAST_LANE, SLOW_LANE)):
            lanes.append({"valid": Signal(name=f"lane{i}_valid"),
                          "count": Signal(8, name=f"lane{i}_count"),
                          "req": Signal(layout, name=f"lane{i}_req"), "latency": latency})
        step = Signal(range(len(self.steps) + 1))
        sent = Signal(8)
        acked = Signal(8)
        with m.Switch(step):
            for k, s in enumerate(self.steps):
                with m.Case(k):
                    lane = lanes[s.lane]
                    ready = (cycle >= s.at) & ~lane["valid"]
                    if s.fence:
                        ready &= acked == sent
                    req = layout.const({"op": s.op, "addr": s.addr, "word": s.word,
                                        "data": s.data})
                    with m.If(ready):
                        m.d.sync += [lane["valid"].eq(1), lane["count"].eq(lane["latency"]),
                                     lane["req"].eq(req), step.eq(step + 1), sent.eq(sent + 1)]
        arrived = [l["valid"] & (l["count"] == 0) for l in lanes]
        for l in lanes:
            with m.If(l["valid"] & (l["count"] != 0)):
                m.d.sync += l["count"].eq(l["count"] - 1)
        with m.If(arrived[0]):          # the short lane first
            m.d.comb += [out.valid.eq(1), out.payload.eq(lanes[0]["req"])]
            with m.If(out.ready):
                m.d.sync += lanes[0]["valid"].eq(0)
        with m.Elif(arrived[1]):
            m.d.comb += [out.valid.eq(1), out.payload.eq(lanes[1]["req"])]
            with m.If(out.ready):
                m.d.sync += lanes[1]["valid"].eq(0)
        with m.If(self.w_ack):
            m.d.sync += acked.eq(acked + 1)
        m.d.comb += [self.w_lanes.eq(Cat(l["valid"] for l in lanes)),
                     self.w_all_acked.eq(acked == len(self.steps))]
        return m


class Reader(wiring.Component):
    """The hardware reader of a race variant: a poller FSM (:class:`ReaderState`).

    It runs the case's reader (one of :data:`READERS`, module docstring) on read port
    ``r_port`` of the UB memory, the counter reader's reset on ``r_write``, and says in which
    cycle the variant goes wrong (``r_wrong``; the counter reset's own check needs the
    memory's monitor and is the variant's). The ports carry the prefix ``r_`` so that, seen
    from the variant, every signal has one name.

    Parameters
    ----------
    case : Case
        The variant (reader, blocks, expected rows, flag, sentinel, start).

    Attributes
    ----------
    r_cycle : In(16)
        Cycles since reset.
    r_expired : In(1)
        The watchdog has fired: stop in ``TIMEOUT``.
    r_acked : In(1)
        The reader's own write (the counter reset) is acknowledged this cycle.
    r_all_acked : In(1)
        Every request of the writer's script has been acknowledged.
    r_port : Out(ReadPortSignature(...))
        Polls and payload reads.
    r_write : Out(stream.Signature(request_layout(...)))
        The counter reset (word 0 of ``data_block`` to 0).
    r_state : Out(ReaderState)
        The FSM state.
    r_observed, r_checksum, r_marker_sum : Out(32)
        Last polled word; latched checksum; marker sum of the last batch read.
    r_stale : Out(8)
        Payload words consumed that differ from the expected rows.
    r_done : Out(1)
        The reader finished.
    r_done_cycle : Out(16)
        The cycle it finished or the watchdog fired.
    r_ops_done : Out(2)
        Operations the counter reader completed.
    r_wrong : Out(1)
        The variant goes wrong in this cycle (the reader's cases of the module docstring).
    r_reset_probe : Out(1)
        The counter reset was accepted last cycle.

    Raises
    ------
    TypeError
        If ``case`` is not a :class:`Case`.
    """

    def __init__(self, *, case):
        if not isinstance(case, Case):
            raise UserTypeError(f"case must be a Case, not {case!r}")
        self.case = case
        self.words = case.data_bytes // 4
        super().__init__({
            "r_cycle": In(16), "r_expired": In(1), "r_acked": In(1), "r_all_acked": In(1),
            "r_port": Out(ReadPortSignature(blocks=BLOCKS, data_bytes=case.data_bytes)),
            "r_write": Out(stream.Signature(request_layout(blocks=BLOCKS,
                                                           data_bytes=case.data_bytes))),
            "r_state": Out(ReaderState), "r_observed": Out(32), "r_checksum": Out(32),
            "r_marker_sum": Out(32), "r_stale": Out(8), "r_done": Out(1), "r_done_cycle": Out(16),
            "r_ops_done": Out(2), "r_wrong": Out(1), "r_reset_probe": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        c = self.case
        cycle, st, rd = self.r_cycle, self.r_state, self.r_port
        resp = rd.resp.payload
        epoch = Signal(2)
        m.d.comb += self.r_ops_done.eq(epoch)
        idx = Signal(range(max(2, c.batch)))       # batch block being read
        partial = Signal(32)                       # marker sum of blocks 0 .. idx-1
        stale_acc = Signal(8)                      # stale words of blocks 0 .. idx-1
        done = [self.r_done_cycle.eq(cycle), self.r_done.eq(1)]
        m.d.sync += self.r_reset_probe.eq(0)
        with m.If((st != ReaderState.DONE) & (st != ReaderState.TIMEOUT) & self.r_expired):
            m.d.sync += [st.eq(ReaderState.TIMEOUT), self.r_done_cycle.eq(cycle)]
        with m.Else():
            with m.Switch(st):
                with m.Case(ReaderState.START):
                    with m.If(cycle >= c.start):
                        m.d.sync += st.eq(ReaderState.POLL)
                with m.Case(ReaderState.POLL):
                    m.d.comb += [rd.req.valid.eq(1), rd.req.payload.addr.eq(c.poll_block),
                                 rd.req.payload.word.eq(0)]
                    m.d.sync += st.eq(ReaderState.POLL_WAIT)
                with m.Case(ReaderState.POLL_WAIT):
                    with m.If(rd.resp.valid):
                        m.d.sync += [self.r_observed.eq(resp.word), st.eq(ReaderState.POLL)]
                        if c.reader in ("flag_then_read", "checksum"):
                            with m.If(resp.word == c.flag):
                                m.d.sync += [st.eq(ReaderState.READ), idx.eq(0), partial.eq(0),
                                             stale_acc.eq(0),
                                             self.r_checksum.eq(_word(resp.block, 1))]
                        elif c.reader == "sentinel":
                            sentinel = row(list(c.sentinel))
                            with m.If(resp.block[:32 * FLAG_WORDS] != sentinel):
                                m.d.sync += [st.eq(ReaderState.READ), idx.eq(0),
                                             stale_acc.eq(0)]
                            with m.Elif(self.r_all_acked):
                                # every write is acknowledged, yet no arrival: missed
                                m.d.comb += self.r_wrong.eq(1)
                        else:   # counter: operation `epoch` needs 2 signals
                            threshold = Signal(32)
                            if c.counter_reset:
                                m.d.comb += threshold.eq(2)
                            else:
                                m.d.comb += threshold.eq((epoch + 1) * 2)
                            with m.If(resp.word >= threshold):
                                m.d.sync += epoch.eq(epoch + 1)
                                with m.If(epoch == 1):
                                    m.d.sync += [st.eq(ReaderState.DONE), *done]
                                with m.Else():
                                    m.d.sync += st.eq(ReaderState.RESET if c.counter_reset
                                                      else ReaderState.POLL)
                with m.Case(ReaderState.READ):
                    m.d.comb += [rd.req.valid.eq(1), rd.req.payload.addr.eq(c.data_block + idx)]
                    m.d.sync += st.eq(ReaderState.READ_WAIT)
                with m.Case(ReaderState.READ_WAIT):
                    with m.If(rd.resp.valid):
                        mism = self._stale_words(m, resp.block, idx)
                        stale = (stale_acc + mism)[:8]
                        total = (partial + _block_marker(resp.block))[:32]
                        finish = [st.eq(ReaderState.DONE), self.r_stale.eq(stale), *done]
                        with m.If(idx == c.batch - 1):
                            if c.reader == "checksum":
                                m.d.sync += self.r_marker_sum.eq(total)
                                with m.If(total == self.r_checksum):
                                    m.d.sync += finish
                                    m.d.comb += self.r_wrong.eq(stale != 0)
                                with m.Else():      # not all there yet: sum the batch again
                                    m.d.sync += [st.eq(ReaderState.READ), idx.eq(0),
                                                 partial.eq(0), stale_acc.eq(0)]
                            else:
                                m.d.sync += finish
                                m.d.comb += self.r_wrong.eq(stale != 0)
                        with m.Else():
                            m.d.sync += [st.eq(ReaderState.READ), idx.eq(idx + 1),
                                         partial.eq(total), stale_acc.eq(stale)]
                with m.Case(ReaderState.RESET):
                    m.d.comb += [self.r_write.valid.eq(1),
                                 self.r_write.payload.eq(self.r_write.payload.shape().const(
                                     {"op": UBOp.WORD_WRITE, "addr": c.data_block, "word": 0,
                                      "data": 0}))]
                    with m.If(self.r_write.ready):
                        m.d.sync += [st.eq(ReaderState.RESET_WAIT), self.r_reset_probe.eq(1)]
                with m.Case(ReaderState.RESET_WAIT):
                    with m.If(self.r_acked):
                        m.d.sync += st.eq(ReaderState.POLL)
        return m

    def _stale_words(self, m, block, idx):
        """Words of batch block ``idx`` read as ``block`` that differ from its expected row
        (TFF: the flag field is not payload)."""
        c = self.case
        first = FLAG_WORDS if c.reader == "flag_then_read" and c.flag_block == c.data_block else 0
        mism = Signal(8)
        with m.Switch(idx):
            for k, expect in enumerate(c.expects):
                with m.Case(k):
                    diff = [_word(block, w) != ((expect >> (32 * w)) & 0xFFFFFFFF)
                            for w in range(first, self.words)]
                    m.d.comb += mism.eq(sum(d.as_unsigned() for d in diff) if diff else 0)
        return mism


class RaceCase(wiring.Component):
    """Port + HBM + writer + reader + watchdog for one variant of a scenario.

    The UB memory, the :class:`ScriptedWriter`, the :class:`Reader` and the
    :class:`Watchdog` are children; the variant counts cycles, merges the reader's and the
    writer's requests into the memory (the reader's first), watches the blocks the
    waveform shows (monitor read ports), times when the variant first goes wrong, and
    shows its children's ports under the names of the module docstring.

    Parameters
    ----------
    case : Case
        Memory contents, writer script and reader of this variant.

    Attributes
    ----------
    done, timeout : Out(1)
        The reader finished / the watchdog fired.
    stale : Out(8)
        Payload words the reader consumed that differ from what was written.
    observed : Out(32)
        Last polled word (flag, first sentinel word, counter or epoch).
    done_cycle, ack_cycle : Out(16)
        Cycle the reader finished (or the watchdog fired); cycle of the last
        write acknowledgement.
    ops_done : Out(2)
        Operations the counter reader completed.
    wrong : Out(1)
        The variant went wrong (see the module docstring), from the cycle
        after ``wrong_cycle`` on.
    wrong_cycle : Out(16)
        The cycle it first went wrong; :data:`NO_CYCLE` if it never did.

    Cycles count from 0 at reset (``cycle``, one per clock).
    """

    def __init__(self, *, case):
        if not isinstance(case, Case):
            raise UserTypeError(f"case must be a Case, not {case!r}")
        self.case = c = case
        self.words = c.data_bytes // 4
        # the reader's read port, then one monitor per watched block
        self.watched = [c.poll_block] + [c.data_block + k for k in range(c.batch)
                                         if c.data_block + k != c.poll_block]
        # built here, not in elaborate: its commit_beat port sizes the displayed ub_beat
        self.mem = UBMemory(blocks=BLOCKS, data_bytes=c.data_bytes, non_atomic=c.non_atomic,
                            beat_bytes=32, latency=1, read_ports=1 + len(self.watched),
                            init=list(c.init))
        super().__init__({
            "done": Out(1), "timeout": Out(1), "stale": Out(8), "observed": Out(32),
            "done_cycle": Out(16), "ack_cycle": Out(16), "ops_done": Out(2),
            "wrong": Out(1), "wrong_cycle": Out(16, init=NO_CYCLE),
        })
        # everything a waveform shows, named here (see the module docstring)
        self.cycle = Signal(16, name="cycle")
        self.reader_state = Signal(ReaderState, name="reader_state")
        self.rd_valid = Signal(name="rd_valid")
        self.mem_flag = Signal(32, name="mem_flag")
        self.mem_payload = [Signal(32, name=f"mem_payload{i}") for i in range(2)]
        self.mem_checksum = Signal(32, name="mem_checksum")
        self.mem_marker = [Signal(32, name=f"mem_marker{k}") for k in range(c.batch)]
        self.checksum = Signal(32, name="checksum")
        self.marker_sum = Signal(32, name="marker_sum")
        self.lane_valid = [Signal(name=f"lane{i}_valid") for i in range(2)]
        self.ub_valid = Signal(name="ub_valid")
        self.ub_op = Signal(UBOp, name="ub_op")
        self.ub_addr = Signal(range(BLOCKS), name="ub_addr")
        self.ub_commit = Signal(name="ub_commit")
        self.ub_beat = Signal.like(self.mem.commit_beat, name="ub_beat")
        self.watchdog = Signal(16, name="watchdog")

    def gtkw_traces(self):
        """The signals a waveform of this variant shows, in display order."""
        c = self.case
        reader = [self.reader_state, self.rd_valid, self.observed]
        if c.reader == "checksum":
            reader += [self.checksum, self.marker_sum]
        reader += [self.stale, self.wrong, self.done, self.timeout]
        if c.reader == "counter":
            reader.append(self.ops_done)
        memory = [self.mem_flag]
        if c.reader == "checksum":
            memory += [self.mem_checksum, *self.mem_marker]
        memory += self.mem_payload
        writer = [*self.lane_valid, self.ub_valid, self.ub_op, self.ub_addr, self.ub_commit,
                  self.ub_beat]
        return [self.cycle, *reader, *memory, *writer, self.watchdog]

    def elaborate(self, platform):
        m = Module()
        c = self.case
        m.submodules.mem = mem = self.mem
        m.submodules.writer = writer = ScriptedWriter(steps=c.steps, data_bytes=c.data_bytes)
        m.submodules.reader = reader = Reader(case=c)
        # not "watchdog": the displayed counter has that name in this scope
        m.submodules.wdt = wdt = Watchdog(limit=WATCHDOG)
        cycle = self.cycle
        m.d.sync += cycle.eq(cycle + 1)

        # monitors: read every watched block every cycle (memory contents in the waveform)
        monitor = {}
        for i, block in enumerate(self.watched):
            port = mem.read[1 + i]
            m.d.comb += [port.req.valid.eq(1), port.req.payload.addr.eq(block)]
            monitor[block] = port.resp

        # Shown as answered (combinationally): the block as a read issued one cycle
        # earlier sees it, i.e. exactly what the reader's own read returns this cycle.
        payload_word = FLAG_WORDS if self.words > FLAG_WORDS else 1
        poll = monitor[c.poll_block]
        with m.If(poll.valid):
            m.d.comb += [self.mem_flag.eq(_word(poll.payload.block, 0)),
                         self.mem_checksum.eq(_word(poll.payload.block, 1))]
        shown = ([(c.data_block, payload_word), (c.data_block, self.words - 1)] if c.batch == 1
                 else [(c.data_block + k, payload_word) for k in range(2)])
        for sig, (block, k) in zip(self.mem_payload, shown):
            with m.If(monitor[block].valid):
                m.d.comb += sig.eq(_word(monitor[block].payload.block, k))
        for k, sig in enumerate(self.mem_marker):
            resp = monitor[c.data_block + k]
            with m.If(resp.valid):
                m.d.comb += sig.eq(_block_marker(resp.payload.block))

        # requests: the reader's own writes first, then the writer's (short lane, long lane)
        with m.If(reader.r_write.valid):
            m.d.comb += [mem.i_req.valid.eq(1), mem.i_req.payload.eq(reader.r_write.payload),
                         reader.r_write.ready.eq(mem.i_req.ready)]
        with m.Else():
            m.d.comb += [mem.i_req.valid.eq(writer.w_req.valid),
                         mem.i_req.payload.eq(writer.w_req.payload),
                         writer.w_req.ready.eq(mem.i_req.ready)]
        m.d.comb += [mem.o_resp.ready.eq(1),
                     self.ub_valid.eq(mem.i_req.valid),
                     self.ub_op.eq(mem.i_req.payload.op),
                     self.ub_addr.eq(mem.i_req.payload.addr),
                     self.ub_commit.eq(mem.commit_valid),
                     self.ub_beat.eq(mem.commit_beat)]
        reader_acked = Signal()
        with m.If(mem.o_resp.valid):
            with m.If(mem.o_resp.payload.op == UBOp.WORD_WRITE):
                m.d.comb += reader_acked.eq(c.counter_reset)
            with m.If(~reader_acked):
                m.d.comb += writer.w_ack.eq(1)
                m.d.sync += self.ack_cycle.eq(cycle)

        wiring.connect(m, reader.r_port, mem.read[0])
        m.d.comb += [writer.w_cycle.eq(cycle), reader.r_cycle.eq(cycle),
                     reader.r_expired.eq(wdt.expired), reader.r_acked.eq(reader_acked),
                     reader.r_all_acked.eq(writer.w_all_acked)]
        m.d.comb += [self.reader_state.eq(reader.r_state), self.rd_valid.eq(mem.read[0].resp.valid),
                     self.observed.eq(reader.r_observed), self.checksum.eq(reader.r_checksum),
                     self.marker_sum.eq(reader.r_marker_sum), self.stale.eq(reader.r_stale),
                     self.done.eq(reader.r_done), self.done_cycle.eq(reader.r_done_cycle),
                     self.ops_done.eq(reader.r_ops_done),
                     self.timeout.eq(reader.r_state == ReaderState.TIMEOUT),
                     self.watchdog.eq(wdt.count),
                     *(v.eq(writer.w_lanes[i]) for i, v in enumerate(self.lane_valid))]

        # the first cycle this variant goes wrong (module docstring table)
        wrong_now = Signal()
        wrong_at = Signal(16)
        m.d.comb += [wrong_now.eq(reader.r_wrong), wrong_at.eq(cycle)]
        if c.reader == "counter":
            # The reset committed last cycle; the monitor's answer now is the counter
            # as it was just before (HBM reads see the writes of earlier cycles only).
            # Above the 2 signals the reader consumed, it erased the next operation's.
            before = monitor[c.data_block]
            with m.If(reader.r_reset_probe & before.valid
                      & (_word(before.payload.block, 0) > 2)):
                m.d.comb += [wrong_now.eq(1), wrong_at.eq(cycle - 1)]
        with m.If(wrong_now & ~self.wrong):
            m.d.sync += [self.wrong.eq(1), self.wrong_cycle.eq(wrong_at)]
        return m


class RaceTop(Elaboratable):
    """The ``unsafe`` and ``safe`` variants of one scenario, side by side.

    Its interface is the two :class:`RaceCase` themselves (``unsafe.done``,
    ``safe.wrong_cycle``, ...): no copies, so every signal has one name.

    Parameters
    ----------
    unsafe, safe : Case
        The two variants.
    """

    def __init__(self, *, unsafe, safe):
        self.unsafe = RaceCase(case=unsafe)
        self.safe = RaceCase(case=safe)

    @property
    def signature(self):
        return wiring.Signature({"unsafe": Out(self.unsafe.signature),
                                 "safe": Out(self.safe.signature)})

    def gtkw_traces(self):
        return {"unsafe": self.unsafe.gtkw_traces(), "safe": self.safe.gtkw_traces()}

    def elaborate(self, platform):
        m = Module()
        m.submodules.unsafe = self.unsafe
        m.submodules.safe = self.safe
        return m
