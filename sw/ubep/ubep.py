"""UBEP's dispatch: the decomposed kernel (docs/spec/kernels.md §1.5–1.7; UBEP §3.2–3.4, Alg. 1).

The A AIVs of a die split into ``n_token = A − C`` token-sending AIVs
(T-AIVs) and a CalCumSum group of ``C`` (C-AIVs); no SyncAll, no fence, no
status flags: every dependency is point to point.

**T-AIV a** (MARKs ``init``, ``send``, ``reorder``):

1. Init — load the routing; count its share ``[a·E/n_token, (a+1)·E/n_token)``
   of the experts with ``vcount eq`` (three per instruction) and publish the
   counts to the die's other T-AIVs as Token-Flag-Fused blocks (``TCNT``:
   word 0 the flag, then the counts; one local atomic ``stb`` each), take
   theirs as their flags show this epoch (``poll eq``, ``ldb``), and build in
   its UBuf the inclusive prefix sums
   ``Cum'`` of the counts in *remapped* order ``π`` and the table ``π``
   itself. ``π`` is the logical transposition of UBEP §3.3: expert ids
   written row-major into an ``n_token × ⌈E/n_token⌉`` matrix, read
   column-major, so consecutive positions stride across ranks
   and boards and every contiguous slice mixes one-hop and two-hop
   destinations (topology-aware mapping). ``vlut`` is not needed: the
   counts go to their remapped positions at generation time (the fallback
   of docs/spec/kernels.md §1.6). ``mapping="identity"`` (:data:`MAPPINGS`) makes
   ``π`` the identity — UBEP §5.4's "w/o mapping" ablation: the slices still
   hold ``⌈BS·k/n_token⌉`` slots each (balanced counts) but cut the slot
   sequence in expert order, so a slice's destinations are a few
   consecutive experts, i.e. one or two ranks of one board (topology-blind).

   Sharing the count [do better than docs/spec/kernels.md]: counting all ``E`` experts
   on every T-AIV costs ``E/3`` passes over the ``BS·k`` routing elements
   (at E = 256, BS·k = 1024: 86 × 67 = ~5.8 K cycles, measured 7.8 K for the
   whole init on 16 dies × 8 AIVs), while the paper's mapper takes 4–5
   ``VectorCount`` steps (its remapped ids come from a vector table lookup
   this vector unit does not have). Split over the T-AIVs it is ``E/(3·n_token)``
   passes plus a die-local exchange — point to point, no barrier.
2. Token-Sending over slice ``a`` of the remapped slot sequence, cut into
   ``n_token`` slices of ``⌈BS·k / n_token⌉`` slots. The slice's first
   expert is ``#{p : Cum'[p] ≤ T_a}`` — one ``vcount le`` — and its offset
   ``T_a − Cum'[p − 1]`` (the mapper). Walking the slice: per expert ``x``,
   one ``vcomp eq x`` over the routing (a compress, Ascend's GatherMask)
   writes x's slot indices, token-major, to a UBuf row and returns their
   count; the ``off``-th of them (one ``ulw``) is the slot whose token goes
   to slot ``j = off`` of ``RECV[s][e_l]`` on rank ``x's`` — ``off`` counts
   up within the expert (from the mapper's offset for the slice's first
   expert, from 0 for the next), so ``j`` needs no prefix compare (and is
   kept in the local ``EXPAND`` word of the slot for the combine).

   docs/spec/kernels.md §1.6's walk [choice] — ``vfind eq`` for the next slot of ``x``
   over all ``BS·k`` slots of a working copy of the routing, then clear it —
   costs ``⌈BS·k/lanes⌉ + 3`` cycles plus a ten-instruction clear *per slot*.
   We do better: ``vcomp`` costs that once *per expert* (plus one cycle per
   extra match in a beat), a slot then costs one ``ulw``, and the working
   copy is gone. The slots and their order (token-major within an expert,
   the ``j`` order) are the same, so the output is too.
   Every block is Token-Flag Fused: words 0–3 of the flag field carry
   ``0x0D0D0000 | epoch``, ``s << 16 | t``, ``x << 8 | i`` and the block
   index, then one atomic 512 B ``stb`` (posted; never fenced).
3. Reordering — its share of the pairs ``(e_l, s')`` (``(e_l·R + s') mod A
   == index``): poll the pair's count (``CNT``, from the source's C-AIVs)
   and offset (``OFFS``, from this die's C-AIVs), then per token block poll
   its flag word for this epoch, ``ldb`` and ``stb`` it to ``OUT``.

**C-AIV c** (MARKs ``init``, ``count``, ``cumsum``, ``reorder``):

1. TokenCnt — for its experts ``[c·E/C, (c+1)·E/C)``: ``vcount eq`` and one
   posted word ``epoch << 16 | count`` to ``CNT[e_l·R + s]`` on the expert's
   rank (counts depend only on routing: no barrier).
2. CalCumSum — for its local experts: poll ``CNT`` of every entry before
   them (the prefix), then for ``s' = 0 … R−1`` poll, publish
   ``OFFS[e_l·R + s'] = epoch << 16 | prefix`` and add — pipelined.
3. Reordering like a T-AIV, with index ``n_token + c``.

Counts, offsets and flags are epoch-tagged (the run's epoch is the host's
``CTRL`` word 1), so runs follow each other with no reset. Programs depend
on the configuration only.
"""

from ...hw.validate import UserError, check_choice, check_int
from ..assembler import Program
from . import ubep_inc
from ..dataflag import SENTINEL_WORD, TFF_TAG
from ..presets import COPIES, CUMSUM_SCANS
from .cann import copy_block, count_experts, divmod_const, launch_delay, split

__all__ = ["dispatch_program", "transposition", "remapping", "default_cumsum_aivs", "cumsum_rule",
           "count_and_send_slopes", "PHASES_T",
           "PHASES_C", "TFF_TAG", "EVENTS", "SYNCS", "SENTINEL_WORD", "MAPPINGS"]

#: the remapping ``π`` of the experts before the slot sequence is cut (module docstring, step 1)
MAPPINGS = ("transpose", "identity")
#: how a receiver learns a token block has arrived (docs/spec/kernels.md §1.7): Token-Flag
#: Fusion (the flag in every block), Sentinel Polling (raw blocks into sentinel-armed slots,
#: re-armed after use) or stop-and-wait (raw blocks, ``fence``, then a flag word per (source,
#: T-AIV))
SYNCS = ("tff", "sp", "sw")

#: MARK events (shared ids: init 10, send 11, reorder 15; count 16, cumsum 14)
EVENTS = {"init": 10, "send": 11, "count": 16, "cumsum": 14, "reorder": 15}
PHASES_T = ("init", "send", "reorder")
PHASES_C = ("init", "count", "cumsum", "reorder")


def transposition(experts, n_token):
    """``π``: remapped position → expert id.

    The ids fill an ``n_token × ⌈E/n_token⌉`` matrix row by row and are read column by column
    (padding cells skipped).
    """
    check_int("experts", experts, 1)
    check_int("n_token", n_token, 1)
    cols = -(-experts // n_token)
    order = []
    for col in range(cols):
        for row in range(n_token):
            e = row * cols + col
            if e < experts:               # padding cells are skipped
                order.append(e)
    return order


def remapping(experts, n_token, mapping="transpose"):
    """``π`` of ``mapping`` (:data:`MAPPINGS`): :func:`transposition` or the identity."""
    check_choice("mapping", mapping, MAPPINGS)
    if mapping == "identity":
        check_int("experts", experts, 1)
        check_int("n_token", n_token, 1)
        return list(range(experts))
    return transposition(experts, n_token)


def default_cumsum_aivs(aivs, experts, topk, batch):
    """UBEP App. A's fit ``C ≈ A·E / (3·k·BS)``, clamped to ``[1, max(1, A // 2)]``.

    Specification: docs/spec/kernels.md §1.5. A preset with a measured ``cumsum_ratio``
    chooses by :func:`cumsum_rule` instead.
    """
    c = round(aivs * experts / (3 * topk * batch))
    return max(1, min(max(1, aivs // 2), c))


def cumsum_rule(aivs, experts, topk, batch, ratio):
    """UBEP App. A's Eq. 8 with the model's own slopes: ``C = round((β/α)·A·E/(k·BS))``,
    clamped to ``[1, A − 1]`` (at least one CalCumSum AIV and one sender).

    App. A models the two groups as ``T_count = G(E/n_count) + b`` and
    ``T_token = F(k·BS/(A − n_count)) + b``; with ``F(x) = αx`` and ``G(x) = βx``, balancing
    them gives Eq. 8, ``n_count ≈ (β/α)·A·E/(k·BS)``. ``ratio`` is ``β/α`` measured from the
    model (:func:`count_and_send_slopes`), never read from Fig. 14, as App. C.3 chose C from
    its own measurements.
    """
    check_int("aivs", aivs, 2)
    if not ratio > 0:
        raise UserError(f"cumsum_ratio must be > 0, not {ratio!r}")
    c = round(ratio * aivs * experts / (topk * batch))
    return max(1, min(aivs - 1, c))


def count_and_send_slopes(phases, aivs, cumsum_aivs, experts, slots):
    """``(α, β)`` of Eq. 8 from one UBEP dispatch's per-AIV phase MARKs (``{"rank.core":
    {phase: cycle}}``): α, the longest T-AIV's Token-Sending time (``init`` → ``send``) over
    the slots its slice holds (``⌈BS·k / n_token⌉``); β, the longest C-AIV's TokenCnt and
    CalCumSum time (``init`` → ``cumsum``) over the experts it counts (``⌈E / C⌉``); in
    cycles per slot and per expert."""
    n_token = aivs - cumsum_aivs
    send = [v["send"] - v["init"] for key, v in phases.items()
            if int(key.split(".")[1]) < n_token]
    count = [v["cumsum"] - v["init"] for key, v in phases.items()
             if int(key.split(".")[1]) >= n_token]
    if not send or not count:
        raise UserError("the run's phases hold no T-AIV or no C-AIV: cannot measure Eq. 8's slopes")
    return max(send) / -(-slots // n_token), max(count) / -(-experts // cumsum_aivs)


def _elem(p, rd, base, idx, tmp):
    """``rd =`` 16-bit element ``idx`` (a register) of the UBuf vector at byte address ``base``."""
    p.add(tmp, idx, idx)
    p.andi(tmp, tmp, 0x3FFFC)
    p.addi(tmp, tmp, base)
    p.ulw(rd, tmp, 0)
    p.andi(tmp, idx, 1)
    p.slli(tmp, tmp, 4)
    p.srl(rd, rd, tmp)
    p.andi(rd, rd, 0xFFFF)


def _epoch(p, rank, lay, rd, shift):
    p.li(rd, lay.address(rank, lay.CTRL, 1))
    p.lw(rd, rd, 0)
    if shift:
        p.slli(rd, rd, shift)


def count_chunks(experts, n_token, words):
    """``[(e0, e1, first block)]``: T-AIV ``a`` counts experts ``[e0, e1)`` and publishes them
    in ``TCNT`` blocks ``first ...``, ``words - 1`` counts a block after the flag word."""
    out, block = [], 0
    for a in range(n_token):
        e0, e1 = split(experts, n_token, a)
        out.append((e0, e1, block))
        block += -(-(e1 - e0) // (words - 1))
    return out


class _Rows:
    """UBuf byte addresses of the regions a UBEP AIV keeps (one 512 B row = 256 elements)."""

    def __init__(self, lay, experts, n_token):
        self.route = 0                             # vcomp reads it through r0
        after = lay.route_blocks
        self.cum = after * 512
        self.pi = (after + 1) * 512
        self.consts = (after + 2) * 512           # word 0: the TFF flag word of this epoch
        # the T-AIVs' expert counts, as their TCNT blocks (flag word, then counts)
        self.chunks = count_chunks(experts, n_token, lay.words)
        self.words = lay.words
        self.tcnt = (after + 3) * 512
        self.tcnt_rows = count_blocks(experts, n_token, lay.words)
        # vcomp's output: one expert's slot indices, one word each; at most BS
        # (a token's k experts are distinct, Workload checks it)
        self.slots = (after + 3 + self.tcnt_rows) * 512
        self.slot_rows = -(-lay.batch // 128)
        self.tok = (after + 3 + self.tcnt_rows + self.slot_rows) * 512
        self.rows = after + 4 + self.tcnt_rows + self.slot_rows
        # a C-AIV's counts of its chunk (cumsum_scan="split", at most ceil(R·epr / 2) with
        # C >= 2): the rows a T-AIV's TCNT blocks and slot list take, and rows past them
        # when those are too few
        self.scan = self.tcnt
        need = -(-(-(-lay.entries // 2)) // lay.words)
        if need > self.tcnt_rows + self.slot_rows:
            self.scan = self.rows * 512
            self.rows += need
        self.scan_words = max(need, self.tcnt_rows + self.slot_rows) * lay.words
        if lay.inc:                                # UBEP-INC: the weights go with each slot
            self.weights = self.rows * 512
            self.rows += lay.route_blocks

    def count_at(self, e):
        """UBuf byte address of expert ``e``'s count (in its counting T-AIV's block)."""
        for e0, e1, block in self.chunks:
            if e0 <= e < e1:
                b, w = divmod(e - e0, self.words - 1)
                return self.tcnt + (block + b) * 512 + 4 * (1 + w)
        raise AssertionError(f"expert {e} is in no chunk")


def count_blocks(experts, n_token, words):
    """``TCNT`` blocks (and UBuf rows) the T-AIVs' counts take."""
    e0, e1, block = count_chunks(experts, n_token, words)[-1]
    return block + -(-(e1 - e0) // (words - 1))


def ubuf_rows_needed(lay, experts, aivs):
    """UBuf rows of a UBEP AIV, the most over every group size ``C`` of ``aivs`` AIVs."""
    return max(_Rows(lay, experts, n).rows for n in range(1, max(2, aivs)))


def _reorder(p, lay, rank, aivs, index, rows, sync="tff", n_tok=None, inc=False, mte=False):
    """Poll and copy this AIV's share of the (e_l, s') pairs into OUT.

    How a block's arrival is seen depends on ``sync`` (:data:`SYNCS`): TFF
    polls each block's flag word; SP polls word 0 until it is no longer the
    sentinel and re-arms the slot after the copy (one local atomic store of a
    row whose words 0..7 are the sentinel); SW polls the ``n_tok`` flags of
    the pair's source rank once, then copies without polling. With ``mte`` (the
    preset's ``copies="mte"``) TFF copies each token as one copy (its first block pays the
    start, ``ldbc`` the rest) and checks every block's flag in the UBuf copy; a block not yet
    there is polled (a read that pays a start) and copied again.
    """
    R, B = lay.ranks, lay.hidden_blocks
    _epoch(p, rank, lay, 13, 16)                  # r13 = epoch << 16 (CNT/OFFS tags)
    if sync == "tff":
        p.li(12, TFF_TAG)
        _epoch(p, rank, lay, 11, 0)
        p.or_(12, 12, 11)                         # r12 = the TFF flag word of this epoch
    elif sync == "sp":
        p.li(12, SENTINEL_WORD)                   # r12 = the sentinel; rows.slots: its row
        for w in range(8):
            p.usw(12, 0, rows.slots + 4 * w)
        p.li(9, rows.slots)
    else:
        _epoch(p, rank, lay, 12, 0)               # r12 = the epoch (SW flag words)
    p.li(10, rows.tok)
    for q in range(lay.entries):
        if q % aivs != index:
            continue
        e_l, src = divmod(q, R)
        cb, cw = lay.word_at(lay.CNT, q)
        p.li(14, lay.address(rank, cb, cw))
        p.poll(2, 14, 13, "ge")                    # the count of (e_l, src) is in
        p.andi(2, 2, 0xFFFF)
        ob, ow = lay.word_at(lay.OFFS, q)
        p.li(14, lay.address(rank, ob, ow))
        p.poll(1, 14, 13, "ge")                    # and its offset in OUT
        p.andi(1, 1, 0xFFFF)
        kb, kw = lay.word_at(lay.COUNTS, q)
        p.li(14, lay.address(rank, kb, kw))
        p.sw(2, 14, 0)
        p.li(15, lay.address(rank, lay.recv_block(src, e_l, 0)))
        p.slli(14, 1, 9)
        if B > 1:
            p.li(11, B)
            p.mul(14, 14, 11)
        p.li(11, lay.address(rank, lay.OUT))
        p.add(14, 14, 11)
        if inc:                                    # UBEP-INC: IDX, then the multicast copy
            ubep_inc.reorder_pair(p, lay, rank, q)
            continue
        if sync == "sw":                           # every T-AIV of src has fenced its stores
            for a in range(n_tok):
                fb, fw = lay.word_at(lay.SWFLAG, src * aivs + a)
                p.li(11, lay.address(rank, fb, fw))
                p.poll(11, 11, 12, "ge")
        p.label(f"copy{q}")
        p.beq(2, 0, f"copied{q}")
        for _b in range(B):
            if mte and sync == "tff":              # the token is one copy; flags in the UBuf
                copy_block(p, _b)(10, 15, 0)
                p.ulw(11, 10, 0)
                p.beq(11, 12, f"got{q}_{_b}")
                p.poll(11, 15, 12, "eq")           # not there yet: wait for it,
                p.ldbc(10, 15, 0)                  # then the block whose flag that read
                p.label(f"got{q}_{_b}")
                p.stb(10, 14, 0)
                p.addi(15, 15, 512)
                p.addi(14, 14, 512)
                continue
            if sync == "tff":
                p.poll(11, 15, 12, "eq")           # Data-as-Flag: this block has arrived
            elif sync == "sp":
                p.poll(11, 15, 12, "ne")           # the sentinel is overwritten
            p.ldb(10, 15, 0)
            p.stb(10, 14, 0)
            if sync == "sp":
                p.stb(9, 15, 0)                    # re-arm the slot (local, atomic)
            p.addi(15, 15, 512)
            p.addi(14, 14, 512)
        p.addi(2, 2, -1)
        p.j(f"copy{q}")
        p.label(f"copied{q}")
    p.fence()
    p.mark(EVENTS["reorder"])


def _split_scan(p, lay, rank, C, c, rows):
    """CalCumSum of C-AIV ``c`` of ``C`` with ``cumsum_scan="split"`` (UBEP App. C.3: more
    CalCumSum AIVs split the verification; Eq. 7's ``G(N_exp / n_count)``).

    The ``R·epr`` entries ``q = e_l·R + s`` are cut into ``C`` contiguous chunks
    (:func:`~epfabric.sw.ubep.cann.split`); C-AIV ``c`` polls the counts of its chunk ``[q0,
    q1)`` (and ``CNT[q0 − 1]``), keeping them in its UBuf (the rows a T-AIV's ``TCNT`` and
    slot list take), then waits for the offset the previous C-AIV publishes first,
    ``OFFS[q0 − 1]``; its prefix is that plus ``CNT[q0 − 1]``. It publishes its last entry's
    offset first, so the next C-AIV can go on, then the others in order. A C-AIV so polls
    ``≈ R·epr / C + 1`` counts and, along the chain of prefixes, one offset: the ``R·epr``
    polls of ``"redundant"`` (each C-AIV polls every count before its experts') fall to
    ``R·epr / C + C`` on the critical path. ``C = 1`` never comes here (one chunk: the
    pipelined scan of ``"redundant"`` is the same work).
    """
    q0, q1 = split(lay.entries, C, c)
    if q0 == q1:
        return
    if q1 - q0 > rows.scan_words:
        raise UserError(f"cumsum_scan='split' keeps {q1 - q0} counts in the UBuf, more than the "
                        f"{rows.scan_words} words a C-AIV has there")
    def poll_word(region, q, rd):
        b, w = lay.word_at(region, q)
        p.li(14, lay.address(rank, b, w))
        p.poll(rd, 14, 13, "ge")                   # of this epoch (r13 = epoch << 16)
        p.andi(rd, rd, 0xFFFF)

    if c:
        poll_word(lay.CNT, q0 - 1, 4)              # r4: the previous chunk's last count
    p.mv(1, 0)                                     # r1: the chunk's counts but its last
    for i, q in enumerate(range(q0, q1)):
        poll_word(lay.CNT, q, 5)
        p.usw(5, 0, rows.scan + 4 * i)
        if q < q1 - 1:
            p.add(1, 1, 5)
    p.mv(3, 0)                                     # r3: the chunk's prefix
    if c:
        poll_word(lay.OFFS, q0 - 1, 3)             # published first by C-AIV c - 1
        p.add(3, 3, 4)
    def publish(q, reg):
        b, w = lay.word_at(lay.OFFS, q)
        p.or_(6, reg, 13)
        p.li(14, lay.address(rank, b, w))
        p.sw(6, 14, 0)
    p.add(1, 1, 3)
    publish(q1 - 1, 1)                             # the last first: the next chunk's prefix
    p.mv(1, 3)
    for i, q in enumerate(range(q0, q1 - 1)):
        publish(q, 1)
        p.ulw(5, 0, rows.scan + 4 * i)
        p.add(1, 1, 5)


def dispatch_program(lay, *, rank, core, aivs, experts, cumsum_aivs, mapping="transpose",
                     sync="tff", launch=False, inc=False, copies="block",
                     cumsum_scan="redundant"):
    """The UBEP program of AIV ``core`` on ``rank`` (module docstring).

    ``mapping`` picks the remapping ``π`` (:data:`MAPPINGS`); ``sync`` how a
    receiver sees a block arrive (:data:`SYNCS`): ``"tff"`` (UBEP's),
    ``"sp"`` or ``"sw"`` (raw blocks; SW needs ``lay.flag_words >= R·A``); ``copies``
    how it reads (:data:`~epfabric.sw.presets.COPIES`; ``"mte"``: :func:`_reorder`'s token
    copies, and the other T-AIVs' ``TCNT`` blocks are copied at once and checked in the UBuf);
    ``cumsum_scan``
    how the C-AIVs share CalCumSum (:data:`~epfabric.sw.presets.CUMSUM_SCANS`;
    ``"split"``: :func:`_split_scan`).

    Raises
    ------
    ValueError
        On a group size outside ``[1, aivs - 1]`` or an unknown ``mapping``.

    Any ``epr`` and ``topk``: the expert → rank and slot → token splits are
    shifts for powers of two and multiplies by a reciprocal otherwise
    (:func:`.cann.divmod_const`; 4 cycles more a slot for each).
    """
    check_int("aivs", aivs, 2)
    check_choice("mapping", mapping, MAPPINGS)
    check_choice("sync", sync, SYNCS)
    check_choice("copies", copies, COPIES)
    check_choice("cumsum_scan", cumsum_scan, CUMSUM_SCANS)
    mte = copies == "mte"
    if inc:
        ubep_inc.check_layout(lay)
        if sync != "tff":
            raise UserError(f"system='ubep-inc' flags its blocks in them (sync='tff'), not "
                            f"sync={sync!r}")
    if sync == "sw":
        check_int("flag_words", lay.flag_words, lay.ranks * aivs)
    C = check_int("cumsum_aivs", cumsum_aivs, 1, aivs - 1)
    epr, k = lay.epr, lay.topk
    n_tok = aivs - C
    R, B = lay.ranks, lay.hidden_blocks
    S = lay.batch * k
    rows = _Rows(lay, experts, n_tok)
    p = Program()
    if launch:
        launch_delay(p, rank, lay)        # the die's launch skew
    for r in range(lay.route_blocks):              # the routing, into rows 0..: one copy
        p.li(12, rows.route + r * 512)
        p.li(14, lay.address(rank, lay.ROUTE + r))
        copy_block(p, r)(12, 14, 0)

    if core >= n_tok:                              # ---------------- a C-AIV ------------------
        c = core - n_tok
        p.mark(EVENTS["init"])
        _epoch(p, rank, lay, 13, 16)
        e0, e1 = split(experts, C, c)
        def to_cnt(e, reg):                        # posted, no fence: point to point
            d, e_l = divmod(e, epr)
            cb, cw = lay.word_at(lay.CNT, e_l * R + rank)
            p.or_(5, reg, 13)
            p.li(14, lay.address(d, cb, cw))
            p.sw(5, 14, 0)
        count_experts(p, e0, e1, S, to_cnt)
        p.mark(EVENTS["count"])
        if cumsum_scan == "split" and C > 1:
            _split_scan(p, lay, rank, C, c, rows)
            p.mark(EVENTS["cumsum"])
            _reorder(p, lay, rank, aivs, core, rows, sync, n_tok, inc, mte)
            p.halt()
            return p
        l0, l1 = split(epr, C, c)
        p.mv(1, 0)                                 # the prefix: tokens before (l0, 0)
        for q in range(l0 * R):
            cb, cw = lay.word_at(lay.CNT, q)
            p.li(14, lay.address(rank, cb, cw))
            p.poll(5, 14, 13, "ge")
            p.andi(5, 5, 0xFFFF)
            p.add(1, 1, 5)
        for q in range(l0 * R, l1 * R):
            cb, cw = lay.word_at(lay.CNT, q)
            p.li(14, lay.address(rank, cb, cw))
            p.poll(5, 14, 13, "ge")
            p.andi(5, 5, 0xFFFF)
            p.or_(6, 1, 13)
            ob, ow = lay.word_at(lay.OFFS, q)
            p.li(14, lay.address(rank, ob, ow))
            p.sw(6, 14, 0)                         # publish as soon as known
            p.add(1, 1, 5)
        p.mark(EVENTS["cumsum"])
        _reorder(p, lay, rank, aivs, core, rows, sync, n_tok, inc, mte)
        p.halt()
        return p

    # ------------------------------------------------ a T-AIV ------------------------------------
    a = core
    p.li(5, TFF_TAG)
    _epoch(p, rank, lay, 6, 0)
    p.or_(5, 5, 6)
    p.usw(5, 0, rows.consts)                       # the TFF flag word of this epoch
    if inc:
        p.slli(6, 6, 16)
        p.usw(6, 0, rows.consts + 4)               # epoch << 16 (the IDX words' tag)
        for r in range(lay.route_blocks):          # the weights (sent with each slot)
            p.li(12, rows.weights + r * 512)
            p.li(14, lay.address(rank, lay.WEIGHTS + r))
            p.ldb(12, 14, 0)
    # TokenCnt, shared by the T-AIVs: a counts its chunk of the experts into its own
    # TCNT rows and publishes each row as one Token-Flag-Fused block (flag word 0) ...
    e0, e1, first = rows.chunks[a]
    count_experts(p, e0, e1, S, lambda e, reg: p.usw(reg, 0, rows.count_at(e)))
    own = range(first, first + -(-(e1 - e0) // (lay.words - 1)))
    for blk in own:
        p.ulw(5, 0, rows.consts)
        p.li(12, rows.tcnt + blk * 512)
        p.usw(5, 12, 0)
        p.li(14, lay.address(rank, lay.TCNT + blk))
        p.stb(12, 14, 0)                           # local, atomic, posted
    # ... and takes every other T-AIV's blocks as they arrive (their flag is this epoch's)
    p.ulw(13, 0, rows.consts)
    others = [blk for blk in range(rows.tcnt_rows) if blk not in own]
    if mte:
        # one copy of the blocks before its own and one of those after, each checked in the
        # UBuf: a block whose flag is not yet this epoch's is polled and copied again
        for i, blk in enumerate(others):
            p.li(12, rows.tcnt + blk * 512)
            p.li(14, lay.address(rank, lay.TCNT + blk))
            (p.ldbc if i and others[i - 1] == blk - 1 else p.ldb)(12, 14, 0)
        for blk in others:
            p.li(12, rows.tcnt + blk * 512)
            p.ulw(5, 12, 0)
            p.beq(5, 13, f"tcnt{blk}")
            p.li(14, lay.address(rank, lay.TCNT + blk))
            p.poll(5, 14, 13, "eq")
            p.ldbc(12, 14, 0)                      # the block whose flag the poll read
            p.label(f"tcnt{blk}")
    for blk in ([] if mte else others):
        p.li(14, lay.address(rank, lay.TCNT + blk))
        p.poll(5, 14, 13, "eq")
        p.li(12, rows.tcnt + blk * 512)
        p.ldb(12, 14, 0)
    pi = remapping(experts, n_tok, mapping)
    p.mv(1, 0)
    for pos, e in enumerate(pi):                   # Cum' = inclusive prefix in π order
        p.ulw(5, 0, rows.count_at(e))
        p.add(1, 1, 5)
        if pos % 2 == 0:
            p.mv(3, 1)
            if pos == len(pi) - 1:
                p.usw(3, 0, rows.cum + 2 * pos)
        else:
            p.slli(5, 1, 16)
            p.or_(5, 5, 3)
            p.usw(5, 0, rows.cum + 2 * (pos - 1))
    for m in range(0, len(pi), 2):                 # the table π
        hi = pi[m + 1] if m + 1 < len(pi) else 0
        p.li(5, pi[m] | hi << 16)
        p.usw(5, 0, rows.pi + 2 * m)
    p.mark(EVENTS["init"])

    if inc:                                        # UBEP-INC: each token once, multicast
        ubep_inc.multicast_tokens(p, lay, rank, rows, experts, *split(lay.batch, n_tok, a))
    per = -(-S // n_tok)
    T0, T1 = min(S, a * per), min(S, (a + 1) * per)
    if T0 < T1:
        # the mapper: first expert of the slice and the offset in it
        p.li(1, T0)
        p.li(2, T1)
        p.li(12, rows.cum)
        p.li(13, len(pi))
        p.vcount(3, 12, 13, 1, "le")               # p = #{pos : Cum'[pos] <= T0} (r4, r5 junk)
        _elem(p, 4, rows.pi, 3, 12)                # x = π(p)
        p.mv(6, 0)                                 # Cum'[p - 1], 0 at p == 0
        p.beq(3, 0, "first")
        p.addi(7, 3, -1)
        _elem(p, 6, rows.cum, 7, 12)
        p.label("first")
        p.sub(6, 1, 6)                             # off = T0 - Cum'[p - 1]
        p.j("slots")
        # -- the walk: one slot per iteration ------------------------------------------------
        p.label("walk")
        p.bgeu(1, 2, "send_end")
        p.bne(5, 0, "have")
        p.addi(3, 3, 1)                            # next remapped expert
        _elem(p, 4, rows.pi, 3, 12)
        p.mv(6, 0)
        p.label("slots")                           # x's slots, token-major (the order of j)
        p.li(14, S)
        p.li(5, rows.slots)
        p.vcomp(5, 0, 14, 4, "eq")                 # r5 = cnt(x); r0: the routing is at row 0
        p.sub(5, 5, 6)                             # left = cnt(x) - off
        p.j("walk")
        p.label("have")
        p.slli(7, 6, 2)
        p.ulw(7, 7, rows.slots)                    # slot n = the off-th slot of x
        p.slli(8, 7, 2)
        p.li(13, lay.address(rank, lay.EXPAND))
        p.add(8, 8, 13)
        p.sw(6, 8, 0)                              # expandIdx[n] = j (kept for the combine)
        if inc:                                    # UBEP-INC: IDX words, the multicast
            ubep_inc.send_slot(p, lay, rank, rows, experts)
        else:
            divmod_const(p, 8, 9, 7, k, S, 13)         # t, i
            # rank(x) << 24, e_l
            divmod_const(p, 11, 12, 4, epr, experts, 13, shift=lay.rank_shift)
            p.addi(12, 12, rank * epr)                 # region s·epr + e_l
            p.li(13, lay.cap)
            p.mul(12, 12, 13)
            p.add(12, 12, 6)                           # + j (= off)
            if B > 1:
                p.li(13, B)
                p.mul(12, 12, 13)
            p.addi(12, 12, lay.RECV)
            p.slli(12, 12, 9)
            p.or_(11, 11, 12)                          # destination of the token's first block
            p.li(13, B * 512)
            p.mul(15, 8, 13)
            p.li(13, lay.address(rank, lay.X))
            p.add(15, 15, 13)                          # the token in X
            p.li(10, rows.tok)
            if sync == "tff":
                p.ulw(13, 0, rows.consts)              # header word 0: the TFF flag word
                p.li(14, rank << 16)
                p.or_(12, 8, 14)                       # header word 1: s << 16 | t
                p.slli(14, 4, 8)
                p.or_(14, 14, 9)                       # header word 2: x << 8 | i
            for b in range(B):
                copy_block(p, b)(10, 15, b * 512)      # the token: one copy
                if sync == "tff":
                    p.usw(13, 10, 0)
                    p.usw(12, 10, 4)
                    p.usw(14, 10, 8)
                    if b:
                        p.li(9, b)
                        p.usw(9, 10, 12)
                    else:
                        p.usw(0, 10, 12)
                p.stb(10, 11, b * 512)                 # one atomic 512 B store, never fenced
        p.addi(6, 6, 1)
        p.addi(5, 5, -1)
        p.addi(1, 1, 1)
        p.j("walk")
        p.label("send_end")
    if sync == "sw":                               # stop-and-wait: every store acknowledged,
        p.fence()                                  # then this T-AIV's flag on every rank
        _epoch(p, rank, lay, 5, 0)
        for d in range(R):
            fb, fw = lay.word_at(lay.SWFLAG, rank * aivs + a)
            p.li(14, lay.address(d, fb, fw))
            p.sw(5, 14, 0)
    p.mark(EVENTS["send"])
    _reorder(p, lay, rank, aivs, a, rows, sync, n_tok, inc, mte)
    p.halt()
    return p
