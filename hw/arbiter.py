"""Round-robin arbitration: one arbiter, written as continuous logic.

Used wherever several sources share one resource: the switch's outputs, the
die router's UB port and fabric ``tx``, the die's INC post port and cube
unit, the INC NIC's memory port and ``tx``, the system's MARK trace buffer.
Grants are ``Mux`` chains, not ``Switch`` statements, so the generated
Verilog is continuous assignments (Icarus evaluates those at time 0; it does
not run ``always @*`` then).
"""

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from .validate import check_int

__all__ = ["RoundRobin", "lowest_set"]


def lowest_set(m, vec, name):
    """Index of the lowest set bit of ``vec`` (a Mux chain: continuous logic)."""
    n = len(vec)
    idx = Signal(range(max(2, n)), name=name)
    value = Const(n - 1, len(idx))
    for i in reversed(range(n - 1)):
        value = Mux(vec[i], i, value)
    m.d.comb += idx.eq(value)
    return idx


class RoundRobin(wiring.Component):
    """Round-robin arbiter over ``count`` requesters.

    The grant goes to the first requester at or after the one following the
    last requester served, wrapping around (requester 0 first after reset),
    so every requester that keeps asking is served within ``count`` grants.
    The grant is combinational (in the cycle of the requests); priority moves
    at the clock edge where the grantee is served (``valid & ready``).

    Parameters
    ----------
    count : int
        Requesters (>= 1).
    hold : bool
        Keep a grant that was not served: after a cycle with ``valid`` high
        and ``ready`` low, the same requester is granted, with ``valid``
        high, until it is served, whatever ``requests`` is then (the
        grantee's payload stays presented, as a stream's must). A requester
        must not withdraw a granted request under ``hold``.

    Attributes
    ----------
    requests : In(count)
        Bit ``i``: requester ``i`` asks for the resource.
    grant : Out(range(count))
        The granted requester (meaningful while ``valid``).
    valid : Out(1)
        A requester is granted.
    ready : In(1)
        The grantee is served at this clock edge (read only while ``valid``).

    Raises
    ------
    TypeError, ValueError
        On an invalid parameter (named in the message).
    """

    def __init__(self, *, count, hold=False):
        check_int("count", count, 1)
        self.count = count
        self.hold = bool(hold)
        super().__init__({
            "requests": In(count),
            "grant": Out(range(count)),
            "valid": Out(1),
            "ready": In(1),
        })

    def elaborate(self, platform):
        m = Module()
        n = self.count
        req = self.requests
        fresh = Signal(range(n), name="fresh")    # the round-robin choice among this cycle's requests
        if n > 1:
            ptr = Signal(range(n), name="ptr")     # the requester after the last one served
            high = Signal(n, name="high")          # requests at or after ptr
            # ptr <= n - 1 always holds (ptr is a grant index): a constant, not a comparison
            m.d.comb += high.eq(req & Cat(*(ptr <= i if i < n - 1 else Const(1, 1)
                                             for i in range(n))))
            lo_high = lowest_set(m, high, "lo_high")
            lo_all = lowest_set(m, req, "lo_all")
            m.d.comb += fresh.eq(Mux(high.any(), lo_high, lo_all))
            with m.If(self.valid & self.ready):
                m.d.sync += ptr.eq(Mux(self.grant == n - 1, 0, self.grant + 1))
        if self.hold:
            held = Signal(name="held")             # the last cycle's grant was not served
            held_grant = Signal(range(n), name="held_grant")
            m.d.sync += held.eq(self.valid & ~self.ready)
            with m.If(self.valid):        # read only after a valid cycle: kept when idle
                m.d.sync += held_grant.eq(self.grant)
            m.d.comb += [self.grant.eq(Mux(held, held_grant, fresh)),
                         self.valid.eq(held | req.any())]
        else:
            m.d.comb += [self.grant.eq(fresh), self.valid.eq(req.any())]
        return m
