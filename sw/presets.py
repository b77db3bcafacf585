"""Machine presets, and the one place where physical units become cycles.

A :class:`Preset` describes a machine in physical units (ns, GB/s, bytes),
selectable by name with :func:`get_preset`, or by the path of a machine file
(:mod:`epfabric.sw.preset_file`: the same fields as TOML). Everything that needs cycles —
link latencies, the rate limiter's bytes-per-cycle fraction — asks the preset
(:meth:`Preset.cycles`, :meth:`Preset.rate`, :meth:`Preset.hop_cycles`,
:meth:`Preset.fabric_timing`), so no
other module converts units.

Latency assumption (docs/spec/design.md): a class latency of UBEP Table 2 is the one-way
time from a 512 B store's issue to its visibility at the destination, so the
per-hop latencies are derived such that a lone block crossing the fabric takes
exactly the class latency; a remote load costs the round trip.
"""

from dataclasses import dataclass, fields, replace
import json
import math
from pathlib import Path
from fractions import Fraction

from ..hw.aiv_core import MAX_LANES, POLL_EXTRA_BITS, READ_EXTRA_BITS, VECTOR_EXTRA_BITS
from ..hw.die import INJECT_BITS, INJECT_DEN, SYNCALL_BITS
from ..hw.link import LINK_MIN_LATENCY
from ..hw.switch import SWITCH_LATENCY
from ..hw.system import MAX_AIVS_PER_DIE
from ..hw.topology import MAX_RANKS, TOPOLOGIES, FabricTiming
from ..hw.validate import (UserError, UserTypeError, check_bool, check_choice, check_int, check_number,
                           check_pow2)
from .param import param, params_of

__all__ = ["Preset", "PRESETS", "get_preset", "preset_names", "TOPOLOGIES", "CLASSES", "SYNCALLS",
           "COPIES", "CUMSUM_SCANS", "CANN_COUNTS", "ASCEND",
           "fit_provenance", "hardware_twin"]

#: How CANN's SyncAll runs (:attr:`Preset.syncall`)
SYNCALLS = ("soft", "hard")
#: How the dispatch kernels read a token, a status slice or a count table
#: (:attr:`Preset.copies`)
COPIES = ("block", "mte")
#: How UBEP's CalCumSum AIVs share the count scan (:attr:`Preset.cumsum_scan`)
CUMSUM_SCANS = ("redundant", "split")
#: How CANN's kernel counts an expert's slots (:attr:`Preset.cann_count`)
CANN_COUNTS = ("vcount", "ascend")

#: Distance classes (UBEP Table 2).
CLASSES = ("intra", "one_hop", "two_hop")

#: Physical ranges of a machine: no superpod's one-way latency reaches 100 us, and a link's
#: latency FIFO grows with it (hw/link.py); no link moves 10 TB/s; no cycle is a microsecond.
MAX_LATENCY_NS = 100_000
MAX_GBYTES_S = 10_000
MAX_CYCLE_NS = 1_000


@dataclass(frozen=True)
class Preset:
    """A machine: topology shape, sizes, latencies and bandwidth in physical units.

    Validated at construction; :func:`dataclasses.replace` revalidates. Every field is
    declared by :func:`~epfabric.sw.param.param`: ``params_of(Preset)`` gives each as a
    :class:`~epfabric.sw.param.Param` (name, default, help).

    Raises
    ------
    ValueError, TypeError
        On an invalid field (named in the message).
    """
    name: str = param("preset name, as given to get_preset() (a machine file's: its path and "
                      "digest)", type=str)
    topology: str = param(
        "'superpod' (die - tier-1 board switch - tier-2) or 'star' (ranks on one switch)",
        type=str, choices=TOPOLOGIES)
    dies_per_npu: int = param("dies per NPU, linked directly to each other", default=2, type=int,
                              minimum=1, maximum=MAX_RANKS)
    npus_per_board: int = param("NPUs per board, behind one tier-1 switch", default=8, type=int,
                                minimum=1, maximum=MAX_RANKS)
    boards: int = param("largest number of boards behind the tier-2 switch", default=16,
                        type=int, minimum=1, maximum=MAX_RANKS)
    ranks: int = param("ranks on the switch of a 'star' topology", default=4, type=int,
                       minimum=1, maximum=MAX_RANKS)
    aivs_per_die: int = param("AIV vector cores per die", default=48, type=int, minimum=1,
                              maximum=MAX_AIVS_PER_DIE)
    bandwidth_gbytes_s: float = param(
        "bandwidth of every link, per direction, in GB/s (= bytes per ns)", default=392.0,
        type=float, unit="GB/s", positive=True, maximum=MAX_GBYTES_S)
    latency_intra_ns: float | None = param(
        "one-way latency of a 512 B store to the other die of the same NPU (ns; superpod only)",
        default=218.0, type=float, unit="ns", positive=True, maximum=MAX_LATENCY_NS)
    latency_one_hop_ns: float = param(
        "one-way latency through one switch layer (ns)", default=929.0, type=float, unit="ns",
        positive=True, maximum=MAX_LATENCY_NS)
    latency_two_hop_ns: float | None = param(
        "one-way latency through tier-1, tier-2 and tier-1 switches (ns; superpod only)",
        default=2500.0, type=float, unit="ns", positive=True, maximum=MAX_LATENCY_NS)
    cycle_ns: float = param("nanoseconds per simulated cycle", default=1.0, type=float,
                            unit="ns", positive=True, maximum=MAX_CYCLE_NS)
    block_bytes: int = param(
        "DataBlock size: the UB atomic unit, charged per flit by the rate limiter (a power of "
        "two)", default=512, type=int, unit="bytes", minimum=1)
    control_bytes: int = param(
        "bytes a link charges for a flit without a DataBlock (an ack, a word store, a load, a "
        "fetch-add): a UB control packet (at most block_bytes)", default=32, type=int,
        unit="bytes", minimum=1)
    data_bytes: int = param(
        "bytes of each block the datapath carries (flag_bytes..block_bytes); cycle counts do not "
        "depend on it", default=64, type=int, unit="bytes", minimum=1)
    flag_bytes: int = param(
        "leading bytes of a block that are always modelled (the Data-as-Flag field)", default=32,
        type=int, unit="bytes", minimum=1)
    full_duplex: bool = param(
        "each link direction has the full bandwidth independently (only true is modelled)",
        default=True, type=bool)
    cube_macs_per_row: int = param(
        "multiply-accumulates of one token's expert FFN on the cube unit (3*H*I; OLMoE-1B-7B: H "
        "2048, I 1024, INC-MoE §5)", default=3 * 2048 * 1024, type=int, unit="MAC", minimum=1)
    cube_macs_per_ns: float = param(
        "the die's cube unit rate in multiply-accumulates per ns; the default makes one row 8 ns, "
        "so that at one 512 B block per token the layer's FFN is ~0.25 of the ring's AG+RS time at "
        "N = 4, k = 8, E/N = 16 (docs/spec/kernels.md §3 incmoe-fig1, derived from the paper's ~73 "
        "% communication share)", default=786432.0, type=float, unit="MAC/ns", positive=True)
    send_window_bytes: int | None = param(
        "bytes of block stores a sending AIV may have unacknowledged: its staging buffers, each "
        "freed when its block's remote write completes (rounded up to whole blocks; a die's runtime"
        " knob store_window, hw/die.py KNOBS); None: the core's whole store window "
        "(max_outstanding), no extra limit", default=None, type=int, unit="bytes", minimum=1)
    send_buffers: int | None = param(
        "tokens a sending AIV may have unacknowledged: the open kernel's two UB token buffers "
        "(BUFFER_NUM, each reused once its copy out completes); a kernel that declares its "
        "token's blocks (Machine.set_token_blocks) gets the store window of send_buffers x "
        "those blocks; None: send_window_bytes, or the core's whole window",
        default=None, type=int, minimum=1)
    die_injection_gbytes_s: float | None = param(
        "bytes per ns a die may send into the fabric, all its flits together (the die's runtime "
        "knob inject_rate); None: no limit but the links'", default=None, type=float,
        unit="GB/s", positive=True, maximum=MAX_GBYTES_S)
    syncall: str = param(
        "how CANN's SyncAll runs: 'soft' (a die-local fetch-add counter and a poll) or 'hard' (the "
        "die's hardware barrier, the bar instruction)", default="soft", type=str,
        choices=SYNCALLS)
    syncall_ns: float = param(
        "ns a hardware SyncAll holds the die's AIVs after the last one arrived (the die's runtime "
        "knob syncall_cycles); used with syncall='hard'", default=0.0, type=float, unit="ns",
        minimum=0)
    vector_op_ns: float = param(
        "ns every vector instruction costs beyond its beats: issuing it and draining the vector "
        "pipe after it (the die's runtime knob vector_extra)", default=0.0, type=float, unit="ns",
        minimum=0)
    read_start_ns: float = param(
        "ns a copy from global memory into the UBuf waits before its first block's request (ldb;"
        " ldbc continues a started copy): the MTE2 copy engine's start beyond the memory's access "
        "time (the die's runtime knob read_extra); also a scalar read's unless poll_ns is given",
        default=0.0, type=float, unit="ns", minimum=0)
    poll_ns: float | None = param(
        "ns a scalar read of global memory waits before its request (a load, a fetch-add, each "
        "read of a poll: Ascend's Scalar unit reading GM past its DataCache) beyond the memory's "
        "access time (the die's runtime knob poll_extra); None: the same as read_start_ns",
        default=None, type=float, unit="ns", minimum=0)
    vector_lanes: int = param(
        "16-bit elements an AIV's vector unit takes a beat (a cycle) in the MoE kernels' machines "
        "(a power of two); 128 is Ascend's vector unit, 256 B a repeat (Ascend C's vector API: one"
        " repeat of a 16-bit op covers up to 128 elements, its mask). A build-time width, not a "
        "knob: cm384 and the presets before the Ascend structure keep 16, the width their figures "
        "were measured at", default=16, type=int, minimum=2, maximum=MAX_LANES)
    copies: str = param(
        "how the MoE dispatch kernels read: 'block' (every block and word a read of its own, the "
        "kernels so far) or 'mte' (Ascend's MTE2 copy engine: a token, a status slice or a count "
        "table is one copy into the UBuf, its start paid once (ldbc for the rest), and flags are "
        "checked there, a missing one polled)", default="block", type=str, choices=COPIES)
    cumsum_scan: str = param(
        "how UBEP's CalCumSum AIVs share the count scan: 'redundant' (each polls every count before"
        " its local experts', CANN's GetCumSum) or 'split' (each polls a contiguous chunk of the "
        "R·epr counts and the chunks' prefixes pass from one AIV to the next: UBEP App. C.3, more "
        "CalCumSum AIVs split the verification)", default="redundant", type=str,
        choices=CUMSUM_SCANS)
    cann_count: str = param(
        "how CANN's dispatch counts an expert's slots (a sent slot's index among its expert's, "
        "and each expert's count): 'vcount' (one VectorCount, three experts a pass: the kernels "
        "so far) or 'ascend' (the open kernel's CalTokenSendExpertCnt: Duplicate, Sub, Abs, "
        "Mins, ReduceSum, five vector instructions an expert, v1:449-473)", default="vcount",
        type=str, choices=CANN_COUNTS)
    cumsum_ratio: float | None = param(
        "β/α of UBEP App. A's Eq. 8 (a C-AIV's count and prefix time per expert over a T-AIV's "
        "sending time per slot), measured from the model (ubep.count_and_send_slopes): UBEP's "
        "default CalCumSum group C = round(ratio·A·E/(k·BS)) in [1, A − 1]; None: App. A's "
        "fit, C ≈ A·E/(3·k·BS) in [1, A/2]", default=None, type=float, positive=True)
    description: str = param("what the preset models", default="", type=str)

    def __post_init__(self):
        def number(name, allow_none=False):
            v = getattr(self, name)
            if v is None and allow_none:
                return
            check_number(name, v)

        if not isinstance(self.name, str):
            raise UserTypeError(f"name must be a string, not {self.name!r}")
        if not self.name:
            raise UserError(f"name must be a non-empty string, not {self.name!r}")
        check_choice("topology", self.topology, TOPOLOGIES)
        for name in ("dies_per_npu", "npus_per_board", "boards", "ranks", "aivs_per_die",
                     "data_bytes", "flag_bytes"):
            check_int(name, getattr(self, name), 1)
        check_pow2("block_bytes", self.block_bytes)
        check_int("control_bytes", self.control_bytes, 1, self.block_bytes)
        if not self.flag_bytes <= self.block_bytes:
            raise UserError(f"flag_bytes must be <= block_bytes ({self.block_bytes}), "
                            f"not {self.flag_bytes!r}")
        if not self.flag_bytes <= self.data_bytes <= self.block_bytes:
            raise UserError(f"data_bytes must be between flag_bytes ({self.flag_bytes}) and "
                            f"block_bytes ({self.block_bytes}), not {self.data_bytes!r}")
        number("bandwidth_gbytes_s")
        number("cycle_ns")
        number("latency_one_hop_ns")
        superpod = self.topology == "superpod"
        number("latency_intra_ns", allow_none=not superpod)
        number("latency_two_hop_ns", allow_none=not superpod)
        if superpod and not self.latency_intra_ns < self.latency_one_hop_ns < self.latency_two_hop_ns:
            raise UserError(
                f"latencies must grow with distance (intra < one_hop < two_hop), not "
                f"latency_intra_ns={self.latency_intra_ns!r}, latency_one_hop_ns="
                f"{self.latency_one_hop_ns!r}, latency_two_hop_ns={self.latency_two_hop_ns!r}")
        check_int("cube_macs_per_row", self.cube_macs_per_row, 1)
        number("cube_macs_per_ns")
        check_bool("full_duplex", self.full_duplex)
        if self.send_window_bytes is not None:
            check_int("send_window_bytes", self.send_window_bytes, 1)
        if self.send_buffers is not None:
            check_int("send_buffers", self.send_buffers, 1)
            if self.send_window_bytes is not None:
                raise UserError(f"send_buffers={self.send_buffers!r} and send_window_bytes="
                                f"{self.send_window_bytes!r}: one store window; give one of them")
        if self.die_injection_gbytes_s is not None:
            check_number("die_injection_gbytes_s", self.die_injection_gbytes_s)
            if not 0 < self.inject_rate() < 1 << INJECT_BITS:
                raise UserError(f"die_injection_gbytes_s={self.die_injection_gbytes_s!r} is "
                                f"{self.inject_rate() / INJECT_DEN} bytes per cycle; the knob "
                                f"holds 1/{INJECT_DEN} .. {((1 << INJECT_BITS) - 1) / INJECT_DEN}")
        check_choice("syncall", self.syncall, SYNCALLS)
        check_choice("copies", self.copies, COPIES)
        check_choice("cumsum_scan", self.cumsum_scan, CUMSUM_SCANS)
        check_choice("cann_count", self.cann_count, CANN_COUNTS)
        check_pow2("vector_lanes", self.vector_lanes, 2, MAX_LANES)
        # delays that become a cycle-count knob of that many bits
        for name, bits in (("syncall_ns", SYNCALL_BITS), ("vector_op_ns", VECTOR_EXTRA_BITS),
                           ("read_start_ns", READ_EXTRA_BITS), ("poll_ns", POLL_EXTRA_BITS)):
            value = getattr(self, name)
            if value is None and name == "poll_ns":     # the same as read_start_ns
                continue
            check_number(name, value, positive=False)
            if not 0 <= self.cycles(value) < 1 << bits:
                raise UserError(f"{name} must be in [0, {(1 << bits) - 1} cycles], not {value!r}")
        if self.syncall_ns and self.syncall != "hard":
            raise UserError(f"syncall_ns={self.syncall_ns!r} needs syncall='hard', not "
                            f"{self.syncall!r}")
        if not self.full_duplex:
            raise UserError("full_duplex=False is not modelled: every link direction is independent")
        for declared in params_of(Preset):   # the declared ranges (maxima) not checked above
            if getattr(self, declared.name) is not None:
                declared.check(getattr(self, declared.name))
        self.hop_cycles()  # latencies the fabric cannot reach fail here, not in a simulation

    # --- unit conversion: the only place in epfabric -----------------------------

    def cycles(self, ns):
        """Whole cycles closest to ``ns`` nanoseconds."""
        return round(ns / self.cycle_ns)

    def ns(self, cycles):
        """Nanoseconds of ``cycles`` cycles."""
        return cycles * self.cycle_ns

    def cube_cycles(self):
        """Cycles the cube unit spends on one row: ``ceil(macs_per_row / (macs_per_ns * cycle_ns))``."""
        rate = Fraction(str(self.cube_macs_per_ns)) * Fraction(str(self.cycle_ns))
        return max(1, math.ceil(Fraction(self.cube_macs_per_row) / rate))

    def knobs(self):
        """``{knob: value}`` of the dies' runtime knobs (:data:`epfabric.hw.die.KNOBS`) this
        preset sets; a knob it leaves out keeps its reset value (the elaborated behaviour)."""
        out = {}
        if self.send_window_bytes is not None:
            out["store_window"] = math.ceil(self.send_window_bytes / self.block_bytes)
        if self.syncall_ns:
            out["syncall_cycles"] = self.cycles(self.syncall_ns)
        if self.die_injection_gbytes_s is not None:
            out["inject_rate"] = self.inject_rate()
        if self.vector_op_ns:
            out["vector_extra"] = self.cycles(self.vector_op_ns)
        if self.read_start_ns:
            out["read_extra"] = self.cycles(self.read_start_ns)
        if self.poll_start_ns():
            out["poll_extra"] = self.cycles(self.poll_start_ns())
        return out

    def poll_start_ns(self):
        """ns a scalar read of global memory waits (the ``poll_extra`` knob): ``poll_ns``, or
        ``read_start_ns`` when the preset does not name its own (every preset before the two
        were apart charged both with ``read_start_ns``)."""
        return self.read_start_ns if self.poll_ns is None else self.poll_ns

    def inject_rate(self):
        """The ``inject_rate`` knob of ``die_injection_gbytes_s``: bytes per cycle times
        :data:`~epfabric.hw.die.INJECT_DEN`, rounded."""
        return round(self.die_injection_gbytes_s * self.cycle_ns * INJECT_DEN)

    def bytes_per_cycle(self):
        """Link bandwidth in bytes per cycle, as an exact fraction."""
        bw = Fraction(str(self.bandwidth_gbytes_s)) * Fraction(str(self.cycle_ns))
        return bw.limit_denominator(1 << 12)

    def rate(self):
        """``(rate_num, rate_den)`` for :class:`~epfabric.hw.link.Link`: bytes per cycle."""
        bw = self.bytes_per_cycle()
        return bw.numerator, bw.denominator

    def gbytes_s(self, nbytes, cycles):
        """Bandwidth in GB/s of ``nbytes`` moved in ``cycles`` cycles."""
        return nbytes / self.ns(cycles)

    @property
    def bandwidth_gbits_s(self):
        """Link bandwidth per direction in Gb/s."""
        return self.bandwidth_gbytes_s * 8

    def classes(self):
        """Distance classes this preset's topology has."""
        return CLASSES if self.topology == "superpod" else ("one_hop",)

    def latency_ns(self):
        """``{class: target one-way latency in ns}``."""
        lat = {"intra": self.latency_intra_ns, "one_hop": self.latency_one_hop_ns,
               "two_hop": self.latency_two_hop_ns}
        return {c: lat[c] for c in self.classes()}

    def latency_cycles(self):
        """``{class: target one-way latency in cycles}``."""
        return {c: self.cycles(v) for c, v in self.latency_ns().items()}

    def hop_cycles(self, topology=None):
        """Per-link latencies (cycles) such that a lone block's path sums to its class latency.

        Superpod paths (S = switch latency; die routers are switches too)::

            intra    router S + direct + router S
            one_hop  router S + up + tier-1 S + down + router S
            two_hop  router S + up + tier-1 S + t2_up + tier-2 S + t2_down + tier-1 S + down + router S

        Star: ``up + S + down`` equals the one-hop latency (any preset can
        build a star). ``topology`` defaults to the preset's. Returns
        ``{link kind: cycles}``.

        Raises
        ------
        ValueError
            If a class latency is shorter than the switches and links it crosses.
        """
        S, lmin = SWITCH_LATENCY, LINK_MIN_LATENCY
        lat = self.latency_cycles()

        def need(cls_name, field_name, budget, links):
            if budget < links * lmin:
                raise UserError(
                    f"{field_name}={getattr(self, field_name)!r} is {lat[cls_name]} cycles, shorter "
                    f"than the {lat[cls_name] - budget + links * lmin} cycles its path needs at "
                    f"cycle_ns={self.cycle_ns!r}")

        def split(total):
            return total // 2, total - total // 2

        topology = self.topology if topology is None else topology
        if topology not in TOPOLOGIES:
            raise UserError(f"topology must be one of {', '.join(TOPOLOGIES)}, not {topology!r}")
        if topology == "superpod" and self.topology != "superpod":
            raise UserError(f"preset {self.name!r} has no intra-NPU and two-hop latencies; "
                            f"it cannot build a superpod")
        if topology == "star":
            edge = lat["one_hop"] - S
            need("one_hop", "latency_one_hop_ns", edge, 2)
            up, down = split(edge)
            return {"up": up, "down": down}
        direct = lat["intra"] - 2 * S
        need("intra", "latency_intra_ns", direct, 1)
        edge = lat["one_hop"] - 3 * S
        need("one_hop", "latency_one_hop_ns", edge, 2)
        core = lat["two_hop"] - lat["one_hop"] - 2 * S
        need("two_hop", "latency_two_hop_ns", core, 2)
        up, down = split(edge)
        t2_up, t2_down = split(core)
        return {"direct": direct, "up": up, "down": down, "t2_up": t2_up, "t2_down": t2_down}

    def fabric_timing(self, topology=None):
        """The :class:`~epfabric.hw.topology.FabricTiming` the fabric builders take (cycles only)."""
        num, den = self.rate()
        return FabricTiming(hops=self.hop_cycles(topology), rate_num=num, rate_den=den,
                            block_bytes=self.block_bytes, small_bytes=self.control_bytes)

    def check_shape(self, dies_per_npu, npus_per_board, boards):
        """Raise ``ValueError`` unless the superpod shape fits this preset's maxima."""
        for name, value in (("dies_per_npu", dies_per_npu), ("npus_per_board", npus_per_board),
                            ("boards", boards)):
            check_int(name, value, 1, getattr(self, name))

    def describe(self):
        """``{field: value}`` for reports."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def replace(self, **changes):
        """A copy with ``changes`` applied (validated again)."""
        return replace(self, **changes)


PRESETS = {
    "cm384": Preset(
        name="cm384", topology="superpod", dies_per_npu=2, npus_per_board=8, boards=16,
        aivs_per_die=48, bandwidth_gbytes_s=392.0, latency_intra_ns=218.0,
        latency_one_hop_ns=929.0, latency_two_hop_ns=2500.0, cycle_ns=1.0,
        block_bytes=512, data_bytes=64,
        description="Huawei CloudMatrix384 superpod (UBEP Table 2, §2.3 Insight 3): "
                    "2 dies/NPU, 8 NPUs/board, up to 16 boards, 392 GB/s UB per NPU (each link "
                    "at 392 GB/s)"),
    "incmoe-testbed": Preset(
        name="incmoe-testbed", topology="star", ranks=4, aivs_per_die=48,
        bandwidth_gbytes_s=12.5, latency_intra_ns=None, latency_one_hop_ns=1000.0,
        latency_two_hop_ns=None, cycle_ns=1.0, block_bytes=512, data_bytes=64,
        description="INC-MoE testbed (§3.2, Fig. 6): N ranks on one switch, 100 Gb/s per "
                    "direction per rank, full duplex; the 1 us one-way latency is our assumption"),
    "tiny": Preset(
        name="tiny", topology="superpod", dies_per_npu=2, npus_per_board=2, boards=2,
        aivs_per_die=2, bandwidth_gbytes_s=384.0, latency_intra_ns=8.0,
        latency_one_hop_ns=16.0, latency_two_hop_ns=28.0, cycle_ns=1.0,
        block_bytes=512, data_bytes=32,
        description="a small superpod with short latencies for unit tests "
                    "(0.75 blocks per cycle per link)"),
}


#: The structure of an Ascend die, declared from the documentation, not fitted: the
#: vector unit's 256 B a repeat (128 lanes of 16 bits; Ascend C's vector API), the MTE2 copy
#: engine's one start a copy (``copies="mte"``: a DataCopy moves a token, a status slice or a
#: count table at once, and flags are checked in the Unified Buffer, as CANN's open dispatch
#: kernel does), the CalCumSum AIVs splitting the count scan (UBEP App. C.3:
#: ``cumsum_scan="split"``) and SyncAll as the die's hardware barrier (CANN's
#: ``SyncAll<true>()``, ``syncall="hard"``) and CANN's count as the open kernel's five vector
#: instructions (``cann_count="ascend"``). ``cm384-ascend`` is cm384 with it and every
#: timing knob at its reset; ``cm384-fit`` adds the fitted knobs (``epfabric calibrate --fit``).
ASCEND = {"vector_lanes": 128, "copies": "mte", "cumsum_scan": "split", "syncall": "hard",
          "cann_count": "ascend"}
PRESETS["cm384-ascend"] = PRESETS["cm384"].replace(
    name="cm384-ascend", **ASCEND,
    description="cm384 with the Ascend structure (128-lane vector unit, MTE copies, "
                "split CalCumSum scan, hardware SyncAll, CANN's five-instruction count), timing "
                "knobs at their reset: the base "
                "the calibration fits")

#: fitted presets: ``sw/fits/<base>.json`` (written by ``epfabric calibrate --fit --write``,
#: :mod:`epfabric.sim.lab.fit`) holds the fitted fields of preset ``<base>`` and their
#: provenance; it becomes the preset ``<base>-fit``. ``<base>`` itself stays as it is (for
#: cm384: the uncalibrated Table 2 machine every earlier figure used).
FITS = Path(__file__).resolve().parent / "fits"


def _fitted(path):
    doc = json.loads(path.read_text())
    base = PRESETS[doc["preset"]]
    name = f"{base.name}-fit"
    status = ", ".join(f"{k} {v.split(':')[0]}" for k, v in doc["provenance"]["status"].items())
    return base.replace(name=name, **doc["fields"],
                        description=f"{base.name} with its timing knobs fitted to the calibration's "
                                    f"training set F1-F5 (sw/fits/{path.name}; {status})")


for _path in sorted(FITS.glob("*.json")):
    _preset = _fitted(_path)
    PRESETS[_preset.name] = _preset


def fit_provenance(name):
    """The provenance of a fitted preset (targets, predicted and measured values, residuals,
    identifiability), or ``None`` for a preset that was not fitted."""
    name = get_preset(name).name
    if not name.endswith("-fit"):
        return None
    path = FITS / f"{name[:-len('-fit')]}.json"
    return json.loads(path.read_text())["provenance"] if path.exists() else None


def hardware_twin(name, kind):
    """The first preset (in :data:`PRESETS` order) that builds the same hardware as ``name``
    for a machine of topology ``kind``: the same fabric timing and cube rate, the only preset
    values the tops elaborate (:mod:`epfabric.sw.tops`); everything else a preset sets is a
    runtime knob or a program choice. A fitted preset's machines so share their base's builds
    (the backends key a build by the machine's specification)."""
    me = get_preset(name)
    want = (me.fabric_timing(kind), me.cube_cycles())
    for other in PRESETS.values():
        try:
            if (other.fabric_timing(kind), other.cube_cycles()) == want:
                return other.name
        except UserError:           # a preset that cannot build this topology kind
            continue
    return me.name


def preset_names():
    """The names :func:`get_preset` resolves without reading a file: the built-in presets, then
    the machine files this process has read (by reference)."""
    from .preset_file import loaded
    return list(PRESETS) + list(loaded())


def get_preset(name):
    """The preset called ``name``; a :class:`Preset` is returned unchanged, and a path ending in
    ``.toml`` is a machine file (:mod:`epfabric.sw.preset_file`), its preset named by its
    reference ``/absolute/path.toml#DIGEST``.

    Raises
    ------
    ValueError
        If there is no such preset (the message lists the valid names), or the file is not a
        valid machine (the message names the file and the field).
    """
    if isinstance(name, Preset):
        return name
    if isinstance(name, str) and name in PRESETS:
        return PRESETS[name]
    from .preset_file import is_preset_file, read_preset
    if is_preset_file(name):
        return read_preset(name)
    raise UserError(f"unknown preset {name!r}; valid presets: {', '.join(PRESETS)}, or a "
                    f"machine file NAME.toml (epfabric presets --show cm384)")
