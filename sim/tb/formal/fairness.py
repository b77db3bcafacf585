"""Fair consumers for the bounded-response harnesses: back-pressure that never lasts ``patience`` cycles.

A bounded-response property ("every accepted request is answered within *N*
cycles") cannot hold against a consumer that may refuse forever; it holds
under a fairness assumption on the consumer: its ``ready`` is high at least
once in every ``patience`` (*M*) consecutive cycles. :func:`fair_ready` drives
a ``ready`` with any value the solver likes within that assumption, stated as
an ``Assume`` on a counter of consecutive not-ready cycles; ``patience=None``
drops the assumption (the negative controls: the response bound must then
fail). :func:`response_age` counts the age of a tracked request.
"""

from amaranth.asserts import AnySeq
from amaranth.hdl import Assert, Assume, Mux, Signal

__all__ = ["fair_ready", "response_age"]


def fair_ready(m, ready, *, patience, name):
    """Drive ``ready`` with any value, low for at most ``patience - 1`` cycles in a row.

    Returns ``waited``: the number of consecutive cycles *before* the
    current one in which ``ready`` was low (0 after a ready cycle). The
    assumption is ``waited + 1 < patience + 1`` in a not-ready cycle, i.e. a
    not-ready cycle never makes ``patience`` in a row; ``waited <= patience -
    1`` is then an invariant (asserted, so induction never starts above it).
    With ``patience=None`` ``ready`` is free and ``waited`` is a constant 0.
    """
    if patience is not None and (not isinstance(patience, int) or patience < 1):
        raise ValueError(f"patience must be a positive integer or None, not {patience!r}")
    m.d.comb += ready.eq(AnySeq(1))
    if patience is None:
        return Signal(1, name=f"{name}_waited")
    waited = Signal(range(patience), name=f"{name}_waited")
    m.d.comb += [Assume(ready | (waited != patience - 1)),
                 Assert(waited <= patience - 1, f"inv: {name} waited beyond its patience")]
    m.d.sync += waited.eq(Mux(ready, 0, waited + 1))
    return waited


def response_age(m, *, start, done, bound, name):
    """Age of one tracked request: 0 in its start cycle, +1 per cycle until ``done``.

    ``start`` (the request is accepted) and ``done`` (it is answered) are
    one-cycle events; a request started in the cycle the previous one is
    done is tracked at once. Returns ``(pending, age)``: ``pending`` is high
    from the cycle after ``start`` until the cycle of ``done`` included;
    ``age`` saturates at ``bound + 1`` (one past the claim is all a failing
    assertion needs).
    """
    pending = Signal(name=f"{name}_pending")
    age = Signal(range(bound + 2), name=f"{name}_age")
    with m.If(start):
        m.d.sync += [pending.eq(1), age.eq(1)]
    with m.Elif(done):
        m.d.sync += [pending.eq(0), age.eq(0)]
    with m.Elif(pending & (age != bound + 1)):
        m.d.sync += age.eq(age + 1)
    return pending, age
