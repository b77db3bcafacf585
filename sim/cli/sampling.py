"""The counter sampler of ``epfabric run --trace``: its size, its interval, and when a run goes again.

The trace's counter tracks come from a sampler memory of :data:`TRACE_SAMPLE_DEPTH`
entries on every AIV machine (``MachineConfig.sample_depth``). Without
``--sample-every`` a run samples every :data:`AUTO_SAMPLE_EVERY` cycles first, and a
run given fewer than :data:`MIN_SAMPLES` samples, or more than fit, runs once more at
the interval that gives its longest run about :data:`TARGET_SAMPLES` (sampling never
changes a run's cycles).
"""

from ...hw.validate import UserError, check_int

__all__ = ["TRACE_SAMPLE_DEPTH", "AUTO_SAMPLE_EVERY", "MIN_SAMPLES", "TARGET_SAMPLES",
           "sampling", "resample", "say_dropped"]

#: entries of the counter sampler ``--trace`` builds (MachineConfig.sample_depth)
TRACE_SAMPLE_DEPTH = 1024
#: ``--trace``'s first sampling interval when ``--sample-every`` is not given
AUTO_SAMPLE_EVERY = 8
#: without ``--sample-every``, a run with fewer samples than this, or with samples dropped,
#: runs again at the interval that gives it about TARGET_SAMPLES (cycles do not change)
MIN_SAMPLES, TARGET_SAMPLES = 200, 400


def sampling(args, configs):
    """``(sample_depth, sample_every)`` of the counter sampler ``--trace`` builds, or ``None``
    (no ``--trace``, ``--sample-every 0``, or no AIV machine to sample)."""
    every = args.sample_every
    if every is not None and not args.trace:
        raise UserError("--sample-every needs --trace (the counter tracks are in the trace)")
    if every is not None:
        check_int("--sample-every", every, 0, (1 << 32) - 1)
        if not any(c.kind == "aiv" for c in configs):
            raise UserError(f"--sample-every: kernel {args.kernel} does not run on the AIV "
                            f"machine (its counters are not sampled)")
    if not args.trace or every == 0 or not any(c.kind == "aiv" for c in configs):
        return None
    return TRACE_SAMPLE_DEPTH, AUTO_SAMPLE_EVERY if every is None else every


def resample(args, sampler, result):
    """The interval of a second run when ``--sample-every`` was not given and a run got fewer
    than MIN_SAMPLES samples or dropped some (the longest run then gets ~TARGET_SAMPLES);
    ``None``: keep these runs. Says so when it runs again."""
    if sampler is None or args.sample_every is not None:
        return None
    sampled = [r for r in result.all_reports() if r.samples]
    if not sampled:
        return None
    longest = max(r.cycles for r in sampled)
    fewest = min(len(r.samples["cycles"]) for r in sampled)
    dropped = sum(r.samples["dropped"] for r in sampled)
    every = max(1, -(-longest // TARGET_SAMPLES))
    if (fewest >= MIN_SAMPLES and not dropped) or every == sampler[1]:
        return None
    why = (f"{dropped} counter samples did not fit" if dropped else
           f"{fewest} counter samples every {sampler[1]} cycles")
    print(f"{why}: running again with --sample-every {every} (the longest run is "
          f"{longest:,} cycles; the cycles do not change)")
    return every


def say_dropped(result):
    """One line per run whose sampler memory filled (its trace's rate tracks end early)."""
    for r in result.all_reports():
        s = r.samples
        if s and s["dropped"]:
            print(f"counter sampler: {s['depth']} samples every {s['every']} cycles cover cycles "
                  f"0..{s['cycles'][-1]:,} of {r.cycles:,}; {s['dropped']} dropped "
                  f"(--sample-every {max(1, -(-r.cycles // (s['depth'] - 1)))} covers the run)")
