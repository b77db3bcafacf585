"""The INC NIC's memory port: one requester of the die's router, shared round-robin (INC-MoE §3.1).

The NIC reads and writes the die's HBM through one ``mem_req``/``mem_rsp`` pair of the
:class:`~epfabric.hw.router.DieRouter`, always at its own rank; :class:`MemoryPort` shares it
between the NIC's writer and its readers.
"""

from amaranth.hdl import Array, Cat, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from .aiv_core import ACK_COUNT_BITS, MemOp, mem_req_layout, mem_rsp_layout
from .arbiter import RoundRobin
from .isa import RANK_BITS, address_layout, block_bits, check_rank_bits
from .validate import check_multiple

__all__ = ["MemoryPort", "READERS", "write_layout"]

#: The read requesters, in round-robin order after the writer: the AG engine, the RS engine
#: and (ring) the receive side's own-partial read.
READERS = 3

#: The write acks outstanding are counted in this many bits.
_PENDING_BITS = 32


def write_layout(rank_bits, data_bytes):
    """A WRITE_BLOCK request of the NIC: the ``block`` and its ``data``."""
    return data.StructLayout({"block": block_bits(rank_bits), "data": 8 * data_bytes})


class MemoryPort(wiring.Component):
    """The NIC's memory port: a writer and three readers, round robin, one read outstanding.

    Requesters, in round-robin order: the writer (``write``: WRITE_BLOCK),
    then the readers ``reads[0..2]`` (READ_BLOCK). The grant is held while
    ``mem_req`` is not ready, so a request once presented stays until it is
    accepted (payload stable); a requester's ``ready`` is high at the edge
    its request is accepted. A read is issued only while none is
    outstanding (the readers wait on ``read_busy``); its answer on
    ``mem_rsp`` goes to the reader that issued it (``read_done``, with
    ``read_data``). WRITE_BLOCK acks (the count in ``data[0:16]``) are
    counted against the writes issued; ``busy`` waits for them.
    ``mem_rsp.ready`` is always 1.

    Parameters
    ----------
    data_bytes : int
        Modelled bytes of a block: a multiple of 32 in [32, 512].
    rank_bits : int
        Width of an address's rank field (default 8; :func:`epfabric.hw.isa.address_layout`).

    Attributes
    ----------
    rank : In(RANK_BITS)
        This die's rank: every request addresses ``address(rank, block, 0)``.
    write : In(stream.Signature(write_layout(rank_bits, data_bytes)))
        The block to write and its data.
    reads : In(stream.Signature(block_bits(rank_bits))).array(READERS)
        The blocks to read.
    read_busy : Out(1)
        A read is outstanding.
    read_done : Out(1).array(READERS)
        The answer to reader ``i``'s read, in the cycle it arrives ...
    read_data : Out(8 * data_bytes)
        ... with this data.
    mem_req : Out(stream.Signature(mem_req_layout(data_bytes)))
        READ_BLOCK / WRITE_BLOCK requests at ``address(rank, block, 0)``.
    mem_rsp : In(stream.Signature(mem_rsp_layout(data_bytes)))
        Read answers and write acks (always ready).
    busy : Out(1)
        A read outstanding or a write not yet acknowledged.

    Raises
    ------
    TypeError, ValueError
        On a parameter of the wrong type or out of range (named in the message).
    """

    def __init__(self, *, data_bytes, rank_bits=RANK_BITS):
        check_multiple("data_bytes", data_bytes, 32, 32, 512)
        self.rank_bits = check_rank_bits(rank_bits)
        super().__init__({
            "rank": In(RANK_BITS),
            "write": In(stream.Signature(write_layout(rank_bits, data_bytes))),
            "reads": In(stream.Signature(block_bits(rank_bits))).array(READERS),
            "read_busy": Out(1), "read_done": Out(1).array(READERS),
            "read_data": Out(8 * data_bytes),
            "mem_req": Out(stream.Signature(mem_req_layout(data_bytes))),
            "mem_rsp": In(stream.Signature(mem_rsp_layout(data_bytes))),
            "busy": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        rd_busy = Signal()
        rd_owner = Signal(2)
        rsp = self.mem_rsp.payload
        m.d.comb += self.mem_rsp.ready.eq(1)
        rsp_read = self.mem_rsp.valid & (rsp.op == MemOp.READ_BLOCK)
        with m.If(rsp_read):
            m.d.sync += rd_busy.eq(0)
        # requesters: 0 the writer, 1 + i reader i
        sources = [self.write, *self.reads]
        blocks = [self.write.payload.block, *(r.payload for r in self.reads)]
        # round robin, the grant held while not ready (a request stays until accepted). Known
        # hazard, not fixed (a fix changes cycles): the readers stop asking while a read is
        # outstanding (read_busy), so if a write is served during every read the pointer
        # returns to reader 0 (AllGather) each time and the others wait while it asks; seen
        # driving this block alone, never in the NIC's pipeline tests (worst wait 6 cycles).
        mem_arb = m.submodules.mem_arb = RoundRobin(count=len(sources), hold=True)
        grant = mem_arb.grant
        m.d.comb += [mem_arb.requests.eq(Cat(s.valid for s in sources)),
                     mem_arb.ready.eq(self.mem_req.ready)]
        mq = self.mem_req.payload
        mq_addr = data.View(address_layout(self.rank_bits), mq.addr)
        m.d.comb += [self.mem_req.valid.eq(mem_arb.valid),
                     mq.op.eq(Mux(grant == 0, MemOp.WRITE_BLOCK, MemOp.READ_BLOCK)),
                     mq_addr.rank.eq(self.rank), mq_addr.block.eq(Array(blocks)[grant]),
                     mq_addr.word.eq(0), mq_addr.byte.eq(0),
                     mq.data.eq(Mux(grant == 0, self.write.payload.data, 0))]
        fire = self.mem_req.valid & self.mem_req.ready
        granted = [Signal(name=f"mgrant{i}") for i in range(len(sources))]
        m.d.comb += [g.eq(fire & (grant == i)) for i, g in enumerate(granted)]
        m.d.comb += [s.ready.eq(g) for s, g in zip(sources, granted)]
        for i in range(1, len(sources)):
            with m.If(granted[i]):
                m.d.sync += [rd_busy.eq(1), rd_owner.eq(i)]
        m.d.comb += [self.read_busy.eq(rd_busy), self.read_data.eq(rsp.data),
                     *(d.eq(rsp_read & (rd_owner == i + 1)) for i, d in enumerate(self.read_done))]

        # write acks
        pend = Signal(_PENDING_BITS)
        acked = Signal(ACK_COUNT_BITS)
        m.d.comb += acked.eq(Mux(self.mem_rsp.valid & (rsp.op == MemOp.WRITE_BLOCK),
                                 rsp.data[:ACK_COUNT_BITS], 0))
        m.d.sync += pend.eq(pend + granted[0] - acked)
        m.d.comb += self.busy.eq(rd_busy | (pend != 0))
        return m
