"""Dumps: what a simulator run is asked to write (:class:`Waveform`), and reading it back.

* :class:`Waveform` — a dump requested of a simulator run: where it goes,
  which top-level ports the backend records the edges of (run windows, for
  FST dumps this package does not decode), and what each run produced;
* :func:`read_dump` — the variables of a VCD or FST file (names, widths,
  scopes, the time unit) and, for VCD, their value changes (:meth:`Dump.changes`,
  :func:`vcd_edges`);
* :func:`sanitize_vcd` — a simulator's VCD made loadable by GTKWave.

The FST reader decodes the header and the hierarchy only (the variables a save
file names); the values of an FST dump are GTKWave's to read.
"""

import re
import shutil
import struct
import zlib
from dataclasses import dataclass, field
from pathlib import Path

from ..extras import require
from ..output import atomic_path

__all__ = ["CLOCK_PERIOD_NS", "Var", "Dump", "read_dump", "sanitize_vcd", "Waveform", "vcd_edges"]

#: Clock period of every simulation: 1 ns, so a waveform's time equals the model's at the
#: presets' 1 ns cycle (the cycle is the unit; ns only matter to VCD viewers).
CLOCK_PERIOD_NS = 1

_UNITS = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9, "ps": 1e-12, "fs": 1e-15}


@dataclass(frozen=True)
class Var:
    """One variable of a dump.

    ``scope`` is the full scope path (``("bench", "top", "unsafe")``), ``name``
    the variable's name without escape or bit range, ``bits`` its declared
    range (``"[2:0]"``) if the dump gives one, ``kind`` the declared type
    (``wire``, ``string``, ``real``, ...), ``ident`` what identifies its values
    (aliases share it).
    """
    scope: tuple
    name: str
    raw: str
    size: int
    kind: str
    ident: str
    bits: str = ""

    @property
    def is_string(self):
        return self.kind in ("string", "real", "realtime")

    @property
    def gtkw_name(self):
        """The name GTKWave gives this variable: scope and name joined with ``.``, and
        the ``[msb:lsb]`` of a vector (``raw`` is the name as GTKWave spells it)."""
        bits = self.bits
        if not bits and self.size > 1 and not self.is_string:
            bits = f"[{self.size - 1}:0]"
        return ".".join((*self.scope, self.raw)) + bits


@dataclass
class Dump:
    """What a dump file declares: its variables and its time unit (seconds)."""
    path: Path
    format: str                 # "vcd" or "fst"
    timescale: float
    vars: list = field(default_factory=list)
    end_time: int = None

    def __post_init__(self):
        self._by_key = {}
        for var in self.vars:
            self._by_key.setdefault((var.scope[-1] if var.scope else "", var.name), []).append(var)

    def find(self, *path):
        """The variable at design path ``path`` (below the top, e.g. ``("die1", "core0", "pc")``).

        The dump's own root (``bench.top``, ``top``, ``TOP.top``) is found by
        matching the scope's tail; of several matches the shortest scope wins.
        Returns ``None`` when there is none.
        """
        *scope, name = ("top", *path)
        hits = [v for v in self._by_key.get((scope[-1], name), ())
                if tuple(v.scope[-len(scope):]) == tuple(scope)]
        return min(hits, key=lambda v: (len(v.scope), "$" in v.raw), default=None)

    def changes(self, vars):
        """``{ident: [(time, value), ...]}`` of ``vars`` (VCD only; values as the dump writes them)."""
        if self.format != "vcd":
            raise ValueError(f"value changes are read from VCD dumps only, not {self.path}")
        return _vcd_changes(self.path, {v.ident for v in vars})

    def value_at(self, var, time, changes=None):
        """The value of ``var`` at ``time`` (after every change at ``time``), or ``None``."""
        changes = changes if changes is not None else self.changes([var])
        value = None
        for t, v in changes.get(var.ident, ()):
            if t > time:
                break
            value = v
        return value

    def end(self):
        """The dump's last time stamp (dump units)."""
        if self.end_time is None:
            with open(self.path, "rb") as f:
                f.seek(0, 2)
                size = f.tell()
                f.seek(max(0, size - 65536))
                tail = f.read().decode("ascii", "replace")
            stamps = re.findall(r"^#(\d+)", tail, re.M)
            self.end_time = int(stamps[-1]) if stamps else 0
        return self.end_time

    def to_units(self, seconds):
        """``seconds`` in this dump's time unit (an int)."""
        return round(seconds / self.timescale)

    def clock(self):
        """One clock of this project's simulations (:data:`CLOCK_PERIOD_NS`) in dump units."""
        return max(1, self.to_units(CLOCK_PERIOD_NS * 1e-9))


def read_dump(path):
    """The header of the VCD or FST file ``path`` (:class:`Dump`)."""
    path = Path(path)
    with open(path, "rb") as f:
        head = f.read(1)
    if head == b"\x00":
        return _read_fst(path)
    return _read_vcd(path)


_RANGE = re.compile(r"^(.*?)\s*(\[\d+(?::\d+)?\])$")


def _split_name(raw):
    """``(name, raw, bits)`` of a variable reference: the name without escape or range,
    the name as written (escape kept), the range."""
    raw = raw.strip()
    m = _RANGE.match(raw)
    bits = ""
    if m and m.group(1):
        raw, bits = m.group(1), m.group(2)
    return raw.lstrip("\\"), raw, bits


def _timescale(text):
    m = re.search(r"(\d+)\s*(s|ms|us|ns|ps|fs)\b", text)
    if not m:
        raise ValueError(f"unreadable timescale {text!r}")
    return int(m.group(1)) * _UNITS[m.group(2)]


def _read_vcd(path):
    header = []
    with open(path, "r", errors="replace") as f:
        for line in f:
            header.append(line)
            if "$enddefinitions" in line:
                break
    text = "".join(header)
    ts = re.search(r"\$timescale(.*?)\$end", text, re.S)
    timescale = _timescale(ts.group(1)) if ts else 1e-9
    scope, vars = [], []
    for tok in re.finditer(r"\$scope\s+\S+\s+(\S+)\s+\$end|\$upscope\s+\$end|"
                           r"\$var\s+(\S+)\s+(\d+)\s+(\S+)\s+(.*?)\s*\$end", text, re.S):
        if tok.group(1) is not None:
            scope.append(tok.group(1))
        elif tok.group(0).startswith("$upscope"):
            scope.pop()
        else:
            kind, size, ident, ref = tok.group(2), int(tok.group(3)), tok.group(4), tok.group(5)
            name, raw, bits = _split_name(ref)
            if "." in raw and not raw.startswith("\\"):
                raw = "\\" + raw      # GTKWave's VCD reader escapes a name holding a "."
            vars.append(Var(tuple(scope), name, raw, size, kind, ident, bits))
    return Dump(Path(path), "vcd", timescale, vars)


def _vcd_changes(path, idents):
    out = {i: [] for i in idents}
    time = 0
    with open(path, "r", errors="replace") as f:
        for line in f:
            if "$enddefinitions" in line:
                break
        for line in f:
            line = line.strip()
            if not line:
                continue
            c = line[0]
            if c == "#":
                time = int(line[1:])
            elif c in "bBrRsS":
                value, _, ident = line[1:].partition(" ")
                if ident in out:
                    out[ident].append((time, value))
            elif c in "01xXzZ":
                ident = line[1:]
                if ident in out:
                    out[ident].append((time, c))
    return out


def sanitize_vcd(path):
    """Make a simulator's VCD loadable by GTKWave; return ``path``.

    Yosys names the trigger wires of Verilog ``always`` blocks
    ``$auto$verilog_backend.cc:2355:dump_module$N``; Verilator traces them,
    and GTKWave's VCD parser gives up on the colons ("$VAR parse error") and
    exits. Their colons become ``_`` (only the header is rewritten).
    """
    path = Path(path)
    with open(path, "rb") as src:
        header = []
        for line in src:
            header.append(line)
            if b"$enddefinitions" in line:
                break
        fixed = [re.sub(rb"(\$var\s+\S+\s+\d+\s+\S+\s+)(\S+)",
                        lambda m: m.group(1) + m.group(2).replace(b":", b"_"), line)
                 if line.lstrip().startswith(b"$var") and b":" in line else line
                 for line in header]
        if fixed == header:
            return path
        with atomic_path(path) as tmp, open(tmp, "wb") as dst:
            dst.writelines(fixed)
            shutil.copyfileobj(src, dst, 1 << 20)
    return path


# FST (fstapi.h): blocks of a type byte and a big-endian length that counts itself.
_FST_HDR, _FST_HIER, _FST_HIER_LZ4, _FST_HIER_LZ4DUO, _FST_ZWRAPPER = 0, 4, 6, 7, 254
_FST_SCOPE, _FST_UPSCOPE, _FST_ATTR_BEGIN, _FST_ATTR_END = 254, 255, 252, 253
_FST_KINDS = {3: "real", 4: "real", 20: "realtime", 21: "string"}


def _lz4_block(src, size):
    """Decompress one LZ4 block (the format FST hierarchies use) of ``size`` bytes."""
    require("verilator", ["lz4"])         # FST dumps come from Verilator and Icarus
    import lz4.block
    try:
        return lz4.block.decompress(bytes(src), uncompressed_size=size)
    except lz4.block.LZ4BlockError as exc:
        raise ValueError(f"LZ4 block does not decode to {size} bytes ({exc})") from None


def _leb128(buf, i):
    value = shift = 0
    while True:
        b = buf[i]
        i += 1
        value |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return value, i


def _cstring(buf, i):
    end = buf.index(b"\0", i)
    return buf[i:end].decode("utf-8", "replace"), end + 1


def _read_fst(path):
    data = Path(path).read_bytes()
    if data[0] == _FST_ZWRAPPER:
        raise ValueError(f"{path}: a gzip-wrapped FST; unwrap it first (fst2vcd, or GTKWave)")
    timescale, end_time, hier = 1e-9, None, None
    pos = 0
    while pos + 9 <= len(data):
        kind = data[pos]
        (length,) = struct.unpack(">Q", data[pos + 1:pos + 9])
        body = data[pos + 9:pos + 1 + length]
        if kind == _FST_HDR:
            _start, end_time = struct.unpack(">QQ", body[:16])
            timescale = 10.0 ** struct.unpack(">b", body[64:65])[0]
        elif kind == _FST_HIER:
            hier = zlib.decompress(body[8:], 15 + 32)
        elif kind == _FST_HIER_LZ4:
            (size,) = struct.unpack(">Q", body[:8])
            hier = _lz4_block(body[8:], size)
        elif kind == _FST_HIER_LZ4DUO:
            size, once = struct.unpack(">QQ", body[:16])
            hier = _lz4_block(_lz4_block(body[16:], once), size)
        pos += 1 + length
        if length == 0:
            break
    if hier is None:
        raise ValueError(f"{path}: no hierarchy block (not an FST file?)")
    scope, vars, handles = [], [], 0
    i = 0
    while i < len(hier):
        tag = hier[i]
        i += 1
        if tag == _FST_SCOPE:
            i += 1                               # scope type
            name, i = _cstring(hier, i)
            _comp, i = _cstring(hier, i)
            scope.append(name)
        elif tag == _FST_UPSCOPE:
            scope.pop()
        elif tag == _FST_ATTR_BEGIN:
            i += 2                               # attribute type and subtype
            _name, i = _cstring(hier, i)
            _arg, i = _leb128(hier, i)
        elif tag == _FST_ATTR_END:
            pass
        else:
            i += 1                               # direction
            ref, i = _cstring(hier, i)
            size, i = _leb128(hier, i)
            alias, i = _leb128(hier, i)
            if not alias:
                handles += 1
                alias = handles
            name, raw, bits = _split_name(ref)
            vars.append(Var(tuple(scope), name, raw, size, _FST_KINDS.get(tag, "wire"),
                            str(alias), bits))
    return Dump(Path(path), "fst", timescale, vars, end_time)


# --- runs -------------------------------------------------------------------------------------

class Waveform:
    """A dump requested of simulator runs (``run(..., waveform=Waveform(...))``).

    ``path``'s suffix picks the format: ``.fst`` (Icarus and Verilator, their
    own FST writers) or anything else for VCD (every simulator). Each run
    writes ``path``, the second ``<stem>-2<suffix>``, and so on; ``watch``
    lists top-level ports (``"host.running"``) whose edges the backend records
    (:attr:`runs`: one dict per run with ``path``, ``simulator``, ``spec``,
    ``edges`` ``{port: [(time in s, value), ...]}``).
    """

    def __init__(self, path, *, watch=()):
        self.path = Path(path)
        self.format = "fst" if self.path.suffix == ".fst" else "vcd"
        self.watch = tuple(watch)
        self.runs = []

    def next_path(self):
        """Where the next run's dump goes."""
        n = len(self.runs) + 1
        return self.path if n == 1 else self.path.with_name(f"{self.path.stem}-{n}{self.path.suffix}")

    def add_run(self, path, *, simulator, spec, edges):
        """Record a run's dump (called by the backends)."""
        self.runs.append({"path": Path(path), "simulator": simulator, "spec": spec,
                          "edges": edges})


def vcd_edges(dump, ports):
    """``{port: [(time in s, value), ...]}`` of top-level ``ports`` (``"host.running"``) in a VCD."""
    vars = {p: dump.find(*p.split(".")) or dump.find(p.replace(".", "__")) for p in ports}
    changes = dump.changes([v for v in vars.values() if v is not None])
    return {p: [(t * dump.timescale, _int(val)) for t, val in changes.get(v.ident, ())]
            for p, v in vars.items() if v is not None}


def _int(value):
    try:
        return int(value, 2)
    except ValueError:
        return None
