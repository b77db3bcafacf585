"""A die: AIV cores, one UB memory (HBM slice + 512 B atomic UB port) and one fabric port.

DESIGN.md block 6. UBEP §3.3–3.4: the AIV cores of a die issue word stores,
DataBlock stores, fetch-adds, loads and polls against a global address space
``rank[31:24] block[23:9] word[8:2]`` (:data:`epfabric.hw.isa.address_layout`).
The die routes every core request by ``addr.rank``:

* **local** (``addr.rank == rank``): stores and fetch-adds go through the
  die's own atomic UB port (:class:`~epfabric.hw.ub_port.UBMemory`), so
  local and remote writes to one block are serialised at one place (UBEP
  §3.4); word and block loads/polls go to an HBM read port (one per core:
  an HBM slice has many banks, so loads of different cores never queue);
* **remote**: the request becomes a REQ flit (:func:`flit_layout`) to rank
  ``addr.rank``. The destination die applies it to its UB memory — a remote
  DataBlock store is one 512 B atomic UB write — and answers with a RSP flit
  (the ack of a store, the old value of a fetch-add, the word or block of a
  load) to ``src``/``core``, which the die hands to that core's ``mem_rsp``.

Arbitration is round-robin wherever sources share a resource: the UB port
(every core's local store/fetch-add and incoming REQ flits; the host wins
outright, it only writes while the cores are stopped), the fabric ``tx`` (the
RSP queue and every core's remote requests) and the read port of incoming
remote loads (shared with host reads). Nothing is dropped; every path
back-pressures through ``ready``.

Cycle costs (HBM read latency *L* = ``hbm_latency``; *L*\\ :sub:`core` as in
:class:`~epfabric.hw.aiv_core.AIVCore`, no contention)
---------------------------------------------------------------------------------------
=========================  =========================================================
local ``sw`` / ``stb``     1 cycle (posted); committed at the end of the issue
                           cycle (visible to a load issued the next cycle); its
                           ack reaches the core's ``mem_rsp`` one cycle later
local ``lw``               *L*\\ :sub:`core` = *L* → ``1 + L`` cycles
local ``fadd``             *L*\\ :sub:`core` = *L* + 1 → ``2 + L`` cycles
local ``poll``             ``1 + L`` cycles per read
remote store (die part)    0 cycles on the way out (the core's request is the
                           ``tx`` flit in its issue cycle); committed in the cycle
                           the flit is valid on the destination's ``rx`` (0 cycles).
                           So a remote store is visible exactly the fabric's class
                           latency after its issue. Its ack leaves the
                           destination 2 cycles after the commit (UB answer
                           register + RSP queue) and is handed to the core in
                           the cycle it is valid on ``rx``.
remote ``lw``/``fadd``     fabric there + *L* (+1 fetch-add) + 1 (RSP queue) +
                           fabric back.
=========================  =========================================================

Request/response deadlock
-------------------------
The fabric has one channel, so REQ and RSP flits share every buffer. A die
always sinks RSP flits: they go to the core's ``mem_rsp``, which is always
ready (at most a one-cycle wait while a local answer of the same core is
handed over). An incoming REQ is only blocked while its answer has no space:
answers are written into a dedicated RSP queue of ``rsp_depth`` entries, with
space reserved before a REQ is accepted. Every core limits its own requests
(``max_outstanding`` posted stores plus one blocking load/fetch-add), so at
most ``(ranks - 1) * aivs * (max_outstanding + 1)`` answers can ever be owed
by one die; with ``rsp_depth`` at least that (the default in
:class:`~epfabric.hw.system.System`) the RSP queue never fills, an incoming REQ
never waits for ``tx``, ``rx`` always drains, and therefore the fabric
drains: no cycle of full buffers can form. (Below the bound the design is
still correct but a heavy all-to-all could deadlock.)

Host port (used only while the cores are stopped)
-------------------------------------------------
:class:`~epfabric.hw.host.HostSignature` without ``rank``: ``host.we``
writes, at the clock edge, an instruction word (target IMEM), an HBM word
(HBM: a UB WORD_WRITE, committed at that edge) or a core's enable bit
(ENABLE). ``host.re`` reads the HBM word at ``host.addr``:
``host.rvalid``/``host.rdata`` are valid ``hbm_latency`` cycles later.
"""

from amaranth.hdl import Cat, Const, Module, Mux, Signal, unsigned
from amaranth.lib import data, enum, fifo, stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2

from .aiv_core import AIVCore, MemOp, trace_layout
from .hbm import check_blocks, check_data_bytes
from .arbiter import round_robin
from .host import HostSignature, HostTarget
from .ub_port import UBMemory, UBOp
from .validate import check_int, check_pow2

__all__ = ["FlitKind", "flit_layout", "Die"]


class FlitKind(enum.Enum, shape=1):
    """Kind of a die-to-die flit."""
    REQ = 0   #: a core's request, applied at ``dst``
    RSP = 1   #: the answer to a REQ, for core ``core`` of rank ``dst``


def _bits(n):
    return max(1, ceil_log2(n))


def flit_layout(ranks, aivs, data_bytes, blocks):
    """The die-to-die flit: one 512 B DataBlock's worth of fabric transfer.

    ============  =================================  ========================================
    field         shape                              meaning
    ============  =================================  ========================================
    ``dst``       ``ceil_log2(ranks)`` bits          destination rank (the fabric routes it)
    ``src``       same                               sending rank (a REQ's answer goes there)
    ``kind``      :class:`FlitKind`                  REQ or RSP
    ``op``        :class:`~epfabric.hw.aiv_core.MemOp`  the request's operation (RSP: echoed)
    ``core``      ``ceil_log2(aivs)`` bits           requesting core on its die
    ``addr``      ``{block, word}``                  REQ: DataBlock in ``dst``'s slice, word
    ``data``      ``8 * data_bytes`` bits            REQ: store data / addend; RSP: the word
                                                     (bits 0..31) or the block read
    ============  =================================  ========================================
    """
    check_int("ranks", ranks, 1, 256)
    check_int("aivs", aivs, 1, 256)
    check_data_bytes(data_bytes)
    check_blocks(blocks)
    return data.StructLayout({
        "dst": _bits(ranks),
        "src": _bits(ranks),
        "kind": FlitKind,
        "op": MemOp,
        "core": _bits(aivs),
        "addr": data.StructLayout({"block": _bits(blocks), "word": 7}),
        "data": unsigned(data_bytes * 8),
    })


_UB_OF = {MemOp.WRITE_WORD: UBOp.WORD_WRITE, MemOp.WRITE_BLOCK: UBOp.BLOCK_WRITE,
          MemOp.FETCH_ADD: UBOp.FETCH_ADD}


class Die(wiring.Component):
    """AIV cores + UB memory + one fabric port (DESIGN.md block 6; UBEP §3.3–3.4).

    See the module docstring for routing, cycle costs, deadlock avoidance and
    the host port.

    Parameters
    ----------
    rank : int or None
        This die's rank (0..ranks-1), a constant; ``None`` adds an input port
        ``rank_in`` instead, so one Verilog module serves every rank (see
        :meth:`epfabric.hw.system.System.hierarchical_verilog`).
    ranks : int
        Ranks in the system (sizes the flit's ``dst``/``src``), 1..256.
    aivs : int
        AIV cores on the die, 1..256.
    imem_depth, ubuf_rows, data_bytes, lanes, width, max_outstanding
        Passed to every :class:`~epfabric.hw.aiv_core.AIVCore` (core ``i`` has
        ``core_id = i``: ``csrr core_id`` is the core's index on its die).
    hbm_blocks : int
        DataBlocks in the die's HBM slice (a power of two; a block address
        is taken modulo ``hbm_blocks``).
    hbm_latency : int
        HBM read latency *L* in cycles.
    rsp_depth : int or None
        Entries of the RSP queue (answers to incoming REQ flits). ``None``:
        the deadlock-free bound ``(ranks - 1) * aivs * (max_outstanding + 1)``
        (at least 2).

    Attributes
    ----------
    tx : Out(stream.Signature(flit_layout(...)))
        Flits into the fabric.
    rx : In(stream.Signature(flit_layout(...)))
        Flits from the fabric (REQ for this die, RSP for its cores).
    host : In(HostSignature(cores=aivs))
        Host port (:mod:`epfabric.hw.host`; targets IMEM, HBM and ENABLE);
        ``host.start`` pulses start every enabled core at pc 0; a read's
        answer is valid ``hbm_latency`` cycles after ``host.re``.
    enabled : Out(aivs)
        Core enable bits (reset 0: a core runs only after the host enables it).
    core_pc, core_halted, core_fault, core_waiting, core_wait_addr, core_outstanding : Out array
        Per-core status; ``core_halted`` is 1 for a disabled core.
    trace : Out(stream.Signature(trace_layout)).array(aivs)
        Every core's MARK stream (``core`` is the core's index on the die).

    Raises
    ------
    TypeError, ValueError
        On a parameter of the wrong type or out of range (named in the message).
    """

    def __init__(self, *, rank=0, ranks=1, aivs=1, imem_depth=64, ubuf_rows=2, hbm_blocks=16,
                 data_bytes=32, lanes=4, width=16, max_outstanding=4, hbm_latency=2,
                 rsp_depth=None):
        check_int("ranks", ranks, 1, 256)
        if rank is not None:
            check_int("rank", rank, 0, ranks - 1)
        check_int("aivs", aivs, 1, 256)
        check_pow2("hbm_blocks", hbm_blocks, 1, 1 << 15)
        check_int("max_outstanding", max_outstanding, 1, 255)
        check_int("hbm_latency", hbm_latency, 1, 256)
        if rsp_depth is None:
            rsp_depth = max(2, (ranks - 1) * aivs * (max_outstanding + 1))
        check_int("rsp_depth", rsp_depth, 1)
        self.rank, self.ranks, self.aivs = rank, ranks, aivs
        self.hbm_blocks, self.data_bytes, self.hbm_latency = hbm_blocks, data_bytes, hbm_latency
        self.imem_depth, self.max_outstanding, self.rsp_depth = imem_depth, max_outstanding, rsp_depth
        self.cores = [AIVCore(core_id=i, imem_depth=imem_depth, ubuf_rows=ubuf_rows,
                              data_bytes=data_bytes, lanes=lanes, width=width,
                              max_outstanding=max_outstanding) for i in range(aivs)]
        self.mem = UBMemory(blocks=hbm_blocks, data_bytes=data_bytes, latency=hbm_latency,
                            read_ports=aivs + 1)
        self.flit = flit_layout(ranks, aivs, data_bytes, hbm_blocks)
        super().__init__({
            "tx": Out(stream.Signature(self.flit)),
            "rx": In(stream.Signature(self.flit)),
            "host": In(HostSignature(cores=aivs)),
            "enabled": Out(aivs),
            "core_pc": Out(range(imem_depth)).array(aivs),
            "core_halted": Out(1).array(aivs),
            "core_fault": Out(1).array(aivs),
            "core_waiting": Out(1).array(aivs),
            "core_wait_addr": Out(32).array(aivs),
            "core_outstanding": Out(8).array(aivs),
            "trace": Out(stream.Signature(trace_layout)).array(aivs),
            **({"rank_in": In(range(max(2, ranks)))} if rank is None else {}),
        })

    def elaborate(self, platform):
        m = Module()
        n = self.aivs
        L = self.hbm_latency
        rank = self.rank_in if self.rank is None else Const(self.rank, self.flit["src"].shape)
        blk_bits = _bits(self.hbm_blocks)
        m.submodules.mem = mem = self.mem
        cores = self.cores
        for i, core in enumerate(cores):
            m.submodules[f"core{i}"] = core

        # --- host port, enables, status ------------------------------------------------------
        enabled = self.enabled
        host_hbm = self.host.we & (self.host.target == HostTarget.HBM)
        for i, core in enumerate(cores):
            sel = self.host.core == i
            m.d.comb += [
                core.imem_w.en.eq(self.host.we & (self.host.target == HostTarget.IMEM) & sel),
                core.imem_w.addr.eq(self.host.addr),
                core.imem_w.data.eq(self.host.wdata),
                core.start.eq(self.host.start & enabled[i]),
                core.rank.eq(rank),
                self.core_pc[i].eq(core.pc),
                self.core_halted[i].eq(core.halted | ~enabled[i]),
                self.core_fault[i].eq(core.fault),
                self.core_waiting[i].eq(core.waiting),
                self.core_wait_addr[i].eq(core.wait_addr),
                self.core_outstanding[i].eq(core.outstanding),
            ]
            wiring.connect(m, core.trace, wiring.flipped(self.trace[i]))
            with m.If(self.host.we & (self.host.target == HostTarget.ENABLE) & sel):
                m.d.sync += enabled[i].eq(self.host.wdata[0])

        # --- classify every core request --------------------------------------------------------
        reqs = [core.mem_req for core in cores]
        is_local = [Signal(name=f"c{i}_local") for i in range(n)]
        is_read = [Signal(name=f"c{i}_read") for i in range(n)]
        for i, r in enumerate(reqs):
            op = r.payload.op
            m.d.comb += [
                is_local[i].eq(r.payload.addr.rank == rank),
                is_read[i].eq((op == MemOp.READ_WORD) | (op == MemOp.READ_BLOCK)),
            ]
        want_ub = [r.valid & is_local[i] & ~is_read[i] for i, r in enumerate(reqs)]
        want_rd = [r.valid & is_local[i] & is_read[i] for i, r in enumerate(reqs)]
        want_tx = [r.valid & ~is_local[i] for i, r in enumerate(reqs)]

        rx = self.rx.payload
        rx_req = self.rx.valid & (rx.kind == FlitKind.REQ)
        rx_rsp = self.rx.valid & (rx.kind == FlitKind.RSP)
        rx_is_read = (rx.op == MemOp.READ_WORD) | (rx.op == MemOp.READ_BLOCK) | \
            ~((rx.op == MemOp.WRITE_WORD) | (rx.op == MemOp.WRITE_BLOCK) | (rx.op == MemOp.FETCH_ADD))

        # --- RSP queue: answers to incoming REQ flits ---------------------------------------------
        rsp_layout = data.StructLayout({"dst": self.flit["dst"].shape, "core": self.flit["core"].shape,
                                        "op": MemOp, "data": unsigned(self.data_bytes * 8)})
        m.submodules.rspq = rspq = fifo.SyncFIFO(width=rsp_layout.size, depth=self.rsp_depth)
        rsp_w = Signal(rsp_layout)
        m.d.comb += rspq.w_data.eq(rsp_w)
        # Remote loads in flight on the shared read port: a pipeline of L tags.
        rtag_layout = data.StructLayout({"valid": 1, "host": 1, "src": self.flit["src"].shape,
                                         "core": self.flit["core"].shape, "block": 1})
        rtags = [Signal(rtag_layout, name=f"rtag{k}") for k in range(L)]
        inflight = Signal(range(L + 1))
        m.d.comb += inflight.eq(sum(t.valid & ~t.host for t in rtags))
        used = Signal(range(self.rsp_depth + L + 2))
        m.d.comb += used.eq(rspq.level + inflight)

        # --- UB port: round robin over cores and rx REQs; the host wins ----------------------------
        ub = mem.i_req
        ub_grant, ub_any, ub_advance = round_robin(m, want_ub + [rx_req & ~rx_is_read], "ub")
        tag_local = Signal()        # the answer on mem.o_resp belongs to a local core ...
        tag_host = Signal()         # ... or to the host (discarded) ...
        tag_core = Signal(range(max(2, n)))
        tag_src = Signal.like(rx.src)   # ... else to core tag_core of rank tag_src
        tag_rcore = Signal.like(rx.core)
        with m.If(host_hbm):
            m.d.comb += [ub.valid.eq(1), ub.payload.op.eq(UBOp.WORD_WRITE),
                         ub.payload.addr.eq(self.host.addr[9:9 + blk_bits]),
                         ub.payload.word.eq(self.host.addr[2:9]),
                         ub.payload.data.eq(self.host.wdata)]
            with m.If(ub.ready):
                m.d.sync += [tag_host.eq(1), tag_local.eq(0)]
        with m.Elif(ub_any):
            m.d.comb += ub.valid.eq(1)
            with m.If(ub_grant == n):
                m.d.comb += [ub.payload.addr.eq(rx.addr.block), ub.payload.word.eq(rx.addr.word),
                             ub.payload.data.eq(rx.data)]
                with m.Switch(rx.op):
                    for mop, uop in _UB_OF.items():
                        with m.Case(mop):
                            m.d.comb += ub.payload.op.eq(uop)
                    with m.Default():
                        pass
                with m.If(ub.ready):
                    m.d.sync += [tag_host.eq(0), tag_local.eq(0), tag_src.eq(rx.src),
                                 tag_rcore.eq(rx.core)]
            for i, r in enumerate(reqs):
                with m.If(ub_grant == i):
                    m.d.comb += [ub.payload.addr.eq(r.payload.addr.block[:blk_bits]),
                                 ub.payload.word.eq(r.payload.addr.word),
                                 ub.payload.data.eq(r.payload.data),
                                 r.ready.eq(ub.ready)]
                    with m.Switch(r.payload.op):
                        for mop, uop in _UB_OF.items():
                            with m.Case(mop):
                                m.d.comb += ub.payload.op.eq(uop)
                        with m.Default():
                            pass
                    with m.If(ub.ready):
                        m.d.sync += [tag_host.eq(0), tag_local.eq(1), tag_core.eq(i)]
            ub_advance(ub.ready)

        # --- local loads: read port i of core i ------------------------------------------------------
        rd_block = [Signal(name=f"c{i}_rd_block") for i in range(n)]
        for i, r in enumerate(reqs):
            port = mem.read[i]
            m.d.comb += [port.req.valid.eq(want_rd[i]),
                         port.req.payload.addr.eq(r.payload.addr.block[:blk_bits]),
                         port.req.payload.word.eq(r.payload.addr.word)]
            with m.If(want_rd[i]):
                m.d.comb += r.ready.eq(1)
                m.d.sync += rd_block[i].eq(r.payload.op == MemOp.READ_BLOCK)

        # --- incoming remote loads and host reads: read port n -------------------------------------
        rport = mem.read[n]
        rx_rd_ok = Signal()
        ub_wr = Signal()            # a remote UB answer enters the RSP queue this cycle
        m.d.comb += rx_rd_ok.eq(rx_req & rx_is_read & ~self.host.re
                                & (used + ub_wr < self.rsp_depth))
        new_tag = Signal(rtag_layout)
        with m.If(self.host.re):
            m.d.comb += [rport.req.valid.eq(1),
                         rport.req.payload.addr.eq(self.host.addr[9:9 + blk_bits]),
                         rport.req.payload.word.eq(self.host.addr[2:9]),
                         new_tag.valid.eq(1), new_tag.host.eq(1)]
        with m.Elif(rx_rd_ok):
            m.d.comb += [rport.req.valid.eq(1),
                         rport.req.payload.addr.eq(rx.addr.block),
                         rport.req.payload.word.eq(rx.addr.word),
                         new_tag.valid.eq(1), new_tag.src.eq(rx.src), new_tag.core.eq(rx.core),
                         new_tag.block.eq(rx.op == MemOp.READ_BLOCK)]
        m.d.sync += rtags[0].eq(new_tag)
        for k in range(1, L):
            m.d.sync += rtags[k].eq(rtags[k - 1])
        done_tag = rtags[L - 1]     # the tag of the answer valid on rport.resp this cycle
        resp = rport.resp.payload
        m.d.comb += [self.host.rvalid.eq(rport.resp.valid & done_tag.host),
                     self.host.rdata.eq(resp.word)]

        # --- writers of the RSP queue: a remote load's answer (cannot wait) first ------------------
        rd_answer = rport.resp.valid & done_tag.valid & ~done_tag.host
        ub_rsp = mem.o_resp
        ub_old = ub_rsp.payload.old
        ub_op = Signal(MemOp)
        with m.Switch(ub_rsp.payload.op):
            with m.Case(UBOp.WORD_WRITE):
                m.d.comb += ub_op.eq(MemOp.WRITE_WORD)
            with m.Case(UBOp.BLOCK_WRITE):
                m.d.comb += ub_op.eq(MemOp.WRITE_BLOCK)
            with m.Default():
                m.d.comb += ub_op.eq(MemOp.FETCH_ADD)
        with m.If(rd_answer):
            m.d.comb += [rspq.w_en.eq(1), rsp_w.dst.eq(done_tag.src), rsp_w.core.eq(done_tag.core),
                         rsp_w.op.eq(Mux(done_tag.block, MemOp.READ_BLOCK, MemOp.READ_WORD)),
                         rsp_w.data.eq(Mux(done_tag.block, resp.block, resp.word))]
        ub_remote = ub_rsp.valid & ~tag_local & ~tag_host
        with m.Elif(ub_remote & (used < self.rsp_depth)):
            m.d.comb += [ub_wr.eq(1), rspq.w_en.eq(1), rsp_w.dst.eq(tag_src), rsp_w.core.eq(tag_rcore),
                         rsp_w.op.eq(ub_op), rsp_w.data.eq(ub_old), ub_rsp.ready.eq(1)]
        with m.If(ub_rsp.valid & tag_host):
            m.d.comb += ub_rsp.ready.eq(1)

        # --- answers to the cores: local load > local UB answer > RSP flit --------------------------
        rx_rsp_ready = Signal()
        for i, core in enumerate(cores):
            port = mem.read[i]
            rsp = core.mem_rsp
            ub_mine = ub_rsp.valid & tag_local & (tag_core == i)
            rx_mine = rx_rsp & (rx.core == i)
            with m.If(port.resp.valid):
                m.d.comb += [rsp.valid.eq(1),
                             rsp.payload.op.eq(Mux(rd_block[i], MemOp.READ_BLOCK, MemOp.READ_WORD)),
                             rsp.payload.data.eq(Mux(rd_block[i], port.resp.payload.block,
                                                     port.resp.payload.word))]
            with m.Elif(ub_mine):
                m.d.comb += [rsp.valid.eq(1), rsp.payload.op.eq(ub_op), rsp.payload.data.eq(ub_old),
                             ub_rsp.ready.eq(1)]
            with m.Elif(rx_mine):
                m.d.comb += [rsp.valid.eq(1), rsp.payload.op.eq(rx.op), rsp.payload.data.eq(rx.data),
                             rx_rsp_ready.eq(1)]

        # --- rx ready ------------------------------------------------------------------------------
        ub_takes_rx = ub.valid & ub.ready & ~host_hbm & (ub_grant == n)
        with m.If(rx_rsp):
            m.d.comb += self.rx.ready.eq(rx_rsp_ready)
        with m.Elif(rx_req & rx_is_read):
            m.d.comb += self.rx.ready.eq(rx_rd_ok)
        with m.Elif(rx_req):
            m.d.comb += self.rx.ready.eq(ub_takes_rx)

        # --- tx: round robin over the RSP queue and every core's remote requests ------------------
        tx = self.tx.payload
        tx_grant, tx_any, tx_advance = round_robin(m, [rspq.r_rdy] + want_tx, "tx")
        m.d.comb += self.tx.valid.eq(tx_any)
        rq = Signal(rsp_layout)
        m.d.comb += rq.eq(rspq.r_data)
        with m.If(tx_any & (tx_grant == 0)):
            m.d.comb += [tx.dst.eq(rq.dst), tx.src.eq(rank), tx.kind.eq(FlitKind.RSP),
                         tx.op.eq(rq.op), tx.core.eq(rq.core), tx.data.eq(rq.data),
                         rspq.r_en.eq(self.tx.ready)]
        for i, r in enumerate(reqs):
            with m.If(tx_any & (tx_grant == i + 1)):
                m.d.comb += [tx.dst.eq(r.payload.addr.rank), tx.src.eq(rank),
                             tx.kind.eq(FlitKind.REQ), tx.op.eq(r.payload.op), tx.core.eq(i),
                             tx.addr.block.eq(r.payload.addr.block[:blk_bits]),
                             tx.addr.word.eq(r.payload.addr.word), tx.data.eq(r.payload.data),
                             r.ready.eq(self.tx.ready)]
        tx_advance(self.tx.valid & self.tx.ready)
        return m


VERILOG_EXPORTS = {
    "die": (Die, {"rank": 0, "ranks": 2, "aivs": 2, "imem_depth": 32, "ubuf_rows": 2,
                  "hbm_blocks": 8, "data_bytes": 32, "lanes": 4, "width": 16,
                  "max_outstanding": 4, "hbm_latency": 2, "rsp_depth": None}),
}
