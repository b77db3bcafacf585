"""ISA decoder (hw/decoder.py): every instruction's fields as hw/isa.py ``decode()`` sees them, illegal opcodes."""

import random

import pytest
from amaranth.hdl import Fragment, Module
from amaranth.lib import wiring
from amaranth.lib.wiring import Out

from epfabric.hw.decoder import Decoder, operand_slots
from epfabric.hw.isa import (BY_OPCODE, INSTRUCTIONS, OPCODE_BITS, WORD_BITS, Cond, Csr, decode,
                             encode)
from epfabric.sim.backends import ComponentSpec, run
from rejected import rejected

SLOTS = tuple(operand_slots())
M32 = 0xFFFFFFFF


class ClockedDecoder(wiring.Component):
    """The decoder's ports plus a cycle counter: the testbench ticks a ``sync`` domain.

    The decoder itself is combinational (no clock); its outputs pass through
    unchanged, so every read after ``bench.set("insn", ...)`` is the decoder's.
    """

    def __init__(self):
        self.decoder = Decoder()
        super().__init__({**dict(self.decoder.signature.members), "cycle": Out(16)})

    def elaborate(self, platform):
        m = Module()
        m.submodules.decoder = dec = self.decoder
        m.d.comb += [dec.insn.eq(self.insn), self.legal.eq(dec.legal)]
        m.d.comb += [getattr(self, s).eq(getattr(dec, s)) for s in dec.slots]
        m.d.sync += self.cycle.eq(self.cycle + 1)
        return m


SPEC = ComponentSpec("test_decoder:ClockedDecoder", {})


async def decode_words(bench, words):
    """Present each word on ``insn``; return ``[legal, {slot: value}]`` per word (combinational)."""
    out = []
    for w in words:
        bench.set("insn", w)
        out.append([await bench.get("legal"), {s: await bench.get(s) for s in SLOTS}])
        await bench.tick()
    return out


def _random_operand(rng, field):
    if field.kind == "reg":
        return rng.randrange(16)
    if field.kind == "cond":
        return rng.choice(list(Cond)).name.lower()
    if field.kind == "csr":
        return rng.choice(list(Csr)).name.lower()
    # immediates: the extremes half of the time (sign extension), else anything in range
    return rng.choice([field.lo, field.hi, -1 if field.signed else 1,
                       rng.randrange(field.lo, field.hi + 1)])


def expected_slots(word):
    """The decoder's outputs for a legal ``word``, from :func:`epfabric.hw.isa.decode`."""
    mnemonic, operands = decode(word)
    insn = next(i for i in INSTRUCTIONS if i.mnemonic == mnemonic)
    slots = dict.fromkeys(SLOTS, 0)        # a slot the instruction lacks reads 0
    for field, value in zip(insn.fields, operands):
        if field.kind == "cond":
            value = Cond[value.upper()].value
        elif field.kind == "csr":
            value = Csr[value.upper()].value
        slots[field.name] = value & M32    # immediates: sign-extended to 32 bits
    return slots


def legal_words(per_instruction, seed=0):
    rng = random.Random(seed)
    words = []
    for insn in INSTRUCTIONS:
        for _ in range(per_instruction):
            words.append(encode(insn.mnemonic, *(_random_operand(rng, f) for f in insn.fields)))
    return words


def illegal_words(seed=0):
    """Every unassigned opcode, with random (and all-ones) upper bits."""
    rng = random.Random(seed)
    words = []
    for op in range(1 << OPCODE_BITS):
        if op not in BY_OPCODE:
            words += [op, op | (rng.randrange(1 << (WORD_BITS - OPCODE_BITS)) << OPCODE_BITS),
                      op | (M32 & ~((1 << OPCODE_BITS) - 1))]
    return words


def test_slots_generated_from_the_table():
    assert set(SLOTS) == {"rd", "rs1", "rs2", "rs3", "ru", "imm", "cond", "csr", "ctr"}
    d = Decoder()
    Fragment.get(d, None)
    assert len(d.imm) == 32 and all(len(getattr(d, r)) == 4 for r in ("rd", "rs1", "rs2", "rs3", "ru"))
    assert d.cond.shape() is Cond and d.csr.shape() is Csr


def test_every_instruction_decodes_its_fields():
    words = legal_words(per_instruction=12)
    result, _ = run(SPEC, decode_words, {"words": words})
    for w, (legal, slots) in zip(words, result):
        assert legal == 1, f"{decode(w)[0]} ({w:#010x}) not legal"
        assert slots == expected_slots(w), f"{decode(w)} ({w:#010x})"


def test_signed_and_unsigned_immediates():
    """Sign extension follows each field: addi -1 is 0xFFFFFFFF, andi's 18-bit all-ones is not."""
    words = [encode("addi", 1, 2, -1), encode("andi", 1, 2, (1 << 18) - 1), encode("jal", 3, -(1 << 21)),
             encode("lui", 4, 0xFFFFF), encode("mark", 0xFFFF), encode("beq", 1, 2, -2)]
    result, _ = run(SPEC, decode_words, {"words": words})
    assert [slots["imm"] for _legal, slots in result] == \
        [M32, (1 << 18) - 1, (-(1 << 21)) & M32, 0xFFFFF, 0xFFFF, (-2) & M32]


def test_unused_high_bits_are_ignored():
    """Bits above an instruction's fields do not change its slots (hw/isa.py decode rejects them)."""
    base = [encode("fence"), encode("add", 1, 2, 3), encode("mark", 7)]
    high = [w | (1 << 31) | (1 << 30) for w in base]
    result, _ = run(SPEC, decode_words, {"words": base + high})
    assert result[:3] == result[3:]
    assert all(legal == 1 for legal, _slots in result)


def test_illegal_opcodes():
    words = illegal_words()
    assert len(words) == 3 * ((1 << OPCODE_BITS) - len(INSTRUCTIONS))
    result, _ = run(SPEC, decode_words, {"words": words})
    for w, (legal, slots) in zip(words, result):
        assert legal == 0, f"opcode {w & 63} ({w:#010x}) decoded as legal"
        assert slots == dict.fromkeys(SLOTS, 0), f"{w:#010x}: {slots}"


def test_same_decode_on_every_simulator(simulator):
    """One word per instruction plus every illegal opcode, on pysim, Icarus and Verilator."""
    words = legal_words(per_instruction=1, seed=7) + illegal_words(seed=7)[::3]
    result, cycles = run(SPEC, decode_words, {"words": words}, simulator=simulator)
    assert cycles == len(words)
    for w, (legal, slots) in zip(words, result):
        if (w & 63) in BY_OPCODE:
            assert legal == 1 and slots == expected_slots(w), f"{simulator}: {decode(w)}"
        else:
            assert legal == 0 and slots == dict.fromkeys(SLOTS, 0), f"{simulator}: {w:#010x}"


@pytest.mark.parametrize("name", ["insn", "legal"])
def test_a_field_named_like_a_port_is_refused(monkeypatch, name):
    from epfabric.hw import decoder, isa
    table = isa.INSTRUCTIONS + (isa.Instruction("zz", 55, (isa.Field(name, "reg"),), "test"),)
    monkeypatch.setattr(decoder, "INSTRUCTIONS", table)
    with pytest.raises(ValueError, match=f"field name\\(s\\) {name} clash"):
        rejected(Decoder)
