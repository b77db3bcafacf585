"""ISA table (hw/isa.py, re-exported by sw/isa.py): encode/decode round trip per instruction."""

import pytest

from epfabric.hw import isa
from epfabric.hw.isa import (BY_MNEMONIC, INSTRUCTIONS, OPCODE_BITS, RESERVED, WORD_BITS, Cond,
                             Csr, Opcode, address, decode, encode, insn_layout, split_address)
from epfabric.sw.assembler import assemble, disassemble


def _samples(field):
    """Extreme and middle values of one field, as the assembler would give them."""
    if field.kind == "cond":
        return [c.name.lower() for c in Cond]
    if field.kind == "csr":
        return [c.name.lower() for c in Csr]
    return sorted({field.lo, field.hi, (field.lo + field.hi) // 2, 0 if field.lo <= 0 else field.lo})


@pytest.mark.parametrize("insn", INSTRUCTIONS, ids=lambda i: i.mnemonic)
def test_round_trip_every_instruction(insn):
    rows = [[_samples(f)[k % len(_samples(f))] for f in insn.fields] for k in range(6)]
    for ops in rows:
        word = encode(insn.mnemonic, *ops)
        assert 0 <= word < (1 << WORD_BITS)
        assert word & ((1 << OPCODE_BITS) - 1) == insn.opcode
        assert decode(word) == (insn.mnemonic, ops)
        # disassembler output assembles back to the same word
        assert assemble("\n".join(disassemble([word]))) == [word]


@pytest.mark.parametrize("insn", INSTRUCTIONS, ids=lambda i: i.mnemonic)
def test_out_of_range_operands_rejected(insn):
    for k, f in enumerate(insn.fields):
        if f.kind in ("cond", "csr"):
            continue
        ops = [_samples(g)[0] for g in insn.fields]
        ops[k] = f.hi + 1
        with pytest.raises(ValueError, match=f"{insn.mnemonic}: .*{f.name}"):
            encode(insn.mnemonic, *ops)


def test_table_is_consistent():
    assert [m.name for m in Opcode] == [i.mnemonic.upper() for i in INSTRUCTIONS]
    assert all(Opcode[i.mnemonic.upper()].value == i.opcode for i in INSTRUCTIONS)
    assert insn_layout().size == WORD_BITS
    assert all(i.doc for i in INSTRUCTIONS)
    used = {i.opcode for i in INSTRUCTIONS}
    for lo, hi in RESERVED.values():
        assert not used & set(range(lo, hi + 1))
    assert 0 not in used
    assert {i.mnemonic for i in INSTRUCTIONS if i.vop is not None} == \
        {"vcount", "vcmp", "vfind", "vadd", "vsum", "vmuls", "vcomp", "valu"}


def test_vcomp_streams_compare_masks():
    """vcomp (opcode 46, below the reserved ranges) issues CompareScalar: the core packs the masks."""
    vcomp = BY_MNEMONIC["vcomp"]
    assert vcomp.opcode == 46 and vcomp.vop == isa.VecOp.CMP
    assert [f.name for f in vcomp.fields] == ["rd", "rs1", "rs2", "rs3", "cond"]
    assert encode("vcomp", 5, 0, 14, 4, "eq") == 46 | 5 << 6 | 0 << 10 | 14 << 14 | 4 << 18


def test_fp_instructions_name_their_fp_unit_operation():
    """The floating-point instructions (opcodes 58..62, the fp unit's): an FpOp each."""
    fp = {i.mnemonic: (i.opcode, i.fop) for i in INSTRUCTIONS if i.unit == "fp"}
    assert fp == {"vfcastf": (58, isa.FpOp.CAST_BF16_F32), "vfcastb": (59, isa.FpOp.CAST_F32_BF16),
                  "vfadd": (60, isa.FpOp.ADD), "vfmuls": (61, isa.FpOp.MULS),
                  "vfaxpy": (62, isa.FpOp.AXPY)}
    assert all(i.fop is None for i in INSTRUCTIONS if i.unit != "fp")
    assert encode("vfaxpy", 4, 3, 2, 6) == 62 | 4 << 6 | 3 << 10 | 2 << 14 | 6 << 18


def test_decode_rejects_unassigned_opcodes():
    for op in [0, *range(RESERVED["inc"][0], RESERVED["inc"][1] + 1)]:
        with pytest.raises(ValueError, match=f"unassigned opcode {op}"):
            decode(op)
    with pytest.raises(ValueError, match="nonzero unused bits"):
        decode(BY_MNEMONIC["halt"].opcode | (1 << 20))


def test_encode_errors():
    with pytest.raises(ValueError, match="unknown mnemonic 'frob'"):
        encode("frob")
    with pytest.raises(ValueError, match=r"add takes 3 operand\(s\) \(rd, rs1, rs2\), not 2"):
        encode("add", 1, 2)
    with pytest.raises(ValueError, match="condition must be one of eq, ne"):
        encode("poll", 1, 2, 3, 9)
    with pytest.raises(ValueError, match="csr must be one of core_id, rank, cycle"):
        encode("csrr", 1, "pc")
    with pytest.raises(TypeError, match="imm must be an integer"):
        encode("addi", 1, 2, 1.5)


def test_address_layout():
    a = address(200, 12345, 100)
    assert split_address(a) == (200, 12345, 100)
    assert a == (200 << 24) | (12345 << 9) | (100 << 2)
    with pytest.raises(ValueError, match="rank must be in \\[0, 255\\], not 256"):
        address(256, 0)


def test_sw_isa_is_the_same_table():
    """Program writers import ``epfabric.sw.isa``: it re-exports this table, not a copy."""
    from epfabric.sw import isa as sw_isa
    assert sw_isa.__all__ == isa.__all__
    for name in isa.__all__:
        assert getattr(sw_isa, name) is getattr(isa, name), name


def test_valu_is_four_element_wise_operations_under_one_opcode():
    """valu (opcode 63, once reserved for the cube unit): Duplicate, Sub, Abs and Mins by its
    2-bit immediate, encoded like vadd with the immediate after rs3."""
    valu = BY_MNEMONIC["valu"]
    assert valu.opcode == 63 and [f.name for f in valu.fields] == ["rd", "rs1", "rs2", "rs3", "imm"]
    assert isa.VALU_FNS == (isa.VecOp.DUP, isa.VecOp.SUB, isa.VecOp.ABS, isa.VecOp.MINS)
    assert encode("valu", 5, 0, 14, 4, 3) == 63 | 5 << 6 | 0 << 10 | 14 << 14 | 4 << 18 | 3 << 22
    assert decode(encode("valu", 5, 0, 14, 4, 2)) == ("valu", [5, 0, 14, 4, 2])
    with pytest.raises(ValueError):
        encode("valu", 5, 0, 14, 4, 4)
