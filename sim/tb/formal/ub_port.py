"""Formal harness of the UB port + HBM slice: a 512 B block is never torn (UBEP §3.4); every request is answered in time.

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

:class:`UBResponse` is the port's bounded response (nothing starves): any
request, any op, in any cycle, against a consumer of answers that is ready at
least once every *M* cycles (:func:`~epfabric.sim.tb.formal.fairness.fair_ready`);
every accepted request's answer (its op and block) is handed over at most
*N* = *L* + *M* cycles after its acceptance (*L*: the HBM read latency).

* ``ub_port.response`` -- *L* = 2, *M* = 3, *N* = 5, proved by k-induction.
* ``ub_port.response_tight`` -- the same claim with *N* = 4: the solver must
  find the fetch-add answered at 5 (the bound is exact).
* ``ub_port.response_unfair`` -- the same claim without the fairness
  assumption: the solver must find a consumer that starves an answer.
"""

from amaranth.asserts import AnySeq
from amaranth.hdl import Assert, Assume, Cover, Mux, Signal

from ....hw.hbm import BLOCK_BYTES, WORD_BYTES
from ....hw.ub_port import UBMemory, UBOp, UBPort, request_layout
from . import Elaborated, FormalProperty, Harness, all_equal
from .fairness import fair_ready, response_age

__all__ = ["UBAtomicity", "TwoBeatPort", "UBResponse", "PROPERTIES"]


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


class UBResponse(Harness):
    """Harness: any requests, a fair consumer of answers; each answer handed over within ``bound``.

    Why *N* = *L* + *M*: the port takes a request only when it is idle and
    its answer register is free (or being emptied), so at most one request is
    outstanding and the answer register holds only its answer. A block or
    word write is committed in its acceptance cycle and answered from the
    next (age 1); a fetch-add reads the old value through the HBM (the
    answer arrives at age *L*) and is answered from age *L* + 1. From then
    the answer waits only for ``ready``, which is low at most *M* - 1
    cycles in a row: handed over at age at most *L* + 1 + *M* - 1. Tight: a
    fetch-add whose answer appears just after a ready cycle and then meets
    *M* - 1 refusals (the cover reaches it).

    Parameters
    ----------
    patience : int or None
        *M*: the consumer is ready at least once in every ``patience``
        cycles; ``None``: no fairness (the negative control).
    bound : int or None
        *N*, the claimed response (default *L* + *M*, or *L* + 1 without
        fairness: nothing holds then).
    latency : int
        HBM read latency *L*.
    invariants : bool
        Also assert the invariants that make the claim inductive.
    """

    def __init__(self, *, patience=3, bound=None, latency=2, invariants=True):
        super().__init__()
        self.patience, self.latency, self.invariants = patience, latency, invariants
        self.bound = bound if bound is not None else latency + (patience or 1)
        self.mem = UBMemory(blocks=2, data_bytes=32, latency=latency, read_ports=1)

    def check(self, m):
        mem = self.mem
        m.submodules.mem = blk = Elaborated(mem)
        req, resp = mem.i_req, mem.o_resp
        m.d.comb += [req.valid.eq(AnySeq(1)),
                     req.payload.eq(AnySeq(len(req.payload.as_value()))),
                     # the contract: an op is one of UBOp's three (op 3 is no request)
                     Assume(req.payload.op.as_value() != 3),
                     mem.read[0].req.valid.eq(0)]
        waited = fair_ready(m, resp.ready, patience=self.patience, name="resp")
        accept = req.valid & req.ready
        handover = resp.valid & resp.ready
        pending, age = response_age(m, start=accept, done=handover, bound=self.bound, name="req")
        op_t = Signal.like(req.payload.op, name="req_op")
        addr_t = Signal.like(req.payload.addr, name="req_addr")
        with m.If(accept):
            m.d.sync += [op_t.eq(req.payload.op), addr_t.eq(req.payload.addr)]
        with m.If(handover):
            m.d.comb += [Assert(pending, "an answer nobody asked for"),
                         Assert((resp.payload.op == op_t) & (resp.payload.addr == addr_t),
                                "the answer is not the outstanding request's")]
        m.d.comb += [Assert(~pending | (age <= self.bound), "request not answered in time"),
                     # non-vacuity: the bound is met exactly by a fetch-add
                     Cover(handover & (age == self.bound) & (op_t == UBOp.FETCH_ADD))]
        if self.invariants:
            self.response_invariants(m, blk, pending, age, op_t, addr_t, waited)

    def response_invariants(self, m, blk, pending, age, op_t, addr_t, waited):
        """The port's state as the outstanding request's age makes it.

        Without these, induction starts from a port in ``RMW`` with no read in
        the HBM pipeline (it would wait forever) or an answer register full
        with nothing outstanding. Each holds from reset and is kept by one
        step of the port: ``pending`` is set exactly when the port leaves the
        idle, empty state by an acceptance.
        """
        lat = self.latency
        state = blk.sub("port")["state"]
        held = request_layout(blocks=2, data_bytes=32)(blk.sub("port")["held"])
        hbm = blk.sub("hbm")
        stages = [hbm[f"r0_v{s}"] for s in range(lat - 1)] + [self.mem.port.mem_r.resp.valid]
        resp = self.mem.o_resp
        # nothing outstanding: the port is idle, its answer register empty, no read in flight
        with m.If(~pending):
            m.d.comb += [Assert(state == 0, "inv: busy with nothing outstanding"),
                         Assert(~resp.valid, "inv: an answer with nothing outstanding")]
        with m.If(pending):
            m.d.comb += Assert(age >= 1, "inv: age of an outstanding request")
            with m.If(state == 2):
                # fetch-add: the read issued at acceptance is `age` cycles down the
                # pipeline (stage s holds it at age s + 1, the answer port at age L)
                m.d.comb += [Assert(op_t == UBOp.FETCH_ADD, "inv: RMW of a write"),
                             Assert((held.op == op_t) & (held.addr == addr_t),
                                    "inv: the port holds the outstanding request"),
                             Assert(age <= lat, "inv: RMW age"),
                             *(Assert(v == (age == s + 1), f"inv: HBM read stage {s}")
                               for s, v in enumerate(stages))]
            with m.Else():
                # not in RMW: the answer is waiting; it appeared at age 1 (a write)
                # or L + 1 (a fetch-add), and every cycle since was a not-ready one
                first = Signal(range(lat + 2), name="answer_from")
                m.d.comb += first.eq(Mux(op_t == UBOp.FETCH_ADD, lat + 1, 1))
                m.d.comb += [Assert(state == 0, "inv: state of an answered request"),
                             Assert(resp.valid, "inv: answer register of an answered request"),
                             Assert((resp.payload.op == op_t) & (resp.payload.addr == addr_t),
                                    "inv: the answer register holds the outstanding answer"),
                             Assert((age >= first) & (age - first <= waited),
                                    "inv: the answer waited only through not-ready cycles")]
        with m.If(~pending | (state != 2)):
            m.d.comb += [Assert(~v, f"inv: HBM read in flight, stage {s}")
                         for s, v in enumerate(stages)]


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
    "ub_port.response": FormalProperty(
        UBResponse, mode="prove", depth=6, cover_depth=8, expect="pass", slow=True,
        doc="UB port + HBM (read latency 2), any requests, answers taken at least once every 3 "
            "cycles: every accepted request's answer is handed over within 5 cycles "
            "(L + 1 for a fetch-add's answer, then at most M - 1 refusals)",
        params={"patience": 3},
        gtkw=("req_pending", "req_age", "req_op", "resp_waited", "mem.o_resp__valid",
              "mem.o_resp__ready")),
    "ub_port.response_tight": FormalProperty(
        UBResponse, mode="bmc", depth=7, expect="fail", slow=True,
        doc="ub_port.response claimed one cycle tighter (4): the solver finds the fetch-add "
            "answered at 5 (the claim alone, no invariants)",
        params={"patience": 3, "bound": 4, "invariants": False},
        gtkw=("req_pending", "req_age", "req_op", "resp_waited", "mem.o_resp__valid",
              "mem.o_resp__ready")),
    "ub_port.response_unfair": FormalProperty(
        UBResponse, mode="bmc", depth=8, expect="fail", slow=True,
        doc="ub_port.response without the fairness assumption: the solver finds a consumer "
            "that starves an answer past 5 cycles",
        params={"patience": None, "bound": 5, "invariants": False},
        gtkw=("req_pending", "req_age", "mem.o_resp__valid", "mem.o_resp__ready")),
}
