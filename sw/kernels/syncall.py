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

from ..assembler import Program
from ..isa import address

__all__ = ["ENTER", "LEAVE", "program", "load", "check"]

ENTER, LEAVE = 100, 200
LOCAL, GLOBAL, RELEASE = 0, 1, 2   # words of block 0


def program(config, rank, core, epochs=2):
    """The barrier program of ``core`` on ``rank`` (``epochs`` barriers back to back)."""
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


def load(machine, epochs=2):
    """Load the barrier on every core of ``machine`` (counters start at 0)."""
    for rank in range(machine.ranks):
        machine.write_mem(rank, address(0, 0, 0), [0, 0, 0])
        for core in range(machine.config.aivs_per_die):
            machine.load_program(rank, core, program(machine.config, rank, core, epochs))


def check(machine, report, epochs=2):
    """Verify the run and return ``{"correct", "barrier_cycles", "problems"}``.

    ``barrier_cycles[e-1]`` is the cost of barrier ``e``: from the last core's
    arrival (its ENTER mark) to the last core's departure (LEAVE mark).
    """
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
            problems.append(f"rank {rank}: local counter {local}, expected {epochs * cfg.aivs_per_die}")
    glob = machine.read_mem(0, address(0, 0, GLOBAL))[0]
    if glob != epochs * cfg.ranks:
        problems.append(f"global counter {glob}, expected {epochs * cfg.ranks}")
    return {"correct": not problems, "barrier_cycles": costs, "problems": problems}
