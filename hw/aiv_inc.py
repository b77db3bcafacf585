"""The AIV core's INC-MoE port: posts to the die's network interface, its counters, the cube.

On the INC-MoE machine (docs/spec/kernels.md §2.2–2.6) a core hands its
AllGather, ReduceScatter and barrier work to its die's network interface
(:class:`~epfabric.hw.inc_nic.IncNic`) as posts, waits on the interface's
cumulative counters, and has its expert's FFN rows computed by the die's cube
unit, which serves the cores one row at a time.
"""

from amaranth.hdl import Array, Cat, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from .aiv_units import MAX_UBUF_ROWS, Control, RegWrite, UBufRead, UBufWrite, issue_layout, \
    ubuf_row, ubuf_row_bits
from .isa import INC_COUNTERS, Opcode
from .validate import check_multiple, check_pow2

__all__ = ["INC_POSTS", "inc_post_layout", "INC_WAIT_ADDR", "IncUnit"]

#: ``inc_post.payload.op`` of each posting instruction (the NIC's ``PostOp`` values).
INC_POSTS = {"incag": 0, "incrs": 1, "incbar": 2, "inccnt": 3}

#: A core's post to its die's network interface: operation and two operands (R[rs1], R[rs2]).
inc_post_layout = data.StructLayout({"op": 2, "a": 32, "b": 32})

#: ``wait_addr`` of a core stalled in ``incwait`` on counter ``ctr``: ``INC_WAIT_ADDR | ctr``
#: (rank 255, block 0x7fff: not a memory address any kernel uses).
INC_WAIT_ADDR = 0xFFFFFF00


class IncUnit(wiring.Component):
    """The INC-MoE instructions of an AIV core (``inc=True``): posts, ``incwait``, ``cube``.

    * ``incag incrs incbar inccnt`` offer one post (op :data:`INC_POSTS`,
      ``a`` = R[rs1], ``b`` = R[rs2]) and stall until ``inc_post`` takes it.
    * ``incwait rd, ctr, rs2`` stalls until counter ``ctr`` of ``inc_counts``
      reaches R[rs2] (compared wrap-safe: ``counter - R[rs2]`` is not
      negative), then writes the counter to ``R[rd]``; while it stalls,
      ``waiting`` is high and ``wait_addr`` is ``INC_WAIT_ADDR | ctr``.
    * ``cube ru, rs1, rs2, rs3`` enters the core's ``CUBE`` state
      (:class:`~epfabric.hw.aiv_units.Control`) with the operands latched and
      raises ``cube_req`` from the next cycle; in the cycle the unit pulses
      ``cube_done`` it writes ``a * x + b`` (``a`` = R[rs2], ``b`` = R[rs3],
      mod 2**32) for every 32-bit word ``x`` of UBuf row R[rs1] to the same
      word of row R[ru], and the core moves on.

    Parameters
    ----------
    ubuf_rows : int
        UBuf rows (power of two, 1..:data:`~epfabric.hw.aiv_units.MAX_UBUF_ROWS`).
    data_bytes : int
        Modelled bytes of a row (multiple of 32, 32..512).

    Attributes
    ----------
    issue : In(issue_layout)
        The instruction and its operands.
    ctl : Out(Control())
        Handshake with the core's FSM; the wait state is ``CUBE``.
    reg_w : Out(RegWrite())
        ``R[rd]`` of an ``incwait``.
    ubuf_r, ubuf_w : Out(UBufRead(...)), Out(UBufWrite(...))
        The cube's source and destination rows.
    inc_post : Out(stream.Signature(inc_post_layout))
        Posts to the die's network interface.
    inc_counts : In(32).array(len(INC_COUNTERS))
        The interface's cumulative AG, RS and barrier counters.
    cube_req, cube_done : Out(1), In(1)
        ``cube_req`` is high while the core is in ``CUBE`` (up to and including the
        ``cube_done`` cycle).
    waiting, wait_addr : Out(1), Out(32)
        An ``incwait`` stalls, and on which counter.

    Raises
    ------
    TypeError, ValueError
        A parameter has the wrong type or is out of range (the message names it).
    """

    def __init__(self, *, ubuf_rows=4, data_bytes=64):
        check_pow2("ubuf_rows", ubuf_rows, 1, MAX_UBUF_ROWS)
        check_multiple("data_bytes", data_bytes, 32, 32, 512)
        self.ubuf_rows, self.data_bytes = ubuf_rows, data_bytes
        ubuf = dict(rows=ubuf_rows, data_bytes=data_bytes)
        super().__init__({
            "issue": In(issue_layout),
            "ctl": Out(Control()),
            "reg_w": Out(RegWrite()),
            "ubuf_r": Out(UBufRead(**ubuf)),
            "ubuf_w": Out(UBufWrite(**ubuf)),
            "inc_post": Out(stream.Signature(inc_post_layout)),
            "inc_counts": In(32).array(len(INC_COUNTERS)),
            "cube_req": Out(1),
            "cube_done": In(1),
            "waiting": Out(1),
            "wait_addr": Out(32),
        })

    def elaborate(self, platform):
        m = Module()
        insn, ctl, ua, uw = self.issue, self.ctl, self.ubuf_r, self.ubuf_w
        a, b, c = insn.a, insn.b, insn.c
        nwords = self.data_bytes // 4
        post = self.inc_post
        counter = Signal(32, name="inc_counter")
        row_w = ubuf_row_bits(self.ubuf_rows)
        k = {"dst": Signal(row_w, name="cube_dst"), "src": Signal(row_w, name="cube_src"),
             "a": Signal(32, name="cube_a"), "b": Signal(32, name="cube_b")}

        with m.If(ctl.run):
            with m.Switch(insn.op):
                for name, op in INC_POSTS.items():
                    with m.Case(Opcode[name.upper()]):
                        m.d.comb += [post.valid.eq(1), post.payload.op.eq(op),
                                     post.payload.a.eq(a), post.payload.b.eq(b),
                                     ctl.hold.eq(~post.ready)]
                with m.Case(Opcode.INCWAIT):
                    m.d.comb += counter.eq(Array(self.inc_counts)[insn.ctr])
                    with m.If(~(counter - b)[31]):          # wrap-safe counter >= threshold
                        m.d.comb += [self.reg_w.en.eq(1), self.reg_w.addr.eq(insn.rd),
                                     self.reg_w.data.eq(counter)]
                    with m.Else():
                        m.d.comb += [self.waiting.eq(1), ctl.hold.eq(1)]
                with m.Case(Opcode.CUBE):
                    m.d.comb += [ctl.hold.eq(1), ctl.enter.eq(1)]
                    m.d.sync += [k["dst"].eq(ubuf_row(insn.u, self.ubuf_rows)),
                                 k["src"].eq(ubuf_row(a, self.ubuf_rows)), k["a"].eq(b), k["b"].eq(c)]

        with m.If(ctl.active):
            # the request is the state alone (not ~cube_done): the die's unit answers in the
            # request's own cycle when a row costs one cycle, and a request that depended on
            # the answer would be a combinational loop
            m.d.comb += [self.cube_req.eq(1), ua.addr.eq(k["src"])]
            with m.If(self.cube_done):
                words = [(k["a"] * ua.data.word_select(i, 32) + k["b"])[:32] for i in range(nwords)]
                m.d.comb += [uw.addr.eq(k["dst"]), uw.data.eq(Cat(*words)),
                             uw.en.eq((1 << nwords) - 1), ctl.leave.eq(1), ctl.advance.eq(1)]

        m.d.comb += self.wait_addr.eq(Mux(self.waiting, INC_WAIT_ADDR | insn.ctr, 0))
        return m


VERILOG_EXPORTS = {
    "aiv_inc": (IncUnit, {"ubuf_rows": 2, "data_bytes": 32}),
}
