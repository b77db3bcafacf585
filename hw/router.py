"""A die's request/response router: cores, UB memory, fabric port and host memory access.

docs/spec/design.md block 6, UBEP §3.3–3.4. The AIV cores of a die issue word stores,
DataBlock stores, fetch-adds, loads and polls against a global address space
``rank[31:24] block[23:9] word[8:2]`` (:func:`epfabric.hw.isa.address_layout`; a machine
with ``rank_bits`` < 8 narrows the rank field to the top ``rank_bits`` and widens the block's).
:class:`DieRouter` sits between the cores' ``mem_req``/``mem_rsp`` streams,
the die's UB memory (:class:`~epfabric.hw.ub_port.UBMemory`: the atomic UB
port and the HBM read ports), the fabric ``tx``/``rx`` flit streams and the
memory part of the host port, and routes every core request by
``addr.rank``:

* **local** (``addr.rank == rank``): stores and fetch-adds go through the
  die's own atomic UB port, so local and remote writes to one block are
  serialised at one place (UBEP §3.4); word and block loads/polls go to an
  HBM read port (one per core: an HBM slice has many banks, so loads of
  different cores never queue);
* **remote**: the request becomes a REQ flit (:func:`flit_layout`) to rank
  ``addr.rank``. The destination die applies it to its UB memory — a remote
  DataBlock store is one 512 B atomic UB write — and answers with a RSP flit
  (the ack of a store, the old value of a fetch-add, the word or block of a
  load) to ``src``/``core``, which the router hands to that core's ``mem_rsp``.

Arbitration is round-robin wherever sources share a resource: the UB port
(every core's local store/fetch-add and incoming REQ flits; the host wins
outright, it only writes while the cores are stopped), the fabric ``tx`` (the
RSP queue and every core's remote requests) and the read port of incoming
remote loads (shared with host reads, which win). A core's answers are
handed over in the order local load > local UB answer > RSP flit (the others
wait a cycle). Nothing is dropped; every path back-pressures through
``ready``.

Cycle costs (through the router alone; no contention)
-----------------------------------------------------
=================================  ===============================================
path                               cycles
=================================  ===============================================
core request → ``ub_req``,         0: the request is presented in the cycle it is
its read port, or ``tx``           valid and accepted in that cycle when the
                                   target is ready
``ub_rsp`` / read answer of a      0: on ``mem_rsp`` in the cycle it is valid
local request → the core
incoming REQ (``rx``) →            0: store/fetch-add on ``ub_req``, load on the
``ub_req`` / read port ``aivs``    shared read port, in the cycle it is valid
answer of an incoming REQ →        1: written into the RSP queue in the cycle it
``tx``                             is valid, on ``tx`` from the next cycle
incoming RSP (``rx``) → the core   0: on ``mem_rsp`` in the cycle it is valid
host word or block write / read    0: on ``ub_req`` (the UB commits it at that
                                   edge) / on read port ``aivs`` (the answer
                                   ``hbm_latency`` cycles later on
                                   ``host.rdata``)
=================================  ===============================================

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
handed over). An incoming REQ is only blocked while its answer has no space.
Store acks need none (above). Answers with data — a load's word or block, a
fetch-add's old value — are written into a dedicated RSP queue of
``rsp_depth`` entries, with space reserved before the REQ is accepted (the
entries queued, plus the remote loads in flight on the read port, plus a UB
answer entering the queue this cycle, must leave room for it). A core has at
most one blocking load/fetch-add in flight, so at most ``(ranks - 1) * aivs``
data answers can ever be owed by one die (:func:`rsp_depth_bound`) —
independent of the store window. With ``rsp_depth`` at least that (the
default of :class:`~epfabric.hw.die.Die` and
:class:`~epfabric.hw.system.System`) the RSP queue never fills, an incoming
REQ never waits for ``tx``, ``rx`` always drains, and therefore the fabric
drains: no cycle of full buffers can form. (Below the bound the design is
still correct but a heavy all-to-all could deadlock.)
"""

from amaranth.hdl import Cat, Module, Mux, Signal, unsigned
from amaranth.lib import data, enum, fifo, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2

from .aiv_core import (ACK_COUNT_BITS, MAX_WINDOW, MemOp, ep_mask_bits, mem_req_layout,
                       mem_rsp_layout)
from .arbiter import RoundRobin
from .hbm import ReadPortSignature, check_blocks, check_data_bytes
from .host import HostMemorySignature
from .ub_port import UBOp, request_layout, response_layout
from .isa import RANK_BITS, address_layout, check_rank_bits
from .validate import check_bool, check_int, check_pow2

__all__ = ["FlitKind", "flit_layout", "rsp_depth_bound", "answer_layout", "ack_layout",
           "AckCoalescer", "TxMux", "DieRouter"]


class FlitKind(enum.Enum, shape=1):
    """Kind of a die-to-die flit."""
    REQ = 0   #: a core's request, applied at ``dst``
    RSP = 1   #: the answer to a REQ, for core ``core`` of rank ``dst``


def _bits(n):
    return max(1, ceil_log2(n))


def flit_layout(ranks, aivs, data_bytes, blocks, ep=False):
    """The die-to-die flit: one 512 B DataBlock's worth of fabric transfer.

    ============  =====================================  ========================================
    field         shape                                  meaning
    ============  =====================================  ========================================
    ``dst``       ``ceil_log2(ranks)`` bits              destination rank (the fabric routes it)
    ``src``       same                                   sending rank (a REQ's answer goes there)
    ``kind``      :class:`FlitKind`                      REQ or RSP
    ``op``        :class:`~epfabric.hw.aiv_core.MemOp`   the request's operation (RSP: echoed)
    ``core``      ``ceil_log2(aivs)`` bits               requesting core on its die
    ``addr``      ``{block, word}``                      REQ: DataBlock in ``dst``'s slice, word
    ``data``      ``8 * data_bytes`` bits                REQ: store data / addend; RSP: the word
                                                         (bits 0..31), the block read, or (store
                                                         ack) the number of stores acknowledged
    ``small``     1 bit                                  no DataBlock on board: the links charge
                                                         it ``small_bytes``, not ``block_bytes``
    ============  =====================================  ========================================

    With ``ep`` (in-network switches, :func:`~epfabric.hw.inc_switch.inc_fields`): ``mcast``
    (a ``stbm``'s block, to the dies of ``mask``), ``red`` (a ``stbr``'s contribution, of the
    group of contributors ``mask``, ``count`` contributions so far).
    """
    check_int("ranks", ranks, 1, 256)
    check_int("aivs", aivs, 1, 256)
    check_data_bytes(data_bytes)
    check_blocks(blocks)
    from .inc_switch import inc_fields
    return data.StructLayout({
        "dst": _bits(ranks),
        "src": _bits(ranks),
        "kind": FlitKind,
        "op": MemOp,
        "core": _bits(aivs),
        "addr": data.StructLayout({"block": _bits(blocks), "word": 7}),
        "data": unsigned(data_bytes * 8),
        "small": 1,
        **(inc_fields(ranks) if ep else {}),
    })


def rsp_depth_bound(ranks, aivs):
    """The deadlock-free RSP queue depth ``max(2, (ranks - 1) * aivs)`` (data answers only)."""
    check_int("ranks", ranks, 1, 256)
    check_int("aivs", aivs, 1, 256)
    return max(2, (ranks - 1) * aivs)


_UB_OF = {MemOp.WRITE_WORD: UBOp.WORD_WRITE, MemOp.WRITE_BLOCK: UBOp.BLOCK_WRITE,
          MemOp.FETCH_ADD: UBOp.FETCH_ADD, MemOp.WRITE_MCAST: UBOp.BLOCK_WRITE,
          MemOp.WRITE_RED: UBOp.BLOCK_WRITE}


def _ub_op(m, mem_op, ub_op):
    """Drive ``ub_op`` with the UB operation of a store/fetch-add ``mem_op`` (loads never reach it)."""
    with m.Switch(mem_op):
        for mop, uop in _UB_OF.items():
            with m.Case(mop):
                m.d.comb += ub_op.eq(uop)
        with m.Default():
            pass


def answer_layout(flit):
    """An entry of the RSP queue: a data answer for core ``core`` of rank ``dst``."""
    return data.StructLayout({"dst": flit["dst"].shape, "core": flit["core"].shape,
                              "op": MemOp, "data": flit["data"].shape})


def ack_layout(ranks, aivs, max_outstanding):
    """A coalesced store ack: ``count`` stores of core ``core`` of rank ``dst``."""
    return data.StructLayout({"dst": _bits(ranks), "core": _bits(aivs),
                              "count": max(1, max_outstanding.bit_length())})


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
        Ranks in the system and requesters on a die (they size the table).
    max_outstanding : int
        The cores' store window: no counter exceeds it.

    Attributes
    ----------
    store : In(stream.Signature({"src", "core"}, always_ready=True))
        A store of core ``core`` of rank ``src`` was committed: one ack more
        owed (never waits).
    ack : Out(stream.Signature(ack_layout(ranks, aivs, max_outstanding)))
        Acknowledge ``count`` stores of core ``core`` of rank ``dst``.
    """

    def __init__(self, *, ranks, aivs, max_outstanding):
        self.ranks, self.aivs, self.max_outstanding = ranks, aivs, max_outstanding
        super().__init__({
            "store": In(stream.Signature(data.StructLayout({"src": _bits(ranks), "core": _bits(aivs)}),
                                         always_ready=True)),
            "ack": Out(stream.Signature(ack_layout(ranks, aivs, max_outstanding))),
        })

    def elaborate(self, platform):
        m = Module()
        core_bits = _bits(self.aivs)
        entries = (1 << core_bits) * max(2, self.ranks)
        idx_bits = _bits(entries)
        count_bits = max(1, self.max_outstanding.bit_length())
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


class TxMux(wiring.Component):
    """The router's ``tx``: round robin over its three kinds of flit sources, each made a flit.

    Sources, in round-robin order: the RSP queue's head (a data answer, RSP
    flit), the store acks (:class:`AckCoalescer`, RSP flit acknowledging
    ``count`` stores) and every core's remote request (REQ flit). A source
    is served in the cycle ``tx`` takes its flit; the flit is combinational
    from the source.

    Parameters
    ----------
    ranks, aivs, hbm_blocks, data_bytes, max_outstanding, rank_bits : int
        As for :class:`DieRouter`.

    Attributes
    ----------
    rank : In(range(max(2, ranks)))
        ``src`` of every flit.
    answers : In(stream.Signature(answer_layout(flit)))
        The RSP queue's head.
    acks : In(stream.Signature(ack_layout(ranks, aivs, max_outstanding)))
        Coalesced store acks.
    requests : In(stream.Signature(mem_req_layout(data_bytes))).array(aivs)
        The cores' requests; ``valid`` only for a remote one.
    tx : Out(stream.Signature(flit_layout(...)))
        Flits into the fabric.
    """

    def __init__(self, *, ranks, aivs, hbm_blocks, data_bytes, max_outstanding,
                 rank_bits=RANK_BITS, ep=False):
        self.aivs, self.hbm_blocks, self.ranks, self.ep = aivs, hbm_blocks, ranks, ep
        self.rank_bits = check_rank_bits(rank_bits, ranks, hbm_blocks)
        self.flit = flit_layout(ranks, aivs, data_bytes, hbm_blocks, ep=ep)
        super().__init__({
            "rank": In(range(max(2, ranks))),
            "answers": In(stream.Signature(answer_layout(self.flit))),
            "acks": In(stream.Signature(ack_layout(ranks, aivs, max_outstanding))),
            "requests": In(stream.Signature(
                mem_req_layout(data_bytes, mask=ep and ep_mask_bits(ranks)))).array(aivs),
            "tx": Out(stream.Signature(self.flit)),
        })

    def elaborate(self, platform):
        m = Module()
        n, rank = self.aivs, self.rank
        blk_bits = _bits(self.hbm_blocks)
        tx = self.tx.payload
        tx_arb = m.submodules.tx_arb = RoundRobin(count=2 + n)    # RSP queue, acks, the cores
        tx_grant, tx_any = tx_arb.grant, tx_arb.valid
        m.d.comb += [tx_arb.requests.eq(Cat(self.answers.valid, self.acks.valid,
                                            *(r.valid for r in self.requests))),
                     tx_arb.ready.eq(self.tx.ready)]
        m.d.comb += self.tx.valid.eq(tx_any)
        rq = self.answers.payload
        with m.If(tx_any & (tx_grant == 0)):
            m.d.comb += [tx.dst.eq(rq.dst), tx.src.eq(rank), tx.kind.eq(FlitKind.RSP),
                         tx.op.eq(rq.op), tx.core.eq(rq.core), tx.data.eq(rq.data),
                         tx.small.eq(rq.op != MemOp.READ_BLOCK),
                         self.answers.ready.eq(self.tx.ready)]
        with m.If(tx_any & (tx_grant == 1)):
            ack = self.acks.payload
            m.d.comb += [tx.dst.eq(ack.dst), tx.src.eq(rank),
                         tx.kind.eq(FlitKind.RSP), tx.op.eq(MemOp.WRITE_BLOCK),
                         tx.core.eq(ack.core), tx.data.eq(ack.count), tx.small.eq(1),
                         self.acks.ready.eq(self.tx.ready)]
        for i, r in enumerate(self.requests):
            with m.If(tx_any & (tx_grant == i + 2)):
                a = data.View(address_layout(self.rank_bits), r.payload.addr)
                m.d.comb += [tx.dst.eq(a.rank), tx.src.eq(rank),
                             tx.kind.eq(FlitKind.REQ), tx.op.eq(r.payload.op), tx.core.eq(i),
                             tx.addr.block.eq(a.block[:blk_bits]),
                             tx.addr.word.eq(a.word), tx.data.eq(r.payload.data),
                             tx.small.eq(r.payload.op != MemOp.WRITE_BLOCK),
                             r.ready.eq(self.tx.ready)]
                if self.ep:
                    op = r.payload.op
                    red = op == MemOp.WRITE_RED
                    m.d.comb += [tx.mcast.eq(op == MemOp.WRITE_MCAST), tx.red.eq(red),
                                 tx.mask.eq(r.payload.mask[:self.ranks]), tx.count.eq(red),
                                 tx.small.eq((op != MemOp.WRITE_BLOCK) & (op != MemOp.WRITE_MCAST)
                                             & ~red)]
        return m


class DieRouter(wiring.Component):
    """Request/response router of a die (see the module docstring).

    Classifies every core request local/remote, arbitrates the UB port
    (round robin over cores and incoming REQ flits; the host wins), sends
    local loads to the core's own read port, applies incoming REQ flits and
    queues their answers in the RSP queue (with reserved space), hands
    incoming RSP flits to their core, and arbitrates ``tx`` (round robin over
    the RSP queue and the cores' remote requests). Combinational from request
    to target; the RSP queue and the read-tag pipeline of the shared read port
    are its only state.

    Parameters
    ----------
    ranks : int
        Ranks in the system (sizes the flit's ``dst``/``src``), 1..256.
    aivs : int
        Cores on the die, 1..256.
    hbm_blocks : int
        DataBlocks in the die's HBM slice (a power of two, at most
        ``2**(23 - rank_bits)``; a block address is taken modulo ``hbm_blocks``).
    data_bytes : int
        Modelled bytes per block (multiple of 32, 32..512).
    rank_bits : int
        Width of an address's rank field, its top bits (1..8, default 8:
        :func:`epfabric.hw.isa.address_layout`).
    hbm_latency : int
        Read latency *L* of the UB memory's read ports (1..256): the depth
        of the tag pipeline of read port ``aivs``.
    rsp_depth : int
        Entries of the RSP queue of data answers (>= 1); deadlock-free from
        :func:`rsp_depth_bound` up.
    max_outstanding : int
        The cores' store window (sizes the ack counters), 1..:data:`~epfabric.hw.aiv_core.MAX_WINDOW`.

    Attributes
    ----------
    rank : In(range(max(2, ranks)))
        This die's rank (local/remote decision; ``src`` of every flit sent).
    mem_req : In(stream.Signature(mem_req_layout(data_bytes))).array(aivs)
        Every core's requests (:class:`~epfabric.hw.aiv_core.AIVCore` ``mem_req``).
    mem_rsp : Out(stream.Signature(mem_rsp_layout(data_bytes))).array(aivs)
        Every core's answers; the core is always ready (``ready`` is not read).
    ub_req : Out(stream.Signature(ub_port.request_layout(...)))
        To the UB port (:class:`~epfabric.hw.ub_port.UBMemory` ``i_req``).
    ub_rsp : In(stream.Signature(ub_port.response_layout(...)))
        From the UB port (``o_resp``); a local answer goes to its core, a
        remote one into the RSP queue, the host's is dropped.
    ub_read : Out(ReadPortSignature(...)).array(aivs + 1)
        HBM read ports (``UBMemory.read``): port ``i`` serves core ``i``'s
        local loads, port ``aivs`` host reads and incoming remote loads.
    tx : Out(stream.Signature(flit_layout(...)))
        Flits into the fabric (REQ of the cores, RSP from the queue).
    rx : In(stream.Signature(flit_layout(...)))
        Flits from the fabric (REQ for this die, RSP for its cores).
    host : In(HostMemorySignature(row_bits=8 * data_bytes))
        Host word writes (through the UB port) and reads (read port ``aivs``).
    idle : Out(1)
        Nothing offered (no core request, ``rx`` flit, UB answer or host access), the RSP
        queue and the ack FIFO empty, no remote load in the tag pipeline: the next clock
        edge changes no register of the router (:attr:`epfabric.hw.die.Die.idle`).

    Raises
    ------
    TypeError, ValueError
        On a parameter of the wrong type or out of range (named in the message).
    """

    def __init__(self, *, ranks=2, aivs=2, hbm_blocks=16, data_bytes=32, hbm_latency=2,
                 rsp_depth=2, max_outstanding=4, rank_bits=RANK_BITS, ep=False):
        check_int("ranks", ranks, 1, 256)
        check_int("aivs", aivs, 1, 256)
        check_pow2("hbm_blocks", hbm_blocks, 1, 1 << 23)
        self.rank_bits = check_rank_bits(rank_bits, ranks, hbm_blocks)
        check_data_bytes(data_bytes)
        check_int("hbm_latency", hbm_latency, 1, 256)
        check_int("rsp_depth", rsp_depth, 1)
        check_int("max_outstanding", max_outstanding, 1, MAX_WINDOW)
        self.max_outstanding = max_outstanding
        self.ranks, self.aivs, self.hbm_blocks = ranks, aivs, hbm_blocks
        self.data_bytes, self.hbm_latency, self.rsp_depth = data_bytes, hbm_latency, rsp_depth
        self.ep = check_bool("ep", ep)
        self.flit = flit_layout(ranks, aivs, data_bytes, hbm_blocks, ep=ep)
        super().__init__({
            "rank": In(range(max(2, ranks))),
            "mem_req": In(stream.Signature(
                mem_req_layout(data_bytes, mask=ep and ep_mask_bits(ranks)))).array(aivs),
            "mem_rsp": Out(stream.Signature(mem_rsp_layout(data_bytes))).array(aivs),
            "ub_req": Out(stream.Signature(request_layout(blocks=hbm_blocks,
                                                          data_bytes=data_bytes))),
            "ub_rsp": In(stream.Signature(response_layout(blocks=hbm_blocks))),
            "ub_read": Out(ReadPortSignature(blocks=hbm_blocks,
                                             data_bytes=data_bytes)).array(aivs + 1),
            "tx": Out(stream.Signature(self.flit)),
            "rx": In(stream.Signature(self.flit)),
            "host": In(HostMemorySignature(row_bits=8 * data_bytes)),
            "idle": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        n = self.aivs
        L = self.hbm_latency
        rank = self.rank
        blk_bits = _bits(self.hbm_blocks)
        host_hbm = self.host.we

        # --- classify every core request --------------------------------------------------------
        reqs = [self.mem_req[i] for i in range(n)]
        is_local = [Signal(name=f"c{i}_local") for i in range(n)]
        is_read = [Signal(name=f"c{i}_read") for i in range(n)]
        addrs = [data.View(address_layout(self.rank_bits), r.payload.addr) for r in reqs]
        for i, r in enumerate(reqs):
            op = r.payload.op
            # a stbm/stbr always goes into the fabric (its switches copy and sum)
            net = ((op == MemOp.WRITE_MCAST) | (op == MemOp.WRITE_RED)) if self.ep else 0
            m.d.comb += [
                is_local[i].eq((addrs[i].rank == rank) & ~net),
                is_read[i].eq((op == MemOp.READ_WORD) | (op == MemOp.READ_BLOCK)),
            ]
        want_ub = [r.valid & is_local[i] & ~is_read[i] for i, r in enumerate(reqs)]
        want_rd = [r.valid & is_local[i] & is_read[i] for i, r in enumerate(reqs)]
        want_tx = [r.valid & ~is_local[i] for i, r in enumerate(reqs)]

        rx = self.rx.payload
        rx_req = self.rx.valid & (rx.kind == FlitKind.REQ)
        rx_rsp = self.rx.valid & (rx.kind == FlitKind.RSP)
        writes = (rx.op == MemOp.WRITE_WORD) | (rx.op == MemOp.WRITE_BLOCK) | \
            (rx.op == MemOp.FETCH_ADD)
        if self.ep:
            writes = writes | (rx.op == MemOp.WRITE_MCAST) | (rx.op == MemOp.WRITE_RED)
        rx_is_read = (rx.op == MemOp.READ_WORD) | (rx.op == MemOp.READ_BLOCK) | ~writes

        # --- RSP queue: answers to incoming REQ flits ---------------------------------------------
        rsp_layout = answer_layout(self.flit)
        m.submodules.rsp_queue = rspq = fifo.SyncFIFO(width=rsp_layout.size, depth=self.rsp_depth)
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
        ub = self.ub_req
        ub_arb = m.submodules.ub_arb = RoundRobin(count=n + 1)    # the cores, then rx
        ub_grant, ub_any = ub_arb.grant, ub_arb.valid
        m.d.comb += [ub_arb.requests.eq(Cat(*want_ub, rx_req & ~rx_is_read)),
                     ub_arb.ready.eq(~host_hbm & ub.ready)]
        tag_local = Signal()        # the answer on ub_rsp belongs to a local core ...
        tag_host = Signal()         # ... or to the host (discarded) ...
        tag_core = Signal(range(max(2, n)))
        tag_src = Signal.like(rx.src)   # ... else to core tag_core of rank tag_src
        tag_rcore = Signal.like(rx.core)
        tag_noack = Signal()        # ... a reduction result: acknowledged to nobody
        with m.If(host_hbm):
            m.d.comb += [ub.valid.eq(1),
                         ub.payload.op.eq(Mux(self.host.wblock, UBOp.BLOCK_WRITE, UBOp.WORD_WRITE)),
                         ub.payload.addr.eq(self.host.addr[9:9 + blk_bits]),
                         ub.payload.word.eq(self.host.addr[2:9]),
                         ub.payload.data.eq(Mux(self.host.wblock, self.host.wrow,
                                                self.host.wdata))]
            with m.If(ub.ready):
                m.d.sync += [tag_host.eq(1), tag_local.eq(0)]
        with m.Elif(ub_any):
            m.d.comb += ub.valid.eq(1)
            with m.If(ub_grant == n):
                m.d.comb += [ub.payload.addr.eq(rx.addr.block), ub.payload.word.eq(rx.addr.word),
                             ub.payload.data.eq(rx.data)]
                _ub_op(m, rx.op, ub.payload.op)
                with m.If(ub.ready):
                    m.d.sync += [tag_host.eq(0), tag_local.eq(0), tag_src.eq(rx.src),
                                 tag_rcore.eq(rx.core)]
                    if self.ep:
                        m.d.sync += tag_noack.eq(rx.op == MemOp.WRITE_RED)
            for i, r in enumerate(reqs):
                with m.If(ub_grant == i):
                    m.d.comb += [ub.payload.addr.eq(addrs[i].block[:blk_bits]),
                                 ub.payload.word.eq(addrs[i].word),
                                 ub.payload.data.eq(r.payload.data),
                                 r.ready.eq(ub.ready)]
                    _ub_op(m, r.payload.op, ub.payload.op)
                    with m.If(ub.ready):
                        m.d.sync += [tag_host.eq(0), tag_local.eq(1), tag_core.eq(i)]

        # --- local loads: read port i of core i ------------------------------------------------------
        rd_block = [Signal(name=f"c{i}_rd_block") for i in range(n)]
        for i, r in enumerate(reqs):
            port = self.ub_read[i]
            m.d.comb += [port.req.valid.eq(want_rd[i]),
                         port.req.payload.addr.eq(addrs[i].block[:blk_bits]),
                         port.req.payload.word.eq(addrs[i].word)]
            with m.If(want_rd[i]):
                m.d.comb += r.ready.eq(1)
                m.d.sync += rd_block[i].eq(r.payload.op == MemOp.READ_BLOCK)

        # --- incoming remote loads and host reads: read port n -------------------------------------
        rport = self.ub_read[n]
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
                     self.host.rdata.eq(resp.word), self.host.rrow.eq(resp.block)]

        # --- writers of the RSP queue: a remote load's answer (cannot wait) first ------------------
        rd_answer = rport.resp.valid & done_tag.valid & ~done_tag.host
        ub_rsp = self.ub_rsp
        ub_old = ub_rsp.payload.old
        ub_op = Signal(MemOp)
        with m.Switch(ub_rsp.payload.op):
            with m.Case(UBOp.WORD_WRITE):
                m.d.comb += ub_op.eq(MemOp.WRITE_WORD)
            with m.Case(UBOp.BLOCK_WRITE):
                m.d.comb += ub_op.eq(MemOp.WRITE_BLOCK)
            with m.Default():
                m.d.comb += ub_op.eq(MemOp.FETCH_ADD)
        ub_store = (ub_op == MemOp.WRITE_WORD) | (ub_op == MemOp.WRITE_BLOCK)
        ub_remote = ub_rsp.valid & ~tag_local & ~tag_host
        with m.If(rd_answer):
            m.d.comb += [rspq.w_en.eq(1), rsp_w.dst.eq(done_tag.src), rsp_w.core.eq(done_tag.core),
                         rsp_w.op.eq(Mux(done_tag.block, MemOp.READ_BLOCK, MemOp.READ_WORD)),
                         rsp_w.data.eq(Mux(done_tag.block, resp.block, resp.word))]
        with m.Elif(ub_remote & ~ub_store & (used < self.rsp_depth)):
            m.d.comb += [ub_wr.eq(1), rspq.w_en.eq(1), rsp_w.dst.eq(tag_src), rsp_w.core.eq(tag_rcore),
                         rsp_w.op.eq(ub_op), rsp_w.data.eq(ub_old), ub_rsp.ready.eq(1)]
        with m.If(ub_rsp.valid & tag_host):
            m.d.comb += ub_rsp.ready.eq(1)

        # --- store acks: counted per (src, core), coalesced (module docstring) ---------------------
        m.submodules.acks = acks = AckCoalescer(ranks=self.ranks, aivs=n,
                                                max_outstanding=self.max_outstanding)
        m.d.comb += [acks.store.valid.eq(ub_remote & ub_store & ~tag_noack),
                     acks.store.payload.src.eq(tag_src), acks.store.payload.core.eq(tag_rcore)]
        with m.If(ub_remote & ub_store):
            m.d.comb += ub_rsp.ready.eq(1)          # counting never waits

        # --- answers to the cores: local load > local UB answer > RSP flit --------------------------
        rx_rsp_ready = Signal()
        for i in range(n):
            port = self.ub_read[i]
            rsp = self.mem_rsp[i]
            ub_mine = ub_rsp.valid & tag_local & (tag_core == i)
            rx_mine = rx_rsp & (rx.core == i)
            with m.If(port.resp.valid):
                m.d.comb += [rsp.valid.eq(1),
                             rsp.payload.op.eq(Mux(rd_block[i], MemOp.READ_BLOCK, MemOp.READ_WORD)),
                             rsp.payload.data.eq(Mux(rd_block[i], port.resp.payload.block,
                                                     port.resp.payload.word))]
            with m.Elif(ub_mine):
                m.d.comb += [rsp.valid.eq(1), rsp.payload.op.eq(ub_op),
                             rsp.payload.data.eq(Mux(ub_store, 1, ub_old)),   # a local ack: 1 store
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

        # --- tx: round robin over the RSP queue, the acks and every core's remote requests ---------
        m.submodules.tx_mux = txm = TxMux(ranks=self.ranks, aivs=n, hbm_blocks=self.hbm_blocks,
                                          data_bytes=self.data_bytes,
                                          max_outstanding=self.max_outstanding,
                                          rank_bits=self.rank_bits, ep=self.ep)
        m.d.comb += [txm.rank.eq(rank), txm.answers.valid.eq(rspq.r_rdy),
                     txm.answers.payload.eq(rspq.r_data), rspq.r_en.eq(txm.answers.ready)]
        wiring.connect(m, acks.ack, txm.acks)
        for i, r in enumerate(reqs):
            m.d.comb += [txm.requests[i].valid.eq(want_tx[i]), txm.requests[i].payload.eq(r.payload)]
            with m.If(want_tx[i]):
                m.d.comb += r.ready.eq(txm.requests[i].ready)
        wiring.connect(m, txm.tx, wiring.flipped(self.tx))
        # idle: a tag with valid 0 is all zeros (new_tag's fields are set with valid only),
        # so an empty pipeline shifts zeros into zeros; the FIFOs, the ack table and the
        # UB tags change only with a request, a flit or an answer
        m.d.comb += self.idle.eq(~Cat(*(r.valid for r in reqs), self.rx.valid, ub_rsp.valid,
                                      host_hbm, self.host.re, acks.ack.valid,
                                      *(t.valid for t in rtags)).any()
                                 & (rspq.level == 0))
        return m


VERILOG_EXPORTS = {
    "die_router": (DieRouter, {"ranks": 2, "aivs": 2, "hbm_blocks": 8, "data_bytes": 32,
                               "hbm_latency": 2, "rsp_depth": 10}),
}
