"""``syncall``: a software barrier across every AIV of every die (UBEP §2.3 Insight 2).

UBEP measures SyncAll at about 15 % of a dispatch; this kernel is where that
cost comes from in the model. Two levels, built from atomic fetch-add and
polling only:

1. every core fetch-adds its die's *local* counter (block 0 word 0 of its
   rank); the die's leader (core 0) polls it until all ``A`` cores arrived;
2. each leader fetch-adds the *global* counter on rank 0 (block 0 word 1)
   and polls it until all ``D`` dies arrived, then writes the die's release
   word (block 0 word 2); the other cores poll the release word.

Counters are cumulative and compared with monotonically increasing
thresholds (``epoch * A``, ``epoch * D``, ``epoch``; INC-MoE §3.1), so
back-to-back barriers need no reset. MARK ``ENTER + e`` / ``LEAVE + e`` bracket
barrier ``e``.
"""

from dataclasses import replace

from tabulate import tabulate

from ...hw.validate import UserError, check_int
from ..assembler import Program
from ..isa import address
from ..machine import region_names
from ..param import Param
from . import Kernel, pow2_at_least, register

__all__ = ["ENTER", "LEAVE", "MAX_EPOCHS", "program", "SyncAll", "KERNEL"]

ENTER, LEAVE = 100, 200
MAX_EPOCHS = LEAVE - ENTER - 1      # ENTER + e stays below LEAVE + 1: marks never collide
LOCAL, GLOBAL, RELEASE = 0, 1, 2   # words of block 0
MAX_TRACE = 65535                  # MachineConfig.trace_depth's range


def program(config, rank, core, epochs=2):
    """The barrier program of ``core`` on ``rank`` (``epochs`` barriers back to back)."""
    check_int("epochs", epochs, 1, MAX_EPOCHS)
    aivs, dies = config.aivs_per_die, config.ranks
    p = Program()
    p.li(1, address(rank, 0, LOCAL))
    p.li(6, address(0, 0, GLOBAL))
    p.li(8, address(rank, 0, RELEASE))
    p.li(2, 1)
    for e in range(1, epochs + 1):
        p.mark(ENTER + e)
        p.fadd(3, 1, 2)                 # arrive at the die
        if core == 0:
            p.li(4, e * aivs)
            p.poll(5, 1, 4, "ge")       # every core of the die arrived
            p.fadd(3, 6, 2)             # arrive at the superpod
            p.li(7, e * dies)
            p.poll(5, 6, 7, "ge")       # every die arrived
            p.li(9, e)
            p.sw(9, 8, 0)               # release the die
            p.fence()
        else:
            p.li(9, e)
            p.poll(5, 8, 9, "ge")       # wait for the die's release
        p.mark(LEAVE + e)
    p.halt()
    return p


class SyncAll(Kernel):
    """A two-level barrier over every AIV (module docstring); sweeps 1, 2, 4 AIVs per die."""

    name = "syncall"
    description = "two-level software barrier (fetch-add + poll) over every AIV; cost per barrier"
    params = (Param("epochs", 2, "barriers back to back", int),)
    default_aivs = (1, 2, 4)

    def default_topology(self, preset):
        if preset.topology != "superpod":
            return ("star", 2)
        return ("superpod", min(2, preset.dies_per_npu), min(2, preset.npus_per_board), 1)

    def sizes(self, config):
        return {"hbm_blocks": 4}

    def resolve_params(self, params):
        p = super().resolve_params(params)
        check_int("epochs", p["epochs"], 1, MAX_EPOCHS)   # zero barriers would check nothing
        return p

    def configs(self, preset, topology=None, aivs=None, params=None):
        """The base shapes, with instruction memory and trace buffer grown to fit ``epochs``."""
        epochs = self.resolve_params(params)["epochs"]
        out = []
        for c in super().configs(preset, topology, aivs, params):
            longest = len(program(c, 0, 0, epochs).assemble())     # core 0 leads: the longest
            marks = 2 * epochs * c.cores
            if marks > MAX_TRACE:
                raise UserError(f"epochs={epochs} on {c.cores} cores needs {marks} MARK trace "
                                f"entries; the trace holds at most {MAX_TRACE} (fewer epochs or AIVs)")
            out.append(replace(c, imem_depth=max(c.imem_depth, pow2_at_least(longest)),
                               trace_depth=max(c.trace_depth, min(MAX_TRACE, pow2_at_least(marks)))))
        return out

    def load(self, machine, params):
        """Load the barrier on every core of ``machine`` (counters start at 0); returns ``epochs``."""
        epochs = self.resolve_params(params)["epochs"]
        machine.describe = region_names(
            [("SYNC", 0, 1, {LOCAL: "this die's arrivals", GLOBAL: "rank 0: dies arrived",
                             RELEASE: "this die's release"})], machine.config.words_per_block)
        for rank in range(machine.ranks):
            machine.write_mem(rank, address(0, 0, 0), [0, 0, 0])
            for core in range(machine.config.aivs_per_die):
                machine.load_program(rank, core, program(machine.config, rank, core, epochs))
        return epochs

    def check(self, machine, report, inputs):
        """Verify the run; ``barrier_cycles[e-1]`` is the cost of barrier ``e``.

        The cost runs from the last core's arrival (its ENTER mark) to the
        last core's departure (LEAVE mark); ``cycles_per_barrier`` is the
        largest.
        """
        epochs = inputs
        cfg = machine.config
        problems = []
        costs = []
        for e in range(1, epochs + 1):
            enters = report.marks(event=ENTER + e)
            leaves = report.marks(event=LEAVE + e)
            if len(enters) != cfg.cores or len(leaves) != cfg.cores:
                problems.append(f"barrier {e}: {len(enters)} ENTER and {len(leaves)} LEAVE marks "
                                f"for {cfg.cores} cores")
                continue
            last_in = max(t["cycle"] for t in enters)
            first_out = min(t["cycle"] for t in leaves)
            if first_out <= last_in:
                early = min(leaves, key=lambda t: t["cycle"])
                problems.append(f"barrier {e}: rank {early['rank']} core {early['core']} left at "
                                f"cycle {first_out}, before the last arrival at {last_in}")
            costs.append(max(t["cycle"] for t in leaves) - last_in)
        for rank in range(machine.ranks):
            local = machine.read_mem(rank, address(0, 0, LOCAL))[0]
            if local != epochs * cfg.aivs_per_die:
                problems.append(f"rank {rank}: local counter {local}, expected "
                                f"{epochs * cfg.aivs_per_die}")
        glob = machine.read_mem(0, address(0, 0, GLOBAL))[0]
        if glob != epochs * cfg.ranks:
            problems.append(f"global counter {glob}, expected {epochs * cfg.ranks}")
        worst = max(costs) if costs else None
        return {"correct": not problems, "problems": problems, "barrier_cycles": costs,
                "cycles_per_barrier": worst, "cores": cfg.cores, "dies": cfg.ranks,
                "aivs_per_die": cfg.aivs_per_die,
                "ns_per_barrier": None if worst is None else worst * machine.preset.cycle_ns}

    def summary(self, result):
        first = result.runs[0]
        lines = [f"syncall on {result.preset} [{result.backend}], topology "
                 f"{tuple(first.config.topology)}, {result.params['epochs']} barriers "
                 f"back to back:",
                 tabulate([(r["cores"], r["aivs_per_die"], str(r["cycles_per_barrier"]),
                            f"{r['ns_per_barrier'] or 0:.1f}")
                           for r in (run.check for run in result.runs)],
                          headers=("cores", "AIVs/die", "barrier cycles", "ns"),
                          disable_numparse=True, colalign=("right",) * 4)]
        return lines


KERNEL = register(SyncAll())
