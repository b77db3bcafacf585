"""The native backend: one Verilated model per distinct module, stepped from a C++ top.

A flat Verilator model compiles a module used N times as N copies of its
code, so the build grows with dies and cores (docs/results.md, "Simulation speed and
scale"). Here every distinct module of
:func:`~epfabric.sim.backends.native_build.native_design` -- the glue (the top
without its shared-module instances), the die with its cores, each link and
switch kind -- is Verilated and compiled once into a static library cached by
its Verilog text, whatever its instance count. A generated binding
(``native_bind.cpp``: each model's port table, from its Verilated header) and
the fixed C++ top (``native_top.cpp``: one object per instance, ports copied
between the glue and the instances until they settle, then a rising edge of
every model) are linked into one shared library per machine and driven from
Python through :mod:`ctypes`: no VPI and no cocotb.

Python runs only at the host port: each ``set``/``get``/``tick`` of a test
intent is one ctypes call, and ``wait_high`` (the machine run) ticks inside
C++ until the port rises, returning every :data:`PROGRESS_CYCLES` cycles to
report progress. Cycles, memory, traces and counters are those of the flat
model: every cross-simulator test (the ``hdl_simulator`` fixture and the
explicit ones) has a ``native`` case. Instances with an ``idle`` output
(:class:`~epfabric.hw.link.Link`, :class:`~epfabric.hw.die.Die`: a die whose cores all
halted with nothing in flight) are not clocked while it is 1 (:func:`skip_idle`).
"""

import ctypes
import hashlib
import os
import re
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from ...hw.host import HostTarget
from ...hw.system import imem_row_window
from ..output import PROGRESS_AFTER_S, build_cache_dir, build_once, progress
from .native_build import GLUE, decode_verilator_name, native_design
from .cocotb_runner import OUTPUT_SPLIT, OUTPUT_SPLIT_CFUNCS, opt_makeflags, verilator_opt
from .testbench import SimulationError, Testbench
from .toolchain import verilator_env, verilator_root

__all__ = ["build_native", "run_native", "netlist_of", "NativeTestbench", "PROGRESS_CYCLES"]

#: counters of the last native run in this process: model evaluations, cycles,
#: settle rounds, the most rounds one settle took, instances, skipped edges
LAST_STATS = {}

#: cycles per C++ call while waiting for a port (progress is reported between calls)
PROGRESS_CYCLES = 50_000

_HERE = Path(__file__).resolve().parent
_TOP_SOURCES = (_HERE / "native_top.cpp", _HERE / "native_bind.h")

#: a port declaration in a Verilated model's header: VL_IN8(&name,msb,lsb) / VL_OUTW(&name,msb,lsb,words)
_PORT = re.compile(r"^\s*VL_(IN|OUT)(8|16|64|W)?\(&(\w+),(\d+),(\d+)(?:,\d+)?\);", re.M)


def _key(*parts):
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:16]


def _run(cmd, folder, env, what):
    log = folder / "build.log"
    with open(log, "a") as f:
        f.write("$ " + " ".join(map(str, cmd)) + "\n")
        f.flush()
        done = subprocess.run([str(c) for c in cmd], cwd=folder, env=env, stdout=f,
                              stderr=subprocess.STDOUT)
    if done.returncode:
        raise SimulationError(f"native build of {what} failed in {folder}:\n"
                              f"{log.read_text()[-3000:]}")


def _build_module(name, text, opt):
    """Verilate and compile module ``name`` into ``V<name>__ALL.a`` (cached by text and flags)."""
    folder = build_cache_dir() / f"native-{name}-{_key(text, opt, opt_makeflags(opt), 'fPIC-1')}"

    def make(folder):
        (folder / f"{name}.v").write_text(text)
        env = verilator_env()
        env["MAKEFLAGS"] += " " + opt_makeflags(opt)
        t0 = time.monotonic()
        _run(["verilator", "--cc", "--prefix", f"V{name}", "--top-module", name,
              "-Wno-fatal", "-Wno-lint", "-Wno-style", "--output-split", OUTPUT_SPLIT,
              "--output-split-cfuncs", OUTPUT_SPLIT_CFUNCS, "-CFLAGS", "-fPIC",
              "-Mdir", ".", f"{name}.v"], folder, env, name)
        runtime = ["verilated.o", "verilated_threads.o"] if name == GLUE else []
        _run(["make", f"-j{os.cpu_count() or 1}", "-f", f"V{name}.mk", f"V{name}__ALL.a", *runtime],
             folder, env, name)
        dt = time.monotonic() - t0
        if dt > PROGRESS_AFTER_S:
            progress(f"native: {name} ({len(text) / 1e6:.2f} MB of Verilog) built in {dt:.0f} s")
    return build_once(folder, make)


def _ports(folder, name):
    """``[(verilog name, C++ name, is_output)]`` of a Verilated model, from its header."""
    header = (folder / f"V{name}.h").read_text()
    return [(decode_verilator_name(cname), cname, d == "OUT")
            for d, _w, cname, _msb, _lsb in _PORT.findall(header) if cname != "clk"]


def _mems(folder, name):
    """``[(memory name, C++ expression, header or None)]`` of a model's backdoor memories: a die's HBM
    (``hbm``) and its cores' instruction memories (``core<i>.imem``), inlined or not, and the
    system's MARK trace buffer (``trace``) and counter sample memory (``samples``), in the glue."""
    root = (folder / f"V{name}___024root.h").read_text()
    out = [("hbm", f"m->rootp->{n}", None)
           for n in re.findall(r"VlUnpacked<[^;]*> (\w+__DOT__hbm__DOT__mem);", root)]
    out += [(f"core{c}.imem", f"m->rootp->{n}", None)
            for n, c in re.findall(r"VlUnpacked<[^;]*> (\w+__DOT__core(\d+)__DOT__(?:fetch__DOT__)?imem);",
                                   root)]
    for mem, verilog in (("trace", "trace_mem"), ("samples", "sample_mem")):
        out += [(mem, f"m->rootp->{n}", None)
                for n in re.findall(rf"VlUnpacked<[^;]*> (\w+__DOT__{verilog});", root)]
    for sub, ptr, c in re.findall(rf"V{name}_(\w+)\* (__PVT__\w+__DOT__core(\d+));", root):
        header = folder / f"V{name}_{sub}.h"
        # the instruction memory is the core's fetch unit's (hw/aiv_fetch.py), inlined or not
        found = header.exists() and re.search(r"VlUnpacked<[^;]*> (__PVT__(?:fetch__DOT__)?imem);",
                                               header.read_text())
        if found:
            out.append((f"core{c}.imem", f"m->rootp->{ptr}->{found.group(1)}", header.name))
    return out


def _binding(kinds):
    """C++ of ``native_bind.cpp`` for ``{module: build folder}``."""
    lines = ['#include "native_bind.h"']
    lines += [f'#include "V{name}.h"\n#include "V{name}___024root.h"' for name in kinds]
    lines += [f'#include "{h}"' for name, folder in kinds.items()
              for h in sorted({h for _m, _e, h in _mems(folder, name) if h})]
    for name, folder in kinds.items():
        root = (folder / f"V{name}___024root.h").read_text()
        prev = re.findall(r"\b(__Vtrigprevexpr___TOP__clk__\d+);", root)
        ports = _ports(folder, name)
        lines.append(f"static void clock_of(V{name}* m, Inst* i) {{")
        if len(prev) == 1:
            lines.append(f"    i->clk_prev = &m->rootp->{prev[0]};")
        if any(vname == "idle" and out for vname, _c, out in ports) and name != GLUE:
            lines.append("    i->idle = &m->idle;")
        lines.append("}")
        lines.append(f"static void mems_of(V{name}* m, std::vector<Mem>& v) {{")
        for mem, expr, _header in _mems(folder, name):
            lines.append(f'    v.push_back({{"{mem}", (void*)&{expr}[0], (uint32_t)sizeof({expr}[0]), '
                         f'(uint32_t)(sizeof({expr}) / sizeof({expr}[0]))}});')
        lines.append("}")
        lines.append(f"static void ports_of(V{name}* m, std::vector<Port>& v) {{")
        for vname, cname, out in ports:
            lines.append(f'    v.push_back({{"{vname}", (void*)&m->{cname}, sizeof(m->{cname}), '
                         f'{"true" if out else "false"}}});')
        lines.append("}")
    lines.append("template <class M> static void wrap(M* m, Inst* i) {\n"
                 "    i->eval = [m] { m->eval(); };\n    i->clk = &m->clk;\n"
                 "    i->destroy = [m] { delete m; };\n    ports_of(m, i->ports);\n"
                 "    mems_of(m, i->mems);\n"
                 "    clock_of(m, i);\n}")
    lines.append("bool make_inst(const std::string& kind, VerilatedContext* ctx, "
                 "const std::string& name, Inst* i) {")
    for name in kinds:
        lines.append(f'    if (kind == "{name}") {{ wrap(new V{name}{{ctx, name.c_str()}}, i); return true; }}')
    lines.append("    return false;\n}")
    return "\n".join(lines) + "\n"


def _cxx(folders=()):
    root = verilator_root()
    return ["c++", "-std=c++17", "-fPIC", "-faligned-new", "-Wno-attributes",
            f"-I{root / 'include'}", f"-I{root / 'include' / 'vltstd'}", f"-I{_HERE}",
            *(f"-I{d}" for d in folders)]


def _build_top(opt):
    """The C++ top's object, the same for every machine: built once per level and source."""
    source = "".join(p.read_text() for p in _TOP_SOURCES)
    folder = build_cache_dir() / f"native-top-{_key(source, opt, str(verilator_root()))}"
    return build_once(folder, lambda folder: _run(
        [*_cxx(), opt, "-c", _HERE / "native_top.cpp", "-o", "native_top.o"], folder,
        verilator_env(), "the C++ top"))


def build_native(spec, opt=None):
    """Build (or reuse) ``spec``'s native model; return ``(shared library, netlist text)``."""
    opt = opt or verilator_opt()
    t0 = time.monotonic()
    # Each module is built on a worker thread as soon as its Verilog exists,
    # while this thread converts the glue (Amaranth, one core) and then builds it.
    with ThreadPoolExecutor(max_workers=1) as pool:
        futures = {}
        design = native_design(spec, lambda name, text: futures.setdefault(
            name, pool.submit(_build_module, name, text, opt)))
        kinds = {GLUE: _build_module(GLUE, design["glue"], opt)}
        for name in design["modules"]:
            kinds[name] = futures[name].result()
    binding = _binding(kinds)
    top = _build_top(opt)
    folder = build_cache_dir() / f"native-machine-{_key(binding, str(top), opt, *map(str, kinds.values()))}"

    def make(folder):
        (folder / "native_bind.cpp").write_text(binding)
        env = verilator_env()
        _run([*_cxx(kinds.values()), "-O0", "-c", "native_bind.cpp", "-o", "native_bind.o"], folder,
             env, "binding")
        glue_dir = kinds[GLUE]
        libs = [d / f"V{n}__ALL.a" for n, d in kinds.items()]
        _run(["c++", "-shared", "-Wl,-Bsymbolic", "-o", "libmachine.so", top / "native_top.o",
              "native_bind.o", *libs, glue_dir / "verilated.o", glue_dir / "verilated_threads.o",
              "-latomic", "-lpthread"], folder, env, "shared library")
    build_once(folder, make)
    dt = time.monotonic() - t0
    if dt > PROGRESS_AFTER_S:
        progress(f"native model of {len(design['instances'])} instances ready in {dt:.0f} s")
    return folder / "libmachine.so", netlist_of(design)


def netlist_of(design):
    """The netlist file the C++ top reads: instances, their constants, wires and aliases."""
    lines = [f"inst {GLUE} {GLUE}"]
    for i, (module, _consts) in enumerate(design["instances"]):
        lines.append(f"inst {module} i{i}")
    for i, (_module, consts) in enumerate(design["instances"]):
        for port, (value, width) in consts.items():
            words = " ".join(str(value >> 32 * k & 0xFFFFFFFF) for k in range((width + 31) // 32))
            lines.append(f"const {i + 1} {port} {words}")
    for a, pa, b, pb in design["wires"]:
        lines.append(f"wire {a + 1} {pa} {b + 1} {pb}")
    for name, (a, pa) in design["aliases"].items():
        lines.append(f"alias {name} {a + 1} {pa}")
    return "\n".join(lines) + "\n"


class _Lib:
    """The C API of one loaded native model library."""

    def __init__(self, path):
        lib = ctypes.CDLL(str(path))
        vp, i, u64, i64 = ctypes.c_void_p, ctypes.c_int, ctypes.c_uint64, ctypes.c_int64
        for fn, args, res in [("epf_open", [ctypes.c_char_p], vp), ("epf_error", [vp], ctypes.c_char_p),
                              ("epf_close", [vp], None), ("epf_port", [vp, ctypes.c_char_p], i),
                              ("epf_port_bytes", [vp, i], i), ("epf_set", [vp, i, ctypes.c_char_p], i),
                              ("epf_get", [vp, i, ctypes.c_char_p], i),
                              ("epf_tick", [vp, u64, i], i64),
                              ("epf_stats", [vp, ctypes.POINTER(u64)], None),
                              ("epf_inst_skips", [vp, ctypes.POINTER(u64)], None),
                              ("epf_mem", [vp, i, ctypes.c_char_p], i),
                              ("epf_mem_shape", [vp, i, i, ctypes.POINTER(ctypes.c_uint32)], None),
                              ("epf_mem_write", [vp, i, i, u64, ctypes.c_char_p, ctypes.c_uint32],
                               i),
                              ("epf_mem_read", [vp, i, i, u64, ctypes.c_char_p, ctypes.c_uint32], i)]:
            f = getattr(lib, fn)
            f.argtypes, f.restype = args, res
        self.lib = lib


class NativeTestbench(Testbench):
    """Testbench over a native model (:mod:`ctypes` calls; see the module docstring)."""

    def __init__(self, component, library, netlist):
        super().__init__(component)
        self._c = _Lib(library).lib
        # die instances by rank (their rank_in constant): the backdoor's targets
        self._dies = {}
        for line in netlist.splitlines():
            f = line.split()
            if f[:1] == ["const"] and f[2] == "rank_in":
                self._dies[int(f[3])] = int(f[1])
        with tempfile.NamedTemporaryFile("w", suffix=".netlist", delete=False) as f:
            f.write(netlist)
        try:
            self._h = self._c.epf_open(f.name.encode())
        finally:
            os.unlink(f.name)
        try:
            self._check()
        except SimulationError:
            self.close()
            raise
        self._index = {}
        self.stats = {}
        self._glue = 0                      # the netlist's first instance (native_top.cpp)
        # what went through the backdoor: memory words or rows written, blocks and trace
        # entries read (LAST_STATS after the run)
        self.backdoor_used = {"backdoor_writes": 0, "backdoor_blocks": 0, "backdoor_trace": 0,
                              "backdoor_samples": 0}

    def _check(self, status=0):
        err = self._c.epf_error(self._h)
        if err or status < 0:
            raise SimulationError(f"native model: {(err or b'error').decode()}")

    def _port(self, path):
        found = self._index.get(path)
        if found is None:
            self._lookup(path)
            index = self._c.epf_port(self._h, path.replace(".", "__").encode())
            if index < 0:
                raise SimulationError(f"native model has no port {path}")
            found = self._index[path] = (index, self._c.epf_port_bytes(self._h, index))
        return found

    def close(self):
        if self._h:
            s = (ctypes.c_uint64 * 7)()
            self._c.epf_stats(self._h, s)
            self.stats = dict(zip(("evals", "cycles", "settle_rounds", "max_rounds", "instances",
                                   "skipped_edges", "threads"), s))
            each = (ctypes.c_uint64 * s[4])()
            self._c.epf_inst_skips(self._h, each)
            # a skipped die edge skips every core of the die (Die.idle)
            self.stats.update(dies=len(self._dies),
                              skipped_die_edges=sum(each[i] for i in self._dies.values()))
            self._c.epf_close(self._h)
            self._h = None

    def set(self, path, value):
        index, size = self._port(path)
        self._check(self._c.epf_set(self._h, index, self.pack(path, value).to_bytes(size, "little")))

    async def get(self, path):
        index, size = self._port(path)
        buf = ctypes.create_string_buffer(size)
        self._check(self._c.epf_get(self._h, index, buf))
        return self._unpack(path, int.from_bytes(buf.raw, "little"))

    async def tick(self, n=1):
        self._check(self._c.epf_tick(self._h, n, -1))
        self.cycle += n

    def _mem(self, inst, name):
        """``(index, element bytes, depth)`` of a backdoor memory of C++ instance ``inst``."""
        k = self._c.epf_mem(self._h, inst, name.encode())
        if k < 0:
            return None
        shape = (ctypes.c_uint32 * 2)()
        self._c.epf_mem_shape(self._h, inst, k, shape)
        return k, shape[0], shape[1]

    def backdoor_writes(self, writes):
        """Do the AIV machine's loading writes straight into the models' memories; return the
        host writes still to make through the port, in order (see :func:`backdoor`)."""
        if not backdoor(len(writes)) or not self._dies:
            return writes
        comp = self.component
        A = getattr(comp, "aivs_per_die", None)
        wmask = getattr(getattr(comp, "host", None), "wmask", None)
        W = imem_row_window(len(wmask), A) if A and wmask is not None else 0
        mems = {}
        for r, inst in self._dies.items():
            hbm = self._mem(inst, "hbm")
            imems = [self._mem(inst, f"core{c}.imem") for c in range(A or 0)]
            if hbm is None or not imems or None in imems:
                return writes               # not this backend's AIV die: the port for all
            mems[r] = (inst, hbm, imems)
        T = HostTarget
        row_words = mems[0][1][1] // 4

        def cores_of(w):                    # [(rank, core, word)] an IMEM/IMEM_ROW write sets
            target, rank, core, _addr, word, *row = w
            if target == T.IMEM.value:
                return [(rank, core, word)]
            window = word
            return [divmod(window * W + k, A) + (row[0] >> 32 * k & 0xFFFFFFFF,)
                    for k in range(W) if row[1] >> k & 1]

        # every core's instruction 0 is fetched by a combinational read the models computed
        # before this write: its last write goes through the port, so each model sees its
        # instruction memory change (other addresses are fetched after the pc changes).
        # Verilator recomputed the fetch at start without it too (the tests pass without
        # it), but nothing promises that: one port row a window of cores is cheap
        through = {}
        for i, w in enumerate(writes):
            if w[0] in (T.IMEM.value, T.IMEM_ROW.value) and w[3] == 0 and \
                    (w[0] == T.IMEM.value or W):
                for rank, core, _word in cores_of(w):
                    through[rank, core] = i
        keep = set(through.values())
        rest = []
        for i, w in enumerate(writes):
            target, rank, core, addr, word, *row = w
            done = False
            if i in keep:
                pass
            elif target == T.HBM_BLOCK.value and rank in mems:
                inst, (k, size, depth), _ = mems[rank]
                done = self._poke(inst, k, (addr >> 9) % depth * size, row[0].to_bytes(size, "little"))
            elif target == T.HBM.value and rank in mems and (addr >> 2) % 128 < row_words:
                inst, (k, size, depth), _ = mems[rank]
                done = self._poke(inst, k, (addr >> 9) % depth * size + (addr >> 2) % 128 * 4,
                                  word.to_bytes(4, "little"))
            elif target == T.IMEM.value and rank in mems or target == T.IMEM_ROW.value and W:
                done = True
                for r, c, value in cores_of(w):
                    inst, _hbm, imems = mems[r]
                    k, size, depth = imems[c]
                    done &= self._poke(inst, k, addr % depth * size, value.to_bytes(size, "little"))
            if not done:
                rest.append(w)
        self.backdoor_used["backdoor_writes"] += len(writes) - len(rest)
        return rest

    def _peek(self, inst, mem, offset, n):
        buf = ctypes.create_string_buffer(n)
        self._check(self._c.epf_mem_read(self._h, inst, mem, offset, buf, n))
        return buf.raw

    def _finished(self):
        """Whether the last run ended ``done`` (every core halted, nothing outstanding): no
        memory changes on later edges, so reading it directly is reading it through the port."""
        return self.has_port("host.done") and bool(_drive(self.get("host.done")))

    def backdoor_read_blocks(self, ranks, blocks, words_per_block):
        """``{rank: [words]}`` as :func:`~epfabric.sim.backends.host.host_read_blocks` reads them,
        straight from the dies' HBM (no cycles), or ``None``: the port then reads them. Used
        after a ``done`` run for a read-back of :data:`BACKDOOR_AFTER` blocks or more."""
        if not (backdoor(len(blocks)) and self._dies and self._finished()):
            return None
        hbms = {}
        for r in range(ranks):
            hbm = self._mem(self._dies[r], "hbm") if r in self._dies else None
            if hbm is None or hbm[1] < 4 * words_per_block:
                return None
            hbms[r] = hbm
        mask = (1 << 32) - 1
        out = {}
        for r in range(ranks):
            k, size, depth = hbms[r]
            inst = self._dies[r]
            words = out[r] = []
            for b in blocks:
                row = int.from_bytes(self._peek(inst, k, b % depth * size, 4 * words_per_block),
                                     "little")
                words += [row >> 32 * w & mask for w in range(words_per_block)]
        self.backdoor_used["backdoor_blocks"] += len(blocks) * ranks
        return out

    def backdoor_trace(self, count):
        """The first ``count`` raw MARK trace entries, straight from the glue's trace buffer, or
        ``None`` (the port then reads them, one a cycle). Same rule as the read-back."""
        return self._glue_entries("trace", count)

    def backdoor_samples(self, count):
        """The first ``count`` raw entries of the counter sampler's memory, as
        :meth:`backdoor_trace` reads the MARK trace (same rule), or ``None``."""
        return self._glue_entries("samples", count)

    def _glue_entries(self, name, count):
        if not (backdoor(count) and self._finished()):
            return None
        mem = self._mem(self._glue, name)
        if mem is None or count > mem[2]:
            return None
        k, size, _depth = mem
        raw = self._peek(self._glue, k, 0, count * size)
        self.backdoor_used[f"backdoor_{name}"] += count
        return [int.from_bytes(raw[i * size:(i + 1) * size], "little") for i in range(count)]

    def _poke(self, inst, mem, offset, data):
        self._check(self._c.epf_mem_write(self._h, inst, mem, offset, data, len(data)))
        return True

    async def wait_high(self, path, *, timeout=None):
        """Tick inside C++ until ``path`` is nonzero (progress every :data:`PROGRESS_CYCLES`)."""
        if await self.get(path):
            return
        index, _size = self._port(path)
        waited = 0
        while True:
            chunk = PROGRESS_CYCLES if timeout is None else min(PROGRESS_CYCLES, timeout - waited)
            if chunk <= 0:
                raise SimulationError(f"timeout: {path} still 0 after {timeout} cycles")
            took = self._c.epf_tick(self._h, chunk, index)
            self._check(took)
            waited += took
            self.cycle += took
            if took < chunk or await self.get(path):
                return
            progress(f"native: waiting for {path}: {waited} cycles"
                     + (f" of at most {timeout}" if timeout is not None else ""))


def _drive(coro):
    """Run an intent coroutine whose awaits never suspend (every bench call returns at once)."""
    try:
        coro.send(None)
    except StopIteration as done:
        return done.value
    coro.close()
    raise SimulationError("a test intent awaited something other than the testbench "
                          "(the native backend runs intents without an event loop)")


#: host writes of a load from which the native testbench writes memories directly
BACKDOOR_AFTER = 4096


def backdoor(writes):
    """Whether a load of ``writes`` host writes goes through the backdoor
    (``$EPFABRIC_NATIVE_BACKDOOR``: ``1`` always, ``0`` never, unset: from
    :data:`BACKDOOR_AFTER` writes).

    The host port writes one HBM block or one instruction row a cycle, and on a
    large machine every cycle is the whole machine's (S2, 32 dies x 48 AIVs: 87 K
    writes, 7 minutes). The backdoor writes the same words into the Verilated
    models' HBM and instruction memories, without cycles: HBM is read by clocked
    ports only, and each core's instruction 0 (fetched combinationally) is still
    written through the port, so every model sees its memory change. What a run
    computes is the same -- cycles, memory, MARKs (``tests/sim/test_native.py``);
    only the cycles the machine spent loading (before ``start``) are fewer.
    """
    mode = os.environ.get("EPFABRIC_NATIVE_BACKDOOR", "")
    return mode == "1" or (mode != "0" and writes >= BACKDOOR_AFTER)


def skip_idle():
    """Whether native models skip the clock edges of idle instances (``$EPFABRIC_NATIVE_SKIP``, default 1).

    An instance whose module has an ``idle`` output (:class:`~epfabric.hw.link.Link`,
    :class:`~epfabric.hw.die.Die`) and shows 1 after the settle keeps its state over the edge, so the edge
    is skipped; ``EPFABRIC_NATIVE_SKIP=0`` evaluates every edge (the
    equality tests run both ways).
    """
    return os.environ.get("EPFABRIC_NATIVE_SKIP", "1") != "0"


#: AIV cores from which a machine is evaluated on two threads by default (a cycle of a
#: smaller machine is too short for a thread hand-off to pay)
THREADS_FROM_CORES = 256


def native_threads(cores):
    """Threads a native model of ``cores`` AIV cores evaluates its instances on
    (``$EPFABRIC_NATIVE_THREADS``; default 2 from :data:`THREADS_FROM_CORES` cores when the
    machine has two CPUs or more, else 1).

    Each phase of a cycle -- the rising edge, each settle round -- evaluates its
    instances on the threads, and copies their outputs on one; cycles, memory and
    MARKs are the same on any number of threads (``tests/sim/test_native.py``).
    """
    text = os.environ.get("EPFABRIC_NATIVE_THREADS", "")
    if text:
        try:
            n = int(text)
        except ValueError:
            n = 0
        if not 1 <= n <= 64:
            raise SimulationError(f"EPFABRIC_NATIVE_THREADS must be an integer in [1, 64], "
                                  f"not {text!r}")
        return n
    return 2 if cores >= THREADS_FROM_CORES and (os.cpu_count() or 1) >= 2 else 1


def run_native(spec, intent, args, waveform=None, opt=None):
    """Run ``intent`` on ``spec``'s native model; return ``(result, cycles)``."""
    if waveform:
        raise SimulationError("the native backend writes no waveforms; use --backend verilator "
                              "or icarus for a VCD")
    library, netlist = build_native(spec, opt)
    component = spec.interface()        # its ports: nothing is built
    threads = native_threads(getattr(component, "ranks", 1) * getattr(component, "aivs_per_die", 0))
    bench = NativeTestbench(component, library, netlist + f"skip_idle {int(skip_idle())}\n"
                            f"threads {threads}\n")
    t0 = time.monotonic()
    try:
        result = _drive(intent(bench, **args))
    finally:
        bench.close()
        LAST_STATS.clear()
        LAST_STATS.update(bench.stats, **bench.backdoor_used)   # threads: as the C++ top ran
    s = LAST_STATS
    if time.monotonic() - t0 > PROGRESS_AFTER_S and s.get("dies") and s.get("cycles"):
        progress(f"native: {s['cycles']:,} cycles of {s['dies']} dies, "
                 f"{s['skipped_die_edges'] / (s['dies'] * s['cycles']):.1%} of the die "
                 f"(and core) evaluations skipped while idle; "
                 f"{s['evals'] / s['cycles']:.1f} model evaluations and "
                 f"{s['settle_rounds'] / s['cycles']:.1f} settle rounds a cycle "
                 f"({s['instances']} models)")
    return result, bench.cycle
