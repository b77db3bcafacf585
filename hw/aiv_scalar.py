"""The AIV core's scalar unit: ALU, branches, jumps and CSR reads, one cycle each."""

from amaranth.hdl import Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from .aiv_units import RegWrite, issue_layout
from .isa import RANK_BITS, Csr, Opcode
from .validate import check_pow2

__all__ = ["ScalarUnit"]


class ScalarUnit(wiring.Component):
    """The one-cycle scalar instructions of an AIV core (the bookkeeping of a kernel).

    While ``run`` is high it executes the issued instruction if it is an ALU
    operation (``add`` .. ``mul``, the immediate forms, ``lui``), a branch, a
    jump or ``csrr``; it writes ``R[rd]`` on ``reg_w`` and redirects ``pc``
    on ``jump``. Shifts use the low 5 bits of their amount; ``slt``/``blt``/
    ``bge`` compare signed, ``sltu``/``bltu``/``bgeu`` unsigned.

    Parameters
    ----------
    imem_depth : int
        Instruction words (power of two, 2..65536): jump targets are taken modulo it.

    Attributes
    ----------
    issue : In(issue_layout)
        The instruction and its operands.
    run : In(1)
        The core is in ``RUN``.
    pc : In(range(imem_depth))
        The instruction's address.
    core_id, rank, cycle : In(8), In(RANK_BITS), In(32)
        What ``csrr core_id``, ``csrr rank`` and ``csrr cycle`` read.
    reg_w : Out(RegWrite())
        ``R[rd]``: an ALU result, ``pc + 1`` (``jal``, ``jalr``), a CSR (0 for an unassigned one).
    jump, target : Out(1), Out(range(imem_depth))
        Next ``pc`` = ``target``: a taken branch and ``jal`` (``pc + imm``), ``jalr``
        (``R[rs1] + imm``).

    Raises
    ------
    TypeError, ValueError
        ``imem_depth`` is not a power of two in range (the message names it).
    """

    def __init__(self, *, imem_depth=256):
        self.imem_depth = check_pow2("imem_depth", imem_depth, 2, 65536)
        super().__init__({
            "issue": In(issue_layout),
            "run": In(1),
            "pc": In(range(imem_depth)),
            "core_id": In(8),
            "rank": In(RANK_BITS),
            "cycle": In(32),
            "reg_w": Out(RegWrite()),
            "jump": Out(1),
            "target": Out(range(imem_depth)),
        })

    def elaborate(self, platform):
        m = Module()
        insn = self.issue
        a, b, imm = insn.a, insn.b, insn.imm
        pc_next = Signal.like(self.pc)
        m.d.comb += pc_next.eq(self.pc + 1)

        def write(value):
            m.d.comb += [self.reg_w.en.eq(1), self.reg_w.addr.eq(insn.rd),
                         self.reg_w.data.eq(value)]

        def jump(taken, target):
            m.d.comb += [self.jump.eq(taken), self.target.eq(target)]

        alu = {
            "ADD": a + b, "SUB": a - b, "AND": a & b, "OR": a | b, "XOR": a ^ b,
            "SLL": (a << b[:5])[:32], "SRL": a >> b[:5],
            "SRA": (a.as_signed() >> b[:5])[:32],
            "SLT": a.as_signed() < b.as_signed(), "SLTU": a < b,
            "MUL": (a * b)[:32],
            "ADDI": a + imm, "ANDI": a & imm, "ORI": a | imm, "XORI": a ^ imm,
            "SLLI": (a << imm[:5])[:32], "SRLI": a >> imm[:5],
            "SRAI": (a.as_signed() >> imm[:5])[:32],
            "LUI": imm << 12,
        }
        branches = {
            "BEQ": a == b, "BNE": a != b,
            "BLT": a.as_signed() < b.as_signed(), "BGE": a.as_signed() >= b.as_signed(),
            "BLTU": a < b, "BGEU": a >= b,
        }
        with m.If(self.run):
            with m.Switch(insn.op):
                for name, value in alu.items():
                    with m.Case(Opcode[name]):
                        write(value[:32])
                for name, taken in branches.items():
                    with m.Case(Opcode[name]):
                        jump(taken, self.pc + imm)
                with m.Case(Opcode.JAL):
                    write(pc_next)
                    jump(1, self.pc + imm)
                with m.Case(Opcode.JALR):
                    write(pc_next)
                    jump(1, insn.eff)
                with m.Case(Opcode.CSRR):
                    with m.Switch(insn.csr):
                        with m.Case(Csr.CORE_ID):
                            write(self.core_id)
                        with m.Case(Csr.RANK):
                            write(self.rank)
                        with m.Case(Csr.CYCLE):
                            write(self.cycle)
                        with m.Default():
                            write(0)
        return m


VERILOG_EXPORTS = {
    "aiv_scalar": (ScalarUnit, {"imem_depth": 64}),
}
