"""GTKWave save files (``.gtkw``) that open a dump on the moment that matters.

A simulator writes a dump (VCD or FST, :mod:`.dump`); the save file next to it
makes the dump readable without touching anything: the window opens zoomed on
a given time window, named markers sit on the cycles that matter (the primary
marker on the first, so the signal pane shows the values there), traces come
in collapsible groups with comment rows, and enum-valued signals show their
names.

* :class:`Trace`, :class:`Comment`, :class:`Group`, :class:`Marker` and
  :func:`write_gtkw` — a save file from design paths (``("unsafe",
  "reader_state")``, relative to the design top), resolved against the dump,
  so the names are the ones the simulator wrote (``bench.top.`` on
  Amaranth's simulator, ``top.`` under cocotb) and every trace exists;
* :func:`fit_gtkw` — an existing save file (Amaranth's) made to open on the
  whole dump;
* :func:`read_gtkw` — parse a save file back (tests, tools): traces, groups,
  comments, markers and the time window GTKWave will show.

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
from dataclasses import dataclass, field
from pathlib import Path

from .dump import Dump, read_dump

__all__ = ["Trace", "Comment", "Group", "Marker", "write_gtkw", "fit_gtkw", "read_gtkw",
           "SaveFile", "zoom_for", "GTKW_SIZE"]

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
            window = (max(0, t - 20 * dump.clock()), t + 20 * dump.clock())
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
