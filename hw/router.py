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

Blocks
------
:class:`DieRouter` only wires its children, each with its own signature:

* :class:`~epfabric.hw.router_core.CorePort` (one a core): routes the core's
  requests by rank and hands its answers back, local load > local UB answer
  > RSP flit;
* :class:`~epfabric.hw.router_flit.RxSplit`: ``rx``, REQs that write to the
  UB port, loads to the answer queue, RSPs to their core;
* :class:`~epfabric.hw.router_ub.UBArbiter`: the UB port shared by the host,
  the cores and ``rx``; each answer back to its requester;
* :class:`~epfabric.hw.router_answers.AnswerQueue`: the RSP queue of data
  answers and the read port it shares with host reads;
* :class:`~epfabric.hw.router_answers.AckCoalescer`: the store acks owed;
* :class:`~epfabric.hw.router_tx.TxMux`: ``tx``, answers, acks and remote
  requests made flits.

Store acknowledgements and deadlock freedom
-------------------------------------------
A remote store is acknowledged, not answered: the acks owed are counted per
requesting core and sent coalesced, a few small flits for a stream of stores,
so taking a store never waits for answer space. A data answer (a load's, a
fetch-add's) has its RSP queue entry reserved before its REQ is taken; with
``rsp_depth`` at least :func:`rsp_depth_bound` the queue never fills, ``rx``
always drains and no cycle of full buffers can form in the fabric. Both are
argued in :mod:`epfabric.hw.router_answers`, beside the logic they rest on.
"""

from amaranth.hdl import Cat, Module, Mux
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from .aiv_core import MAX_WINDOW, ep_mask_bits, mem_req_layout, mem_rsp_layout
from .hbm import ReadPortSignature, check_data_bytes
from .host import HostMemorySignature
from .isa import RANK_BITS, check_rank_bits
from .router_answers import AckCoalescer, AnswerQueue, rsp_depth_bound
from .router_core import CorePort
from .router_flit import FlitKind, RxSplit, flit_layout
from .router_tx import TxMux
from .router_ub import UBArbiter
from .ub_port import UBOp, request_layout, response_layout
from .validate import check_bool, check_int, check_pow2

__all__ = ["FlitKind", "flit_layout", "rsp_depth_bound", "DieRouter"]


class DieRouter(wiring.Component):
    """Request/response router of a die (see the module docstring).

    Classifies every core request local/remote, arbitrates the UB port
    (round robin over cores and incoming REQ flits; the host wins), sends
    local loads to the core's own read port, applies incoming REQ flits and
    queues their answers in the RSP queue (with reserved space), hands
    incoming RSP flits to their core, and arbitrates ``tx`` (round robin over
    the RSP queue, the acks and the cores' remote requests). Combinational
    from request to target; its state is its children's (the RSP queue, the
    read tags of the shared read port, the ack table, the UB answer's tags,
    the arbiters' pointers).

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
    ep : bool
        Cores with ``stbm``/``stbr``: their die mask on ``mem_req``, the in-network fields on
        the flit; such a request always goes into the fabric.

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
        n, host = self.aivs, self.host
        flit = {"ranks": self.ranks, "aivs": n, "hbm_blocks": self.hbm_blocks,
                "data_bytes": self.data_bytes, "ep": self.ep}
        m.submodules.rx_split = rx = RxSplit(**flit)
        m.submodules.ub = ub = UBArbiter(**flit, rank_bits=self.rank_bits)
        m.submodules.answers = answers = AnswerQueue(**flit, hbm_latency=self.hbm_latency,
                                                     rsp_depth=self.rsp_depth)
        m.submodules.acks = acks = AckCoalescer(ranks=self.ranks, aivs=n,
                                                max_outstanding=self.max_outstanding)
        m.submodules.tx_mux = txm = TxMux(**flit, max_outstanding=self.max_outstanding,
                                          rank_bits=self.rank_bits)

        # --- every core: requests to the UB port, its own read port or tx; answers back -----------
        for i in range(n):
            core = m.submodules[f"core{i}"] = CorePort(
                ranks=self.ranks, hbm_blocks=self.hbm_blocks, data_bytes=self.data_bytes,
                rank_bits=self.rank_bits, ep=self.ep)
            m.d.comb += core.rank.eq(self.rank)
            wiring.connect(m, wiring.flipped(self.mem_req[i]), core.mem_req)
            wiring.connect(m, core.mem_rsp, wiring.flipped(self.mem_rsp[i]))
            wiring.connect(m, core.read, wiring.flipped(self.ub_read[i]))
            wiring.connect(m, core.ub, ub.cores[i])
            wiring.connect(m, core.remote, txm.requests[i])
            wiring.connect(m, ub.local[i], core.ub_answer)
            wiring.connect(m, rx.rsp[i], core.rx_answer)

        # --- rx: writes to the UB port, loads to the shared read port (RSPs went to the cores) ----
        wiring.connect(m, wiring.flipped(self.rx), rx.rx)
        wiring.connect(m, rx.ub, ub.rx)
        wiring.connect(m, rx.load, answers.load)

        # --- the UB port and read port ``aivs``; remote answers to the queue and the ack table ----
        wiring.connect(m, ub.ub_req, wiring.flipped(self.ub_req))
        wiring.connect(m, wiring.flipped(self.ub_rsp), ub.ub_rsp)
        wiring.connect(m, ub.fetch_add, answers.fetch_add)
        wiring.connect(m, ub.store, acks.store)
        wiring.connect(m, answers.read, wiring.flipped(self.ub_read[n]))

        # --- the host: word/block writes through the UB port, reads on read port ``aivs`` --------
        block = host.addr[9:9 + len(ub.host.payload.addr)]
        m.d.comb += [ub.host.valid.eq(host.we),
                     ub.host.payload.op.eq(Mux(host.wblock, UBOp.BLOCK_WRITE, UBOp.WORD_WRITE)),
                     ub.host.payload.addr.eq(block), ub.host.payload.word.eq(host.addr[2:9]),
                     ub.host.payload.data.eq(Mux(host.wblock, host.wrow, host.wdata)),
                     answers.host.req.valid.eq(host.re), answers.host.req.payload.addr.eq(block),
                     answers.host.req.payload.word.eq(host.addr[2:9]),
                     host.rvalid.eq(answers.host.resp.valid),
                     host.rdata.eq(answers.host.resp.payload.word),
                     host.rrow.eq(answers.host.resp.payload.block)]

        # --- tx: round robin over the RSP queue, the acks and every core's remote requests --------
        m.d.comb += txm.rank.eq(self.rank)
        wiring.connect(m, answers.answers, txm.answers)
        wiring.connect(m, acks.ack, txm.acks)
        wiring.connect(m, txm.tx, wiring.flipped(self.tx))
        # idle: the FIFOs, the ack table, the UB tags and the read tags change only with a
        # request, a flit, an answer or a read in flight
        m.d.comb += self.idle.eq(~Cat(*(r.valid for r in self.mem_req), self.rx.valid,
                                      self.ub_rsp.valid, host.we, host.re, acks.ack.valid).any()
                                 & answers.idle)
        return m


VERILOG_EXPORTS = {
    "die_router": (DieRouter, {"ranks": 2, "aivs": 2, "hbm_blocks": 8, "data_bytes": 32,
                               "hbm_latency": 2, "rsp_depth": 10}),
}
