"""CANN EP's dispatch (the BSP baseline): its programs (docs/spec/kernels.md §1.3, UBEP §2.3).

Every one of the A AIVs of a die runs every phase, separated by die-local
barriers (CANN's ``SyncAll`` is a barrier over one die's AIVs; flags order
ranks against each other). Phases of AIV ``a`` on rank ``s`` (MARK event at
the end of each, and at the entry and exit of each SyncAll, :data:`PHASES`):

1. **Init** — load the routing (BS·k 16-bit expert ids) into UBuf rows
   ``0 ..`` (one ``ldb`` per 256 ids).
2. **Token-Sending** — which slots AIV ``a`` sends is ``send_split``
   (:data:`SEND_SPLITS`, docs/spec/kernels.md §1.6 "Variants for the ablation"):

   * ``"slot"`` (default; the open kernel's ``SplitToCore(BS·k, A)``): its
     contiguous range of token slots ``n = t·k + i``. Per slot: the expert
     ``e`` (a UBuf word), the slot index ``j`` = ``vcount eq`` over the
     whole prefix ``E[0:n]`` (CANN's redundant per-slot prefix compare, cost
     ∝ n — the load grows with the AIV index);
   * ``"expert"`` (UBEP §5.4's account of CANN: "hotspot experts that
     concentrate token sending on a small subset of AIVs"): every slot of
     the experts ``e ≡ a (mod A)``. Per expert, one ``vcomp eq e`` over the
     routing writes the expert's slot indices, token-major, to a UBuf row
     (:func:`expert_rows` rows from row ``route_blocks + 1``); the ``j``-th
     of them is slot ``j`` of ``RECV[s][e_l]`` — the same ``j`` as the prefix
     compare gives, so the same destination. An AIV's load is the slots of
     its experts: hot experts make a few AIVs slow.

   Then, per slot, the token's ``B_tok`` blocks: ``ldb`` from ``X`` and a
   posted ``stb`` to ``RECV[s][e_l] + j`` on rank ``e // epr``. Raw blocks,
   no header. ``j`` is kept in the local ``EXPAND`` word of the slot (CANN's
   ``expandIdx``, what the combine finds the token's answer by), so the
   combine does not depend on the split. Counts, flags and reordering are
   the same for both splits (they count experts over the routing, not what
   an AIV sent).
3. **SendFlag & Count** — its contiguous range of experts
   (``SplitToCore(E, A)``): counts each with ``vcount eq`` (three experts per
   instruction), then ``fence`` (every token store acknowledged —
   stop-and-wait) and **SyncAll #1**, then one status word
   ``epoch << 16 | count`` per expert to ``STATUS[e_l·R + s]`` on the
   expert's rank.
4. **Flag Verification** — polls its slice of its own status window
   (``SplitToCore(R·epr, A)``) until every word carries the epoch, then
   **SyncAll #2**.
5. **CalCumSum** — reads the counts of every entry before its slice and sums
   them (redundantly on every AIV, as CANN's ``GetCumSum``).
6. **Token-Reordering** — for each entry ``(e_l, s')`` of its slice, copies
   the entry's tokens from ``RECV[s'][e_l]`` to ``OUT`` at the running offset
   and writes the entry's count to ``COUNTS``.

7. **UpdateTokenNumsOut** — only when a rank hosts more than one expert
   (``epr > 1``), as the open kernel's ``UpdateTokenNumsOut``: each AIV, while
   reordering, also writes the running total through each of its entries to
   ``SENDCNT`` (the kernel's ``sendCounts`` output: the inclusive prefix of
   the entry counts); then **SyncAll #3**; then AIV ``min(R·epr, A) − 1`` (the
   kernel's ``lastCore_``, its last AIV with entries) reads, per local expert,
   the running total through its last entry and through the previous expert's
   (one scalar read for expert 0, two for the others — a ``lw``, the kernel's
   ``DataCacheCleanAndInvalid`` + ``GetValue``) and writes their difference, the
   tokens the expert received, to ``TOKNUMS[e_l]`` (``expertTokenNums``). With
   one expert a rank the kernel's last AIV only stores its own total, which the
   model leaves out (as it leaves out ``sendCounts`` then: nothing reads them).

SyncAll is a die-local fetch-add counter (``CTRL`` word 0) polled until it
reaches ``(n_s·(epoch − 1) + n) · A`` for barrier ``n`` of the run, with
``n_s`` the SyncAlls a run has (:func:`syncalls_per_run`: 3 when ``epr > 1``,
else 2): cumulative, never reset, so runs follow each other (epochs 1, 2,
...). The run's epoch is a host-placed word (``CTRL`` word 1); flags are
epoch-tagged words instead of CANN's 1.0/0.0 parity.

The open kernel (``hicann/ops-transformer`` at ``c29bc10``,
``mc2/moe_distribute_dispatch/op_kernel/moe_distribute_dispatch.h``):
``Process`` runs ``UpdateTokenNumsOut`` last; with ``moeExpertNumPerRank_ > 1``
it is ``SyncAll<true>()``, then ``lastCore_`` alone runs
``UpdateMultiMoeTokenNumsOut`` (lines 1007–1017, 954–980); ``LocalWindowCopy``
writes ``sendCounts`` as the running totals of its entries (lines 782–851).

Programs depend only on the configuration (ranks, AIVs, E, BS, k, B_tok,
layout): routing and tokens are data.
"""

from ...hw.validate import UserError, check_choice, check_int
from ..assembler import Program
from ..presets import CANN_COUNTS, COPIES, SYNCALLS as SYNCALL_KINDS

__all__ = ["dispatch_program", "launch_delay", "copy_block", "status_rows", "status_base",
           "PHASES", "SYNCALLS", "phases", "syncall_pairs", "syncalls_per_run", "last_core",
           "split", "count_experts", "count_ascend", "count_experts_ascend", "scratch_row",
           "BROKEN", "SEND_SPLITS", "expert_rows", "ubuf_rows_needed",
           "divmod_const", "reciprocal", "is_pow2"]

#: How CANN's AIVs share Token-Sending: the open kernel's contiguous slot ranges, or all the
#: slots of the experts ``e ≡ a (mod A)`` (module docstring)
SEND_SPLITS = ("slot", "expert")

#: Deliberately broken variants, the checker's and the watchdog's negative controls:
#: ``no_flag_wait`` skips the flag verification (reorders before the data is there);
#: ``syncall_one_short`` waits for one AIV more than the die has (hangs at SyncAll #1).
BROKEN = (None, "no_flag_wait", "syncall_one_short")

#: MARK event ids at the end of each phase (the report's per-AIV phase boundaries); the last
#: three only when a rank hosts more than one expert (:func:`phases`)
PHASES = {"init": 10, "send": 11, "sync1_in": 17, "sync1_out": 18, "count_sync": 12,
          "sync2_in": 19, "verify": 13, "cumsum": 14, "reorder": 15,
          "sync3_in": 24, "sync3_out": 25, "update": 26}
#: the MARKs around the SyncAlls: (entry, exit) — the SyncAll share of the run; the third
#: only when a rank hosts more than one expert (:func:`syncall_pairs`)
SYNCALLS = (("sync1_in", "sync1_out"), ("sync2_in", "verify"), ("sync3_in", "sync3_out"))
#: the phases of UpdateTokenNumsOut (``epr > 1`` only)
UPDATE_PHASES = ("sync3_in", "sync3_out", "update")


def syncalls_per_run(epr):
    """SyncAlls a CANN dispatch runs: two, and ``UpdateTokenNumsOut``'s third when a rank hosts
    more than one expert (the open kernel's ``moeExpertNumPerRank_ > 1``)."""
    return 3 if epr > 1 else 2


def phases(epr):
    """The names of the phase-end MARKs every AIV of a dispatch with ``epr`` experts a rank
    leaves, in order."""
    return tuple(name for name in PHASES if epr > 1 or name not in UPDATE_PHASES)


def syncall_pairs(epr):
    """The (entry, exit) MARK pairs of the SyncAlls of a dispatch with ``epr`` experts a rank."""
    return SYNCALLS[:syncalls_per_run(epr)]


def last_core(lay, aivs):
    """The AIV that runs ``UpdateMultiMoeTokenNumsOut``: the open kernel's ``lastCore_ =
    MIN(totalMoeExpert, aivNum_) - 1`` (its last AIV with reorder entries; every running total
    it reads is written before SyncAll #3, whichever AIV reordered it)."""
    return min(lay.entries, aivs) - 1


def split(total, parts, index):
    """``[lo, hi)`` of part ``index`` of ``total`` items split into ``parts`` contiguous ranges."""
    return total * index // parts, total * (index + 1) // parts


def count_experts(p, lo, hi, slots, emit):
    """Count experts ``[lo, hi)`` in the routing vector (UBuf row 0, ``slots`` elements).

    Three experts per ``vcount eq`` (pivots in r9..r11, counts in r6..r8,
    length in r2); ``emit(e, reg)`` stores the count of expert ``e`` held
    in register ``reg``.
    """
    p.li(2, slots)
    for g in range(lo, hi, 3):
        p.li(9, g)
        p.li(10, g + 1)
        p.li(11, g + 2)
        p.vcount(6, 0, 2, 9, "eq")             # counts of experts g, g+1, g+2
        for q in range(min(3, hi - g)):
            emit(g + q, 6 + q)


def count_ascend(p, rd, length, expert, scratch, one):
    """``R[rd]`` = the elements of the routing (UBuf row 0) among the first ``R[length]`` that
    are ``R[expert]``, as CANN's open dispatch kernel counts them (``CalTokenSendExpertCnt``,
    v1:449-473, v2:621-644): ``Duplicate`` the expert, ``Sub`` it from the routing, ``Abs``,
    ``Mins`` 1 (each element 0 if it is the expert, else 1), ``ReduceSum``, then the scalar
    unit takes that from the length -- five vector instructions (``valu`` ×4, ``vsum``), each
    paying the vector pipe's cost (the kernel's ``PipeBarrier<PIPE_V>`` between dependent
    ones), on the vector at ``R[scratch]``; ``R[one]`` holds 1. The vector unit's ``Mins`` is
    unsigned, so ``Abs`` changes no result here (``E[n'] - e`` below 0 wraps to a large
    number, whose minimum with 1 is 1 as well); the open kernel needs it for its signed int32
    ``Mins``, and the model keeps it for its cost."""
    p.valu(scratch, 0, length, expert, 0)      # Duplicate: e
    p.valu(scratch, 0, length, scratch, 1)     # Sub: E[n'] - e
    p.valu(scratch, scratch, length, 0, 2)     # Abs
    p.valu(scratch, scratch, length, one, 3)   # Mins 1: 0 where E[n'] == e, else 1
    p.vsum(rd, scratch, length)                # ReduceSum: the others
    p.sub(rd, length, rd)


def count_experts_ascend(p, lo, hi, slots, emit, scratch_addr):
    """Count experts ``[lo, hi)`` in the routing vector (UBuf row 0, ``slots`` elements) one
    expert at a time with :func:`count_ascend` (the open kernel's ``SetStatus`` counts each of
    its experts so, v1:589); ``emit(e, 6)`` stores the count of expert ``e``; the vector at
    byte ``scratch_addr`` is its work row."""
    p.li(2, slots)
    p.li(10, 1)
    p.li(11, scratch_addr)
    for e in range(lo, hi):
        p.li(9, e)
        count_ascend(p, 6, 2, 9, 11, 10)
        emit(e, 6)


def scratch_row(lay):
    """The first UBuf row of the five-instruction count's work vector (``BS·k`` elements,
    :func:`count_ascend`): after the token row and the expert split's slot list. The count runs
    before the Flag Verification copies the status slice, which may reuse the rows."""
    return lay.route_blocks + 1 + expert_rows(lay)


def is_pow2(d):
    """``d`` is a power of two (1 included)."""
    return d >= 1 and not d & (d - 1)


def reciprocal(d, bound):
    """``(M, s)``: ``x // d == (x * M) >> s`` and ``x * M < 2**32`` for every ``0 <= x < bound``.

    The smallest ``s`` for which ``(bound − 1) · (M·d − 2^s) < 2^s`` with ``M = ⌈2^s / d⌉``:
    then ``x/d ≤ x·M/2^s < x/d + 1/d`` for every ``x < bound``, so the floor is exact; and
    ``(bound − 1) · M`` must fit 32 bits (``mul`` keeps the low half).

    Raises
    ------
    ValueError
        When no shift fits 32 bits (``bound`` too large for this ``d``), naming both.
    """
    check_int("d", d, 1)
    check_int("bound", bound, 1)
    top = bound - 1
    for s in range(d.bit_length() - 1, 33):
        m = -(-(1 << s) // d)
        if top * m >= 1 << 32:
            break
        if top * (m * d - (1 << s)) < 1 << s:
            return m, s
    raise UserError(f"no 32-bit multiply-shift divides every value below {bound} by {d}")


def divmod_const(p, q, r, x, d, bound, tmp, shift=0):
    """Emit ``R[q] = (R[x] // d) << shift`` and, unless ``r`` is None, ``R[r] = R[x] % d``.

    The kernels split an expert id ``e`` into its rank ``e // epr`` and local expert
    ``e % epr``, and a slot index ``n`` into its token ``n // k`` and k-slot ``n % k``: the
    divisor is a shape (known when the program is generated), the dividend routing data
    (computed by the core), ``0 <= R[x] < bound``. The ISA has ``mul`` (the low 32 bits, one
    cycle) but no divide and no multiply-high, so:

    * a power of two ``d``: ``srli q, x``, ``slli q`` (when ``shift``) and ``andi r, x`` in
      that order — 2 instructions, the kernels' original sequence, kept exactly (the cycle
      counts of power-of-two shapes do not change);
    * any other ``d``: ``q = (x · M) >> s`` with :func:`reciprocal` ``(d, bound)``, then
      ``r = x − q · d`` through ``tmp``: ``li mul srli li mul sub``, 6 instructions (7 when
      ``M`` needs a ``lui``) — 4 cycles more per quotient and remainder, 2 per quotient.

    ``tmp`` must differ from ``q`` and ``x``, and ``q`` from ``x``.
    """
    if is_pow2(d):
        p.srli(q, x, d.bit_length() - 1)
        if shift:
            p.slli(q, q, shift)
        if r is not None:
            p.andi(r, x, d - 1)
        return
    if len({q, x, tmp}) != 3:
        raise ValueError(f"divmod_const needs distinct q, x and tmp, not r{q}, r{x}, r{tmp}")
    m, s = reciprocal(d, bound)
    p.li(tmp, m)
    p.mul(q, x, tmp)
    p.srli(q, q, s)                                # q = x // d
    if r is not None:
        p.li(tmp, d)
        p.mul(tmp, q, tmp)
        p.sub(r, x, tmp)                           # r = x - q·d
    if shift:
        p.slli(q, q, shift)


def copy_block(p, index):
    """The read of block ``index`` (0, 1, ...) of one copy: ``ldb`` for the first, which pays
    the copy's start (the dies' ``read_extra`` knob), ``ldbc`` for the rest (an
    Ascend MTE ``DataCopy`` moves a whole token, or table, for one start)."""
    return p.ldb if index == 0 else p.ldbc


def status_rows(lay, aivs):
    """UBuf rows the widest Flag Verification slice's status blocks take (``copies="mte"``)."""
    out = 0
    for a in range(aivs):
        q0, q1 = split(lay.entries, aivs, a)
        if q0 < q1:
            out = max(out, lay.word_at(lay.STATUS, q1 - 1)[0] - lay.word_at(lay.STATUS, q0)[0] + 1)
    return out


def expert_rows(lay):
    """UBuf rows of the expert split's slot list (one word per slot of an expert, at most BS)."""
    return -(-lay.batch // 128)


def status_base(lay, aivs):
    """The first UBuf row of the verified status slice (``copies="mte"``): the routing's rows,
    which are not needed any more, or the rows after the token row and the expert split's
    slot list when the slice is wider than the routing."""
    return 0 if status_rows(lay, aivs) <= lay.route_blocks else lay.route_blocks + 1 + expert_rows(lay)


def ubuf_rows_needed(lay, send_split="slot", aivs=1, count="vcount"):
    """UBuf rows of a CANN AIV: the routing, the token row, and the expert split's slot list
    (and, with ``copies="mte"``, the verified status slice: :func:`status_base`; with
    ``count="ascend"``, the count's work vector: :func:`scratch_row`)."""
    check_choice("send_split", send_split, SEND_SPLITS)
    check_choice("count", count, CANN_COUNTS)
    base = status_base(lay, aivs)
    return max(lay.route_blocks + 1 + (expert_rows(lay) if send_split == "expert" else 0),
               base + status_rows(lay, aivs) if base else 0,
               scratch_row(lay) + lay.route_blocks if count == "ascend" else 0)


def _send_slots(p, lay, rank, core, aivs, experts, tok_addr, count="vcount"):
    """Token-Sending of the slot split: slots ``split(BS·k, A, core)``, ``j`` by prefix count
    (``count``, :data:`~epfabric.sw.presets.CANN_COUNTS`: one ``vcount``, or the open kernel's
    five instructions, :func:`count_ascend`)."""
    epr, k, B = lay.epr, lay.topk, lay.hidden_blocks
    n0, n1 = split(lay.batch * k, aivs, core)
    t0, i0 = divmod(n0, k)
    if count == "ascend":
        p.li(8, scratch_row(lay) * 512)
        p.li(11, 1)
    p.li(1, n0)
    p.li(2, n1)
    p.li(3, t0)
    p.li(4, i0)
    p.li(10, k)
    p.li(13, tok_addr)
    p.li(15, lay.address(rank, lay.X + t0 * B))
    p.label("send")
    p.bgeu(1, 2, "send_end")
    p.add(12, 1, 1)                            # the element's byte offset 2n in the UBuf
    p.andi(12, 12, 0x3FFFC)
    p.ulw(5, 12, 0)
    p.andi(12, 1, 1)
    p.slli(12, 12, 4)
    p.srl(5, 5, 12)
    p.andi(5, 5, 0xFFFF)                       # e
    if count == "ascend":
        count_ascend(p, 6, 1, 5, 8, 11)        # j = #{n' < n : E[n'] == e}, five instructions
    else:
        p.mv(9, 5)
        p.vcount(6, 0, 1, 9, "eq")             # j = #{n' < n : E[n'] == e}
    p.slli(12, 1, 2)
    p.li(14, lay.address(rank, lay.EXPAND))
    p.add(12, 12, 14)
    p.sw(6, 12, 0)                             # expandIdx[n] = j (kept for the combine)
    divmod_const(p, 12, 5, 5, epr, experts, 7, shift=lay.rank_shift)   # rank(e) << 24, e_l
    p.addi(5, 5, rank * epr)                   # region s·epr + e_l
    p.li(14, lay.cap)
    p.mul(5, 5, 14)
    p.add(5, 5, 6)                             # + j
    if B > 1:
        p.li(14, B)
        p.mul(5, 5, 14)
    p.addi(5, 5, lay.RECV)
    p.slli(5, 5, 9)
    p.or_(14, 12, 5)                           # the token's first block on rank(e)
    for b in range(B):
        copy_block(p, b)(13, 15, b * 512)      # the token: one copy, its start paid once
        p.stb(13, 14, b * 512)                 # posted; acked (stop-and-wait fences later)
    p.addi(1, 1, 1)
    p.addi(4, 4, 1)
    p.bne(4, 10, "send")
    p.mv(4, 0)
    p.addi(3, 3, 1)
    p.addi(15, 15, B * 512)
    p.j("send")
    p.label("send_end")


def _send_experts(p, lay, rank, core, aivs, experts, tok_addr):
    """Token-Sending of the expert split: every slot of the experts ``e ≡ core (mod aivs)``."""
    epr, B = lay.epr, lay.hidden_blocks
    slots_addr = (lay.route_blocks + 1) * 512
    p.li(4, core)                              # x: this AIV's first expert
    p.li(10, experts)
    p.li(2, lay.batch * lay.topk)              # vcomp's length: the whole routing
    p.li(13, tok_addr)
    p.label("expert")
    p.bgeu(4, 10, "send_end")
    p.li(5, slots_addr)
    p.vcomp(5, 0, 2, 4, "eq")                  # r5 = cnt(x); x's slots, token-major (j order)
    divmod_const(p, 11, 12, 4, epr, experts, 7, shift=lay.rank_shift)  # rank(x) << 24, e_l
    p.addi(12, 12, rank * epr)                 # region s·epr + e_l
    p.li(14, lay.cap)
    p.mul(12, 12, 14)                          # its first slot (j = 0)
    p.mv(6, 0)                                 # j
    p.label("slot")
    p.bgeu(6, 5, "next")
    p.slli(7, 6, 2)
    p.ulw(7, 7, slots_addr)                    # n = the j-th slot of x
    p.slli(8, 7, 2)
    p.li(14, lay.address(rank, lay.EXPAND))
    p.add(8, 8, 14)
    p.sw(6, 8, 0)                              # expandIdx[n] = j (kept for the combine)
    p.add(9, 12, 6)                            # region slot + j
    if B > 1:
        p.li(14, B)
        p.mul(9, 9, 14)
    p.addi(9, 9, lay.RECV)
    p.slli(9, 9, 9)
    p.or_(9, 9, 11)                            # the token's first block on rank(x)
    divmod_const(p, 15, None, 7, lay.topk, lay.slots, 14)  # t = n // k
    p.li(14, B * 512)
    p.mul(15, 15, 14)
    p.li(14, lay.address(rank, lay.X))
    p.add(15, 15, 14)                          # the token in X
    for b in range(B):
        copy_block(p, b)(13, 15, b * 512)      # the token: one copy, its start paid once
        p.stb(13, 9, b * 512)                  # posted; acked (stop-and-wait fences later)
    p.addi(6, 6, 1)
    p.j("slot")
    p.label("next")
    p.addi(4, 4, aivs)
    p.j("expert")
    p.label("send_end")


def launch_delay(p, rank, lay):
    """A die's launch skew (a workload option): spin until the core has run as many
    cycles as ``CTRL`` word 3 of its rank holds (host-placed data: 0 costs 5 cycles)."""
    p.li(14, lay.address(rank, lay.CTRL, 3))
    p.lw(5, 14, 0)
    p.label("launch")
    p.csrr(6, "cycle")
    p.bltu(6, 5, "launch")


def _syncall(p, rank, lay, aivs, which, extra=0, hard=False):
    """Die-local barrier ``which`` (1 to :func:`syncalls_per_run`) of the run: fetch-add, poll
    the cumulative count; ``hard``: the die's hardware barrier (``bar``) instead."""
    if hard:
        p.bar()
        return
    p.li(12, lay.address(rank, lay.CTRL, 0))
    p.li(5, 1)
    p.fadd(6, 12, 5)                          # arrive
    p.li(14, lay.address(rank, lay.CTRL, 1))
    p.lw(5, 14, 0)                            # the run's epoch
    n_s = syncalls_per_run(lay.epr)
    if n_s == 2:
        p.slli(5, 5, 1)
    else:
        p.li(14, n_s)
        p.mul(5, 5, 14)
    p.addi(5, 5, which - n_s)                 # n_s·(epoch - 1) + which
    p.li(14, aivs)
    p.mul(5, 5, 14)
    if extra:
        p.addi(5, 5, extra)
    p.poll(6, 12, 5, "ge")                    # every AIV of the die arrived


def dispatch_program(lay, *, rank, core, aivs, experts, broken=None, send_split="slot",
                     syncall="soft", launch=False, copies="block", count="vcount"):
    """The program of AIV ``core`` on ``rank`` (see the module docstring).

    ``broken`` selects a negative control (:data:`BROKEN`); ``send_split``
    how the AIVs share Token-Sending (:data:`SEND_SPLITS`); ``syncall`` how SyncAll runs
    (the preset's: ``"soft"``, a fetch-add counter and a poll, or ``"hard"``, the die's
    hardware barrier ``bar``, as CANN's ``SyncAll<true>()``); ``launch`` starts with
    :func:`launch_delay`; ``copies`` how it reads (:data:`~epfabric.sw.presets.COPIES`):
    ``"block"``, every status word a read of its own, or ``"mte"``, Ascend's copy engine —
    the Flag Verification copies its slice's status blocks into the UBuf (one start) and
    checks them there, polling a word not yet of this run; CalCumSum copies the blocks before
    its slice and sums them there; the reordering takes each entry's count from the verified
    copy. Every token and the routing are one copy each either way (``ldbc``,
    :func:`copy_block`): at ``read_extra`` 0 that costs what ``ldb`` does. ``count``
    (:data:`~epfabric.sw.presets.CANN_COUNTS`) how a slot's index and an expert's count are
    counted: one ``vcount`` (three experts a pass in SendFlag & Count), or ``"ascend"``, the
    open kernel's five vector instructions an expert (:func:`count_ascend`).

    Any ``epr`` and ``topk``: the expert → rank split (and, with the expert
    split, slot → token) is a shift for a power of two and a multiply by a
    reciprocal otherwise (:func:`divmod_const`).
    """
    check_int("aivs", aivs, 1)
    check_int("experts", experts, 1)
    check_choice("broken", broken, BROKEN)
    check_choice("send_split", send_split, SEND_SPLITS)
    check_choice("syncall", syncall, SYNCALL_KINDS)
    check_choice("copies", copies, COPIES)
    check_choice("count", count, CANN_COUNTS)
    if broken == "syncall_one_short" and syncall == "hard":
        raise UserError("broken='syncall_one_short' is a negative control of the soft SyncAll "
                        "(a counter one AIV short); the hardware barrier has no count to get wrong")
    hard = syncall == "hard"
    R, k, B, epr = lay.ranks, lay.topk, lay.hidden_blocks, lay.epr
    slots = lay.batch * k
    tok_row = lay.route_blocks                 # the UBuf row tokens pass through
    tok_addr = tok_row * 512
    p = Program()
    if launch:
        launch_delay(p, rank, lay)

    # --- 1. Init: routing into UBuf rows 0.. --------------------------------------------------
    for r in range(lay.route_blocks):
        p.li(12, r * 512)
        p.li(14, lay.address(rank, lay.ROUTE + r))
        copy_block(p, r)(12, 14, 0)             # the routing: one copy
    p.mark(PHASES["init"])

    # --- 2. Token-Sending: a slot range, or the slots of experts core, core + A, ... ---------
    if send_split == "slot":
        _send_slots(p, lay, rank, core, aivs, experts, tok_addr, count)
    else:
        _send_experts(p, lay, rank, core, aivs, experts, tok_addr)
    p.mark(PHASES["send"])

    # --- 3. SendFlag & Count: experts [e0, e1) -------------------------------------------------
    e0, e1 = split(experts, aivs, core)
    emit = lambda e, reg: p.usw(reg, 0, tok_addr + 4 * (e - e0))     # noqa: E731
    if count == "ascend":
        count_experts_ascend(p, e0, e1, slots, emit, scratch_row(lay) * 512)
    else:
        count_experts(p, e0, e1, slots, emit)
    p.fence()                                   # stop-and-wait: every token store acked
    p.mark(PHASES["sync1_in"])
    _syncall(p, rank, lay, aivs, 1, extra=int(broken == "syncall_one_short"), hard=hard)
    p.mark(PHASES["sync1_out"])
    p.li(14, lay.address(rank, lay.CTRL, 1))
    p.lw(13, 14, 0)
    p.slli(13, 13, 16)                          # epoch << 16
    for e in range(e0, e1):
        d, e_l = divmod(e, epr)
        block, word = lay.word_at(lay.STATUS, e_l * R + rank)
        p.ulw(5, 0, tok_addr + 4 * (e - e0))
        p.or_(5, 5, 13)
        p.li(14, lay.address(d, block, word))
        p.sw(5, 14, 0)
    p.mark(PHASES["count_sync"])

    # --- 4. Flag Verification of entries [q0, q1) of the own status window ---------------------
    q0, q1 = split(R * epr, aivs, core)
    mte = copies == "mte"
    if mte and q0 < q1:
        # one copy of the slice's status blocks into UBuf rows 0.. (the routing is not needed
        # any more), each word checked there; a word not yet of this run is polled
        first = lay.word_at(lay.STATUS, q0)[0]
        base = status_base(lay, aivs) * 512
        for i in range(lay.word_at(lay.STATUS, q1 - 1)[0] - first + 1):
            p.li(12, base + i * 512)
            p.li(14, lay.address(rank, first + i))
            copy_block(p, i)(12, 14, 0)
    for q in range(q0, q1):
        if broken == "no_flag_wait":
            break
        block, word = lay.word_at(lay.STATUS, q)
        if mte:
            here = base + (block - first) * 512 + 4 * word
            p.ulw(6, 0, here)
            p.bgeu(6, 13, f"verified{q}")       # the copy holds this run's flag
        p.li(14, lay.address(rank, block, word))
        p.poll(6, 14, 13, "ge")                 # the flag carries this run's epoch
        if mte:
            p.usw(6, 0, here)                   # the copy's word, for the reordering
            p.label(f"verified{q}")
    p.mark(PHASES["sync2_in"])
    _syncall(p, rank, lay, aivs, 2, hard=hard)
    p.mark(PHASES["verify"])

    # --- 5. CalCumSum: tokens of the entries before q0 -----------------------------------------
    p.mv(1, 0)
    if mte:                                     # one copy of their blocks, through the token row
        last = None
        p.li(12, tok_addr)
        for q in range(q0):
            block, word = lay.word_at(lay.STATUS, q)
            if block != last:
                p.li(14, lay.address(rank, block))
                (p.ldb if last is None else p.ldbc)(12, 14, 0)
                last = block
            p.ulw(5, 12, 4 * word)
            p.andi(5, 5, 0xFFFF)
            p.add(1, 1, 5)
    else:
        for q in range(q0):
            block, word = lay.word_at(lay.STATUS, q)
            p.li(14, lay.address(rank, block, word))
            p.lw(5, 14, 0)
            p.andi(5, 5, 0xFFFF)
            p.add(1, 1, 5)
    p.mark(PHASES["cumsum"])

    # --- 6. Token-Reordering of entries [q0, q1) ----------------------------------------------
    p.li(13, tok_addr)
    for q in range(q0, q1):
        e_l, src = divmod(q, R)
        block, word = lay.word_at(lay.STATUS, q)
        if mte:
            p.ulw(2, 0, base + (block - first) * 512 + 4 * word)   # the verified copy
        else:
            p.li(14, lay.address(rank, block, word))
            p.lw(2, 14, 0)
        p.andi(2, 2, 0xFFFF)                    # tokens of this entry
        cblock, cword = lay.word_at(lay.COUNTS, q)
        p.li(14, lay.address(rank, cblock, cword))
        p.sw(2, 14, 0)
        p.li(15, lay.address(rank, lay.recv_block(src, e_l, 0)))
        p.slli(14, 1, 9)                        # OUT + offset·B_tok
        if B > 1:
            p.li(12, B)
            p.mul(14, 14, 12)
        p.li(12, lay.address(rank, lay.OUT))
        p.add(14, 14, 12)
        p.add(1, 1, 2)                          # running offset for the next entry
        if epr > 1:                             # sendCounts: the running total through q
            sblock, sword = lay.word_at(lay.SENDCNT, q)
            p.li(12, lay.address(rank, sblock, sword))
            p.sw(1, 12, 0)
        p.label(f"copy{q}")
        p.beq(2, 0, f"copied{q}")
        for b in range(B):
            copy_block(p, b)(13, 15, b * 512)   # a token: one copy
            p.stb(13, 14, b * 512)
        p.addi(15, 15, B * 512)
        p.addi(14, 14, B * 512)
        p.addi(2, 2, -1)
        p.j(f"copy{q}")
        p.label(f"copied{q}")
    p.fence()
    p.mark(PHASES["reorder"])

    # --- 7. UpdateTokenNumsOut (epr > 1): SyncAll #3, then the last AIV's expert totals -------
    if epr > 1:
        p.mark(PHASES["sync3_in"])
        _syncall(p, rank, lay, aivs, 3, hard=hard)
        p.mark(PHASES["sync3_out"])
        if core == last_core(lay, aivs):
            _update_token_nums(p, lay, rank)
        p.mark(PHASES["update"])
    p.halt()
    return p


def _update_token_nums(p, lay, rank):
    """``TOKNUMS[e_l]`` = the running total through expert ``e_l``'s last entry minus the one
    through expert ``e_l − 1``'s: a scalar read of each (``lw``: the open kernel's
    ``DataCacheCleanAndInvalid`` + ``GetValue``, one for expert 0), a store of the difference
    (its ``SetValue``; the cache write-back after it is charged nothing, as for every word
    store)."""
    R = lay.ranks
    p.mv(7, 0)                                  # the total through the previous expert
    for e_l in range(lay.epr):
        block, word = lay.word_at(lay.SENDCNT, e_l * R + R - 1)
        p.li(14, lay.address(rank, block, word))
        p.lw(6, 14, 0)
        if e_l:
            block, word = lay.word_at(lay.SENDCNT, (e_l - 1) * R + R - 1)
            p.li(14, lay.address(rank, block, word))
            p.lw(7, 14, 0)
        p.sub(5, 6, 7)
        block, word = lay.word_at(lay.TOKNUMS, e_l)
        p.li(14, lay.address(rank, block, word))
        p.sw(5, 14, 0)
