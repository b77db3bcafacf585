"""The INC-MoE layer's persistent kernel on the AIV cores (INC-MoE §3.3–3.5, Algorithm 1).

One program per AIV; its role follows from its index on the die (docs/spec/kernels.md
§2.4): cores ``0 .. B_AG-1`` gather, the next ``B_FFN`` compute, the last
``B_RS`` reduce. Bands: ``beta`` rows (META word ``ranks``, set by the host
from the token counts); band j is rows ``[j*beta, (j+1)*beta)`` of every
rank's block, clipped to that rank's count T_q (META word q). Programs depend
on the configuration only (ranks, roles, bands, tail, experts per rank, top-k),
never on the counts or the data, which they read at run time.

* **Gather** g, per band j: copy its share of its own band rows ``X`` → ``XG``
  (rows ``j*beta + g``, stride ``B_AG``; gather g > 0 starts band j only once
  ``agReady >= j``, so no gather runs a band ahead); gather 0 waits for the
  others' copies (a fetch-add counter: with every gather at most one band
  ahead of the release, ``(j + 1) * B_AG`` copies means every gather has copied
  band j), posts ``incag`` of the band, waits until the AG
  counter reaches the band's cumulative rows from the other ranks, and
  releases ``agReady = j + 1``. Gather 0 first posts every rank's count
  (``inccnt``). With tail assistance a gather AIV then joins the local
  reductions of the last ``tail`` bands.
* **Compute** f, per band j: acquire ``agReady >= j + 1``; for every rank
  q's band rows ``j*beta + f`` (stride ``B_FFN``): load the row, and for each
  of its k routing words whose expert is local: ``cube`` with the expert's
  ``a, b`` scaled by the gate weight, accumulated in the UBuf (``vadd``);
  store the row's partial into ``Z`` if any expert was local (Z starts zero);
  then ``fence`` and release its progress word ``PROG[f] = j + 1``.
* **Reduce**: reduce AIV i owns bands i, i + B_RS, ... (so the
  ReduceScatters of B_RS bands can be in flight at once). For band j its
  owner waits until every compute progress word reaches j + 1 and band j−1's
  ReduceScatter is posted (``RSPOST >= j``, a local flag), joins the
  cross-rank barrier (``incbar``, ``incwait`` on the barrier counter), posts
  ``incrs`` of the band and releases ``RSPOST = j + 1``; then it waits until
  the RS counter reaches this rank's cumulative own rows and adds the
  switch's sums ``RSIN`` into its own ``Z`` rows of the band — the root's
  local reduction (docs/spec/kernels.md §2.6). In the last ``tail`` bands the gather
  AIVs share those additions (the owner takes rows ``j*beta``, step
  ``B_AG + 1``; gather g rows ``j*beta + 1 + g``).

Order of completion counters. The AG counter of a band can be trusted
cumulatively because a rank posts the AG of band j + 1 only after its own
band j completed, and every AG row reaches a rank through the engine's one
output in the order the engine took them; the RS counter because each rank's
barrier flit of band j + 1 follows its RS flits of band j on its link (the
owner of band j + 1 posts its barrier after band j's ``incrs``, and the
interface sends RS and barrier posts in order), so the engine has reduced
and sent every band-j sum before it releases barrier j + 1. The barrier also bounds the RS skew to one band, so the engine's slots
(>= ranks * beta) never hold two chunks that map to one slot.

The ring baseline (``mode="ring"``, vLLM's default path, INC-MoE Fig. 2) is
the same program with one band and no tail: ring AllGather of every row, the
FFN over all rows, a barrier (the ring's hops read their own partials, so no
rank may start before every rank's FFN is done), ring ReduceScatter; the
ring's last hop already adds the root's own partial, so the output is
``RSIN`` and there is no local reduction.

MARK events per band (the trace's k-th occurrence of an event on a core is
band k; gather AIVs mark ``rs_start``/``rs_done`` only for the tail bands):
:data:`MARKS`; :data:`TRACE_SPANS` pairs them into the Perfetto trace's
slices, so AG(j+1) ‖ FFN(j) ‖ RS(j−1) shows as overlapping slices.
"""

from dataclasses import dataclass

from ...hw.validate import UserError, check_int
from ..assembler import Program
from ..isa import address

__all__ = ["LayerSpec", "MARKS", "TRACE_SPANS", "program", "role_of"]

#: MARK event ids
MARKS = {"ag_post": 1601, "ag_done": 1602, "ffn_start": 1603, "ffn_end": 1604,
         "rs_post": 1605, "rs_done": 1606, "rs_start": 1607}

#: start MARK -> (end MARK, slice name) for the Perfetto trace (``Report.chrome_trace``):
#: gather 0's AG of a band, each compute AIV's FFN of a band, each reducer's band (from its
#: start, through the leader's barrier and post and the wait, to its local additions)
TRACE_SPANS = {MARKS["ag_post"]: (MARKS["ag_done"], "AG"),
               MARKS["ffn_start"]: (MARKS["ffn_end"], "FFN"),
               MARKS["rs_start"]: (MARKS["rs_done"], "RS")}

U0, U1, U2 = 0, 1 << 9, 2 << 9      # UBuf rows: token, accumulated partial, one expert's output


@dataclass(frozen=True)
class LayerSpec:
    """What the programs depend on: mode, bands, roles (B_AG, B_FFN, B_RS), tail, routing shape."""
    mode: str
    bands: int
    roles: tuple
    tail: int
    local_experts: int
    topk: int

    def __post_init__(self):
        if self.mode not in ("inc", "ring"):
            raise UserError(f"mode must be 'inc' or 'ring', not {self.mode!r}")
        check_int("bands", self.bands, 1, 1 << 12)
        if len(self.roles) != 3:
            raise UserError(f"roles must be (gather, compute, reduce) AIV counts, not {self.roles!r}")
        for name, n in zip(("roles[0] (gather)", "roles[1] (compute)", "roles[2] (reduce)"),
                           self.roles):
            check_int(name, n, 1, 64)
        check_int("tail", self.tail, 0, self.bands)
        if self.mode == "ring" and (self.bands != 1 or self.tail):
            raise UserError(f"the ring baseline runs one band without tail assistance, not "
                            f"bands={self.bands}, tail={self.tail}")

    @property
    def aivs(self):
        return sum(self.roles)


def role_of(spec, core):
    """``(role, index)`` of AIV ``core``: ``("gather"|"compute"|"reduce", i)``."""
    g, f, _ = spec.roles
    if core < g:
        return "gather", core
    if core < g + f:
        return "compute", core - g
    return "reduce", core - g - f


class _Emitter:
    """One program: the rank's addresses and fresh labels."""

    def __init__(self, config, rank, spec, lay):
        self.p, self.rank, self.spec, self.lay = Program(), rank, spec, lay
        self.words, self.n = config.words_per_block, config.ranks
        self._labels = 0

    def label(self):
        self._labels += 1
        return f"L{self._labels}"

    def addr(self, block, word=0):
        return address(self.rank, block, word)

    def meta(self, rd, q):
        """rd = META word q (a count, or beta for q = ranks)."""
        self.p.li(14, self.addr(self.lay.META, q))
        self.p.lw(rd, 14, 0)

    def min_into(self, rd, ra, rb):
        """rd = min(ra, rb), unsigned (rd distinct from ra and rb)."""
        p = self.p
        p.mv(rd, ra)
        p.bgeu(rb, ra, 2)
        p.mv(rd, rb)

    def band_loop(self, body, first, last, step=1):
        """Run ``body()`` for bands ``first, first + step, .. < last``: r2 = j, r1 = j * beta
        (r3 = beta)."""
        if last <= first:
            return
        p = self.p
        p.li(2, first)
        p.mul(1, 2, 3)
        if step > 1:
            p.li(11, step)
            p.mul(11, 11, 3)                    # r11 = step * beta (kept by the body)
        top = self.label()
        p.label(top)
        body()
        p.addi(2, 2, step)
        p.add(1, 1, 11 if step > 1 else 3)
        p.li(8, last)
        p.bltu(2, 8, top)

    def row_loop(self, first, stride, body):
        """For rows c = r1 + ``first``, step ``stride``, while c < r6: ``body()`` with r7 = c and
        r8 = c << 9 (the row's block offset in an address)."""
        p = self.p
        top, done = self.label(), self.label()
        p.addi(7, 1, first)
        p.label(top)
        p.bgeu(7, 6, done)
        p.slli(8, 7, 9)
        body()
        p.addi(7, 7, stride)
        p.j(top)
        p.label(done)

    def row_addr(self, rd, block):
        """rd = the address of block ``block`` + r8 (a row offset from :meth:`row_loop`)."""
        self.p.li(rd, self.addr(block))
        self.p.add(rd, rd, 8)

    def post_band(self):
        """Band j's owner: wait for every compute AIV's band and for band j-1's post, join the
        barrier, post the ReduceScatter, release ``RSPOST = j + 1`` (module docstring)."""
        p, lay, spec = self.p, self.lay, self.spec
        p.addi(8, 2, 1)
        for f in range(spec.roles[1]):
            p.li(9, self.addr(lay.PROG, f))
            p.poll(10, 9, 8, "ge")
        p.li(9, self.addr(lay.FLAGS, 2))
        p.poll(10, 9, 2, "ge")                  # band j-1's ReduceScatter is posted
        p.incbar()
        p.incwait(10, 2, 8)
        p.mark(MARKS["rs_post"])
        p.incrs(1, 3)
        p.sw(8, 9, 0)                           # RSPOST = j + 1

    def add_rows(self, index, stride):
        """Wait for band j's reduced rows, add them into own Z rows ``j*beta + index``, step
        ``stride`` (the root's local reduction; none in the ring, whose RSIN is the output)."""
        p, lay, spec = self.p, self.lay, self.spec
        p.add(5, 1, 3)
        self.meta(4, self.rank)
        self.min_into(6, 5, 4)                  # own rows up to this band's end
        p.incwait(10, 1, 6)
        if spec.mode != "inc":
            return

        def add():
            self.row_addr(9, lay.RSIN)
            p.ldb(0, 9, 0)                      # the switch's sum of the other partials
            self.row_addr(9, lay.Z + self.rank * lay.tmax)
            p.li(12, U1)
            p.ldb(12, 9, 0)                     # own partial
            p.li(13, self.words)
            p.vadd(12, 12, 13, 0)
            p.stb(12, 9, 0)
        self.row_loop(index, stride, add)

    def reduce_band(self, helpers):
        """The band j of its owner: post it, then add its rows (with ``helpers`` gather AIVs in
        the tail bands, which take rows 1.., step helpers + 1)."""
        p, spec = self.p, self.spec
        p.mark(MARKS["rs_start"])
        self.post_band()
        if helpers and spec.tail:
            tail, done = self.label(), self.label()
            p.li(8, spec.bands - spec.tail)
            p.bgeu(2, 8, tail)
            self.add_rows(0, 1)
            p.j(done)
            p.label(tail)
            self.add_rows(0, 1 + helpers)
            p.label(done)
        else:
            self.add_rows(0, 1)
        p.mark(MARKS["rs_done"])

    def gather(self, g):
        p, lay, spec, me = self.p, self.lay, self.spec, self.rank
        n_ag, _, n_rs = spec.roles
        self.meta(3, self.n)
        if g == 0:
            for q in range(self.n):             # the counts, to the network interface
                self.meta(5, q)
                p.li(6, q)
                p.inccnt(6, 5)
        self.meta(4, me)

        def body():
            if g:                               # band j only after band j-1 was released,
                p.li(9, self.addr(lay.FLAGS, 0))    # so gather 0's count of copies is exact
                p.poll(10, 9, 2, "ge")
            p.add(5, 1, 3)                      # band end (unclipped)
            self.min_into(6, 5, 4)

            def copy():
                self.row_addr(9, lay.X)
                p.ldb(0, 9, 0)
                self.row_addr(9, lay.XG + me * lay.tmax)
                p.stb(0, 9, 0)
            self.row_loop(g, n_ag, copy)
            if n_ag > 1:
                p.li(9, self.addr(lay.FLAGS, 1))
                p.li(8, 1)
                p.fadd(10, 9, 8)
            if g:
                return
            if n_ag > 1:
                p.addi(8, 2, 1)
                p.li(10, n_ag)
                p.mul(8, 8, 10)
                p.poll(10, 9, 8, "ge")
            p.mark(MARKS["ag_post"])
            p.incag(1, 3)
            p.li(7, 0)                          # rows expected from the others so far
            for q in range(self.n):
                if q != me:
                    self.meta(8, q)
                    self.min_into(10, 8, 5)
                    p.add(7, 7, 10)
            p.incwait(10, 0, 7)
            p.mark(MARKS["ag_done"])
            p.addi(8, 2, 1)
            p.li(9, self.addr(lay.FLAGS, 0))
            p.sw(8, 9, 0)                       # release agReady = j + 1

        self.band_loop(body, 0, spec.bands)

        def helper():                           # tail assistance: rows 1 + g, step 1 + B_AG
            p.mark(MARKS["rs_start"])
            self.add_rows(1 + g, 1 + n_ag)
            p.mark(MARKS["rs_done"])
        self.band_loop(helper, spec.bands - spec.tail, spec.bands)
        p.halt()

    def compute(self, f):
        p, lay, spec, me = self.p, self.lay, self.spec, self.rank
        n_ffn = spec.roles[1]
        self.meta(3, self.n)
        row = "row"

        def body():
            p.addi(8, 2, 1)
            p.li(9, self.addr(lay.FLAGS, 0))
            p.poll(10, 9, 8, "ge")              # acquire agReady >= j + 1
            p.mark(MARKS["ffn_start"])
            p.add(4, 1, 3)
            for q in range(self.n):
                self.meta(5, q)
                self.min_into(6, 5, 4)
                top, nxt = self.label(), self.label()
                p.addi(10, 1, f)
                p.label(top)
                p.bgeu(10, 6, nxt)
                p.li(11, q * lay.tmax)
                p.add(11, 11, 10)
                p.jal(15, row)
                p.addi(10, 10, n_ffn)
                p.j(top)
                p.label(nxt)
            p.fence()
            p.mark(MARKS["ffn_end"])
            p.addi(8, 2, 1)
            p.li(9, self.addr(lay.PROG, f))
            p.sw(8, 9, 0)                       # release this AIV's progress

        self.band_loop(body, 0, spec.bands)
        p.halt()
        # row(r11 = XG row): Z[row] = sum over local experts e of g_e * FFN_e(x)
        p.label(row)
        p.slli(12, 11, 9)
        p.li(13, self.addr(lay.XG))
        p.add(13, 13, 12)
        p.ldb(0, 13, 0)
        p.li(14, self.words)
        p.li(9, U1)
        p.vmuls(9, 0, 14, 0)                    # accumulator = 0
        p.li(7, 0)
        lo = me * spec.local_experts
        for i in range(spec.topk):
            skip = self.label()
            p.ulw(5, 0, 4 * i)                  # routing word: expert | gate << 16
            p.andi(8, 5, 0xFFFF)
            p.addi(8, 8, -lo)
            p.li(13, spec.local_experts)
            p.bgeu(8, 13, skip)
            p.slli(8, 8, 9)
            p.li(13, self.addr(lay.WEIGHTS))
            p.add(13, 13, 8)
            p.lw(8, 13, 0)
            p.lw(13, 13, 4)
            p.srli(5, 5, 16)
            p.mul(8, 8, 5)                      # g * a_e
            p.mul(13, 13, 5)                    # g * b_e
            p.li(12, U2)
            p.cube(12, 0, 8, 13)
            p.vadd(9, 9, 14, 12)
            p.li(7, 1)
            p.label(skip)
        done = self.label()
        p.beq(7, 0, done)
        p.slli(12, 11, 9)
        p.li(13, self.addr(lay.Z))
        p.add(13, 13, 12)
        p.stb(9, 13, 0)
        p.label(done)
        p.jalr(0, 15, 0)

    def reduce(self, i):
        spec = self.spec
        self.meta(3, self.n)
        self.band_loop(lambda: self.reduce_band(spec.roles[0]), i, spec.bands, spec.roles[2])
        self.p.halt()


def program(config, rank, core, spec, lay):
    """The program of AIV ``core`` of ``rank`` (module docstring)."""
    if spec.aivs != config.aivs_per_die:
        raise UserError(f"roles {spec.roles} need {spec.aivs} AIVs per die, not "
                        f"{config.aivs_per_die}")
    e = _Emitter(config, rank, spec, lay)
    role, index = role_of(spec, core)
    getattr(e, role)(index)
    return e.p
