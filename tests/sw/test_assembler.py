"""Assembler, builder and disassembler (sw/assembler.py)."""

import pytest

from epfabric.hw.validate import UserError, UserTypeError
from epfabric.sw.assembler import Program, assemble, disassemble
from epfabric.sw.isa import decode, encode

SRC = """
# sum 1..10
    li   r1, 10
    li   r2, 0
loop: add r2, r2, r1     ; label and instruction on one line
    addi r1, r1, -1
    bne  r1, r0, loop
    j    end
    nop
end:
    li   r3, 0x12345678
    mv   r4, r3
    poll r5, r3, r4, ge
    csrr r6, cycle
    halt
"""


def test_text_and_builder_agree():
    p = Program()
    p.li(1, 10).li(2, 0).label("loop").add(2, 2, 1).addi(1, 1, -1).bne(1, 0, "loop")
    p.j("end").nop().label("end").li(3, 0x12345678).mv(4, 3).poll(5, 3, 4, "ge")
    p.csrr(6, "cycle").halt()
    assert p.assemble() == assemble(SRC)


def test_labels_and_pseudo_expansion():
    words = assemble(SRC)
    assert decode(words[4]) == ("bne", [1, 0, -2])         # back to `loop`
    assert decode(words[5]) == ("jal", [0, 2])             # over the nop
    assert decode(words[7])[0] == "lui" and decode(words[8])[0] == "addi"
    assert len(words) == 13


@pytest.mark.parametrize("value", [0, 1, -1, 131071, -131072, 131072, 0x7FFFFFFF, -0x80000000,
                                   0xFFFFFFFF, 0x800, 0xFFF, 0x12345FFF])
def test_li_values(value):
    """li loads exactly ``value`` (checked by evaluating lui/addi in Python)."""
    regs = [0] * 16
    for word in Program().li(7, value).assemble():
        mn, ops = decode(word)
        if mn == "lui":
            regs[ops[0]] = (ops[1] << 12) & 0xFFFFFFFF
        else:
            regs[ops[0]] = (regs[ops[1]] + ops[2]) & 0xFFFFFFFF
    assert regs[7] == value & 0xFFFFFFFF


@pytest.mark.parametrize("src, match", [
    ("nop\nnop\nfrob r1", r"^line 3: unknown mnemonic 'frob'"),
    ("add r1, r2", r"^line 1: add takes 3 operand\(s\) \(rd, rs1, rs2\), got 2"),
    ("\n\naddi r1, r2, 200000", r"^line 3: addi: imm 200000 out of range \[-131072, 131071\]"),
    ("slli r1, r2, 32", r"^line 1: slli: imm 32 out of range \[0, 31\]"),
    ("beq r1, r2, nowhere", r"^line 1: unknown label 'nowhere'"),
    ("add r1, r2, r16", r"^line 1: expected a register r0..r15, not 'r16'"),
    ("add r1, r2, 5", r"^line 1: expected a register r0..r15, not 5"),
    ("x:\nx: halt", r"^line 2: label 'x' defined twice"),
    ("poll r1, r2, r3, maybe", r"^line 1: poll: condition must be one of"),
    ("add r1, , r2", r"^line 1: empty operand"),
    ("li r1, 0x100000000", r"^line 1: li value must be a 32-bit integer"),
    ("mark 70000", r"^line 1: mark: imm 70000 out of range \[0, 65535\]"),
])
def test_errors_name_the_line(src, match):
    with pytest.raises(ValueError, match=match):
        assemble(src)


def test_builder_errors_name_the_instruction():
    p = Program().nop().nop().addi(1, 1, 1 << 20)
    with pytest.raises(ValueError, match=r"^instruction 2: addi: imm"):
        p.assemble()
    with pytest.raises(ValueError, match=r"^instruction 0: halt takes 0 operand"):
        Program().halt(1)


@pytest.mark.parametrize("text", [None, 5, b"halt"])
def test_assemble_takes_text_only(text):
    """``assemble(None)`` raised AttributeError; now a UserTypeError naming the argument."""
    with pytest.raises(UserTypeError, match=f"assembly text must be a string, not {text!r}"):
        assemble(text)


def test_bad_words_and_mnemonics_are_user_errors():
    with pytest.raises(UserTypeError, match="instruction word must be an integer, not 'x'"):
        disassemble(["x"])
    with pytest.raises(UserError, match=r"instruction word must be in \[0, 2\*\*32 - 1\]"):
        disassemble([1 << 32])
    with pytest.raises(UserTypeError, match="instruction 0: mnemonic must be a string, not 3"):
        Program().emit(3)
    with pytest.raises(UserError, match="unknown mnemonic None"):
        encode(None)


def test_disassemble_round_trip():
    words = assemble(SRC)
    assert assemble("\n".join(disassemble(words))) == words
    assert disassemble([encode("poll", 1, 2, 3, "ne")]) == ["poll r1, r2, r3, ne"]


def test_remembered_words_depend_on_the_operands_types_and_labels():
    """Builder entries that name no label are encoded once (``_plain_words``): ``True`` and
    ``1.0`` equal ``1`` as keys but are still refused, and a label resolves in each program."""
    assert Program().addi(1, 1, 1).assemble() == [encode("addi", 1, 1, 1)]
    for bad in (True, 1.0):
        with pytest.raises(UserError, match=r"^instruction 0: addi: imm must be an integer"):
            Program().addi(1, 1, bad).assemble()
    first = Program().li(1, "x").label("x").halt().assemble()
    later = Program().nop().li(1, "x").label("x").halt().assemble()
    assert decode(first[1]) == ("addi", [1, 1, 2]) and decode(later[2]) == ("addi", [1, 1, 3])
