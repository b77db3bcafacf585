"""System top: dies on a fabric, a host port, a cycle counter, ``done``, a watchdog, a MARK trace,
and (optionally) a sampler of the fabric and UB counters.

docs/spec/design.md block 6 (UBEP §2.3 Insight 3, §3.3–3.4): ``ranks`` dies
(:class:`~epfabric.hw.die.Die`) on a ``superpod`` or ``star`` fabric
(:mod:`epfabric.hw.topology`), with everything a driver needs readable
through ports after a run, so a fast simulator runs without Python per cycle.
"""

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, memory, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2

from .aiv_core import AIVCore
from .arbiter import RoundRobin
from .die import Die, flit_layout
from .inc_engine import IncEngine, inc_flit_layout
from .host import HostSignature, HostTarget, register_inputs, run_control
from .instances import Part, Sharing
from .isa import RANK_BITS
from .signature import ParamSignature, check_other_params
from .topology import (STAR_HOPS, SUPERPOD_HOPS, check_timing, check_topology, star, superpod,
                       topology_ranks)
from .validate import UserError, UserTypeError, check_int

__all__ = ["System", "trace_entry_layout", "imem_row_window", "MAX_AIVS_PER_DIE", "MAX_EP_DIES",
           "SAMPLE_EVERY_REG", "SAMPLE_RANK_COUNTERS", "MAX_SAMPLE_DEPTH", "sample_layout"]

#: the most dies an in-network EP machine has: a ``stbm``/``stbr`` die mask is one register up
#: to 32 dies and a pair (``R[rs3] << 32 | R[rs2]``) up to 64
MAX_EP_DIES = 64

#: Verilog names of the shared die and core modules (``System(shared=...)``).
DIE_MODULE = "epf_die"
CORE_MODULE = "epf_aiv"

#: Largest number of AIV cores per die (a flit names its core in 8 bits).
MAX_AIVS_PER_DIE = 256

#: One entry of the MARK trace buffer.
trace_entry_layout = data.StructLayout({"core": 16, "cycle": 32, "event": 16})


#: The system's own control register (host target CTRL, ``addr``; the dies ignore it): the
#: counter sampler's interval in cycles, 0 (the reset value) = off.
SAMPLE_EVERY_REG = 0x100

#: Per-rank counters of a counter sample, in entry order (:func:`sample_layout`).
SAMPLE_RANK_COUNTERS = ("tx_blocks", "rx_blocks", "tx_stalls", "ub_blocks", "ub_words")

#: Largest ``sample_depth``.
MAX_SAMPLE_DEPTH = 65535


def sample_layout(ranks, superpod):
    """One entry of the counter sample memory: ``cycle`` (since start), then per rank each
    counter of :data:`SAMPLE_RANK_COUNTERS`, then (``superpod``) the machine's
    ``link_blocks`` and ``link_small`` per link kind (:data:`~epfabric.hw.topology.SUPERPOD_HOPS`);
    32 bits each."""
    fields = {"cycle": 32}
    fields.update({name: data.ArrayLayout(32, ranks) for name in SAMPLE_RANK_COUNTERS})
    if superpod:
        fields.update({f"link_{what}": data.ArrayLayout(32, len(SUPERPOD_HOPS))
                       for what in ("blocks", "small")})
    return data.StructLayout(fields)


def imem_row_window(row_words, aivs_per_die):
    """Cores of an IMEM_ROW window: the most whole dies' cores ``row_words`` words hold
    (``row_words`` itself when ``aivs_per_die`` divides it; 96 for 128 words and 48 AIVs);
    0 when a row holds not even one die's."""
    return row_words // aivs_per_die * aivs_per_die


class System(wiring.Component):
    """The machine: dies, fabric, host port, cycle counter, watchdog and MARK trace.

    Rank ``r`` is die ``r`` of the topology (superpod: die ``r % dies_per_npu``
    of NPU ``(r // dies_per_npu) % npus_per_board`` on board
    ``r // (dies_per_npu * npus_per_board)``); the global id of core ``c`` of
    rank ``r`` is ``r * aivs_per_die + c``. Costs of local and remote memory
    operations: :mod:`epfabric.hw.die`.

    Host port and run control (``host``, all inputs registered at the boundary)
    ---------------------------------------------------------------------------
    :class:`~epfabric.hw.host.HostSignature` with every member. Every host
    input passes one register before it reaches the dies or the run control
    (:func:`~epfabric.hw.host.register_inputs`), so each acts one cycle after
    the edge that samples it.

    * ``host.we``: write, one per cycle, selected by ``host.target``: IMEM =
      instruction word ``addr`` of core ``core`` of rank ``rank``; HBM = 32-bit
      word at byte address ``addr`` (``block << 9 | word << 2``) of rank
      ``rank``; ENABLE = enable bit ``wdata[0]`` of core ``core`` of rank
      ``rank``. Only enabled cores start; disabled cores count as halted.
      Enables reset to 0. Only while the machine is stopped. HBM_BLOCK = the
      whole block ``addr >> 9`` of rank ``rank`` = ``wrow``; IMEM_ROW =
      instruction word ``addr`` of every core ``g = r * aivs_per_die + c`` of
      row window ``wdata`` (``g // W`` with ``W`` = :func:`imem_row_window`: the
      most whole dies' cores a row of ``8 * data_bytes // 32`` words holds) whose
      ``wmask[g % W]`` is 1, from word ``g % W`` of ``wrow`` (when a row holds
      at least one die's cores; otherwise IMEM_ROW writes nothing). CTRL = runtime
      knob ``addr`` (:data:`epfabric.hw.die.KNOBS`) of **every** die = ``wdata``.
    * ``host.re``: read the HBM word at ``addr`` of rank ``rank``;
      ``host.rvalid = 1`` and ``host.rdata`` hold the word exactly
      :attr:`host_read_latency` (= ``hbm_latency + 1``) cycles later, i.e. after
      that many ticks. One read per cycle, pipelined. Only while stopped.
    * ``host.re_all``: the same read of ``addr`` on every rank at once;
      ``host.rdata_all[r]`` holds rank ``r``'s word when ``host.rvalid`` is 1.
      Reading back all ranks then takes one cycle per word instead of one per
      word and rank (at 32 ranks the read-back was most of a run's host time),
      and ``host.rrow_all[r]`` holds the whole block: one cycle per block.
    * ``host.start`` (pulse): clears ``cycle``, ``done``, ``timeout`` and the
      trace (``trace_count``, ``trace_dropped``) and starts every enabled core
      at pc 0, one cycle after the edge that samples it; ``running`` is 1 from
      the cycle after that. ``host.max_cycles`` must be set by then.
    * ``host.cycle``, ``done``, ``timeout``, ``stop``
      (:func:`~epfabric.hw.host.run_control`): ``done`` means every enabled
      core has halted *and* every posted store is acknowledged (so memory is
      final); ``cycle`` is then the number of cycles until the last core was
      seen halted (a lone ``halt`` program gives 1). After a timeout the
      cores keep running (their status stays readable); reset the system
      before the next run.
    * ``core_pc``, ``core_halted``, ``core_fault``, ``core_waiting``,
      ``core_wait_addr`` (arrays over global core ids): the watchdog's view —
      which core waits on which address.

    MARK trace
    ----------
    Every core's ``trace`` stream is merged round-robin (one event per cycle;
    a MARK of a core waits one cycle per other core's MARK granted in the
    same cycle) into a memory of ``trace_depth`` entries
    :data:`trace_entry_layout` = {``core`` global id, ``cycle`` since start,
    ``event``}. When the buffer is full, further events are dropped and
    counted in ``trace_dropped`` (the cores never stall on a full buffer, so
    cycle counts do not depend on ``trace_depth``). ``trace_count`` entries
    are valid; ``trace_rdata`` shows entry ``trace_raddr`` one cycle (one
    tick) after ``trace_raddr`` is set.

    Fabric counters (since reset)
    -----------------------------
    ``fabric_tx_blocks``, ``fabric_rx_blocks``, ``fabric_tx_stalls``: per rank,
    flits (each charged as one 512 B block) sent into / delivered from the
    fabric, and cycles the rank's ``tx`` was held off by the fabric.

    Superpod only: ``fabric_link_blocks[k]``, ``fabric_link_small[k]`` for link kind
    ``k`` of :data:`~epfabric.hw.topology.SUPERPOD_HOPS` (``direct``, ``up``, ``down``,
    ``t2_up``, ``t2_down``): the flits that entered the links of that kind (``valid &
    ready`` at the link's input) with a DataBlock, and without one (acks, word stores,
    loads, fetch-adds and their answers); a flit counts once on every link it crosses
    (:class:`~epfabric.hw.topology.Fabric`). A rank's own requests never enter the fabric,
    so ``Σ tx_blocks = direct + up`` and ``Σ rx_blocks = direct + down`` (blocks + small).

    Parameters
    ----------
    timing : epfabric.hw.topology.FabricTiming
        Link latencies (cycles) and rate of the fabric (a preset makes one:
        ``Preset.fabric_timing()``).
    topology : tuple
        ``("superpod", dies_per_npu, npus_per_board, boards)`` or ``("star", n)``.
    aivs_per_die : int
        AIV cores per die (1..256).
    imem_depth, ubuf_rows, data_bytes, lanes, width, max_outstanding
        Of every :class:`~epfabric.hw.aiv_core.AIVCore`.
    hbm_blocks, hbm_latency, rsp_depth, rank_bits
        Of every :class:`~epfabric.hw.die.Die` (``rank_bits``: the address's rank field,
        default 8; :func:`epfabric.hw.isa.address_layout`).
    trace_depth : int
        Entries of the MARK trace buffer (1..65535).
    switch_depth : int
        Input FIFO depth of the fabric's switches.
    shared : Sharing or None
        For simulation Verilog with one module per repeated block (the Verilog
        simulators' and the native backend's, :mod:`epfabric.sim.backends.verilog`):
        every die is an instance of one shared Verilog module, a
        ``Die(rank=None)`` (its rank an input driven by a constant) whose cores
        are instances of one ``AIVCore(core_id=None)``, and the fabric's
        switches and links are instances of one module per kind, its route
        table on a port (:func:`~epfabric.hw.topology.superpod`); :attr:`parts`
        holds the modules to convert, ``{name: Part}``
        (:class:`~epfabric.hw.instances.Sharing`: ``has_reset``, whether the
        modules have a ``rst`` port, and what an instance becomes). Amaranth emits
        one module per instance, so a flat system repeats every die's Verilog
        ``ranks`` times; generation time and the C++ Verilator compiles grow with
        it. ``None`` (the default, and what Amaranth's simulator runs):
        components. Same hardware; the cross-simulator tests compare the two.
    non_atomic_port : bool
        Every die's UB port commits blocks beat by beat (a negative control;
        see :class:`~epfabric.hw.die.Die`). Default ``False``.
    nic : dict or None
        The INC-MoE machine (docs/spec/kernels.md §2.6): every die gets a network
        interface with these :class:`~epfabric.hw.inc_nic.IncNic` parameters
        and a cube unit (:class:`~epfabric.hw.die.Die` ``nic``), on a second
        ``star`` of the same timing whose switch holds the INC engine
        (:class:`~epfabric.hw.inc_engine.IncEngine`, ``inc_slots`` aggregator
        slots). ``None`` (default): none of it, and the Verilog is unchanged.
    inc_slots, cube_cycles
        With ``nic``: the engine's aggregator slots; cycles of one cube row.
    sample_depth : int
        Entries of the counter sample memory (0..:data:`MAX_SAMPLE_DEPTH`; 0 = no sampler).
    ep_inc : dict or None
        In-network expert parallelism: every switch of the superpod is an
        :class:`~epfabric.hw.inc_switch.IncSwitch` (these parameters: ``window``, the result
        blocks of a destination a run reduces into; ``header_bits``, default 128, the
        Data-as-Flag words a reduction keeps rather than sums; ``dtype``, default ``"int16"``,
        the lane type of the sums, :mod:`~epfabric.hw.lane_arith`), every core runs ``stbm`` and
        ``stbr`` (``AIVCore(ep=True)``), the flits carry ``mcast``/``red``/``mask``/``count``.
        At most 64 dies (a ``stbm``/``stbr`` die mask is one register, two past 32 dies).
        ``None`` (default): none of it, and the Verilog is unchanged.
    fp : dict or None
        Every core has the floating-point vector instructions (:class:`~epfabric.hw.die.Die`
        ``fp``); the dict holds the unit's ``fp_lanes``, ``fp_latency``, ``fp_repeat_cycles``,
        ``fp_fused`` (each optional). ``None`` (default): none of it, and the Verilog is
        unchanged.

    Counter sampler (``sample_depth`` > 0 only)
    -------------------------------------------
    Every die counts its UB port's commits (:class:`~epfabric.hw.die.Die` ``ub_counters``:
    ``ub_blocks``, ``ub_words`` per rank, cleared by ``host.start``), and the system writes a
    snapshot of its counters (:func:`sample_layout`: ``cycle``, per rank ``tx_blocks``,
    ``rx_blocks``, ``tx_stalls``, ``ub_blocks``, ``ub_words``, and a superpod's link-kind
    counters) into a memory of ``sample_depth`` entries: in every cycle of a run (``running``)
    whose ``cycle`` is a multiple of the control register :data:`SAMPLE_EVERY_REG` (host CTRL
    write; 0, the reset value, = off), i.e. at cycles 0, N, 2N, ... Each entry holds the
    counters' values *in* that cycle: for a counter cleared at start, the events of the
    run's first ``cycle`` cycles. When the memory is full further samples are dropped and
    counted in ``sample_dropped``. ``host.start`` clears ``sample_count`` and
    ``sample_dropped``; ``sample_rdata`` shows entry ``sample_raddr`` one tick after it is set.
    The sampler only reads counters: it never stalls anything, so cycle counts do not depend
    on it. ``sample_depth`` = 0 (default): none of it, and the Verilog is unchanged.

    INC counters (``nic`` only)
    ---------------------------
    ``inc_ag``, ``inc_rs``, ``inc_bar`` (per rank): the interfaces'
    cumulative completion counters; ``inc_slot_stalls``: cycles the engine
    held a chunk back for want of a slot.

    Raises
    ------
    ValueError, TypeError
        On a bad parameter or topology (named in the message).
    """

    def __init__(self, *, timing, topology, aivs_per_die=1, imem_depth=64, ubuf_rows=2,
                 hbm_blocks=16, data_bytes=32, lanes=4, trace_depth=64, width=16,
                 max_outstanding=512, hbm_latency=2, rsp_depth=None, switch_depth=4,
                 shared=None, non_atomic_port=False, nic=None, inc_slots=16, cube_cycles=1,
                 rank_bits=RANK_BITS, sample_depth=0, ep_inc=None, fp=None):
        self.sample_depth = sample_depth
        if nic is not None:
            check_int("inc_slots", inc_slots, 1, 1 << 12)
        self.nic, self.inc_slots = nic, inc_slots
        if ep_inc is not None and not isinstance(ep_inc, dict):
            raise UserTypeError(f"ep_inc must be a dict of in-network switch parameters "
                                f"(window, ...) or None, not {ep_inc!r}")
        self.ep_inc = ep_inc
        if shared is not None and not isinstance(shared, Sharing):
            raise TypeError(f"shared must be a Sharing or None, not {shared!r}")
        signature = self.signature_for(topology=topology, aivs_per_die=aivs_per_die,
                                       imem_depth=imem_depth, data_bytes=data_bytes,
                                       trace_depth=trace_depth, hbm_latency=hbm_latency, nic=nic,
                                       sample_depth=sample_depth)
        kind, *shape = topology
        # the fabric's latencies, checked before any die is built
        check_timing(timing).need(SUPERPOD_HOPS if kind == "superpod" else STAR_HOPS)
        self.kind, self.shape = kind, tuple(shape)
        self.ranks, self.aivs_per_die = signature.params["ranks"], aivs_per_die
        self.n_cores = signature.params["n_cores"]
        self.trace_depth = trace_depth
        self.hbm_latency = hbm_latency
        self.host_read_latency = signature.params["host_read_latency"]
        ranks = self.ranks
        # the router's requesters: the cores, and the network interface of an INC machine
        if ep_inc is not None and kind != "superpod":
            raise UserError(f"in-network EP (ep_inc) needs a superpod topology, not {topology!r}")
        if ep_inc is not None and ranks > MAX_EP_DIES:
            raise UserError(f"in-network EP names its dies in a 64-bit mask (two registers): at "
                            f"most {MAX_EP_DIES} dies, not {ranks}")
        self.flit = flit_layout(ranks, aivs_per_die + (nic is not None), data_bytes, hbm_blocks,
                                ep=ep_inc is not None)
        die_params = dict(ranks=ranks, aivs=aivs_per_die, imem_depth=imem_depth,
                          ubuf_rows=ubuf_rows, hbm_blocks=hbm_blocks, data_bytes=data_bytes,
                          lanes=lanes, width=width, max_outstanding=max_outstanding,
                          hbm_latency=hbm_latency, rsp_depth=rsp_depth,
                          non_atomic_port=non_atomic_port, rank_bits=rank_bits,
                          small_bytes=check_timing(timing).small_bytes or timing.block_bytes)
        if sample_depth:
            die_params.update(ub_counters=True)
        if ep_inc is not None:
            die_params.update(ep=True)
        if fp is not None:
            if not isinstance(fp, dict):
                raise UserTypeError(f"fp must be a dict of the fp unit's parameters (fp_lanes, "
                                    f"...) or None, not {fp!r}")
            die_params.update(fp=True, **fp)
        if nic is not None:
            if kind != "star":
                raise UserError(f"an INC machine (nic) needs a star topology, not {topology!r}")
            die_params.update(nic=nic, cube_cycles=cube_cycles)
        if shared is None:
            self.die_module, self.parts = None, {}
            self.dies = [Die(rank=r, **die_params) for r in range(ranks)]
        else:
            # Verilog with one shared die module: each rank is an instance of it, wired
            # through an interface object with the die's signature; the die and core
            # modules are built only when converted (their Verilog may be cached).
            core_params = dict(core_id=None, **Die.core_params_of(die_params))
            core = Part(AIVCore, signature=AIVCore.signature_for(**core_params), **core_params)
            die = Part(Die, signature=Die.signature_for(rank=None, **die_params), rank=None,
                       core_module=shared.module(CORE_MODULE, core, inner=True), **die_params)
            self.die_module = shared.module(DIE_MODULE, die)
            self.parts = {DIE_MODULE: die, CORE_MODULE: core}
            self.dies = [die.signature.create(path=(f"die{r}",)) for r in range(ranks)]
        if kind == "superpod":
            self.fabric = superpod(timing, *shape, payload=self.flit, switch_depth=switch_depth,
                                   shared=shared,
                                   inc=ep_inc)
        else:
            self.fabric = star(timing, ranks, payload=self.flit, switch_depth=switch_depth,
                               shared=shared)
        self.parts.update(self.fabric.parts)
        if nic is not None:
            lanes_inc = data_bytes // 4
            self.inc_layout = inc_flit_layout(ranks=ranks, tmax=nic["tmax"], lanes=lanes_inc)
            self.inc_fabric = star(timing, ranks, attach=1, payload=self.inc_layout,
                                   switch_depth=switch_depth)
            self.inc_engine = IncEngine(ranks=ranks, tmax=nic["tmax"], lanes=lanes_inc,
                                        slots=inc_slots)
        super().__init__(signature)

    @classmethod
    def signature_for(cls, *, topology, aivs_per_die=1, imem_depth=64, data_bytes=32,
                      trace_depth=64, hbm_latency=2, nic=None, sample_depth=0, **others):
        """The signature of a system of these parameters (those of the constructor, but
        ``shared``), without building it: a :class:`~epfabric.hw.signature.ParamSignature`
        with ``ranks``, ``aivs_per_die``, ``n_cores``, ``host_read_latency``, ``kind``
        and ``topology``.

        Raises
        ------
        ValueError, TypeError
            On a bad parameter that shapes the ports (named in the message), or a
            name that is not a parameter; the others are the constructor's to check.
        """
        check_other_params(cls, others)
        if "shared" in others:
            raise TypeError("a system's signature does not depend on shared: leave it out")
        check_int("sample_depth", sample_depth, 0, MAX_SAMPLE_DEPTH)
        kind, *shape = check_topology(topology)
        check_int("aivs_per_die", aivs_per_die, 1, MAX_AIVS_PER_DIE)
        check_int("trace_depth", trace_depth, 1, 65535)
        ranks = topology_ranks(topology)
        n = ranks * aivs_per_die
        if n > 65535:
            raise UserError(f"aivs_per_die={aivs_per_die} gives more than 65535 cores")
        link_ports = {} if kind != "superpod" else {
            "fabric_link_blocks": Out(32).array(len(SUPERPOD_HOPS)),
            "fabric_link_small": Out(32).array(len(SUPERPOD_HOPS))}
        inc_ports = {} if nic is None else {
            "inc_ag": Out(32).array(ranks), "inc_rs": Out(32).array(ranks),
            "inc_bar": Out(32).array(ranks), "inc_slot_stalls": Out(32)}
        sample_ports = {} if not sample_depth else {
            "sample_count": Out(16), "sample_dropped": Out(32),
            "sample_raddr": In(range(max(2, sample_depth))),
            "sample_rdata": Out(sample_layout(ranks, kind == "superpod")),
            "ub_blocks": Out(32).array(ranks), "ub_words": Out(32).array(ranks)}
        return ParamSignature({
            "host": In(HostSignature(ranks=ranks, cores=aivs_per_die, all_ranks=True, run=True,
                                     row_bits=8 * data_bytes)),
            "core_pc": Out(range(imem_depth)).array(n),
            "core_halted": Out(1).array(n),
            "core_fault": Out(1).array(n),
            "core_waiting": Out(1).array(n),
            "core_wait_addr": Out(32).array(n),
            "trace_count": Out(16),
            "trace_dropped": Out(16),
            "trace_raddr": In(range(max(2, trace_depth))),
            "trace_rdata": Out(trace_entry_layout),
            "fabric_tx_blocks": Out(32).array(ranks),
            "fabric_rx_blocks": Out(32).array(ranks),
            "fabric_tx_stalls": Out(32).array(ranks),
            **link_ports,
            **inc_ports,
            **sample_ports,
        }, ranks=ranks, aivs_per_die=aivs_per_die, n_cores=n,
            host_read_latency=hbm_latency + 1,      # + the host port register
            kind=kind, topology=(kind, *shape))

    def _inc_network(self, m):
        """The INC star: every die's network interface and the engine in its switch."""
        m.submodules.inc_fabric = fabric = self.inc_fabric
        m.submodules.inc_engine = engine = self.inc_engine
        wiring.connect(m, engine.o_stream, fabric.attach_tx[0])
        wiring.connect(m, fabric.attach_rx[0], engine.i_stream)
        m.d.comb += self.inc_slot_stalls.eq(engine.o_slot_stalls)
        for r, die in enumerate(self.dies):
            wiring.connect(m, die.inc_tx, fabric.tx[r])
            wiring.connect(m, fabric.rx[r], die.inc_rx)
            m.d.comb += [self.inc_ag[r].eq(die.inc_counts[0]), self.inc_rs[r].eq(die.inc_counts[1]),
                         self.inc_bar[r].eq(die.inc_counts[2])]

    def _sampler(self, m, h, start):
        """The counter sampler (see the class docstring): an interval register, a countdown
        and the sample memory, written from the counters the system already outputs."""
        depth = self.sample_depth
        for r, die in enumerate(self.dies):
            m.d.comb += [self.ub_blocks[r].eq(die.ub_blocks), self.ub_words[r].eq(die.ub_words)]
        every = Signal(32, name="sample_every")
        with m.If(h["we"] & (h["target"] == HostTarget.CTRL) & (h["addr"] == SAMPLE_EVERY_REG)):
            m.d.sync += every.eq(h["wdata"])
        until = Signal(32, name="sample_until")      # cycles to the next sample
        m.submodules.sample_mem = smem = memory.Memory(shape=self.sample_rdata.shape(),
                                                        depth=depth, init=[])
        sw = smem.write_port()
        srd = smem.read_port(transparent_for=())
        m.d.comb += [srd.addr.eq(self.sample_raddr), self.sample_rdata.eq(srd.data)]
        entry = Signal(self.sample_rdata.shape())
        m.d.comb += entry.cycle.eq(self.host.cycle)
        for r in range(self.ranks):
            for name in SAMPLE_RANK_COUNTERS:
                source = (getattr(self, name) if name.startswith("ub_")
                          else getattr(self, f"fabric_{name}"))
                m.d.comb += entry[name][r].eq(source[r])
        if self.kind == "superpod":
            for k in range(len(SUPERPOD_HOPS)):
                m.d.comb += [entry.link_blocks[k].eq(self.fabric_link_blocks[k]),
                             entry.link_small[k].eq(self.fabric_link_small[k])]
        on = self.host.running & (every != 0)
        take = on & (until == 0)
        full = self.sample_count >= depth
        m.d.comb += [sw.addr.eq(self.sample_count[:max(1, ceil_log2(depth))] if depth > 1 else 0),
                     sw.data.eq(entry), sw.en.eq(take & ~full & ~start)]
        with m.If(start):
            m.d.sync += [until.eq(0), self.sample_count.eq(0), self.sample_dropped.eq(0)]
        with m.Elif(on):
            m.d.sync += until.eq(Mux(until == 0, every - 1, until - 1))
            with m.If(take & ~full):
                m.d.sync += self.sample_count.eq(self.sample_count + 1)
            with m.Elif(take):
                m.d.sync += self.sample_dropped.eq(self.sample_dropped + 1)

    def distance(self, src, dst):
        """Distance class of rank ``src`` → ``dst`` (see :meth:`Fabric.distance`)."""
        return self.fabric.distance(src, dst)

    def elaborate(self, platform):
        m = Module()
        m.submodules.fabric = fabric = self.fabric
        A = self.aivs_per_die
        dies_done = []       # a die's cores all halted, nothing outstanding (Die.done)
        traces = []
        h = register_inputs(m, self.host)
        start = h["start"]
        for r, die in enumerate(self.dies):
            if self.die_module is None:
                m.submodules[f"die{r}"] = die
            else:
                m.submodules[f"die{r}"] = self.die_module.instance(die, skip=("rank_in",),
                                                                   rank_in=Const(r, len(die.rank_in)))
            wiring.connect(m, die.tx, fabric.tx[r])
            wiring.connect(m, fabric.rx[r], die.rx)
            sel = h["rank"] == r
            # IMEM_ROW: core g = r*A + c of the machine is word g % W of row window g // W,
            # W the most whole dies' cores a row holds (imem_row_window)
            W = imem_row_window(len(h["wmask"]), A)
            imem_row = h["target"] == HostTarget.IMEM_ROW
            if W:
                k0, window = (r * A) % W, (r * A) // W
                row_we = h["wdata"] == window
                m.d.comb += [die.host.wrow.eq(Mux(imem_row, h["wrow"][32 * k0:], h["wrow"])),
                             die.host.wmask.eq(h["wmask"][k0:k0 + A])]
            else:
                row_we = 0          # a die's cores would straddle windows: words only
                m.d.comb += die.host.wrow.eq(h["wrow"])
            m.d.comb += [
                # a CTRL write (a die knob, hw/die.py KNOBS) goes to every die
                die.host.we.eq(h["we"] & Mux(imem_row, row_we,
                                             sel | (h["target"] == HostTarget.CTRL))),
                die.host.target.eq(h["target"]),
                die.host.core.eq(h["core"]),
                die.host.addr.eq(h["addr"]),
                die.host.wdata.eq(h["wdata"]),
                die.host.re.eq((h["re"] & sel) | h["re_all"]),
                self.host.rdata_all[r].eq(die.host.rdata),
                self.host.rrow_all[r].eq(die.host.rrow),
                die.host.start.eq(start),
                self.fabric_tx_blocks[r].eq(fabric.tx_blocks[r]),
                self.fabric_rx_blocks[r].eq(fabric.rx_blocks[r]),
                self.fabric_tx_stalls[r].eq(fabric.tx_stalls[r]),
            ]
            for c in range(A):
                g = r * A + c
                m.d.comb += [
                    self.core_pc[g].eq(die.core_pc[c]),
                    self.core_halted[g].eq(die.core_halted[c]),
                    self.core_fault[g].eq(die.core_fault[c]),
                    self.core_waiting[g].eq(die.core_waiting[c]),
                    self.core_wait_addr[g].eq(die.core_wait_addr[c]),
                ]
                traces.append((die.trace[c], die.trace_event[c]))
            dies_done.append(die.done)
        if self.kind == "superpod":
            for k in range(len(SUPERPOD_HOPS)):
                m.d.comb += [self.fabric_link_blocks[k].eq(fabric.link_blocks[k]),
                             self.fabric_link_small[k].eq(fabric.link_small[k])]
        if self.nic is not None:
            self._inc_network(m)
        if self.sample_depth:
            self._sampler(m, h, start)
        # host reads: exactly one die answers (the one addressed hbm_latency cycles ago)
        rvalid = Cat(*(die.host.rvalid for die in self.dies))
        m.d.comb += self.host.rvalid.eq(rvalid.any())
        for die in self.dies:
            with m.If(die.host.rvalid):
                m.d.comb += self.host.rdata.eq(die.host.rdata)

        # --- run control: cycle counter, done, watchdog --------------------------------------
        all_done = Signal()
        m.d.comb += all_done.eq(Cat(*dies_done).all())
        run_control(m, self.host, start=start, finished=all_done, max_cycles=h["max_cycles"])

        # --- MARK trace buffer ------------------------------------------------------------------
        depth = self.trace_depth
        m.submodules.trace_mem = tmem = memory.Memory(shape=trace_entry_layout, depth=depth, init=[])
        tw = tmem.write_port()
        trd = tmem.read_port(transparent_for=())
        m.d.comb += [trd.addr.eq(self.trace_raddr), self.trace_rdata.eq(trd.data)]
        trace_arb = m.submodules.trace_arb = RoundRobin(count=len(traces))
        grant, any_ = trace_arb.grant, trace_arb.valid
        m.d.comb += [trace_arb.requests.eq(Cat(t.valid for t, _e in traces)),
                     trace_arb.ready.eq(1)]
        entry = Signal(trace_entry_layout)
        m.d.comb += [entry.core.eq(grant), entry.cycle.eq(self.host.cycle)]
        for g, (t, event) in enumerate(traces):
            with m.If(grant == g):
                m.d.comb += [entry.event.eq(event), t.ready.eq(1)]
        full = self.trace_count >= depth
        m.d.comb += [tw.addr.eq(self.trace_count[:max(1, ceil_log2(depth))] if depth > 1 else 0),
                     tw.data.eq(entry), tw.en.eq(any_ & ~full & ~start)]
        with m.If(start):
            m.d.sync += [self.trace_count.eq(0), self.trace_dropped.eq(0)]
        with m.Elif(any_ & ~full):
            m.d.sync += self.trace_count.eq(self.trace_count + 1)
        with m.Elif(any_ & (self.trace_dropped != 0xFFFF)):
            m.d.sync += self.trace_dropped.eq(self.trace_dropped + 1)
        return m
