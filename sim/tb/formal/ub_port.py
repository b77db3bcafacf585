"""Formal harness of the UB port + HBM slice: a 512 B block is never torn (UBEP §3.4).

:class:`UBAtomicity` drives a :class:`~epfabric.hw.ub_port.UBMemory` with an
arbitrary stream of ``BLOCK_WRITE`` requests (any cycle, any block, any
response back-pressure) and reads every block through its own read port in
every cycle. Write number *k* (counted by the harness, from 1; the initial
contents are "write 0") fills every word of its block with *k*, so a read
response whose words are not all equal holds bytes of two different writes:
a torn read. The property asserts that no response is torn.

* ``ub_port.atomic`` — atomic port: proved by k-induction (no bound). Every
  row is re-read every cycle, so a torn row would show within the read
  latency: that is what makes the assertion inductive.
* ``ub_port.torn_read`` — ``non_atomic=True`` commits 16 B beats, one per
  cycle: the solver must *find* the torn read (the race catalog's
  ``torn_read``, found here by a model checker rather than a script).

Only block writes are driven: word writes and fetch-adds change one word by
design and are not what Data-as-Flag relies on.
"""

from amaranth.asserts import AnySeq
from amaranth.hdl import Assert, Cover, Signal

from ....hw.hbm import BLOCK_BYTES, WORD_BYTES
from ....hw.ub_port import UBMemory, UBOp, UBPort
from . import FormalProperty, Harness, all_equal

__all__ = ["UBAtomicity", "TwoBeatPort", "PROPERTIES"]


class UBAtomicity(Harness):
    """Harness: block writes with write-numbered words, every block read every cycle.

    Parameters
    ----------
    non_atomic : bool
        Build the port in its beat-by-beat mode (the torn read must be found).
    blocks, data_bytes, beat_bytes, latency
        Of the :class:`~epfabric.hw.ub_port.UBMemory` under test (kept small:
        the solver sees every bit).
    two_beat : bool
        Put a deliberately broken port in the memory (:class:`TwoBeatPort`:
        it commits the modelled words of a block in two beats, half per
        cycle) — the negative control: ``ub_port.atomic`` must fail on it.
    """

    def __init__(self, *, non_atomic=False, blocks=2, data_bytes=32, beat_bytes=16, latency=1,
                 two_beat=False):
        super().__init__()
        self.non_atomic = non_atomic
        self.blocks = blocks
        self.data_bytes = data_bytes
        self.beat_bytes = beat_bytes
        self.latency = latency
        self.two_beat = two_beat
        self.words = data_bytes // WORD_BYTES
        self.dut = UBMemory(blocks=blocks, data_bytes=data_bytes, non_atomic=non_atomic,
                            beat_bytes=beat_bytes, latency=latency, read_ports=blocks,
                            port=TwoBeatPort(blocks=blocks, data_bytes=data_bytes) if two_beat
                            else None)
        self.torn = Signal()

    def check(self, m):
        m.submodules.mem = dut = self.dut
        req = dut.i_req

        write_no = Signal(32)          # number of the next block write (write 0 = initial contents)
        m.d.comb += [
            req.valid.eq(AnySeq(1)),
            req.payload.op.eq(UBOp.BLOCK_WRITE),
            req.payload.addr.eq(AnySeq(len(req.payload.addr))),
            dut.o_resp.ready.eq(AnySeq(1)),
        ]
        m.d.comb += req.payload.data.eq((write_no + 1)[:32].replicate(self.words))
        with m.If(req.valid & req.ready):
            m.d.sync += write_no.eq(write_no + 1)

        torn = self.torn
        for b in range(self.blocks):
            rd = dut.read[b]
            m.d.comb += [rd.req.valid.eq(1), rd.req.payload.addr.eq(b), rd.req.payload.word.eq(0)]
            block = rd.resp.payload.block
            words = [Signal(32, name=f"obs{b}_w{k}") for k in range(self.words)]
            m.d.comb += [w.eq(block.word_select(k, 32)) for k, w in enumerate(words)]
            mixed = Signal(name=f"obs{b}_torn")
            m.d.comb += mixed.eq(rd.resp.valid & ~all_equal(words))
            m.d.comb += [Assert(~mixed, f"block {b} read torn"),
                         Cover(rd.resp.valid & (words[0] != 0))]
            with m.If(mixed):
                m.d.comb += torn.eq(1)


class TwoBeatPort(UBPort):
    """A broken "atomic" port that commits a block in two beats (negative control).

    The non-atomic machinery with two beats, each enabling half of the
    *modelled* words: the torn window is one cycle, as it would be in a port
    that wrote 256 B per cycle.
    """

    def __init__(self, *, blocks, data_bytes):
        super().__init__(blocks=blocks, data_bytes=data_bytes, non_atomic=True,
                         beat_bytes=BLOCK_BYTES // 2)

    def beat_mask(self, beat):
        half = self.words // 2
        low = (1 << half) - 1
        return low if beat == 0 else ((1 << self.words) - 1) & ~low


PROPERTIES = {
    "ub_port.atomic": FormalProperty(
        UBAtomicity, mode="prove", depth=4, expect="pass",
        doc="atomic UB port: no read returns words of two different block writes",
        params={"non_atomic": False},
        gtkw=("write_no", "mem.i_req__valid", "mem.i_req__payload.addr", "mem.commit_valid",
              "obs0_w0", "obs0_w7", "obs0_torn", "obs1_w0", "obs1_w7", "obs1_torn")),
    "ub_port.torn_read": FormalProperty(
        UBAtomicity, mode="bmc", depth=6, expect="fail",
        doc="non-atomic UB port: the solver finds a read of a half-written block",
        params={"non_atomic": True},
        gtkw=("write_no", "mem.i_req__valid", "mem.i_req__payload.addr", "mem.commit_valid",
              "mem.commit_beat", "obs0_w0", "obs0_w3", "obs0_w4", "obs0_w7", "obs0_torn",
              "obs1_w0", "obs1_w3", "obs1_w4", "obs1_w7", "obs1_torn")),
}
