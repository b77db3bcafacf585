"""A die: AIV cores, one UB memory (HBM slice + 512 B atomic UB port) and one fabric port.

docs/spec/design.md block 6. UBEP §3.3–3.4: the AIV cores of a die issue word stores,
DataBlock stores, fetch-adds, loads and polls against a global address space
``rank[31:24] block[23:9] word[8:2]`` (:func:`epfabric.hw.isa.address_layout`; a machine
with ``rank_bits`` < 8 narrows the rank field to the top ``rank_bits`` and widens the block's).
A :class:`Die` is its cores (:class:`~epfabric.hw.aiv_core.AIVCore`), their
enables and status outputs, its UB memory
(:class:`~epfabric.hw.ub_port.UBMemory`) and a
:class:`~epfabric.hw.router.DieRouter`, which routes every core request by
``addr.rank``: local stores and fetch-adds through the die's own atomic UB
port, local loads/polls to the core's own HBM read port, remote requests as
REQ flits (:func:`flit_layout`) to the destination die, which applies them to
its UB memory and answers with RSP flits. Routing, arbitration and the
request/response deadlock argument (and the ``rsp_depth`` bound) are
documented in :mod:`epfabric.hw.router`.

Cycle costs (HBM read latency *L* = ``hbm_latency``; *L*\\ :sub:`core` as in
:class:`~epfabric.hw.aiv_core.AIVCore`, no contention)
---------------------------------------------------------------------------------------
=========================  =========================================================
local ``sw`` / ``stb``     1 cycle (posted); committed at the end of the issue
                           cycle (visible to a load issued the next cycle); its
                           ack reaches the core's ``mem_rsp`` one cycle later
local ``lw``               *L*\\ :sub:`core` = *L* → ``1 + L`` cycles
local ``fadd``             *L*\\ :sub:`core` = *L* + 1 → ``2 + L`` cycles
local ``poll``             ``1 + L`` cycles per read
remote store (die part)    0 cycles on the way out (the core's request is the
                           ``tx`` flit in its issue cycle); committed in the cycle
                           the flit is valid on the destination's ``rx`` (0 cycles).
                           So a remote store is visible exactly the fabric's class
                           latency after its issue. Its ack leaves the
                           destination 2 cycles after the commit (UB answer
                           register + RSP queue) and is handed to the core in
                           the cycle it is valid on ``rx``.
remote ``lw``/``fadd``     fabric there + *L* (+1 fetch-add) + 1 (RSP queue) +
                           fabric back.
``bar``                    until every running core of the die is at a ``bar``
                           (halted and never-started cores are not waited for),
                           then the ``syncall_cycles`` knob more: the cores leave
                           together, the last to arrive after ``syncall_cycles + 1``
                           cycles (UBEP §2.3: CANN's SyncAll is a barrier over the
                           die's AIVs; its cost is the preset's ``syncall_ns``)
=========================  =========================================================

(The router's own share of these costs: :mod:`epfabric.hw.router`.)

Host port (used only while the cores are stopped)
-------------------------------------------------
:class:`~epfabric.hw.host.HostSignature` without ``rank``: ``host.we``
writes, at the clock edge, an instruction word (target IMEM), an HBM word
(HBM: a UB WORD_WRITE, committed at that edge), a whole block (HBM_BLOCK:
a UB BLOCK_WRITE of ``host.wrow``), instruction word ``addr`` of every core
``i`` with ``host.wmask[i]`` (IMEM_ROW: word ``i`` of ``host.wrow``; the
die's cores are row window 0) or a core's enable bit (ENABLE). ``host.re`` reads the HBM word at ``host.addr``:
``host.rvalid``/``host.rdata`` are valid ``hbm_latency`` cycles later.
A CTRL write sets the die's runtime knob ``addr`` (:data:`KNOBS`) to ``wdata``.
"""

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import bits_for

from .aiv_core import (MAX_WINDOW, POLL_EXTRA_BITS, READ_EXTRA_BITS, VECTOR_EXTRA_BITS, AIVCore,
                       trace_layout)
from .arbiter import RoundRobin
from .host import HostSignature, HostTarget
from .inc_engine import inc_flit_layout
from .instances import SharedModule
from .router import DieRouter, FlitKind, flit_layout, rsp_depth_bound
from .isa import BLOCK_BYTES, RANK_BITS, check_rank_bits
from .signature import ParamSignature, check_other_params
from .ub_port import UBMemory, UBOp
from .validate import UserError, check_bool, check_int, check_pow2

__all__ = ["FlitKind", "flit_layout", "Die", "KNOBS", "SYNCALL_BITS", "INJECT_DEN", "INJECT_BITS",
           "check_knob"]

#: The die's runtime knobs: control register (host target CTRL, ``addr``) of each. A knob
#: is a timing setting the host writes before a run instead of an elaboration constant, so
#: one build serves every value (``epfabric calibrate`` sweeps them); each resets to the
#: value that gives the elaborated behaviour, so a run that writes none is unchanged.
#:
#: ``store_window``: block stores a core may have unacknowledged (1..``max_outstanding``,
#: reset ``max_outstanding``): the sender's staging buffers, each freed when its block's
#: remote write completes (:class:`~epfabric.hw.aiv_core.AIVCore` ``store_window``).
#:
#: ``syncall_cycles``: cycles the die's barrier holds its cores after the last one arrived
#: (0..2**24 - 1, reset 0): the cost of a hardware SyncAll (``bar``).
#:
#: ``inject_rate``: the die's injection limit, in 1/:data:`INJECT_DEN` bytes per cycle
#: (0..2**20 - 1, reset 0 = no limit): every flit the die sends into the fabric pays its
#: bytes (a DataBlock 512, any other flit ``small_bytes``) from a credit that grows by the
#: rate each cycle and holds at most two blocks' worth, as a link's limiter does
#: (:class:`~epfabric.hw.link.Link`); the links keep their own rate.
#:
#: ``vector_extra``: cycles every vector instruction of the die's cores waits before its first
#: beat (0..2**12 - 1, reset 0): a vector op's issue and pipe-drain cost apart from its width
#: (:class:`~epfabric.hw.aiv_core.AIVCore` ``vector_extra``).
#:
#: ``read_extra``: cycles a copy's first read of the die's cores (``ldb``; not ``ldbc``, a
#: started copy's next block) waits before its request is offered (0..2**12 - 1, reset 0):
#: an AIV's MTE2 copy start from global memory beyond the memory's access time
#: (:class:`~epfabric.hw.aiv_core.AIVCore` ``read_extra``).
#:
#: ``poll_extra``: cycles a scalar read of global memory of the die's cores (``lw``,
#: ``fadd``, each read of a ``poll``) waits before its request is offered (0..2**12 - 1,
#: reset 0): the Scalar unit's read of GM past its DataCache, beyond the memory's access
#: time (:class:`~epfabric.hw.aiv_lsu.LoadStoreUnit` says which reads are which, citing
#: Ascend's documentation).
KNOBS = {"store_window": 0, "syncall_cycles": 1, "inject_rate": 2, "vector_extra": 3,
         "read_extra": 4, "poll_extra": 5}

#: Bits of the ``syncall_cycles`` knob (and of the barrier's wait counter)
SYNCALL_BITS = 24
#: ``inject_rate`` is in bytes per cycle times this; its knob has :data:`INJECT_BITS` bits
INJECT_DEN, INJECT_BITS = 1024, 20


def check_knob(name, value, max_outstanding):
    """``value`` if it is a setting of knob ``name`` (:data:`KNOBS`) that a die whose cores
    have ``max_outstanding`` stores of window can hold; ``UserError`` naming it otherwise."""
    if name not in KNOBS:
        raise UserError(f"knob must be one of {', '.join(KNOBS)}, not {name!r}")
    lo, hi = {"store_window": (1, max_outstanding),
              "syncall_cycles": (0, (1 << SYNCALL_BITS) - 1),
              "inject_rate": (0, (1 << INJECT_BITS) - 1),
              "vector_extra": (0, (1 << VECTOR_EXTRA_BITS) - 1),
              "read_extra": (0, (1 << READ_EXTRA_BITS) - 1),
              "poll_extra": (0, (1 << POLL_EXTRA_BITS) - 1)}[name]
    return check_int(name, value, lo, hi)


class Die(wiring.Component):
    """AIV cores + UB memory + one fabric port (docs/spec/design.md block 6; UBEP §3.3–3.4).

    See the module docstring for cycle costs and the host port, and
    :class:`~epfabric.hw.router.DieRouter` for routing, arbitration and
    deadlock avoidance.

    Parameters
    ----------
    rank : int or None
        This die's rank (0..ranks-1), a constant; ``None`` adds an input port
        ``rank_in`` instead, so one Verilog module serves every rank (see
        :class:`epfabric.hw.system.System` ``shared``).
    ranks : int
        Ranks in the system (sizes the flit's ``dst``/``src``), 1..256.
    aivs : int
        AIV cores on the die, 1..256.
    imem_depth, ubuf_rows, data_bytes, lanes, width, max_outstanding
        Passed to every :class:`~epfabric.hw.aiv_core.AIVCore` (core ``i`` has
        ``core_id = i``: ``csrr core_id`` is the core's index on its die).
    hbm_blocks : int
        DataBlocks in the die's HBM slice (a power of two; a block address
        is taken modulo ``hbm_blocks``).
    rank_bits : int
        Width of an address's rank field (1..8, default 8; at most
        ``2**(23 - rank_bits)`` blocks: :func:`epfabric.hw.isa.address_layout`).
    hbm_latency : int
        HBM read latency *L* in cycles.
    rsp_depth : int or None
        Entries of the router's RSP queue (data answers to incoming loads and
        fetch-adds; store acks are counted, not queued). ``None``: the
        deadlock-free bound ``(ranks - 1) * aivs`` (at least 2;
        :func:`~epfabric.hw.router.rsp_depth_bound`).
    core_module : SharedModule or None
        Internal, set by :class:`~epfabric.hw.system.System` ``shared``:
        instantiate every core as an instance of the shared Verilog module
        ``core_module`` (:class:`~epfabric.hw.instances.SharedModule` whose part is an
        ``AIVCore(core_id=None)`` of :meth:`core_params_of`) with ``core_id_in`` driven by
        the constant ``i``, instead of elaborating ``AIVCore(core_id=i)``: one core module
        per die instead of one per core id. ``None`` (the default, and what Amaranth's
        simulator runs): real :class:`~epfabric.hw.aiv_core.AIVCore` submodules.
    non_atomic_port : bool
        Build the UB port with ``non_atomic=True`` (64 B beats, 8 cycles per
        block, flag field first; :class:`~epfabric.hw.ub_port.UBPort`): a
        negative control that lets a reader see a torn block (UBEP §3.4).
        Default ``False``: the atomic port, and the Verilog is unchanged.
    ub_counters : bool
        Add ``ub_blocks`` and ``ub_words``: the requests the die's UB port committed since
        the run's ``host.start`` (counted in the cycle the port's answer is taken). Default
        ``False``: none, and the Verilog is unchanged (the system's counter sampler sets it).
    ep : bool
        Cores with ``stbm``/``stbr`` and a router that sends them into the fabric as
        multicast blocks and reduction contributions (:class:`~epfabric.hw.system.System`
        ``ep_inc``). Default ``False``: the Verilog is unchanged.
    nic : dict or None
        The INC-MoE machine's die (docs/spec/kernels.md §2.6): ``None`` (default) builds
        none of what follows. A dict of :class:`~epfabric.hw.inc_nic.IncNic`
        parameters (``mode``, ``tmax``, ``xg_base``, ``z_base``, ``rsin_base``)
        adds the die's network interface — one more requester on the router
        (index ``aivs``; it only addresses this die's HBM) — with ports
        ``inc_tx``/``inc_rx`` to the INC star, builds every core with
        ``inc=True``, arbitrates the cores' posts round-robin into the
        interface, feeds its counters back to every core, and adds the die's
        cube unit.
    fp, fp_lanes, fp_latency, fp_repeat_cycles, fp_fused
        Cores with the floating-point vector instructions and the unit's shape
        (:class:`~epfabric.hw.aiv_core.AIVCore`). Default ``fp=False``: the Verilog is
        unchanged, and the other four are not used.
    cube_cycles : int
        With ``nic``: cycles the cube unit spends on one ``cube`` row (>= 1).
        The unit serves the cores' requests one at a time, round-robin: a
        request granted in cycle *t* (the first cycle its core raises
        ``cube_req`` when the unit is free) completes with ``cube_done`` in
        cycle *t* + ``cube_cycles`` - 1; the next request can be granted in
        the cycle after.

    Attributes
    ----------
    tx : Out(stream.Signature(flit_layout(...)))
        Flits into the fabric.
    rx : In(stream.Signature(flit_layout(...)))
        Flits from the fabric (REQ for this die, RSP for its cores).
    host : In(HostSignature(cores=aivs))
        Host port (:mod:`epfabric.hw.host`; targets IMEM, HBM and ENABLE);
        ``host.start`` pulses start every enabled core at pc 0; a read's
        answer is valid ``hbm_latency`` cycles after ``host.re``.
    enabled : Out(aivs)
        Core enable bits (reset 0: a core runs only after the host enables it).
    core_pc, core_halted, core_fault, core_waiting, core_wait_addr, core_outstanding : Out array
        Per-core status; ``core_halted`` is 1 for a disabled core.
    trace : Out(stream.Signature(trace_layout)).array(aivs)
        Every core's MARK stream (``core`` is the core's index on the die).
    trace_event : Out(16).array(aivs)
        Every core's MARK event id (``trace[i].payload.event``): what the
        system's trace merge reads (it stamps its own core id and cycle).
    done : Out(1)
        Every core halted (or disabled) with no store outstanding: the
        system's run is over when every die's is. One bit a die instead of
        the cores' status, so the native backend's glue reads few bits a die.
    idle : Out(1) (without ``nic``)
        No core running (each halted or never started) and none with a store
        outstanding, no host access, and the router and the UB memory idle (nothing
        offered, queued or in a pipeline; their ``idle``): the next clock edge changes
        no register and no memory of the die, so the native backend skips it
        (:mod:`epfabric.sim.backends.native`; proved by tests/hw/test_die.py, which
        checks every register and memory write of a die whenever it is 1). A halted
        core's cycle counter stops with it (:class:`~epfabric.hw.aiv_core.AIVCore`).
    inc_tx, inc_rx, inc_counts (``nic`` only)
        The interface's flit streams and its AG, RS and barrier counters.
    ub_blocks, ub_words : Out(32) (``ub_counters`` only)
        Since the last ``host.start``: the UB port's committed BLOCK_WRITEs, and its committed
        WORD_WRITEs and FETCH_ADDs (local and remote stores alike; each request once, however
        many beats a non-atomic port takes). Wrap at 2**32.

    Raises
    ------
    TypeError, ValueError
        On a parameter of the wrong type or out of range (named in the message).
    """

    def __init__(self, *, rank=0, ranks=1, aivs=1, imem_depth=64, ubuf_rows=2, hbm_blocks=16,
                 data_bytes=32, lanes=4, width=16, max_outstanding=4, hbm_latency=2,
                 rsp_depth=None, core_module=None, non_atomic_port=False, nic=None, cube_cycles=1,
                 rank_bits=RANK_BITS, small_bytes=32, ub_counters=False, ep=False, fp=False,
                 fp_lanes=4, fp_latency=None, fp_repeat_cycles=None, fp_fused=False):
        if core_module is not None and (not isinstance(core_module, SharedModule)
                                        or core_module.part is None):
            raise TypeError(f"core_module must be a SharedModule with a part, or None, not "
                            f"{core_module!r}")
        self.core_module = core_module
        check_int("ranks", ranks, 1, 256)
        if rank is not None:
            check_int("rank", rank, 0, ranks - 1)
        check_int("aivs", aivs, 1, 256)
        check_pow2("hbm_blocks", hbm_blocks, 1, 1 << 23)
        self.rank_bits = check_rank_bits(rank_bits, ranks, hbm_blocks)
        check_int("max_outstanding", max_outstanding, 1, MAX_WINDOW)
        check_int("hbm_latency", hbm_latency, 1, 256)
        self.small_bytes = check_int("small_bytes", small_bytes, 1, BLOCK_BYTES)
        if nic is not None:
            from .inc_nic import IncNic
            if not isinstance(nic, dict):
                raise TypeError(f"nic must be a dict of IncNic parameters or None, not {nic!r}")
            check_int("cube_cycles", cube_cycles, 1, 1 << 16)
            self.nic = IncNic(ranks=ranks, data_bytes=data_bytes, hbm_blocks=hbm_blocks,
                              rank_bits=rank_bits, **nic)
        else:
            self.nic = None
        self.nic_params, self.cube_cycles = nic, cube_cycles
        requesters = aivs + (nic is not None)
        if rsp_depth is None:
            rsp_depth = rsp_depth_bound(ranks, requesters)
        check_int("rsp_depth", rsp_depth, 1)
        self.non_atomic_port = check_bool("non_atomic_port", non_atomic_port)
        self.ub_counters = check_bool("ub_counters", ub_counters)
        self.ep = check_bool("ep", ep)
        check_bool("fp", fp)
        if ep and nic is not None:
            raise UserError("ep (in-network EP stores) and nic (INC-MoE posts) are two "
                            "machines: give one")
        self.rank, self.ranks, self.aivs = rank, ranks, aivs
        self.hbm_blocks, self.data_bytes, self.hbm_latency = hbm_blocks, data_bytes, hbm_latency
        self.imem_depth, self.max_outstanding, self.rsp_depth = imem_depth, max_outstanding, rsp_depth
        core_params = self.core_params_of(dict(
            ranks=ranks, imem_depth=imem_depth, ubuf_rows=ubuf_rows, data_bytes=data_bytes,
            lanes=lanes, width=width, max_outstanding=max_outstanding, nic=nic, ep=ep,
            fp=check_bool("fp", fp), fp_lanes=fp_lanes, fp_latency=fp_latency,
            fp_repeat_cycles=fp_repeat_cycles, fp_fused=fp_fused))
        self.core_params = core_params
        if core_module is None:
            self.cores = [AIVCore(core_id=i, **core_params) for i in range(aivs)]
        else:
            # Verilog with one shared core module: each core is an instance of it,
            # wired through an interface object with the core's signature.
            signature = core_module.part.signature
            self.cores = [signature.create(path=(f"core{i}",)) for i in range(aivs)]
        self.mem = UBMemory(blocks=hbm_blocks, data_bytes=data_bytes, latency=hbm_latency,
                            read_ports=requesters + 1, non_atomic=non_atomic_port)
        self.requesters = requesters
        self.router = DieRouter(ranks=ranks, aivs=requesters, hbm_blocks=hbm_blocks,
                                data_bytes=data_bytes,
                                hbm_latency=hbm_latency, rsp_depth=rsp_depth,
                                max_outstanding=max_outstanding, rank_bits=rank_bits, ep=ep)
        self.flit = self.router.flit
        super().__init__(self.signature_for(
            rank=rank, ranks=ranks, aivs=aivs, imem_depth=imem_depth, hbm_blocks=hbm_blocks,
            data_bytes=data_bytes, max_outstanding=max_outstanding, nic=nic,
            ub_counters=ub_counters, ep=ep))

    @classmethod
    def signature_for(cls, *, rank=0, ranks=1, aivs=1, imem_depth=64, hbm_blocks=16,
                      data_bytes=32, max_outstanding=4, nic=None, ub_counters=False, ep=False,
                      **others):
        """The signature of a die of these parameters (the constructor's), without building
        it: a :class:`~epfabric.hw.signature.ParamSignature` with ``rank``, ``ranks``,
        ``aivs`` and ``data_bytes``. The parameters that shape no port are the
        constructor's to check."""
        check_other_params(cls, others)
        check_int("ranks", ranks, 1, 256)
        if rank is not None:
            check_int("rank", rank, 0, ranks - 1)
        check_int("aivs", aivs, 1, 256)
        check_int("max_outstanding", max_outstanding, 1, MAX_WINDOW)
        if nic is not None and not isinstance(nic, dict):
            raise TypeError(f"nic must be a dict of IncNic parameters or None, not {nic!r}")
        flit = flit_layout(ranks, aivs + (nic is not None), data_bytes, hbm_blocks, ep=ep)
        inc_flit = None if nic is None else stream.Signature(
            inc_flit_layout(ranks=ranks, tmax=nic["tmax"], lanes=data_bytes // 4))
        return ParamSignature({
            "tx": Out(stream.Signature(flit)),
            "rx": In(stream.Signature(flit)),
            "host": In(HostSignature(cores=aivs, row_bits=8 * data_bytes)),
            "enabled": Out(aivs),
            "core_pc": Out(range(imem_depth)).array(aivs),
            "core_halted": Out(1).array(aivs),
            "core_fault": Out(1).array(aivs),
            "core_waiting": Out(1).array(aivs),
            "core_wait_addr": Out(32).array(aivs),
            "core_outstanding": Out(bits_for(max_outstanding)).array(aivs),
            "trace": Out(stream.Signature(trace_layout)).array(aivs),
            "trace_event": Out(16).array(aivs),
            "done": Out(1),
            **({"rank_in": In(range(max(2, ranks)))} if rank is None else {}),
            **({"idle": Out(1)} if nic is None else {}),
            **({"inc_tx": Out(inc_flit), "inc_rx": In(inc_flit),
                "inc_counts": Out(32).array(3)} if nic is not None else {}),
            **({"ub_blocks": Out(32), "ub_words": Out(32)} if ub_counters else {}),
        }, rank=rank, ranks=ranks, aivs=aivs, data_bytes=data_bytes)

    @staticmethod
    def core_params_of(params):
        """The :class:`~epfabric.hw.aiv_core.AIVCore` parameters (but ``core_id``) of the cores
        of a die with constructor parameters ``params`` (``imem_depth``, ``ubuf_rows``,
        ``data_bytes``, ``lanes``, ``width``, ``max_outstanding``, ``ranks``; ``nic``, ``ep``,
        ``fp`` and the floating-point unit's ``fp_lanes``, ``fp_latency``, ``fp_repeat_cycles``,
        ``fp_fused``)."""
        p = params
        return dict(imem_depth=p["imem_depth"], ubuf_rows=p["ubuf_rows"],
                    data_bytes=p["data_bytes"], lanes=p["lanes"], width=p["width"],
                    max_outstanding=p["max_outstanding"],
                    **({"inc": True} if p.get("nic") is not None else {}),
                    **({"ep": True, "ep_dies": p["ranks"]} if p.get("ep") else {}),
                    **({"fp": True, "fp_lanes": p.get("fp_lanes", 4),
                        "fp_latency": p.get("fp_latency"),
                        "fp_repeat_cycles": p.get("fp_repeat_cycles"),
                        "fp_fused": p.get("fp_fused", False)} if p.get("fp") else {}))

    def elaborate(self, platform):
        m = Module()
        n = self.aivs
        rank = self.rank_in if self.rank is None else Const(self.rank, self.flit["src"].shape)
        m.submodules.mem = mem = self.mem
        m.submodules.router = router = self.router
        cores = self.cores
        for i, core in enumerate(cores):
            if self.core_module is None:
                m.submodules[f"core{i}"] = core
            else:
                m.submodules[f"core{i}"] = self.core_module.instance(core, skip=("core_id_in",),
                                                                     core_id_in=Const(i, 8))

        # --- host port, enables, status ------------------------------------------------------
        enabled = self.enabled
        row_words = len(self.host.wmask)
        imem_row = self.host.we & (self.host.target == HostTarget.IMEM_ROW)
        for i, core in enumerate(cores):
            sel = self.host.core == i
            in_row = imem_row & self.host.wmask[i] if i < row_words else 0
            m.d.comb += [
                core.imem_w.en.eq(self.host.we & (self.host.target == HostTarget.IMEM) & sel
                                  | in_row),
                core.imem_w.addr.eq(self.host.addr),
                core.imem_w.data.eq(Mux(imem_row, self.host.wrow.word_select(i % row_words, 32),
                                        self.host.wdata)),
                core.start.eq(self.host.start & enabled[i]),
                core.rank.eq(rank),
                self.core_pc[i].eq(core.pc),
                self.core_halted[i].eq(core.halted | ~enabled[i]),
                self.core_fault[i].eq(core.fault),
                self.core_waiting[i].eq(core.waiting),
                self.core_wait_addr[i].eq(core.wait_addr),
                self.core_outstanding[i].eq(core.outstanding),
            ]
            wiring.connect(m, core.trace, wiring.flipped(self.trace[i]))
            m.d.comb += self.trace_event[i].eq(core.trace.payload.event)
            with m.If(self.host.we & (self.host.target == HostTarget.ENABLE) & sel):
                m.d.sync += enabled[i].eq(self.host.wdata[0])

        # --- runtime knobs (host CTRL writes) ----------------------------------------------
        store_window = Signal(range(self.max_outstanding + 1), init=self.max_outstanding,
                              name="knob_store_window")
        ctrl = self.host.we & (self.host.target == HostTarget.CTRL)
        with m.If(ctrl & (self.host.addr == KNOBS["store_window"])):
            m.d.sync += store_window.eq(self.host.wdata)
        vector_extra = Signal(VECTOR_EXTRA_BITS, name="knob_vector_extra")
        with m.If(ctrl & (self.host.addr == KNOBS["vector_extra"])):
            m.d.sync += vector_extra.eq(self.host.wdata)
        read_extra = Signal(READ_EXTRA_BITS, name="knob_read_extra")
        with m.If(ctrl & (self.host.addr == KNOBS["read_extra"])):
            m.d.sync += read_extra.eq(self.host.wdata)
        poll_extra = Signal(POLL_EXTRA_BITS, name="knob_poll_extra")
        with m.If(ctrl & (self.host.addr == KNOBS["poll_extra"])):
            m.d.sync += poll_extra.eq(self.host.wdata)
        for core in cores:
            m.d.comb += [core.store_window.eq(store_window), core.vector_extra.eq(vector_extra),
                         core.read_extra.eq(read_extra), core.poll_extra.eq(poll_extra)]
        syncall_cycles = Signal(SYNCALL_BITS, name="knob_syncall_cycles")
        with m.If(ctrl & (self.host.addr == KNOBS["syncall_cycles"])):
            m.d.sync += syncall_cycles.eq(self.host.wdata)

        # --- the barrier (bar): every running core at it, then syncall_cycles more ------------
        # A core that is not running (never started, or halted) is not waited for. The cores
        # leave together on ``go`` (their bar_req falls at the same edge), so the next
        # barrier's arrivals cannot mix with this one's; ``waited`` changes only while every
        # running core is at the barrier, so a die with no core running keeps it (idle).
        arrived = (Cat(c.bar_req | ~c.running for c in cores).all()
                   & Cat(c.bar_req for c in cores).any())
        waited = Signal(SYNCALL_BITS, name="bar_waited")
        go = arrived & (waited >= syncall_cycles)
        with m.If(go):
            m.d.sync += waited.eq(0)
        with m.Elif(arrived):
            m.d.sync += waited.eq(waited + 1)
        for core in cores:
            m.d.comb += core.bar_go.eq(go)

        m.d.comb += self.done.eq(Cat(self.core_halted[i] & (self.core_outstanding[i] == 0)
                                     for i in range(n)).all())

        # --- the router: cores, UB memory, fabric port, host memory access ------------------
        m.d.comb += [
            router.rank.eq(rank),
            router.host.we.eq(self.host.we & ((self.host.target == HostTarget.HBM)
                                              | (self.host.target == HostTarget.HBM_BLOCK))),
            router.host.wblock.eq(self.host.target == HostTarget.HBM_BLOCK),
            router.host.wrow.eq(self.host.wrow),
            router.host.addr.eq(self.host.addr),
            router.host.wdata.eq(self.host.wdata),
            router.host.re.eq(self.host.re),
            self.host.rvalid.eq(router.host.rvalid),
            self.host.rdata.eq(router.host.rdata),
            self.host.rrow.eq(router.host.rrow),
        ]
        for i, core in enumerate(cores):
            wiring.connect(m, core.mem_req, router.mem_req[i])
            wiring.connect(m, router.mem_rsp[i], core.mem_rsp)
        wiring.connect(m, router.ub_req, mem.i_req)
        wiring.connect(m, mem.o_resp, router.ub_rsp)
        for i in range(self.requesters + 1):
            wiring.connect(m, router.ub_read[i], mem.read[i])
        if self.ub_counters:
            self._ub_counters(m, mem)
        inject_full = self._injection(m, ctrl, router)
        wiring.connect(m, wiring.flipped(self.rx), router.rx)
        if self.nic is not None:
            self._inc_units(m, rank)
        else:
            quiet = Cat(~c.running & (c.outstanding == 0) for c in cores).all()
            m.d.comb += self.idle.eq(quiet & ~self.host.we & ~self.host.start & ~self.host.re
                                     & router.idle & mem.idle & inject_full)
        return m

    def _ub_counters(self, m, mem):
        """``ub_blocks``/``ub_words``: the UB port's answers taken since ``host.start`` (one per
        committed request), by operation. They change only when an answer is taken (the memory
        is then not idle) or at ``start``, so :attr:`idle` stays exact."""
        taken = mem.o_resp.valid & mem.o_resp.ready
        block = mem.o_resp.payload.op == UBOp.BLOCK_WRITE
        with m.If(self.host.start):
            m.d.sync += [self.ub_blocks.eq(0), self.ub_words.eq(0)]
        with m.Elif(taken & block):
            m.d.sync += self.ub_blocks.eq(self.ub_blocks + 1)
        with m.Elif(taken):
            m.d.sync += self.ub_words.eq(self.ub_words + 1)

    def _injection(self, m, ctrl, router):
        """The injection limiter between the router's ``tx`` and the die's (knob
        ``inject_rate``); returns the signal that its credit is full (it then stays so)."""
        rate = Signal(INJECT_BITS, name="knob_inject_rate")
        with m.If(ctrl & (self.host.addr == KNOBS["inject_rate"])):
            m.d.sync += rate.eq(self.host.wdata)
        block_cost = BLOCK_BYTES * INJECT_DEN
        cap = 2 * block_cost
        credit = Signal(range(cap + (1 << INJECT_BITS)), init=cap, name="inject_credit")
        cost = Mux(router.tx.payload.small, self.small_bytes * INJECT_DEN, block_cost)
        ok = (rate == 0) | (credit >= cost)
        m.d.comb += [self.tx.payload.eq(router.tx.payload),
                     self.tx.valid.eq(router.tx.valid & ok),
                     router.tx.ready.eq(self.tx.ready & ok)]
        fire = self.tx.valid & self.tx.ready & (rate != 0)
        nxt = Signal.like(credit)
        m.d.comb += nxt.eq(credit + rate - Mux(fire, cost, 0))
        m.d.sync += credit.eq(Mux(nxt > cap, cap, nxt))
        return credit == cap

    def _inc_units(self, m, rank):
        """The network interface (router requester ``aivs``), post arbitration, the cube unit."""
        n, cores, router = self.aivs, self.cores, self.router
        m.submodules.nic = nic = self.nic
        m.d.comb += nic.rank.eq(rank)
        wiring.connect(m, nic.mem_req, router.mem_req[n])
        wiring.connect(m, router.mem_rsp[n], nic.mem_rsp)
        wiring.connect(m, nic.tx, wiring.flipped(self.inc_tx))
        wiring.connect(m, wiring.flipped(self.inc_rx), nic.rx)
        counts = (nic.ag_count, nic.rs_count, nic.bar_count)
        for k, value in enumerate(counts):
            m.d.comb += self.inc_counts[k].eq(value)
        # posts: round-robin over the cores, one per cycle
        post_arb = m.submodules.inc_post_arb = RoundRobin(count=n)
        grant = post_arb.grant
        m.d.comb += [post_arb.requests.eq(Cat(c.inc_post.valid for c in cores)),
                     post_arb.ready.eq(nic.post.ready),
                     nic.post.valid.eq(post_arb.valid)]
        for i, core in enumerate(cores):
            m.d.comb += [core.inc_counts[k].eq(v) for k, v in enumerate(counts)]
            with m.If(grant == i):
                m.d.comb += [nic.post.payload.as_value().eq(core.inc_post.payload.as_value()),
                             core.inc_post.ready.eq(nic.post.ready)]
        # cube unit: one row at a time, cube_cycles each, round-robin over the requests
        left = Signal(range(self.cube_cycles + 1), name="cube_left")
        owner = Signal(range(max(2, n)), name="cube_owner")
        cube_arb = m.submodules.cube_arb = RoundRobin(count=n)
        cgrant = cube_arb.grant
        busy = left != 0
        start = ~busy & cube_arb.valid
        m.d.comb += [cube_arb.requests.eq(Cat(c.cube_req for c in cores)),
                     cube_arb.ready.eq(~busy)]
        cur = Mux(busy, owner, cgrant)
        remaining = Mux(busy, left, self.cube_cycles)
        with m.If(start):
            m.d.sync += owner.eq(cgrant)
        with m.If(busy | start):
            m.d.sync += left.eq(remaining - 1)
        for i, core in enumerate(cores):
            m.d.comb += core.cube_done.eq((busy | start) & (cur == i) & (remaining == 1))


VERILOG_EXPORTS = {
    "die": (Die, {"rank": 0, "ranks": 2, "aivs": 2, "imem_depth": 32, "ubuf_rows": 2,
                  "hbm_blocks": 8, "data_bytes": 32, "lanes": 4, "width": 16,
                  "max_outstanding": 4, "hbm_latency": 2, "rsp_depth": None}),
}
