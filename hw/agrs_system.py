"""The AllGather/ReduceScatter system top: ``ranks`` endpoints on an INC star, behind the host port.

INC-MoE §3, Fig. 6: a ``star`` fabric (:func:`~epfabric.hw.topology.star`) with the INC
engine (:class:`~epfabric.hw.inc_engine.IncEngine`) attached to its switch, and one
endpoint per rank (:class:`~epfabric.hw.inc_endpoint.IncEndpoint` or the ring baseline's
:class:`~epfabric.hw.inc_endpoint.RingEndpoint`), loaded, started and read back through the
shared host port (:mod:`epfabric.hw.host`). The endpoints are the blocks; this module only
wires them.
"""

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import bits_for

from .host import HostSignature, HostTarget, register_inputs, run_control
from .inc_endpoint import (COUNTER_BITS, MODES, Buffer, IncEndpoint, RingEndpoint,
                           agrs_control_map, agrs_memory_map)
from .inc_engine import IncEngine, check_dtype, inc_flit_layout
from .signature import ParamSignature, check_other_params
from .topology import check_timing, star
from .validate import check_choice, check_int, check_pow2

__all__ = ["AgrsSystem"]


class AgrsSystem(wiring.Component):
    """``ranks`` endpoints on a ``star`` switch, with the INC engine attached (INC-MoE §3, Fig. 6).

    The host loads buffers (memory map :func:`agrs_memory_map`, target HBM)
    and the operation's control registers (:func:`agrs_control_map`, target
    CTRL) through the host port, pulses ``start``, waits for ``stop`` and
    reads back; ``host.cycle`` holds the cycles from ``start`` to the
    completion of the last operation at every rank (the endpoints' idle
    flags are registered once, so the count includes the cycle the last
    endpoint went idle). Completion counters are never reset, so operations
    may follow each other.

    Parameters
    ----------
    timing : epfabric.hw.topology.FabricTiming
        Link latencies (cycles) and rate of the ``star`` fabric.
    ranks : int
        Ranks (>= 2).
    mode : str
        ``"inc"`` (engine AG/RS) or ``"ring"`` (ring baseline; the switch only
        forwards and the engine idles).
    tmax : int
        Rows per rank block of the padded layout.
    lanes : int
        32-bit words simulated per 512 B block.
    slots : int
        Engine aggregator slots.
    dtype : str
        Lane type of the ReduceScatter (:data:`~epfabric.hw.inc_engine.DTYPES`): ``"int32"``
        (default), ``"fp32"``, ``"bf16"`` (two lanes a word), summed by the engine and the
        endpoints alike.
    switch_depth : int
        Switch input FIFO depth.

    Attributes
    ----------
    host : In(HostSignature(ranks=ranks, all_ranks=True, run=True))
        Host port and run control (:mod:`epfabric.hw.host`; targets HBM and
        CTRL; inputs registered at the boundary; reads answer one cycle
        after ``re``/``re_all``: :attr:`host_read_latency`).
    ag_count, rs_count : Out(32).array(ranks)
        Every endpoint's cumulative completion counters.
    slot_stalls : Out(32)
        Cycles the engine held a chunk back for want of an aggregator slot.

    Raises
    ------
    ValueError
        On an invalid parameter (named in the message).
    """

    def __init__(self, *, timing, ranks=4, mode="inc", tmax=4, lanes=2, slots=16, switch_depth=4,
                 dtype="int32"):
        self.timing = check_timing(timing)
        signature = self.signature_for(ranks=ranks, mode=mode, tmax=tmax, lanes=lanes, slots=slots,
                                       switch_depth=switch_depth)
        self.ranks, self.mode, self.tmax, self.lanes, self.slots = ranks, mode, tmax, lanes, slots
        self.switch_depth = switch_depth
        self.dtype = check_dtype(dtype)
        self.layout = inc_flit_layout(ranks=ranks, tmax=tmax, lanes=lanes)
        self.memory_map = signature.params["memory_map"]
        self.control_map = signature.params["control_map"]
        self.host_read_latency = signature.params["host_read_latency"]
        super().__init__(signature)

    @classmethod
    def signature_for(cls, *, ranks=4, mode="inc", tmax=4, lanes=2, slots=16, switch_depth=4,
                      **others):
        """The signature of the system of these (checked) parameters, without building it: a
        :class:`~epfabric.hw.signature.ParamSignature` with ``ranks``, ``memory_map``,
        ``control_map`` and ``host_read_latency``; ``timing`` and ``dtype`` (which shape no port)
        are the constructor's to check."""
        check_other_params(cls, others)
        check_int("ranks", ranks, 2)
        check_choice("mode", mode, MODES)
        check_int("tmax", tmax, 1)
        check_int("lanes", lanes, 1)
        check_int("switch_depth", switch_depth, 2)
        check_pow2("slots", slots)      # the engine's check, before it is built in elaborate
        return ParamSignature({
            "host": In(HostSignature(ranks=ranks, all_ranks=True, run=True)),
            "ag_count": Out(COUNTER_BITS).array(ranks), "rs_count": Out(COUNTER_BITS).array(ranks),
            "slot_stalls": Out(COUNTER_BITS),
        }, ranks=ranks, memory_map=agrs_memory_map(ranks, tmax),
            control_map=agrs_control_map(ranks), host_read_latency=1)

    def elaborate(self, platform):
        m = Module()
        n = self.ranks
        fabric = m.submodules.fabric = star(self.timing, n, attach=1, payload=self.layout,
                                            switch_depth=self.switch_depth)
        engine = m.submodules.engine = IncEngine(ranks=n, tmax=self.tmax, lanes=self.lanes,
                                                 slots=self.slots, dtype=self.dtype)
        wiring.connect(m, engine.o_stream, fabric.attach_tx[0])
        wiring.connect(m, fabric.attach_rx[0], engine.i_stream)
        m.d.comb += self.slot_stalls.eq(engine.o_slot_stalls)

        # --- host port (registered inputs), buffers and control registers ----------------
        h = register_inputs(m, self.host)
        start = h["start"]
        mm, lanes = self.memory_map, self.lanes
        block = h["addr"][9:]
        word = h["addr"][2:9]
        buf = Signal(Buffer)
        row = Signal(bits_for(n * self.tmax - 1))
        with m.If(block < mm["out"]):
            m.d.comb += [buf.eq(Buffer.AG), row.eq(block)]
        with m.Elif(block < mm["rs"]):
            m.d.comb += [buf.eq(Buffer.OUT), row.eq(block - mm["out"])]
        with m.Else():
            m.d.comb += [buf.eq(Buffer.RS), row.eq(block - mm["rs"])]
        in_map = (block < mm["end"]) & (word < lanes)
        lane_en = Signal(lanes)
        m.d.comb += lane_en.eq(Mux(in_map, Const(1, lanes) << word, 0))
        hbm_we = h["we"] & (h["target"] == HostTarget.HBM)
        ctl_we = h["we"] & (h["target"] == HostTarget.CTRL)
        cm = self.control_map
        counts = [Signal(range(self.tmax + 1), name=f"ctrl_counts{q}") for q in range(n)]
        concurrent = Signal(name="ctrl_concurrent")
        barrier = Signal(name="ctrl_barrier")
        with m.If(ctl_we):
            for q in range(n):
                with m.If(h["addr"] == cm["counts"] + q):
                    m.d.sync += counts[q].eq(h["wdata"])
            with m.If(h["addr"] == cm["concurrent"]):
                m.d.sync += concurrent.eq(h["wdata"][0])
            with m.If(h["addr"] == cm["barrier"]):
                m.d.sync += barrier.eq(h["wdata"][0])
        reading = h["re"] | h["re_all"]
        m.d.comb += self.host.rvalid.eq(reading)

        cls = IncEndpoint if self.mode == "inc" else RingEndpoint
        idle = []
        for r in range(n):
            ep = m.submodules[f"ep{r}"] = cls(rank=r, ranks=n, tmax=self.tmax, lanes=lanes,
                                              dtype=self.dtype)
            wiring.connect(m, ep.tx, fabric.tx[r])
            wiring.connect(m, fabric.rx[r], ep.rx)
            sel = h["rank"] == r
            m.d.comb += [ep.start.eq(start), ep.concurrent.eq(concurrent),
                         ep.barrier.eq(barrier if self.mode == "inc" else 0),
                         ep.host_buf.eq(buf), ep.host_addr.eq(row),
                         ep.host_wdata.eq(h["wdata"].replicate(lanes)), ep.host_lanes.eq(lane_en),
                         ep.host_we.eq(hbm_we & sel),
                         self.ag_count[r].eq(ep.ag_count), self.rs_count[r].eq(ep.rs_count)]
            for q in range(n):
                m.d.comb += ep.counts[q].eq(counts[q])
            lane = Signal(32, name=f"host_lane{r}")
            m.d.comb += lane.eq(Mux(in_map, ep.host_rdata.word_select(word[:max(1, (lanes - 1).bit_length())]
                                                                     if lanes > 1 else 0, 32), 0))
            m.d.comb += self.host.rdata_all[r].eq(lane)
            with m.If(sel):
                m.d.comb += self.host.rdata.eq(lane)
            idle.append(ep.idle)

        # --- run control: done once every endpoint is idle again ---------------------------
        all_idle = Signal()
        m.d.comb += all_idle.eq(Cat(idle).all())
        finished = Signal(name="all_idle_q")
        m.d.sync += finished.eq(Mux(start, 0, all_idle))
        run_control(m, self.host, start=start, finished=finished, max_cycles=h["max_cycles"])
        return m
