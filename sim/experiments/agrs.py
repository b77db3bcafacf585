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

from ...hw.validate import check_choice, check_int
from ...sw.kernels import run_kernel
from ...sw.kernels.agrs import bound_gbps
from ...sw.presets import get_preset, preset_names
from ..backends import SIMULATORS
from ..backends.machine import backend as make_backend
from . import Experiment, Param, register

__all__ = ["run_point", "sweep", "format_sweep", "format_report", "SWEEP_ROWS", "Fig6", "EXPERIMENT"]


def run_point(*, preset="incmoe-testbed", ranks=4, nbytes, mode="inc", concurrent=True,
            backend="pysim", lanes=2, slots=16, seed=0, tmax=None):
    """Run one AG + one RS of ``nbytes`` each; return the report dict (CLI JSON keys).

    ``tmax`` is the padded layout's capacity in rows per rank (default: just
    ``nbytes``); a larger one lets several sizes share one hardware build
    (cycle counts do not depend on it).
    """
    p = get_preset(preset)
    check_int("ranks", ranks, 2)
    check_choice("mode", mode, ("inc", "ring"))
    check_choice("backend", backend, SIMULATORS)
    unit = ranks * p.block_bytes
    check_int("bytes", nbytes, unit)
    if nbytes % unit:
        raise ValueError(f"bytes must be a multiple of ranks * block_bytes ({unit}), not {nbytes!r}")
    rows = nbytes // unit
    tmax = rows if tmax is None else check_int("tmax", tmax, rows)
    result, reports = run_kernel(
        "agrs", make_backend(backend), preset=p.name, topology=("star", ranks),
        params={"mode": mode, "tmax": tmax, "lanes": lanes, "slots": slots,
                "counts": [rows] * ranks, "seed": seed, "concurrent": concurrent})
    run = result["runs"][0]
    cycles = run["cycles"]
    ns = p.ns(cycles)
    equiv = 2 * nbytes * 8 / ns  # Gb/s
    bound = bound_gbps(p, mode, ranks)
    return {"mode": mode, "ranks": ranks, "bytes": nbytes, "concurrent": concurrent,
            "preset": p.name, "backend": backend, "cycles": cycles, "ns": ns,
            "equiv_bw_gbps": equiv, "bound_gbps": bound, "fraction_of_bound": equiv / bound,
            "correct": run["correct"], "slot_stalls": run["slot_stalls"]}


#: Rows per rank of the default sweep (S = ranks * 512 B * rows): 2 KiB to
#: 512 KiB at N=4, from latency-bound to bandwidth-bound.
SWEEP_ROWS = (1, 2, 4, 8, 16, 32, 64, 128, 256)


def sweep(*, preset="incmoe-testbed", ranks=4, sizes=None, backend="verilator", lanes=1):
    """Fig. 6-shaped table: concurrent ring and INC equivalent bandwidth vs ``S`` at ``ranks``.

    All sizes run on one hardware build per mode (the padded layout sized for
    the largest ``S``; smaller ones use fewer rows), so a sweep costs two
    builds.
    """
    p = get_preset(preset)
    unit = ranks * p.block_bytes
    if sizes is None:
        sizes = [unit * t for t in SWEEP_ROWS]
    if not sizes:
        raise ValueError("sizes must name at least one size")
    for s in sizes:
        if not isinstance(s, int) or isinstance(s, bool) or s < unit or s % unit:
            raise ValueError(f"sizes must be positive multiples of ranks * block_bytes ({unit}), "
                             f"not {s!r}")
    tmax = max(sizes) // unit
    rows = []
    for s in sizes:
        ring = run_point(preset=preset, ranks=ranks, nbytes=s, mode="ring", backend=backend,
                       lanes=lanes, tmax=tmax)
        inc = run_point(preset=preset, ranks=ranks, nbytes=s, mode="inc", backend=backend,
                      lanes=lanes, tmax=tmax)
        rows.append({"bytes": s, "ring": ring, "inc": inc,
                     "gain": inc["equiv_bw_gbps"] / ring["equiv_bw_gbps"] - 1,
                     "reduction": 1 - inc["cycles"] / ring["cycles"]})
    return rows


def format_sweep(rows, ranks):
    lines = [f"concurrent AG+RS, N={ranks}: equivalent bandwidth 2S/time (Gb/s)",
             f"{'S':>10} {'ring':>8} {'%bound':>7} {'INC':>8} {'%bound':>7} {'gain':>7} "
             f"{'t cut':>7} {'ok':>3}"]
    for row in rows:
        ring, inc = row["ring"], row["inc"]
        lines.append(f"{_size(row['bytes']):>10} {ring['equiv_bw_gbps']:>8.1f} "
                     f"{100 * ring['fraction_of_bound']:>6.1f}% {inc['equiv_bw_gbps']:>8.1f} "
                     f"{100 * inc['fraction_of_bound']:>6.1f}% {100 * row['gain']:>+6.1f}% "
                     f"{100 * row['reduction']:>6.1f}% "
                     f"{'yes' if ring['correct'] and inc['correct'] else 'NO':>3}")
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


class Fig6(Experiment):
    """Concurrent ring vs INC equivalent bandwidth over S (one row per S)."""

    name = "agrs"
    title = "in-network vs ring AllGather + ReduceScatter: equivalent bandwidth 2S/time vs S"
    paper = "INC-MoE Fig. 6, Eq. 5"
    params = (
        Param("preset", "incmoe-testbed", f"preset ({', '.join(preset_names())})", str,
              tuple(preset_names())),
        Param("ranks", 4, "ranks N", int, minimum=2),
        Param("backend", "verilator", "simulator", str, SIMULATORS),
        Param("lanes", 1, "int32 lanes simulated per block", int, minimum=1),
    )

    def run(self, **params):
        p = self.resolve(**params)
        rows = []
        for row in sweep(preset=p["preset"], ranks=p["ranks"], backend=p["backend"],
                         lanes=p["lanes"]):
            rows.append({"bytes": row["bytes"], "ranks": p["ranks"],
                         "ring_gbps": row["ring"]["equiv_bw_gbps"],
                         "inc_gbps": row["inc"]["equiv_bw_gbps"],
                         "ring_bound_gbps": row["ring"]["bound_gbps"],
                         "inc_bound_gbps": row["inc"]["bound_gbps"],
                         "ring_cycles": row["ring"]["cycles"], "inc_cycles": row["inc"]["cycles"],
                         "time_cut": row["reduction"],
                         "eq5_cut": (p["ranks"] - 2) / (2 * (p["ranks"] - 1)),
                         "correct": row["ring"]["correct"] and row["inc"]["correct"]})
        return rows


EXPERIMENT = register(Fig6())
