"""One core's side of the die router: its requests routed by rank, its answers handed back in order.

docs/spec/design.md block 6, UBEP §3.3–3.4 (the routing rule is in :mod:`epfabric.hw.router`).
"""

from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from .aiv_core import MemOp, ep_mask_bits, mem_req_layout, mem_rsp_layout
from .hbm import ReadPortSignature, check_blocks, check_data_bytes
from .isa import RANK_BITS, address_layout, check_rank_bits
from .validate import check_bool, check_int

__all__ = ["CorePort"]


class CorePort(wiring.Component):
    """A core's requests to their targets, and its answers back, local load first.

    A request whose ``addr.rank`` is this die's (and, with ``ep``, that is
    not a ``stbm``/``stbr``: those always go into the fabric, whose switches
    copy and sum them) is local: a store or fetch-add goes to the UB port
    (``ub``), a word or block load/poll to the core's own read port
    (``read``, always ready). Any other request is remote (``remote``: a REQ
    flit). ``mem_req`` is ready when its target is, in the same cycle.

    Answers are handed to ``mem_rsp`` in the order local load (it cannot
    wait: the read port has no ``ready``) > local UB answer > RSP flit; the
    others wait a cycle. The core is always ready (``mem_rsp.ready`` is not
    read). The only state is whether the load in flight reads a block.

    Parameters
    ----------
    ranks, hbm_blocks, data_bytes, rank_bits : int
        As for :class:`~epfabric.hw.router.DieRouter`.
    ep : bool
        The core has ``stbm``/``stbr`` (``mem_req`` carries a die mask).

    Attributes
    ----------
    rank : In(range(max(2, ranks)))
        This die's rank.
    mem_req : In(stream.Signature(mem_req_layout(data_bytes)))
        The core's requests.
    mem_rsp : Out(stream.Signature(mem_rsp_layout(data_bytes)))
        The core's answers.
    read : Out(ReadPortSignature(blocks=hbm_blocks, data_bytes=data_bytes))
        The core's HBM read port (local loads).
    ub : Out(stream.Signature(mem_req_layout(data_bytes)))
        Local stores and fetch-adds, for the UB port.
    remote : Out(stream.Signature(mem_req_layout(data_bytes)))
        Remote requests, for ``tx``.
    ub_answer : In(stream.Signature(mem_rsp_layout(data_bytes)))
        The UB port's answer to this core's local request.
    rx_answer : In(stream.Signature(mem_rsp_layout(data_bytes)))
        A RSP flit for this core.

    Raises
    ------
    TypeError, ValueError
        On a parameter of the wrong type or out of range (named in the message).
    """

    def __init__(self, *, ranks, hbm_blocks, data_bytes, rank_bits=RANK_BITS, ep=False):
        check_int("ranks", ranks, 1, 256)
        check_blocks(hbm_blocks)
        check_data_bytes(data_bytes)
        self.rank_bits = check_rank_bits(rank_bits, ranks, hbm_blocks)
        self.ep = check_bool("ep", ep)
        req = stream.Signature(mem_req_layout(data_bytes, mask=ep and ep_mask_bits(ranks)))
        rsp = stream.Signature(mem_rsp_layout(data_bytes))
        super().__init__({
            "rank": In(range(max(2, ranks))),
            "mem_req": In(req), "mem_rsp": Out(rsp),
            "read": Out(ReadPortSignature(blocks=hbm_blocks, data_bytes=data_bytes)),
            "ub": Out(req), "remote": Out(req),
            "ub_answer": In(rsp), "rx_answer": In(rsp),
        })

    def elaborate(self, platform):
        m = Module()
        req, rsp, port = self.mem_req, self.mem_rsp, self.read
        op = req.payload.op
        addr = data.View(address_layout(self.rank_bits), req.payload.addr)
        # a stbm/stbr always goes into the fabric (its switches copy and sum)
        net = ((op == MemOp.WRITE_MCAST) | (op == MemOp.WRITE_RED)) if self.ep else 0
        local = Signal()
        is_read = Signal()
        m.d.comb += [local.eq((addr.rank == self.rank) & ~net),
                     is_read.eq((op == MemOp.READ_WORD) | (op == MemOp.READ_BLOCK))]

        # --- to the target: the UB port, the own read port or tx --------------------------------
        m.d.comb += [self.ub.valid.eq(req.valid & local & ~is_read), self.ub.payload.eq(req.payload),
                     port.req.valid.eq(req.valid & local & is_read),
                     port.req.payload.addr.eq(addr.block[:len(port.req.payload.addr)]),
                     port.req.payload.word.eq(addr.word),
                     self.remote.valid.eq(req.valid & ~local), self.remote.payload.eq(req.payload)]
        rd_block = Signal()         # the load in flight on the read port reads a block
        with m.If(self.ub.valid):
            m.d.comb += req.ready.eq(self.ub.ready)
        with m.If(port.req.valid):
            m.d.comb += req.ready.eq(1)
            m.d.sync += rd_block.eq(op == MemOp.READ_BLOCK)
        with m.If(self.remote.valid):
            m.d.comb += req.ready.eq(self.remote.ready)

        # --- answers: local load > local UB answer > RSP flit -------------------------------------
        with m.If(port.resp.valid):
            m.d.comb += [rsp.valid.eq(1),
                         rsp.payload.op.eq(Mux(rd_block, MemOp.READ_BLOCK, MemOp.READ_WORD)),
                         rsp.payload.data.eq(Mux(rd_block, port.resp.payload.block,
                                                 port.resp.payload.word))]
        with m.Elif(self.ub_answer.valid):
            m.d.comb += [rsp.valid.eq(1), rsp.payload.eq(self.ub_answer.payload),
                         self.ub_answer.ready.eq(1)]
        with m.Elif(self.rx_answer.valid):
            m.d.comb += [rsp.valid.eq(1), rsp.payload.eq(self.rx_answer.payload),
                         self.rx_answer.ready.eq(1)]
        return m
