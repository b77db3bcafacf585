"""The INC NIC's posts: the AG and RS queues and the rows per rank (INC-MoE §3.1, docs/spec/kernels.md §2.4).

A core posts collective operations to its die's :class:`~epfabric.hw.inc_nic.IncNic`;
:class:`PostQueues` sorts them into the queues of the two issue engines and applies the
``CNT`` posts that set each rank's row count.
"""

from amaranth.hdl import Array, Cat, Module, Mux, Signal
from amaranth.lib import data, enum, stream, wiring
from amaranth.lib.fifo import SyncFIFO
from amaranth.lib.wiring import In, Out

from .isa import RANK_BITS
from .validate import check_int

__all__ = ["PostOp", "post_layout", "PostQueues"]


class PostOp(enum.Enum, shape=2):
    """Operation of a post (``post.payload.op``)."""
    AG = 0   #: AllGather rows [a, a+b) of the own block (to the RS-independent AG engine)
    RS = 1   #: ReduceScatter rows [a, a+b) (RS engine)
    BAR = 2  #: cross-rank barrier (RS engine, in order after the RS posts before it)
    CNT = 3  #: ``counts[a] = b``: rows T_a of rank a


#: A post: operation and two operands (row0/rows for AG and RS, rank/rows for CNT).
post_layout = data.StructLayout({"op": PostOp, "a": 32, "b": 32})


class PostQueues(wiring.Component):
    """Posts sorted into the AG queue and the RS queue (RS and BAR); CNT posts applied.

    An AG post enters the AG queue, an RS or BAR post the RS queue (in
    order: a BAR follows the RS posts before it); ``post.ready`` is low
    while the target queue is full. A ``CNT(a, b)`` post sets ``counts[a] =
    min(b, tmax)`` (ignored when ``a >= ranks``) and is accepted only when
    both issue engines are idle (``engines_idle``: their queues empty, no post
    being issued), so it takes effect after every earlier post was issued and
    before any later one.

    Parameters
    ----------
    ranks : int
        Ranks (2 .. 256): one row count each.
    tmax : int
        Rows per rank block (>= 1): the largest count.
    post_depth : int
        Entries of each queue (>= 2).

    Attributes
    ----------
    post : In(stream.Signature(post_layout))
        Posted operations (:class:`PostOp`).
    engines_idle : In(1)
        Both issue engines idle (a CNT post may be applied).
    me, prv : In(RANK_BITS)
        This rank and the previous one on the ring.
    ag, rs : Out(stream.Signature(post_layout))
        The heads of the AG queue and of the RS queue.
    counts : Out(range(tmax + 1)).array(ranks)
        Every rank's row count.
    t_me, t_prv : Out(range(tmax + 1))
        The row counts of ``me`` and of ``prv``.

    Raises
    ------
    TypeError, ValueError
        On a parameter of the wrong type or out of range (named in the message).
    """

    def __init__(self, *, ranks, tmax, post_depth):
        check_int("ranks", ranks, 2, 1 << RANK_BITS)
        check_int("tmax", tmax, 1)
        check_int("post_depth", post_depth, 2)
        self.ranks, self.tmax, self.post_depth = ranks, tmax, post_depth
        count = range(tmax + 1)
        super().__init__({
            "post": In(stream.Signature(post_layout)), "engines_idle": In(1),
            "me": In(RANK_BITS), "prv": In(RANK_BITS),
            "ag": Out(stream.Signature(post_layout)), "rs": Out(stream.Signature(post_layout)),
            "counts": Out(count).array(ranks), "t_me": Out(count), "t_prv": Out(count),
        })

    def elaborate(self, platform):
        m = Module()
        n, tmax = self.ranks, self.tmax
        counts = Array(Signal(range(tmax + 1), name=f"count{q}") for q in range(n))
        m.d.comb += [self.t_me.eq(counts[self.me]), self.t_prv.eq(counts[self.prv]),
                     *(self.counts[q].eq(counts[q]) for q in range(n))]
        pbits = len(Cat(self.post.payload))
        ag_q = m.submodules.ag_queue = SyncFIFO(width=pbits, depth=self.post_depth)
        rs_q = m.submodules.rs_queue = SyncFIFO(width=pbits, depth=self.post_depth)
        post = self.post.payload
        is_cnt = post.op == PostOp.CNT
        is_ag = post.op == PostOp.AG
        m.d.comb += [ag_q.w_data.eq(post.as_value()), rs_q.w_data.eq(post.as_value()),
                     ag_q.w_en.eq(self.post.valid & is_ag),
                     rs_q.w_en.eq(self.post.valid & ~is_ag & ~is_cnt)]
        m.d.comb += self.post.ready.eq(Mux(is_cnt, self.engines_idle,
                                           Mux(is_ag, ag_q.w_rdy, rs_q.w_rdy)))
        with m.If(self.post.valid & is_cnt & self.engines_idle):
            for q in range(n):
                with m.If(post.a == q):
                    m.d.sync += counts[q].eq(Mux(post.b > tmax, tmax, post.b))
        for queue, head in ((ag_q, self.ag), (rs_q, self.rs)):
            m.d.comb += [head.valid.eq(queue.r_rdy), head.payload.eq(queue.r_data),
                         queue.r_en.eq(head.ready & queue.r_rdy)]
        return m
