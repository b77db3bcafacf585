"""Formal harness of the AIV instruction decoder: every opcode against the ISA table.

:class:`DecoderSpec` feeds the combinational :class:`~epfabric.hw.decoder.Decoder`
an arbitrary 32-bit word and states, straight from
:data:`~epfabric.hw.isa.INSTRUCTIONS` (one instruction at a time, not the
decoder's shared cases), what must come out:

* an assigned opcode is ``legal``, and each operand slot holds the
  instruction's field of that name — the bits at its position (fields follow
  the opcode in table order), sign-extended when the field is signed — or 0
  if the instruction has no such field;
* an unassigned opcode (0, the reserved ranges, the gaps) is not ``legal``
  (the core faults on it) and every slot is 0.

The decoder has no state, so bounded model checking at depth 1 already
covers every one of the 2**32 instruction words: a complete proof.

``loose=True`` checks :class:`LooseDecoder` — a broken decoder that accepts
opcode 0 (the negative control).
"""

from amaranth.asserts import AnySeq
from amaranth.hdl import Assert, Const, Cover, signed, unsigned

from ....hw.decoder import Decoder
from ....hw.isa import INSTRUCTIONS, OPCODE_BITS
from . import FormalProperty, Harness

__all__ = ["DecoderSpec", "LooseDecoder", "PROPERTIES"]


class LooseDecoder(Decoder):
    """A broken decoder: opcode 0 (never assigned) decodes as legal."""

    def elaborate(self, platform):
        m = super().elaborate(platform)
        with m.If(self.insn.op.as_value() == 0):
            m.d.comb += self.legal.eq(1)
        return m


class DecoderSpec(Harness):
    """Harness: any instruction word; the decoder's outputs against the table entry.

    Parameters
    ----------
    loose : bool
        Check the broken :class:`LooseDecoder` instead.
    """

    def __init__(self, *, loose=False):
        super().__init__()
        self.dut = LooseDecoder() if loose else Decoder()

    def check(self, m):
        m.submodules.dec = dec = self.dut
        word = dec.insn.as_value()
        m.d.comb += word.eq(AnySeq(32))
        op = word[:OPCODE_BITS]
        slots = {name: getattr(dec, name) for name in dec.slots}
        assigned = Const(0, 1)
        for ins in INSTRUCTIONS:
            hit = op == ins.opcode
            assigned = assigned | hit
            expect = {}
            pos = OPCODE_BITS
            for f in ins.fields:
                bits = word[pos:pos + f.bits]
                expect[f.name] = bits.as_signed() if f.signed else bits
                pos += f.bits
            with m.If(hit):
                m.d.comb += Assert(dec.legal, f"{ins.mnemonic} not legal")
                for name, slot in slots.items():
                    value = _bits(slot)
                    want = _extend(expect.get(name, Const(0, 1)), len(value))
                    m.d.comb += Assert(value == want, f"{ins.mnemonic}: slot {name}")
        m.d.comb += [Cover(dec.legal), Cover(~dec.legal)]     # both kinds of word occur
        with m.If(~assigned):
            m.d.comb += Assert(~dec.legal, "unassigned opcode decoded as legal")
            for name, slot in slots.items():
                m.d.comb += Assert(_bits(slot) == 0, f"unassigned opcode: slot {name} not 0")


def _bits(slot):
    """The bits of a slot (enum-valued slots are views)."""
    return slot.as_value() if hasattr(slot, "as_value") else slot


def _extend(value, width):
    """The ``width``-bit pattern of ``value`` sign- or zero-extended per its shape."""
    if value.shape().signed:
        return (value + Const(0, signed(width + 1)))[:width]
    return (value + Const(0, unsigned(width)))[:width]


PROPERTIES = {
    "decoder.table": FormalProperty(
        DecoderSpec, mode="bmc", depth=1, expect="pass",
        doc="every assigned opcode decodes to its ISA-table entry (all operand slots); every "
            "unassigned opcode is illegal with all slots 0",
        params={}),
}
