"""Per-die HBM slice: DataBlock-granular memory with a fixed access latency.

Memory semantics follow UBEP §3.4: the unit of transfer between NPUs is the
512 B DataBlock, and Data-as-Flag synchronization relies on a reader observing
a DataBlock either wholly old or wholly new (UBEP §2.3 Insight 2). The slice
stores one memory row per DataBlock, so a full-row write is indivisible by
construction; whether writes *are* full-row is the UB port's business
(:mod:`epfabric.hw.ub_port`).

Only the leading ``data_bytes`` of each 512 B block are stored (docs/spec/design.md "Time
and size model"): they trade data fidelity for simulation speed and never
change a cycle count. The leading 32 B — the Data-as-Flag field — are always
stored.
"""

from amaranth.hdl import Cat, Module, Signal, unsigned
from amaranth.lib import data, memory, stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2

from .validate import UserError, UserTypeError, check_int, check_multiple, check_word

__all__ = ["BLOCK_BYTES", "WORD_BYTES", "WORDS_PER_BLOCK", "FLAG_BYTES", "HBMSlice",
           "check_data_bytes", "check_blocks", "addr_shape", "word_shape",
           "read_request_layout", "read_response_layout", "ReadPortSignature",
           "WritePortSignature"]

#: A UB DataBlock: the unit of atomic remote writes (UBEP §3.4).
BLOCK_BYTES = 512
#: Word size of word reads, word writes and fetch-add.
WORD_BYTES = 4
#: Words per DataBlock; word offsets are always ``range(WORDS_PER_BLOCK)``.
WORDS_PER_BLOCK = BLOCK_BYTES // WORD_BYTES
#: The leading Data-as-Flag field, always modelled.
FLAG_BYTES = 32


def check_data_bytes(data_bytes, name="data_bytes"):
    """Validate the modelled bytes per block (a multiple of 32 in [32, 512]); return it."""
    return check_multiple(name, data_bytes, FLAG_BYTES, FLAG_BYTES, BLOCK_BYTES)


def check_blocks(blocks, name="blocks"):
    """Validate the number of DataBlocks in a slice; return it."""
    return check_int(name, blocks, 1)


def addr_shape(blocks):
    """Shape of a block address in a slice of ``blocks`` DataBlocks."""
    return unsigned(max(1, ceil_log2(blocks)))


def word_shape():
    """Shape of a word offset inside a 512 B block (always 7 bits)."""
    return unsigned(ceil_log2(WORDS_PER_BLOCK))


def read_request_layout(blocks):
    """Read request: block ``addr`` and ``word`` offset (both reads in one)."""
    return data.StructLayout({"addr": addr_shape(blocks), "word": word_shape()})


def read_response_layout(data_bytes):
    """Read response: the modelled ``block`` and the requested 32-bit ``word``."""
    return data.StructLayout({"block": unsigned(data_bytes * 8), "word": unsigned(32)})


class ReadPortSignature(wiring.Signature):
    """A load/poll port, seen from the requester: ``req`` out, ``resp`` in.

    ``req`` is a stream (the slice is always ready); ``resp`` is a
    valid/payload pair without ``ready``: the requester must take the
    response in the cycle it is valid.
    """

    def __init__(self, *, blocks, data_bytes):
        super().__init__({
            "req": Out(stream.Signature(read_request_layout(blocks))),
            # no ready: a pipelined fixed-latency memory cannot stall its answer
            "resp": In(wiring.Signature({"valid": Out(1),
                                         "payload": Out(read_response_layout(data_bytes))})),
        })


class WritePortSignature(wiring.Signature):
    """A write port, seen from the writer: per-word lane enables ``en``.

    ``en`` has one bit per modelled 32-bit word of the block at ``addr``; every
    enabled lane takes its word from ``data`` at the same clock edge.
    """

    def __init__(self, *, blocks, data_bytes):
        super().__init__({
            "en": Out(data_bytes // WORD_BYTES),
            "addr": Out(addr_shape(blocks)),
            "data": Out(data_bytes * 8),
        })


class HBMSlice(wiring.Component):
    """Per-die HBM slice holding DataBlocks (UBEP §3.4, docs/spec/design.md block 2).

    One memory row per 512 B DataBlock, of which the leading ``data_bytes``
    are stored. Writes are committed at the clock edge that samples them; a
    write enabling every lane of a row is one indivisible update of the
    modelled block. Reads are pipelined, one request per cycle per port,
    with a fixed ``latency``: a request accepted in cycle *t* answers in
    cycle *t + latency* with the row as it was after the writes of cycles
    *< t + latency − 1* (the row is sampled at the edge ending cycle
    *t + latency − 1*; a write in that same cycle is not yet visible).

    The latency pipeline carries only request addresses (about 10 bits a
    stage), never block data, so width stays independent of latency.

    Parameters
    ----------
    blocks : int
        Number of DataBlocks in the slice.
    data_bytes : int
        Modelled bytes per 512 B block; a multiple of 32, at least 32.
        Cycle counts never depend on it.
    latency : int
        Read latency in cycles, 1 to 256.
    read_ports : int
        Number of independent load/poll ports (all share the one write port).
    init : sequence of int, optional
        Initial row values (the modelled block as a little-endian integer),
        each in ``[0, 2**(8 * data_bytes) - 1]``.

    Attributes
    ----------
    w : In(WritePortSignature)
        The single write port (the UB port drives it; docs/spec/design.md routes local
        stores through the UB port too).
    read : In(ReadPortSignature) array of ``read_ports``
        Load/poll ports; a response carries the whole modelled block and the
        requested word (zero for a word beyond ``data_bytes``).
    idle : Out(1)
        No write, no read request and none in the pipeline: the next clock edge
        changes no register and no row (:attr:`epfabric.hw.die.Die.idle`).

    Raises
    ------
    ValueError
        On a parameter out of range.
    """

    def __init__(self, *, blocks=16, data_bytes=64, latency=2, read_ports=2, init=None):
        self.blocks = check_blocks(blocks)
        self.data_bytes = check_data_bytes(data_bytes)
        check_int("latency", latency, 1, 256)
        check_int("read_ports", read_ports, 1)
        self.latency = latency
        self.read_ports = read_ports
        self.words = data_bytes // WORD_BYTES
        if init is not None and (isinstance(init, (str, bytes)) or not hasattr(init, "__iter__")):
            raise UserTypeError(f"init must be a sequence of rows (ints), not {init!r}")
        init = [] if init is None else list(init)
        if len(init) > blocks:
            raise UserError(f"init has {len(init)} rows but the slice has only {blocks} blocks")
        # a row wider than the modelled block is an error, never truncated
        self.init = [check_word(f"init[{i}]", row, data_bytes * 8) for i, row in enumerate(init)]
        super().__init__({
            "w": In(WritePortSignature(blocks=blocks, data_bytes=data_bytes)),
            "read": In(ReadPortSignature(blocks=blocks, data_bytes=data_bytes)).array(read_ports),
            "idle": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.mem = mem = memory.Memory(shape=unsigned(self.data_bytes * 8),
                                               depth=self.blocks, init=self.init)
        wp = mem.write_port(granularity=32)
        m.d.comb += [wp.en.eq(self.w.en), wp.addr.eq(self.w.addr), wp.data.eq(self.w.data)]

        # A stage's address and word are loaded with a request only (read only with
        # ``valid``): with no request anywhere, no register changes (``idle``).
        busy = [self.w.en.any()]
        for i in range(self.read_ports):
            port = self.read[i]
            rp = mem.read_port()
            m.d.comb += port.req.ready.eq(1)
            valid, addr, word = port.req.valid, port.req.payload.addr, port.req.payload.word
            busy.append(valid)
            for stage in range(self.latency - 1):
                v = Signal(name=f"r{i}_v{stage}")
                a = Signal.like(addr, name=f"r{i}_addr{stage}")
                w = Signal.like(word, name=f"r{i}_word{stage}")
                m.d.sync += v.eq(valid)
                with m.If(valid):
                    m.d.sync += [a.eq(addr), w.eq(word)]
                valid, addr, word = v, a, w
                busy.append(v)
            m.d.comb += [rp.addr.eq(addr), rp.en.eq(valid)]
            resp_word = Signal.like(word, name=f"r{i}_resp_word")
            m.d.sync += port.resp.valid.eq(valid)
            with m.If(valid):
                m.d.sync += resp_word.eq(word)
            busy.append(port.resp.valid)
            # plain names for everything that crosses the hierarchy: Icarus
            # mis-binds escaped port names such as `rp__data$22`
            row = Signal(self.data_bytes * 8, name=f"r{i}_row")
            m.d.comb += row.eq(rp.data)
            # a case statement, not a shift: words beyond data_bytes read as zero
            selected = Signal(32, name=f"r{i}_selected")
            with m.Switch(resp_word):
                for k in range(self.words):
                    with m.Case(k):
                        m.d.comb += selected.eq(row.word_select(k, 32))
                with m.Default():
                    m.d.comb += selected.eq(0)
            # one whole-port assignment (Icarus leaves an output port that two
            # processes drive in parts undriven)
            m.d.comb += port.resp.payload.eq(Cat(row, selected))
        m.d.comb += self.idle.eq(~Cat(busy).any())
        return m


VERILOG_EXPORTS = {
    "hbm": (HBMSlice, {"blocks": 16, "data_bytes": 64, "latency": 2, "read_ports": 2}),
}
