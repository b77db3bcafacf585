"""The driver: load programs and memory onto a machine, run it, read results.

The Glasgow split (docs/contributing.md "Style"): a :class:`Machine` is built from a
configuration (:class:`~epfabric.sw.config.MachineConfig` for the AIV
machine, :class:`~epfabric.sw.config.AgrsConfig` for the AG/RS endpoints) and
a :class:`Backend`; driver code (kernels, experiments) talks only to the
machine, and :mod:`epfabric.sim.backends.machine` supplies backends
(Amaranth's simulator, Icarus, Verilator) that all implement
:meth:`Backend.execute` for the same top.

A run is one *session* through the top's host port
(:mod:`epfabric.hw.host`): host writes (instruction memories, memory words,
core enables, control registers), ``start``, wait until the machine stops
(finished, or the watchdog fired), then read back memory, status outputs and
(AIV machine) the MARK trace buffer. No Python runs per simulated cycle on
the fast backends.
"""

import abc

from ..hw.aiv_core import BAR_WAIT_ADDR, INC_WAIT_ADDR
from ..hw.die import KNOBS, check_knob
from ..hw.host import HostTarget
from ..hw.system import SAMPLE_EVERY_REG, SAMPLE_RANK_COUNTERS, imem_row_window
from ..hw.topology import SUPERPOD_HOPS
from ..hw.validate import UserError, UserTypeError, check_int, check_word
from .config import MachineConfig, link_counter
from .isa import INC_COUNTERS, RANK_BITS, address, split_address
from .presets import get_preset
from .report import Report, WatchdogTimeout

__all__ = ["region_names", "Backend", "Machine", "Report", "WatchdogTimeout", "MachineConfig"]


class Backend(abc.ABC):
    """Something that runs a session on the top a configuration describes."""

    name = "abstract"

    @abc.abstractmethod
    def execute(self, config, session):
        """Run ``session`` (:meth:`Machine.session`) on ``config``'s top.

        Returns a dict with ``cycles``, ``done``, ``timeout``, ``run_wall_s``,
        ``load_cycles`` and ``read_cycles`` (host cycles of the loading and the read-back),
        ``mem`` (``{rank: [word, ...]}``), ``status`` (the values of
        ``session["status"]``, same structure), and, when ``session["trace"]``,
        ``trace`` (list of ``[core, cycle, event]``) and ``trace_dropped``; when
        ``session["samples"]``, ``samples`` (the counter sampler's entries, each a dict of
        :func:`~epfabric.hw.system.sample_layout`'s fields: ``cycle`` an int, every other field
        a list) and ``samples_dropped``.
        """


def _words(name, words):
    """``words`` as a list of ints, each a 32-bit unsigned word (:func:`check_word`)."""
    if isinstance(words, (str, bytes)) or not hasattr(words, "__iter__"):
        raise UserTypeError(f"{name} must be a sequence of 32-bit words, not {words!r}")
    return [check_word(f"{name}[{i}]", w) for i, w in enumerate(words)]


def region_names(regions, words_per_block):
    """A :attr:`Machine.describe` for a kernel's memory map.

    ``regions`` is ``[(name, first block, blocks, words)]``: ``words`` is ``None``
    for a region of DataBlocks (``RECV block 3 word 0``) or ``{n: what}`` for a
    word-addressed one, whose word ``n`` counts across its blocks (``SYNC[1]
    (global arrivals)``; a word without an entry is named by index only).
    """
    def describe(block, word=0):
        for name, first, count, words in regions:
            if first <= block < first + count:
                if words is None:
                    return f"{name} block {block - first} word {word}"
                n = (block - first) * words_per_block + word
                return f"{name}[{n}]" + (f" ({words[n]})" if n in words else "")
        return f"outside the kernel's layout (block {block})"
    return describe


class Machine:
    """A simulated machine, run on a backend.

    Parameters
    ----------
    preset : str, optional
        Preset name (:func:`epfabric.sw.presets.get_preset`) of an AIV
        machine; default ``"tiny"``.
    backend : Backend
        Where the hardware runs (``epfabric.sim.backends.machine.backend("pysim")``,
        ``"icarus"`` or ``"verilator"``).
    config : MachineConfig or AgrsConfig, optional
        The whole configuration, instead of ``preset`` and ``**fields``.
    **fields
        :class:`~epfabric.sw.config.MachineConfig` fields (``topology``,
        ``aivs_per_die``, ...).

    Raises
    ------
    ValueError, TypeError
        On a bad preset, topology or size (the message names it).

    On an AIV machine the host loads programs one instruction index of up to a
    row of cores per cycle (IMEM_ROW) and whole blocks in one cycle
    (HBM_BLOCK), and reads back one block per cycle; ``row_writes = False``
    (on the class or an instance) loads and reads one word per cycle instead.
    Either gives the same machine state and read-back.
    """

    #: load with row writes where the top has them (see the class docstring)
    row_writes = True

    def __init__(self, preset=None, *, backend, config=None, **fields):
        if config is None:
            config = MachineConfig(preset="tiny" if preset is None else preset, **fields)
        elif preset is not None or fields:
            raise UserTypeError("give either config or preset and MachineConfig fields, not both")
        if not isinstance(backend, Backend):
            raise UserTypeError(f"backend must be a Backend, not {backend!r}")
        self.config = config
        self.preset = get_preset(config.preset)
        self.backend = backend
        self._programs = {}
        #: ``(block, word) -> str``: what an address holds, named by the loaded kernel's
        #: layout (the watchdog's diagnosis says it beside the address)
        self.describe = None
        self._mem = {}
        self._ctrl = {}
        #: the dies' runtime knobs written before every run (hw/die.py KNOBS): the preset's,
        #: then :meth:`set_knob`'s; a knob not here keeps its reset value
        self.knobs = dict(self.preset.knobs()) if self.has_cores else {}
        #: blocks a token of the loaded kernel moves in (:meth:`set_token_blocks`)
        self.token_blocks = None
        self._read_ranges = [(0, config.readback_blocks)]
        self._readback = None
        self.last_report = None
        #: the counter sampler's interval in cycles for every following run (0 = off;
        #: :meth:`set_sampling`)
        self.sample_every = 0

    @property
    def ranks(self):
        return self.config.ranks

    @property
    def has_cores(self):
        return self.config.kind == "aiv"

    def _check_core(self, rank, core):
        check_int("rank", rank, 0, self.ranks - 1)
        check_int("core", core, 0, self.config.aivs_per_die - 1)

    def load_program(self, rank, core, program):
        """Load ``program`` (a :class:`~epfabric.sw.assembler.Program` or words) into a core."""
        if not self.has_cores:
            raise UserTypeError(f"a {self.config.kind} machine has no cores to load programs into")
        self._check_core(rank, core)
        words = (program.assemble() if hasattr(program, "assemble")
                 else _words("program", program))
        if len(words) > self.config.imem_depth:
            raise UserError(f"program for rank {rank} core {core} has {len(words)} "
                            f"instructions; imem_depth is {self.config.imem_depth}")
        self._programs[(rank, core)] = words

    def _check_addr(self, rank, addr, n=1):
        check_int("rank", rank, 0, self.ranks - 1)
        check_int("addr", addr, 0)
        r, block, word = split_address(addr, self.rank_bits)
        if r != 0 or addr & 3:
            raise UserError(f"addr must be a word-aligned local byte address "
                            f"(block << 9 | word << 2), not {addr:#x}")
        last = word + n - 1
        if block + last // 128 >= self.config.memory_blocks:
            raise UserError(f"addr {addr:#x} + {n} words runs past the {self.config.memory_blocks} "
                            f"blocks of the machine's memory")

    def write_mem(self, rank, addr, words):
        """Write 32-bit ``words`` to rank ``rank``'s memory from byte address ``addr`` on.

        Each word is an integer in [0, 2**32 - 1] (numpy integers too); a
        float, a negative or a wider value is an error, never truncated.
        Words beyond the modelled ``words_per_block`` of a block are not
        simulated and are dropped.
        """
        words = _words("words", words)
        self._check_addr(rank, addr, len(words))
        for i, w in enumerate(words):
            self._mem[(rank, addr + 4 * i)] = w

    def clear(self):
        """Start the next run's image afresh: no programs, memory words or control registers.

        Each run is a fresh machine (memory starts at zero); state that must
        outlive a run — a dispatch's counts for the combine that follows —
        is read back and written into the next image by the caller. The last
        run's read-back stays readable until the next run.
        """
        self._programs.clear()
        self._mem.clear()
        self._ctrl.clear()
        self._read_ranges = [(0, self.config.readback_blocks)]

    def write_control(self, register, value):
        """Set control register ``register`` (host target CTRL) before the next run."""
        if self.has_cores:
            raise UserTypeError("the AIV machine has no control registers; its cores run programs")
        check_int("register", register, 0, 0xFFFF)
        self._ctrl[register] = check_word("value", value)

    def set_knob(self, name, value):
        """Set the dies' runtime knob ``name`` (:data:`epfabric.hw.die.KNOBS`) for every
        following run, over the preset's value; ``None`` restores the knob's reset value.

        ``store_window``: block stores a core may have unacknowledged, 1..``max_outstanding``;
        ``syncall_cycles``: cycles a die's barrier (``bar``) holds its cores after the last
        arrival, 0..2**24 - 1; ``inject_rate``: the die's injection limit in 1/1024 bytes
        per cycle, 0 (none)..2**20 - 1.
        """
        if not self.has_cores:
            raise UserTypeError("only the AIV machine's dies have knobs")
        if value is None:
            check_knob(name, 1, self.config.max_outstanding)      # the name, at least
            self.knobs.pop(name, None)
            return
        self.knobs[name] = check_knob(name, value, self.config.max_outstanding)

    def set_token_blocks(self, blocks):
        """Declare the blocks a token of the kernel about to run moves in.

        With a preset that counts a sender's staging buffers in tokens (``send_buffers``: the
        open kernel's two UB token buffers, each reused once its copy out has completed), the
        dies' ``store_window`` for the following runs is ``send_buffers × blocks`` -- unless
        :meth:`set_knob` set it. Refused, naming both, when that is more than the cores'
        ``max_outstanding``.
        """
        check_int("blocks", blocks, 1)
        n = self.preset.send_buffers
        if self.has_cores and n is not None and n * blocks > self.config.max_outstanding:
            raise UserError(f"send_buffers={n} of preset {self.preset.name!r} x {blocks} blocks a "
                            f"token is a store window of {n * blocks} blocks, more than "
                            f"max_outstanding={self.config.max_outstanding}")
        self.token_blocks = blocks

    def run_knobs(self):
        """``{knob: value}`` written to every die before a run: the preset's, :meth:`set_knob`'s,
        and the ``store_window`` of ``send_buffers`` tokens (:meth:`set_token_blocks`)."""
        out = dict(self.knobs)
        n = self.preset.send_buffers if self.has_cores else None
        if n is not None and self.token_blocks and "store_window" not in out:
            out["store_window"] = n * self.token_blocks
        return out

    def set_sampling(self, every):
        """Sample the fabric and UB counters every ``every`` cycles of each following run
        (0: off), into the sampler a configuration with ``sample_depth`` > 0 builds
        (:class:`~epfabric.hw.system.System`): the report's :attr:`~Report.samples`. Never
        changes a run's cycles."""
        if not getattr(self.config, "sample_depth", 0):
            raise UserError("set_sampling needs a machine with a counter sampler "
                            "(MachineConfig sample_depth > 0)")
        self.sample_every = check_int("sample_every", every, 0, (1 << 32) - 1)

    def read_back(self, ranges):
        """Read back only these ``[(first block, blocks), ...]`` of every rank after the next run.

        Read-back takes one cycle per modelled word (every rank at once); a
        kernel that needs a few regions of a large memory names them here.
        """
        ranges = [(check_int("first block", int(lo), 0), check_int("blocks", int(n), 1))
                  for lo, n in ranges]
        for lo, n in ranges:
            if lo + n > self.config.memory_blocks:
                raise UserError(f"read-back range {lo}..{lo + n - 1} runs past the "
                                f"{self.config.memory_blocks} blocks of the machine's memory")
        self._read_ranges = ranges

    def read_mem(self, rank, addr, n=1):
        """``n`` words of rank ``rank``'s memory from ``addr``, as read back after the last run."""
        check_int("n", n, 1)
        self._check_addr(rank, addr, n)
        if self.last_report is None:
            raise RuntimeError("read_mem needs a finished run(); call machine.run() first")
        out = []
        wpb = self.config.words_per_block
        readback = self._readback[rank]
        for i in range(n):
            _, block, word = split_address(addr + 4 * i, self.rank_bits)
            if word >= wpb:
                out.append(0)
                continue
            if block not in self._block_at:
                raise UserError(f"block {block} of rank {rank} is not read back after a run "
                                f"(read-back ranges: {self._read_ranges})")
            out.append(readback[self._block_at[block] * wpb + word])
        return out

    def session(self, max_cycles):
        """The host-port session of the next run (what :meth:`Backend.execute` receives)."""
        wpb = self.config.words_per_block
        # Row writes (hw/host.py) on an AIV machine: one host cycle per full block, and per
        # instruction index of a row window of whole dies (imem_row_window), not per word.
        rows = self.row_writes and self.has_cores
        writes = self._program_writes(
            rows and imem_row_window(wpb, self.config.aivs_per_die) > 0)
        blocks = {}
        for (rank, addr), w in sorted(self._mem.items()):
            _, block, word = split_address(addr, self.rank_bits)
            if word < wpb:  # words beyond data_bytes are not modelled
                blocks.setdefault((rank, block), {})[word] = w
        for (rank, block), words in sorted(blocks.items()):
            if rows and len(words) == wpb:
                row = sum(w << 32 * k for k, w in words.items())
                writes.append([HostTarget.HBM_BLOCK.value, rank, 0, block << 9, 0, row, 0])
            else:
                writes += [[HostTarget.HBM.value, rank, 0, block << 9 | k << 2, w]
                           for k, w in sorted(words.items())]
        for register, value in sorted(self._ctrl.items()):
            writes.append([HostTarget.CTRL.value, 0, 0, register, value])
        for name, value in sorted(self.run_knobs().items()):   # to every die (hw/system.py)
            writes.append([HostTarget.CTRL.value, 0, 0, KNOBS[name], value])
        sampler = bool(getattr(self.config, "sample_depth", 0))
        if sampler and self.sample_every:                   # the system's own register
            writes.append([HostTarget.CTRL.value, 0, 0, SAMPLE_EVERY_REG, self.sample_every])
        return {"writes": writes, "max_cycles": max_cycles, "rows": rows,
                "read_blocks": [list(r) for r in self._read_ranges], "words_per_block": wpb,
                "status": self.config.status_ports(), "trace": self.config.has_trace,
                "samples": sampler}

    def _program_writes(self, rows):
        """Host writes of every program and its core's enable bit."""
        writes = []
        if not rows:
            for (rank, core), words in sorted(self._programs.items()):
                writes += [[HostTarget.IMEM.value, rank, core, i, w] for i, w in enumerate(words)]
                writes.append([HostTarget.ENABLE.value, rank, core, 0, 1])
            return writes
        A = self.config.aivs_per_die
        W = imem_row_window(self.config.words_per_block, A)
        by_row = {}              # (window, instruction index) -> {word k of the row: word}
        for (rank, core), words in self._programs.items():
            window, k = divmod(rank * A + core, W)
            for i, w in enumerate(words):
                by_row.setdefault((window, i), {})[k] = w
        for (window, i), words in sorted(by_row.items()):
            writes.append([HostTarget.IMEM_ROW.value, 0, 0, i, window,
                           sum(w << 32 * k for k, w in words.items()),
                           sum(1 << k for k in words)])
        writes += [[HostTarget.ENABLE.value, rank, core, 0, 1]
                   for rank, core in sorted(self._programs)]
        return writes

    def run(self, max_cycles=100_000):
        """Run until the machine finishes; return a :class:`Report`.

        Raises :class:`WatchdogTimeout` (carrying the report) when the
        watchdog stops the machine after ``max_cycles`` cycles.
        """
        check_int("max_cycles", max_cycles, 1, (1 << 32) - 1)
        if self.has_cores and not self._programs:
            raise RuntimeError("no program loaded; call load_program() first")
        out = self.backend.execute(self.config, self.session(max_cycles))
        status = out["status"]
        cores = []
        if self.has_cores:
            aivs = self.config.aivs_per_die
            trace = [{"rank": c // aivs, "core": c % aivs, "cycle": cyc, "event": ev}
                     for c, cyc, ev in out["trace"]]
            fields = status["cores"]
            for i in range(self.config.cores):
                cores.append({**{k: v[i] for k, v in fields.items()},
                              "rank": i // aivs, "core": i % aivs})
        else:
            trace = []
        self._readback = {int(r): words for r, words in out["mem"].items()}
        blocks = [b for lo, n in self._read_ranges for b in range(lo, lo + n)]
        self._block_at = {b: i for i, b in enumerate(blocks)}
        report = Report(config={**self.config.to_dict(), "kind": self.config.kind,
                                "cycle_ns": self.preset.cycle_ns},
                        backend=self.backend.name, cycles=out["cycles"],
                        ns=out["cycles"] * self.preset.cycle_ns, done=bool(out["done"]),
                        timeout=bool(out["timeout"]), trace=trace, cores=cores,
                        counters=dict(status["counters"]),
                        trace_dropped=out.get("trace_dropped", 0),
                        samples=self._samples(out),
                        extra={k: out.get(k) for k in ("run_wall_s", "load_cycles",
                                                       "read_cycles")})
        self.last_report = report
        if report.timeout:
            report.diagnosis = self._diagnose(report, max_cycles)
            raise WatchdogTimeout(report)
        return report

    def _samples(self, out):
        """:attr:`Report.samples` of a run's sampler entries (``{}`` without a sampler)."""
        if "samples" not in out:
            return {}
        entries = out["samples"]
        values = {name: [[e[name][r] for e in entries] for r in range(self.ranks)]
                  for name in SAMPLE_RANK_COUNTERS}
        if self.config.topology[0] == "superpod":
            for what in ("blocks", "small"):
                values.update({link_counter(what, kind): [[e[f"link_{what}"][k] for e in entries]]
                               for k, kind in enumerate(SUPERPOD_HOPS)})
        return {"every": self.sample_every, "depth": self.config.sample_depth,
                "dropped": out["samples_dropped"], "cycles": [e["cycle"] for e in entries],
                "values": values}

    def _diagnose(self, report, max_cycles):
        if not self.has_cores:
            counters = ", ".join(f"{k} {v}" for k, v in report.counters.items())
            return (f"watchdog: the {self.config.kind} machine did not finish within {max_cycles} "
                    f"cycles; counters: {counters}")
        loaded = set(self._programs)
        lines = [f"watchdog: not every core halted within {max_cycles} cycles"]
        for c in report.cores:
            if (c["rank"], c["core"]) not in loaded or c["halted"]:
                continue
            if c["waiting"] and c["wait_addr"] & ~3 == INC_WAIT_ADDR:
                counter = INC_COUNTERS[c["wait_addr"] & 3]
                lines.append(f"rank {c['rank']} core {c['core']} (pc {c['pc']}) waits on its "
                             f"die's INC {counter} counter (incwait)")
            elif c["waiting"] and c["wait_addr"] == BAR_WAIT_ADDR:
                lines.append(f"rank {c['rank']} core {c['core']} (pc {c['pc']}) waits at its "
                             f"die's barrier (bar) for a core that never arrives")
            elif c["waiting"]:
                r, block, word = split_address(c["wait_addr"], self.rank_bits)
                what = f" = {self.describe(block, word)}" if self.describe else ""
                lines.append(f"rank {c['rank']} core {c['core']} (pc {c['pc']}) waits on "
                             f"address {c['wait_addr']:#010x} (rank {r} block {block} word {word})"
                             + what)
            else:
                lines.append(f"rank {c['rank']} core {c['core']} (pc {c['pc']}) still running"
                             + (" (faulted)" if c.get("fault") else ""))
        return "; ".join(lines)

    @property
    def rank_bits(self):
        """Width of the address's rank field on this machine (8 unless narrowed)."""
        return getattr(self.config, "rank_bits", RANK_BITS)

    def address(self, rank, block, word=0):
        """Global byte address (for programs) on this machine: see :func:`epfabric.hw.isa.address`."""
        return address(rank, block, word, self.rank_bits)
