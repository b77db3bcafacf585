"""Where dispatch/combine data lives in every rank's HBM and in an AIV's UBuf.

Every rank has the same layout (DataBlock indices; one block = 512 B, of
which the machine models ``data_bytes``). The receive address space is
partitioned at initialisation (UBEP §4): senders store straight into the
destination's ``RECV`` regions, no aggregation.

==========  ==========================================================  ==============
region      contents                                                    written by
==========  ==========================================================  ==============
``CTRL``    word 0: die-local SyncAll counter (cumulative); word 1:     kernel / host
            the run's epoch (1, 2, ... — placed by the host)
``ROUTE``   ``topk_idx``: BS·k expert ids, 16-bit, token-major           host (data)
``X``       BS tokens × ``B_tok`` blocks                                 host (data)
``STATUS``  ``R·epr`` words ``epoch << 16 | count``, entry ``e_l·R + s``  other ranks
``RECV``    ``R·epr`` regions × ``cap`` tokens × ``B_tok`` blocks,       other ranks
            region ``s·epr + e_l``, token ``j`` at ``+ j·B_tok``
``OUT``     the dispatch output in CANN's order (≤ R·epr·cap tokens)    kernel
``COUNTS``  ``R·epr`` words: tokens received per entry ``e_l·R + s``     kernel
``CNT``     UBEP: ``R·epr`` words ``epoch << 16 | count``, entry          other ranks'
            ``e_l·R + s`` (TokenCnt, point to point)                     C-AIVs
``OFFS``    UBEP: ``R·epr`` words ``epoch << 16 | offset`` into ``OUT``   own C-AIVs
``EXPAND``  ``BS·k`` words: slot ``j`` of every token slot ``t·k + i``     dispatch (own)
            (CANN's ``expandIdx``, what the combine looks tokens up by)
``WEIGHTS`` ``topk_weights``: BS·k 16-bit weights, token-major           host (data)
``CWIN``    combine window: ``E`` experts × ``cap`` slots × ``B_tok``     expert ranks
            blocks, expert ``e`` slot ``j`` at ``+ (e·cap + j)·B_tok``
``YOUT``    the combine output: BS tokens × ``B_tok`` blocks             combine
``CSTATUS`` CANN combine: ``R`` words, the epoch, one per expert rank    expert ranks
``TCNT``    UBEP: the T-AIVs' expert counts, Token-Flag-Fused blocks     own T-AIVs
            (word 0 ``0x0D0D0000 | epoch``, then counts); ≤ E blocks
``SWFLAG``  UBEP ``sync="sw"`` only: ``R·A`` words, the epoch, one per    other ranks'
            (source rank, T-AIV) — written after the T-AIV's ``fence``   T-AIVs
``IDX``     UBEP-INC only: 2 words per receive slot (region ``s·epr +    other ranks'
            e_l``, slot ``j``): ``epoch << 16 | t`` and                  T-AIVs
            ``epoch << 16 | w[t,i]``
``IMETA``   UBEP-INC only: 2 words per ``OUT`` row: ``t | w << 16``      own reorder
            and the token's die mask (what the combine pre-sums by);
            past 32 dies 4 words, word 2 the mask's bits 32..63
``MCBUF``   UBEP-INC only: ``R`` sources × BS tokens × ``B_tok`` blocks, other ranks'
            token ``t`` of ``s`` at ``(s·BS + t)·B_tok`` (one multicast  T-AIVs (stbm)
            copy per die, whatever its experts there)
``YOWN``    UBEP-INC only: BS × ``B_tok`` blocks, a source's own die's    own combine
            pre-summed part of each token (the rest arrives reduced)
``SENDCNT`` CANN, ``epr > 1``: ``R·epr`` words, the running total of    kernel
            tokens through entry ``e_l·R + s`` (the open kernel's
            ``sendCounts``)
``TOKNUMS`` CANN, ``epr > 1``: ``epr`` words, the tokens each local     the last AIV
            expert received (``expertTokenNums``)
==========  ==========================================================  ==============

``CTRL`` word 2 is the combine's die-local SyncAll counter (CANN).

A guard block (filled with a canary by the host) follows ``RECV``,
``OUT``, ``CWIN`` and ``YOUT``; the checker verifies nobody wrote it. Words of a word-addressed
region (``STATUS``, ``COUNTS``) are packed ``words_per_block`` (modelled
words) to a block, so the layout works at any ``data_bytes``.
"""

from dataclasses import dataclass
from functools import cached_property

from ...hw.isa import RANK_BITS, WORD_BITS, address, check_rank_bits
from ...hw.validate import check_int

__all__ = ["Layout", "ELEMS_PER_ROW", "GUARD", "COMBINE_EVENTS"]

#: MARK events at the end of each combine phase, every system's (:mod:`.combine`, :mod:`.ubep_inc`)
COMBINE_EVENTS = {"c_init": 20, "c_send": 21, "c_sync": 22, "c_combine": 23}

#: 16-bit routing elements per 512 B UBuf row (the vector unit's element width is 16)
ELEMS_PER_ROW = 256
#: canary word in guard blocks
GUARD = 0x6A4D6A4D


@dataclass(frozen=True)
class Layout:
    """Block indices of every region for one configuration (see the module docstring)."""
    ranks: int
    epr: int
    batch: int
    topk: int
    hidden_blocks: int
    words: int
    cap: int
    #: words of ``SWFLAG`` (UBEP's stop-and-wait variant: one per (source rank, AIV)); 0: none
    flag_words: int = 0
    #: the machine's address rank field (:func:`epfabric.hw.isa.address_layout`)
    rank_bits: int = RANK_BITS
    #: the combine's regions (``CWIN``, ``YOUT`` and their guards); without them they are
    #: empty (a dispatch-only layout, for machines whose addresses cannot hold them)
    combine: bool = True
    #: UBEP-INC's regions (``IDX``, ``IMETA``, ``MCBUF``, ``YOWN``); empty without
    inc: bool = False

    def __post_init__(self):
        for name in ("ranks", "epr", "batch", "topk", "hidden_blocks", "words", "cap"):
            check_int(name, getattr(self, name), 1)
        check_int("flag_words", self.flag_words, 0)
        check_rank_bits(self.rank_bits, self.ranks)

    def address(self, rank, block, word=0):
        """Byte address of ``word`` of ``block`` on ``rank`` on this layout's machine."""
        return address(rank, block, word, self.rank_bits)

    @cached_property     # frozen: a region's place never changes
    def rank_shift(self):
        """Where an address's rank field starts: ``rank << rank_shift`` is the rank's base."""
        return WORD_BITS - self.rank_bits

    @cached_property
    def entries(self):
        """Status/count entries per rank: ``R · epr``."""
        return self.ranks * self.epr

    @cached_property
    def route_blocks(self):
        return -(-(self.batch * self.topk) // ELEMS_PER_ROW)

    def _word_blocks(self, n):
        return -(-n // self.words)

    # region starts, in order
    CTRL = 0

    @cached_property
    def ROUTE(self):
        return 1

    @cached_property
    def X(self):
        return self.ROUTE + self.route_blocks

    @cached_property
    def STATUS(self):
        return self.X + self.batch * self.hidden_blocks

    @cached_property
    def RECV(self):
        return self.STATUS + self._word_blocks(self.entries)

    @cached_property
    def recv_blocks(self):
        return self.entries * self.cap * self.hidden_blocks

    @cached_property
    def RECV_GUARD(self):
        return self.RECV + self.recv_blocks

    @cached_property
    def OUT(self):
        return self.RECV_GUARD + 1

    @cached_property
    def OUT_GUARD(self):
        return self.OUT + self.recv_blocks

    @cached_property
    def COUNTS(self):
        return self.OUT_GUARD + 1

    @cached_property
    def CNT(self):
        return self.COUNTS + self._word_blocks(self.entries)

    @cached_property
    def OFFS(self):
        return self.CNT + self._word_blocks(self.entries)

    @cached_property
    def slots(self):
        """Token slots per rank, ``BS · k``."""
        return self.batch * self.topk

    @cached_property
    def EXPAND(self):
        return self.OFFS + self._word_blocks(self.entries)

    @cached_property
    def WEIGHTS(self):
        return self.EXPAND + self._word_blocks(self.slots)

    @cached_property
    def CWIN(self):
        return self.WEIGHTS + self.route_blocks

    @cached_property
    def CWIN_GUARD(self):
        return self.CWIN + (self.recv_blocks if self.combine else 0)

    @cached_property
    def YOUT(self):
        return self.CWIN_GUARD + (1 if self.combine else 0)

    @cached_property
    def YOUT_GUARD(self):
        return self.YOUT + (self.batch * self.hidden_blocks if self.combine else 0)

    @cached_property
    def CSTATUS(self):
        return self.YOUT_GUARD + (1 if self.combine else 0)

    @cached_property
    def TCNT(self):
        return self.CSTATUS + self._word_blocks(self.ranks)

    @cached_property
    def SWFLAG(self):
        return self.TCNT + self.entries        # TCNT: at most one block per expert

    @cached_property
    def IDX(self):
        return self.SWFLAG + self._word_blocks(self.flag_words)

    @cached_property
    def wide_mask(self):
        """More than 32 dies: a die mask is two words (UBEP-INC: bits 32..63 in ``R[rs3]`` of a
        ``stbm``/``stbr``, in a token block's header word 3 and in ``IMETA`` word 2)."""
        return self.ranks > 32

    @cached_property
    def imeta_words(self):
        """``IMETA`` words per ``OUT`` row: 2 (``t | w << 16``, the die mask), 4 with
        :attr:`wide_mask` (word 2 the mask's bits 32..63; word 3 unused, a power of two)."""
        return 4 if self.wide_mask else 2

    @cached_property
    def IMETA(self):
        return self.IDX + (self._word_blocks(2 * self.entries * self.cap) if self.inc else 0)

    @cached_property
    def MCBUF(self):
        return self.IMETA + (self._word_blocks(self.imeta_words * self.entries * self.cap)
                             if self.inc else 0)

    @cached_property
    def YOWN(self):
        return self.MCBUF + (self.ranks * self.batch * self.hidden_blocks if self.inc else 0)

    @cached_property
    def SENDCNT(self):
        return self.YOWN + (self.batch * self.hidden_blocks if self.inc else 0)

    @cached_property
    def TOKNUMS(self):
        return self.SENDCNT + self._word_blocks(self.entries)

    @cached_property
    def blocks(self):
        """Blocks the layout needs (``hbm_blocks`` must be at least this, a power of two)."""
        return self.TOKNUMS + self._word_blocks(self.epr)

    def idx_word(self, s, e_l, j):
        """Word index in ``IDX`` of receive slot ``j`` of (source ``s``, local expert ``e_l``)
        (its second word, the weight, follows)."""
        return 2 * ((s * self.epr + e_l) * self.cap + j)

    def mcbuf_block(self, s, t, b=0):
        """Block ``b`` of token ``t`` of source ``s`` in ``MCBUF``."""
        return self.MCBUF + (s * self.batch + t) * self.hidden_blocks + b

    def cwin_block(self, e, j, b=0):
        """Block of slot ``j``, block ``b`` of expert ``e``'s part of the combine window."""
        return self.CWIN + (e * self.cap + j) * self.hidden_blocks + b

    def recv_block(self, s, e_l, j, b=0):
        """Block ``b`` of token ``j`` in the region of (source ``s``, local expert ``e_l``)."""
        return self.RECV + ((s * self.epr + e_l) * self.cap + j) * self.hidden_blocks + b

    #: regions in address order: ``(name, words?)`` — word-addressed regions are indexed by word
    REGIONS = (("CTRL", True), ("ROUTE", False), ("X", False), ("STATUS", True),
               ("RECV", False), ("RECV_GUARD", False), ("OUT", False), ("OUT_GUARD", False),
               ("COUNTS", True), ("CNT", True), ("OFFS", True), ("EXPAND", True),
               ("WEIGHTS", False), ("CWIN", False), ("CWIN_GUARD", False), ("YOUT", False),
               ("YOUT_GUARD", False), ("CSTATUS", True), ("TCNT", False), ("SWFLAG", True),
               ("IDX", True), ("IMETA", True), ("MCBUF", False), ("YOWN", False),
               ("SENDCNT", True), ("TOKNUMS", True))
    #: what the ``CTRL`` words hold
    CTRL_WORDS = {0: "dispatch SyncAll arrivals", 1: "the run's epoch",
                  2: "combine SyncAll arrivals", 3: "the die's launch delay (cycles)"}

    def where(self, block, word=0):
        """The region and index of ``block``/``word`` (e.g. ``CTRL[0] (dispatch SyncAll
        arrivals)``, ``STATUS[5]``, ``RECV block 3 word 0``), for a watchdog's diagnosis."""
        starts = [(getattr(self, name), name, words) for name, words in self.REGIONS]
        inside = [(start, i, name, words) for i, (start, name, words) in enumerate(starts)
                  if start <= block]
        if not inside or block >= self.blocks:
            return f"outside the layout (block {block} of {self.blocks})"
        start, _, name, words = max(inside)          # of empty regions, the last one starting here
        if words:
            n = (block - start) * self.words + word
            note = f" ({self.CTRL_WORDS[n]})" if name == "CTRL" and n in self.CTRL_WORDS else ""
            return f"{name}[{n}]{note}"
        return f"{name} block {block - start} word {word}"

    def word_at(self, region, n):
        """``(block, word)`` of word ``n`` of the word-addressed region at block ``region``."""
        return region + n // self.words, n % self.words
