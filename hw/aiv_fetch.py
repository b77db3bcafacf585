"""The AIV core's front end: instruction memory, decoder and register file.

The instruction at ``pc`` is read combinationally, decoded by
:class:`~epfabric.hw.decoder.Decoder` (generated from the ISA table of
:mod:`epfabric.hw.isa`) and issued with its register operands
(:data:`~epfabric.hw.aiv_units.issue_layout`) in the same cycle: fetch and
decode add no cycle to an instruction.
"""

from amaranth.hdl import Array, Const, Module, Signal
from amaranth.lib import memory, wiring
from amaranth.lib.wiring import In, Out

from .aiv_units import WRITE_PORTS, RegWrite, issue_layout
from .decoder import Decoder
from .isa import INSTRUCTIONS, NUM_REGS, REG_BITS, Opcode, insn_layout
from .validate import check_bool, check_pow2

__all__ = ["FetchUnit", "imem_write_signature"]

def imem_write_signature(depth):
    """The host's write port of an instruction memory of ``depth`` words: ``en``, ``addr``, ``data``."""
    return wiring.Signature({"en": Out(1), "addr": Out(range(depth)), "data": Out(32)})


class FetchUnit(wiring.Component):
    """Instruction memory, decoder and register file of an AIV core.

    Issues the instruction at ``pc`` with its operands, combinationally:
    ``issue.op`` and the decoded fields come from the
    :class:`~epfabric.hw.decoder.Decoder`, the operands from the register file
    (``r0`` reads 0). The registers change only through ``reg_w``, at the
    clock edge; when two ports write one register in a cycle the higher
    port wins (the core never does).

    Parameters
    ----------
    imem_depth : int
        Instruction words (power of two, 2..65536).
    inc, ep, fp : bool
        Whether the core has the INC-MoE units (``inc``, ``cube``), the
        expert-parallel stores (``ep``) and the floating-point vector instructions
        (``fp``) of :data:`~epfabric.hw.isa.INSTRUCTIONS`; an instruction of a unit
        the core lacks is not ``legal``.

    Attributes
    ----------
    imem_w : In(imem_write_signature(imem_depth))
        Host write port of the instruction memory.
    pc : In(range(imem_depth))
        The address the instruction is read from.
    insn : Out(insn_layout())
        The instruction word at ``pc``.
    legal : Out(1)
        The opcode is one of the table's and its unit is built (the core faults otherwise).
    issue : Out(issue_layout)
        The instruction decoded, with its operands.
    reg_w : In(RegWrite()).array(WRITE_PORTS)
        Register write ports.

    Raises
    ------
    TypeError, ValueError
        A parameter has the wrong type or is out of range (the message names it).
    """

    def __init__(self, *, imem_depth=256, inc=False, ep=False, fp=False):
        check_pow2("imem_depth", imem_depth, 2, 65536)
        self.imem_depth = imem_depth
        self.inc, self.ep = check_bool("inc", inc), check_bool("ep", ep)
        self.fp = check_bool("fp", fp)
        super().__init__({
            "imem_w": In(imem_write_signature(imem_depth)),
            "pc": In(range(imem_depth)),
            "insn": Out(insn_layout()),
            "legal": Out(1),
            "issue": Out(issue_layout),
            "reg_w": In(RegWrite()).array(WRITE_PORTS),
        })

    def elaborate(self, platform):
        m = Module()

        m.submodules.imem = imem = memory.Memory(shape=32, depth=self.imem_depth, init=[])
        iw = imem.write_port()
        ir = imem.read_port(domain="comb")
        m.d.comb += [iw.en.eq(self.imem_w.en), iw.addr.eq(self.imem_w.addr),
                     iw.data.eq(self.imem_w.data), ir.addr.eq(self.pc), self.insn.eq(ir.data)]

        m.submodules.decoder = dec = Decoder()
        m.d.comb += [dec.insn.eq(self.insn), self.legal.eq(dec.legal)]
        has = {"inc": self.inc, "cube": self.inc, "ep": self.ep, "fp": self.fp}
        unit_ops = [Opcode[ins.mnemonic.upper()] for ins in INSTRUCTIONS
                    if ins.unit and not has[ins.unit]]
        if unit_ops:
            with m.Switch(self.insn.op):
                with m.Case(*unit_ops):
                    m.d.comb += self.legal.eq(0)
                with m.Default():
                    pass

        regs = [Const(0, 32)] + [Signal(32, name=f"r{i}") for i in range(1, NUM_REGS)]
        rfile = Array(regs)
        a = rfile[dec.rs1]
        issue = self.issue
        m.d.comb += [
            issue.op.eq(self.insn.op), issue.rd.eq(dec.rd), issue.imm.eq(dec.imm),
            issue.cond.eq(dec.cond), issue.csr.eq(dec.csr), issue.ctr.eq(dec.ctr[:2]),
            issue.a.eq(a), issue.b.eq(rfile[dec.rs2]), issue.c.eq(rfile[dec.rs3]),
            issue.u.eq(rfile[dec.ru]), issue.d.eq(rfile[dec.rd]),
            *(issue.s[k].eq(rfile[(dec.rs3 + k)[:REG_BITS]]) for k in range(3)),
            issue.eff.eq(a + dec.imm),
        ]
        for i in range(1, NUM_REGS):
            for w in self.reg_w:
                with m.If(w.en & (w.addr == i)):
                    m.d.sync += regs[i].eq(w.data)
        return m


VERILOG_EXPORTS = {
    "aiv_fetch": (FetchUnit, {"imem_depth": 64}),
}
