"""What a die owes for the REQ flits it takes: data answers queued in reserved space, store acks coalesced.

docs/spec/design.md block 6, UBEP §3.3–3.4. A REQ flit applied at this die
(:class:`~epfabric.hw.router.DieRouter`) is answered with a RSP flit to its
``src``/``core``: a load with its word or block and a fetch-add with the old
value (*data answers*, :class:`AnswerQueue`), a store with an ack
(:class:`AckCoalescer`).

Store acknowledgements: counted, coalesced, small
------------------------------------------------
A remote store's answer carries no data, only "committed". The router does
not queue one answer per store: it counts the acks it owes per requesting
``(src rank, core)`` in a table (``owed``, ``ranks << core_bits`` entries of
``bits_for(max_outstanding)`` bits) and keeps a FIFO of the entries that
became non-zero (each entry at most once). The ack sender pops an entry and
sends **one** RSP flit acknowledging all the stores counted so far (the
count in ``data[0:16]``); a store committed in that cycle for the same entry
starts a new count. A core can owe no more than its window, so counters never
overflow. So:

* accepting a remote store never waits for answer space;
* the answer traffic of a stream of stores is a few small flits, not one per
  store: every flit without a DataBlock — acks, word stores, loads,
  fetch-adds and their answers — has ``small = 1`` and the links charge it
  their ``small_bytes`` (a UB control packet, :class:`~epfabric.hw.link.Link`),
  not 512 B.

Request/response deadlock
-------------------------
The fabric has one channel, so REQ and RSP flits share every buffer. A die
always sinks RSP flits: they go to the core's ``mem_rsp``, which is always
ready (at most a one-cycle wait while a local answer of the same core is
handed over, :class:`~epfabric.hw.router_core.CorePort`). An incoming REQ is
only blocked while its answer has no space. Store acks need none (above).
Answers with data — a load's word or block, a fetch-add's old value — are
written into a dedicated RSP queue of ``rsp_depth`` entries, with space
reserved before the REQ is accepted (:class:`AnswerQueue`: the entries
queued, plus the remote loads in flight on the read port, plus a UB answer
entering the queue this cycle, must leave room for it). A core has at most
one blocking load/fetch-add in flight, so at most ``(ranks - 1) * aivs``
data answers can ever be owed by one die (:func:`rsp_depth_bound`) —
independent of the store window. With ``rsp_depth`` at least that (the
default of :class:`~epfabric.hw.die.Die` and
:class:`~epfabric.hw.system.System`) the RSP queue never fills, an incoming
REQ never waits for ``tx``, ``rx`` always drains, and therefore the fabric
drains: no cycle of full buffers can form. (Below the bound the design is
still correct but a heavy all-to-all could deadlock.)
"""

from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2

from .aiv_core import MAX_WINDOW, MemOp
from .hbm import ReadPortSignature
from .router_flit import ack_layout, answer_layout, flit_layout, store_layout
from .validate import check_bool, check_int

__all__ = ["rsp_depth_bound", "AnswerQueue", "AckCoalescer"]


def rsp_depth_bound(ranks, aivs):
    """The deadlock-free RSP queue depth ``max(2, (ranks - 1) * aivs)`` (data answers only)."""
    check_int("ranks", ranks, 1, 256)
    check_int("aivs", aivs, 1, 256)
    return max(2, (ranks - 1) * aivs)


class AnswerQueue(wiring.Component):
    """The RSP queue of data answers, and the shared read port its remote loads use.

    Read port ``aivs`` of the UB memory (``read``) serves host reads (they
    win) and incoming load REQs; a pipeline of ``hbm_latency`` tags
    (``rtag0`` ..) remembers whose each read is. A load REQ is taken only
    with space reserved for its answer (the module docstring's deadlock
    argument): the answers queued, plus the remote loads in flight
    (``inflight``), plus a fetch-add answer entering this cycle must leave
    an entry free. A remote load's answer cannot wait (the read port has no
    ``ready``), so it is written first; a fetch-add's enters when it finds
    space, else it waits on the UB port. The queue's head is offered on
    ``answers``.

    Parameters
    ----------
    ranks, aivs, hbm_blocks, data_bytes : int
        Of the flit, as for :class:`~epfabric.hw.router.DieRouter`.
    hbm_latency : int
        Read latency of the read port (1..256): the tag pipeline's depth.
    rsp_depth : int
        Entries of the RSP queue (>= 1); deadlock-free from :func:`rsp_depth_bound` up.
    ep : bool
        The flit has the in-network fields.

    Attributes
    ----------
    load : In(stream.Signature(flit_layout(...)))
        Incoming load REQs (``ready``: admitted, the read issued).
    fetch_add : In(stream.Signature(answer_layout(flit)))
        A remote fetch-add's answer (``ready``: queued).
    host : In(ReadPortSignature(blocks=hbm_blocks, data_bytes=data_bytes))
        The host's reads: they win the read port, answered ``hbm_latency`` cycles later.
    read : Out(ReadPortSignature(blocks=hbm_blocks, data_bytes=data_bytes))
        The shared read port.
    answers : Out(stream.Signature(answer_layout(flit)))
        The queue's head, for ``tx``.
    idle : Out(1)
        Nothing queued, no read in the tag pipeline.

    Raises
    ------
    TypeError, ValueError
        On a parameter of the wrong type or out of range (named in the message).
    """

    def __init__(self, *, ranks, aivs, hbm_blocks, data_bytes, hbm_latency, rsp_depth, ep=False):
        check_int("hbm_latency", hbm_latency, 1, 256)
        check_int("rsp_depth", rsp_depth, 1)
        check_bool("ep", ep)
        self.hbm_latency, self.rsp_depth = hbm_latency, rsp_depth
        self.flit = flit_layout(ranks, aivs, data_bytes, hbm_blocks, ep=ep)
        port = ReadPortSignature(blocks=hbm_blocks, data_bytes=data_bytes)
        answer = stream.Signature(answer_layout(self.flit))
        super().__init__({
            "load": In(stream.Signature(self.flit)), "fetch_add": In(answer),
            "host": In(port), "read": Out(port),
            "answers": Out(answer), "idle": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        L, depth = self.hbm_latency, self.rsp_depth
        load, host, rport = self.load.payload, self.host, self.read
        rsp_layout = answer_layout(self.flit)
        m.submodules.rsp_queue = rspq = fifo.SyncFIFO(width=rsp_layout.size, depth=depth)
        rsp_w = Signal(rsp_layout)
        m.d.comb += rspq.w_data.eq(rsp_w)
        # Remote loads in flight on the shared read port: a pipeline of L tags.
        rtag_layout = data.StructLayout({"valid": 1, "host": 1, "src": self.flit["src"].shape,
                                         "core": self.flit["core"].shape, "block": 1})
        rtags = [Signal(rtag_layout, name=f"rtag{k}") for k in range(L)]
        inflight = Signal(range(L + 1))
        m.d.comb += inflight.eq(sum(t.valid & ~t.host for t in rtags))
        used = Signal(range(depth + L + 2))
        m.d.comb += used.eq(rspq.level + inflight)

        # --- admission: a load REQ only with an entry left for its answer (deadlock freedom) -----
        # The entries queued, the loads in flight and a fetch-add answer entering this cycle
        # (ub_wr) all hold space. Counting the last keeps level + inflight <= rsp_depth across
        # the edge where both enter, so a load's answer, which cannot wait, finds its entry.
        rx_rd_ok = Signal()
        ub_wr = Signal()            # a remote UB answer enters the RSP queue this cycle
        m.d.comb += [ub_wr.eq(self.fetch_add.valid & self.fetch_add.ready),
                     rx_rd_ok.eq(self.load.valid & ~host.req.valid & (used + ub_wr < depth)),
                     self.load.ready.eq(rx_rd_ok)]

        # --- the read port: host reads win, then admitted loads -----------------------------------
        new_tag = Signal(rtag_layout)
        with m.If(host.req.valid):
            m.d.comb += [rport.req.valid.eq(1), rport.req.payload.eq(host.req.payload),
                         new_tag.valid.eq(1), new_tag.host.eq(1)]
        with m.Elif(rx_rd_ok):
            m.d.comb += [rport.req.valid.eq(1),
                         rport.req.payload.addr.eq(load.addr.block),
                         rport.req.payload.word.eq(load.addr.word),
                         new_tag.valid.eq(1), new_tag.src.eq(load.src), new_tag.core.eq(load.core),
                         new_tag.block.eq(load.op == MemOp.READ_BLOCK)]
        m.d.sync += rtags[0].eq(new_tag)
        for k in range(1, L):
            m.d.sync += rtags[k].eq(rtags[k - 1])
        done_tag = rtags[L - 1]     # the tag of the answer valid on rport.resp this cycle
        resp = rport.resp.payload
        m.d.comb += [host.req.ready.eq(rport.req.ready),
                     host.resp.valid.eq(rport.resp.valid & done_tag.host),
                     host.resp.payload.eq(resp)]

        # --- writers of the RSP queue: a remote load's answer (cannot wait) first ----------------
        rd_answer = rport.resp.valid & done_tag.valid & ~done_tag.host
        with m.If(rd_answer):
            m.d.comb += [rspq.w_en.eq(1), rsp_w.dst.eq(done_tag.src), rsp_w.core.eq(done_tag.core),
                         rsp_w.op.eq(Mux(done_tag.block, MemOp.READ_BLOCK, MemOp.READ_WORD)),
                         rsp_w.data.eq(Mux(done_tag.block, resp.block, resp.word))]
        with m.Elif(self.fetch_add.valid & (used < depth)):
            m.d.comb += [rspq.w_en.eq(1), rsp_w.eq(self.fetch_add.payload),
                         self.fetch_add.ready.eq(1)]
        m.d.comb += [self.answers.valid.eq(rspq.r_rdy), self.answers.payload.eq(rspq.r_data),
                     rspq.r_en.eq(self.answers.ready)]
        # a tag with valid 0 is all zeros (new_tag's fields are set with valid only), so an
        # empty pipeline shifts zeros into zeros
        m.d.comb += self.idle.eq(~Cat(*(t.valid for t in rtags)).any() & (rspq.level == 0))
        return m


class AckCoalescer(wiring.Component):
    """The store acks a die owes, counted per requesting (rank, core) and sent coalesced.

    The module docstring's "Store acknowledgements": a table ``owed`` of one
    counter per (rank, core) and a FIFO of the entries that became non-zero
    (each at most once). ``ack`` offers the FIFO's head with its count; when
    it is taken the entry is cleared -- or restarts at 1 when a store of the
    same entry is counted in that cycle.

    Parameters
    ----------
    ranks, aivs : int
        Ranks in the system and requesters on a die (they size the table), 1..256.
    max_outstanding : int
        The cores' store window: no counter exceeds it.

    Attributes
    ----------
    store : In(stream.Signature(store_layout(ranks, aivs), always_ready=True))
        A store of core ``core`` of rank ``src`` was committed: one ack more
        owed (never waits).
    ack : Out(stream.Signature(ack_layout(ranks, aivs, max_outstanding)))
        Acknowledge ``count`` stores of core ``core`` of rank ``dst``.

    Raises
    ------
    TypeError, ValueError
        On a parameter of the wrong type or out of range (named in the message).
    """

    def __init__(self, *, ranks, aivs, max_outstanding):
        check_int("ranks", ranks, 1, 256)
        check_int("aivs", aivs, 1, 256)
        check_int("max_outstanding", max_outstanding, 1, MAX_WINDOW)
        self.ranks, self.aivs, self.max_outstanding = ranks, aivs, max_outstanding
        super().__init__({
            "store": In(stream.Signature(store_layout(ranks, aivs), always_ready=True)),
            "ack": Out(stream.Signature(ack_layout(ranks, aivs, max_outstanding))),
        })

    def elaborate(self, platform):
        m = Module()
        core_bits = len(self.store.payload.core)
        entries = (1 << core_bits) * max(2, self.ranks)
        idx_bits = ceil_log2(entries)
        count_bits = len(self.ack.payload.count)
        m.submodules.owed = owed = Memory(shape=count_bits, depth=entries, init=[])
        owed_inc_r = owed.read_port(domain="comb")
        owed_pop_r = owed.read_port(domain="comb")
        owed_inc_w = owed.write_port()
        owed_pop_w = owed.write_port()
        m.submodules.ack_pending = pend = fifo.SyncFIFO(width=idx_bits, depth=entries)
        inc = Signal(name="ack_inc")
        inc_idx = Signal(idx_bits, name="ack_inc_idx")
        m.d.comb += [inc.eq(self.store.valid),
                     inc_idx.eq((self.store.payload.src << core_bits) | self.store.payload.core),
                     owed_inc_r.addr.eq(inc_idx)]
        pop_idx = Signal(idx_bits, name="ack_pop_idx")
        pop_count = Signal(count_bits, name="ack_pop_count")
        ack_sent = Signal(name="ack_sent")
        m.d.comb += [pop_idx.eq(pend.r_data), owed_pop_r.addr.eq(pop_idx),
                     pop_count.eq(owed_pop_r.data), pend.r_en.eq(ack_sent),
                     ack_sent.eq(self.ack.valid & self.ack.ready),
                     self.ack.valid.eq(pend.r_rdy), self.ack.payload.dst.eq(pop_idx >> core_bits),
                     self.ack.payload.core.eq(pop_idx[:core_bits]),
                     self.ack.payload.count.eq(pop_count)]
        same = ack_sent & inc & (inc_idx == pop_idx)
        # the increment: from the value read, or from 0 when the same entry is sent this cycle
        m.d.comb += [owed_inc_w.addr.eq(inc_idx), owed_inc_w.en.eq(inc),
                     owed_inc_w.data.eq(Mux(same, 1, owed_inc_r.data + 1)),
                     pend.w_en.eq(inc & (same | (owed_inc_r.data == 0))),
                     pend.w_data.eq(inc_idx)]
        m.d.comb += [owed_pop_w.addr.eq(pop_idx), owed_pop_w.en.eq(ack_sent & ~same),
                     owed_pop_w.data.eq(0)]
        return m
