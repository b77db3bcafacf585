"""An FPGA-ready top: one die, its HBM slice in block RAM, a host port a prototype can drive.

docs/spec/design.md block 6 on one FPGA (UBEP §3.3–3.4): :class:`FpgaDie` is a
:class:`~epfabric.hw.die.Die` — a few AIV cores, the atomic 512 B UB port and
the HBM slice — with everything a board needs and nothing a simulator adds:

* **one clock, one synchronous reset** (Amaranth's ``sync`` domain: ``clk``
  and ``rst`` in the Verilog ``epfabric verilog fpga_die`` writes);
* **a host port** (:class:`~epfabric.hw.host.HostSignature` with run control,
  no ``rank``): a plain synchronous parallel bus that a soft core, a bridge
  from a UART/SPI/JTAG or an FX2-style FIFO drives one word per cycle. Every
  host input passes one register at the boundary
  (:func:`~epfabric.hw.host.register_inputs`), so no combinational path runs
  from a pin into the die and each input acts one cycle after the edge that
  samples it;
* **a looped-back fabric port**: the die's ``tx`` flits are its own ``rx``.
  The die is rank 0 of a two-rank address space; rank 1 is a mirror — a core
  request naming any other rank leaves as a REQ flit, comes back, is applied
  to this die's UB memory through the same atomic UB port and is answered
  with an RSP flit through the same path. So the whole router (REQ/RSP
  queues, store-ack coalescing) is on the chip and exercised, and a program
  written for two ranks runs unchanged. The die's RSP queue is sized for one
  remote rank (:func:`~epfabric.hw.router.rsp_depth_bound` with
  ``ranks = 2``), which is exactly what the loopback owes: the "remote" cores
  are this die's own.

Memory map and block RAM
------------------------
The HBM slice has ``hbm_blocks`` rows of ``8 * data_bytes`` bits with
registered (synchronous) read ports, one per AIV core, one for the UB port and
one shared by incoming REQ flits and host reads; Yosys maps it to block RAM
(one copy per read port; ECP5 ``DP16KD``, iCE40 ``SB_RAM40_4K``) once it is
deep enough for block RAM to be the cheaper choice (the default 512 rows is).
Instruction memories and UBufs are read combinationally by the cores (an
instruction is fetched and executed in one cycle), which block RAM cannot do:
they become LUT RAM (ECP5) or flip-flops (``epfabric synth`` lists every
memory and where it went).

Host port (``host``, inputs registered)
---------------------------------------
* ``we`` with ``target``: IMEM = instruction word ``addr`` of core ``core``;
  HBM = 32-bit word at byte address ``addr`` (``block << 9 | word << 2``);
  ENABLE = enable bit ``wdata[0]`` of core ``core``. Only while stopped.
* ``re``: read the HBM word at ``addr``; ``rvalid``/``rdata`` hold it
  :attr:`host_read_latency` (= ``hbm_latency + 1``) cycles later.
* ``start`` (pulse), ``max_cycles``, ``cycle``, ``running``, ``done``,
  ``timeout``, ``stop``: :func:`~epfabric.hw.host.run_control`. ``done``
  means every enabled core halted and every posted store is acknowledged.

The same host-side sequence that loads the simulated machine
(:mod:`epfabric.sim.backends.host`: ``host_write``, ``host_run``,
``host_read``) drives it.
"""

from amaranth.hdl import Cat, Module
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from .die import Die
from .host import HostSignature, register_inputs, run_control
from .signature import ParamSignature, check_other_params
from .validate import check_int, check_pow2

__all__ = ["FpgaDie", "FPGA_MAX_AIVS", "VERILOG_EXPORTS"]

#: Most AIV cores an :class:`FpgaDie` accepts (an FPGA holds a handful).
FPGA_MAX_AIVS = 64


class FpgaDie(wiring.Component):
    """One die for an FPGA prototype: AIV cores, UB port, HBM slice in block RAM, host port.

    See the module docstring for the host port, the looped-back fabric port
    and what becomes block RAM.

    Parameters
    ----------
    aivs : int
        AIV cores, 1..:data:`FPGA_MAX_AIVS`.
    imem_depth, ubuf_rows, data_bytes, lanes, width, max_outstanding
        Of every :class:`~epfabric.hw.aiv_core.AIVCore`.
    hbm_blocks : int
        DataBlocks in the HBM slice (a power of two, 1..32768); block RAM
        needs a deep slice (the default 512 rows).
    hbm_latency : int
        HBM read latency in cycles, 1..256 (2 registers the block RAM address
        and its output).

    Attributes
    ----------
    host : In(HostSignature(cores=aivs, run=True))
        The host port (module docstring).
    fault : Out(1)
        Some core stopped on an illegal instruction.
    die : Die
        The die (rank 0 of 2; its fabric port looped back).
    host_read_latency : int
        Cycles from ``host.re`` to ``host.rvalid``.

    Raises
    ------
    TypeError, ValueError
        On a parameter of the wrong type or out of range (named in the message).
    """

    def __init__(self, *, aivs=2, imem_depth=64, ubuf_rows=2, hbm_blocks=512, data_bytes=32,
                 lanes=4, width=16, max_outstanding=4, hbm_latency=2):
        signature = self.signature_for(aivs=aivs, hbm_blocks=hbm_blocks, hbm_latency=hbm_latency)
        self.aivs, self.hbm_blocks, self.hbm_latency = aivs, hbm_blocks, hbm_latency
        self.host_read_latency = signature.params["host_read_latency"]
        self.die = Die(rank=0, ranks=2, aivs=aivs, imem_depth=imem_depth, ubuf_rows=ubuf_rows,
                       hbm_blocks=hbm_blocks, data_bytes=data_bytes, lanes=lanes, width=width,
                       max_outstanding=max_outstanding, hbm_latency=hbm_latency)
        super().__init__(signature)

    @classmethod
    def signature_for(cls, *, aivs=2, hbm_blocks=512, hbm_latency=2, **others):
        """The signature of an FPGA die of these parameters (the constructor's), without
        building it (a :class:`~epfabric.hw.signature.ParamSignature` with ``aivs`` and
        ``host_read_latency``); the parameters of its die (``imem_depth``, ...) are the die's
        to check."""
        check_other_params(cls, others)
        check_int("aivs", aivs, 1, FPGA_MAX_AIVS)
        check_pow2("hbm_blocks", hbm_blocks, 1, 1 << 15)
        check_int("hbm_latency", hbm_latency, 1, 256)
        return ParamSignature({
            "host": In(HostSignature(cores=aivs, run=True)),
            "fault": Out(1),
        }, aivs=aivs, host_read_latency=hbm_latency + 1)       # + the host input register

    def elaborate(self, platform):
        m = Module()
        m.submodules.die = die = self.die
        n = self.aivs
        h = register_inputs(m, self.host)
        m.d.comb += [
            die.host.we.eq(h["we"]),
            die.host.target.eq(h["target"]),
            die.host.core.eq(h["core"]),
            die.host.addr.eq(h["addr"]),
            die.host.wdata.eq(h["wdata"]),
            die.host.re.eq(h["re"]),
            die.host.start.eq(h["start"]),
            self.host.rvalid.eq(die.host.rvalid),
            self.host.rdata.eq(die.host.rdata),
            self.fault.eq(Cat(*(die.core_fault[i] for i in range(n))).any()),
        ]
        # the fabric port looped back: rank 1 is this die (module docstring)
        wiring.connect(m, die.tx, die.rx)
        # MARK events are not collected on the FPGA: never stall a core on them
        for i in range(n):
            m.d.comb += die.trace[i].ready.eq(1)
        finished = (Cat(*(die.core_halted[i] for i in range(n))).all()
                    & Cat(*(die.core_outstanding[i] == 0 for i in range(n))).all())
        run_control(m, self.host, start=h["start"], finished=finished, max_cycles=h["max_cycles"])
        return m


VERILOG_EXPORTS = {
    "fpga_die": (FpgaDie, {"aivs": 2, "imem_depth": 64, "ubuf_rows": 2, "hbm_blocks": 512,
                           "data_bytes": 32, "lanes": 4, "width": 16, "max_outstanding": 4,
                           "hbm_latency": 2}),
}
