"""``alltoall``: every AIV of every rank sends one Token-Flag-Fusion block to every rank.

UBEP §3.4 Token-Flag Fusion: a 512 B DataBlock carries a 32 B flag field and
480 B of payload and is written atomically, so a receiver that sees the flag
also sees the payload. Memory map of every rank (DataBlock indices):

* ``RECV + s`` receives the block of source AIV ``s`` (global id
  ``rank * aivs + core``), ``s = 0 .. ranks*aivs - 1``;
* ``SEND + core * ranks + dst`` holds the token that ``core`` sends to ``dst``
  (placed by the driver — data, never part of the program).

Sender ``(r, c)``: for each destination ``d`` it loads its token block into
the UBuf, writes the flag ``FLAG | s`` into word 0 (the flag field) and stores
the block to ``RECV + s`` of rank ``d``. Receiver core ``c`` of rank ``d``
polls the flags of the blocks ``s ≡ c (mod aivs)``. Programs depend only on
the configuration; :func:`check` compares every received block with numpy.
"""

import numpy as np

from ...hw.validate import UserError
from ..assembler import Program
from ..isa import address
from ..machine import region_names
from ..param import Param
from . import Kernel, pow2_at_least, register

__all__ = ["FLAG", "RECV", "layout", "program", "tokens", "blocks_needed", "marks_needed",
           "machine_sizes", "AllToAll", "KERNEL"]

FLAG = 0x7F000000
RECV = 1
SENT_MARK, DONE_MARK = 300, 301


def layout(config):
    """``(recv_base, send_base)`` DataBlock indices for ``config``."""
    senders = config.ranks * config.aivs_per_die
    return RECV, RECV + senders


def blocks_needed(config):
    return layout(config)[1] + config.aivs_per_die * config.ranks


def marks_needed(config):
    """MARK trace entries one run writes: SENT and DONE of every core."""
    return 2 * config.cores


def machine_sizes(config):
    """``hbm_blocks``, ``trace_depth`` and ``imem_depth`` (powers of two) a run of ``config`` needs.

    Only the shape of ``config`` (preset, topology, AIVs per die) is read.
    """
    longest = max(len(program(config, r, c).assemble())
                  for r in range(config.ranks) for c in range(config.aivs_per_die))
    return {"hbm_blocks": pow2_at_least(blocks_needed(config)),
            "trace_depth": max(64, pow2_at_least(marks_needed(config))),
            "imem_depth": pow2_at_least(longest)}


def program(config, rank, core):
    ranks, aivs = config.ranks, config.aivs_per_die
    recv, send = layout(config)
    me = rank * aivs + core
    p = Program()
    p.li(10, 0)                                          # UBuf row 0
    p.li(9, FLAG | me)
    for i in range(ranks):
        d = (rank + i) % ranks                           # start with self, then rotate
        p.li(1, address(rank, send + core * ranks + d))
        p.ldb(10, 1, 0)                                  # token -> UBuf
        p.usw(9, 10, 0)                                  # flag field
        p.li(2, address(d, recv + me))
        p.stb(10, 2, 0)                                  # one atomic 512 B store
    p.fence()
    p.mark(SENT_MARK)
    for s in range(core, ranks * aivs, aivs):
        p.li(3, address(rank, recv + s))
        p.li(4, FLAG | s)
        p.poll(5, 3, 4, "eq")                            # Data-as-Flag: the flag is the data
    p.mark(DONE_MARK)
    p.halt()
    return p


def tokens(config, seed=0):
    """Random tokens ``[rank, core, dst, word]`` (word 0 is overwritten by the flag)."""
    rng = np.random.default_rng(seed)
    return rng.integers(0, 2**32, size=(config.ranks, config.aivs_per_die, config.ranks,
                                         config.words_per_block), dtype=np.uint64)


class AllToAll(Kernel):
    """Every AIV sends one Token-Flag-Fusion block to every rank (module docstring)."""

    name = "alltoall"
    description = "every AIV sends one Token-Flag-Fusion block to every rank, checked against numpy"
    params = (Param("seed", 0, "token data seed", int, minimum=0),)

    def sizes(self, config):
        return machine_sizes(config)

    def load(self, machine, params):
        """Programs on every core, random tokens in every send slot; returns the tokens."""
        cfg = machine.config
        if cfg.hbm_blocks < blocks_needed(cfg):
            raise UserError(f"alltoall needs hbm_blocks >= {blocks_needed(cfg)}, not {cfg.hbm_blocks}")
        if cfg.trace_depth < marks_needed(cfg):
            # the checker counts DONE marks: a full trace buffer drops them
            raise UserError(f"alltoall needs trace_depth >= {marks_needed(cfg)} (2 MARKs per core), "
                            f"not {cfg.trace_depth}")
        recv, send = layout(cfg)
        n = cfg.ranks * cfg.aivs_per_die
        machine.describe = region_names([("RECV", recv, n, None), ("SEND", send, n, None)],
                                        cfg.words_per_block)
        tok = tokens(cfg, params["seed"])
        _, send = layout(cfg)
        for r in range(cfg.ranks):
            for c in range(cfg.aivs_per_die):
                machine.load_program(r, c, program(cfg, r, c))
                for d in range(cfg.ranks):
                    machine.write_mem(r, address(0, send + c * cfg.ranks + d), tok[r, c, d].tolist())
        return tok

    def check(self, machine, report, inputs):
        """Every block delivered exactly once, to the right place, with its flag."""
        cfg = machine.config
        recv, _ = layout(cfg)
        expected = inputs.copy()
        problems = []
        wpb = cfg.words_per_block
        for d in range(cfg.ranks):
            got = np.array(machine.read_mem(d, address(0, recv), cfg.ranks * cfg.aivs_per_die * 128)
                           ).reshape(-1, 128)[:, :wpb]
            for r in range(cfg.ranks):
                for c in range(cfg.aivs_per_die):
                    s = r * cfg.aivs_per_die + c
                    want = expected[r, c, d].copy()
                    want[0] = FLAG | s
                    if not np.array_equal(got[s], want):
                        problems.append(f"rank {d} block from (rank {r}, core {c}) differs")
        done = report.marks(event=DONE_MARK)
        if report.trace_dropped:
            problems.append(f"the MARK trace dropped {report.trace_dropped} events (trace_depth too small)")
        if len(done) != cfg.cores:
            problems.append(f"{len(done)} of {cfg.cores} cores finished")
        return {"correct": not problems, "problems": problems,
                "blocks": cfg.ranks * cfg.cores, "dies": cfg.ranks,
                "aivs_per_die": cfg.aivs_per_die}

    def summary(self, result):
        return [f"alltoall on {result.preset} [{result.backend}]: {run.check['dies']} dies x "
                f"{run.check['aivs_per_die']} AIVs, {run.check['blocks']} TFF blocks, "
                f"{run.cycles} cycles ({run.ns:.0f} ns)" for run in result.runs]


KERNEL = register(AllToAll())
