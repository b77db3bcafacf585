"""The host port: one signature for every top a host loads, starts and reads back.

A host (a testbench, a Python driver, an FPGA prototype's soft core) talks to
a machine only through this port, one word per cycle, while the machine is
stopped — except ``start`` and the run-control outputs. Every top with a host
port (:class:`~epfabric.hw.system.System`,
:class:`~epfabric.hw.inc_endpoint.AgrsSystem`) and the die
(:class:`~epfabric.hw.die.Die`) use :class:`HostSignature`, so one host-side
sequence (:mod:`epfabric.sim.backends.host`) loads and reads all of them.

Members (named from the host's side: ``Out`` is driven by the host)
--------------------------------------------------------------------
============  =====  =============================================================
member        flow   meaning
============  =====  =============================================================
``we``        Out    write ``wdata`` this cycle, to ``target``
``target``    Out    :class:`HostTarget`: instruction word ``addr`` of core
                     ``core`` / memory word at byte address ``addr``
                     (``block << 9 | word << 2``) / enable bit ``wdata[0]`` of core
                     ``core`` / control register ``addr``
``rank``      Out    rank addressed by a write or a read (only when ``ranks > 1``)
``core``      Out    core addressed by an IMEM or ENABLE write
``addr``      Out    word address (see ``target``)
``wdata``     Out    32-bit write data
``wrow``      Out    (``row_bits``) a whole row: the block of an HBM_BLOCK write,
                     or one instruction word per core of an IMEM_ROW write
``wmask``     Out    (``row_bits``) IMEM_ROW: which of ``wrow``'s words to write
``rrow``      In     (``row_bits``, one rank) with ``rdata``: the whole block
                     the word is in
``rrow_all``  In     (``row_bits`` and ``all_ranks``, instead of ``rrow``) with
                     ``rdata_all``: each rank's whole block
``re``        Out    read the memory word at ``addr`` of ``rank``
``rvalid``    In     ``rdata`` holds a read's answer (a fixed number of cycles
                     after ``re``: the top's ``host_read_latency``)
``rdata``     In     the word read
``start``     Out    pulse: start a run
``re_all``    Out    (``all_ranks``) read ``addr`` on every rank at once ...
``rdata_all`` In     ... answered in ``rdata_all[r]`` when ``rvalid`` is 1
``max_cycles``Out    (``run``) watchdog limit of the next run
``cycle``     In     cycles since ``start`` (frozen at stop)
``running``   In     a run is in progress
``done``      In     the run finished (memory final)
``timeout``   In     the watchdog stopped the run at ``max_cycles``
``stop``      In     ``done | timeout``
============  =====  =============================================================

Writes to a target a top does not have are ignored; each top documents its
targets, its memory map and its control registers.

Row writes (``row_bits > 0``) exist because loading one word per cycle was
most of a large run's wall time: every host cycle is a cycle of the whole
machine on every simulator (measured: 8 dies x 8 AIVs with UBEP's programs
and BS 128 tokens is ~560 K host writes, ~200 s on Verilator, against a
20 K-cycle kernel). An HBM_BLOCK write stores a whole 512 B block in one
cycle and an IMEM_ROW write one instruction word of up to ``row_bits // 32``
cores; what the machine computes is the same, since the host writes only
while the machine is stopped. Likewise a read's ``rrow``/``rrow_all`` answer
carries the whole block, so reading back takes one cycle per block.
"""

from amaranth.hdl import Signal
from amaranth.lib import enum, wiring
from amaranth.lib.wiring import In, Out

from .validate import UserError, check_bool, check_int

__all__ = ["HostTarget", "HostSignature", "HostMemorySignature", "RUN_OUTPUTS", "register_inputs",
           "run_control"]

#: Run-control outputs a host reads after ``stop`` (with ``run=True``).
RUN_OUTPUTS = ("cycle", "running", "done", "timeout", "stop")


class HostTarget(enum.Enum, shape=3):
    """What a host write (``we``) writes."""
    IMEM = 0    #: instruction word ``addr`` of core ``core``
    HBM = 1     #: memory word at byte address ``addr`` (block << 9 | word << 2)
    ENABLE = 2  #: enable bit ``wdata[0]`` of core ``core``
    CTRL = 3    #: control register ``addr`` (top-specific)
    #: (``row_bits``) the whole block ``addr >> 9`` = ``wrow`` (every modelled word)
    HBM_BLOCK = 4
    #: (``row_bits``) instruction word ``addr`` of the cores of row window
    #: ``wdata``: core ``k`` of the window gets word ``k`` of ``wrow`` where
    #: ``wmask[k]`` is 1 (each top documents its windows)
    IMEM_ROW = 5


class HostSignature(wiring.Signature):
    """The host port (see the module docstring), seen from the host.

    Parameters
    ----------
    ranks : int
        Ranks behind the port (a ``rank`` member when more than 1).
    cores : int
        Cores per rank (sizes ``core``).
    all_ranks : bool
        Add ``re_all``/``rdata_all`` (read every rank at once).
    run : bool
        Add the run-control members (``max_cycles`` and :data:`RUN_OUTPUTS`).
    row_bits : int
        Add ``wrow`` (``row_bits`` wide) and ``wmask`` (``row_bits // 32``
        bits) for HBM_BLOCK and IMEM_ROW writes; 0: none (a multiple of 32).
    """

    def __init__(self, *, ranks=1, cores=1, all_ranks=False, run=False, row_bits=0):
        check_int("ranks", ranks, 1)
        check_int("cores", cores, 1)
        check_bool("all_ranks", all_ranks)
        check_bool("run", run)
        check_int("row_bits", row_bits, 0)
        if row_bits % 32:
            raise UserError(f"row_bits must be a multiple of 32, not {row_bits}")
        self.ranks, self.cores, self.row_bits = ranks, cores, row_bits
        members = {
            "we": Out(1), "target": Out(HostTarget),
            "core": Out(range(max(2, cores))), "addr": Out(32), "wdata": Out(32),
            "re": Out(1), "rvalid": In(1), "rdata": In(32),
            "start": Out(1),
        }
        if ranks > 1:
            members["rank"] = Out(range(ranks))
        if all_ranks:
            members.update({"re_all": Out(1), "rdata_all": In(32).array(ranks)})
        if row_bits:
            members.update({"wrow": Out(row_bits), "wmask": Out(row_bits // 32)})
            if all_ranks:
                members["rrow_all"] = In(row_bits).array(ranks)
            else:
                members["rrow"] = In(row_bits)
        if run:
            members.update({"max_cycles": Out(32), **{name: In(32 if name == "cycle" else 1)
                                                       for name in RUN_OUTPUTS}})
        super().__init__(members)

    def __repr__(self):
        return f"HostSignature(ranks={self.ranks}, cores={self.cores})"


class HostMemorySignature(wiring.Signature):
    """The memory part of the host port, seen from the host.

    ``we`` writes ``wdata`` to the memory word at byte address ``addr``
    (``block << 9 | word << 2``); ``re`` reads that word, answered on
    ``rvalid``/``rdata`` ``hbm_latency`` cycles later. (The die decodes its :class:`HostSignature` ``we`` with target HBM
    into ``we``; :class:`~epfabric.hw.router.DieRouter` takes this port.)
    With ``row_bits``, ``we`` with ``wblock`` writes the whole block
    ``addr >> 9`` with ``wrow`` instead (HBM_BLOCK), and ``rrow`` holds the
    whole block of a read's word when ``rvalid`` is 1.
    """

    def __init__(self, row_bits=0):
        check_int("row_bits", row_bits, 0)
        members = {"we": Out(1), "addr": Out(32), "wdata": Out(32), "re": Out(1),
                   "rvalid": In(1), "rdata": In(32)}
        if row_bits:
            members.update({"wblock": Out(1), "wrow": Out(row_bits), "rrow": In(row_bits)})
        self.row_bits = row_bits
        super().__init__(members)

    def __repr__(self):
        return "HostMemorySignature()"


def register_inputs(m, host):
    """Registered copies of every host-driven member of ``host`` (a dict by member name).

    ``host`` is a component's ``In(HostSignature(...))`` member (its host-driven
    members are inputs of the component).

    Tops pass host inputs through one register at the boundary, so nothing
    inside depends combinationally on a top-level input: a fast simulator
    re-evaluates all input-dependent logic on every input change (measured on
    Verilator: the dies' UB and fabric-ready logic fed by the host port
    dominated the run time). Each input then acts one cycle after the edge
    that samples it.
    """
    regs = {}
    for name, member in host.signature.members.items():
        if member.is_port and member.flow == In:
            reg = regs[name] = Signal.like(getattr(host, name), name=f"host_{name}_q")
            m.d.sync += reg.eq(getattr(host, name))
    return regs


def run_control(m, host, *, start, finished, max_cycles):
    """Drive ``host``'s run-control outputs from a (registered) ``start`` pulse.

    ``start`` clears ``cycle``, ``done`` and ``timeout`` and sets ``running``.
    While running, each cycle in which ``finished`` is 0 counts; the first
    cycle ``finished`` is 1 ends the run with ``done`` (``cycle`` then holds
    the cycles counted, e.g. 1 for a machine finished in its first cycle). If
    the count reaches ``max_cycles`` first, the run ends with ``timeout``
    (``cycle`` = ``max_cycles``). ``stop = done | timeout``.
    """
    nxt = Signal(33)
    m.d.comb += [nxt.eq(host.cycle + 1), host.stop.eq(host.done | host.timeout)]
    with m.If(start):
        m.d.sync += [host.cycle.eq(0), host.running.eq(1), host.done.eq(0), host.timeout.eq(0)]
    with m.Elif(host.running):
        with m.If(finished):
            m.d.sync += [host.running.eq(0), host.done.eq(1)]
        with m.Else():
            m.d.sync += host.cycle.eq(nxt)
            with m.If(nxt >= max_cycles):
                m.d.sync += [host.running.eq(0), host.timeout.eq(1)]
