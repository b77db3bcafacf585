"""Round-robin arbitration, written as continuous logic.

Used wherever several sources share one resource: the die's UB port and
fabric ``tx``, the system's MARK trace buffer. Grants are ``Mux`` chains, not
``Switch`` statements, so the generated Verilog is continuous assignments
(Icarus evaluates those at time 0; it does not run ``always @*`` then).
"""

from amaranth.hdl import Cat, Const, Mux, Signal

__all__ = ["round_robin", "lowest_set"]


def lowest_set(m, vec, name):
    """Index of the lowest set bit of ``vec`` (a Mux chain: continuous logic)."""
    n = len(vec)
    idx = Signal(range(max(2, n)), name=name)
    value = Const(n - 1, len(idx))
    for i in reversed(range(n - 1)):
        value = Mux(vec[i], i, value)
    m.d.comb += idx.eq(value)
    return idx


def round_robin(m, requests, name):
    """Round-robin arbiter over the 1-bit ``requests``.

    Returns ``(grant, any, advance)``: the granted index (valid when ``any``)
    and a function ``advance(cond)`` that moves priority past the grant at the
    clock edge where ``cond`` (the granted transfer) holds.
    """
    n = len(requests)
    req = Signal(n, name=f"{name}_req")
    m.d.comb += req.eq(Cat(*requests))
    any_ = Signal(name=f"{name}_any")
    m.d.comb += any_.eq(req.any())
    if n == 1:
        grant = Signal(1, name=f"{name}_grant")
        return grant, any_, lambda cond: None
    ptr = Signal(range(n), name=f"{name}_ptr")
    high = Signal(n, name=f"{name}_high")
    # ptr <= n - 1 always holds (ptr is a grant index): a constant, not a comparison
    m.d.comb += high.eq(req & Cat(*(ptr <= i if i < n - 1 else Const(1, 1) for i in range(n))))
    lo_high = lowest_set(m, high, f"{name}_lo_high")
    lo_all = lowest_set(m, req, f"{name}_lo_all")
    grant = Signal(range(n), name=f"{name}_grant")
    m.d.comb += grant.eq(Mux(high.any(), lo_high, lo_all))

    def advance(cond):
        with m.If(cond):
            m.d.sync += ptr.eq(Mux(grant == n - 1, 0, grant + 1))
    return grant, any_, advance
