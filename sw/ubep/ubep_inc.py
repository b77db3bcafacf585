"""UBEP-INC: UBEP's kernels on switches that multicast and reduce.

The machine is :class:`~epfabric.hw.system.System` ``ep_inc`` (every superpod switch an
:class:`~epfabric.hw.inc_switch.IncSwitch`; cores with ``stbm``/``stbr``). The kernels keep
UBEP's (:mod:`.ubep`, :mod:`.combine`) structure and change what crosses the network.

**Dispatch.** UBEP's C-AIVs (TokenCnt, CalCumSum), the T-AIVs' shared count, the remapping
``π`` and the slot walk are unchanged, so every slot ``(t, i)`` of source ``s`` still finds its
receive slot ``j`` on the rank of its expert ``x``, and ``COUNTS``/``OFFS``/``EXPAND`` are
UBEP's. What a slot sends differs:

* every slot: two posted words to ``IDX`` on ``x``'s rank, slot ``(s, e_l, j)``:
  ``epoch << 16 | t`` and ``epoch << 16 | w[t, i]`` (each epoch-tagged, so neither waits
  for the other: no ordering between them is assumed);
* every token, before the walk: T-AIV ``a`` takes tokens ``split(BS, A − C, a)``, builds
  each one's die mask from its ``k`` expert ids (the routing copy in UBuf) and sends each
  token block once, with one ``stbm`` to ``MCBUF[s][t]`` on every die of the mask (the own
  die too when it holds an expert: its die switch loops the copy back), the block's header
  words ``0x0D0D0000 | epoch``, ``s << 16 | t``, the mask and the block index. The switches
  copy it where the paths part: a token crosses each link towards its destinations once,
  however many of its experts lie behind it. [choice] Sending a token from the walk of its
  slot ``i = 0`` instead (measured first) made a receiver wait for the later of a slot's
  ``IDX`` words and its token, sent at two unrelated times of the walk: the 8-die acceptance
  dispatch took 5,645 cycles that way.

The reordering walks the same pairs ``(e_l, s')`` as UBEP's; per receive slot ``j`` it polls
the two ``IDX`` words, then each block's flag in ``MCBUF[s'][t]``, copies the block to ``OUT``
(so ``OUT`` is UBEP's, header word 2 the token's die mask instead of ``x << 8 | i``) and
writes ``IMETA[row] = t | w << 16, mask``, what the combine pre-sums by.

**Combine.** Rank ``d``'s ``OUT`` holds the expert outputs. Phase 1 (MARK ``c_send``): AIV
``a`` takes the sources ``s ≡ a (mod A)``; per source it merges the ``epr`` pairs ``(e_l, s)``
(each pair's rows are in token order, the order of ``j``) over ``t = 0 … BS−1``: the rows of
token ``t`` are weighted (``vmuls`` by their ``IMETA`` weight) and summed (``vadd``) into one
pre-sum, which goes with one ``stbr`` per block to ``YOUT[t]`` on ``s``, contributor mask =
the token's die mask without ``s`` (the switches sum the contributions of one token block
where their paths meet; 16-bit lanes, wrapping, so the order does not matter); ``s``'s own
pre-sum goes to its ``YOWN[t]`` instead (``stbr``'s contract: the destination adds its own
part). Phase 2 (``c_combine``): AIV ``a`` takes tokens ``split(BS, A, a)`` of its own rank,
builds the token's die mask from its routing, polls the reduced block in ``YOUT[t]`` if
another die holds one of its experts and ``YOWN[t]`` if its own does, adds them and writes
``YOUT[t]``. ``y`` equals UBEP's: ``Σ_i w·o`` mod 2^16 in any grouping.

**bf16** (``dtype="bf16"``: bf16 ``OUT`` rows, the weights' fp32 upper halves in ``IMETA``, a
machine with ``fp`` whose switches sum bf16 lanes, ``ep_dtype="bf16"``). Phase 1 weighs and
sums a token's rows of the die in fp32 (``vfcastf``, ``vfmuls``, ``vfadd``, rows in order
``e_l``) and rounds the pre-sum to bf16 once (``vfcastb``) before its ``stbr`` (or ``stb`` to
``YOWN``): one block per token block, as with int16, so the traffic and ``YOUT``'s layout are
int16's. The switches keep an fp32 partial sum per lane, add the pre-sums in the order they
arrive and round to bf16 when a sum leaves a switch (:mod:`~epfabric.hw.lane_arith`). Phase 2
adds the own part to the network's sum in fp32 and rounds once (the correctly rounded bf16
sum of the two); a token with one part is copied. [choice] bf16 lanes, not fp32: an fp32
pre-sum of a 512 B block needs two blocks (124 fp32 lanes past the header), doubling the
combine's reduced traffic and ``YOUT``; the price is a rounding to bf16 per merge.
Arrival order, not a canonical one: nothing is held back in a switch. So ``y`` is not a
fixed order's bits; :mod:`.bf16` derives the error bound its checker uses.

The reductions' layout rule (:class:`~epfabric.hw.inc_reduce.ReduceUnit`): a run's result
blocks for one destination are ``YOUT``'s ``BS·B_tok`` consecutive blocks, so the machine's
``ep_window`` is at least that (:func:`ep_window`).
"""

from ...hw.validate import UserError, check_choice
from ..assembler import Program
from .bf16 import DTYPES
from .cann import divmod_const, split
from ..dataflag import TFF_TAG
from .layout import COMBINE_EVENTS, ELEMS_PER_ROW as ELEMS

__all__ = ["send_slot", "reorder_pair", "combine_program", "ep_window", "ubuf_rows_needed",
           "check_layout", "PHASES", "EVENTS"]

#: the combine's MARK events (:mod:`.combine`'s, every system's), and the phases it MARKs
EVENTS = COMBINE_EVENTS
PHASES = ("c_init", "c_send", "c_combine")


def ep_window(batch, hidden_blocks):
    """The machine's ``ep_window`` for a run: ``YOUT``'s ``BS · B_tok`` result blocks per
    destination, rounded up to a power of two."""
    n = batch * hidden_blocks
    return 1 << max(0, (n - 1).bit_length())


def check_layout(lay):
    """``UserError`` unless ``lay`` can carry UBEP-INC (full 512 B blocks, its regions)."""
    if lay.words != 128:
        raise UserError(f"system='ubep-inc' needs full 512 B blocks (128 words), not {lay.words}")
    if not lay.inc:
        raise UserError("system='ubep-inc' needs a layout with its regions (Layout inc=True)")


def _mask_of(p, rows_route, first, k, epr, experts, out, e, rank_reg, tmp, hi=None):
    """``R[out]`` = the die mask of the ``k`` expert ids from element ``R[first]`` of the UBuf
    routing at ``rows_route``: bit ``e // epr`` of each. With ``hi`` (more than 32 dies) the
    mask is two words, dies 0..31 in ``R[out]`` and 32..63 in ``R[hi]``: a die's bit is
    ``1 << (die & 31)``, put in ``R[out]`` masked by ``(die >> 5) - 1`` and in ``R[hi]`` by
    ``-(die >> 5)`` (no branch). Clobbers ``e``, ``rank_reg``, ``tmp``; ``R[first]`` is
    kept."""
    from .ubep import _elem
    p.mv(out, 0)
    if hi is not None:
        p.mv(hi, 0)
    for i in range(k):
        p.addi(tmp, first, i)
        _elem(p, e, rows_route, tmp, rank_reg)     # e = topk_idx[t, i]
        divmod_const(p, rank_reg, None, e, epr, experts, tmp)
        if hi is None:
            p.li(tmp, 1)
            p.sll(tmp, tmp, rank_reg)
            p.or_(out, out, tmp)
            continue
        p.srli(e, rank_reg, 5)                     # the die's word: 0 or 1
        p.andi(rank_reg, rank_reg, 31)
        p.li(tmp, 1)
        p.sll(tmp, tmp, rank_reg)                  # its bit in that word
        p.addi(rank_reg, e, -1)
        p.and_(rank_reg, tmp, rank_reg)
        p.or_(out, out, rank_reg)
        p.sub(e, 0, e)
        p.and_(tmp, tmp, e)
        p.or_(hi, hi, tmp)


def _without(p, die, lo, hi, out_lo, out_hi, tmp):
    """``R[out_lo]``, ``R[out_hi]`` = the two-word mask ``R[lo]``, ``R[hi]`` without ``die`` (a
    number known when the program is built). ``out_lo`` may be ``hi`` and ``out_hi`` may be
    ``hi``; ``tmp`` is none of them."""
    bit = ~(1 << die % 32) & 0xFFFFFFFF
    if die < 32:
        if out_hi != hi:
            p.mv(out_hi, hi)
        p.li(tmp, bit)
        p.and_(out_lo, lo, tmp)
    else:
        p.li(tmp, bit)
        p.and_(out_hi, hi, tmp)
        p.mv(out_lo, lo)


def send_slot(p, lay, rank, rows, experts):
    """The dispatch T-AIV's work for one slot (module docstring): its two ``IDX`` words. In r4
    the expert ``x``, r6 the receive slot ``j``, r7 the slot ``n = t·k + i``; r1–r6 are
    kept."""
    k, epr, B, S = lay.topk, lay.epr, lay.hidden_blocks, lay.slots
    divmod_const(p, 8, None, 7, k, S, 13)          # r8 = t
    divmod_const(p, 11, 12, 4, epr, experts, 13, shift=lay.rank_shift)  # rank(x) << ., e_l
    p.addi(12, 12, rank * epr)                     # region s·epr + e_l
    p.li(13, lay.cap)
    p.mul(12, 12, 13)
    p.add(12, 12, 6)                               # + j
    p.slli(12, 12, 3)                              # two words a slot
    p.li(13, lay.address(0, lay.IDX))
    p.add(12, 12, 13)
    p.or_(11, 11, 12)                              # the slot's IDX words on rank(x)
    p.ulw(13, 0, rows.consts + 4)                  # epoch << 16
    p.or_(12, 13, 8)
    p.sw(12, 11, 0)                                # epoch << 16 | t (posted)
    from .ubep import _elem
    _elem(p, 12, rows.weights, 7, 14)              # w[t, i]
    p.or_(12, 12, 13)
    p.sw(12, 11, 4)                                # epoch << 16 | w


def multicast_tokens(p, lay, rank, rows, experts, t0, t1):
    """The T-AIV's tokens ``[t0, t1)``, each block once with one ``stbm`` to ``MCBUF[s][t]``
    on the dies of the token's experts (module docstring). Before the slot walk; clobbers
    r1, r2, r7–r15. Past 32 dies header word 3 is the mask's bits 32..63, not ``b``."""
    if t0 >= t1:
        return
    k, epr, B = lay.topk, lay.epr, lay.hidden_blocks
    p.li(1, t0)
    p.li(2, t1)
    p.ulw(13, 0, rows.consts)                      # header word 0: the TFF flag word
    p.li(10, rows.tok)
    p.label("inc_tok")
    p.bgeu(1, 2, "inc_tok_end")
    p.li(14, k)
    p.mul(7, 1, 14)                                # n = t·k
    wide = lay.wide_mask
    _mask_of(p, rows.route, 7, k, epr, experts, out=11, e=12, rank_reg=9, tmp=14,
             hi=8 if wide else None)
    if wide:
        p.mv(7, 8)                                 # the mask's bits 32..63 (n is done with)
    p.li(14, B * 512)
    p.mul(15, 1, 14)
    p.li(8, lay.address(rank, lay.X))
    p.add(15, 15, 8)                               # the token in X
    p.mul(14, 1, 14)
    p.li(8, lay.address(0, lay.mcbuf_block(rank, 0)))
    p.add(14, 14, 8)                               # MCBUF[s][t] (the rank field is ignored)
    p.li(12, rank << 16)
    p.or_(12, 12, 1)                               # header word 1: s << 16 | t
    for b in range(B):
        p.ldb(10, 15, b * 512)
        _header(p, 10, 13, 12, 11, b, hi=7 if wide else None)  # word 2 (and 3): the die mask
        if b:
            p.addi(14, 14, 512)
        p.stbm(10, 14, 11, 7 if wide else 0)       # one send, copied where the paths part
    p.addi(1, 1, 1)
    p.j("inc_tok")
    p.label("inc_tok_end")


def reorder_pair(p, lay, rank, q):
    """Copy pair ``q = e_l·R + src``'s tokens to ``OUT`` (module docstring). In: r2 its
    count, r1 its first ``OUT`` row, r14 that row's address, r10 the UBuf token row, r12 the
    TFF flag word, r13 ``epoch << 16``."""
    R, B = lay.ranks, lay.hidden_blocks
    e_l, src = divmod(q, R)
    step = 4 * lay.imeta_words
    p.li(15, lay.address(rank, lay.IDX) + 4 * lay.idx_word(src, e_l, 0))
    p.slli(9, 1, step.bit_length() - 1)
    p.li(8, lay.address(rank, lay.IMETA))
    p.add(9, 9, 8)                                 # IMETA of the pair's first OUT row
    p.li(1, lay.address(rank, lay.mcbuf_block(src, 0)))
    p.li(8, B * 512)
    p.label(f"inc_copy{q}")
    p.beq(2, 0, f"inc_copied{q}")
    p.poll(3, 15, 13, "ge")                        # slot j's token of this epoch
    p.andi(3, 3, 0xFFFF)
    p.addi(11, 15, 4)
    p.poll(4, 11, 13, "ge")                        # and its weight
    p.slli(4, 4, 16)
    p.or_(4, 4, 3)                                 # IMETA word 0: t | w << 16
    p.mul(5, 3, 8)
    p.add(5, 5, 1)                                 # MCBUF[src][t]
    for b in range(B):
        p.poll(11, 5, 12, "eq")                    # Data-as-Flag: the copy has arrived
        p.ldb(10, 5, 0)
        if b == 0:
            p.ulw(6, 10, 8)                        # the token's die mask
            if lay.wide_mask:
                p.ulw(11, 10, 12)                  # its bits 32..63 (header word 3)
                p.sw(11, 9, 8)                     # IMETA word 2
        p.stb(10, 14, 0)
        if b + 1 < B:
            p.addi(5, 5, 512)
        p.addi(14, 14, 512)
    p.sw(4, 9, 0)
    p.sw(6, 9, 4)                                  # IMETA word 1: the mask
    p.addi(9, 9, step)
    p.addi(15, 15, 8)
    p.addi(2, 2, -1)
    p.j(f"inc_copy{q}")
    p.label(f"inc_copied{q}")


class _Rows:
    """The combine's UBuf: routing, ``B_tok`` accumulators, a temporary, a scratch row (word 0
    the TFF flag word, then each local expert's cursor and end). With ``dtype="bf16"`` the
    accumulators and the temporary are fp32 vectors of 256 elements (two rows each) and a row
    ``half`` holds a bf16 row: an ``OUT`` row, a pre-sum, a received sum."""

    def __init__(self, lay, dtype="int16"):
        check_choice("dtype", dtype, DTYPES)
        self.route = 0
        n, B = lay.route_blocks, lay.hidden_blocks
        wide = 2 if dtype == "bf16" else 1
        self.accs = [(n + wide * b) * 512 for b in range(B)]
        self.tmp = (n + wide * B) * 512
        self.half = self.tmp + wide * 512 if dtype == "bf16" else None
        self.scratch = self.tmp + wide * 512 + (512 if dtype == "bf16" else 0)
        self.rows = self.scratch // 512 + 1 + (2 * lay.epr + 1) // 128

    def cur(self, e_l):
        return self.scratch + 4 * (1 + 2 * e_l)

    def end(self, e_l):
        return self.scratch + 4 * (2 + 2 * e_l)


def ubuf_rows_needed(lay, dtype="int16"):
    return _Rows(lay, dtype).rows


def _header(p, row, flag, word1, mask, b, hi=None):
    """Header words 0..3 of UBuf row ``R[row]``: flag, ``word1``, mask, ``b`` (with ``hi``,
    the mask's bits 32..63 ``R[hi]`` instead of ``b``). Clobbers r8 when ``b`` > 0."""
    p.usw(flag, row, 0)
    p.usw(word1, row, 4)
    p.usw(mask, row, 8)
    if hi is not None:
        p.usw(hi, row, 12)
    elif b:
        p.li(8, b)
        p.usw(8, row, 12)
    else:
        p.usw(0, row, 12)


def combine_program(lay, *, rank, core, aivs, experts, broken=None, dtype="int16"):
    """The UBEP-INC combine of AIV ``core`` on ``rank`` (module docstring).

    ``broken="no_flag_poll"`` reads the reduced blocks without polling: the checker's
    negative control. ``dtype="bf16"`` (a machine with ``fp`` and bf16 in-network sums,
    ``ep_dtype="bf16"``): the module docstring's bf16 combine.
    """
    check_layout(lay)
    rows = _Rows(lay, dtype)
    p = Program()
    for r in range(lay.route_blocks):
        p.li(12, rows.route + r * 512)
        p.li(14, lay.address(rank, lay.ROUTE + r))
        p.ldb(12, 14, 0)
    p.mark(EVENTS["c_init"])
    p.li(12, TFF_TAG)
    p.li(13, lay.address(rank, lay.CTRL, 1))
    p.lw(13, 13, 0)
    p.or_(12, 12, 13)
    p.usw(12, 0, rows.scratch)                     # the TFF flag word of this epoch
    for s in range(core, lay.ranks, aivs):         # ---- phase 1: pre-sum, per source ----
        _pre_sums(p, lay, rank, s, rows)
    p.mark(EVENTS["c_send"])
    _root_sums(p, lay, rank, split(lay.batch, aivs, core), rows, experts,  # ---- phase 2 ----
               broken)
    p.fence()
    p.mark(EVENTS["c_combine"])
    p.halt()
    return p


def _pre_sums(p, lay, rank, s, rows):
    """Phase 1 for source ``s``: merge its pairs ``(e_l, s)`` over its tokens, weigh and sum
    each token's rows into one pre-sum and send it (module docstring)."""
    R, B, epr = lay.ranks, lay.hidden_blocks, lay.epr
    wide, fp = lay.wide_mask, rows.half is not None
    for e_l in range(epr):
        q = e_l * R + s
        ob, ow = lay.word_at(lay.OFFS, q)
        p.li(14, lay.address(rank, ob, ow))
        p.lw(5, 14, 0)
        p.andi(5, 5, 0xFFFF)                       # the pair's first OUT row
        kb, kw = lay.word_at(lay.COUNTS, q)
        p.li(14, lay.address(rank, kb, kw))
        p.lw(6, 14, 0)
        p.add(6, 6, 5)
        p.usw(5, 0, rows.cur(e_l))
        p.usw(6, 0, rows.end(e_l))
    p.li(1, 0)
    p.li(2, lay.batch)
    p.label(f"t{s}")
    p.mv(3, 0)                                     # rows of token t summed so far
    for e_l in range(epr):
        tag = f"{s}_{e_l}"
        p.ulw(5, 0, rows.cur(e_l))
        p.ulw(6, 0, rows.end(e_l))
        p.bgeu(5, 6, f"skip{tag}")
        p.slli(7, 5, (4 * lay.imeta_words).bit_length() - 1)
        p.li(8, lay.address(rank, lay.IMETA))
        p.add(7, 7, 8)
        p.lw(9, 7, 0)                              # t | w << 16
        p.andi(8, 9, 0xFFFF)
        p.bne(8, 1, f"skip{tag}")                  # the pair's next row is a later token
        p.srli(9, 9, 16)                           # its weight
        if fp:
            p.slli(9, 9, 16)                       # bf16: the upper half of its fp32 bits
        p.lw(4, 7, 4)                              # the token's die mask
        if wide:
            p.lw(15, 7, 8)                         # its bits 32..63
        p.li(8, B * 512)
        p.mul(7, 5, 8)
        p.li(8, lay.address(rank, lay.OUT))
        p.add(7, 7, 8)
        p.li(11, ELEMS)
        p.bne(3, 0, f"add{tag}")
        _weigh(p, rows, first=True)
        p.j(f"took{tag}")
        p.label(f"add{tag}")
        _weigh(p, rows, first=False)
        p.label(f"took{tag}")
        p.addi(3, 3, 1)
        p.addi(5, 5, 1)
        p.usw(5, 0, rows.cur(e_l))
        p.label(f"skip{tag}")
    p.beq(3, 0, f"next{s}")
    p.ulw(12, 0, rows.scratch)
    p.li(13, s << 16)
    p.or_(13, 13, 1)                               # header word 1: s << 16 | t
    p.li(8, B * 512)
    p.mul(14, 1, 8)
    p.li(8, lay.address(rank, lay.YOWN) if s == rank else lay.address(s, lay.YOUT))
    p.add(14, 14, 8)
    if s != rank and wide:                         # the contributors: the mask without s
        _without(p, s, lo=4, hi=15, out_lo=15, out_hi=5, tmp=6)
    elif s != rank:
        p.li(15, ~(1 << s) & 0xFFFFFFFF)
        p.and_(15, 4, 15)                          # the contributors: the mask without s
    for b in range(B):
        p.li(10, rows.accs[b])
        if fp:
            p.mv(9, 10)
            p.li(10, rows.half)
            p.vfcastb(10, 9, 11)                   # the pre-sum rounded to bf16 once
        _header(p, 10, 12, 13, 4, b)
        if s == rank:
            p.stb(10, 14, b * 512)                 # the own part: the root adds it
        else:
            if b:
                p.addi(14, 14, 512)
            p.stbr(10, 14, 15, 5 if wide else 0)   # one contribution, summed in the network
    p.label(f"next{s}")
    p.addi(1, 1, 1)
    p.bltu(1, 2, f"t{s}")


def _weigh(p, rows, first):
    """Every block ``b`` of the ``OUT`` row at r7 times the weight r9, into accumulator ``b``
    (``first``) or added to it; r11 holds the elements a row. bf16: the row widened to fp32
    (``vfcastf``), ``vfmuls``, ``vfadd``. Clobbers r8, r10."""
    for b, acc in enumerate(rows.accs):
        if rows.half is None:
            p.li(10, acc if first else rows.tmp)
            p.ldb(10, 7, b * 512)
            p.vmuls(10, 10, 11, 9)
            if not first:
                p.li(8, acc)
                p.vadd(8, 8, 11, 10)
            continue
        p.li(10, rows.half)
        p.ldb(10, 7, b * 512)
        p.li(8, acc if first else rows.tmp)
        p.vfcastf(8, 10, 11)
        p.vfmuls(8, 8, 11, 9)                      # exact: 8-bit by 8-bit significands
        if not first:
            p.li(10, acc)
            p.vfadd(10, 10, 11, 8)                 # the die's rows in order e_l, in fp32


def _root_sums(p, lay, rank, tokens, rows, experts, broken):
    """Phase 2 for tokens ``[t0, t1)`` of rank ``rank``: the network's sum in ``YOUT[t]``
    and the own part in ``YOWN[t]`` added into ``YOUT[t]`` (module docstring)."""
    t0, t1 = tokens
    if t0 >= t1:
        return
    B, epr, k = lay.hidden_blocks, lay.epr, lay.topk
    wide, fp = lay.wide_mask, rows.half is not None
    p.ulw(12, 0, rows.scratch)
    p.li(1, t0)
    p.li(2, t1)
    p.label("root")
    p.bgeu(1, 2, "root_end")
    p.li(13, k)
    p.mul(3, 1, 13)                                # n = t·k
    _mask_of(p, rows.route, 3, k, epr, experts, out=4, e=5, rank_reg=6, tmp=14,
             hi=7 if wide else None)
    if wide:
        p.srli(6, 4 if rank < 32 else 7, rank % 32)
        p.andi(6, 6, 1)                            # the own die: YOWN holds its part
        _without(p, rank, lo=4, hi=7, out_lo=5, out_hi=7, tmp=14)
        p.or_(5, 5, 7)                             # the other dies: a reduced block comes
    else:
        p.li(14, ~(1 << rank) & 0xFFFFFFFF)
        p.and_(5, 4, 14)                           # the other dies: a reduced block comes
        p.srli(6, 4, rank)
        p.andi(6, 6, 1)                            # the own die: YOWN holds its part
    p.li(8, B * 512)
    p.mul(7, 1, 8)
    p.mul(9, 1, 8)
    p.li(8, lay.address(rank, lay.YOUT))
    p.add(7, 7, 8)                                 # YOUT[t]
    p.li(8, lay.address(rank, lay.YOWN))
    p.add(9, 9, 8)                                 # YOWN[t]
    p.li(11, ELEMS)
    p.li(13, rank << 16)
    p.or_(13, 13, 1)
    p.beq(5, 0, "own_only")
    if broken != "no_flag_poll":
        for b in range(B):
            p.addi(15, 7, b * 512)
            p.poll(10, 15, 12, "eq")               # the network's sum has arrived
    p.beq(6, 0, "root_next")
    for b in range(B):
        if fp:
            _add_own_fp(p, rows, b)
        else:
            p.li(10, rows.accs[b])
            p.ldb(10, 7, b * 512)
            p.addi(15, 9, b * 512)
            p.poll(8, 15, 12, "eq")
            p.li(15, rows.tmp)
            p.ldb(15, 9, b * 512)
            p.vadd(10, 10, 11, 15)                 # + the own part
        _header(p, 10, 12, 13, 4, b)
        p.stb(10, 7, b * 512)
    p.j("root_next")
    p.label("own_only")
    for b in range(B):
        p.addi(15, 9, b * 512)
        p.poll(8, 15, 12, "eq")
        p.li(10, rows.accs[0])
        p.ldb(10, 9, b * 512)
        p.stb(10, 7, b * 512)
    p.label("root_next")
    p.addi(1, 1, 1)
    p.j("root")
    p.label("root_end")


def _add_own_fp(p, rows, b):
    """bf16, block ``b``: UBuf row ``half`` (r10) = bf16(network's sum + own part), both bf16
    widened and added in fp32, rounded once (the correctly rounded bf16 sum of the two). In:
    r7 ``YOUT[t]``, r9 ``YOWN[t]``, r11 the elements, r12 the flag word. Clobbers r8, r14,
    r15."""
    p.li(10, rows.half)
    p.ldb(10, 7, b * 512)                          # the network's sum, bf16
    p.li(14, rows.accs[0])
    p.vfcastf(14, 10, 11)
    p.addi(15, 9, b * 512)
    p.poll(8, 15, 12, "eq")
    p.ldb(10, 9, b * 512)                          # the own part, bf16
    p.li(15, rows.tmp)
    p.vfcastf(15, 10, 11)
    p.vfadd(14, 14, 11, 15)
    p.vfcastb(10, 14, 11)                          # y: rounded to bf16 once more
