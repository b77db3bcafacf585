"""``dispatch``: MoE token dispatch — CANN EP's BSP baseline or UBEP's kernel — bit-exact.

Each rank sends every token to the ranks of its k experts; each rank ends
with the tokens it received in CANN's order (local expert, source rank, slot
j) in ``OUT`` and the per-(expert, source) counts in ``COUNTS``
(docs/spec/kernels.md §1.2). The programs are :mod:`epfabric.sw.ubep.cann`
(``system="cann"``: raw blocks, stop-and-wait, SyncAll) and
:mod:`epfabric.sw.ubep.ubep` (``system="ubep"``: T-AIVs and a CalCumSum
group of ``cumsum_aivs``, topology-aware mapping, Token-Flag Fusion, no
SyncAll); both give the same ``OUT`` — with TFF the first four words of
every block are its header instead of payload.

Variants for UBEP's mapping ablation (§5.4, Fig. 9; docs/spec/kernels.md §1.6), each
with the same ``OUT``, ``COUNTS`` and ``EXPAND``:

* ``mapping`` (UBEP only): ``"transpose"`` (default, π = the expert
  transposition) or ``"identity"`` (UBEP w/o mapping: balanced counts,
  topology-blind) — :data:`~epfabric.sw.ubep.ubep.MAPPINGS`;
* ``send_split`` (CANN only): ``"slot"`` (default, the open kernel's
  contiguous slot ranges) or ``"expert"`` (AIV ``a`` sends every slot of the
  experts ``e ≡ a mod A``) — :data:`~epfabric.sw.ubep.cann.SEND_SPLITS`.

``sync`` (UBEP only; docs/spec/kernels.md §1.7) is how a receiver sees a token block
arrive: ``"tff"`` (the default, UBEP's Token-Flag Fusion: the flag in every
block), ``"sp"`` (Sentinel Polling: raw blocks into receive slots the host
arms with the reserved sentinel, polled ``ne`` and re-armed by their reader
after the copy; a payload whose word 0 is the sentinel is refused before
the run) or ``"sw"`` (stop-and-wait: raw blocks, a ``fence``, then one flag
word per (source rank, T-AIV) in ``SWFLAG``; a reorder polls its source's
flags once, then copies). SP and SW deliver CANN's raw ``OUT``.

``syncall`` (CANN only): how SyncAll runs — ``"soft"`` (a die-local fetch-add counter and
a poll) or ``"hard"`` (the die's hardware barrier ``bar``, whose cost is the preset's
``syncall_ns``, a runtime knob); ``None`` is the preset's ``syncall``.

``copies`` (both systems): how the kernels read flags, counts and tokens — ``"block"``
(the kernels so far) or ``"mte"`` (Ascend's copy engine: a status slice or a count table is
one copy into the UBuf and checked there; UBEP's reordering copies a token at once and checks
its blocks' flags there) — and ``cumsum_scan`` (UBEP only): ``"redundant"`` or ``"split"``
(the CalCumSum AIVs split the count scan; :func:`~epfabric.sw.ubep.ubep._split_scan`);
``None`` is the preset's ``copies`` / ``cumsum_scan`` (docs/concepts/time-model.md).

Launch skew (a workload option, not fitted): with ``launch_skew_ns = t`` every
dispatch program starts by spinning until its core has run ``d_r`` cycles, ``CTRL`` word 3 of
its rank, which the host places: ``d_r`` drawn uniformly in ``[0, t]`` ns (converted by the
preset) per rank from the run's seed (:func:`launch_delays`); the dispatch of a ``combine``
run is delayed, the combine itself is not.

Skewed routing (workload options, not fitted): ``hot_layout`` puts the ``hot``
experts at spread ids (``"spread"``, default) or at ids ``0 .. hot - 1``
(``"consecutive"``: one or two ranks take them all); ``zipf`` (with ``hot = 0``) draws
expert ``e`` with weight ``(e + 1) ** -zipf`` (:func:`~epfabric.sw.routing.route`).

``None`` (the default of each) is the system's default; naming one for the
other system is an error. ``hot`` experts take about ``hot_share`` of the
slots (:class:`~epfabric.sw.ubep.workload.Workload`). The machine
configuration does not depend on the system or variant: one build serves
all of them. The inputs
(:class:`~epfabric.sw.ubep.workload.Workload`) are data the host places; the
checker compares every rank's ``OUT`` and ``COUNTS`` with
:mod:`epfabric.sw.ubep.reference`, checks the guard blocks and reports
per-AIV phase times from the MARK trace.

Machine sizes: full-fidelity blocks (``data_bytes = 512``: the routing list is
read by the vector unit as 16-bit elements, 256 to a block), the preset's ``vector_lanes``
(16 in ``cm384`` and the small presets; 128, Ascend's 256 B a repeat, in ``cm384-ascend`` and
``cm384-fit``).
"""

import hashlib
from dataclasses import replace

import numpy as np

from ...hw.aiv_core import MAX_UBUF_ROWS
from ...hw.validate import UserError, check_int, check_number

from ..config import MachineConfig
from ..isa import block_bits, narrowest_rank_bits, rank_bits_for
from ..presets import COPIES, CUMSUM_SCANS, SYNCALLS as SYNCALL_KINDS, get_preset
from ..routing import HOT_LAYOUTS
from ..ubep import combine, ubep, ubep_inc
from ..ubep import cann
from ..ubep.cann import BROKEN, PHASES, SEND_SPLITS, SYNCALLS, dispatch_program
from ..ubep.cann import phases as cann_phases, syncall_pairs
from ..ubep.layout import GUARD, Layout
from ..ubep.traffic import link_report
from ..ubep.reference import counts, dispatch_order, dispatch_out, slot_index
from ..ubep.workload import MODELS, Workload, blocks_per_token, check_routing, read_routing
from ..param import Param
from . import Kernel, pow2_at_least, register

__all__ = ["Dispatch", "KERNEL", "layout_of", "phase_times", "option", "OPTIONS", "VARIANTS",
           "MAX_TOPK", "model_shape", "token_blocks", "syncall_release_share", "links_of",
           "link_line"]

SYSTEMS = ("cann", "ubep", "ubep-inc")
#: the systems that need switches that multicast and reduce (a machine with ``ep_window``)
INC_SYSTEMS = ("ubep-inc",)
#: the parameters of one system only: ``{name: (system, its values, the first the default)}``
OPTIONS = {"send_split": ("cann", SEND_SPLITS), "mapping": ("ubep", ubep.MAPPINGS),
           "sync": ("ubep", ubep.SYNCS), "syncall": ("cann", SYNCALL_KINDS),
           "cumsum_scan": ("ubep", CUMSUM_SCANS)}
#: the mapping ablation's variant per system (UBEP Fig. 9): a machine is sized for all of them
VARIANTS = {"cann": "send_split", "ubep": "mapping", "ubep-inc": None}
#: UBEP's header words at the front of every block (TFF): the rest is payload
HEADER_WORDS = 4
#: ``{phase-end MARK: the phase's name}`` for the Perfetto trace (UBEP Fig. 8's stages): each
#: AIV's run becomes back-to-back slices, one per phase, ending at its MARK
TRACE_PHASES = {
    PHASES["init"]: "Init", PHASES["send"]: "Token-Sending",
    PHASES["sync1_in"]: "SendFlag: count + fence", PHASES["sync1_out"]: "SyncAll 1",
    PHASES["count_sync"]: "SendFlag: status", PHASES["sync2_in"]: "Flag Verification",
    PHASES["verify"]: "SyncAll 2", PHASES["cumsum"]: "CalCumSum",
    PHASES["reorder"]: "Token-Reordering", PHASES["sync3_in"]: "sendCounts + fence",
    PHASES["sync3_out"]: "SyncAll 3", PHASES["update"]: "UpdateTokenNumsOut",
    ubep.EVENTS["count"]: "TokenCnt"}  # UBEP's others
#: the largest top-k the kernels take (any k from 1: DeepSeek-V2's top-6, the models' top-8)
MAX_TOPK = 16


def model_shape(model, system):
    """``{topk, experts, hidden_blocks}`` of UBEP Table 3's ``model`` (a :data:`MODELS` key).

    ``hidden_blocks`` is the model's hidden size at its precision in the 512 B
    blocks ``system`` moves a token in: ``⌈H/512⌉`` raw blocks for CANN,
    ``⌈H/480⌉`` for UBEP, whose blocks carry the 32 B Token-Flag-Fusion header
    (:func:`~epfabric.sw.ubep.workload.blocks_per_token`; UBEP's combine is
    Token-Flag Fused whatever the dispatch's ``sync``).
    """
    if model not in MODELS:
        raise UserError(f"model must be one of {', '.join(MODELS)}, not {model!r}")
    m = MODELS[model]
    return {"topk": m.topk, "experts": m.experts,
            "hidden_blocks": token_blocks(m.hidden_bytes, system)}


def token_blocks(nbytes, system):
    """512 B blocks ``system`` moves a token of ``nbytes`` in: ``⌈H/512⌉`` raw for CANN,
    ``⌈H/480⌉`` for UBEP and UBEP-INC, whose blocks lead with the 32 B Token-Flag-Fusion
    header (UBEP §3.4: "the 32 bytes leading serves as the flag field and utilizing only the
    remaining 480 bytes for payload"), whatever the dispatch's ``sync`` (UBEP's combine is
    Token-Flag Fused either way). A 7,168 B token (UBEP Table 4's): 14 blocks and 15."""
    return blocks_per_token(nbytes, tff=system != "cann")


def hidden_bytes(params):
    """Bytes a token carries for the bandwidth figure: ``hidden_bytes`` or the model's ``H``,
    else 512 a block."""
    if params.get("hidden_bytes") is not None:
        return params["hidden_bytes"]
    return MODELS[params["model"]].hidden_bytes if params.get("model") else None


def layout_of(config, params):
    """The :class:`~epfabric.sw.ubep.layout.Layout` of a run.

    ``cap`` (tokens per (source, expert) receive region) is the parameter,
    or the batch — the worst case, CANN's ``axisMaxBS``.
    """
    lay = Layout(ranks=config.ranks, epr=params["experts"] // config.ranks, batch=params["batch"],
                 topk=params["topk"], hidden_blocks=params["hidden_blocks"],
                 words=config.words_per_block, cap=params.get("cap") or params["batch"],
                 flag_words=(config.ranks * config.aivs_per_die
                             if params["system"] == "ubep" and option(params, "sync") == "sw"
                             else 0),
                 rank_bits=config.rank_bits, inc=params["system"] in INC_SYSTEMS)
    if lay.blocks > 1 << block_bits(config.rank_bits):
        # the machine's addresses cannot hold the combine's regions: a dispatch-only machine
        # (Dispatch.configs sizes one only for the dispatch kernel; the combine refuses it)
        return replace(lay, combine=False)
    return lay


def _blocks_of_bytes(p, given):
    """``hidden_blocks`` of ``hidden_bytes`` for ``p``'s system (:func:`token_blocks`); a model
    (it sets the token's size) or a ``hidden_blocks`` that differs is refused, naming both."""
    check_int("hidden_bytes", p["hidden_bytes"], 1)
    if p["model"] is not None:
        raise UserError(f"hidden_bytes={p['hidden_bytes']!r} and model={p['model']!r}: the "
                        f"model sets the token's size; give one of them")
    blocks = token_blocks(p["hidden_bytes"], p["system"])
    if given.get("hidden_blocks") is not None and given["hidden_blocks"] != blocks:
        raise UserError(f"hidden_blocks={given['hidden_blocks']!r} conflicts with hidden_bytes="
                        f"{p['hidden_bytes']!r} ({blocks} blocks for system={p['system']!r}); "
                        f"give one of them")
    return blocks


def _routing_shape(p, given):
    """``routing`` (a path, as a string) after setting ``p``'s batch and topk from its file.

    A batch or topk given too (or a model's topk) that differs from the file's is refused,
    naming both.
    """
    idx, _ = read_routing(p["routing"])
    path = str(p["routing"])
    for name, value in (("batch", idx.shape[1]), ("topk", idx.shape[2])):
        other = (given.get(name) if given.get(name) is not None
                 else p[name] if name == "topk" and p["model"] is not None else None)
        if other is not None and other != value:
            by = f"model={p['model']!r}" if given.get(name) is None else ""
            raise UserError(f"{name}={other!r}{' (' + by + ')' if by else ''} conflicts with "
                            f"routing={path!r} ({name}={value} from its shape {idx.shape}); "
                            f"give one of them")
        p[name] = int(value)
    if p["hot"]:
        raise UserError(f"hot={p['hot']!r} draws a routing; routing={path!r} replays one: "
                        f"give one of them")
    return path


def workload_of(params, ranks, words):
    """The :class:`~epfabric.sw.ubep.workload.Workload` of a run on ``ranks`` ranks.

    Drawn from ``params``' seed; with ``routing`` (a file), its routing and weights replace
    the drawn ones (the tokens stay the seed's). A file of another rank count is refused.
    """
    w = Workload(ranks=ranks, batch=params["batch"], topk=params["topk"],
                 experts=params["experts"], hidden_blocks=params["hidden_blocks"], words=words,
                 seed=params["seed"], hot=params["hot"], hot_share=params.get("hot_share", 0.3),
                 hot_layout=params.get("hot_layout") or "spread", zipf=params.get("zipf") or 0.0)
    if params.get("routing") is None:
        return w
    idx, wts = read_routing(params["routing"])
    if idx.shape[0] != ranks:
        raise UserError(f"routing={params['routing']!r} has {idx.shape[0]} ranks (its shape "
                        f"{idx.shape}); the machine has {ranks}")
    return w.replay(idx, wts)


def launch_delays(params, ranks, preset):
    """Each rank's launch delay in cycles (``CTRL`` word 3): uniform in ``[0,
    launch_skew_ns]`` from the run's seed, converted by the preset; zeros without a skew."""
    skew = params.get("launch_skew_ns")
    if skew is None:
        return [0] * ranks
    rng = np.random.default_rng(params["seed"] * 1000 + 0x1A)
    return [preset.cycles(float(t)) for t in rng.uniform(0, skew, size=ranks)]


def check_sentinel_free(w):
    """``UserError`` when a token block's word 0 is SP's reserved word (the data's fault).

    Sentinel Polling sees a block arrive when word 0 stops being the sentinel
    (UBEP §3.4: the encoding is reserved, arithmetic never produces it); a
    payload that carries it would never be seen.
    """
    for s, x in enumerate(w.x):
        hit = np.argwhere(np.asarray(x)[:, :, 0] == ubep.SENTINEL_WORD)
        if len(hit):
            t, b = map(int, hit[0])
            raise UserError(f"token {t} block {b} of rank {s} starts with SP's reserved "
                            f"sentinel word {ubep.SENTINEL_WORD:#x}; sync='sp' cannot carry it")


def check_cap(w, cap):
    """``ValueError`` when a source routes over ``cap`` slots to one expert (the data's fault)."""
    if cap is None:
        return
    cnt = counts(w)                       # [d, e_l, s]
    worst = int(cnt.max()) if cnt.size else 0
    if worst > cap:
        d, e_l, s = np.unravel_index(int(cnt.argmax()), cnt.shape)
        raise UserError(f"cap {cap} is too small: rank {s} routes {worst} slots to expert "
                        f"{d * w.epr + e_l}; raise cap (at most batch)")


def phase_times(report, aivs, system="cann"):
    """``{(rank, core): {phase: cycle}}`` from the MARK trace (cycles since start)."""
    names = {v: k for k, v in (PHASES if system == "cann" else ubep.EVENTS).items()}
    out = {}
    for t in report.trace:
        if t["event"] in names:
            out.setdefault((t["rank"], t["core"]), {})[names[t["event"]]] = t["cycle"]
    return out


def cumsum_aivs(config, params):
    """UBEP's CalCumSum group size: the parameter; else Eq. 8 with the preset's measured
    ``cumsum_ratio`` (:func:`~epfabric.sw.ubep.ubep.cumsum_rule`); else App. A's fit
    (:func:`~epfabric.sw.ubep.ubep.default_cumsum_aivs`)."""
    if params.get("cumsum_aivs") is not None:
        return params["cumsum_aivs"]
    ratio = get_preset(config.preset).cumsum_ratio
    if ratio is not None:
        return ubep.cumsum_rule(config.aivs_per_die, params["experts"], params["topk"],
                                params["batch"], ratio)
    return ubep.default_cumsum_aivs(config.aivs_per_die, params["experts"], params["topk"],
                                    params["batch"])


def combine_programs(config, params):
    """``{(rank, core): Program}`` of the combine that follows a dispatch of ``params``."""
    lay = layout_of(config, params)
    if params["system"] in INC_SYSTEMS:
        return {(r, c): ubep_inc.combine_program(lay, rank=r, core=c, aivs=config.aivs_per_die,
                                                 experts=params["experts"],
                                                 broken=params.get("combine_broken"),
                                                 dtype=params.get("dtype", "int16"))
                for r in range(config.ranks) for c in range(config.aivs_per_die)}
    syncall = params.get("syncall") or get_preset(config.preset).syncall
    return {(r, c): combine.combine_program(lay, rank=r, core=c, aivs=config.aivs_per_die,
                                            system=params["system"],
                                            broken=params.get("combine_broken"), syncall=syncall,
                                            **({"dtype": params["dtype"]}
                                               if params.get("dtype", "int16") != "int16" else {}))
            for r in range(config.ranks) for c in range(config.aivs_per_die)}


def die_mask(w, s, t):
    """The dies holding one of token ``t``'s experts (of source ``s``), a bit each."""
    return sum({1 << int(e) // w.epr for e in w.topk_idx[s][t]})


def with_headers(w, order, rows, epoch, inc=False):
    """``rows`` (a rank's expected OUT) with UBEP's TFF header in words 0..3 of every block;
    ``order`` is that rank's ``dispatch_order(w)[d]`` (computed once per check: it walks every
    rank's slots). ``inc`` (UBEP-INC): word 2 is the token's die mask, not ``e << 8 | i`` (one
    multicast block serves all its experts); past 32 dies word 2 holds dies 0..31 and word 3
    dies 32..63 instead of the block index."""
    out = rows.copy()
    wide = inc and w.ranks > 32
    for p, (s, t, i) in enumerate(order):
        e = int(w.topk_idx[s][t, i])
        mask = die_mask(w, s, t) if inc else 0
        word2 = mask & 0xFFFFFFFF if inc else e << 8 | i
        for b in range(w.hidden_blocks):
            out[p, b, :HEADER_WORDS] = [ubep.TFF_TAG | epoch, s << 16 | t, word2,
                                        mask >> 32 if wide else b]
    return out


def option(params, name):
    """The run's value of the one-system parameter ``name`` (:data:`OPTIONS`), defaulted."""
    return params.get(name) or OPTIONS[name][1][0]


def variants_of(system):
    """``[{variant parameter: value}]``: every variant of ``system`` a machine must fit."""
    name = VARIANTS[system]
    if name is None:
        return [{}]
    return [{name: v} for v in OPTIONS[name][1]]


def _phase_split(phases):
    """``name end (+duration)`` of every phase, in phase order, each averaged over the AIVs that
    MARK it; an AIV's phase lasts from its own previous phase end (UBEP's T- and C-AIVs run
    different phases side by side)."""
    ends, lasts = {}, {}
    for times in phases.values():
        last = 0
        for name, cycle in sorted(times.items(), key=lambda kv: kv[1]):
            ends.setdefault(name, []).append(cycle)
            lasts.setdefault(name, []).append(cycle - last)
            last = cycle
    mean = {n: sum(c) / len(c) for n, c in ends.items()}
    return ", ".join(f"{n} {mean[n]:.0f} (+{sum(lasts[n]) / len(lasts[n]):.0f})"
                     for n in sorted(mean, key=mean.get))


class Dispatch(Kernel):
    """MoE dispatch (module docstring)."""

    name = "dispatch"
    description = ("MoE token dispatch (CANN EP's BSP kernel or UBEP's: --system), checked "
                   "bit-exact against numpy")
    params = (
        Param("system", "cann", "CANN EP's BSP kernel, UBEP's, or UBEP's on switches that "
              "multicast and reduce", str, SYSTEMS),
        Param("batch", 32, "tokens per rank (BS)", int),
        Param("topk", 8, "experts per token (k)", int),
        Param("experts", 32, "experts (E), spread evenly over the ranks", int),
        Param("hidden_blocks", 1, "512 B blocks per token (B_tok)", int),
        Param("hidden_bytes", None, "bytes a token carries (H); sets hidden_blocks per system: "
              "ceil(H/512) for cann, ceil(H/480) for ubep and ubep-inc (their 32 B "
              "Token-Flag-Fusion header a block)", int),
        Param("seed", 0, "routing and token seed", int, minimum=0),
        Param("hot", 0, "hot experts, which take about hot_share of the slots (0: none)", int),
        Param("broken", None, "a negative control of system='cann'", choices=BROKEN),
        Param("cumsum_aivs", None, "UBEP's CalCumSum AIVs per die (unset: App. A's fit)", int),
        Param("cap", None, "receive slots per (source rank, expert) (unset: the batch)", int),
        Param("mapping", None, "UBEP's expert mapping (unset: transpose)",
              choices=OPTIONS["mapping"][1]),
        Param("send_split", None, "how CANN's AIVs split the slots they send (unset: slot)",
              choices=OPTIONS["send_split"][1]),
        Param("hot_share", 0.3, "share of the slots the hot experts take", float),
        Param("sync", None, "how UBEP's receiver sees a block arrive (unset: tff)",
              choices=OPTIONS["sync"][1]),
        Param("syncall", None, "how CANN's SyncAll runs (unset: the preset's)",
              choices=OPTIONS["syncall"][1]),
        Param("model", None, "a model of UBEP Table 3: its topk, experts and hidden_blocks",
              choices=tuple(MODELS)),
        Param("routing", None, "a routing file to replay (.npz, topk_idx of ranks x batch x "
              "topk): its batch and topk"),
        Param("hot_layout", None, "where the hot experts sit (unset: spread)",
              choices=HOT_LAYOUTS),
        Param("zipf", None, "expert e drawn with weight (e + 1) ** -zipf (with hot 0)", float),
        Param("launch_skew_ns", None, "each rank starts up to this many ns late (drawn from "
              "the seed)", float),
        Param("copies", None, "how the kernels read tokens, flags and counts (unset: the "
              "preset's)", choices=COPIES),
        Param("cumsum_scan", None, "how UBEP's CalCumSum AIVs share the count scan (unset: "
              "the preset's)", choices=OPTIONS["cumsum_scan"][1]))
    trace_phases = TRACE_PHASES
    default_preset = "cm384"

    def trace_flows(self, config, params):
        """Flow arrows of the Perfetto trace (``Report.chrome_trace``'s ``flows``): one per
        (sender AIV, receiver AIV) pair a message passes between, from the programs'
        addressing (and, for UBEP's tokens, the run's routing, drawn from its seed):

        * CANN: "status flag" from AIV ``a`` of rank ``s``'s "SendFlag: status" (it writes
          ``STATUS[e_l·R + s]`` on rank ``d`` for each of its experts ``e = d·epr + e_l``) to
          the AIV of rank ``d`` whose "Flag Verification" slice polls that entry
          (``SplitToCore(R·epr, A)``). None with ``broken="no_flag_wait"`` (nothing polls).
        * UBEP: "tokens" from T-AIV ``a`` of rank ``s``'s "Token-Sending" (its slice of the
          remapped slot sequence) to the AIV of the expert's rank whose "Token-Reordering"
          polls and copies the pair ``q = e_l·R + s`` (``q mod A``); and "count" from C-AIV
          ``c``'s "TokenCnt" (``CNT[q]`` on the expert's rank, for its experts) to the same
          reordering AIV, which polls ``CNT[q]``, and to the "CalCumSum" of every C-AIV of
          that rank whose prefix reads ``CNT[q]`` (its local experts' entries and every one
          before them); and "offset" from that "CalCumSum" (it publishes ``OFFS[q]`` for its
          local experts' pairs) to the pair's reordering AIV on the same rank. With
          ``cumsum_scan="split"`` a C-AIV reads the counts of its chunk of the entries (and
          the one before it) and an "offset" passes from each C-AIV to the next.
        """
        R, A = config.ranks, config.aivs_per_die
        E = params["experts"]
        epr = E // R
        flows = set()
        if params["system"] == "cann":
            if params.get("broken") == "no_flag_wait":
                return []
            owner = {}
            for a in range(A):
                q0, q1 = cann.split(R * epr, A, a)
                owner.update({q: a for q in range(q0, q1)})
            for s in range(R):
                for a in range(A):
                    e0, e1 = cann.split(E, A, a)
                    for e in range(e0, e1):
                        d, e_l = divmod(e, epr)
                        flows.add(("status flag", (s, a, "SendFlag: status"),
                                   (d, owner[e_l * R + s], "Flag Verification")))
            return sorted(flows)
        C = cumsum_aivs(config, params)
        n_tok = A - C
        counter = {}                               # expert -> the C-AIV that counts it
        for c in range(C):
            e0, e1 = cann.split(E, C, c)
            counter.update({e: c for e in range(e0, e1)})
        for s in range(R):
            for e, c in counter.items():
                d, e_l = divmod(e, epr)
                flows.add(("count", (s, n_tok + c, "TokenCnt"),
                           (d, (e_l * R + s) % A, "Token-Reordering")))
        split_scan = C > 1 and (params.get("cumsum_scan")
                                or get_preset(config.preset).cumsum_scan) == "split"
        for d in range(R):                         # CalCumSum: C-AIV c of rank d
            for c in range(C):
                if split_scan:                     # its chunk of the entries (ubep._split_scan)
                    q0, q1 = cann.split(R * epr, C, c)
                    for q in range(max(0, q0 - 1), q1):
                        e_l, s = divmod(q, R)
                        flows.add(("count", (s, n_tok + counter[d * epr + e_l], "TokenCnt"),
                                   (d, n_tok + c, "CalCumSum")))
                    for q in range(q0, q1):
                        flows.add(("offset", (d, n_tok + c, "CalCumSum"),
                                   (d, q % A, "Token-Reordering")))
                    if c and q0 < q1:              # the previous chunk's last offset
                        flows.add(("offset", (d, n_tok + c - 1, "CalCumSum"),
                                   (d, n_tok + c, "CalCumSum")))
                    continue
                l0, l1 = cann.split(epr, C, c)
                if l0 == l1:
                    continue
                for q in range(l1 * R):            # polls CNT[q] for its prefix and its own
                    e_l, s = divmod(q, R)
                    flows.add(("count", (s, n_tok + counter[d * epr + e_l], "TokenCnt"),
                               (d, n_tok + c, "CalCumSum")))
                for q in range(l0 * R, l1 * R):    # publishes OFFS[q]: q's reordering AIV
                    flows.add(("offset", (d, n_tok + c, "CalCumSum"),
                               (d, q % A, "Token-Reordering")))
        w = workload_of(params, R, config.words_per_block)
        S = w.batch * w.topk
        per = -(-S // n_tok)
        for s in range(R):
            slots = np.bincount(w.topk_idx[s].reshape(-1), minlength=E).tolist()
            T = 0                                  # position in the remapped slot sequence
            for x in ubep.remapping(E, n_tok, option(params, "mapping")):
                d, e_l = divmod(x, epr)
                for _ in range(slots[x]):          # x's slots, token-major
                    flows.add(("tokens", (s, T // per, "Token-Sending"),
                               (d, (e_l * R + s) % A, "Token-Reordering")))
                    T += 1
        return sorted(flows)
    default_aivs = (4,)
    default_max_cycles = 2_000_000
    #: whether a machine must hold the combine's regions (the dispatch alone does not: on a
    #: machine whose addresses cannot hold them it runs on a dispatch-only layout)
    needs_combine = False

    def default_topology(self, preset):
        if preset.topology != "superpod":
            return ("star", preset.ranks)
        return ("superpod", min(2, preset.dies_per_npu), min(4, preset.npus_per_board), 1)

    def resolve_params(self, params):
        """The parameters over the defaults, checked; a ``model`` sets the shape it names.

        ``model`` (a :data:`~epfabric.sw.ubep.workload.MODELS` key, UBEP Table 3)
        sets ``topk``, ``experts`` and ``hidden_blocks`` (:func:`model_shape`,
        per system); an explicit one of them that differs is refused, naming both.
        """
        given = dict(params or {})
        p = super().resolve_params(params)
        if p["model"] is not None:
            shape = model_shape(p["model"], p["system"])
            for name, value in shape.items():
                if given.get(name) is not None and given[name] != value:
                    raise UserError(f"{name}={given[name]!r} conflicts with model="
                                    f"{p['model']!r} ({name}={value} for system="
                                    f"{p['system']!r}); give one of them")
            p.update(shape)
        if p["hidden_bytes"] is not None:
            p["hidden_blocks"] = _blocks_of_bytes(p, given)
        if p["routing"] is not None:
            p["routing"] = _routing_shape(p, given)
        check_int("batch", p["batch"], 1)
        check_int("experts", p["experts"], 1)
        check_int("topk", p["topk"], 1, MAX_TOPK)
        if p["topk"] > p["experts"]:
            raise UserError(f"topk ({p['topk']}) must be at most experts ({p['experts']}): a "
                            f"token's k experts are distinct")
        if p["routing"] is not None:       # the ids against experts (the ranks: configs)
            idx, wts = read_routing(p["routing"])
            check_routing(idx, wts, idx.shape[0], p["experts"])
        check_int("hidden_blocks", p["hidden_blocks"], 1)
        if p["launch_skew_ns"] is not None:
            check_number("launch_skew_ns", p["launch_skew_ns"], positive=False)
            if not 0 <= p["launch_skew_ns"] <= 1e7:
                raise UserError(f"launch_skew_ns must be in [0, 1e7], not {p['launch_skew_ns']!r}")
        if p["zipf"] is not None:
            check_number("zipf", p["zipf"], positive=False)
            if p["zipf"] < 0:
                raise UserError(f"zipf must be >= 0, not {p['zipf']!r}")
            if p["zipf"] and p["hot"]:
                raise UserError(f"hot={p['hot']} and zipf={p['zipf']!r}: choose hot experts or "
                                f"Zipf weights")
        if p["cap"] is not None:
            check_int("cap", p["cap"], 1, p["batch"])
        if p["broken"] and p["system"] != "cann":
            raise UserError("broken variants are negative controls of system='cann'")
        for name, (system, _values) in OPTIONS.items():
            if p[name] is not None and p["system"] != system:
                raise UserError(f"{name}={p[name]!r} is a variant of system='{system}', not of "
                                f"system={p['system']!r}")
        return p

    def programs(self, config, params):
        """``{(rank, core): Program}`` of a run."""
        lay = layout_of(config, params)
        a = config.aivs_per_die
        launch = params.get("launch_skew_ns") is not None
        preset = get_preset(config.preset)
        copies = params.get("copies") or preset.copies
        if params["system"] == "cann":
            syncall = params.get("syncall") or preset.syncall
            return {(r, c): dispatch_program(lay, rank=r, core=c, aivs=a,
                                             experts=params["experts"], broken=params["broken"],
                                             send_split=option(params, "send_split"),
                                             syncall=syncall, launch=launch, copies=copies,
                                             count=preset.cann_count)
                    for r in range(config.ranks) for c in range(a)}
        C = cumsum_aivs(config, params)
        return {(r, c): ubep.dispatch_program(lay, rank=r, core=c, aivs=a,
                                              experts=params["experts"], cumsum_aivs=C,
                                              mapping=option(params, "mapping"),
                                              sync=option(params, "sync"), launch=launch,
                                              inc=params["system"] in INC_SYSTEMS, copies=copies,
                                              cumsum_scan=params.get("cumsum_scan")
                                              or preset.cumsum_scan)
                for r in range(config.ranks) for c in range(a)}

    def shared_machine(self, variants):
        """Of a comparison's ``variants`` (resolved parameters), the one whose machines run them
        all, or ``None``. A sweep over ``system`` that includes an in-network system: its
        machine (switches that multicast and reduce) is sized for every system
        (:meth:`configs`), and its switches leave the others' traffic as it was, cycle for
        cycle (tests/hw/test_system.py), so the comparison is one build instead of two."""
        rest = {repr(sorted((k, v) for k, v in p.items() if k != "system")) for p in variants}
        inc = [p for p in variants if p["system"] in INC_SYSTEMS]
        return inc[0] if inc and len(rest) == 1 else None

    def configs(self, preset, topology=None, aivs=None, params=None):
        """The machines of a run: one per AIV count, sized for both systems' dispatch in every
        variant (and the combine after it). Remembered for the last few calls: the result
        does not depend on ``system`` or a variant's options, and a comparison of the systems
        (``--system cann,ubep``) asks for it once a system -- at the paper's shape, 25 s of
        program generation each. Not remembered with a routing file (it may change)."""
        params = self.resolve_params(params)
        pr = get_preset(preset)
        topology = tuple(topology) if topology is not None else self.default_topology(pr)
        if params.get("routing") is not None:
            return self._configs(pr, topology, aivs, params)   # a file can change between calls
        varied = {"system"} | {k for system in SYSTEMS for each in variants_of(system) for k in each}
        key = (pr, topology, aivs, params["system"] in INC_SYSTEMS,
               repr(sorted((k, v) for k, v in params.items() if k not in varied)))
        cache = self.__dict__.setdefault("_configs_memo", {})
        if key not in cache:
            cache[key] = self._configs(pr, topology, aivs, params)
            while len(cache) > 4:
                del cache[next(iter(cache))]
        return list(cache[key])

    def _configs(self, pr, topology, aivs, params):
        out = []
        for a in ([aivs] if aivs is not None else self.default_aivs):
            shape = MachineConfig(pr.name, topology=topology, aivs_per_die=a, data_bytes=512,
                                  lanes=pr.vector_lanes)
            w = workload_of(params, shape.ranks, 8)  # fits this shape (else: named)
            check_cap(w, params["cap"])
            # one machine runs either system's dispatch, in every variant, and the combine
            # that follows it (the same hardware for a comparison, and one build serves all;
            # with a model, each system at its own blocks per token)
            # UBEP needs a T- and a C-AIV; a machine whose switches multicast and reduce
            # (ep_window) runs UBEP-INC and the others, one without runs the others
            inc = params["system"] in INC_SYSTEMS
            if inc and a < 2:
                raise UserError(f"system={params['system']!r} needs at least 2 AIVs a die (a "
                                f"T-AIV and a C-AIV), not {a}")
            if inc and topology[0] != "superpod":
                raise UserError(f"system={params['system']!r} needs a superpod (its switches "
                                f"multicast and reduce), not topology {topology!r}")
            systems = ((SYSTEMS if inc else tuple(x for x in SYSTEMS if x not in INC_SYSTEMS))
                       if a >= 2 else ("cann",))
            runs = [{**params, "system": system, **each,
                     **(model_shape(params["model"], system) if params["model"] else {})}
                    for system in systems for each in variants_of(system)]
            # a layout past 2**15 blocks narrows the address's rank field (hw.isa.rank_bits_for);
            # past the narrowest field's room the dispatch drops the combine's regions
            widest = replace(shape, rank_bits=narrowest_rank_bits(shape.ranks))
            most = 1 << block_bits(widest.rank_bits)
            layouts = [layout_of(widest, run) for run in runs]
            if self.needs_combine and not all(lay.combine for lay in layouts):
                layouts = [replace(lay, combine=True) for lay in layouts]   # refused below
            blocks = max(lay.blocks for lay in layouts)
            with_combine = all(lay.combine for lay in layouts)
            if blocks > most:
                what = (f"model={params['model']!r}, batch={params['batch']}" if params["model"]
                        else f"batch={params['batch']}, topk={params['topk']}, "
                             f"experts={params['experts']}, "
                             f"hidden_blocks={params['hidden_blocks']}")
                fix = "batch or cap" if params["model"] else "batch, hidden_blocks or cap"
                raise UserError(
                    f"{what}, cap={params['cap']} on {shape.ranks} ranks need {blocks} HBM "
                    f"blocks per rank; an address on {shape.ranks} ranks holds {most} "
                    f"(a smaller {fix})")
            hbm_blocks = pow2_at_least(blocks)
            shape = MachineConfig(pr.name, topology=topology, aivs_per_die=a, data_bytes=512,
                                  lanes=pr.vector_lanes,
                                  rank_bits=rank_bits_for(shape.ranks, hbm_blocks))
            lay = layout_of(shape, params)
            # the same UBuf for both systems (one build serves a comparison)
            inc_lay = replace(lay, inc=True)
            rows = max([cann.ubuf_rows_needed(lay, "expert", a, pr.cann_count),
                        ubep.ubuf_rows_needed(lay, params["experts"], a),
                        combine.ubuf_rows_needed(lay)]
                       + ([ubep.ubuf_rows_needed(inc_lay, params["experts"], a),
                           ubep_inc.ubuf_rows_needed(inc_lay)] if inc else []))
            if pow2_at_least(rows) > MAX_UBUF_ROWS:
                raise UserError(
                    f"batch={params['batch']}, topk={params['topk']}, experts={params['experts']} "
                    f"on {shape.ranks} ranks need {rows} UBuf rows of an AIV (its routing, slot "
                    f"and count lists); a core's UBuf holds {MAX_UBUF_ROWS} (a smaller batch)")
            longest = self._longest(shape, runs, with_combine)
            window = (ubep_inc.ep_window(max(r["batch"] for r in runs),
                                         max(r["hidden_blocks"] for r in runs)) if inc else 0)
            out.append(MachineConfig(pr.name, topology=topology, aivs_per_die=a, data_bytes=512,
                                     lanes=pr.vector_lanes, hbm_blocks=hbm_blocks,
                                     rank_bits=shape.rank_bits,
                                     ep_window=window, ubuf_rows=pow2_at_least(rows),
                                     imem_depth=pow2_at_least(longest),
                                     trace_depth=max(64, pow2_at_least(len(PHASES)
                                                                       * shape.cores))))
        return out

    def _longest(self, shape, runs, with_combine):
        """The longest program of ``runs``' dispatches on ``shape`` (and of the combines after
        them). A combine's programs depend on the run's layout and system, not on the dispatch's
        variant: one set serves a system's variants (at the paper's shape, 8 s a set)."""
        longest, combines = 0, set()
        for run in runs:
            sets = [self.programs(shape, run)]
            key = (layout_of(shape, run), run["system"], run.get("combine_broken"))
            if with_combine and key not in combines:
                combines.add(key)
                sets.append(combine_programs(shape, run))
            longest = max([longest] + [len(prog) for progs in sets for prog in progs.values()])
        return longest

    def load(self, machine, params, workload=None, epoch=1):
        """Inputs, epoch and programs onto ``machine``; returns ``(workload, params, epoch)``.

        ``workload`` (default: drawn from ``params``' seed, the routing and weights
        replayed from ``params["routing"]`` when given) holds the routing and tokens;
        ``epoch`` is the run's epoch (``CTRL`` word 1): the
        ``Buffer`` counts dispatches, carrying the rest of ``CTRL`` over.
        """
        cfg = machine.config
        lay = layout_of(cfg, params)
        machine.describe = lay.where
        machine.set_token_blocks(params["hidden_blocks"])    # a send_buffers preset's window
        w = workload or workload_of(params, cfg.ranks, cfg.words_per_block)
        check_cap(w, params.get("cap"))
        wpb = cfg.words_per_block
        sp = params["system"] == "ubep" and option(params, "sync") == "sp"
        if sp:
            check_sentinel_free(w)
        delays = launch_delays(params, cfg.ranks, machine.preset)
        for r in range(cfg.ranks):
            if sp:       # Sentinel Polling: every receive slot armed (re-armed by its reader)
                armed = [ubep.SENTINEL_WORD] * min(8, wpb) + [0] * max(0, wpb - 8)
                for b in range(lay.recv_blocks):
                    machine.write_mem(r, machine.address(0, lay.RECV + b), armed)
            # the routing (and for UBEP-INC, whose experts weight their rows, the weights)
            for region, values in ((lay.ROUTE, w.topk_idx[r]),) + (
                    ((lay.WEIGHTS, w.topk_w[r]),) if lay.inc else ()):
                ids = np.asarray(values).reshape(-1).astype(np.uint64)
                if len(ids) % 2:
                    ids = np.append(ids, np.uint64(0))
                words = (ids[0::2] | (ids[1::2] << 16)).tolist()
                for b in range(lay.route_blocks):
                    chunk = words[b * wpb:(b + 1) * wpb]
                    if chunk:
                        machine.write_mem(r, machine.address(0, region + b), chunk)
            for t in range(w.batch):
                for b in range(w.hidden_blocks):
                    machine.write_mem(r, machine.address(0, lay.X + t * w.hidden_blocks + b),
                                      w.x[r][t][b].tolist())
            machine.write_mem(r, machine.address(0, lay.CTRL, 1), [epoch])
            if params.get("launch_skew_ns") is not None:
                machine.write_mem(r, machine.address(0, lay.CTRL, 3), [delays[r]])
            for guard in (lay.RECV_GUARD, lay.OUT_GUARD):
                machine.write_mem(r, machine.address(0, guard), [GUARD] * wpb)
        for (r, c), prog in self.programs(cfg, params).items():
            machine.load_program(r, c, prog)
        # read back only what the checker reads (a word per cycle: the rest would dominate)
        most = max(len(rows) for rows in dispatch_out(w)[0])
        machine.read_back([(lay.CTRL, 1), (lay.RECV_GUARD, 1),
                           (lay.OUT, max(1, most * w.hidden_blocks)), (lay.OUT_GUARD, 1),
                           (lay.COUNTS, lay.WEIGHTS - lay.COUNTS)]
                          + ([(lay.SENDCNT, lay.blocks - lay.SENDCNT)]
                             if params["system"] == "cann" and lay.epr > 1 else [])
                          + ([(lay.RECV, lay.recv_blocks)] if sp else [])
                          + ([(lay.IMETA, lay.MCBUF - lay.IMETA)] if lay.inc else []))
        return w, params, epoch

    def check(self, machine, report, inputs):
        w, params, epoch = inputs
        system = params["system"]
        cfg = machine.config
        lay = layout_of(cfg, params)
        wpb = cfg.words_per_block
        out, recv = dispatch_out(w)
        raw = system == "cann" or (system == "ubep" and option(params, "sync") != "tff")
        order = None if raw else dispatch_order(w)
        cnt = counts(w)
        problems, digests = [], []
        for d in range(cfg.ranks):
            rows = len(out[d])
            got = np.array(machine.read_mem(d, machine.address(0, lay.OUT),
                                            rows * w.hidden_blocks * 128),
                           dtype=np.uint64).reshape(rows, w.hidden_blocks, 128)[:, :, :wpb] \
                if rows else np.zeros((0, w.hidden_blocks, wpb), dtype=np.uint64)
            digests.append(hashlib.sha1(np.ascontiguousarray(got[:, :, HEADER_WORDS:]))
                           .hexdigest()[:16])
            want_out = (out[d] if raw else
                        with_headers(w, order[d], out[d], epoch, inc=system in INC_SYSTEMS))
            if rows and not np.array_equal(got, want_out):
                bad = int(np.flatnonzero((got != want_out).any(axis=(1, 2)))[0])
                problems.append(f"rank {d}: OUT token {bad} of {rows} differs from numpy")
            want = [int(cnt[d, e_l, s]) for e_l in range(w.epr) for s in range(cfg.ranks)]
            words = []
            for q in range(len(want)):
                block, word = lay.word_at(lay.COUNTS, q)
                words.append(machine.read_mem(d, machine.address(0, block, word))[0])
            if words != want:
                problems.append(f"rank {d}: COUNTS {words} != {want}")
            if system == "cann" and w.epr > 1:
                problems += _update_problems(machine, lay, d, want)
            expand = machine.read_mem(d, machine.address(0, lay.EXPAND), lay.slots)
            if expand != slot_index(w.topk_idx[d]).reshape(-1).tolist():
                problems.append(f"rank {d}: EXPAND (the slot j of every token slot) differs "
                                f"from numpy")
            if system == "ubep" and option(params, "sync") == "sp":
                n = min(8, wpb)
                for b in range(lay.recv_blocks):
                    armed = [ubep.SENTINEL_WORD] * n
                    if machine.read_mem(d, machine.address(0, lay.RECV + b), n) != armed:
                        problems.append(f"rank {d}: RECV block {b} was not re-armed with the "
                                        f"sentinel after its token was read")
                        break
            for guard in (lay.RECV_GUARD, lay.OUT_GUARD):
                if machine.read_mem(d, machine.address(0, guard), wpb) != [GUARD] * wpb:
                    problems.append(f"rank {d}: guard block {guard} was overwritten")
        if report.trace_dropped:
            problems.append(f"the MARK trace dropped {report.trace_dropped} events")
        phases = phase_times(report, cfg.aivs_per_die, system)
        if system == "cann":
            want_phases = {key: len(cann_phases(w.epr)) for key in phases}
        else:
            n_tok = cfg.aivs_per_die - cumsum_aivs(cfg, params)
            want_phases = {key: len(ubep.PHASES_T if key[1] < n_tok else ubep.PHASES_C)
                           for key in phases}
        if len(phases) != cfg.cores or any(len(v) != want_phases[key]
                                           for key, v in phases.items()):
            problems.append(f"{len(phases)} of {cfg.cores} AIVs reported all phases")
        preset = machine.preset
        latency_ns = report.ns
        # Token-Sending time per sending AIV (init -> send MARK): Fig. 3b / Fig. 9's measure
        sending = {f"{r}.{c}": v["send"] - v["init"] for (r, c), v in sorted(phases.items())
                   if "send" in v and "init" in v}
        share = release = None
        if system == "cann" and phases and report.cycles:
            pairs = syncall_pairs(w.epr)
            waits = [sum(v[b] - v[a] for a, b in pairs) for v in phases.values()
                     if all(m in v for pair in pairs for m in pair)]
            share = sum(waits) / len(waits) / report.cycles if waits else None
            release = syncall_release_share(phases, report.cycles)
        per_aiv = {f"{r}.{c}": v for (r, c), v in sorted(phases.items())}
        return {"correct": not problems, "problems": problems, "system": system,
                "links": links_of(report, w, cfg, params, "dispatch", preset),
                "tokens_received": [len(o) for o in out], "recv_count": recv.tolist(),
                "latency_us": latency_ns / 1000,
                "bandwidth_gbps": (w.bytes_moved(hidden_bytes(params)) / latency_ns
                                   if latency_ns else None),
                "phases": per_aiv, "cycle_ns": preset.cycle_ns,
                "out_payload_digest": digests,
                "syncall_share": share, "syncall_release_share": release,
                "send_cycles": sending,
                "send_max_cycles": max(sending.values()) if sending else None,
                "eq8_slopes": (_slopes(per_aiv, cfg, params, w) if system == "ubep" and not problems
                               else None)}

    def summary(self, result):
        return summary_lines(self.name, result, lambda run: "", "SyncAll")


def _slopes(phases, cfg, params, w):
    """``{alpha, beta, ratio}``: Eq. 8's slopes from a UBEP run's MARKs
    (:func:`~epfabric.sw.ubep.ubep.count_and_send_slopes`), what a preset's ``cumsum_ratio``
    is measured from."""
    alpha, beta = ubep.count_and_send_slopes(phases, cfg.aivs_per_die, cumsum_aivs(cfg, params),
                                             w.experts, w.batch * w.topk)
    return {"alpha": alpha, "beta": beta, "ratio": beta / alpha}


def _update_problems(machine, lay, rank, counts):
    """What differs from numpy in CANN's ``UpdateTokenNumsOut`` outputs on ``rank`` (``epr >
    1``): ``SENDCNT``, the running totals of the entry ``counts``, and ``TOKNUMS``, each
    local expert's tokens."""
    R, problems = lay.ranks, []
    want = np.cumsum(counts).tolist()
    got = [machine.read_mem(rank, machine.address(0, *lay.word_at(lay.SENDCNT, q)))[0]
           for q in range(len(counts))]
    if got != want:
        problems.append(f"rank {rank}: SENDCNT {got} != {want}")
    want = [sum(counts[e_l * R:(e_l + 1) * R]) for e_l in range(lay.epr)]
    got = [machine.read_mem(rank, machine.address(0, *lay.word_at(lay.TOKNUMS, e_l)))[0]
           for e_l in range(lay.epr)]
    if got != want:
        problems.append(f"rank {rank}: TOKNUMS {got} != {want}")
    return problems


def links_of(report, w, config, params, kernel, preset):
    """The run's link figures (:func:`~epfabric.sw.ubep.traffic.link_report`): the measured
    blocks, small flits and bytes per link class, the exact data blocks of the routing and
    the closed form (a drawn uniform routing only); ``None`` on a star."""
    if config.topology[0] != "superpod":
        return None
    return link_report(report.counters, w, config.topology, params["system"], kernel, preset,
                       uniform=params.get("routing") is None)


def link_line(links):
    """``epfabric run``'s line of a run's link figures: per class the measured bytes, the
    measured data blocks, the exact count and the closed form."""
    parts = []
    for kind, m in links["measured"].items():
        closed = ("" if links["closed_form"] is None
                  else f" / closed form {links['closed_form'][kind]:.1f}")
        parts.append(f"{kind} {m['bytes']:,} B ({m['blocks']} blocks + {m['small']} small; "
                     f"exact {links['exact'][kind]}{closed})")
    return "  links (bytes; data blocks measured, exact, closed form): " + ", ".join(parts)


def syncall_release_share(phases, cycles):
    """The SyncAlls' own cost as a share of the run (the calibration's F4: UBEP §2.3's "SyncAll ... ≈ 15 %
    of total execution time", measured from the last arrival to the release).

    Per die and SyncAll: the latest entry MARK of its AIVs to the earliest exit MARK (the time
    no AIV of the die is still arriving and none has left: the barrier's own time, not the
    waiting of the early arrivals, which ``syncall_share`` includes); summed over the SyncAlls,
    averaged over the dies, divided by the run's ``cycles``. ``phases``: ``{(rank, core):
    {phase: cycle}}`` of CANN's MARKs; ``None`` if no die has every SyncAll MARK.
    """
    by_die = {}
    for (rank, _core), marks in phases.items():
        by_die.setdefault(rank, []).append(marks)
    third = SYNCALLS[2][0]            # UpdateTokenNumsOut's: a rank hosts more than one expert
    pairs = SYNCALLS if any(third in m for m in phases.values()) else SYNCALLS[:2]
    per_die = [sum(min(m[b] for m in aivs) - max(m[a] for m in aivs) for a, b in pairs)
               for aivs in by_die.values()
               if all(name in m for m in aivs for pair in pairs for name in pair)]
    return sum(per_die) / len(per_die) / cycles if per_die and cycles else None


def summary_lines(kind, result, after, sync_label):
    """``epfabric run`` lines of a dispatch or combine (a
    :class:`~epfabric.sw.kernels.result.RunResult`): headline per run, then its phase split;
    ``after(run)`` ends a run's headline."""
    lines = []
    params = result.params
    for run in result.runs:
        cfg, c = run.config, run.check
        sync = (f"; {sync_label} {100 * c['syncall_share']:.1f} % of the run"
                if c.get("syncall_share") is not None else "")
        if c.get("syncall_release_share") is not None:
            sync += f" ({100 * c['syncall_release_share']:.1f} % last arrival to release)"
        model = (f"{params['model']} ({params['hidden_blocks']} blocks a token), "
                 if params.get("model") else "")
        lines.append(f"{kind} ({c['system']}) on {result.preset} [{result.backend}]: "
                     f"{list(cfg.topology)} x {cfg.aivs_per_die} AIVs, {model}BS "
                     f"{params['batch']}, top-{params['topk']}, {params['experts']} experts: "
                     f"{run.cycles} cycles = {c['latency_us']:.2f} us, "
                     f"{c['bandwidth_gbps']:.1f} GB/s{after(run)}{sync}")
        lines.append("  phase ends (cycles, mean over AIVs; +duration): "
                     + _phase_split(c["phases"]))
        if c.get("links"):
            lines.append(link_line(c["links"]))
    return lines


KERNEL = register(Dispatch())
