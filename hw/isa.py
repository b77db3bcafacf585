"""The AIV kernel ISA, defined once, as data (docs/spec/design.md "Kernel programs").

:data:`INSTRUCTIONS` is the single definition of the instruction set: each
:class:`Instruction` names its mnemonic, opcode, operand fields and a one-line
description. Everything else derives from it:

* the encoder / decoder here (:func:`encode`, :func:`decode`) and the
  assembler (:mod:`epfabric.sw.assembler`);
* the hardware decoder of :class:`epfabric.hw.aiv_core.AIVCore`, which builds
  its :data:`Opcode` enum and instruction :func:`insn_layout` (a
  ``data.StructLayout`` with a union of per-instruction operand structs) from
  this table.

Instruction word
----------------
32 bits. Bits ``[0:6]`` are the opcode; the operand fields of an instruction
follow from bit 6 upwards, in the order listed, each ``field.bits`` wide
(registers 4 bits, conditions 3 bits, immediates as declared). Unused high
bits are zero.

Machine model
-------------
* 16 scalar registers ``r0`` .. ``r15`` of 32 bits; ``r0`` reads 0 and ignores
  writes.
* Memory addresses are 32-bit byte addresses that name the rank (die):
  ``[31:32-rb]`` rank, ``[31-rb:9]`` DataBlock index in that rank's HBM slice,
  ``[8:2]`` 32-bit word in the block, ``[1:0]`` ignored (word aligned).
  ``rb`` is the machine's ``rank_bits``: 8 by default (``[31:24]`` rank, 2**15
  blocks, up to 256 ranks); a machine of fewer ranks may narrow it to give a
  rank more blocks (16 ranks, ``rank_bits=4``: 2**19 blocks). The rank field
  stays at the top so one addition forms a remote address from a local one,
  as before; 32-bit registers and cycle counts do not change.
  :func:`address` builds one. A rank is local or remote only to the system
  that routes the request; the core treats every address alike.
* The UBuf (the core's local buffer) is addressed the same way without a rank:
  row ``addr >> 9``, word ``(addr >> 2) & 127``. A row stands for one 512 B
  DataBlock of which the core models ``data_bytes``; words beyond them read as
  0 and ignore writes, so results do not depend on ``data_bytes`` for data
  kept in the leading modelled bytes (and cycle counts never do).
* Vector operands are UBuf vectors: element ``i`` (``width`` bits, unsigned)
  of a vector starting at row ``R`` is element ``i % (4096 // width)`` of row
  ``R + i // (4096 // width)``; the length comes from a register.
* Conditions (``cond`` fields) are unsigned comparisons ``a OP b``:
  ``eq ne lt le gt ge`` (the vector unit's :class:`~epfabric.hw.vector_unit.Cond`).
* ``W[R]`` is the UBuf read as 32-bit words from word 0 of the row ``R``
  points to: word ``m`` is word ``m % 128`` of row ``(R >> 9) + m // 128``
  (what ``ulw`` at ``R + 4*m`` reads). ``vcomp`` writes its indices there
  (Ascend's GatherMask: a compress of the matching indices); it streams
  CompareScalar masks (``VecOp.CMP``) through the vector unit and the core's
  write-back packs each mask into words (:class:`~epfabric.hw.aiv_core.AIVCore`).
* ``valu`` (opcode 63) is four element-wise vector operations under one opcode, chosen by
  its 2-bit immediate (:data:`VALU_FNS`): Ascend's ``Duplicate``, ``Sub``, ``Abs`` and
  ``Mins``, the instructions CANN's open dispatch kernel counts a slot's expert with
  (``CalTokenSendExpertCnt``: Duplicate, Sub, Abs, Mins, then ReduceSum, our ``vsum``).

Optional units
--------------
Instructions with a ``unit`` exist only on cores built with that unit
(:class:`~epfabric.hw.aiv_core.AIVCore` ``inc=True``, the INC-MoE machine);
elsewhere they fault like an unassigned opcode.

* ``unit="inc"`` (opcodes 48..52, INC-MoE §3.1 message semantics): post an
  AllGather / ReduceScatter of a row range of the die's registered buffers,
  a cross-rank barrier, or a rank's row count to the die's network interface
  (:class:`~epfabric.hw.inc_nic.IncNic`), and wait on one of its cumulative
  completion counters (``ctr`` 0 = AG rows received, 1 = RS rows reduced, 2 =
  barriers released) against an increasing threshold (wrap-safe ``>=``).
* ``unit="ep"`` (opcodes 53..54: in-network expert parallelism on the superpod's
  :class:`~epfabric.hw.inc_switch.IncSwitch` fabric): ``stbm``, one block store to a set
  of dies, multicast by the switches; ``stbr``, a reduction contribution the switches sum
  with the group's other contributions (:class:`~epfabric.hw.aiv_core.AIVCore` ``ep=True``).
* ``unit="cube"`` (opcode 56): one row of the expert FFN on the die's cube
  (matrix) unit. Functionally the surrogate of docs/spec/kernels.md §4, ``y = a*x + b``
  on every 32-bit word of the row (mod 2**32); its time is the die's
  ``cube_cycles`` per row, and the die's cores share the unit.
* ``unit="fp"`` (opcodes 58..62, :class:`~epfabric.hw.aiv_core.AIVCore` ``fp=True``):
  floating-point vector instructions on UBuf rows through the core's
  :class:`~epfabric.hw.fp_unit.FpUnit` (``fop`` names its operation): the casts
  bf16 -> fp32 (exact) and fp32 -> bf16 (nearest, ties to even), and fp32 add,
  multiply by a scalar register and multiply-add. With them a combine sums a token's
  expert rows as Ascend's combine kernels do: ``Cast`` the bf16 row to fp32, ``Muls``
  by the top-k weight, ``Add`` into the fp32 sum, ``Cast`` the sum back to bf16
  (:class:`~epfabric.hw.aiv_fp.FpSequencer`).

Floating-point vectors
----------------------
``F[R]`` is an fp32 vector at UBuf address ``R``: element ``i`` is word ``i % 128`` of
row ``(R >> 9) + i // 128``, IEEE 754 binary32 bits. ``H[R]`` is a bf16 vector,
packed two to a 32-bit word as a bf16 array in memory is (little-endian): element ``i``
is bits ``[16*(i%2) : 16*(i%2) + 16]`` of word ``(i % 256) // 2`` of row
``(R >> 9) + i // 256`` (element ``2k`` in the low half of word ``k``). A scalar
operand is all 32 bits of its register, read as fp32. Only elements ``i < R[rs2]`` are
written (a bf16 result's last word is written whole: with an odd length its high half,
element ``R[rs2]``, becomes ``+0``).

Reserved opcode space
---------------------
:data:`RESERVED` lists opcode ranges kept free for later work: 55 (INC) (57 became
``ldbc``, 58..62 the floating-point instructions, 63 ``valu``).
Opcode 0 is never assigned: executing it (e.g. running off the end of a
program into zeroed instruction memory) faults the core.
"""

import types
from dataclasses import dataclass

from amaranth.hdl import signed, unsigned
from amaranth.lib import data, enum

from .hbm import BLOCK_BYTES, WORDS_PER_BLOCK
from .fp_unit import FpOp
from .validate import UserError, UserTypeError, check_int, check_word
from .vector_unit import Cond, VecOp

__all__ = ["WORD_BITS", "OPCODE_BITS", "NUM_REGS", "REG_BITS", "COND_BITS", "Field", "Instruction",
           "INSTRUCTIONS", "INC_COUNTERS", "VALU_FNS", "BY_MNEMONIC", "BY_OPCODE", "RESERVED",
           "Cond", "VecOp",
           "FpOp", "Csr",
           "Opcode", "insn_layout", "encode", "decode", "address", "split_address",
           "address_layout", "block_bits", "check_rank_bits", "narrowest_rank_bits",
           "rank_bits_for", "RANK_BITS",
           "BLOCK_BITS", "BLOCK_BYTES", "WORDS_PER_BLOCK"]

WORD_BITS = 32
OPCODE_BITS = 6
NUM_REGS = 16
REG_BITS = 4
COND_BITS = 3
RANK_BITS = 8
BLOCK_BITS = 15


class Csr(enum.Enum, shape=4):
    """Read-only values for ``csrr``."""
    CORE_ID = 0  #: the core's ``core_id`` parameter
    RANK = 1     #: the core's ``rank`` input (its die)
    CYCLE = 2    #: cycles the core has run (out of idle and halt) since reset


@dataclass(frozen=True)
class Field:
    """One operand field.

    ``kind`` is ``"reg"`` (4-bit register number), ``"imm"`` (``bits`` wide,
    two's complement when ``signed``), ``"cond"`` (a :class:`Cond` name) or
    ``"csr"`` (a :class:`Csr` name or number).
    """
    name: str
    kind: str
    bits: int = REG_BITS
    signed: bool = False

    @property
    def lo(self):
        """Smallest encodable value."""
        return -(1 << (self.bits - 1)) if self.signed else 0

    @property
    def hi(self):
        """Largest encodable value."""
        return (1 << (self.bits - 1)) - 1 if self.signed else (1 << self.bits) - 1

    def shape(self):
        if self.kind == "cond":
            return Cond
        if self.kind == "csr":
            return Csr
        return signed(self.bits) if self.signed else unsigned(self.bits)


def _reg(name):
    return Field(name, "reg", REG_BITS)


def _imm(name, bits, is_signed):
    return Field(name, "imm", bits, is_signed)


_COND = Field("cond", "cond", COND_BITS)
_CSR = Field("csr", "csr", 4)
RD, RS1, RS2, RS3, RU = (_reg(n) for n in ("rd", "rs1", "rs2", "rs3", "ru"))
I18 = _imm("imm", 18, True)


@dataclass(frozen=True)
class Instruction:
    """One instruction: mnemonic, opcode, operand fields, description.

    ``vop`` names the vector-unit operation a vector instruction issues, ``fop``
    the floating-point unit's; ``unit`` the optional unit an instruction needs
    (module docstring).
    """
    mnemonic: str
    opcode: int
    fields: tuple
    doc: str
    vop: VecOp = None
    unit: str = None
    fop: FpOp = None

    @property
    def bits(self):
        return OPCODE_BITS + sum(f.bits for f in self.fields)


def _i(mnemonic, opcode, fields, doc, vop=None, unit=None, fop=None):
    return Instruction(mnemonic, opcode, tuple(fields), doc, vop, unit, fop)


#: The instruction set (see the module docstring). ``R[x]`` is register x.
INSTRUCTIONS = (
    _i("add", 1, [RD, RS1, RS2], "R[rd] = R[rs1] + R[rs2]"),
    _i("sub", 2, [RD, RS1, RS2], "R[rd] = R[rs1] - R[rs2]"),
    _i("and", 3, [RD, RS1, RS2], "R[rd] = R[rs1] & R[rs2]"),
    _i("or", 4, [RD, RS1, RS2], "R[rd] = R[rs1] | R[rs2]"),
    _i("xor", 5, [RD, RS1, RS2], "R[rd] = R[rs1] ^ R[rs2]"),
    _i("sll", 6, [RD, RS1, RS2], "R[rd] = R[rs1] << (R[rs2] & 31)"),
    _i("srl", 7, [RD, RS1, RS2], "R[rd] = R[rs1] >> (R[rs2] & 31), logical"),
    _i("sra", 8, [RD, RS1, RS2], "R[rd] = R[rs1] >> (R[rs2] & 31), arithmetic"),
    _i("slt", 9, [RD, RS1, RS2], "R[rd] = R[rs1] < R[rs2] (signed)"),
    _i("sltu", 10, [RD, RS1, RS2], "R[rd] = R[rs1] < R[rs2] (unsigned)"),
    _i("mul", 11, [RD, RS1, RS2], "R[rd] = low 32 bits of R[rs1] * R[rs2]"),
    _i("addi", 12, [RD, RS1, I18], "R[rd] = R[rs1] + imm"),
    _i("andi", 13, [RD, RS1, _imm("imm", 18, False)], "R[rd] = R[rs1] & imm (zero-extended)"),
    _i("ori", 14, [RD, RS1, _imm("imm", 18, False)], "R[rd] = R[rs1] | imm (zero-extended)"),
    _i("xori", 15, [RD, RS1, _imm("imm", 18, False)], "R[rd] = R[rs1] ^ imm (zero-extended)"),
    _i("slli", 16, [RD, RS1, _imm("imm", 5, False)], "R[rd] = R[rs1] << imm"),
    _i("srli", 17, [RD, RS1, _imm("imm", 5, False)], "R[rd] = R[rs1] >> imm, logical"),
    _i("srai", 18, [RD, RS1, _imm("imm", 5, False)], "R[rd] = R[rs1] >> imm, arithmetic"),
    _i("lui", 19, [RD, _imm("imm", 20, False)], "R[rd] = imm << 12"),
    _i("beq", 20, [RS1, RS2, I18], "if R[rs1] == R[rs2]: pc += imm (in instructions)"),
    _i("bne", 21, [RS1, RS2, I18], "if R[rs1] != R[rs2]: pc += imm"),
    _i("blt", 22, [RS1, RS2, I18], "if R[rs1] < R[rs2] (signed): pc += imm"),
    _i("bge", 23, [RS1, RS2, I18], "if R[rs1] >= R[rs2] (signed): pc += imm"),
    _i("bltu", 24, [RS1, RS2, I18], "if R[rs1] < R[rs2] (unsigned): pc += imm"),
    _i("bgeu", 25, [RS1, RS2, I18], "if R[rs1] >= R[rs2] (unsigned): pc += imm"),
    _i("jal", 26, [RD, _imm("imm", 22, True)], "R[rd] = pc + 1; pc += imm"),
    _i("jalr", 27, [RD, RS1, I18], "R[rd] = pc + 1; pc = R[rs1] + imm"),
    _i("lw", 28, [RD, RS1, I18], "R[rd] = mem word at R[rs1] + imm (waits for the answer)"),
    _i("sw", 29, [RS2, RS1, I18], "mem word at R[rs1] + imm = R[rs2] (posted; acked later)"),
    _i("ldb", 30, [RU, RS1, I18],
       "UBuf row of R[ru] = mem DataBlock at R[rs1] + imm (waits for the answer)"),
    _i("ldbc", 57, [RU, RS1, I18],
       "ldb continuing a copy whose start an earlier read paid (the next block of a token, a "
       "table or a block whose flag a poll just read): no read_extra wait (the copy "
       "engine: an Ascend MTE copy pays its start once, not per 512 B)"),
    _i("stb", 31, [RU, RS1, I18],
       "mem DataBlock at R[rs1] + imm = UBuf row of R[ru] (posted; remote: one 512 B atomic write)"),
    _i("fadd", 32, [RD, RS1, RS2],
       "atomically: R[rd] = mem word at R[rs1]; that word += R[rs2] (local or remote)"),
    _i("poll", 33, [RD, RS1, RS2, _COND],
       "repeat R[rd] = mem word at R[rs1] until cond(R[rd], R[rs2]) holds"),
    _i("fence", 34, [], "wait until every posted store (sw, stb) has been acknowledged"),
    _i("mark", 35, [_imm("imm", 16, False)], "emit (core id, cycle, event id imm) on the trace stream"),
    _i("halt", 36, [], "stop; the core's halted output goes high"),
    _i("csrr", 37, [RD, _CSR], "R[rd] = core value csr (core_id, rank, cycle)"),
    _i("ulw", 38, [RD, RS1, I18], "R[rd] = UBuf word at R[rs1] + imm"),
    _i("usw", 39, [RS2, RS1, I18], "UBuf word at R[rs1] + imm = R[rs2]"),
    _i("vcount", 40, [RD, RS1, RS2, RS3, _COND],
       "R[rd+k] = #{i < R[rs2]: cond(V[R[rs1]][i], R[rs3+k])} for k = 0, 1, 2 (three pivots)",
       VecOp.COUNT),
    _i("vcmp", 41, [RD, RS1, RS2, RS3, _COND],
       "V[R[rd]][i] = cond(V[R[rs1]][i], R[rs3]) (0/1) for i < R[rs2]", VecOp.CMP),
    _i("vfind", 42, [RD, RS1, RS2, RS3, _COND],
       "R[rd] = first i < R[rs2] with cond(V[R[rs1]][i], R[rs3]), or 0xFFFFFFFF", VecOp.FIND_FIRST),
    _i("vadd", 43, [RD, RS1, RS2, RS3],
       "V[R[rd]][i] = V[R[rs1]][i] + V[R[rs3]][i] (mod 2**width) for i < R[rs2]", VecOp.ADD),
    _i("vsum", 44, [RD, RS1, RS2], "R[rd] = sum of V[R[rs1]][i] for i < R[rs2]", VecOp.REDUCE_SUM),
    _i("vmuls", 45, [RD, RS1, RS2, RS3],
       "V[R[rd]][i] = V[R[rs1]][i] * R[rs3] (mod 2**width) for i < R[rs2]", VecOp.MULS),
    _i("vcomp", 46, [RD, RS1, RS2, RS3, _COND],
       "W[R[rd]][m] = the m-th i < R[rs2] with cond(V[R[rs1]][i], R[rs3]), in order "
       "(32-bit words); then R[rd] = the number of such i", VecOp.CMP),
    _i("bar", 47, [],
       "wait at the die's barrier until every running core of the die is at it, then the "
       "die's syncall_cycles knob more (a hardware SyncAll)"),
    _i("incag", 48, [RS1, RS2],
       "post an AllGather of own rows [R[rs1], R[rs1] + R[rs2]) (clipped to the rank's count) "
       "of the registered gather buffer", unit="inc"),
    _i("incrs", 49, [RS1, RS2],
       "post a ReduceScatter of rows [R[rs1], R[rs1] + R[rs2]) of every other rank's partials "
       "(each clipped to that rank's count)", unit="inc"),
    _i("incbar", 50, [], "post a cross-rank barrier (after the ReduceScatters posted before it)",
       unit="inc"),
    _i("inccnt", 51, [RS1, RS2], "set the network interface's row count of rank R[rs1] to R[rs2]",
       unit="inc"),
    _i("incwait", 52, [RD, _imm("ctr", 2, False), RS2],
       "wait until INC counter ctr (0 AG, 1 RS, 2 barrier) >= R[rs2] (wrap-safe); "
       "then R[rd] = the counter", unit="inc"),
    _i("stbm", 53, [RU, RS1, RS2, RS3],
       "DataBlock at R[rs1] (its block and word; the rank field is ignored) on every die of "
       "mask R[rs3] << 32 | R[rs2] (bit d: die d; R[rs3] only on machines of more than 32 dies; "
       "bits past the machine's dies are ignored) = UBuf row R[ru]: "
       "one send, copied in the network where "
       "the paths part (posted; each die acks it)", unit="ep"),
    _i("stbr", 54, [RU, RS1, RS2, RS3],
       "contribute UBuf row R[ru] to the DataBlock at R[rs1] on its rank: summed in the network "
       "with the contributions of the other dies of mask R[rs3] << 32 | R[rs2] (R[rs3] as for "
       "stbm), one from each (the "
       "destination adds its own part itself); posted and not acknowledged", unit="ep"),
    _i("cube", 56, [RU, RS1, RS2, RS3],
       "UBuf row of R[ru] = R[rs2] * (UBuf row of R[rs1]) + R[rs3] per 32-bit word (mod 2**32), "
       "on the die's shared cube unit (cube_cycles per row)", unit="cube"),
    _i("valu", 63, [RD, RS1, RS2, RS3, _imm("imm", 2, False)],
       "V[R[rd]][i] = fn for i < R[rs2], fn = imm (VALU_FNS): 0 dup, R[rs3]; 1 sub, V[R[rs1]][i] - "
       "V[R[rs3]][i] (mod 2**width); 2 abs, |V[R[rs1]][i]| (two's complement); 3 mins, "
       "min(V[R[rs1]][i], R[rs3]) (unsigned): Ascend's Duplicate, Sub, Abs and Mins, one "
       "element-wise vector instruction each", vop=VecOp.DUP),
    _i("vfcastf", 58, [RD, RS1, RS2],
       "F[R[rd]][i] = H[R[rs1]][i] widened to fp32 (exact) for i < R[rs2]",
       unit="fp", fop=FpOp.CAST_BF16_F32),
    _i("vfcastb", 59, [RD, RS1, RS2],
       "H[R[rd]][i] = F[R[rs1]][i] rounded to bf16 (nearest, ties to even) for i < R[rs2]",
       unit="fp", fop=FpOp.CAST_F32_BF16),
    _i("vfadd", 60, [RD, RS1, RS2, RS3],
       "F[R[rd]][i] = F[R[rs1]][i] + F[R[rs3]][i] (fp32) for i < R[rs2]",
       unit="fp", fop=FpOp.ADD),
    _i("vfmuls", 61, [RD, RS1, RS2, RS3],
       "F[R[rd]][i] = F[R[rs1]][i] * R[rs3] (fp32; R[rs3] is fp32 bits) for i < R[rs2]",
       unit="fp", fop=FpOp.MULS),
    _i("vfaxpy", 62, [RD, RS1, RS2, RS3],
       "F[R[rd]][i] = F[R[rs1]][i] * R[rs3] + F[R[rd]][i] (fp32: the product rounded, then "
       "the sum, as Muls then Add; rounded once on a core with fp_fused) for i < R[rs2]",
       unit="fp", fop=FpOp.AXPY),
)

#: ``valu``'s operations by its 2-bit immediate (its ``vop`` is the first, ``DUP``)
VALU_FNS = (VecOp.DUP, VecOp.SUB, VecOp.ABS, VecOp.MINS)

#: Completion counters of ``incwait`` (its ``ctr`` field).
INC_COUNTERS = ("ag", "rs", "bar")

#: Opcode ranges kept free for later work (inclusive bounds).
RESERVED = {
    "inc": (55, 55),   # more INC message operations (INC-MoE §3.1)
}

BY_MNEMONIC = {insn.mnemonic: insn for insn in INSTRUCTIONS}
BY_OPCODE = {insn.opcode: insn for insn in INSTRUCTIONS}


def _check_table():
    if len(BY_MNEMONIC) != len(INSTRUCTIONS) or len(BY_OPCODE) != len(INSTRUCTIONS):
        raise AssertionError("duplicate mnemonic or opcode in INSTRUCTIONS")
    for insn in INSTRUCTIONS:
        if not 0 < insn.opcode < (1 << OPCODE_BITS):
            raise AssertionError(f"{insn.mnemonic}: opcode {insn.opcode} out of range")
        if any(lo <= insn.opcode <= hi for lo, hi in RESERVED.values()):
            raise AssertionError(f"{insn.mnemonic}: opcode {insn.opcode} is reserved")
        if insn.bits > WORD_BITS:
            raise AssertionError(f"{insn.mnemonic}: {insn.bits} bits exceed {WORD_BITS}")
        names = [f.name for f in insn.fields]
        if len(set(names)) != len(names):
            raise AssertionError(f"{insn.mnemonic}: duplicate field name")


_check_table()


def _opcode_body(ns):
    for insn in INSTRUCTIONS:
        ns[insn.mnemonic.upper()] = insn.opcode


#: Opcode enum (6-bit shape), one member per instruction, named in upper case.
Opcode = types.new_class("Opcode", (enum.Enum,), {"shape": OPCODE_BITS}, _opcode_body)
Opcode.__doc__ = "Opcode of an AIV instruction (generated from INSTRUCTIONS)."


def insn_layout():
    """``data.StructLayout`` of an instruction word: ``op`` then a union ``args``.

    ``args.<mnemonic>`` is a ``StructLayout`` of that instruction's fields in
    encoding order, so ``view.args.addi.imm`` is ADDI's signed immediate
    (instructions without operands have no member).
    """
    args = {}
    for insn in INSTRUCTIONS:
        if insn.fields:  # no zero-width members: they become `wire [-1:0]` in Verilog
            args[insn.mnemonic] = data.StructLayout({f.name: f.shape() for f in insn.fields})
    fields = {"op": Opcode, "args": data.UnionLayout(args)}
    pad = WORD_BITS - OPCODE_BITS - max(insn.bits - OPCODE_BITS for insn in INSTRUCTIONS)
    if pad:
        fields["_pad"] = pad
    return data.StructLayout(fields)


def _field_value(insn, field, value):
    if field.kind == "cond":
        names = {c.name.lower(): c.value for c in Cond}
        value = names.get(value.lower(), -1) if isinstance(value, str) else value
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < len(Cond):
            raise UserError(f"{insn.mnemonic}: condition must be one of "
                            f"{', '.join(c.name.lower() for c in Cond)}, not {value!r}")
        return value
    if field.kind == "csr":
        if isinstance(value, str):
            try:
                return Csr[value.upper()].value
            except KeyError:
                raise UserError(f"{insn.mnemonic}: csr must be one of "
                                f"{', '.join(c.name.lower() for c in Csr)}, not {value!r}") from None
        value = int(value)
        if value not in [c.value for c in Csr]:
            raise UserError(f"{insn.mnemonic}: csr must be one of "
                            f"{', '.join(c.name.lower() for c in Csr)}, not {value!r}")
        return value
    if isinstance(value, bool) or not isinstance(value, int):
        raise UserTypeError(f"{insn.mnemonic}: {field.name} must be an integer, not {value!r}")
    if field.kind == "reg":
        if not 0 <= value < NUM_REGS:
            raise UserError(f"{insn.mnemonic}: {field.name} must be a register r0..r{NUM_REGS - 1}, "
                            f"not {value!r}")
        return value
    if not field.lo <= value <= field.hi:
        raise UserError(f"{insn.mnemonic}: {field.name} {value} out of range "
                        f"[{field.lo}, {field.hi}] ({'signed' if field.signed else 'unsigned'} "
                        f"{field.bits}-bit)")
    return value & ((1 << field.bits) - 1)


def encode(mnemonic, *operands):
    """Encode one instruction; ``operands`` in field order (ints, cond/csr names).

    Raises
    ------
    ValueError
        Unknown mnemonic, wrong operand count, or an operand out of range.
    """
    try:
        insn = BY_MNEMONIC[mnemonic.lower()]
    except (KeyError, AttributeError):
        raise UserError(f"unknown mnemonic {mnemonic!r}") from None
    if len(operands) != len(insn.fields):
        raise UserError(f"{insn.mnemonic} takes {len(insn.fields)} operand(s) "
                        f"({', '.join(f.name for f in insn.fields) or 'none'}), "
                        f"not {len(operands)}")
    word, pos = insn.opcode, OPCODE_BITS
    for field, value in zip(insn.fields, operands):
        word |= _field_value(insn, field, value) << pos
        pos += field.bits
    return word


def decode(word):
    """Decode a word into ``(mnemonic, operands)``; immediates sign-extended.

    Conditions and CSRs decode to their lower-case names. Raises
    ``ValueError`` for an unassigned opcode.
    """
    word = check_word("instruction word", word, WORD_BITS)
    op = word & ((1 << OPCODE_BITS) - 1)
    if op not in BY_OPCODE:
        raise UserError(f"unassigned opcode {op} in word {word:#010x}")
    insn = BY_OPCODE[op]
    pos, out = OPCODE_BITS, []
    for field in insn.fields:
        raw = (word >> pos) & ((1 << field.bits) - 1)
        pos += field.bits
        if field.kind == "cond":
            out.append(Cond(raw).name.lower() if raw < len(Cond) else raw)
        elif field.kind == "csr":
            out.append(Csr(raw).name.lower() if raw < len(Csr) else raw)
        elif field.signed and raw >> (field.bits - 1):
            out.append(raw - (1 << field.bits))
        else:
            out.append(raw)
    if word >> pos:
        raise UserError(f"{insn.mnemonic}: nonzero unused bits in word {word:#010x}")
    return insn.mnemonic, out


def block_bits(rank_bits=RANK_BITS):
    """Bits of an address's DataBlock field when its rank field is ``rank_bits`` wide."""
    return WORD_BITS - 9 - rank_bits


def check_rank_bits(rank_bits, ranks=None, hbm_blocks=None):
    """``UserError`` unless ``rank_bits`` (1..8) names ``ranks`` ranks of ``hbm_blocks`` blocks."""
    check_int("rank_bits", rank_bits, 1, RANK_BITS)
    if ranks is not None and ranks > 1 << rank_bits:
        raise UserError(f"rank_bits={rank_bits} addresses {1 << rank_bits} ranks, not {ranks}")
    if hbm_blocks is not None and hbm_blocks > 1 << block_bits(rank_bits):
        raise UserError(f"hbm_blocks={hbm_blocks} does not fit an address with rank_bits="
                        f"{rank_bits} (at most {1 << block_bits(rank_bits)} blocks a rank; "
                        f"fewer rank bits give more)")
    return rank_bits


def narrowest_rank_bits(ranks):
    """The fewest rank bits that name ``ranks`` ranks (``1 << block_bits`` of it: the most
    blocks a rank of such a machine can address)."""
    return max(1, (ranks - 1).bit_length())


def rank_bits_for(ranks, hbm_blocks):
    """``rank_bits`` of a machine: 8 (the default layout) if ``hbm_blocks`` fits it, else
    :func:`narrowest_rank_bits` (``UserError`` if even that leaves too few blocks)."""
    if hbm_blocks <= 1 << BLOCK_BITS:
        return RANK_BITS
    return check_rank_bits(narrowest_rank_bits(ranks), ranks, hbm_blocks)


def address_layout(rank_bits=RANK_BITS):
    """Layout of a 32-bit memory byte address (see the module docstring)."""
    check_rank_bits(rank_bits)
    return data.StructLayout({"byte": 2, "word": 7, "block": block_bits(rank_bits),
                              "rank": rank_bits})


def address(rank, block, word=0, rank_bits=RANK_BITS):
    """Byte address of ``word`` in DataBlock ``block`` of rank ``rank``'s HBM slice."""
    for name, value, bits in (("rank", rank, rank_bits), ("block", block, block_bits(rank_bits)),
                              ("word", word, 7)):
        check_int(name, value, 0, (1 << bits) - 1)
    return (rank << (WORD_BITS - rank_bits)) | (block << 9) | (word << 2)


def split_address(addr, rank_bits=RANK_BITS):
    """``(rank, block, word)`` of a byte address."""
    return (addr >> (WORD_BITS - rank_bits)) & ((1 << rank_bits) - 1), \
        (addr >> 9) & ((1 << block_bits(rank_bits)) - 1), (addr >> 2) & 127
