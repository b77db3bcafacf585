"""AllGather + ReduceScatter, in-network (INC) or ring, timed (``epfabric agrs``, INC-MoE Fig. 6).

INC-MoE §3.2 (Table 1, Eq. 4–5) and Fig. 6: an AG plus an RS of ``S`` bytes
each over ``N`` ranks at ``BW`` per direction take ``2(N-1)/N * S/BW`` on a
ring (overlapped or not) and ``S/BW`` in-network when overlapped, i.e.
equivalent bandwidths (``2S / time``) of at most ``N/(N-1) * BW`` (ring) and
``2 * BW`` (concurrent INC).

Each point is one run of the ``agrs`` kernel (:mod:`epfabric.sw.kernels.agrs`)
on a :class:`~epfabric.sw.machine.Machine` of an
:class:`~epfabric.sw.config.AgrsConfig`: loaded through the host port,
started, read back when it stops; no Python runs per cycle on the fast
backends. Results are checked against numpy by the kernel's checker: the
gather buffer of every rank equals every rank's rows in the padded layout,
and the reduced shard of rank ``r`` equals the int32 (wrapping) sum of all
ranks' partials of block ``r``. Cycles become ns and Gb/s only through the
preset.

Small ``S`` is latency-bound (the left of the Fig. 6-shaped table that
``--sweep`` prints). With one-way latency ``L`` (rank -> switch -> rank,
~1000 cycles = 1 us for ``incmoe-testbed``) and ``B = 512 B / BW`` per block
(~41 cycles at 100 Gb/s):

* concurrent INC: ``t ~ L + S/BW`` — every block crosses one up-link, the
  engine (line rate, no store-and-forward of a whole message) and one
  down-link, and AG and RS load opposite directions of each link;
* concurrent ring: ``t ~ (N-1) * L + 2(N-1)/N * S/BW`` — a row reaches its
  last rank only after ``N-1`` hops, each a full up/down trip through the
  switch plus the endpoint's receive-and-forward.

So the equivalent bandwidth ``2S/t`` rises with ``S`` for both, reaching half
its bound near ``S = L*BW`` (INC, ~12.5 KB) and ``S = N/2 * L*BW`` (ring,
~25 KB at N=4), and the INC time reduction is *larger* than Eq. 5 at small
``S`` (its latency term is ``N-1`` times shorter) and tends to
``(N-2)/(2(N-1))`` from above as ``S`` grows. This differs from INC-MoE
Fig. 6, where the emulated switch's per-message fixed costs made INC *lose*
efficiency at small ``S`` while the ring stayed flat; their sizes (tens of
MiB and up) are far into the bandwidth-bound regime here. ``S`` in the sweep
stops at 512 KiB per collective because by then both curves are close to
their bounds (``make fig6`` prints how close), and larger ``S`` only adds
simulation time.
"""

from tabulate import tabulate

from ....hw.validate import UserError, check_choice, check_int
from ....sw.kernels import run_kernel
from ....sw.kernels.agrs import bound_gbps, check_fits, max_bytes
from ....sw.presets import get_preset, preset_names
from ...backends import SIMULATORS
from ...backends.machine import backend as make_backend
from . import Experiment, Param, register

__all__ = ["run_point", "sweep", "sweep_sizes", "ring_and_inc", "eq5", "format_sweep", "format_report",
           "SWEEP_ROWS", "Fig6", "Eq5", "EXPERIMENT", "EQ5"]


def run_point(*, preset="incmoe-testbed", ranks=4, nbytes, mode="inc", concurrent=True,
            backend="pysim", lanes=2, slots=16, seed=0, tmax=None, max_cycles=None):
    """Run one AG + one RS of ``nbytes`` each; return the report dict (CLI JSON keys).

    ``tmax`` is the padded layout's capacity in rows per rank (default: just
    ``nbytes``); a larger one lets several sizes share one hardware build
    (cycle counts do not depend on it). ``max_cycles`` bounds the run (default:
    the kernel's); a run that hits it raises
    :class:`~epfabric.sw.machine.WatchdogTimeout`.
    """
    p = get_preset(preset)
    check_int("ranks", ranks, 2)
    check_choice("mode", mode, ("inc", "ring"))
    check_choice("backend", backend, SIMULATORS)
    unit = ranks * p.block_bytes
    check_int("bytes", nbytes, unit)
    if nbytes % unit:
        raise UserError(f"bytes must be a multiple of ranks * block_bytes ({unit}), not {nbytes!r}")
    check_fits("bytes", nbytes, preset=p.name, ranks=ranks)
    rows = nbytes // unit
    tmax = rows if tmax is None else check_int("tmax", tmax, rows)
    result = run_kernel(
        "agrs", make_backend(backend), preset=p.name, topology=("star", ranks),
        params={"mode": mode, "tmax": tmax, "lanes": lanes, "slots": slots,
                "counts": [rows] * ranks, "seed": seed, "concurrent": concurrent},
        max_cycles=max_cycles)
    run = result.runs[0]
    cycles = run.cycles
    ns = p.ns(cycles)
    equiv = 2 * nbytes * 8 / ns  # Gb/s
    bound = bound_gbps(p, mode, ranks)
    return {"mode": mode, "ranks": ranks, "bytes": nbytes, "concurrent": concurrent,
            "preset": p.name, "backend": backend, "cycles": cycles, "ns": ns,
            "equiv_bw_gbps": equiv, "bound_gbps": bound, "fraction_of_bound": equiv / bound,
            "correct": run.correct, "slot_stalls": run.check["slot_stalls"]}


#: Rows per rank of the default sweep (S = ranks * 512 B * rows): 2 KiB to
#: 512 KiB at N=4, from latency-bound to bandwidth-bound.
SWEEP_ROWS = (1, 2, 4, 8, 16, 32, 64, 128, 256)


def sweep_sizes(preset, ranks):
    """The default sweep's ``(sizes, skipped)``: ``ranks * block_bytes * SWEEP_ROWS``, split by
    whether ``S`` fits a rank's memory (:func:`~epfabric.sw.kernels.agrs.max_bytes`)."""
    unit = ranks * get_preset(preset).block_bytes
    limit = max_bytes(preset, ranks)
    sizes = [unit * t for t in SWEEP_ROWS]
    return [s for s in sizes if s <= limit], [s for s in sizes if s > limit]


def sweep(*, preset="incmoe-testbed", ranks=4, sizes=None, backend="verilator", lanes=1,
          max_cycles=None):
    """Fig. 6-shaped table: concurrent ring and INC equivalent bandwidth vs ``S`` at ``ranks``.

    All sizes run on one hardware build per mode (the padded layout sized for
    the largest ``S``; smaller ones use fewer rows), so a sweep costs two
    builds. The default sizes leave out those that do not fit a rank's
    memory (:func:`sweep_sizes` names them); given ``sizes`` that do not
    fit are refused before anything runs.
    """
    p = get_preset(preset)
    unit = ranks * p.block_bytes
    if sizes is None:
        sizes, _skipped = sweep_sizes(p.name, ranks)
    if not sizes:
        raise UserError("sizes must name at least one size")
    for s in sizes:
        if not isinstance(s, int) or isinstance(s, bool) or s < unit or s % unit:
            raise UserError(f"sizes must be positive multiples of ranks * block_bytes ({unit}), "
                            f"not {s!r}")
        check_fits("sizes", s, preset=p.name, ranks=ranks)
    tmax = max(sizes) // unit
    rows = []
    for s in sizes:
        ring = run_point(preset=preset, ranks=ranks, nbytes=s, mode="ring", backend=backend,
                         lanes=lanes, tmax=tmax, max_cycles=max_cycles)
        inc = run_point(preset=preset, ranks=ranks, nbytes=s, mode="inc", backend=backend,
                        lanes=lanes, tmax=tmax, max_cycles=max_cycles)
        rows.append({"bytes": s, "ring": ring, "inc": inc,
                     "gain": inc["equiv_bw_gbps"] / ring["equiv_bw_gbps"] - 1,
                     "reduction": 1 - inc["cycles"] / ring["cycles"]})
    return rows


def format_sweep(rows, ranks):
    table = [(_size(row["bytes"]), f"{row['ring']['equiv_bw_gbps']:.1f}",
              f"{100 * row['ring']['fraction_of_bound']:.1f}%", f"{row['inc']['equiv_bw_gbps']:.1f}",
              f"{100 * row['inc']['fraction_of_bound']:.1f}%", f"{100 * row['gain']:+.1f}%",
              f"{100 * row['reduction']:.1f}%",
              "yes" if row["ring"]["correct"] and row["inc"]["correct"] else "NO") for row in rows]
    lines = [f"concurrent AG+RS, N={ranks}: equivalent bandwidth 2S/time (Gb/s)",
             tabulate(table, headers=("S", "ring", "%bound", "INC", "%bound", "gain", "t cut", "ok"),
                      disable_numparse=True, colalign=("right",) * 8)]
    lines.append(f"(t cut: 1 - t_INC/t_ring; Eq. 5 bound (N-2)/(2(N-1)) = "
                 f"{100 * (ranks - 2) / (2 * (ranks - 1)):.1f}%)")
    return "\n".join(lines)


def _size(b):
    for unit, div in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if b >= div and b % div == 0:
            return f"{b // div} {unit}"
    return f"{b} B"


def format_report(rep):
    return (f"{rep['mode']} AG+RS ({'concurrent' if rep['concurrent'] else 'sequential'}), "
            f"N={rep['ranks']}, S={_size(rep['bytes'])} on {rep['backend']}: "
            f"{rep['cycles']} cycles = {rep['ns']:.0f} ns, equivalent {rep['equiv_bw_gbps']:.1f} "
            f"Gb/s, bound {rep['bound_gbps']:.1f} Gb/s ({100 * rep['fraction_of_bound']:.1f} %), "
            f"{'correct' if rep['correct'] else 'WRONG'}")


def ring_and_inc(point):
    """One row: concurrent ring and INC AG+RS of ``point["bytes"]`` (same build for every S of a grid)."""
    runs = {mode: run_point(preset=point["preset"], ranks=point["ranks"], nbytes=point["bytes"],
                            mode=mode, backend=point["backend"], lanes=point["lanes"],
                            tmax=point["tmax"])
            for mode in ("ring", "inc")}
    ring, inc = runs["ring"], runs["inc"]
    if not (ring["correct"] and inc["correct"]):
        raise AssertionError(f"AG+RS result differs from numpy (ring correct={ring['correct']}, "
                             f"inc correct={inc['correct']})")
    return {"ring_cycles": ring["cycles"], "inc_cycles": inc["cycles"],
            "ring_gbps": ring["equiv_bw_gbps"], "inc_gbps": inc["equiv_bw_gbps"],
            "ring_bound_gbps": ring["bound_gbps"], "inc_bound_gbps": inc["bound_gbps"],
            "ring_of_bound": ring["fraction_of_bound"], "inc_of_bound": inc["fraction_of_bound"],
            "gain": inc["equiv_bw_gbps"] / ring["equiv_bw_gbps"] - 1,
            "time_cut": 1 - inc["cycles"] / ring["cycles"], "correct": True}


def eq5(ranks):
    """INC-MoE Eq. 5: the bandwidth-bound time cut ``(N - 2) / (2 (N - 1))``."""
    return (ranks - 2) / (2 * (ranks - 1))


_COMMON = (
    Param("preset", "incmoe-testbed", f"preset ({', '.join(preset_names())})", str,
          tuple(preset_names())),
    Param("backend", "verilator", "simulator", str, SIMULATORS),
    Param("lanes", 1, "int32 lanes simulated per block (cycle counts do not depend on it)", int,
          minimum=1),
)

#: INC-MoE Fig. 6 (N = 4, 100 Gb/s per rank, their emulated switch, S of tens of MiB and up)
PAPER_RING_GBPS = 130.0
PAPER_INC_GBPS = (163.0, 172.0)
PAPER_GAIN = (0.256, 0.318)
#: tolerance of a time cut against Eq. 5 (points): Eq. 5 is bandwidth-bound, and at the
#: grid's 512 KiB the ring's 2(N-1) per-step latencies are not fully amortised, which adds a
#: few points to the measured cut (the 3 points were set with the experiment, 39885bc)
EQ5_TOLERANCE = 0.03
#: tolerance of the ring's bandwidth against the paper's "~130 Gb/s" (relative): the paper
#: gives the value rounded and as approximate
RING_TOLERANCE = 0.05
#: tolerance of INC's gain over the ring against the paper's +25.6-31.8 % (points): the
#: paper's range already spans its sizes; 5 points allow for reading it at another S
GAIN_TOLERANCE = 0.05


class Fig6(Experiment):
    """Concurrent ring vs INC equivalent bandwidth over S (one row per S)."""

    name = "fig6"
    title = "in-network vs ring AllGather + ReduceScatter: equivalent bandwidth 2S/time vs S"
    paper = "INC-MoE Fig. 6"
    headline = ("N=4 at 100 Gb/s: ring ~130 Gb/s (97.5 % of 133), INC 163-172 Gb/s (82-86 % of "
                "200), +25.6-31.8 %")
    params = (_COMMON[0], Param("ranks", 4, "ranks N", int, minimum=2), *_COMMON[1:])

    def points(self, params, quick=False):
        unit = params["ranks"] * get_preset(params["preset"]).block_bytes
        fits = max_bytes(params["preset"], params["ranks"]) // unit
        # S that does not fit a rank's memory is left out (sweep_sizes names it)
        rows = [t for t in ((1, 16, 256) if quick else SWEEP_ROWS) if t <= fits]
        if not rows:
            raise UserError(f"ranks {params['ranks']}: no S of the sweep fits a rank's memory")
        # one build per mode for the whole grid: every point's layout holds the largest S
        tmax = max(t for t in SWEEP_ROWS if t <= fits)
        return [{**params, "bytes": unit * t, "tmax": tmax} for t in rows]

    def measure(self, point):
        return ring_and_inc(point)

    def compare(self, row):
        out = {"eq5_cut": eq5(row["ranks"])}
        if row["ranks"] == 4 and row["preset"] == "incmoe-testbed":
            out.update({"paper_ring_gbps": PAPER_RING_GBPS,
                        "paper_inc_gbps_low": PAPER_INC_GBPS[0],
                        "paper_inc_gbps_high": PAPER_INC_GBPS[1],
                        "paper_gain_low": PAPER_GAIN[0], "paper_gain_high": PAPER_GAIN[1],
                        "ring_over_paper": row["ring_gbps"] / PAPER_RING_GBPS,
                        "inc_over_paper_mid": row["inc_gbps"] / sum(PAPER_INC_GBPS) * 2})
        return out

    def verdict(self, rows):
        """Holds when INC beats the ring at every bandwidth-bound S (>= 64 KiB; strict) and, at
        the largest S, the model matches Fig. 6 where the paper has a point (N = 4 on
        ``incmoe-testbed``): the ring's bandwidth within :data:`RING_TOLERANCE` of its ~130 Gb/s
        and INC's gain over the ring within :data:`GAIN_TOLERANCE` of its +25.6-31.8 %. Where
        the paper has no point, the time cut must be within :data:`EQ5_TOLERANCE` of Eq. 5
        instead. (Not both: the paper's own Fig. 6 gain, a 20-24 % time cut, is 9-13 points
        below Eq. 5's 33.3 %, because its emulated switch loses 14-18 % of 2·BW; Eq. 5 is
        ``eq5``'s verdict.)"""
        largest = max(rows, key=lambda r: r["bytes"])
        bandwidth_bound = [r for r in rows if r["bytes"] >= 64 * 1024] or [largest]
        ahead = all(r["inc_gbps"] > r["ring_gbps"] for r in bandwidth_bound)
        cut_ok = abs(largest["time_cut"] - largest["eq5_cut"]) <= EQ5_TOLERANCE
        papered = "paper_ring_gbps" in largest
        if papered:
            ring_ok = abs(largest["ring_gbps"] / PAPER_RING_GBPS - 1) <= RING_TOLERANCE
            gain_ok = (PAPER_GAIN[0] - GAIN_TOLERANCE <= largest["gain"]
                       <= PAPER_GAIN[1] + GAIN_TOLERANCE)
            near = ring_ok and gain_ok
        else:
            near = cut_ok
        text = (f"at {_size(largest['bytes'])}: ring {largest['ring_gbps']:.0f} Gb/s "
                f"({100 * largest['ring_of_bound']:.1f} % of bound"
                + (f"; paper ~130, tolerance ±{100 * RING_TOLERANCE:.0f} %: "
                   f"{'inside' if ring_ok else 'OUTSIDE'}" if papered else "")
                + f"), INC {largest['inc_gbps']:.0f} Gb/s ({100 * largest['inc_of_bound']:.1f} %), "
                f"gain {100 * largest['gain']:+.1f} %"
                + (f" (paper +25.6-31.8 %, tolerance ±{100 * GAIN_TOLERANCE:.0f} points: "
                   f"{'inside' if gain_ok else 'OUTSIDE'}; its emulated switch loses 14-18 % of "
                   f"2·BW, this one reduces at line rate)" if papered else "")
                + f"; INC ahead at every S >= 64 KiB: {'yes' if ahead else 'NO'}; time cut "
                f"{100 * largest['time_cut']:.1f} % vs Eq. 5 {100 * largest['eq5_cut']:.1f} % "
                + (f"(tolerance ±{100 * EQ5_TOLERANCE:.0f} points: "
                   f"{'inside' if cut_ok else 'OUTSIDE'})" if not papered else
                   "(reported; eq5 holds the model to Eq. 5)"))
        return ahead and near, text

    def plot(self, rows, path):
        from ..results.plot import save, subplots
        fig, (bw_ax, cut_ax) = subplots(1, 2, width=11)
        kib = [r["bytes"] / 1024 for r in rows]
        bw_ax.plot(kib, [r["ring_gbps"] for r in rows], "o-", color="C0", label="ring (model)")
        bw_ax.plot(kib, [r["inc_gbps"] for r in rows], "s-", color="C1", label="INC (model)")
        bw_ax.axhline(rows[0]["ring_bound_gbps"], color="C0", ls=":", label="ring bound N/(N-1)·BW")
        bw_ax.axhline(rows[0]["inc_bound_gbps"], color="C1", ls=":", label="INC bound 2·BW")
        if "paper_ring_gbps" in rows[0]:
            bw_ax.axhline(rows[0]["paper_ring_gbps"], color="C0", ls="--", lw=1,
                          label="ring (paper, large S)")
            bw_ax.axhspan(rows[0]["paper_inc_gbps_low"], rows[0]["paper_inc_gbps_high"],
                          color="C1", alpha=0.2, label="INC (paper, large S)")
        bw_ax.set_xscale("log", base=2)
        bw_ax.set_xlabel("S per collective (KiB)")
        bw_ax.set_ylabel("equivalent bandwidth 2S / time (Gb/s)")
        bw_ax.legend(fontsize=7)
        cut_ax.plot(kib, [100 * r["time_cut"] for r in rows], "o-", color="C2", label="model")
        cut_ax.axhline(100 * rows[0]["eq5_cut"], color="C3", ls="--", label="Eq. 5 (N-2)/(2(N-1))")
        cut_ax.set_xscale("log", base=2)
        cut_ax.set_xlabel("S per collective (KiB)")
        cut_ax.set_ylabel("time cut 1 - t_INC / t_ring (%)")
        cut_ax.legend(fontsize=8)
        save(fig, path, f"{self.paper}: concurrent AG + RS, ring vs in-network, "
                        f"N={rows[0]['ranks']} ({rows[0]['preset']}, {rows[0]['backend']})")


class Eq5(Experiment):
    """Time cut of concurrent INC over ring AG+RS at N = 2, 4, 8 (one row per N)."""

    name = "eq5"
    title = "bandwidth-bound time cut of in-network over ring AG + RS as N grows"
    paper = "INC-MoE Eq. 5"
    headline = "1 - t_INC/t_ring = (N-2)/(2(N-1)): 0 % at N=2, 33.3 % at N=4, 42.9 % at N=8"
    params = (*_COMMON, Param("ranks", "2,4,8", "comma-separated rank counts N", str),
              Param("bytes", 512 * 1024, "S per collective (bytes)", int, minimum=1))

    def resolve(self, **given):
        p = super().resolve(**given)
        unit = get_preset(p["preset"]).block_bytes
        for n in _ranks(p["ranks"]):
            if p["bytes"] % (n * unit):
                raise UserError(f"bytes must be a multiple of N * block_bytes ({n * unit}) for "
                                f"N={n}, not {p['bytes']}")
            check_fits("bytes", p["bytes"], preset=p["preset"], ranks=n, ranks_name="N =")
        return p

    def points(self, params, quick=False):
        # quick is the full grid: at smaller S the latency term, not Eq. 5, decides the cut
        nbytes = params["bytes"]
        unit = get_preset(params["preset"]).block_bytes
        return [{"preset": params["preset"], "backend": params["backend"], "lanes": params["lanes"],
                 "ranks": n, "bytes": nbytes, "tmax": nbytes // (n * unit)}
                for n in _ranks(params["ranks"])]

    def measure(self, point):
        return ring_and_inc(point)

    def compare(self, row):
        return {"paper_cut": eq5(row["ranks"]), "cut_minus_paper": row["time_cut"] - eq5(row["ranks"])}

    def verdict(self, rows):
        """Holds when every N's measured cut is within :data:`EQ5_TOLERANCE` of Eq. 5."""
        worst = max(abs(r["cut_minus_paper"]) for r in rows)
        text = ", ".join(f"N={r['ranks']}: {100 * r['time_cut']:.1f} % (Eq. 5 {100 * r['paper_cut']:.1f} %)"
                         for r in rows)
        return worst <= EQ5_TOLERANCE, (
            f"{text} at S={_size(rows[0]['bytes'])}; worst {100 * worst:.1f} points off "
            f"(tolerance ±{100 * EQ5_TOLERANCE:.0f} points: "
            f"{'inside' if worst <= EQ5_TOLERANCE else 'OUTSIDE'})")

    def plot(self, rows, path):
        from ..results.plot import save, subplots
        fig, (ax,) = subplots()
        n = [r["ranks"] for r in rows]
        ax.plot(n, [100 * r["time_cut"] for r in rows], "o-", label="model (measured)")
        ax.plot(n, [100 * r["paper_cut"] for r in rows], "s--", color="C3", label="Eq. 5")
        ax.set_xlabel("ranks N")
        ax.set_xticks(n)
        ax.set_ylabel("time cut 1 - t_INC / t_ring (%)")
        ax.legend()
        save(fig, path, f"{self.paper}: time cut of concurrent in-network AG + RS over the ring, "
                        f"S={_size(rows[0]['bytes'])} ({rows[0]['preset']}, {rows[0]['backend']})")


def _ranks(text):
    try:
        ranks = [int(x) for x in str(text).split(",") if x]
    except ValueError:
        raise UserError(f"ranks must be comma-separated integers, not {text!r}") from None
    for n in ranks:
        check_int("ranks", n, 2)
    if not ranks:
        raise UserError("ranks must name at least one N")
    return ranks


EXPERIMENT = register(Fig6())
EQ5 = register(Eq5())
