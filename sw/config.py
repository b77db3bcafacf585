"""Machine configurations: everything that determines the simulated hardware (and its Verilog).

Two kinds of machine share the driver (:class:`~epfabric.sw.machine.Machine`):

* :class:`MachineConfig` — the AIV machine: dies with AIV cores, an HBM
  slice and an atomic UB port each, on a ``superpod`` or ``star`` fabric
  (:class:`~epfabric.hw.system.System`); it runs kernel *programs*;
* :class:`AgrsConfig` — AllGather/ReduceScatter endpoints (hardware traffic
  engines, INC-MoE §3.1) on a ``star`` with the INC engine, or the ring
  baseline (:class:`~epfabric.hw.inc_endpoint.AgrsSystem`); it runs one
  AG + RS per run on buffers loaded through the same host port.

Both validate every field at construction — the one place a machine's shape
is checked (the hardware constructors call the same checks in
:mod:`epfabric.hw.validate` and :func:`epfabric.hw.topology.check_topology`)
— and both tell the driver how to build their top (:attr:`factory`), how
their memory is laid out and which status outputs a run reports.
"""

from dataclasses import asdict, dataclass

from ..hw.inc_endpoint import MODES, agrs_control_map, agrs_memory_map
from ..hw.inc_engine import check_dtype
from ..hw.lane_arith import lane_bits
from ..hw.aiv_core import MAX_LANES, MAX_WINDOW
from ..hw.aiv_fp import check_fp_params
from ..hw.isa import RANK_BITS, check_rank_bits
from ..hw.system import MAX_AIVS_PER_DIE, MAX_EP_DIES, MAX_SAMPLE_DEPTH
from ..hw.topology import SUPERPOD_HOPS, check_topology, topology_ranks
from ..hw.validate import UserError, check_bool, check_choice, check_int, check_multiple, check_pow2
from .presets import get_preset, preset_names

__all__ = ["MachineConfig", "AgrsConfig", "parse_topology", "format_topology", "link_counter",
           "preset_name"]


#: the fp unit's shape fields of :class:`MachineConfig` at their defaults (``fp=False`` needs them)
FP_DEFAULTS = {"fp_lanes": 4, "fp_latency": None, "fp_repeat_cycles": None, "fp_fused": False}


def link_counter(what, kind):
    """The report's name of a superpod's counter of ``what`` (``"blocks"`` or ``"small"``)
    flits on the links of ``kind`` (:data:`~epfabric.hw.topology.SUPERPOD_HOPS`):
    ``link_blocks.up``, ... (System's ``fabric_link_blocks``/``fabric_link_small``)."""
    return f"link_{what}.{kind}"


def parse_topology(text):
    """``"superpod:2,2,2"`` or ``"star:4"`` → a validated topology tuple."""
    kind, _, sizes = str(text).partition(":")
    try:
        nums = tuple(int(x) for x in sizes.split(",")) if sizes else ()
    except ValueError:
        raise UserError(f"topology must look like superpod:2,2,2 or star:4, not {text!r}") from None
    return check_topology((kind, *nums))


def format_topology(topology):
    """``("superpod", 2, 2, 2)`` → ``"superpod:2,2,2"`` (what :func:`parse_topology` reads)."""
    return f"{topology[0]}:{','.join(str(x) for x in topology[1:])}"


def preset_name(preset):
    """The name of ``preset`` (a name, or a :class:`~epfabric.sw.presets.Preset`).

    Configurations cross into simulator processes as JSON, so they hold a preset *name*; a
    preset object is accepted only if it is the named one (a changed copy is refused, naming
    the way to give it: a machine file, :func:`~epfabric.sw.preset_file.saved_preset`).
    """
    found = get_preset(preset)
    if not isinstance(preset, str) and get_preset(found.name) != found:
        raise UserError(f"preset must be a named preset ({', '.join(preset_names())}), "
                        f"not a modified {found.name!r} (save it as a machine file: "
                        f"epfabric.sw.preset_file.saved_preset)")
    return found.name


def _named_preset(config):
    """The config's :class:`~epfabric.sw.presets.Preset`; ``config.preset`` becomes its name
    (:func:`preset_name`)."""
    if not isinstance(config.preset, str):
        object.__setattr__(config, "preset", preset_name(config.preset))
    return get_preset(config.preset)


@dataclass(frozen=True)
class MachineConfig:
    """The AIV machine (:class:`~epfabric.hw.system.System`): see the module docstring.

    Raises
    ------
    TypeError, ValueError
        On a field of the wrong type or out of range, a topology the preset
        cannot build, or a superpod larger than the preset's (named in the
        message).
    """
    preset: str = "tiny"
    topology: tuple = ("superpod", 2, 1, 1)
    aivs_per_die: int = 1
    imem_depth: int = 64
    ubuf_rows: int = 4
    hbm_blocks: int = 16
    data_bytes: int = 32
    lanes: int = 4
    trace_depth: int = 64
    max_outstanding: int = 512
    #: vector element width in bits (8, 16, 32); 32 for int32 rows (the INC-MoE layer)
    width: int = 16
    #: every die's UB port commits a block in 64 B beats instead of atomically: a
    #: negative control only (UBEP §3.4: Token-Flag Fusion tears without atomicity)
    non_atomic_port: bool = False
    #: the INC-MoE machine (docs/spec/kernels.md §2.6): ``"inc"`` or ``"ring"`` gives every die a network
    #: interface on an INC star and a cube unit (:class:`~epfabric.hw.system.System` ``nic``);
    #: ``""`` (default) builds none
    nic_mode: str = ""
    #: rows per rank block of the registered buffers (the padded layout's Tmax capacity)
    nic_tmax: int = 0
    #: aggregator slots of the INC engine (a power of two; >= ranks * band rows avoids stalls)
    inc_slots: int = 0
    #: width of an address's rank field (:func:`epfabric.hw.isa.address_layout`): 8 (256
    #: ranks, 2**15 blocks a rank) or fewer, for more blocks a rank; the programs must be
    #: built for it (a kernel that needs more blocks picks it: :func:`~epfabric.hw.isa.rank_bits_for`)
    rank_bits: int = RANK_BITS
    #: entries of the counter sampler's memory (:class:`~epfabric.hw.system.System`
    #: ``sample_depth``; the interval is a runtime register, :meth:`Machine.set_sampling
    #: <epfabric.sw.machine.Machine.set_sampling>`); 0 (default) builds no sampler and no UB
    #: commit counters, and the Verilog is unchanged
    sample_depth: int = 0
    #: in-network expert parallelism (:class:`~epfabric.hw.system.System`
    #: ``ep_inc``): 0 (default) builds none of it and the Verilog is unchanged; else every
    #: superpod switch multicasts and reduces, with this many result blocks per destination
    #: a run may reduce into (a power of two), and the cores run ``stbm``/``stbr``
    ep_window: int = 0
    #: lane type of the in-network EP sums (:mod:`epfabric.hw.lane_arith`; ``ep_window`` only):
    #: ``"int16"`` (default, wrapping), ``"fp32"`` or ``"bf16"`` (fp32 partial sums)
    ep_dtype: str = "int16"
    #: every core has the floating-point vector instructions (``vfcastf``, ``vfcastb``,
    #: ``vfadd``, ``vfmuls``, ``vfaxpy``; :class:`~epfabric.hw.aiv_core.AIVCore` ``fp``):
    #: ``False`` (default) builds none of it and the Verilog is unchanged
    fp: bool = False
    #: the fp unit's shape (``fp`` only; :func:`~epfabric.hw.aiv_fp.check_fp_params`):
    #: elements a beat, pipeline latency (``None``: the unit's), cycles a 256 B repeat
    #: (``None``: one beat a cycle), fused multiply-add
    fp_lanes: int = 4
    fp_latency: int = None
    fp_repeat_cycles: int = None
    fp_fused: bool = False

    #: the JSON-facing factory of the top (``ComponentSpec`` of a backend)
    factory = "epfabric.sw.tops:aiv_system"
    kind = "aiv"

    def __post_init__(self):
        preset = _named_preset(self)
        topo = check_topology(self.topology)
        object.__setattr__(self, "topology", topo)
        if topo[0] == "superpod":
            preset.check_shape(*topo[1:])
        preset.fabric_timing(topo[0])     # a star preset cannot build a superpod
        check_int("aivs_per_die", self.aivs_per_die, 1, MAX_AIVS_PER_DIE)
        check_pow2("imem_depth", self.imem_depth, 2, 65536)
        check_pow2("ubuf_rows", self.ubuf_rows, 1, 1024)
        check_pow2("hbm_blocks", self.hbm_blocks, 1, 1 << 23)
        check_rank_bits(self.rank_bits, self.ranks, self.hbm_blocks)
        check_multiple("data_bytes", self.data_bytes, 32, 32, 512)
        check_pow2("lanes", self.lanes, 1, MAX_LANES)
        check_int("trace_depth", self.trace_depth, 1, 65535)
        check_int("max_outstanding", self.max_outstanding, 1, MAX_WINDOW)
        check_choice("width", self.width, (8, 16, 32))
        check_bool("non_atomic_port", self.non_atomic_port)
        check_int("sample_depth", self.sample_depth, 0, MAX_SAMPLE_DEPTH)
        if self.ep_window:
            check_pow2("ep_window", self.ep_window, 1, 1 << 16)
            if topo[0] != "superpod":
                raise UserError(f"ep_window={self.ep_window} (in-network EP) needs a superpod "
                                f"topology, not {topo!r}")
            if self.ranks > MAX_EP_DIES:
                raise UserError(f"ep_window={self.ep_window}: in-network EP names its dies in a "
                                f"64-bit mask, at most {MAX_EP_DIES} dies, not {self.ranks}")
            if self.ep_window > self.hbm_blocks:
                raise UserError(f"ep_window={self.ep_window} is more than hbm_blocks="
                                f"{self.hbm_blocks}")
        lane_bits(self.ep_dtype)
        if self.ep_dtype != "int16" and not self.ep_window:
            raise UserError(f"ep_dtype={self.ep_dtype!r} needs ep_window (in-network EP)")
        check_bool("fp", self.fp)
        check_fp_params(lanes=self.fp_lanes, latency=self.fp_latency,
                        repeat_cycles=self.fp_repeat_cycles, fused=self.fp_fused,
                        data_bytes=self.data_bytes)
        if not self.fp and self.fp_params != FP_DEFAULTS:
            raise UserError(f"fp_lanes, fp_latency, fp_repeat_cycles and fp_fused "
                            f"({self.fp_params}) need fp=True")
        window = preset.knobs().get("store_window")
        if window is not None and window > self.max_outstanding:
            raise UserError(f"send_window_bytes={preset.send_window_bytes} of preset "
                            f"{preset.name!r} is {window} blocks, more than max_outstanding="
                            f"{self.max_outstanding}")
        if self.nic_mode != "":
            check_choice("nic_mode", self.nic_mode, MODES)
            if topo[0] != "star":
                raise UserError(f"nic_mode={self.nic_mode!r} needs a star topology, not "
                                f"{format_topology(topo)}")
            if self.non_atomic_port:
                raise UserError("nic_mode with non_atomic_port=True: the network interface "
                                "signals a row when its write is accepted, which a port that "
                                "commits beat by beat would tear")
            check_int("nic_tmax", self.nic_tmax, 1)
            check_pow2("inc_slots", self.inc_slots, 1, 1 << 12)
            regions = self.nic_regions
            if regions["end"] > self.hbm_blocks:
                raise UserError(f"hbm_blocks={self.hbm_blocks} cannot hold the registered buffers "
                                f"of nic_tmax={self.nic_tmax} ({regions['end']} blocks)")
        elif self.nic_tmax or self.inc_slots:
            raise UserError("nic_tmax and inc_slots need nic_mode 'inc' or 'ring'")

    @property
    def fp_params(self):
        """``{fp_lanes, fp_latency, fp_repeat_cycles, fp_fused}``: the fp unit's shape as given."""
        return {k: getattr(self, k) for k in FP_DEFAULTS}

    @property
    def has_nic(self):
        return self.nic_mode != ""

    @property
    def nic_regions(self):
        """First DataBlock of each registered buffer in every die's HBM (INC machine only).

        ``xg``: the padded gather buffer (``ranks`` blocks of ``nic_tmax`` rows,
        INC-MoE §3.1); ``z``: the partials and output, same shape; ``rsin``:
        ``nic_tmax`` rows where the reduced rows of this rank arrive; ``end``:
        the first block after them (the kernel's own data starts there).
        """
        n, t = self.ranks, self.nic_tmax
        return {"xg": 0, "z": n * t, "rsin": 2 * n * t, "end": 2 * n * t + t}

    @property
    def ranks(self):
        return topology_ranks(self.topology)

    @property
    def cores(self):
        return self.ranks * self.aivs_per_die

    @property
    def words_per_block(self):
        return self.data_bytes // 4

    @property
    def memory_blocks(self):
        """DataBlocks of each rank's memory the host can write."""
        return self.hbm_blocks

    @property
    def readback_blocks(self):
        """DataBlocks of each rank read back after a run."""
        return self.hbm_blocks

    def status_ports(self):
        """Outputs read after every run: ``{"cores": {field: [port, ...]}, "counters": {...}}``.

        ``cores`` has one port per global core id, ``counters`` one per rank -- except a
        superpod's per-link-kind counters, one for the machine each (:func:`link_counter`).
        """
        cores = range(self.cores)
        counters = {k: [f"fabric_{k}.{r}" for r in range(self.ranks)]
                    for k in ("tx_blocks", "rx_blocks", "tx_stalls")}
        if self.topology[0] == "superpod":     # one machine-wide value each
            for what in ("blocks", "small"):
                counters.update({link_counter(what, kind): [f"fabric_link_{what}.{i}"]
                                 for i, kind in enumerate(SUPERPOD_HOPS)})
        if self.sample_depth:                  # the UB port commit counters come with the sampler
            counters.update({k: [f"{k}.{r}" for r in range(self.ranks)]
                             for k in ("ub_blocks", "ub_words")})
        if self.has_nic:
            counters.update({f"inc_{k}": [f"inc_{k}.{r}" for r in range(self.ranks)]
                             for k in ("ag", "rs", "bar")})
            counters["inc_slot_stalls"] = ["inc_slot_stalls"]
        return {"cores": {k: [f"core_{k}.{g}" for g in cores]
                          for k in ("pc", "halted", "fault", "waiting", "wait_addr")},
                "counters": counters}

    has_trace = True

    def to_dict(self):
        """The fields as JSON; ``non_atomic_port`` (and ``fp`` with its unit's shape) only when
        set, so a default machine's specification (and so its Verilog and build cache keys)
        stays what it was."""
        d = asdict(self)
        d["topology"] = list(self.topology)
        if not self.non_atomic_port:
            del d["non_atomic_port"]
        if self.width == 16:
            del d["width"]
        if self.rank_bits == RANK_BITS:
            del d["rank_bits"]
        if not self.sample_depth:
            del d["sample_depth"]
        if not self.ep_window:
            del d["ep_window"]
        if self.ep_dtype == "int16":
            del d["ep_dtype"]
        if not self.fp:
            for k in ("fp", *FP_DEFAULTS):
                del d[k]
        if not self.has_nic:
            for k in ("nic_mode", "nic_tmax", "inc_slots"):
                del d[k]
        return d


@dataclass(frozen=True)
class AgrsConfig:
    """AllGather/ReduceScatter endpoints on an INC star (:class:`~epfabric.hw.inc_endpoint.AgrsSystem`).

    ``mode`` is ``"inc"`` (the switch's INC engine multicasts and reduces) or
    ``"ring"`` (the ring baseline on the same star). Buffers use the padded
    layout of INC-MoE §3.1: ``ranks`` blocks of ``tmax`` rows, one 512 B
    DataBlock per row of which ``lanes`` int32 words are modelled. The memory
    map the host sees is :func:`~epfabric.hw.inc_endpoint.agrs_memory_map`.
    """
    preset: str = "incmoe-testbed"
    ranks: int = 4
    mode: str = "inc"
    tmax: int = 4
    lanes: int = 2
    slots: int = 16
    switch_depth: int = 4
    #: lane type of the ReduceScatter (:data:`~epfabric.hw.inc_engine.DTYPES`): ``"int32"``,
    #: ``"fp32"``, ``"bf16"`` (two lanes a word)
    dtype: str = "int32"

    factory = "epfabric.sw.tops:agrs_system"
    kind = "agrs"
    has_trace = False
    #: the host's addresses name a block of the addressed rank's own buffers (the endpoints
    #: decode ``addr[31:9]`` as the block; there is no rank field), so the driver builds
    #: them with the narrowest rank field: 2**22 blocks a rank
    rank_bits = 1

    def __post_init__(self):
        preset = _named_preset(self)
        check_int("ranks", self.ranks, 2)
        check_topology(("star", self.ranks))
        preset.fabric_timing("star")
        check_choice("mode", self.mode, MODES)
        check_int("tmax", self.tmax, 1)
        check_int("lanes", self.lanes, 1, 128)
        check_pow2("slots", self.slots)
        check_int("switch_depth", self.switch_depth, 2)
        check_dtype(self.dtype)

    @property
    def topology(self):
        return ("star", self.ranks)

    @property
    def words_per_block(self):
        return self.lanes

    @property
    def memory_map(self):
        """``{buffer: first DataBlock}`` (see :func:`~epfabric.hw.inc_endpoint.agrs_memory_map`)."""
        return agrs_memory_map(self.ranks, self.tmax)

    @property
    def control_map(self):
        """Control registers (:func:`~epfabric.hw.inc_endpoint.agrs_control_map`)."""
        return agrs_control_map(self.ranks)

    @property
    def memory_blocks(self):
        return self.memory_map["end"]

    @property
    def readback_blocks(self):
        """The gather buffer and the reduced shard (the partials are inputs only)."""
        return self.memory_map["rs"]

    def status_ports(self):
        """Outputs read after every run (see :meth:`MachineConfig.status_ports`)."""
        n = range(self.ranks)
        return {"cores": {},
                "counters": {"ag_count": [f"ag_count.{r}" for r in n],
                             "rs_count": [f"rs_count.{r}" for r in n],
                             "slot_stalls": ["slot_stalls"]}}

    def to_dict(self):
        """The fields as JSON; ``dtype`` only when not ``"int32"`` (a default machine's
        specification, and so its build cache keys, as before)."""
        d = asdict(self)
        if self.dtype == "int32":
            del d["dtype"]
        return d
