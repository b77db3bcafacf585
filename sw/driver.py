"""The driver: load programs and memory onto a machine, run it, read results.

The Glasgow split (STYLE.md 1): a :class:`Machine` is built from a preset and
a :class:`Backend`; driver code (kernels, experiments) talks only to the
machine, and ``epfabric.sim`` supplies backends (Amaranth's simulator, Icarus,
Verilator) that all implement :meth:`Backend.execute` for the same system top
(:class:`epfabric.hw.system.System`).

A run is one *session*: host writes (instruction memories, HBM words, core
enables), ``start``, wait until every enabled core halted or the watchdog
fired, then read back HBM, the MARK trace buffer, per-core status and the
fabric counters. No Python runs per simulated cycle on the fast backends.
"""

import abc
import json
from dataclasses import asdict, dataclass, field

from .isa import address, split_address

__all__ = ["Backend", "MachineConfig", "Machine", "Report", "WatchdogTimeout", "TOPOLOGIES"]

TOPOLOGIES = ("superpod", "star")


class Backend(abc.ABC):
    """Something that runs a session on the system top described by a config."""

    name = "abstract"

    @abc.abstractmethod
    def execute(self, config, session):
        """Run ``session`` (see :meth:`Machine._session`) on ``config``'s system.

        Returns a dict with ``cycles``, ``done``, ``timeout``, ``mem``
        (``{rank: [word, ...]}``), ``trace`` (list of ``[core, cycle, event]``),
        ``trace_dropped``, ``cores`` (list of per-core status dicts) and
        ``counters``.
        """


def _int(name, value, lo, hi=None):
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an integer, not {value!r}")
    if value < lo or (hi is not None and value > hi):
        rng = f">= {lo}" if hi is None else f"in [{lo}, {hi}]"
        raise ValueError(f"{name} must be {rng}, not {value!r}")
    return value


@dataclass(frozen=True)
class MachineConfig:
    """Everything that determines the simulated hardware (and its Verilog)."""
    preset: str = "tiny"
    topology: tuple = ("superpod", 2, 1, 1)
    aivs_per_die: int = 1
    imem_depth: int = 64
    ubuf_rows: int = 4
    hbm_blocks: int = 16
    data_bytes: int = 32
    lanes: int = 4
    trace_depth: int = 64

    def __post_init__(self):
        from .presets import get_preset
        get_preset(self.preset)  # raises ValueError naming the valid presets
        topo = tuple(self.topology)
        object.__setattr__(self, "topology", topo)
        if not topo or topo[0] not in TOPOLOGIES:
            raise ValueError(f"topology must start with one of {', '.join(TOPOLOGIES)}, "
                             f"not {topo!r}")
        if topo[0] == "superpod":
            if len(topo) != 4:
                raise ValueError(f"topology ('superpod', dies_per_npu, npus_per_board, boards) "
                                 f"needs 3 sizes, not {topo!r}")
            for name, v in zip(("dies_per_npu", "npus_per_board", "boards"), topo[1:]):
                _int(name, v, 1)
        else:
            if len(topo) != 2:
                raise ValueError(f"topology ('star', n) needs 1 size, not {topo!r}")
            _int("n", topo[1], 2)
        _int("aivs_per_die", self.aivs_per_die, 1, 64)
        _int("imem_depth", self.imem_depth, 2)
        _int("ubuf_rows", self.ubuf_rows, 1)
        _int("hbm_blocks", self.hbm_blocks, 1)
        if self.hbm_blocks & (self.hbm_blocks - 1):
            raise ValueError(f"hbm_blocks must be a power of two, not {self.hbm_blocks!r}")
        _int("data_bytes", self.data_bytes, 32, 512)
        if self.data_bytes % 32:
            raise ValueError(f"data_bytes must be a multiple of 32, not {self.data_bytes!r}")
        _int("lanes", self.lanes, 1)
        _int("trace_depth", self.trace_depth, 1)
        if self.ranks > 256:
            raise ValueError(f"the topology has {self.ranks} ranks; at most 256 are addressable")

    @property
    def ranks(self):
        topo = self.topology
        if topo[0] == "superpod":
            return topo[1] * topo[2] * topo[3]
        return topo[1]

    @property
    def cores(self):
        return self.ranks * self.aivs_per_die

    @property
    def words_per_block(self):
        return self.data_bytes // 4

    def to_dict(self):
        d = asdict(self)
        d["topology"] = list(self.topology)
        return d


class WatchdogTimeout(RuntimeError):
    """The run hit ``max_cycles`` before every core halted; ``report`` says who waits on what."""

    def __init__(self, report):
        super().__init__(report.diagnosis)
        self.report = report


@dataclass
class Report:
    """What a run produced; :meth:`to_json` and :meth:`chrome_trace` serialise it."""
    config: dict
    backend: str
    cycles: int
    ns: float
    done: bool
    timeout: bool
    trace: list = field(default_factory=list)
    cores: list = field(default_factory=list)
    counters: dict = field(default_factory=dict)
    trace_dropped: int = 0
    diagnosis: str = ""
    extra: dict = field(default_factory=dict)

    def marks(self, event=None, rank=None, core=None):
        """MARK records, filtered; each is ``{"rank", "core", "cycle", "event"}``."""
        return [t for t in self.trace
                if (event is None or t["event"] == event) and (rank is None or t["rank"] == rank)
                and (core is None or t["core"] == core)]

    def to_dict(self):
        return asdict(self)

    def to_json(self, **kw):
        return json.dumps(self.to_dict(), **kw)

    def chrome_trace(self, cycle_ns):
        """MARK events in the Chrome/Perfetto trace-event format (``chrome://tracing``).

        One process per rank, one thread per AIV, an instant event per MARK;
        timestamps in microseconds of simulated time.
        """
        events = []
        for rank in sorted({t["rank"] for t in self.trace}):
            events.append({"name": "process_name", "ph": "M", "pid": rank,
                           "args": {"name": f"rank {rank}"}})
        for rank, core in sorted({(t["rank"], t["core"]) for t in self.trace}):
            events.append({"name": "thread_name", "ph": "M", "pid": rank, "tid": core,
                           "args": {"name": f"aiv {core}"}})
        for t in self.trace:
            events.append({"name": f"mark {t['event']}", "ph": "i", "s": "t",
                           "pid": t["rank"], "tid": t["core"],
                           "ts": t["cycle"] * cycle_ns / 1000.0,
                           "args": {"cycle": t["cycle"], "event": t["event"]}})
        return {"traceEvents": events, "displayTimeUnit": "ns"}


class Machine:
    """A simulated superpod (or star) of dies with AIV cores, run on a backend.

    Parameters
    ----------
    preset : str
        Preset name (:func:`epfabric.sw.presets.get_preset`).
    backend : Backend
        Where the hardware runs (``epfabric.sim.machine.backend("pysim")``,
        ``"icarus"`` or ``"verilator"``).
    **config
        :class:`MachineConfig` fields (``topology``, ``aivs_per_die``, ...).

    Raises
    ------
    ValueError, TypeError
        On a bad preset, topology or size (the message names it).
    """

    def __init__(self, preset="tiny", *, backend, **config):
        self.config = MachineConfig(preset=preset, **config)
        from .presets import get_preset
        self.preset = get_preset(preset)
        if not isinstance(backend, Backend):
            raise TypeError(f"backend must be a Backend, not {backend!r}")
        self.backend = backend
        self._programs = {}
        self._mem = {}
        self._readback = None
        self.last_report = None

    @property
    def ranks(self):
        return self.config.ranks

    def _check_core(self, rank, core):
        _int("rank", rank, 0, self.ranks - 1)
        _int("core", core, 0, self.config.aivs_per_die - 1)

    def load_program(self, rank, core, program):
        """Load ``program`` (a :class:`~epfabric.sw.assembler.Program` or words) into a core."""
        self._check_core(rank, core)
        words = program.assemble() if hasattr(program, "assemble") else list(program)
        if len(words) > self.config.imem_depth:
            raise ValueError(f"program for rank {rank} core {core} has {len(words)} "
                             f"instructions; imem_depth is {self.config.imem_depth}")
        self._programs[(rank, core)] = [int(w) & 0xFFFFFFFF for w in words]

    def _check_addr(self, rank, addr, n=1):
        _int("rank", rank, 0, self.ranks - 1)
        r, block, word = split_address(addr)
        if r != 0 or addr & 3:
            raise ValueError(f"addr must be a word-aligned local byte address "
                             f"(block << 9 | word << 2), not {addr:#x}")
        last = word + n - 1
        if block + last // 128 >= self.config.hbm_blocks:
            raise ValueError(f"addr {addr:#x} + {n} words runs past hbm_blocks="
                             f"{self.config.hbm_blocks}")

    def write_mem(self, rank, addr, words):
        """Write 32-bit ``words`` to rank ``rank``'s HBM from byte address ``addr`` on."""
        words = [int(w) & 0xFFFFFFFF for w in words]
        self._check_addr(rank, addr, len(words))
        for i, w in enumerate(words):
            self._mem[(rank, addr + 4 * i)] = w

    def read_mem(self, rank, addr, n=1):
        """``n`` words of rank ``rank``'s HBM from ``addr``, as read back after the last run."""
        if self.last_report is None:
            raise RuntimeError("read_mem needs a finished run(); call machine.run() first")
        self._check_addr(rank, addr, n)
        out = []
        wpb = self.config.words_per_block
        for i in range(n):
            _, block, word = split_address(addr + 4 * i)
            out.append(self._readback[rank][block * wpb + word] if word < wpb else 0)
        return out

    def _session(self, max_cycles):
        wpb = self.config.words_per_block
        writes = []
        for (rank, core), words in sorted(self._programs.items()):
            writes += [[0, rank, core, i, w] for i, w in enumerate(words)]
            writes.append([2, rank, core, 0, 1])
        for (rank, addr), w in sorted(self._mem.items()):
            _, block, word = split_address(addr)
            if word < wpb:  # words beyond data_bytes are not modelled
                writes.append([1, rank, 0, addr, w])
        return {"writes": writes, "max_cycles": max_cycles,
                "read_words": self.config.hbm_blocks * wpb, "words_per_block": wpb}

    def run(self, max_cycles=100_000):
        """Run until every loaded core halts; return a :class:`Report`.

        Raises :class:`WatchdogTimeout` (carrying the report) when the
        watchdog stops the machine after ``max_cycles`` cycles.
        """
        _int("max_cycles", max_cycles, 1, (1 << 32) - 1)
        if not self._programs:
            raise RuntimeError("no program loaded; call load_program() first")
        out = self.backend.execute(self.config.to_dict(), self._session(max_cycles))
        aivs = self.config.aivs_per_die
        trace = [{"rank": c // aivs, "core": c % aivs, "cycle": cyc, "event": ev}
                 for c, cyc, ev in out["trace"]]
        cores = [dict(s, rank=i // aivs, core=i % aivs) for i, s in enumerate(out["cores"])]
        self._readback = {int(r): words for r, words in out["mem"].items()}
        report = Report(config={**self.config.to_dict(), "cycle_ns": self.preset.cycle_ns},
                        backend=self.backend.name, cycles=out["cycles"],
                        ns=out["cycles"] * self.preset.cycle_ns, done=bool(out["done"]),
                        timeout=bool(out["timeout"]), trace=trace, cores=cores,
                        counters=out["counters"], trace_dropped=out.get("trace_dropped", 0),
                        extra={"run_wall_s": out.get("run_wall_s")})
        self.last_report = report
        if report.timeout:
            report.diagnosis = self._diagnose(report, max_cycles)
            raise WatchdogTimeout(report)
        return report

    def _diagnose(self, report, max_cycles):
        loaded = set(self._programs)
        lines = [f"watchdog: not every core halted within {max_cycles} cycles"]
        for c in report.cores:
            if (c["rank"], c["core"]) not in loaded or c["halted"]:
                continue
            if c["waiting"]:
                r, block, word = split_address(c["wait_addr"])
                lines.append(f"rank {c['rank']} core {c['core']} (pc {c['pc']}) waits on "
                             f"address {c['wait_addr']:#010x} (rank {r} block {block} word {word})")
            else:
                lines.append(f"rank {c['rank']} core {c['core']} (pc {c['pc']}) still running"
                             + (" (faulted)" if c.get("fault") else ""))
        return "; ".join(lines)

    @staticmethod
    def address(rank, block, word=0):
        """Global byte address (for programs): see :func:`epfabric.sw.isa.address`."""
        return address(rank, block, word)
