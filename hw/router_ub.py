"""The die's UB port shared by the host, the cores and incoming REQ flits; each answer to its requester.

docs/spec/design.md block 6, UBEP §3.4: local and remote writes to one block are
serialised at this one port.
"""

from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from .aiv_core import MemOp, ep_mask_bits, mem_req_layout, mem_rsp_layout
from .arbiter import RoundRobin
from .isa import RANK_BITS, address_layout, check_rank_bits
from .router_flit import answer_layout, flit_layout, store_layout
from .ub_port import UBOp, request_layout, response_layout
from .validate import check_bool

__all__ = ["UBArbiter"]


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


class UBArbiter(wiring.Component):
    """The UB port's requesters, arbitrated, and the port's answers, routed back to them.

    Requests: the host wins outright (it writes only while the cores are
    stopped); otherwise round robin over every core's local store/fetch-add
    (requesters ``0 .. aivs - 1``) and the REQ flits that write
    (requester ``aivs``). A request is on ``ub_req`` in the cycle it is
    valid and taken in the cycle ``ub_req`` is ready.

    Answers: the UB port has one request outstanding; registers taken with
    it (``tag_host``, ``tag_local`` and ``tag_core``, ``tag_src`` and
    ``tag_rcore``) say whose its answer on ``ub_rsp`` is. The host's is
    dropped; a local core's goes to that core (``local``: the old word of a
    fetch-add, or an ack of one store, ``data`` 1); a remote fetch-add's is a
    data answer (``fetch_add``, into the RSP queue); a remote store's is
    counted (``store``, never waits) -- except a ``stbr`` contribution's,
    which nobody is owed (``tag_noack``).

    Parameters
    ----------
    ranks, aivs, hbm_blocks, data_bytes, rank_bits : int
        As for :class:`~epfabric.hw.router.DieRouter`.
    ep : bool
        Requests carry a die mask and flits the in-network fields.

    Attributes
    ----------
    host : In(stream.Signature(ub_port.request_layout(...)))
        The host's word or block write (``ready``: taken at this edge).
    cores : In(stream.Signature(mem_req_layout(data_bytes))).array(aivs)
        Every core's local stores and fetch-adds.
    rx : In(stream.Signature(flit_layout(...)))
        Incoming REQ flits that write.
    ub_req : Out(stream.Signature(ub_port.request_layout(...)))
        To the UB port (:class:`~epfabric.hw.ub_port.UBMemory` ``i_req``).
    ub_rsp : In(stream.Signature(ub_port.response_layout(...)))
        From the UB port (``o_resp``).
    local : Out(stream.Signature(mem_rsp_layout(data_bytes))).array(aivs)
        Every core's answers to its local requests.
    fetch_add : Out(stream.Signature(answer_layout(flit)))
        A remote fetch-add's answer, for the RSP queue.
    store : Out(stream.Signature(store_layout(ranks, aivs), always_ready=True))
        A remote store committed: an ack owed to its requester.

    Raises
    ------
    TypeError, ValueError
        On a parameter of the wrong type or out of range (named in the message).
    """

    def __init__(self, *, ranks, aivs, hbm_blocks, data_bytes, rank_bits=RANK_BITS, ep=False):
        self.ep = check_bool("ep", ep)
        flit = flit_layout(ranks, aivs, data_bytes, hbm_blocks, ep=ep)
        self.rank_bits = check_rank_bits(rank_bits, ranks, hbm_blocks)
        ub_req = stream.Signature(request_layout(blocks=hbm_blocks, data_bytes=data_bytes))
        super().__init__({
            "host": In(ub_req),
            "cores": In(stream.Signature(
                mem_req_layout(data_bytes, mask=ep and ep_mask_bits(ranks)))).array(aivs),
            "rx": In(stream.Signature(flit)),
            "ub_req": Out(ub_req),
            "ub_rsp": In(stream.Signature(response_layout(blocks=hbm_blocks))),
            "local": Out(stream.Signature(mem_rsp_layout(data_bytes))).array(aivs),
            "fetch_add": Out(stream.Signature(answer_layout(flit))),
            "store": Out(stream.Signature(store_layout(ranks, aivs), always_ready=True)),
        })

    def elaborate(self, platform):
        m = Module()
        n = len(self.cores)
        ub, rx = self.ub_req, self.rx.payload
        blk_bits = len(ub.payload.addr)
        arb = m.submodules.arb = RoundRobin(count=n + 1)    # the cores, then rx
        m.d.comb += [arb.requests.eq(Cat(*(c.valid for c in self.cores), self.rx.valid)),
                     arb.ready.eq(~self.host.valid & ub.ready)]
        tag_local = Signal()        # the answer on ub_rsp belongs to a local core ...
        tag_host = Signal()         # ... or to the host (discarded) ...
        tag_core = Signal(range(max(2, n)))
        tag_src = Signal.like(rx.src)   # ... else to core tag_core of rank tag_src
        tag_rcore = Signal.like(rx.core)
        tag_noack = Signal()        # ... a reduction result: acknowledged to nobody

        # --- requests: the host wins, then round robin over the cores and rx --------------------
        with m.If(self.host.valid):
            m.d.comb += [ub.valid.eq(1), ub.payload.eq(self.host.payload),
                         self.host.ready.eq(ub.ready)]
            with m.If(ub.ready):
                m.d.sync += [tag_host.eq(1), tag_local.eq(0)]
        with m.Elif(arb.valid):
            m.d.comb += ub.valid.eq(1)
            with m.If(arb.grant == n):
                m.d.comb += [ub.payload.addr.eq(rx.addr.block), ub.payload.word.eq(rx.addr.word),
                             ub.payload.data.eq(rx.data), self.rx.ready.eq(ub.ready)]
                _ub_op(m, rx.op, ub.payload.op)
                with m.If(ub.ready):
                    m.d.sync += [tag_host.eq(0), tag_local.eq(0), tag_src.eq(rx.src),
                                 tag_rcore.eq(rx.core)]
                    if self.ep:
                        m.d.sync += tag_noack.eq(rx.op == MemOp.WRITE_RED)
            for i, c in enumerate(self.cores):
                with m.If(arb.grant == i):
                    addr = data.View(address_layout(self.rank_bits), c.payload.addr)
                    m.d.comb += [ub.payload.addr.eq(addr.block[:blk_bits]),
                                 ub.payload.word.eq(addr.word), ub.payload.data.eq(c.payload.data),
                                 c.ready.eq(ub.ready)]
                    _ub_op(m, c.payload.op, ub.payload.op)
                    with m.If(ub.ready):
                        m.d.sync += [tag_host.eq(0), tag_local.eq(1), tag_core.eq(i)]

        # --- answers: to a core, into the RSP queue, counted as an ack, or dropped --------------
        rsp = self.ub_rsp
        old = rsp.payload.old
        op = Signal(MemOp, name="ub_op")
        with m.Switch(rsp.payload.op):
            with m.Case(UBOp.WORD_WRITE):
                m.d.comb += op.eq(MemOp.WRITE_WORD)
            with m.Case(UBOp.BLOCK_WRITE):
                m.d.comb += op.eq(MemOp.WRITE_BLOCK)
            with m.Default():
                m.d.comb += op.eq(MemOp.FETCH_ADD)
        store = (op == MemOp.WRITE_WORD) | (op == MemOp.WRITE_BLOCK)
        remote = rsp.valid & ~tag_local & ~tag_host
        fa = self.fetch_add
        m.d.comb += [fa.valid.eq(remote & ~store), fa.payload.dst.eq(tag_src),
                     fa.payload.core.eq(tag_rcore), fa.payload.op.eq(op), fa.payload.data.eq(old),
                     self.store.valid.eq(remote & store & ~tag_noack),
                     self.store.payload.src.eq(tag_src), self.store.payload.core.eq(tag_rcore)]
        for i, a in enumerate(self.local):
            m.d.comb += [a.valid.eq(rsp.valid & tag_local & (tag_core == i)), a.payload.op.eq(op),
                         a.payload.data.eq(Mux(store, 1, old))]     # a local ack: 1 store
        # the host's answer is dropped and a store counted at once (counting never waits)
        m.d.comb += rsp.ready.eq((fa.valid & fa.ready) | (rsp.valid & tag_host) | (remote & store)
                                 | Cat(a.valid & a.ready for a in self.local).any())
        return m
