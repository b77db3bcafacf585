"""The INC NIC's transmit side: forwards first, then the AG and RS engines' flits round robin (INC-MoE §3.1).

AG(j+1) and RS(j) of the band pipeline share the link; :class:`TxSelect` chooses the flit
presented on the NIC's ``tx``.
"""

from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from .arbiter import RoundRobin
from .inc_engine import inc_flit_layout

__all__ = ["TxSelect"]

# tx source select (0: nothing)
_NONE, _FWD, _AG, _RS = 0, 1, 2, 3


class TxSelect(wiring.Component):
    """The flit on ``tx``: a forwarded row first, else the AG or RS engine's, round robin.

    The engines' flits are eligible only with ``inject`` (the ring's bubble
    rule; always in INC). Between them the choice is round robin (RS first
    after reset) and held while ``tx`` is not ready, so the flit presented
    stays until taken (payload stable). A forward is never ready while an
    own flit is eligible (``inject`` needs an empty forward queue), so the
    own flits' precedence only keeps a held one presented.

    Parameters
    ----------
    ranks, tmax, lanes : int
        Of the flit (:func:`~epfabric.hw.inc_engine.inc_flit_layout`).

    Attributes
    ----------
    forward : In(stream.Signature(inc_flit_layout(ranks, tmax, lanes)))
        Rows to forward (ring).
    ag, rs : In(stream.Signature(inc_flit_layout(ranks, tmax, lanes)))
        The AG and the RS engine's flit buffers.
    inject : In(1)
        The engines' flits may be presented.
    tx : Out(stream.Signature(inc_flit_layout(ranks, tmax, lanes)))
        Flits to the switch.

    Raises
    ------
    TypeError, ValueError
        On a parameter of the wrong type or out of range (named in the message).
    """

    def __init__(self, *, ranks, tmax, lanes):
        flit = stream.Signature(inc_flit_layout(ranks=ranks, tmax=tmax, lanes=lanes))
        super().__init__({"forward": In(flit), "ag": In(flit), "rs": In(flit), "inject": In(1),
                          "tx": Out(flit)})

    def elaborate(self, platform):
        m = Module()
        fwd, ag, rs = self.forward, self.ag, self.rs
        # own flits: 0 RS, 1 AG (RS first after reset), held until taken
        tx_arb = m.submodules.tx_arb = RoundRobin(count=2, hold=True)
        m.d.comb += [tx_arb.requests.eq(Cat(rs.valid & self.inject, ag.valid & self.inject)),
                     tx_arb.ready.eq(self.tx.ready)]
        sel = Signal(2)
        m.d.comb += sel.eq(Mux(tx_arb.valid, Mux(tx_arb.grant == 0, _RS, _AG),
                               Mux(fwd.valid, _FWD, _NONE)))
        m.d.comb += [self.tx.valid.eq(sel != _NONE),
                     self.tx.payload.eq(Mux(sel == _FWD, fwd.payload.as_value(),
                                            Mux(sel == _AG, ag.payload.as_value(),
                                                rs.payload.as_value())))]
        sent = self.tx.valid & self.tx.ready
        m.d.comb += [fwd.ready.eq(sent & (sel == _FWD)), ag.ready.eq(sent & (sel == _AG)),
                     rs.ready.eq(sent & (sel == _RS))]
        return m
