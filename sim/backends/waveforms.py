"""Waveforms a person can read: dump headers, GTKWave save files that open on the moment that matters.

A simulator writes a dump (VCD or FST); this module writes the GTKWave save
file (``.gtkw``) next to it that makes the dump readable without touching
anything: the window opens zoomed on a given time window, named markers sit
on the cycles that matter (the primary marker on the first, so the signal
pane shows the values there), traces come in collapsible groups with comment
rows, and enum-valued signals show their names.

* :func:`read_dump` — the variables of a VCD or FST file (names, widths,
  scopes, the time unit) and, for VCD, their value changes;
* :class:`Trace`, :class:`Comment`, :class:`Group`, :class:`Marker` and
  :func:`write_gtkw` — a save file from design paths (``("unsafe",
  "reader_state")``, relative to the design top), resolved against the dump,
  so the names are the ones the simulator wrote (``bench.top.`` on
  Amaranth's simulator, ``top.`` under cocotb) and every trace exists;
* :func:`read_gtkw` — parse a save file back (tests, tools): traces, groups,
  comments, markers and the time window GTKWave will show;
* :class:`Waveform` — a dump requested of a simulator run: where it goes,
  which top-level ports the backend records the edges of (run windows, for
  FST dumps this module does not decode), and what each run produced;
* :func:`machine_view` — the save file of a machine run (``epfabric run
  --vcd``): per chosen die/core the core's state, pc, wait address and MARK
  events, the die's UB port commits and its links' occupancy.

The GTKWave save-file format is line based (GTKWave 3.3 ``savefile.c``):
``[timestart] T`` is the left edge of the window; ``*Z P A B ...`` holds the
zoom ``Z``, the primary marker ``P`` and the named markers ``A`` .. ``Z``
(``-1``: unset); ``[markername] Aname`` names marker A; ``@flags`` sets the
flags of the following rows (``@800200`` opens a group, ``@1000200`` closes
it, ``@200`` is a comment row written ``-text``); ``^N file`` attaches
translate filter file ``N``. GTKWave shows ``2**-Z / 200`` time units per
pixel (``zoombuttons.c``/``calczoom``: 200 pixels per frame of ``2**-Z``
units, at least one unit per frame).
"""

import math
import re
import shutil
import struct
import zlib
from dataclasses import dataclass, field
from pathlib import Path

from ...hw.validate import UserError
from ..extras import require
from ..output import atomic_path

__all__ = ["Var", "Dump", "read_dump", "sanitize_vcd", "Trace", "Comment", "Group", "Marker",
           "write_gtkw", "fit_gtkw", "read_gtkw", "SaveFile", "zoom_for", "Waveform", "vcd_edges",
           "parse_scopes", "run_window", "machine_view", "generic_view", "GTKW_SIZE"]

#: Window size a save file asks for (pixels).
GTKW_SIZE = (1400, 860)
#: GTKWave sizes its signal pane to the widest row (comments, group names,
#: ``alias=value``): about CHAR_PX pixels a character plus PANE_PAD, never
#: less than SIGNALS_WIDTH. Left of it sits the collapsed SST (SST_PX); the
#: vertical scroll bar and borders take WAVE_MARGIN. Measured on GTKWave
#: 3.3.118 (GTK 3, default font) at 1400 x 860; a save file plans its zoom for
#: the wave pane these leave, and puts its markers well inside.
CHAR_PX, PANE_PAD, SIGNALS_WIDTH, SST_PX, WAVE_MARGIN = 8.2, 40, 200, 50, 24
#: Comment rows are wrapped to this many characters.
COMMENT_CHARS = 44

_UNITS = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9, "ps": 1e-12, "fs": 1e-15}


# --- dumps -------------------------------------------------------------------------------------

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


# --- save files --------------------------------------------------------------------------------

@dataclass(frozen=True)
class Trace:
    """A trace of the signal at design ``path``; ``enum`` (a Python Enum) shows values by name."""
    path: tuple
    label: str = None
    fmt: str = "hex"
    enum: type = None


@dataclass(frozen=True)
class Comment:
    """A comment row."""
    text: str


@dataclass
class Group:
    """A collapsible group of rows (traces, comments, groups)."""
    name: str
    rows: list
    closed: bool = False


@dataclass(frozen=True)
class Marker:
    """A named marker at ``time`` (dump units)."""
    name: str
    time: int


def zoom_for(duration, wave_px):
    """GTKWave zoom showing ``duration`` time units in ``wave_px`` pixels (at most 200 px a unit)."""
    return min(0.0, -math.log2(max(1.0, 200.0 * max(1, duration) / max(1, wave_px))))


def wave_width(size=GTKW_SIZE, signals_width=SIGNALS_WIDTH):
    """Pixels of the wave pane a save file plans its zoom for."""
    return max(100, size[0] - SST_PX - signals_width - WAVE_MARGIN)


def pane_width(labels):
    """Estimated width of GTKWave's signal pane for rows showing ``labels``."""
    return max(SIGNALS_WIDTH, round(CHAR_PX * max((len(t) for t in labels), default=0) + PANE_PAD))


def _wrap(text, width=COMMENT_CHARS):
    import textwrap
    return textwrap.wrap(text, width) or [""]


def _labels(rows, dump):
    """The texts GTKWave's signal pane will show for ``rows`` (see :func:`pane_width`)."""
    out = []
    for row in rows:
        if isinstance(row, Comment):
            out += _wrap(row.text)
        elif isinstance(row, Group):
            out += [row.name + " {", *_labels(row.rows, dump)]
        elif isinstance(row, Trace):
            var = dump.find(*row.path)
            if var is not None:
                out.append((row.label or var.gtkw_name) + "=XX")
    return out


def write_gtkw(path, dump, rows, *, markers=(), window=None, size=GTKW_SIZE, comment=None):
    """Write the save file ``path`` for ``dump`` (a :class:`Dump` or a dump path).

    ``rows`` are :class:`Trace`, :class:`Comment` and :class:`Group` objects;
    traces are resolved with :meth:`Dump.find` (those the dump lacks are left
    out and returned). ``markers`` become GTKWave's named markers A, B, ...
    in order; the first is also the primary marker. ``window`` ``(t0, t1)``
    sets the view (default: the first marker's neighbourhood, else
    everything). Enum traces of a dump that stores numbers get a translate
    filter file next to the save file (``<stem>.<Enum>.txt``).

    Returns the list of design paths not found.
    """
    from vcd.gtkw import GTKWSave, make_translation_filter

    path = Path(path)
    dump = dump if isinstance(dump, Dump) else read_dump(dump)
    markers = list(markers)
    if len(markers) > 26:
        raise ValueError(f"GTKWave has 26 named markers, not {len(markers)}")
    if window is None:
        if markers:
            t = markers[0].time
            window = (max(0, t - 20 * _unit_guess(dump)), t + 20 * _unit_guess(dump))
        else:
            window = (0, dump.end())
    # GTKWave ignores [timestart] unless a whole page after it lies inside the dump
    # (wavewindow.c). A window that reaches the end moves left as far as it must, if it
    # still holds every marker (a run ending near the dump's end: a short read-back);
    # otherwise it falls back to all of the dump.
    end = dump.end()
    t0, t1 = int(window[0]), int(window[1])
    if t1 + (t1 - t0) // 10 > end:
        shift = t1 + (t1 - t0) // 10 - end
        if t0 - shift >= 0 and all(t0 - shift <= m.time <= t1 - shift for m in markers):
            t0, t1 = t0 - shift, t1 - shift
        else:
            t0, t1 = 0, end
    signals_width = pane_width(_labels(rows, dump))
    zoom = zoom_for(t1 - t0, wave_width(size, signals_width))
    missing = []
    filters = {}

    def filter_file(enum, var):
        key = (enum.__qualname__, var.size)
        if key not in filters:
            fpath = path.with_name(f"{path.stem}.{enum.__qualname__}.txt")
            table = [(int(m.value), m.name) for m in enum]
            fpath.write_text(make_translation_filter(table, datafmt="hex", size=var.size) + "\n")
            filters[key] = str(fpath.resolve())
        return filters[key]

    def emit(save, row):
        if isinstance(row, Comment):
            for line in _wrap(row.text):
                save.blank(line)
        elif isinstance(row, Group):
            with save.group(row.name, closed=row.closed):
                for sub in row.rows:
                    emit(save, sub)
        elif isinstance(row, Trace):
            var = dump.find(*row.path)
            if var is None:
                missing.append(row.path)
                return
            translate = None
            if row.enum is not None and not var.is_string:
                translate = filter_file(row.enum, var)
            fmt = "hex" if var.is_string else row.fmt
            save.trace(var.gtkw_name, alias=row.label, datafmt=fmt,
                       translate_filter_file=translate)
        else:
            raise TypeError(f"rows must be Trace, Comment or Group objects, not {row!r}")

    with open(path, "w") as f:
        save = GTKWSave(f)
        if comment:
            for line in comment.splitlines():
                save.comment(line)
        save.dumpfile(str(dump.path.resolve()))
        save.savefile(str(path.resolve()))
        save.timestart(t0)
        save.size(*size)
        save.pos(-1, -1)
        primary = markers[0].time if markers else -1
        save.zoom_markers(zoom, primary, **{chr(ord("a") + k): m.time
                                            for k, m in enumerate(markers)})
        for k, m in enumerate(markers):
            f.write(f"[markername] {chr(ord('A') + k)}{m.name}\n")
        save.signals_width(signals_width)
        save.sst_expanded(False)
        for row in rows:
            emit(save, row)
    return missing


def fit_gtkw(path, dump):
    """Make an existing save file (Amaranth's) open on the whole of ``dump``, not at 1 fs a pixel."""
    path = Path(path)
    dump = dump if isinstance(dump, Dump) else read_dump(dump)
    zoom = zoom_for(dump.end(), wave_width(GTKW_SIZE, pane_width(read_gtkw(path).labels())))
    lines = [line for line in path.read_text().splitlines()
             if not line.startswith(("[timestart]", "[size]", "*", "[signals_width]"))]
    at = next((k for k, line in enumerate(lines) if not line.startswith("[")), len(lines))
    lines[at:at] = ["[timestart] 0", f"[size] {GTKW_SIZE[0]} {GTKW_SIZE[1]}",
                    f"*{zoom:.6f} -1" + " -1" * 26]
    path.write_text("\n".join(lines) + "\n")
    return path


def _unit_guess(dump):
    """One clock of this project's simulations (``CLOCK_PERIOD_NS``) in dump units."""
    from .testbench import CLOCK_PERIOD_NS
    return max(1, dump.to_units(CLOCK_PERIOD_NS * 1e-9))


@dataclass
class SaveFile:
    """A parsed GTKWave save file (:func:`read_gtkw`)."""
    dumpfile: str = None
    timestart: int = 0
    size: tuple = GTKW_SIZE
    signals_width: int = SIGNALS_WIDTH
    zoom: float = 0.0
    primary: int = -1
    markers: dict = field(default_factory=dict)      # letter -> time
    marker_names: dict = field(default_factory=dict)  # letter -> name
    traces: list = field(default_factory=list)       # GTKWave names, in order
    aliases: dict = field(default_factory=dict)      # GTKWave name -> alias
    groups: list = field(default_factory=list)
    comments: list = field(default_factory=list)
    filters: list = field(default_factory=list)

    def window(self, end=None):
        """``(t0, t1)``: the time window GTKWave shows on opening (dump units).

        The wave pane's width is estimated as GTKWave sizes it
        (:func:`pane_width` of the rows' texts), as :func:`write_gtkw` did.
        With the dump's ``end`` time, GTKWave's rule applies: a ``timestart``
        whose page would run past the end is ignored (the view starts at 0).
        """
        per_px = max(1.0, 2.0 ** -self.zoom) / 200.0
        page = per_px * wave_width(self.size, pane_width(self.labels()))
        start = self.timestart
        if end is not None and start > end - page:
            start = 0
        return start, start + page

    def labels(self):
        """The texts of the signal pane's rows."""
        return ([c for c in self.comments] + [g + " {" for g in self.groups]
                + [self.aliases.get(t, t) + "=XX" for t in self.traces])


def read_gtkw(path):
    """Parse the GTKWave save file ``path`` (:class:`SaveFile`)."""
    out = SaveFile()
    flags = 0
    for line in Path(path).read_text().splitlines():
        if not line:
            continue
        if line.startswith("[*]"):
            continue
        if line.startswith("["):
            key, _, value = line[1:].partition("]")
            value = value.strip()
            if key == "dumpfile":
                out.dumpfile = value.strip('"')
            elif key == "timestart":
                out.timestart = int(value)
            elif key == "size":
                out.size = tuple(int(v) for v in value.split())
            elif key == "signals_width":
                out.signals_width = int(value)
            elif key == "markername":
                out.marker_names[value[0]] = value[1:]
            continue
        c = line[0]
        if c == "*":
            fields = line[1:].split()
            out.zoom, out.primary = float(fields[0]), int(fields[1])
            for k, t in enumerate(fields[2:28]):
                if int(t) >= 0:
                    out.markers[chr(ord("A") + k)] = int(t)
        elif c == "@":
            flags = int(line[1:], 16)
        elif c == "-":
            if flags & 0x800000:          # group begin
                out.groups.append(line[1:])
            elif flags & 0x1000000:       # group end
                pass
            else:
                out.comments.append(line[1:])
        elif c == "^":
            out.filters.append(line[1:].split(None, 1)[1])
        elif c in "+":
            alias, _, name = line[2:].partition("} ")
            out.traces.append(name)
            out.aliases[name] = alias
        elif c not in "#>":
            out.traces.append(line)
    return out


# --- runs --------------------------------------------------------------------------------------

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


# --- the machine view (epfabric run --vcd) -----------------------------------------------------

def parse_scopes(text, *, ranks, aivs):
    """``[(rank, core), ...]`` from ``"1:0,0:1"`` (``R:C``, ``R`` = every core of die R)."""
    out = []
    for part in (p.strip() for p in text.split(",")):
        rank, sep, core = part.partition(":")
        try:
            r = int(rank)
            cores = [int(core)] if sep else list(range(aivs))
        except ValueError:
            raise UserError(f"--vcd-scope must look like DIE:CORE or DIE (e.g. 1:0), "
                            f"not {part!r}") from None
        if not 0 <= r < ranks:
            raise UserError(f"--vcd-scope die must be in [0, {ranks - 1}], not {r}")
        for c in cores:
            if not 0 <= c < aivs:
                raise UserError(f"--vcd-scope core must be in [0, {aivs - 1}], not {c}")
            if (r, c) not in out:
                out.append((r, c))
    return out


def _run_control():
    return Group("run control", [Trace(("host__running",), "running"),
                                 Trace(("host__cycle",), "cycle", fmt="dec"),
                                 Trace(("host__done",), "done"),
                                 Trace(("host__timeout",), "timeout")])


def run_window(dump, edges):
    """``(markers, window)`` of a machine run: A at ``host.running``'s rise, B at its fall."""
    running = edges.get("host.running", [])
    rise = next((t for t, v in running if v == 1), None)
    if rise is None:
        return [], None
    fall = next((t for t, v in running if v == 0 and t > rise), None)
    start = dump.to_units(rise)
    end = dump.to_units(fall) if fall is not None else dump.end()
    pad = max(2 * _unit_guess(dump), (end - start) // 20)
    return ([Marker("run start", start), Marker("run end", end)],
            (max(0, start - pad), end + pad))


def generic_view(dump, edges, *, limit=48):
    """Rows, markers and window of a run of a top without AIV cores: run control and its ports."""
    top = min((v.scope for v in dump.vars if v.scope and v.scope[-1] == "top"), key=len,
              default=None)
    ports = sorted({v.name for v in dump.vars if v.scope == top} - {"clk", "rst"})
    rows = [_run_control(),
            Group("top-level ports", [Trace((name,), name) for name in ports[:limit]])]
    markers, window = run_window(dump, edges)
    return rows, markers, window


def machine_view(system, dump, scopes, edges, *, core_state=None, ub_op=None):
    """Rows, markers and window of a machine run's save file.

    ``system`` is the run's :class:`~epfabric.hw.system.System` (for its
    shape and fabric links); ``scopes`` the ``(rank, core)`` pairs to show;
    ``edges`` the run's recorded ``host.running`` edges (:class:`Waveform`).
    ``core_state``/``ub_op`` are the enums of the core state and UB request op.
    Returns ``(rows, markers, window)``.
    """
    rows = [Comment(f"{system.ranks} dies x {system.aivs_per_die} AIVs: A run start, B run end"),
            _run_control()]
    dies = []
    for r, c in scopes:
        core = (f"die{r}", f"core{c}")
        rows.append(Group(f"die {r} core {c}", [
            Comment("state: RUN, MEM = waits on memory, VEC, HALT"),
            Trace((*core, "state"), "state", enum=core_state),
            Trace((*core, "pc"), "pc", fmt="dec"),
            Trace((*core, "waiting"), "waiting", fmt="bin"),
            Trace((*core, "wait_addr"), "wait_addr"),
            Trace((*core, "outstanding"), "stores in flight", fmt="dec"),
            Trace((*core, "trace__valid"), "MARK", fmt="bin"),
            Trace((*core, "trace__payload.event"), "MARK event", fmt="dec"),
            Trace((*core, "halted"), "halted", fmt="bin"),
        ]))
        if r not in dies:
            dies.append(r)
    for r in dies:
        mem = (f"die{r}", "mem")
        rows.append(Group(f"die {r} UB port", [
            Comment("commit: a block or word lands in HBM"),
            Trace((*mem, "commit_valid"), "commit", fmt="bin"),
            Trace((*mem, "i_req__valid"), "request", fmt="bin"),
            Trace((*mem, "i_req__payload.op"), "op", enum=ub_op),
            Trace((*mem, "i_req__payload.addr"), "block", fmt="dec"),
        ]))
        links = []
        for n, (_link, src, dst) in enumerate(system.fabric.links):
            if not (src == ("tx", r) or dst == ("rx", r) or f"die{r}" in (src[0], dst[0])):
                continue
            name = f"{src[0]}{src[1]}_to_{dst[0]}{dst[1]}"
            scope = ("fabric", f"link{n}_{name}")
            if dump.find(*scope, "level") is not None:
                links.append(Trace((*scope, "level"), f"{name} in flight", fmt="dec"))
            else:   # a latency-0 link (a rate limiter) holds nothing: show its traffic
                links.append(Trace((*scope, "i_stream__valid"), f"{name} valid", fmt="bin"))
        rows.append(Group(f"die {r} links", [Comment("flits in flight (link occupancy)"),
                                             *links]))
    markers, window = run_window(dump, edges)
    return rows, markers, window
