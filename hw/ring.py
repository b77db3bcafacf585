"""Ring storage for FIFOs and delay lines (links, switch inputs).

Small rings are flip-flops read through ``Mux`` chains (continuous
assignments in Verilog, which Icarus evaluates at time 0); larger ones are an
``amaranth.lib.memory.Memory``.
"""

from amaranth.hdl import Mux, Signal
from amaranth.lib.memory import Memory

__all__ = ["REGISTER_RING_MAX", "incr_wrap", "ring_storage"]


#: Rings up to this deep are registers; deeper ones a Memory (Amaranth's
#: simulator pays per Memory per cycle, so small buffers stay in flip-flops).
REGISTER_RING_MAX = 8


def incr_wrap(ptr, depth):
    """``ptr + 1`` modulo ``depth`` (a power-of-two depth wraps for free)."""
    if depth == 2 ** len(ptr):
        return (ptr + 1)[:len(ptr)]
    return Mux(ptr == depth - 1, 0, ptr + 1)


def ring_storage(m, width, depth, w_addr, w_en, w_data, r_addrs, name="ring"):
    """Storage of ``depth`` x ``width`` bits with one write port and asynchronous reads.

    Written on the clock edge when ``w_en``; returns the values at ``r_addrs``.
    Registers up to :data:`REGISTER_RING_MAX` entries, else an
    ``amaranth.lib.memory.Memory`` submodule called ``name`` (unique per module:
    a switch has one ring per input).
    """
    if depth <= REGISTER_RING_MAX:
        regs = [Signal(width, name=f"ring{i}") for i in range(depth)]
        for i, reg in enumerate(regs):
            with m.If(w_en & (w_addr == i)):
                m.d.sync += reg.eq(w_data)
        outs = []
        for addr in r_addrs:
            # A Mux chain, not a Switch: continuous assignments in Verilog, which
            # Icarus evaluates at time 0 (an `always @*` it would not).
            value = regs[-1]
            for i in reversed(range(depth - 1)):
                value = Mux(addr == i, regs[i], value)
            out = Signal(width)
            m.d.comb += out.eq(value)
            outs.append(out)
        return outs
    mem = Memory(shape=width, depth=depth, init=[])
    m.submodules[name] = mem
    wp = mem.write_port()
    m.d.comb += [wp.addr.eq(w_addr), wp.data.eq(w_data), wp.en.eq(w_en)]
    outs = []
    for addr in r_addrs:
        rp = mem.read_port(domain="comb")
        m.d.comb += rp.addr.eq(addr)
        outs.append(rp.data)
    return outs
