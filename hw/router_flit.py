"""The die router's records (the flit, a queued answer, an ack) and the split of incoming flits.

docs/spec/design.md block 6, UBEP §3.3–3.4. :func:`flit_layout` is what dies exchange
through the fabric; :func:`answer_layout`, :func:`ack_layout` and :func:`store_layout` are
what a die owes for the REQ flits it took (:mod:`epfabric.hw.router_answers`).
:class:`RxSplit` hands each incoming flit to the block of the
:class:`~epfabric.hw.router.DieRouter` that takes it.
"""

from amaranth.hdl import Cat, Module, unsigned
from amaranth.lib import data, enum, stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2

from .aiv_core import MemOp, mem_rsp_layout
from .hbm import check_blocks, check_data_bytes
from .validate import check_bool, check_int

__all__ = ["FlitKind", "flit_layout", "answer_layout", "ack_layout", "store_layout", "RxSplit"]


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


def answer_layout(flit):
    """An entry of the RSP queue: a data answer for core ``core`` of rank ``dst``."""
    return data.StructLayout({"dst": flit["dst"].shape, "core": flit["core"].shape,
                              "op": MemOp, "data": flit["data"].shape})


def ack_layout(ranks, aivs, max_outstanding):
    """A coalesced store ack: ``count`` stores of core ``core`` of rank ``dst``."""
    return data.StructLayout({"dst": _bits(ranks), "core": _bits(aivs),
                              "count": max(1, max_outstanding.bit_length())})


def store_layout(ranks, aivs):
    """A remote store committed at the UB port: by core ``core`` of rank ``src`` (an ack owed)."""
    return data.StructLayout({"src": _bits(ranks), "core": _bits(aivs)})


class RxSplit(wiring.Component):
    """The router's ``rx``: each incoming flit to the block that takes it.

    A REQ that writes (store, fetch-add; with ``ep`` also ``stbm``/``stbr``)
    goes to the UB port (``ub``), any other REQ is a load (``load``: the
    shared read port), and a RSP goes to core ``core`` (``rsp``). ``rx`` is
    ready when the flit's taker is; combinational, no state.

    Parameters
    ----------
    ranks, aivs, hbm_blocks, data_bytes : int
        Of the flit (:func:`flit_layout`), as for :class:`~epfabric.hw.router.DieRouter`.
    ep : bool
        The flit has the in-network fields; ``stbm``/``stbr`` REQs write.

    Attributes
    ----------
    rx : In(stream.Signature(flit_layout(...)))
        Flits from the fabric.
    ub : Out(stream.Signature(flit_layout(...)))
        REQ flits that write.
    load : Out(stream.Signature(flit_layout(...)))
        REQ flits that read.
    rsp : Out(stream.Signature(mem_rsp_layout(data_bytes))).array(aivs)
        RSP flits, to their core (``op`` and ``data`` of the flit).

    Raises
    ------
    TypeError, ValueError
        On a parameter of the wrong type or out of range (named in the message).
    """

    def __init__(self, *, ranks, aivs, hbm_blocks, data_bytes, ep=False):
        self.ep = check_bool("ep", ep)
        flit = stream.Signature(flit_layout(ranks, aivs, data_bytes, hbm_blocks, ep=ep))
        super().__init__({
            "rx": In(flit), "ub": Out(flit), "load": Out(flit),
            "rsp": Out(stream.Signature(mem_rsp_layout(data_bytes))).array(aivs),
        })

    def elaborate(self, platform):
        m = Module()
        rx = self.rx.payload
        rx_req = self.rx.valid & (rx.kind == FlitKind.REQ)
        rx_rsp = self.rx.valid & (rx.kind == FlitKind.RSP)
        writes = (rx.op == MemOp.WRITE_WORD) | (rx.op == MemOp.WRITE_BLOCK) | \
            (rx.op == MemOp.FETCH_ADD)
        if self.ep:
            writes = writes | (rx.op == MemOp.WRITE_MCAST) | (rx.op == MemOp.WRITE_RED)
        rx_is_read = (rx.op == MemOp.READ_WORD) | (rx.op == MemOp.READ_BLOCK) | ~writes
        m.d.comb += [self.ub.valid.eq(rx_req & ~rx_is_read), self.ub.payload.eq(rx),
                     self.load.valid.eq(rx_req & rx_is_read), self.load.payload.eq(rx)]
        for i, rsp in enumerate(self.rsp):
            m.d.comb += [rsp.valid.eq(rx_rsp & (rx.core == i)), rsp.payload.op.eq(rx.op),
                         rsp.payload.data.eq(rx.data)]
        with m.If(rx_rsp):
            m.d.comb += self.rx.ready.eq(Cat(r.valid & r.ready for r in self.rsp).any())
        with m.Elif(rx_req & rx_is_read):
            m.d.comb += self.rx.ready.eq(self.load.ready)
        with m.Elif(rx_req):
            m.d.comb += self.rx.ready.eq(self.ub.ready)
        return m
