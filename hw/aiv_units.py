"""What the AIV core's units share: the issued instruction and the ports between them and the core.

:class:`~epfabric.hw.aiv_core.AIVCore` keeps the FSM (``state``, ``pc``) and
issues the instruction at ``pc``, decoded and with its register operands
(:data:`issue_layout`, read by :class:`~epfabric.hw.aiv_fetch.FetchUnit`), to
all of its execution units at once; the one whose instruction it is acts on
it. A unit that can take more than one cycle has a state of the FSM to itself
and answers the FSM on a :class:`Control` port. Units write registers through
:class:`RegWrite` ports and use the UBuf through :class:`UBufRead` and
:class:`UBufWrite` ports.

A unit drives each of these ports only in the cycles it executes an
instruction and holds it at 0 in every other cycle, and the core executes one
instruction at a time: the core therefore joins the same port of every unit
into the one register-file or UBuf port by OR (one bus, as the single FSM
drove it).
"""

from amaranth.hdl import Const
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2, exact_log2

from .isa import BLOCK_BYTES, REG_BITS, Cond, Csr, Opcode

__all__ = ["MAX_UBUF_ROWS", "WRITE_PORTS", "issue_layout", "Control", "RegWrite", "UBufRead", "UBufWrite", "ubuf_row",
           "ubuf_row_bits"]

#: Most rows (512 B each) of a core's Unified Buffer.
MAX_UBUF_ROWS = 1024

#: Register-file write ports: three, for ``vcount`` writes three registers in one cycle.
WRITE_PORTS = 3

#: One instruction as the core issues it: the decoded fields (``ctr``: the counter of an
#: ``incwait``) and the operands read from the register file -- ``a``, ``b``, ``c`` =
#: R[rs1], R[rs2], R[rs3]; ``u`` = R[ru]; ``d`` = R[rd]; ``s[k]`` = R[(rs3 + k) mod 16] (a
#: vector instruction's three scalars); ``eff`` = R[rs1] + imm (a memory or UBuf address).
issue_layout = data.StructLayout({
    "op": Opcode, "rd": REG_BITS, "imm": 32, "cond": Cond, "csr": Csr, "ctr": 2,
    "a": 32, "b": 32, "c": 32, "u": 32, "d": 32, "s": data.ArrayLayout(32, 3), "eff": 32,
})


class Control(wiring.Signature):
    """The core's FSM and a unit with a wait state of its own, as the unit sees it.

    Members
    -------
    run : In(1)
        The core is in ``RUN``: the issued instruction executes this cycle.
    active : In(1)
        The core is in the unit's wait state.
    hold : Out(1)
        With ``run``: ``pc`` stays (the instruction stalls, or enters the wait state).
    enter : Out(1)
        With ``run``: the core goes to the unit's wait state.
    leave : Out(1)
        With ``active``: the core goes back to ``RUN``.
    advance : Out(1)
        With ``leave``: ``pc`` moves on; without, the same instruction runs again (a ``poll``
        whose condition does not hold yet).
    """

    def __init__(self):
        super().__init__({"run": In(1), "active": In(1), "hold": Out(1), "enter": Out(1),
                          "leave": Out(1), "advance": Out(1)})


class RegWrite(wiring.Signature):
    """A register-file write port as a unit drives it: ``en``, register ``addr``, ``data``.

    Writes take effect at the clock edge; writes to ``r0`` are dropped.
    """

    def __init__(self):
        super().__init__({"en": Out(1), "addr": Out(REG_BITS), "data": Out(32)})


def ubuf_row_bits(rows):
    """Bits of a row number of a UBuf of ``rows`` rows (at least 1)."""
    return max(1, ceil_log2(rows))


def ubuf_row(addr, rows):
    """The UBuf row of byte address ``addr`` in a UBuf of ``rows`` rows: ``(addr >> 9) % rows``."""
    return (addr >> exact_log2(BLOCK_BYTES))[:ubuf_row_bits(rows)] if rows > 1 else Const(0, 1)


class UBufRead(wiring.Signature):
    """A combinational UBuf read port as a unit drives it: row ``addr``, the row's ``data``.

    Parameters
    ----------
    rows : int
        UBuf rows.
    data_bytes : int
        Modelled bytes of a row.
    """

    def __init__(self, *, rows, data_bytes):
        super().__init__({"addr": Out(ubuf_row_bits(rows)), "data": In(data_bytes * 8)})


class UBufWrite(wiring.Signature):
    """A UBuf write port as a unit drives it: one ``en`` bit per 32-bit word of row ``addr``.

    Parameters
    ----------
    rows : int
        UBuf rows.
    data_bytes : int
        Modelled bytes of a row.
    """

    def __init__(self, *, rows, data_bytes):
        super().__init__({"en": Out(data_bytes // 4), "addr": Out(ubuf_row_bits(rows)),
                          "data": Out(data_bytes * 8)})
