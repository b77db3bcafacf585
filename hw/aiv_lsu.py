"""The AIV core's load-store unit: its memory port, the store window, and UBuf word access.

Every load, store, poll, fetch-add and DataBlock transfer of an AIV core is a
request on its one memory port; the system decides from the address's rank
whether it goes to the local HBM slice or through the UB fabric to a remote
rank's atomic port (UBEP §3.3–3.4: 512 B DataBlock stores, Data-as-Flag
polling).
"""

from amaranth.hdl import Cat, Const, Module, Mux, Signal, unsigned
from amaranth.lib import data, enum, stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import bits_for, ceil_log2

from .aiv_units import MAX_UBUF_ROWS, Control, RegWrite, UBufRead, UBufWrite, issue_layout, \
    ubuf_row, ubuf_row_bits
from .isa import Cond, Opcode
from .switch import popcount
from .validate import check_bool, check_int, check_multiple, check_pow2

__all__ = ["MAX_WINDOW", "READ_EXTRA_BITS", "POLL_EXTRA_BITS", "ACK_COUNT_BITS", "MemOp",
           "ep_mask_bits", "mem_req_layout", "mem_rsp_layout", "LoadStoreUnit"]

#: Largest store window (``max_outstanding``) of a core.
MAX_WINDOW = 4095
#: Bits of the ``read_extra`` input (cycles a copy's first read waits before it is issued)
READ_EXTRA_BITS = 12
#: Bits of the ``poll_extra`` input (cycles a scalar read of global memory waits before it is
#: issued): the same width as ``read_extra``
POLL_EXTRA_BITS = READ_EXTRA_BITS
#: Bits of an ack answer's count (``data[0:ACK_COUNT_BITS]``: stores acknowledged at once).
ACK_COUNT_BITS = 16


class MemOp(enum.Enum, shape=3):
    """Operation of a core memory request (``mem_req.payload.op``)."""
    READ_WORD = 0    #: answer: the 32-bit word in ``data[0:32]``
    WRITE_WORD = 1   #: ``data[0:32]`` to the word; answer: an ack (posted store)
    READ_BLOCK = 2   #: answer: the modelled bytes of the DataBlock in ``data``
    WRITE_BLOCK = 3  #: ``data`` to the DataBlock (one 512 B atomic write); answer: an ack
    FETCH_ADD = 4    #: word += ``data[0:32]`` atomically; answer: the old word
    WRITE_MCAST = 5  #: ``data`` to the DataBlock on every die of ``mask`` (``stbm``); an ack each
    WRITE_RED = 6    #: ``data`` contributed to the DataBlock's reduction group (``stbr``); no answer


def ep_mask_bits(ranks):
    """Bits of a ``stbm``/``stbr`` die set on a machine of ``ranks`` dies: 32 (``R[rs2]``) up
    to 32 dies, 64 (``R[rs3] << 32 | R[rs2]``) up to 64."""
    return 32 if ranks <= 32 else 64


def mem_req_layout(data_bytes, mask=False):
    """Memory request: ``op``, byte ``addr``, ``data`` (and, with ``mask``, the die set of a
    ``stbm``/``stbr``: ``True`` 32 bits, or a width, :func:`ep_mask_bits`).

    ``addr`` is the 32-bit byte address as the core computed it; the system splits it into
    rank, block and word by its ``rank_bits`` (:func:`epfabric.hw.isa.address_layout`).
    """
    return data.StructLayout({"op": MemOp, "addr": unsigned(32),
                              "data": unsigned(data_bytes * 8),
                              **({"mask": unsigned(32 if mask is True else mask)} if mask else {})})


def mem_rsp_layout(data_bytes):
    """Memory answer: the request's ``op`` and ``data`` (word in bits 0..31)."""
    return data.StructLayout({"op": MemOp, "data": unsigned(data_bytes * 8)})


def _holds(cond, x, y):
    """``x cond y`` (unsigned): a ``poll``'s test of the word it read."""
    return Mux(cond == Cond.EQ, x == y, Mux(cond == Cond.NE, x != y,
               Mux(cond == Cond.LT, x < y, Mux(cond == Cond.LE, x <= y,
                   Mux(cond == Cond.GT, x > y, x >= y)))))


class LoadStoreUnit(wiring.Component):
    """Memory requests, outstanding stores and UBuf word access of an AIV core.

    Executes ``lw ldb ldbc fadd poll sw stb fence ulw usw`` (and, with ``ep``,
    ``stbm stbr``). Its wait state (:class:`~epfabric.hw.aiv_units.Control`)
    is the core's ``MEM``: a read waits there for its answer.

    * **Reads** (``lw``, ``ldb``, ``ldbc``, ``fadd``, each read of a
      ``poll``) first wait in ``RUN`` — a scalar read ``poll_extra`` cycles, a
      copy's first block ``read_extra`` — then offer their request until
      ``mem_req`` takes it and enter the wait state; the answer writes
      ``R[rd]`` (a block: UBuf row ``R[ru]``) and the core moves on. A
      ``poll`` whose word fails its condition goes back to ``RUN`` and reads
      again (waiting ``poll_extra`` again). Both are what an Ascend AIV pays
      beyond the memory's own access time, for two different paths:

      - ``poll_extra``: a **scalar read** of global memory (``lw``, ``fadd``,
        each read of a ``poll``). Ascend's Scalar unit reads GM through its
        core's DataCache, and a word another core may have written is read
        after a ``DataCacheCleanAndInvalid``
        (https://www.hiascend.com/document/detail/en/CANNCommunityEdition/900/API/ascendcopapi/atlasascendc_api_07_00026.html,
        https://www.hiascend.com/document/detail/zh/CANNCommunityEdition/83RC1alpha002/opdevg/Ascendcopdevg/atlas_ascendc_10_00030.html).
        A fetch-add is a scalar GM access too, not a ``DataCopy``: Ascend C's
        ``AtomicAdd`` on a GM address returns the word's old value, "原子操作涉及
        标量计算", and needs a synchronisation with the MTE2/MTE3 copies that
        touch the same GM
        (https://www.hiascend.com/document/detail/zh/canncommercial/latest/API/ascendcopapi/atlasascendc_api_07_00259.html;
        documented for Atlas 350, the kernels' ``fadd`` stands for it).
      - ``read_extra``: the start of a **copy** from global memory into the
        Unified Buffer (``ldb``: an MTE2 ``DataCopy``, which bypasses the
        DataCache, "没有Cache一致性问题",
        https://www.hiascend.com/document/detail/zh/CANNCommunityEdition/80RC3alpha003/apiref/opdevgapi/atlasascendc_api_07_0170.html).
        ``ldbc`` does not pay it: the next block of a copy already started
        (one ``DataCopy`` moves a whole 7 KiB token, its start paid once).

      Stores are posted and pay neither.
    * **Stores** are posted: ``sw``/``stb`` stall while ``mem_req`` is not
      ready or ``max_outstanding`` stores are unacknowledged; an ``stb`` also
      while ``store_window`` are. The window is the sender's staging buffers,
      each freed when its block's remote write completes; the count is the
      one ``outstanding`` (word stores in flight take window too). An ack
      answer (op ``WRITE_WORD`` or ``WRITE_BLOCK``) acknowledges
      ``data[0:ACK_COUNT_BITS]`` stores at once: the die coalesces the acks
      of remote stores (:mod:`epfabric.hw.router`). ``fence`` stalls until no
      store is outstanding (an ack is counted the cycle after it arrives).
    * **``stbm``/``stbr``** (``ep``): the block of UBuf row ``R[ru]`` to
      address ``R[rs1]`` with the die set ``R[rs2]`` (and, past 32 dies,
      ``R[rs3] << 32 | R[rs2]``). A ``stbm`` waits until the store window has
      room for an ack from every die of its mask (bits ``ep_dies`` and up name
      no die and are not counted); a ``stbr`` is posted (never acknowledged).
    * **``ulw``/``usw``**: word ``(eff >> 2) % 128`` of UBuf row
      ``(eff >> 9) % ubuf_rows``, one cycle; words beyond ``data_bytes`` read
      0 and are not written.

    Parameters
    ----------
    ubuf_rows : int
        UBuf rows (power of two, 1..:data:`~epfabric.hw.aiv_units.MAX_UBUF_ROWS`).
    data_bytes : int
        Modelled bytes of a block (multiple of 32, 32..512).
    max_outstanding : int
        Posted stores that may await their ack (1..:data:`MAX_WINDOW`).
    ep : bool
        Execute ``stbm``/``stbr`` (requests carry a die ``mask``).
    ep_dies : int
        The dies a ``stbm``'s mask can name (1..64): acks are owed for those.

    Attributes
    ----------
    issue : In(issue_layout)
        The instruction and its operands.
    ctl : Out(Control())
        Handshake with the core's FSM; the wait state is ``MEM``.
    reg_w : Out(RegWrite())
        ``R[rd]`` of ``ulw`` and of a read's answer.
    ubuf_r, ubuf_w : Out(UBufRead(...)), Out(UBufWrite(...))
        UBuf ports: an ``ulw`` word, the row an ``stb``/``stbm``/``stbr``
        sends; a ``usw`` word, the row an ``ldb``/``ldbc`` fills.
    mem_req : Out(stream.Signature(mem_req_layout(data_bytes, mask)))
        Memory requests (:class:`MemOp`).
    mem_rsp : In(stream.Signature(mem_rsp_layout(data_bytes)))
        One answer per request, acks included; ``ready`` is always 1.
    store_window : In(range(max_outstanding + 1), init=max_outstanding)
        Block stores issue only while fewer stores than this are unacknowledged.
    read_extra : In(READ_EXTRA_BITS)
        Cycles a copy's first read (``ldb``) waits before its request is offered.
    poll_extra : In(POLL_EXTRA_BITS)
        Cycles a scalar read of global memory (``lw``, ``fadd``, each read of a
        ``poll``) waits before its request is offered.
    outstanding : Out(bits_for(max_outstanding))
        Posted stores not yet acknowledged.
    waiting, wait_addr : Out(1), Out(32)
        Blocked on memory (in ``MEM``, a ``poll``, a ``fence`` with stores
        outstanding) and the address waited on (0 for a fence).

    Raises
    ------
    TypeError, ValueError
        A parameter has the wrong type or is out of range (the message names it).
    """

    def __init__(self, *, ubuf_rows=4, data_bytes=64, max_outstanding=15, ep=False, ep_dies=32):
        check_pow2("ubuf_rows", ubuf_rows, 1, MAX_UBUF_ROWS)
        check_multiple("data_bytes", data_bytes, 32, 32, 512)
        check_int("max_outstanding", max_outstanding, 1, MAX_WINDOW)
        self.ubuf_rows, self.data_bytes, self.max_outstanding = ubuf_rows, data_bytes, max_outstanding
        self.ep = check_bool("ep", ep)
        self.ep_dies = check_int("ep_dies", ep_dies, 1, 64)
        ubuf = dict(rows=ubuf_rows, data_bytes=data_bytes)
        super().__init__({
            "issue": In(issue_layout),
            "ctl": Out(Control()),
            "reg_w": Out(RegWrite()),
            "ubuf_r": Out(UBufRead(**ubuf)),
            "ubuf_w": Out(UBufWrite(**ubuf)),
            "mem_req": Out(stream.Signature(mem_req_layout(
                data_bytes, mask=ep and ep_mask_bits(ep_dies)))),
            "mem_rsp": In(stream.Signature(mem_rsp_layout(data_bytes))),
            "store_window": In(range(max_outstanding + 1), init=max_outstanding),
            "read_extra": In(READ_EXTRA_BITS),
            "poll_extra": In(POLL_EXTRA_BITS),
            "outstanding": Out(bits_for(max_outstanding)),
            "waiting": Out(1),
            "wait_addr": Out(32),
        })

    def elaborate(self, platform):
        m = Module()
        insn, ctl, ua, uw = self.issue, self.ctl, self.ubuf_r, self.ubuf_w
        a, b, c, eff = insn.a, insn.b, insn.c, insn.eff
        nwords = self.data_bytes // 4
        word_of_eff = eff[2:9]

        def row_of(addr):
            return ubuf_row(addr, self.ubuf_rows)

        def write_reg(idx, value):
            m.d.comb += [self.reg_w.en.eq(1), self.reg_w.addr.eq(idx), self.reg_w.data.eq(value)]

        # --- outstanding stores -------------------------------------------------------------
        req, rsp = self.mem_req.payload, self.mem_rsp.payload
        m.d.comb += self.mem_rsp.ready.eq(1)
        rsp_ack = self.mem_rsp.valid & ((rsp.op == MemOp.WRITE_WORD) | (rsp.op == MemOp.WRITE_BLOCK))
        rsp_data = self.mem_rsp.valid & ~rsp_ack
        store_taken = Signal()
        outstanding = self.outstanding
        acked = Signal.like(outstanding)
        m.d.comb += acked.eq(Mux(rsp_ack, rsp.data[:ACK_COUNT_BITS], 0))
        # stores taken this cycle, in acks owed: 1 for sw/stb, a stbm one per die of its mask,
        # a stbr none
        store_count = Signal(range(self.ep_dies + 1) if self.ep else 1, name="store_count")
        m.d.sync += outstanding.eq(outstanding + store_count - acked)
        can_store = outstanding < self.max_outstanding
        can_block = can_store & (outstanding < self.store_window)

        # --- the read waiting for its answer (latched as it is offered) ---------------------
        w_op = Signal(Opcode, init=Opcode.HALT)
        w_rd = Signal(4)
        w_row = Signal(ubuf_row_bits(self.ubuf_rows))
        w_cond = Signal(Cond)
        w_val = Signal(32)
        w_addr = Signal(32)
        r_wait = Signal(READ_EXTRA_BITS, name="r_wait")   # cycles this read waited (its knob's)
        # a scalar read of global memory (lw, fadd, each read of a poll) waits poll_extra; a
        # copy's first block (ldb) read_extra (the class docstring)
        scalar_read = (insn.op == Opcode.LW) | (insn.op == Opcode.FADD) | (insn.op == Opcode.POLL)

        # --- RUN: issue ---------------------------------------------------------------------
        with m.If(ctl.run):
            with m.Switch(insn.op):
                with m.Case(Opcode.ULW):
                    m.d.comb += ua.addr.eq(row_of(eff))
                    write_reg(insn.rd, Mux(word_of_eff < nwords,
                                           ua.data.word_select(word_of_eff[:ceil_log2(nwords)], 32),
                                           0))
                with m.Case(Opcode.USW):
                    m.d.comb += [uw.addr.eq(row_of(eff)), uw.data.eq(b.replicate(nwords))]
                    with m.If(word_of_eff < nwords):
                        m.d.comb += uw.en.eq(Const(1, nwords) << word_of_eff[:ceil_log2(nwords)])
                with m.Case(Opcode.SW, Opcode.STB):
                    m.d.comb += [self.mem_req.valid.eq(Mux(insn.op == Opcode.SW,
                                                           can_store, can_block)),
                                 req.addr.eq(eff)]
                    with m.If(insn.op == Opcode.SW):
                        m.d.comb += [req.op.eq(MemOp.WRITE_WORD), req.data.eq(b)]
                    with m.Else():
                        m.d.comb += [req.op.eq(MemOp.WRITE_BLOCK), ua.addr.eq(row_of(insn.u)),
                                     req.data.eq(ua.data)]
                    m.d.comb += [store_taken.eq(self.mem_req.valid & self.mem_req.ready),
                                 store_count.eq(store_taken), ctl.hold.eq(~store_taken)]
                if self.ep:
                    with m.Case(Opcode.STBM, Opcode.STBR):
                        n_acks = Signal(range(self.ep_dies + 1), name="stbm_acks")
                        dies = Cat(b, c) if ep_mask_bits(self.ep_dies) > 32 else b
                        m.d.comb += n_acks.eq(popcount(dies[k] for k in range(self.ep_dies)))
                        is_m = insn.op == Opcode.STBM
                        room = (outstanding + n_acks <= self.max_outstanding) & \
                            (outstanding < self.store_window)
                        m.d.comb += [self.mem_req.valid.eq(Mux(is_m, room, 1)), req.addr.eq(a),
                                     req.mask.eq(dies),
                                     req.op.eq(Mux(is_m, MemOp.WRITE_MCAST, MemOp.WRITE_RED)),
                                     ua.addr.eq(row_of(insn.u)), req.data.eq(ua.data)]
                        m.d.comb += [store_taken.eq(self.mem_req.valid & self.mem_req.ready),
                                     store_count.eq(Mux(store_taken & is_m, n_acks, 0)),
                                     ctl.hold.eq(~store_taken)]
                with m.Case(Opcode.LW, Opcode.LDB, Opcode.LDBC, Opcode.FADD, Opcode.POLL):
                    # offered once it waited its knob's cycles (and kept valid until taken);
                    # a poll's every read waits again; an ldbc continues a copy whose start
                    # was paid, so it does not wait
                    extra = Mux(scalar_read, self.poll_extra, self.read_extra)
                    issue = (r_wait >= extra) | (insn.op == Opcode.LDBC)
                    with m.If(~issue):
                        m.d.sync += r_wait.eq(r_wait + 1)
                    m.d.comb += [self.mem_req.valid.eq(issue), req.addr.eq(eff), ctl.hold.eq(1)]
                    with m.Switch(insn.op):
                        with m.Case(Opcode.LDB, Opcode.LDBC):
                            m.d.comb += req.op.eq(MemOp.READ_BLOCK)
                        with m.Case(Opcode.FADD):
                            m.d.comb += [req.op.eq(MemOp.FETCH_ADD), req.data.eq(b)]
                        with m.Default():
                            m.d.comb += req.op.eq(MemOp.READ_WORD)
                    with m.If(issue & self.mem_req.ready):
                        m.d.comb += ctl.enter.eq(1)
                        m.d.sync += [w_op.eq(insn.op), w_rd.eq(insn.rd),
                                     r_wait.eq(0),
                                     w_row.eq(row_of(insn.u)), w_cond.eq(insn.cond),
                                     w_val.eq(b), w_addr.eq(eff)]
                with m.Case(Opcode.FENCE):
                    m.d.comb += ctl.hold.eq(outstanding != 0)

        # --- MEM: the answer -----------------------------------------------------------------
        with m.If(ctl.active & rsp_data):
            word = rsp.data[:32]
            m.d.comb += ctl.leave.eq(1)
            with m.Switch(w_op):
                with m.Case(Opcode.LDB, Opcode.LDBC):
                    m.d.comb += [uw.addr.eq(w_row), uw.data.eq(rsp.data),
                                 uw.en.eq((1 << nwords) - 1), ctl.advance.eq(1)]
                with m.Case(Opcode.POLL):   # read again unless satisfied
                    with m.If(_holds(w_cond, word, w_val)):
                        write_reg(w_rd, word)
                        m.d.comb += ctl.advance.eq(1)
                with m.Default():
                    write_reg(w_rd, word)
                    m.d.comb += ctl.advance.eq(1)

        # --- watchdog view -------------------------------------------------------------------
        run_poll = ctl.run & (insn.op == Opcode.POLL)
        run_fence = ctl.run & (insn.op == Opcode.FENCE) & (outstanding != 0)
        m.d.comb += [self.waiting.eq(ctl.active | run_poll | run_fence),
                     self.wait_addr.eq(Mux(ctl.active, w_addr, Mux(run_poll, eff, 0)))]
        return m


VERILOG_EXPORTS = {
    "aiv_lsu": (LoadStoreUnit, {"ubuf_rows": 2, "data_bytes": 32, "max_outstanding": 7}),
}
