"""The die router's ``tx``: data answers, store acks and the cores' remote requests, made flits.

docs/spec/design.md block 6, UBEP §3.3: every request to another rank is a REQ flit, every
answer a RSP flit.
"""

from amaranth.hdl import Cat, Module
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from .aiv_core import MAX_WINDOW, MemOp, ep_mask_bits, mem_req_layout
from .arbiter import RoundRobin
from .isa import RANK_BITS, address_layout, check_rank_bits
from .router_flit import FlitKind, ack_layout, answer_layout, flit_layout
from .validate import check_bool, check_int

__all__ = ["TxMux"]


class TxMux(wiring.Component):
    """The router's ``tx``: round robin over its three kinds of flit sources, each made a flit.

    Sources, in round-robin order: the RSP queue's head (a data answer, RSP
    flit), the store acks (:class:`~epfabric.hw.router_answers.AckCoalescer`, RSP flit acknowledging
    ``count`` stores) and every core's remote request (REQ flit). A source
    is served in the cycle ``tx`` takes its flit; the flit is combinational
    from the source.

    Parameters
    ----------
    ranks, aivs, hbm_blocks, data_bytes, max_outstanding, rank_bits : int
        As for :class:`~epfabric.hw.router.DieRouter`.
    ep : bool
        Flits with the in-network fields: a ``stbm``/``stbr`` becomes a multicast/reduction flit.

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

    Raises
    ------
    TypeError, ValueError
        On a parameter of the wrong type or out of range (named in the message).
    """

    def __init__(self, *, ranks, aivs, hbm_blocks, data_bytes, max_outstanding,
                 rank_bits=RANK_BITS, ep=False):
        check_int("max_outstanding", max_outstanding, 1, MAX_WINDOW)
        self.aivs, self.hbm_blocks, self.ranks = aivs, hbm_blocks, ranks
        self.ep = check_bool("ep", ep)
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
        tx = self.tx.payload
        blk_bits = len(tx.addr.block)
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
