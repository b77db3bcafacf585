"""Comparisons of kernel runs: the latency cut of one system against another, Fig. 8's stages, same outputs.

``epfabric run KERNEL --system cann,ubep`` (any parameter given a list) and the UBEP
experiments compare runs here:

* :func:`cut` — ``1 − other / base``: the share of ``base``'s latency the other run
  saves (the experiments' *improvement*, ``(T_CANN − T_UBEP) / T_CANN``);
* :func:`latency_lines` — each value's latency against the first value's, for every
  run (and a combine's dispatch);
* :func:`phase_stack` and :func:`stage_table` — UBEP Fig. 8's stages of one AIV, and
  their means per kind of AIV side by side for a ``system`` sweep of a dispatch;
* :func:`same_outputs` — whether every system of a ``system`` sweep left the same
  outputs, by the checkers' per-rank payload digests.

The inputs are :class:`~epfabric.sw.kernels.result.RunResult` objects, one per swept
value; a sweep is ``(name, [value, ...])``.
"""

__all__ = ["cut", "latency_lines", "STAGES", "phase_stack", "stage_table", "same_outputs",
           "sweep_lines"]

#: Fig. 8's stages, in order (:func:`phase_stack`)
STAGES = ("init", "sending", "flag_verify", "cumsum", "reorder")

#: the payload digests a kernel's checker reports, per rank: what must be the same across systems
DIGESTS = (("dispatch", "OUT", "out_payload_digest"), ("combine", "y", "y_payload_digest"))


def cut(base, other):
    """``1 − other / base``: the share of ``base`` (a latency) that ``other`` saves."""
    return 1 - other / base


def _figures(run):
    """``{"cycles", **check}`` of a machine run: the figures a comparison reads by name."""
    return {"cycles": run.cycles, **run.check}


def _dispatch_of(run):
    """The figures of the dispatch in ``run``: a combine's first run, else the run's own."""
    figures = _figures(run)
    return figures.get("dispatch") if "dispatch" in figures else figures


def latency_lines(sweep, results):
    """Latency of each value against the first, for every run (and a combine's dispatch): the
    kernel's own where it reports one (``latency_cycles``: daf's excludes set-up and
    re-arming), else the run's cycles (the kernel is the whole run)."""
    name, values = sweep
    lines = []
    base = [_figures(run) for run in results[0].runs]
    for value, result in zip(values[1:], results[1:]):
        for run0, run in zip(base, map(_figures, result.runs)):
            pairs = [("", run0, run)]
            if "dispatch" in run and run["dispatch"].get("cycles"):
                pairs.insert(0, ("dispatch ", run0["dispatch"], run["dispatch"]))
            for label, a, b in pairs:
                key = ("latency_cycles" if a.get("latency_cycles") and b.get("latency_cycles")
                       else "cycles")
                if a[key]:
                    r = b[key] / a[key]
                    lines.append(f"{label}{result.kernel if not label else ''}".strip()
                                 + f": {name}={value} / {name}={values[0]} latency "
                                 f"{b[key]} / {a[key]} cycles = {r:.2f} "
                                 f"({100 * cut(a[key], b[key]):+.1f} % cut)")
    return lines


def phase_stack(system, phases):
    """Fig. 8's per-AIV stages ``{stage: cycles}`` from one AIV's phase-end MARKs.

    CANN: Init, Token-Sending, SendFlag & Verification (count, fence, the first two
    SyncAlls, status polling), CalCumSum, Reorder (with ``UpdateTokenNumsOut`` after it when
    a rank hosts more than one expert: SyncAll #3 and the expert totals). UBEP T-AIV: Init,
    Token-Sending, Reorder (its wait for counts and flags included); C-AIV:
    Init, TokenCnt (under SendFlag & Verification: it is UBEP's flag work),
    CalCumSum, Reorder. ``KeyError`` for the phases of another kernel.
    """
    p = phases
    if system == "cann":
        ends = {"init": p["init"], "sending": p["send"], "flag_verify": p["verify"],
                "cumsum": p["cumsum"], "reorder": p.get("update", p["reorder"])}
    elif "send" in p:
        ends = {"init": p["init"], "sending": p["send"], "reorder": p["reorder"]}
    else:
        ends = {"init": p["init"], "flag_verify": p["count"], "cumsum": p["cumsum"],
                "reorder": p["reorder"]}
    out, last = {}, 0
    for stage in STAGES:
        if stage in ends:
            out[stage] = ends[stage] - last
            last = ends[stage]
        else:
            out[stage] = 0
    return out


def stage_table(sweep, results):
    """UBEP Fig. 8's stages side by side for a ``system`` sweep of a dispatch (or a
    combine's dispatch): mean cycles over each kind of AIV (CANN's, UBEP's T- and C-AIVs),
    from each AIV's phase-end MARKs (:func:`phase_stack`). Empty for any other sweep."""
    if sweep[0] != "system":
        return []
    rows = []
    for value, result in zip(sweep[1], results):
        run = _dispatch_of(result.runs[0])
        if not run or not run.get("phases"):
            return []
        groups = {}
        for phases in run["phases"].values():
            try:
                stack = phase_stack(value, phases)
            except KeyError:
                return []                      # not a dispatch's phases
            role = value if value == "cann" else ("T-AIVs" if "send" in phases else "C-AIVs")
            groups.setdefault(role, []).append(stack)
        for role, stacks in groups.items():
            label = role if role == value else f"{value} {role}"
            rows.append((f"{label} ({len(stacks)})",
                         [sum(st[s] for st in stacks) / len(stacks) for s in STAGES]))
    names = {"flag_verify": "flag+verify"}
    head = [names.get(s, s) for s in STAGES]
    width = max(len(r[0]) for r in rows)
    lines = ["dispatch stages (UBEP Fig. 8; cycles, mean over the AIVs of each kind):",
             "  " + " " * width + "".join(f"{h:>13}" for h in head)]
    lines += ["  " + f"{label:<{width}}" + "".join(f"{v:13.1f}" for v in vals)
              for label, vals in rows]
    return lines


def same_outputs(sweep, results):
    """For a ``system`` sweep whose runs all passed their checks: whether every system left
    the same outputs, compared by the checkers' per-rank payload digests (a dispatch's ``OUT``,
    a combine's ``y`` and its dispatch's ``OUT``). A line starting ``DIFFER`` names the first
    system and rank that differ. Empty for any other sweep, or when a kernel reports no
    digest. ``COUNTS`` and ``EXPAND`` are compared to numpy by each system's checker, so
    they need no digest here. A system whose checker judged the output by an error bound
    (``{what}_rule`` ``"bound"``: UBEP-INC's bf16 ``y``) is left out of that output's line."""
    if sweep[0] != "system" or len(results) < 2 or not all(r.correct for r in results):
        return []
    lines = []
    for kernel, what, key in DIGESTS:
        per_system, values = [], []     # [[digests of each run of one system]], its values
        for value, result in zip(sweep[1], results):
            runs = [run if key in run else (run.get("dispatch") or {})
                    for run in map(_figures, result.runs)]
            if any(run.get(f"{what}_rule") == "bound" for run in runs):
                continue                # judged by an error bound, not bit for bit
            per_system.append([run.get(key) for run in runs])
            values.append(value)
        if len(values) < 2 or any(d is None for runs in per_system for d in runs):
            continue
        base = per_system[0]
        differ = None
        for value, runs in zip(values[1:], per_system[1:]):
            for i, (digests, ref) in enumerate(zip(runs, base)):
                if digests != ref:
                    rank = next((r for r, (a, b) in enumerate(zip(digests, ref)) if a != b),
                                min(len(digests), len(ref)))
                    differ = (f"DIFFER: {kernel} {what} of system={value} (run {i}, rank "
                              f"{rank}) is not system={values[0]}'s")
                    break
            if differ:
                break
        lines.append(differ or f"{kernel} outputs: {what} payloads identical across "
                               f"{', '.join(map(str, values))} on all {len(base[0])} ranks")
    return lines


def sweep_lines(sweep, results):
    """``(lines, differ)``: every comparison of a sweep's results in the order ``epfabric
    run`` prints them (latencies, Fig. 8's stages, same outputs), and whether the systems'
    outputs differ (the run then exits 1)."""
    same = same_outputs(sweep, results)
    lines = latency_lines(sweep, results) + stage_table(sweep, results) + same
    return lines, any(line.startswith("DIFFER") for line in same)
