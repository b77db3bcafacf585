"""The AIV core's instruction decoder, generated from the ISA table.

:class:`Decoder` turns one 32-bit instruction word (:func:`~epfabric.hw.isa.insn_layout`)
into *operand slots*: one output per distinct field name of
:data:`~epfabric.hw.isa.INSTRUCTIONS` (``rd rs1 rs2 rs3 ru imm cond csr`` for
today's table), each driven from the bits where the decoded instruction keeps
that field, plus ``legal``. Nothing here lists an instruction: adding one to
the table adds its decoder cases (and a new field name adds a slot).

Slot values
-----------
* a register slot (4 bits) is the field's register number;
* ``imm`` (32 bits) is the instruction's immediate, sign-extended when the
  field is signed (``addi``, branches, ``jal``, loads/stores ...) and
  zero-extended otherwise (``andi``, ``slli``, ``lui``, ``mark`` ...), exactly
  as :func:`~epfabric.hw.isa.decode` returns it;
* ``cond`` / ``csr`` are the raw 3/4-bit field values (:class:`~epfabric.hw.isa.Cond`,
  :class:`~epfabric.hw.isa.Csr`);
* a slot the instruction does not have, and every slot of an unassigned
  opcode, is 0; ``legal`` is 1 exactly for the opcodes of the table.

The decoder is combinational: it adds no cycle to the core. Every output is
one ``m.Switch`` on the opcode with a ``Default`` arm (continuous logic of
the instruction word only), which Icarus, Verilator and Amaranth's simulator
all evaluate alike.
"""

from amaranth.hdl import Module, unsigned
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from .isa import INSTRUCTIONS, OPCODE_BITS, REG_BITS, Cond, Csr, Opcode, insn_layout

__all__ = ["operand_slots", "Decoder"]


def operand_slots():
    """``{slot name: shape}`` of the decoder's operand outputs, from :data:`INSTRUCTIONS`.

    One slot per distinct field name, in order of first appearance in the
    table: ``imm`` fields → ``unsigned(32)`` (sign-/zero-extended), ``cond`` →
    :class:`Cond`, ``csr`` → :class:`Csr`, registers → ``unsigned(4)``.
    """
    slots = {}
    for ins in INSTRUCTIONS:
        for f in ins.fields:
            if f.name in slots:
                continue
            if f.kind == "imm":
                slots[f.name] = unsigned(32)
            elif f.kind == "cond":
                slots[f.name] = Cond
            elif f.kind == "csr":
                slots[f.name] = Csr
            else:
                slots[f.name] = unsigned(REG_BITS)
    return slots


def _placements():
    """``{slot: {(bit position, bits, signed): [instructions]}}``.

    Instructions whose field sits at the same bits share one decoder case (a
    field's position follows from the table's field order).
    """
    placements = {}
    for ins in INSTRUCTIONS:
        pos = OPCODE_BITS
        for f in ins.fields:
            key = (pos, f.bits, f.signed)
            placements.setdefault(f.name, {}).setdefault(key, []).append(ins)
            pos += f.bits
    return placements


def _opcode(ins):
    return Opcode[ins.mnemonic.upper()]


class Decoder(wiring.Component):
    """Combinational decoder of one AIV instruction word (see the module docstring).

    Takes no parameters: its ports and cases are generated from
    :data:`~epfabric.hw.isa.INSTRUCTIONS`.

    Attributes
    ----------
    insn : In(insn_layout())
        The 32-bit instruction word (opcode in bits 0..5).
    legal : Out(1)
        The opcode is one of the table's.
    rd, rs1, rs2, rs3, ru : Out(4)
        Register slots (0 when the instruction has no such field).
    imm : Out(32)
        The immediate, sign- or zero-extended per field (0 when none).
    cond : Out(Cond)
        The condition field (``poll``, ``vcount``, ``vcmp``, ``vfind``).
    csr : Out(Csr)
        The CSR field (``csrr``).
    """

    def __init__(self):
        slots = operand_slots()
        clash = sorted({"insn", "legal"} & set(slots))
        if clash:
            raise ValueError(f"INSTRUCTIONS field name(s) {', '.join(clash)} clash with "
                             f"decoder ports")
        self.slots = tuple(slots)
        super().__init__({
            "insn": In(insn_layout()),
            "legal": Out(1),
            **{name: Out(shape) for name, shape in slots.items()},
        })

    def elaborate(self, platform):
        m = Module()
        insn = self.insn
        with m.Switch(insn.op):
            with m.Case(*(_opcode(ins) for ins in INSTRUCTIONS)):
                m.d.comb += self.legal.eq(1)
            with m.Default():
                m.d.comb += self.legal.eq(0)
        word = insn.as_value()
        for name, groups in _placements().items():
            slot = getattr(self, name)
            with m.Switch(insn.op):
                for (pos, bits, is_signed), members in groups.items():
                    with m.Case(*(_opcode(ins) for ins in members)):
                        src = word[pos:pos + bits]
                        m.d.comb += slot.eq(src.as_signed() if is_signed else src)
                with m.Default():
                    pass
        return m


VERILOG_EXPORTS = {
    "decoder": (Decoder, {}),
}
