"""Assembler, Python program builder and disassembler for the AIV ISA.

Two front ends produce the same :class:`Program`:

* text, through :func:`assemble` (``assemble(text) -> list of words``)::

      # comments start with '#' or ';'
          li   r1, 10          # pseudo-instruction: lui + addi as needed
      loop:
          addi r1, r1, -1
          bne  r1, r0, loop    # branch targets are labels (or pc-relative ints)
          halt

* Python, for kernel generators: one method per instruction of
  :data:`epfabric.sw.isa.INSTRUCTIONS` (``and``/``or`` are ``and_``/``or_``),
  plus :meth:`Program.label` and the pseudo-instructions ``li``, ``mv``,
  ``nop`` and ``j``::

      p = Program()
      p.li(1, 10)
      p.label("loop")
      p.addi(1, 1, -1)
      p.bne(1, 0, "loop")
      p.halt()
      words = p.assemble()

Operands are written in the ISA's field order. Registers are ``r0`` .. ``r15``
(ints in Python), conditions ``eq ne lt le gt ge``, CSRs ``core_id rank
cycle``. In branches and ``jal`` a label means "offset to that label"; in any
other immediate it means the label's instruction index. Errors raise
``ValueError`` naming the source line (``line 7: ...``) or, for builder
programs, the instruction index.
"""

import functools
import re

from ..hw.validate import UserError, UserTypeError
from .isa import BY_MNEMONIC, INSTRUCTIONS, decode, encode

__all__ = ["Program", "assemble", "disassemble", "PSEUDO"]

_RELATIVE = {"beq", "bne", "blt", "bge", "bltu", "bgeu", "jal"}
#: Pseudo-instructions and what they expand to.
PSEUDO = {
    "li": "li rd, value: load any 32-bit value (addi, or lui + addi)",
    "mv": "mv rd, rs: addi rd, rs, 0",
    "nop": "nop: addi r0, r0, 0",
    "j": "j target: jal r0, target",
}
_LABEL_RE = re.compile(r"^[A-Za-z_.][A-Za-z0-9_.]*$")


def _li_parts(value):
    """``(upper20, lower)`` with ``(upper20 << 12) + lower == value`` (mod 2**32)."""
    value &= 0xFFFFFFFF
    lower = value & 0xFFF
    if lower >= 0x800:
        lower -= 0x1000
    upper = ((value - lower) >> 12) & 0xFFFFF
    return upper, lower


#: operands of every mnemonic (instructions and pseudo-instructions): :meth:`Program.emit`'s
#: fast path checks only this; anything else takes the path that names the problem
_ARITY = {**{insn.mnemonic: len(insn.fields) for insn in INSTRUCTIONS},
          "li": 2, "mv": 2, "nop": 0, "j": 1}


class Program:
    """A program under construction: instructions and labels; see the module docstring."""

    def __init__(self):
        # (mnemonic, operands, source line or None): kernel generators add millions, and a
        # tuple is the cheapest record to build
        self._entries = []
        self._labels = {}
        self._line = None  # source line of the entries being added (text front end)
        self._lui = 0      # li entries that take two words (lui + addi): the rest take one

    def __len__(self):
        return len(self._entries) + self._lui

    def _where(self, entry=None, index=None):
        line = entry[2] if entry is not None else self._line
        if line is not None:
            return f"line {line}"
        return f"instruction {index if index is not None else len(self)}"

    def label(self, name):
        """Define label ``name`` at the next instruction."""
        if not isinstance(name, str) or not _LABEL_RE.match(name):
            raise UserError(f"{self._where()}: bad label name {name!r}")
        if name in self._labels:
            raise UserError(f"{self._where()}: label {name!r} defined twice")
        self._labels[name] = len(self)
        return self

    def emit(self, mnemonic, *operands):
        """Append instruction ``mnemonic`` (or a pseudo-instruction)."""
        # the fast path (kernel generators emit millions): a known lower-case mnemonic with
        # its operand count; operands are checked when the program is assembled
        try:
            fast = _ARITY.get(mnemonic, -1) == len(operands)
        except TypeError:            # an unhashable mnemonic: named below
            fast = False
        if fast:
            self._entries.append((mnemonic, operands, self._line))
            if mnemonic == "li":
                self._lui += self._size(self._entries[-1]) - 1
            return self
        return self._emit_checked(mnemonic, operands)

    def _emit_checked(self, mnemonic, operands):
        if not isinstance(mnemonic, str):
            raise UserTypeError(f"{self._where()}: mnemonic must be a string, not {mnemonic!r}")
        mnemonic = mnemonic.lower()
        if mnemonic not in BY_MNEMONIC and mnemonic not in PSEUDO:
            raise UserError(f"{self._where()}: unknown mnemonic {mnemonic!r}")
        expected = {"li": 2, "mv": 2, "nop": 0, "j": 1}.get(mnemonic)
        if expected is None:
            expected = len(BY_MNEMONIC[mnemonic].fields)
        if len(operands) != expected:
            names = ("rd, value" if mnemonic == "li" else "rd, rs" if mnemonic == "mv"
                     else "target" if mnemonic == "j" else
                     ", ".join(f.name for f in BY_MNEMONIC[mnemonic].fields) if mnemonic in BY_MNEMONIC
                     else "")
            raise UserError(f"{self._where()}: {mnemonic} takes {expected} operand(s) "
                            f"({names or 'none'}), got {len(operands)}")
        entry = (mnemonic, operands, self._line)
        self._entries.append(entry)
        self._lui += self._size(entry) - 1
        return self

    @staticmethod
    def _size(entry):
        mnemonic, operands, _ = entry
        if mnemonic != "li":
            return 1
        value = operands[1]
        if isinstance(value, int) and -(1 << 17) <= value < (1 << 17):
            return 1
        return 2

    def _reg(self, entry, index, value):
        bad = ValueError(f"{self._where(entry, index)}: expected a register r0..r15, not {value!r}")
        if isinstance(value, str):
            m = re.fullmatch(r"[rR](\d+)", value.strip())
            if not m:
                raise bad
            number = int(m.group(1))
        elif entry[2] is not None:   # text: a bare number is not a register
            raise bad
        else:
            number = value
        if isinstance(number, bool) or not isinstance(number, int) or not 0 <= number < 16:
            raise bad
        return number

    def _resolve(self, entry, index, value, relative):
        if isinstance(value, str):
            if value not in self._labels:
                raise UserError(f"{self._where(entry, index)}: unknown label {value!r}")
            return self._labels[value] - index if relative else self._labels[value]
        return value

    def _expand(self, entry, index):
        """Yield ``(mnemonic, operands)`` machine instructions of one entry."""
        m, ops, _ = entry
        if m == "nop":
            return [("addi", [0, 0, 0])]
        if m == "mv":
            return [("addi", [self._reg(entry, index, ops[0]), self._reg(entry, index, ops[1]), 0])]
        if m == "j":
            return [("jal", [0, self._resolve(entry, index, ops[0], True)])]
        if m == "li":
            rd = self._reg(entry, index, ops[0])
            value = self._resolve(entry, index, ops[1], False)
            if isinstance(value, bool) or not isinstance(value, int) \
                    or not -(1 << 31) <= value < (1 << 32):
                raise UserError(f"{self._where(entry, index)}: li value must be a 32-bit "
                                f"integer, not {value!r}")
            if self._size(entry) == 1:
                return [("addi", [rd, 0, value])]
            upper, lower = _li_parts(value)
            return [("lui", [rd, upper]), ("addi", [rd, rd, lower])]
        insn = BY_MNEMONIC[m]
        out = []
        for field, value in zip(insn.fields, ops):
            if field.kind == "reg":
                out.append(self._reg(entry, index, value))
            elif field.kind == "imm":
                out.append(self._resolve(entry, index, value, m in _RELATIVE))
            else:
                out.append(value)
        return [(m, out)]

    def assemble(self):
        """Return the program as a list of 32-bit instruction words."""
        words = []
        for entry in self._entries:
            if entry[2] is None:           # the builder's: one naming no label is memoised
                try:
                    words.extend(_plain_words(entry[0], *entry[1]))
                    continue
                except Exception:          # a label or a bad operand: resolved or named below
                    pass
            for mnemonic, ops in self._expand(entry, len(words)):
                try:
                    words.append(encode(mnemonic, *ops))
                except UserError as exc:
                    raise UserError(f"{self._where(entry, len(words))}: {exc}") from None
        return words

    @property
    def labels(self):
        """``{label: instruction index}``."""
        return dict(self._labels)

    def li(self, rd, value):
        """Load any 32-bit value (one ``addi`` or ``lui`` + ``addi``)."""
        entry = ("li", (rd, value), self._line)     # emit's fast path, one call fewer
        self._entries.append(entry)
        self._lui += self._size(entry) - 1
        return self

    def mv(self, rd, rs):
        """``rd = rs``."""
        return self.emit("mv", rd, rs)

    def nop(self):
        """Do nothing for one cycle."""
        return self.emit("nop")

    def j(self, target):
        """Jump to a label (``jal r0, target``)."""
        return self.emit("j", target)


def _make_method(insn):
    mnemonic, arity = insn.mnemonic, len(insn.fields)

    def method(self, *operands):
        if len(operands) == arity:       # emit's fast path, one call fewer
            self._entries.append((mnemonic, operands, self._line))
            return self
        return self._emit_checked(mnemonic, operands)
    method.__name__ = insn.mnemonic + ("_" if insn.mnemonic in ("and", "or") else "")
    method.__doc__ = f"``{insn.mnemonic} {', '.join(f.name for f in insn.fields)}``: {insn.doc}"
    return method


for _insn in INSTRUCTIONS:
    setattr(Program, _make_method(_insn).__name__, _make_method(_insn))

_NO_LABELS = Program()


@functools.lru_cache(maxsize=1 << 16, typed=True)
def _plain_words(mnemonic, *operands):
    """The words of a builder entry that names no label (``_NO_LABELS`` has none to resolve).

    They depend on nothing else, and a paper-shape machine's programs repeat a few
    ten thousand such entries millions of times. ``typed``: ``1``, ``1.0`` and ``True`` are
    equal keys but not equal operands (only the first encodes). Errors are not remembered:
    :meth:`Program.assemble` takes its general path for them, which names the instruction.
    """
    entry = (mnemonic, operands, None)
    return tuple(encode(m, *ops) for m, ops in _NO_LABELS._expand(entry, 0))


def _operand(text):
    text = text.strip()
    if re.fullmatch(r"[rR]\d+", text):
        return text
    try:
        return int(text, 0)
    except ValueError:
        return text  # a label, condition or CSR name


def parse(text):
    """Parse assembly ``text`` into a :class:`Program` (not yet encoded)."""
    if not isinstance(text, str):
        raise UserTypeError(f"assembly text must be a string, not {text!r}")
    prog = Program()
    for lineno, raw in enumerate(text.splitlines(), start=1):
        prog._line = lineno
        line = re.split(r"[#;]", raw, maxsplit=1)[0].strip()
        while True:
            m = re.match(r"^([A-Za-z_.][A-Za-z0-9_.]*)\s*:(.*)$", line)
            if not m:
                break
            prog.label(m.group(1))
            line = m.group(2).strip()
        if not line:
            continue
        parts = line.split(None, 1)
        mnemonic = parts[0]
        ops = [] if len(parts) == 1 else [o for o in parts[1].split(",")]
        if any(not o.strip() for o in ops):
            raise UserError(f"line {lineno}: empty operand in {line!r}")
        prog.emit(mnemonic, *[_operand(o) for o in ops])
    prog._line = None
    return prog


def assemble(text):
    """Assemble ``text`` into a list of 32-bit instruction words."""
    return parse(text).assemble()


def disassemble(words):
    """One line of assembly per word (branch offsets as signed ints)."""
    lines = []
    for word in words:
        mnemonic, ops = decode(word)
        insn = BY_MNEMONIC[mnemonic]
        text = [f"r{v}" if f.kind == "reg" else str(v) for f, v in zip(insn.fields, ops)]
        lines.append(f"{mnemonic} {', '.join(text)}".rstrip())
    return lines
