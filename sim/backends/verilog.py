"""Verilog for simulation: what Icarus and Verilator compile.

Differs from ``epfabric verilog`` (FPGA flows) in three ways, all measured to
matter for generation or Verilator's speed and all invisible in results: the
``sync`` domain is reset-less for Verilator and Icarus, tops that repeat a block define it
once (their factory's ``shared``), and a large memory whose initial contents are
all zero (a die's HBM slice) is zeroed by a loop in an ``initial`` block
instead of one constant per row (:func:`_zero_by_loop`). Icarus' Verilog also
evaluates every ``always @*`` block once at time 0 (:func:`_kick_at_time_zero`),
which Icarus would otherwise not do. See :func:`verilog_of`.
"""

import contextlib
import fcntl
import functools
import hashlib
import re
import sys
import time
from pathlib import Path

from ..output import PROGRESS_AFTER_S, build_cache_dir, log_event, progress, write_atomic

__all__ = ["verilog_of", "has_reset", "source_hash", "TOPLEVEL"]

#: Name of the top module in simulation Verilog.
TOPLEVEL = "top"

# Amaranth's simulator and Verilog back end recurse over expression trees; wide
# designs exceed Python's default limit.
sys.setrecursionlimit(max(sys.getrecursionlimit(), 20000))

_VERILOG = {}


def verilog_of(spec, simulator="verilator"):
    """Simulation Verilog of ``spec``'s component for ``simulator``, top module ``top``.

    Memoised per process. The ``sync`` domain is *reset-less* for both
    Verilator and Icarus: every register starts at its init value through a
    Verilog initialiser, as in Amaranth's simulator, and there is no ``rst``
    port. With a ``rst`` input, the next-state logic of every register reads
    a top-level input and Verilator re-evaluates all of it on every
    ``eval()`` (its input-combinational region); measured on the 4-die
    machine, that was most of the run time. Register values are the same
    either way (reset values are the init values); the cross-simulator tests
    check cycles and results are identical. ``epfabric verilog`` (for FPGA
    flows) keeps the reset.

    Icarus' text is Verilator's with :func:`_kick_at_time_zero` applied: without
    it, an ``always @*`` block whose inputs all settle at time 0 never runs and
    its outputs stay ``x``. The kick is a text edit of the converted Verilog, so
    both simulators share one conversion (cached on disk): Icarus used to get
    a converted design of its own, with a reset, which cost the test suite
    about 100 s of Verilog generation for the same hardware.
    """
    reset_less = not has_reset(simulator)
    key = (spec.to_json(), reset_less, simulator == "icarus")
    if key in _VERILOG:
        return _VERILOG[key]
    base_key = (spec.to_json(), reset_less, False)
    if base_key not in _VERILOG:
        t0 = time.monotonic()
        # On disk, keyed by the spec and the source of everything that builds it.
        path = _cache_path("design", f"{spec.to_json()}\0{reset_less}\0{_factory_source(spec)}")
        # One process converts, the others (parallel sweep workers) wait and read its file.
        with open(path.with_suffix(".lock"), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if path.exists():
                _VERILOG[base_key] = path.read_text()
            else:
                _VERILOG[base_key] = _convert(spec, reset_less)
                write_atomic(path, _VERILOG[base_key])
        dt = time.monotonic() - t0
        if dt > PROGRESS_AFTER_S:
            progress(f"Verilog of {spec.factory.rpartition(':')[2]}: "
                     f"{len(_VERILOG[base_key]) / 1e6:.1f} MB in {dt:.0f} s")
    if simulator == "icarus":
        _VERILOG[key] = _kick_at_time_zero(_VERILOG[base_key])
    return _VERILOG[key]


def _convert(spec, reset_less):
    from amaranth.hdl import ClockDomain

    from ...hw.instances import Sharing
    from .testbench import resolve
    kw = {"missing_domain": lambda name: ClockDomain(name, reset_less=True)} if reset_less else {}
    written = getattr(resolve(spec.factory), "simulation_verilog", None)
    if written is not None:
        # Verilog written around converted parts (a planar switch), from the parameters
        return written(TOPLEVEL, lambda name, part: _to_verilog(part, name, kw), **spec.params)
    if spec.shares():
        # Repeated blocks as one shared module (e.g. System's dies, cores,
        # links and switches): converted once each, whatever the instance count.
        top = spec.build(shared=Sharing(has_reset=not reset_less))
        parts = top.parts
    else:
        top, parts = spec.build(), {}
    texts = [_to_verilog(top, TOPLEVEL, kw)]
    texts += [part_verilog(name, part, reset_less, kw) for name, part in parts.items()]
    return "\n".join(texts)


def part_verilog(name, part, reset_less, kw):
    """Verilog of shared module ``name`` converted from ``part`` (a
    :class:`~epfabric.hw.instances.Part`, or a component, which is converted).

    Cached on disk by what defines a part (its class and parameters), so another
    shape with the same die (or core, link, switch) does not convert it again --
    nor build it. A part already built (something needed its signature) is
    converted, as a component is.
    """
    from ...hw.instances import Part
    if not isinstance(part, Part):
        return _to_verilog(part, name, kw)
    path = _cache_path("module", f"{name}\0{_part_key(part)}\0{reset_less}")
    if not part.built and path.exists():
        return path.read_text()
    text = _to_verilog(part.component(), name, kw)
    write_atomic(path, text)
    return text


#: Memories of at least this many bits with all-zero initial contents are
#: zeroed by a loop (:func:`_zero_by_loop`).
ZERO_LOOP_BITS = 1 << 20


def _to_verilog(design, name, kw):
    from amaranth.back import verilog
    t0 = time.monotonic()
    with _zero_by_loop():
        text = verilog.convert(design, name=name, emit_src=False, **kw)
    log_event(verilog=name, seconds=time.monotonic() - t0, bytes=len(text))
    return _add_zero_loops(text)


#: Yosys' trigger of a module's ``always @*`` blocks:
#: ``reg \$auto$verilog_backend.cc:N:dump_module$M = 0;``
_TRIGGER = re.compile(r"^( *)reg (\\\$auto\$verilog_backend\.cc:\d+:dump_module\$\d+) +=[^;\n]*;\n",
                      re.M)
#: an ``always @*`` block of one statement (Yosys writes these for part-selects of a reg)
_BARE_ALWAYS = re.compile(r"^( *)always @\*\n( *)([^\n]*;)\n", re.M)
#: a module's header: ``module NAME(ports);``
_MODULE_HEAD = re.compile(r"^module [^;]*;\n", re.M)
#: the trigger this file adds to a module with one-statement ``always @*`` blocks
_KICK = "epf_time0_kick"


def _kick_at_time_zero(text):
    """Make every ``always @*`` block run once at time 0 on Icarus.

    ``always @*`` waits for a change of what it reads; it does not run at time
    0 by itself. Yosys therefore declares one trigger per module, ``reg
    \\$auto$verilog_backend.cc:N:dump_module$M = 0;``, and reads it in every
    ``always @*`` block (``if (trigger) begin end``), counting on the
    initialiser to be a time-0 change. Icarus compiles in SystemVerilog mode
    (cocotb's runner passes ``-g2012``), where a declaration initialiser is
    applied before any process starts, with no event: the trigger never fires,
    and a block whose inputs all settle at time 0 never runs -- its outputs
    stay ``x`` until an input changes. In the die router that was the block
    driving ``ub_wr`` (a UB answer entering the RSP queue): ``x`` for the whole
    run, so the first incoming remote load made ``rx_rd_ok`` and ``rx.ready``
    ``x`` and the load was never answered.

    Here every trigger is set to 1 after a ``#0`` delay: in the inactive
    region of time 0, when every ``always`` block has started and waits at its
    ``@*``, so each runs once whatever the order of the time-0 events. The
    one-statement blocks Yosys writes without the trigger (part-selects of a
    reg, e.g. the top's trace entry) get a trigger of their own, set the same
    way. Changes no value a block computes, only that it is computed.
    """
    def kick(m):
        indent, name = m.group(1), m.group(2)
        return f"{m.group(0)}{indent}initial #0 {name} = 1'h1;\n"

    def module(part):
        part = _TRIGGER.sub(kick, part)
        if not _BARE_ALWAYS.search(part):
            return part
        part = _BARE_ALWAYS.sub(lambda m: (f"{m.group(1)}always @* begin\n"
                                           f"{m.group(2)}if ({_KICK}) begin end\n"
                                           f"{m.group(2)}{m.group(3)}\n{m.group(1)}end\n"), part)
        return _MODULE_HEAD.sub(lambda m: (f"{m.group(0)}  reg {_KICK} = 1'h0;\n"
                                           f"  initial #0 {_KICK} = 1'h1;\n"), part, count=1)

    parts = re.split(r"(?=^module )", text, flags=re.M)
    return "".join(module(p) for p in parts)


@contextlib.contextmanager
def _zero_by_loop():
    """Leave out the initial contents of large all-zero memories while converting.

    Amaranth writes a memory's initial contents as one constant bit per bit
    (a Python generator over depth x width), and Yosys writes them back as one
    ``mem[i] = ...`` line per row: for a 32 K-row x 4096-bit HBM slice that is
    134 M bits -- measured: 11.6 GB of RAM and still converting after 2.5 min.
    Such a memory gets no ``$meminit`` cell here; :func:`_add_zero_loops`
    zeroes it in the Verilog instead (same contents on every simulator).
    """
    from amaranth.back import rtlil
    original = rtlil.ModuleEmitter.emit_memory

    def emit_memory(self, cell_idx, cell):
        if cell.width * cell.depth >= ZERO_LOOP_BITS and not any(cell.init):
            return
        original(self, cell_idx, cell)

    rtlil.ModuleEmitter.emit_memory = emit_memory
    try:
        yield
    finally:
        rtlil.ModuleEmitter.emit_memory = original


#: a memory declaration in Yosys' Verilog: ``reg [W-1:0] NAME [D-1:0];``
_MEMORY = re.compile(r"^( *)reg \[(\d+):0\] (\\\S+ |[A-Za-z_][\w$]*) \[(\d+):0\];\n(?! *initial begin)",
                     re.M)


def _add_zero_loops(text):
    """An ``initial`` zeroing loop after every large memory declared without one."""
    count = 0

    def zero(m):
        nonlocal count
        indent, msb, mem, top = m.group(1), int(m.group(2)), m.group(3), int(m.group(4))
        if (msb + 1) * (top + 1) < ZERO_LOOP_BITS:
            return m.group(0)
        count += 1
        i = f"epf_zero_{count}"
        return (f"{m.group(0)}{indent}integer {i};\n"
                f"{indent}initial for ({i} = 0; {i} <= {top}; {i} = {i} + 1) "
                f"{mem}[{i}] = {msb + 1}'h0;\n")
    return _MEMORY.sub(zero, text)


def _part_key(part):
    """What defines a shared module's :class:`~epfabric.hw.instances.Part`: its class and
    parameters (:attr:`~epfabric.hw.instances.Part.key`). A key whose text names an object
    address would never hit, and is refused."""
    text = part.key
    if " at 0x" in text:
        raise ValueError(f"cannot key the Verilog of {part.cls.__qualname__}: {text[:200]}")
    return text


def _factory_source(spec):
    """Source text of the module that holds ``spec``'s factory (tests define some tops)."""
    import importlib.util
    found = importlib.util.find_spec(spec.factory.partition(":")[0])
    origin = found.origin if found else None
    return Path(origin).read_text() if origin and origin.endswith(".py") else ""


@functools.lru_cache(maxsize=None)
def source_hash():
    """Hash of the sources that define hardware and Amaranth's version.

    ``hw/``, ``sw/`` (tops, presets), ``sim/tb/`` (testbench hardware),
    ``sim/lab/experiments/`` (experiment tops)
    and this file; the design key adds the factory's own module.
    """
    import amaranth
    root = Path(__file__).resolve().parents[2]
    h = hashlib.sha256(amaranth.__version__.encode())
    for path in sorted([*root.glob("hw/**/*.py"), *root.glob("sw/**/*.py"),
                        *root.glob("sim/tb/**/*.py"), *root.glob("sim/lab/experiments/**/*.py"),
                        Path(__file__).resolve()]):
        h.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
    return h.hexdigest()


def _cache_path(kind, key):
    digest = hashlib.sha256(f"{source_hash()}\0{key}".encode()).hexdigest()[:20]
    folder = build_cache_dir() / "verilog"
    folder.mkdir(parents=True, exist_ok=True)
    return folder / f"{kind}-{digest}.v"


def has_reset(simulator):
    """Whether ``simulator``'s Verilog has a ``rst`` port (see :func:`verilog_of`): no
    simulator's does (Verilator and Icarus get the same reset-less design)."""
    return simulator not in ("verilator", "icarus")
