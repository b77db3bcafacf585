"""CANN EP vs UBEP dispatch runs for the UBEP experiments: one machine per shape.

Every UBEP figure of this package (``fig3b``, ``fig7a``, ``fig7b``, ``fig7c``,
``fig8``, ``fig13``, ``fig14``) runs the ``dispatch`` kernel
(:mod:`epfabric.sw.kernels.dispatch`) — CANN EP's BSP kernel and UBEP's
decomposed one on the same routing — and reads the per-AIV phase MARKs. This
module holds what they share:

* :data:`SHAPES` — the reduced-scale machines of docs/spec/kernels.md §3 by rank count;
* :func:`sizes_for` — the memory sizes one machine needs for a whole list of
  runs, rounded up to :data:`ENVELOPE`. A Verilator build is minutes at 8
  dies and its cache key includes every size, so sizing per point would build
  once per batch size; sizing per *shape* builds once for every experiment on
  that shape. Sizes do not change timing (memory latencies come from the
  preset): ``tests/sim/test_ubep_runs.py`` pins equal cycles on a machine
  sized exactly and on the envelope;
* :func:`measure_dispatch` — one run of one system on such a machine, checked
  bit-exactly by the kernel's checker (a wrong result raises: a figure is
  never drawn from a wrong run), reduced to the figures' measures;
* :func:`compare_systems` — CANN and UBEP on the same point: the improvement
  ``(T_CANN − T_UBEP) / T_CANN`` (:func:`~epfabric.sw.kernels.compare.cut`, as
  ``epfabric run dispatch --system cann,ubep`` prints it) and the A2A / BSP-cost split
  of Fig. 7.

Measures (docs/spec/kernels.md §1.9, §3):

* **A2A** (the paper's communication stack) — the longest per-AIV
  Token-Sending time (Init MARK → Send MARK) over every die's sending AIVs:
  all A AIVs for CANN, the ``A − C`` T-AIVs for UBEP;
* **BSP-cost** (the synchronisation stack) — total − A2A: everything the
  run spends outside token sending (counting, flags, SyncAll, CalCumSum,
  reorder waits);
* **sync share** — BSP-cost / total.
"""

from math import ceil

from ....hw.validate import UserError
from ....sw.config import MachineConfig, format_topology, parse_topology
from ....sw.kernels import KERNELS, pow2_at_least
from ....sw.kernels.compare import cut
from ....sw.kernels.dispatch import cumsum_aivs as cumsum_of
from ....sw.kernels.dispatch import layout_of
from ....sw.ubep import combine, ubep
from ....sw.ubep.cann import PHASES
from ....sw.machine import Machine
from ....sw.presets import get_preset
from ...backends import SIMULATORS
from ...backends.machine import backend as make_backend
from . import Param

__all__ = ["SHAPES", "ENVELOPE", "shape_of", "sizes_for", "config_of", "measure_dispatch",
           "compare_systems", "DISPATCH_KEYS", "cap_for", "grid",
           "format_point", "common_params"]

#: ranks → topology (docs/spec/kernels.md §3: one board up to 16 dies, two boards at 32)
SHAPES = {4: "superpod:2,2,1", 8: "superpod:2,4,1", 16: "superpod:2,8,1", 32: "superpod:2,8,2"}

#: the least sizes of an experiment machine: every grid of the UBEP experiments fits in them
#: at up to 8 AIVs, B_tok 16 and 256 experts, so one build per shape serves all of them
ENVELOPE = {"hbm_blocks": 1 << 15, "ubuf_rows": 32, "imem_depth": 8192, "trace_depth": 1024}

#: the dispatch parameters a point carries (the rest are the kernel's defaults)
DISPATCH_KEYS = ("batch", "topk", "experts", "hidden_blocks", "hidden_bytes", "cap", "seed", "hot",
                 "cumsum_aivs", "sync", "mapping", "syncall")


def common_params(min_aivs=2, hidden_blocks=2):
    """The parameters every dispatch figure takes: backend, seed, AIVs per die, B_tok."""
    return (Param("preset", "cm384", "preset: cm384 (Table 2) or a fitted one (cm384-fit)", str,
                  cm384_presets()),
            Param("backend", "verilator", "simulator", str, SIMULATORS),
            Param("seed", 0, "routing seed", int, minimum=0),
            Param("aivs", 8, "AIVs per die (A)", int, minimum=min_aivs),
            Param("hidden_blocks", hidden_blocks, "blocks per token (B_tok)", int, minimum=1))


def cm384_presets():
    """The presets the UBEP figures run on: cm384 and its fitted variants (``cm384-fit``)."""
    from ....sw.presets import preset_names
    return tuple(n for n in preset_names() if n == "cm384" or n.startswith("cm384-"))


def shape_of(ranks):
    """The topology string of ``ranks`` dies (:data:`SHAPES`); ``UserError`` for another count."""
    if ranks not in SHAPES:
        raise UserError(f"ranks must be one of {', '.join(map(str, SHAPES))}, not {ranks!r}")
    return SHAPES[ranks]


#: parameters of UBEP's dispatch only (a CANN run of the same point leaves them out)
UBEP_ONLY = ("cumsum_aivs", "sync", "mapping")
#: parameters of CANN's dispatch only
CANN_ONLY = ("syncall",)


def _params(point, system):
    params = {k: point[k] for k in DISPATCH_KEYS if k in point and point[k] is not None
              and k not in (UBEP_ONLY if system == "cann" else CANN_ONLY)}
    return {**params, "system": system}


def sizes_for(preset, topology, aivs, points, envelope=None):
    """``{hbm_blocks, ubuf_rows, imem_depth, trace_depth}`` that fit every point (both systems).

    Each field is at least :data:`ENVELOPE`'s, and HBM, UBuf and trace are
    raised to what the largest point's layout needs (cheap: no program is
    generated). Programs longer than ``imem_depth`` are refused by
    :meth:`~epfabric.sw.machine.Machine.load_program` with their length.
    """
    kernel = KERNELS["dispatch"]
    cfg = MachineConfig(preset, topology=parse_topology(topology), aivs_per_die=aivs,
                        data_bytes=512, lanes=get_preset(preset).vector_lanes)
    sizes = dict(ENVELOPE if envelope is None else envelope)
    sizes["trace_depth"] = max(sizes["trace_depth"], pow2_at_least(len(PHASES) * cfg.cores))
    for point in points:
        params = kernel.resolve_params(_params(point, "ubep"))
        lay = layout_of(cfg, params)
        rows = max(lay.route_blocks + 1, ubep.ubuf_rows_needed(lay, params["experts"], aivs),
                   combine.ubuf_rows_needed(lay))
        sizes["hbm_blocks"] = max(sizes["hbm_blocks"], pow2_at_least(lay.blocks))
        sizes["ubuf_rows"] = max(sizes["ubuf_rows"], pow2_at_least(rows))
    return sizes


def config_of(point):
    """The :class:`MachineConfig` of ``point`` (its shape and its ``sizes_for`` fields)."""
    topo = parse_topology(point["topology"])
    extra = {"rank_bits": point["rank_bits"]} if point.get("rank_bits") is not None else {}
    return MachineConfig(point["preset"], topology=topo, aivs_per_die=point["aivs"],
                         data_bytes=512, lanes=get_preset(point["preset"]).vector_lanes,
                         **{k: point[k] for k in ENVELOPE}, **extra)


def measure_dispatch(point, system, knobs=None):
    """Run the dispatch of ``system`` at ``point``; the measures (module docstring).

    ``point`` carries ``preset``, ``topology``, ``aivs``, ``backend``, the
    sizes of :func:`sizes_for` (and ``rank_bits`` if not the default) and the
    dispatch parameters (:data:`DISPATCH_KEYS`); ``knobs`` (``{name: value}``)
    set the dies' runtime knobs over the preset's. Raises ``RuntimeError``
    naming the first problem when the checker finds the result wrong.
    """
    kernel = KERNELS["dispatch"]
    cfg = config_of(point)
    params = kernel.resolve_params(_params(point, system))
    machine = Machine(backend=make_backend(point["backend"]), config=cfg)
    for name, value in (knobs or {}).items():
        machine.set_knob(name, value)
    inputs = kernel.load(machine, params)
    report = machine.run(point.get("max_cycles", kernel.default_max_cycles))
    verdict = kernel.check(machine, report, inputs)
    if not verdict["correct"]:
        raise RuntimeError(f"{system} dispatch at {format_point(point)} is wrong: "
                           f"{verdict['problems'][0]}")
    a = cfg.aivs_per_die
    n_send = a if system == "cann" else a - cumsum_of(cfg, params)
    sending = {}
    for key, cycles in verdict["send_cycles"].items():
        if int(key.split(".")[1]) < n_send:          # "rank.core"
            sending[key] = cycles
    total = report.cycles
    a2a = max(sending.values())
    return {"cycles": total, "a2a": a2a, "bsp": total - a2a, "sync_share": (total - a2a) / total,
            "us": report.ns / 1000, "cycle_ns": verdict["cycle_ns"], "send": sending,
            "phases": verdict["phases"], "senders": n_send,
            "release_share": verdict.get("syncall_release_share"),
            "cumsum_aivs": None if system == "cann" else a - n_send,
            "cumsum_ratio": (verdict["eq8_slopes"] or {}).get("ratio") if system != "cann"
            else None}


def compare_systems(point):
    """CANN and UBEP at ``point``: one flat row (``cann_*``, ``ubep_*``, ``improvement``)."""
    row = {}
    runs = {}
    for system in ("cann", "ubep"):
        m = runs[system] = measure_dispatch(point, system)
        for key in ("cycles", "a2a", "bsp", "sync_share", "us"):
            row[f"{system}_{key}"] = m[key]
    row["ubep_cumsum_aivs"] = runs["ubep"]["cumsum_aivs"]
    row["improvement"] = cut(row["cann_cycles"], row["ubep_cycles"])
    row["a2a_ratio"] = row["ubep_a2a"] / row["cann_a2a"]
    return row, runs


def format_point(point):
    """``R8 x 8 AIVs, BS 32, top-8, E 32`` — a point in one phrase (errors, progress)."""
    size = (f"H {point['hidden_bytes']} B" if point.get("hidden_bytes")
            else f"B_tok {point['hidden_blocks']}")
    return (f"{point['topology']} x {point['aivs']} AIVs, BS {point['batch']}, "
            f"top-{point['topk']}, E {point['experts']}, {size}")


def cap_for(batch, topk, experts):
    """Receive slots per (source, expert): ``max(⌈4·mean⌉, ⌈mean⌉ + 8)``, at most the batch.

    ``mean = BS·k/E``; the margin keeps uniform routing under the cap (the
    dispatch refuses routing that exceeds it, naming the pair).
    """
    mean = batch * topk / experts
    return min(batch, max(ceil(4 * mean), ceil(mean) + 8))


def grid(points, *, preset, backend, aivs, max_cycles=None, envelope=None):
    """``points`` (each with ``ranks`` and dispatch parameters) completed into runnable points.

    Every point of one shape (``topology``, default :func:`shape_of` its
    ``ranks``) gets the same sizes (:func:`sizes_for` over the shape's
    points, at least ``envelope``, default :data:`ENVELOPE`), so one build
    serves the grid; ``cap`` is :func:`cap_for`'s unless the point names one.
    """
    points = [{**p, "cap": p.get("cap") or cap_for(p["batch"], p.get("topk", 8), p["experts"]),
               "topology": format_topology(parse_topology(p.get("topology") or
                                                          shape_of(p["ranks"])))}
              for p in points]
    by_shape = {}
    for p in points:
        by_shape.setdefault(p["topology"], []).append(p)
    sizes = {t: sizes_for(preset, t, aivs, ps, envelope) for t, ps in by_shape.items()}
    out = []
    for p in points:
        q = {"preset": preset, "backend": backend, "aivs": aivs, **p, **sizes[p["topology"]]}
        if max_cycles is not None:
            q["max_cycles"] = max_cycles
        out.append(q)
    return out
