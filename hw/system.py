"""System top: dies on a fabric, a host port, a cycle counter, ``done``, a watchdog, a MARK trace.

DESIGN.md block 6 (UBEP §2.3 Insight 3, §3.3–3.4): ``ranks`` dies
(:class:`~epfabric.hw.die.Die`) on a ``superpod`` or ``star`` fabric
(:mod:`epfabric.hw.topology`), with everything a driver needs readable
through ports after a run, so a fast simulator runs without Python per cycle.
"""

from amaranth.hdl import Cat, Const, Module, Signal
from amaranth.lib import data, memory, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2

from .die import Die, HostTarget, check_int, flit_layout, round_robin
from .instances import instance_of, mark_used
from .topology import star, superpod

__all__ = ["System", "trace_entry_layout", "check_topology"]

#: One entry of the MARK trace buffer.
trace_entry_layout = data.StructLayout({"core": 16, "cycle": 32, "event": 16})


def check_topology(topology):
    """Validate ``topology``; return ``(kind, shape tuple)``.

    ``("superpod", dies_per_npu, npus_per_board, boards)`` or ``("star", n)``.
    """
    if not isinstance(topology, (tuple, list)) or not topology:
        raise ValueError(f"topology must be ('superpod', dies_per_npu, npus_per_board, boards) "
                         f"or ('star', n), not {topology!r}")
    kind, *shape = topology
    arity = {"superpod": 3, "star": 1}
    if kind not in arity:
        raise ValueError(f"topology kind must be 'superpod' or 'star', not {kind!r}")
    if len(shape) != arity[kind]:
        raise ValueError(f"topology {kind!r} takes {arity[kind]} size(s), not {tuple(shape)!r}")
    for v in shape:
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise ValueError(f"topology sizes must be positive integers, not {topology!r}")
    return kind, tuple(shape)


class System(wiring.Component):
    """The machine: dies, fabric, host port, cycle counter, watchdog and MARK trace.

    Rank ``r`` is die ``r`` of the topology (superpod: die ``r % dies_per_npu``
    of NPU ``(r // dies_per_npu) % npus_per_board`` on board
    ``r // (dies_per_npu * npus_per_board)``); the global id of core ``c`` of
    rank ``r`` is ``r * aivs_per_die + c``. Costs of local and remote memory
    operations: :mod:`epfabric.hw.die`.

    Host port and run control (all inputs registered at the boundary)
    -----------------------------------------------------------------
    Every input below except ``trace_raddr`` passes one register before it
    reaches the dies or the run control, so each acts one cycle after the edge
    that samples it; nothing inside depends combinationally on a top-level
    input (which keeps input-triggered evaluation in Verilator cheap).

    * ``host_we``: write, one per cycle, one edge after the edge where ``host_we = 1``,
      selected by ``host_target`` (:class:`~epfabric.hw.die.HostTarget`):
      0 = instruction word ``host_addr`` of core ``host_core`` of rank
      ``host_rank``; 1 = HBM 32-bit word at byte address ``host_addr``
      (``block << 9 | word << 2``) of rank ``host_rank``; 2 = enable bit
      ``host_wdata[0]`` of core ``host_core`` of rank ``host_rank``. Only
      enabled cores start; disabled cores count as halted. Enables reset to 0.
      Only while the machine is stopped.
    * ``host_re``: read the HBM word at ``host_addr`` of rank ``host_rank``;
      ``host_rvalid = 1`` and ``host_rdata`` hold the word exactly
      :attr:`host_read_latency` (= ``hbm_latency + 1``) cycles later, i.e. after
      that many ticks. One read per cycle, pipelined. Only while stopped.
    * ``host_re_all``: the same read of ``host_addr`` on every rank at once;
      ``host_rdata_all[r]`` holds rank ``r``'s word when ``host_rvalid`` is 1.
      Reading back all ranks then takes one cycle per word instead of one per
      word and rank (at 32 ranks the read-back was most of a run's host time).
    * ``start`` (pulse): clears ``cycle``, ``done``, ``timeout`` and the trace
      (``trace_count``, ``trace_dropped``) and starts every enabled core at
      pc 0, one cycle after the edge that samples it; ``running`` is 1 from
      the cycle after that. ``max_cycles`` must be set by then.
    * ``cycle``: cycles since start, frozen at stop. ``done``: every enabled
      core has halted *and* every posted store is acknowledged (so memory is
      final); ``cycle`` is then the number of cycles until the last core was
      seen halted (a lone ``halt`` program gives 1). ``timeout``: ``cycle``
      reached ``max_cycles`` first (``cycle`` then equals ``max_cycles``).
      ``stop = done | timeout``. After a timeout the cores keep running (their
      status stays readable); reset the system before the next run.
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

    Parameters
    ----------
    preset : epfabric.sw.presets.Preset
        Latencies, bandwidth and shape limits of the fabric (duck-typed).
    topology : tuple
        ``("superpod", dies_per_npu, npus_per_board, boards)`` or ``("star", n)``.
    aivs_per_die : int
        AIV cores per die (1..256).
    imem_depth, ubuf_rows, data_bytes, lanes, width, max_outstanding
        Of every :class:`~epfabric.hw.aiv_core.AIVCore`.
    hbm_blocks, hbm_latency, rsp_depth
        Of every :class:`~epfabric.hw.die.Die`.
    trace_depth : int
        Entries of the MARK trace buffer (1..65535).
    switch_depth : int
        Input FIFO depth of the fabric's switches.
    die_module : (str, bool) or None
        Internal, set by :meth:`hierarchical_verilog`: instantiate every die
        as Verilog module ``die_module[0]`` (with a ``rst`` port if
        ``die_module[1]``) instead of elaborating it. ``None`` (the default,
        and what Amaranth's simulator runs): real :class:`Die` submodules.

    Raises
    ------
    ValueError, TypeError
        On a bad parameter or topology (named in the message).
    """

    def __init__(self, *, preset, topology, aivs_per_die=1, imem_depth=64, ubuf_rows=2,
                 hbm_blocks=16, data_bytes=32, lanes=4, trace_depth=64, width=16,
                 max_outstanding=4, hbm_latency=2, rsp_depth=None, switch_depth=4,
                 die_module=None):
        self._params = dict(preset=preset, topology=topology, aivs_per_die=aivs_per_die,
                            imem_depth=imem_depth, ubuf_rows=ubuf_rows, hbm_blocks=hbm_blocks,
                            data_bytes=data_bytes, lanes=lanes, trace_depth=trace_depth, width=width,
                            max_outstanding=max_outstanding, hbm_latency=hbm_latency,
                            rsp_depth=rsp_depth, switch_depth=switch_depth)
        if die_module is not None and not (isinstance(die_module, tuple) and len(die_module) == 2
                                           and isinstance(die_module[0], str)):
            raise TypeError(f"die_module must be (verilog module name, has_reset), not {die_module!r}")
        self.die_module = die_module
        kind, shape = check_topology(topology)
        check_int("aivs_per_die", aivs_per_die, 1, 256)
        check_int("trace_depth", trace_depth, 1, 65535)
        if kind == "superpod":
            dpn, npb, nb = shape
            ranks = dpn * npb * nb
        else:
            ranks = shape[0]
        if ranks > 256:
            raise ValueError(f"topology {tuple(topology)!r} has {ranks} ranks; at most 256 are addressable")
        if ranks * aivs_per_die > 65535:
            raise ValueError(f"aivs_per_die={aivs_per_die} gives more than 65535 cores")
        self.kind, self.shape = kind, shape
        self.ranks, self.aivs_per_die = ranks, aivs_per_die
        self.n_cores = ranks * aivs_per_die
        self.trace_depth = trace_depth
        self.hbm_latency = hbm_latency
        self.host_read_latency = hbm_latency + 1   # + the host port register
        self.flit = flit_layout(ranks, aivs_per_die, data_bytes, hbm_blocks)
        die_params = dict(ranks=ranks, aivs=aivs_per_die, imem_depth=imem_depth,
                          ubuf_rows=ubuf_rows, hbm_blocks=hbm_blocks, data_bytes=data_bytes,
                          lanes=lanes, width=width, max_outstanding=max_outstanding,
                          hbm_latency=hbm_latency, rsp_depth=rsp_depth)
        if die_module is None:
            self.dies = [Die(rank=r, **die_params) for r in range(ranks)]
        else:
            # Verilog with one shared die module: each rank is an Instance of it,
            # wired through an interface object with the die's signature.
            template = Die(rank=None, **die_params)
            mark_used(template)     # only its signature is needed here
            sig = template.signature
            self.dies = [sig.create(path=(f"die{r}",)) for r in range(ranks)]
        self._die_params = die_params
        # the topology builders validate the shape against the preset (parameter named)
        if kind == "superpod":
            self.fabric = superpod(preset, dpn, npb, nb, payload=self.flit, switch_depth=switch_depth)
        else:
            self.fabric = star(preset, ranks, payload=self.flit, switch_depth=switch_depth)
        n = self.n_cores
        super().__init__({
            "host_we": In(1),
            "host_target": In(HostTarget),
            "host_rank": In(range(max(2, ranks))),
            "host_core": In(range(max(2, aivs_per_die))),
            "host_addr": In(32),
            "host_wdata": In(32),
            "host_re": In(1),
            "host_rvalid": Out(1),
            "host_rdata": Out(32),
            "host_re_all": In(1),
            "host_rdata_all": Out(32).array(ranks),
            "start": In(1),
            "max_cycles": In(32),
            "cycle": Out(32),
            "running": Out(1),
            "done": Out(1),
            "timeout": Out(1),
            "stop": Out(1),
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
        })

    def hierarchical_verilog(self, reset):
        """``(top, {module name: component})`` for Verilog with one die module.

        Amaranth emits one module per instance, so a flat system repeats every
        die's Verilog ``ranks`` times; generation time and the C++ Verilator
        compiles grow with it. ``top`` is this system with every die an
        ``Instance`` of the one ``Die(rank=None)`` module (its rank an input)
        and every fabric link an ``Instance`` of one module per distinct link
        (:meth:`~epfabric.hw.topology.Fabric.share_links`), which the caller
        converts separately (``reset``: whether the converted
        modules have a ``rst`` port). Same hardware; the cross-simulator tests
        compare it with the flat system on Amaranth's simulator.
        """
        name = "epf_die"
        top = System(**self._params, die_module=(name, bool(reset)))
        mark_used(self)    # this flat system is replaced, not forgotten
        parts = {name: Die(rank=None, **self._die_params)}
        parts.update(top.fabric.share_links(bool(reset)))
        return top, parts

    def distance(self, src, dst):
        """Distance class of rank ``src`` → ``dst`` (see :meth:`Fabric.distance`)."""
        return self.fabric.distance(src, dst)

    def elaborate(self, platform):
        m = Module()
        m.submodules.fabric = fabric = self.fabric
        A = self.aivs_per_die
        halted_all, quiet_all = [], []
        traces = []
        # Host port and run control are registered at the boundary: no logic inside
        # depends combinationally on a top-level input. (A fast simulator evaluates
        # all input-dependent logic on every input change; measured on Verilator,
        # the dies' UB and fabric-ready logic fed by host_we/host_re dominated.)
        h = {name: Signal.like(getattr(self, name), name=f"{name}_q")
             for name in ("host_we", "host_target", "host_rank", "host_core", "host_addr",
                          "host_wdata", "host_re", "host_re_all", "start", "max_cycles")}
        m.d.sync += [q.eq(getattr(self, name)) for name, q in h.items()]
        start = h["start"]
        for r, die in enumerate(self.dies):
            if self.die_module is None:
                m.submodules[f"die{r}"] = die
            else:
                name, has_reset = self.die_module
                m.submodules[f"die{r}"] = instance_of(name, die, has_reset, skip=("rank_in",),
                                                      rank_in=Const(r, len(die.rank_in)))
            wiring.connect(m, die.tx, fabric.tx[r])
            wiring.connect(m, fabric.rx[r], die.rx)
            sel = h["host_rank"] == r
            m.d.comb += [
                die.host_we.eq(h["host_we"] & sel),
                die.host_target.eq(h["host_target"]),
                die.host_core.eq(h["host_core"]),
                die.host_addr.eq(h["host_addr"]),
                die.host_wdata.eq(h["host_wdata"]),
                die.host_re.eq((h["host_re"] & sel) | h["host_re_all"]),
                self.host_rdata_all[r].eq(die.host_rdata),
                die.start.eq(start),
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
                halted_all.append(die.core_halted[c])
                quiet_all.append(die.core_outstanding[c] == 0)
                traces.append(die.trace[c])
        # host reads: exactly one die answers (the one addressed hbm_latency cycles ago)
        rvalid = Cat(*(die.host_rvalid for die in self.dies))
        m.d.comb += self.host_rvalid.eq(rvalid.any())
        for die in self.dies:
            with m.If(die.host_rvalid):
                m.d.comb += self.host_rdata.eq(die.host_rdata)

        # --- run control: cycle counter, done, watchdog --------------------------------------
        all_done = Signal()
        m.d.comb += [all_done.eq(Cat(*halted_all).all() & Cat(*quiet_all).all()),
                     self.stop.eq(self.done | self.timeout)]
        nxt = Signal(33)
        m.d.comb += nxt.eq(self.cycle + 1)
        with m.If(start):
            m.d.sync += [self.cycle.eq(0), self.running.eq(1), self.done.eq(0), self.timeout.eq(0)]
        with m.Elif(self.running):
            with m.If(all_done):
                m.d.sync += [self.running.eq(0), self.done.eq(1)]
            with m.Else():
                m.d.sync += self.cycle.eq(nxt)
                with m.If(nxt >= h["max_cycles"]):
                    m.d.sync += [self.running.eq(0), self.timeout.eq(1)]

        # --- MARK trace buffer ------------------------------------------------------------------
        depth = self.trace_depth
        m.submodules.trace_mem = tmem = memory.Memory(shape=trace_entry_layout, depth=depth, init=[])
        tw = tmem.write_port()
        trd = tmem.read_port(transparent_for=())
        m.d.comb += [trd.addr.eq(self.trace_raddr), self.trace_rdata.eq(trd.data)]
        grant, any_, advance = round_robin(m, [t.valid for t in traces], "trace")
        entry = Signal(trace_entry_layout)
        m.d.comb += [entry.core.eq(grant), entry.cycle.eq(self.cycle)]
        for g, t in enumerate(traces):
            with m.If(grant == g):
                m.d.comb += [entry.event.eq(t.payload.event), t.ready.eq(1)]
        advance(any_)
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
