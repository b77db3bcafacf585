"""The combine: expert outputs back to their sources, weighted and summed.

Specification: docs/spec/kernels.md §1.4, §1.8.

Before the combine, rank ``d``'s ``OUT`` holds the expert outputs in the
dispatch's order (local expert ``e_l``, source ``s``, slot ``j``) and its
``COUNTS`` the rows per entry ``e_l·R + s``; every source keeps the slot
``j`` of each of its token slots in ``EXPAND`` (written by either dispatch).
Rank ``s`` ends with ``y[t] = Σ_{i<k} w[t,i] · o(t,i)`` in ``YOUT``: 16-bit
lanes, ``vmuls`` then ``vadd`` in order ``i = 0 … k−1`` (mod 2^16), the
integer stand-in for CANN's fp32 accumulation (docs/spec/kernels.md §4).

Both systems send expert output row ``(e_l, s, j)`` to source ``s``'s
combine window ``CWIN[e][j]`` (``e = d·epr + e_l``), so the source finds the
answer of slot ``(t, i)`` at ``CWIN[topk_idx[t,i]][EXPAND[t·k+i]]`` — no
metadata lookup.

``system="cann"`` (§1.4, BSP), AIV ``a`` of ``A``:

1. *send* — the destination ranks ``split(R, A, a)``: for every local
   expert, copy the rows of each of its destinations (raw blocks), ``fence``
   (stop-and-wait), then one flag word (the epoch) to ``CSTATUS[d]`` on
   each destination;
2. *sync* — poll the flags of the expert ranks ``split(R, A, a)`` in its
   own ``CSTATUS``, then a die-local SyncAll (``CTRL`` word 2, cumulative:
   ``epoch · A``);
3. *combine* — tokens ``split(BS, A, a)``: per block, ``ldb`` the k answers,
   ``vmuls`` by the weight, ``vadd`` into the accumulator, ``stb`` to ``YOUT``.

``system="ubep"`` (§1.8, no barrier, no status): the pairs ``(e_l, s)``
with ``(e_l·R + s) mod A == a`` are sent Token-Flag Fused (word 0 of every
block ``0x0D0D0000 | epoch``), never fenced; the source's combine polls each
answer block's flag word before its ``ldb``.

``dtype="bf16"`` (a machine with ``fp``): the same walks; per block the answers are bf16, the
sum is fp32 (``vfcastf``, ``vfmuls``, ``vfadd`` in order ``i = 0 … k−1``) and ``vfcastb``
rounds it to bf16 once before the ``stb`` (:mod:`.bf16`: the order and the data).

Programs depend on the configuration only (``COUNTS``, ``EXPAND``, the
routing and the weights are data in memory).
"""

from ...hw.validate import UserError, check_choice, check_int
from ..assembler import Program
from ..presets import SYNCALLS as SYNCALL_KINDS
from . import ubep_inc
from .cann import copy_block, split
from .layout import COMBINE_EVENTS
from .bf16 import DTYPES
from .ubep import TFF_TAG, _elem

__all__ = ["combine_program", "EVENTS", "PHASES", "SYSTEMS", "ubuf_rows_needed"]

SYSTEMS = ("cann", "ubep")
#: MARK events at the end of each combine phase
EVENTS = COMBINE_EVENTS
#: the phases each system's AIVs MARK, in order
PHASES = {"cann": ("c_init", "c_send", "c_sync", "c_combine"),
          "ubep": ("c_init", "c_send", "c_combine"),
          "ubep-inc": ubep_inc.PHASES}
#: 16-bit elements per 512 B row
ELEMS = 256


class _Rows:
    """UBuf byte addresses: routing, weights, expandIdx, accumulator, temporary row; with
    ``dtype="bf16"`` the accumulator and the temporary are fp32 vectors of 256 elements (two
    rows each) and a third, ``half``, holds an answer's or the result's bf16 row."""

    def __init__(self, lay, dtype="int16"):
        rb = lay.route_blocks
        self.route = 0
        self.weights = rb * 512
        self.expand = 2 * rb * 512
        self.expand_rows = -(-lay.slots // 128)
        self.acc = (2 * rb + self.expand_rows) * 512
        wide = 2 if dtype == "bf16" else 1
        self.tmp = self.acc + wide * 512
        self.half = self.tmp + wide * 512
        self.rows = 2 * rb + self.expand_rows + 2 * wide + (dtype == "bf16")


def ubuf_rows_needed(lay, dtype="int16"):
    return _Rows(lay, dtype).rows


def _load_rows(p, rank, lay, rows):
    """Routing, weights and expandIdx of this rank into the UBuf."""
    for r in range(lay.route_blocks):
        p.li(12, rows.route + r * 512)
        p.li(14, lay.address(rank, lay.ROUTE + r))
        p.ldb(12, 14, 0)
        p.li(12, rows.weights + r * 512)
        p.li(14, lay.address(rank, lay.WEIGHTS + r))
        p.ldb(12, 14, 0)
    for r in range(rows.expand_rows):
        p.li(12, rows.expand + r * 512)
        p.li(14, lay.address(rank, lay.EXPAND + r))
        p.ldb(12, 14, 0)


def _epoch(p, rank, lay, rd):
    p.li(rd, lay.address(rank, lay.CTRL, 1))
    p.lw(rd, rd, 0)


def _send_back(p, lay, rank, mine, tff):
    """Copy the rows of the entries ``mine(e_l, s)`` selects to their sources' combine windows.

    Walks every entry ``q = e_l·R + s`` of ``COUNTS`` for the running offset
    in ``OUT`` (r1); r12 holds the TFF flag word when ``tff``.
    """
    R, B, epr = lay.ranks, lay.hidden_blocks, lay.epr
    p.mv(1, 0)
    p.li(10, _Rows(lay).tmp)
    for q in range(lay.entries):
        e_l, s = divmod(q, R)
        cb, cw = lay.word_at(lay.COUNTS, q)
        p.li(14, lay.address(rank, cb, cw))
        p.lw(2, 14, 0)                                 # rows of (e_l, s)
        if mine(e_l, s, q):
            e = rank * epr + e_l
            p.li(13, B * 512)
            p.mul(15, 1, 13)
            p.li(13, lay.address(rank, lay.OUT))
            p.add(15, 15, 13)                          # first row in OUT
            p.li(14, lay.address(s, lay.cwin_block(e, 0)))  # slot 0 of CWIN[e] on s
            p.mv(3, 2)
            p.label(f"row{q}")
            p.beq(3, 0, f"rows{q}")
            for b in range(B):
                copy_block(p, b)(10, 15, b * 512)       # the row: one copy
                if tff:
                    p.usw(12, 10, 0)                    # the flag word of this epoch
                    p.sub(9, 2, 3)
                    p.li(11, rank << 16)
                    p.or_(9, 9, 11)
                    p.usw(9, 10, 4)                     # d << 16 | j
                    p.li(9, e << 8 | b)
                    p.usw(9, 10, 8)                     # e << 8 | b
                    p.usw(0, 10, 12)
                p.stb(10, 14, b * 512)                  # posted (TFF: never fenced)
            p.addi(15, 15, B * 512)
            p.addi(14, 14, B * 512)
            p.addi(3, 3, -1)
            p.j(f"row{q}")
            p.label(f"rows{q}")
        p.add(1, 1, 2)


def _accumulate(p, lay, rank, t0, t1, rows, poll, dtype="int16"):
    """``YOUT[t] = Σ_i w[t,i] · CWIN[e(t,i)][j(t,i)]`` for tokens ``[t0, t1)``.

    r12 holds the flag word when ``poll``. ``dtype="bf16"``: in fp32 on the fp unit, in the
    order of :mod:`.bf16` (the weight's 16 bits are the upper half of its fp32 bits).
    """
    k, B = lay.topk, lay.hidden_blocks
    if t0 >= t1:
        return
    p.li(3, t0)
    p.li(4, t1)
    p.li(11, ELEMS)
    p.label("tok")
    p.bgeu(3, 4, "tok_end")
    for b in range(B):
        for i in range(k):
            p.li(13, k)
            p.mul(5, 3, 13)
            p.addi(5, 5, i)                            # n = t·k + i
            _elem(p, 6, rows.route, 5, 13)             # e
            p.slli(13, 5, 2)
            p.ulw(7, 13, rows.expand)                  # j
            _elem(p, 8, rows.weights, 5, 13)           # w
            p.li(13, lay.cap)
            p.mul(6, 6, 13)
            p.add(6, 6, 7)                             # e·cap + j
            if B > 1:
                p.li(13, B)
                p.mul(6, 6, 13)
            p.addi(6, 6, b)
            p.slli(6, 6, 9)
            p.li(13, lay.address(rank, lay.CWIN))
            p.add(6, 6, 13)                            # the answer's block b
            if poll:
                p.poll(9, 6, 12, "eq")                 # Data-as-Flag: it has arrived
            dst = rows.acc if i == 0 else rows.tmp
            if dtype == "bf16":
                _fp_term(p, rows, dst, i)
                continue
            p.li(10, dst)
            p.ldb(10, 6, 0)
            p.vmuls(10, 10, 11, 8)
            if i:
                p.li(9, rows.acc)
                p.vadd(9, 9, 11, 10)                   # acc += w · o, in order i
        p.li(13, B * 512)
        p.mul(6, 3, 13)
        p.li(13, lay.address(rank, lay.YOUT, 0) + b * 512)
        p.add(6, 6, 13)
        if dtype == "bf16":
            p.li(10, rows.acc)
            p.li(9, rows.half)
            p.vfcastb(9, 10, 11)                       # y = bf16(acc): the one rounding to bf16
        p.li(10, rows.half if dtype == "bf16" else rows.acc)
        p.stb(10, 6, 0)
    p.addi(3, 3, 1)
    p.j("tok")
    p.label("tok_end")


def _fp_term(p, rows, dst, i):
    """Term ``i`` of a bf16 block: the answer at r6 into ``half``, widened to fp32 in ``dst``,
    times the weight (r8's 16 bits, the upper half of its fp32 bits), added into ``acc``
    unless it is the first. Clobbers r8, r9, r10."""
    p.li(10, rows.half)
    p.ldb(10, 6, 0)
    p.li(9, dst)
    p.vfcastf(9, 10, 11)
    p.slli(8, 8, 16)                               # the weight's fp32 bits
    p.vfmuls(9, 9, 11, 8)
    if i:
        p.li(10, rows.acc)
        p.vfadd(10, 10, 11, 9)                     # acc += w · o (fp32), in order i


def combine_program(lay, *, rank, core, aivs, system, broken=None, syncall="soft",
                    dtype="int16"):
    """The combine program of AIV ``core`` on ``rank`` (module docstring).

    ``broken="no_flag_poll"`` (UBEP) reads every answer without polling its
    flag word: a negative control the checker must catch. ``dtype="bf16"`` sums bf16 rows
    in fp32 on the cores' fp instructions (a machine with ``fp``; :mod:`.bf16`).
    """
    check_int("aivs", aivs, 1)
    check_choice("dtype", dtype, DTYPES)
    check_choice("system", system, SYSTEMS)
    check_choice("broken", broken, (None, "no_flag_poll"))
    check_choice("syncall", syncall, SYNCALL_KINDS)
    if lay.words != 128:
        raise UserError(f"the combine needs full 512 B blocks (128 words), not {lay.words}")
    R = lay.ranks
    rows = _Rows(lay, dtype)
    p = Program()
    _load_rows(p, rank, lay, rows)
    p.mark(EVENTS["c_init"])
    if system == "ubep":
        p.li(12, TFF_TAG)
        _epoch(p, rank, lay, 13)
        p.or_(12, 12, 13)                              # r12 = the flag word of this epoch
        _send_back(p, lay, rank, lambda e_l, s, q: q % aivs == core, tff=True)
        p.mark(EVENTS["c_send"])
        p.li(12, TFF_TAG)
        _epoch(p, rank, lay, 13)
        p.or_(12, 12, 13)
        _accumulate(p, lay, rank, *split(lay.batch, aivs, core), rows,
                    poll=broken != "no_flag_poll", dtype=dtype)
        p.fence()
        p.mark(EVENTS["c_combine"])
        p.halt()
        return p

    s0, s1 = split(R, aivs, core)
    _send_back(p, lay, rank, lambda e_l, s, q: s0 <= s < s1, tff=False)
    p.fence()                                          # stop-and-wait: every row acked
    _epoch(p, rank, lay, 13)
    for s in range(s0, s1):
        block, word = lay.word_at(lay.CSTATUS, rank)
        p.li(14, lay.address(s, block, word))
        p.sw(13, 14, 0)                                # "rank `rank` has sent you everything"
    p.mark(EVENTS["c_send"])
    for d in range(s0, s1):
        block, word = lay.word_at(lay.CSTATUS, d)
        p.li(14, lay.address(rank, block, word))
        p.poll(6, 14, 13, "ge")
    if syncall == "hard":
        p.bar()                                            # SyncAll: the die's barrier
    else:
        p.li(12, lay.address(rank, lay.CTRL, 2))            # SyncAll (the combine's own counter)
        p.li(5, 1)
        p.fadd(6, 12, 5)
        p.li(5, aivs)
        p.mul(5, 5, 13)                                    # epoch · A
        p.poll(6, 12, 5, "ge")
    p.mark(EVENTS["c_sync"])
    _accumulate(p, lay, rank, *split(lay.batch, aivs, core), rows, poll=False, dtype=dtype)
    p.fence()
    p.mark(EVENTS["c_combine"])
    p.halt()
    return p
