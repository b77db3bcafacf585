"""``combine``: a dispatch, the experts, then the combine — CANN's or UBEP's — bit-exact.

One invocation runs two machine runs on one configuration (each run is a
fresh machine, so what the combine needs is carried by the host, as a
persistent HBM would keep it):

1. the ``dispatch`` kernel of the same ``system`` (checked as ``epfabric
   run dispatch`` checks it);
2. the experts: the host reads every rank's ``OUT`` back and applies the
   stand-in FFN (:func:`~epfabric.sw.ubep.reference.expert_outputs`: row of
   expert ``e`` times ``e + 1`` per 16-bit lane) — to what the machine
   delivered, not to the reference;
3. the combine (:mod:`epfabric.sw.ubep.combine`), with ``OUT`` = the expert
   outputs and the dispatch's ``COUNTS``, ``EXPAND`` and ``CTRL`` words
   carried over; its cycles are the run's cycles.

The checker compares every rank's ``YOUT`` with
:func:`~epfabric.sw.ubep.reference.combine_out` (UBEP: the payload words 4+,
since words 0–3 of every block carry the TFF header in both directions) and
checks the guard blocks after ``CWIN`` and ``YOUT``.

With ``dtype="bf16"`` (:mod:`~epfabric.sw.ubep.bf16`) CANN's and UBEP's ``y`` is compared
bit for bit with the fixed order's; UBEP-INC's is summed in the network in arrival order,
so its ``y`` is judged by the error bound of that sum against the fp64 sum of the exact
products (:func:`~epfabric.sw.ubep.bf16.inc_check`), and its check reports ``y_rule``
``"bound"``, the largest error in bf16 ulps (``y_max_error_ulps``; the fixed order's,
``y_fixed_max_error_ulps``, beside it) and the largest error over its bound
(``y_max_error_over_bound``). Its dispatch carries the weights' fp32 upper halves (the bf16
combine's ``WEIGHTS``) to ``IMETA``, and its machine's switches sum bf16 lanes
(``ep_dtype="bf16"``).
"""

import hashlib
from dataclasses import replace

import numpy as np

from ...hw.validate import UserError
from ..ubep import bf16, combine, ubep_inc
from ..ubep.layout import GUARD
from ..ubep.reference import combine_out, dispatch_out, expert_outputs
from ..param import Param
from . import pow2_at_least, register
from .dispatch import (HEADER_WORDS, INC_SYSTEMS, KERNEL as DISPATCH, Dispatch, combine_programs,
                       hidden_bytes, layout_of, links_of, summary_lines)

__all__ = ["Combine", "KERNEL", "carry_to_combine"]


def carry_to_combine(machine, w, params, expert_out, carried=None):
    """Make the machine's image the combine's: carried state, ``expert_out`` in ``OUT``, programs.

    ``expert_out[d]`` is rank ``d``'s expert output rows (rows × blocks ×
    words). ``carried`` (``{(rank, block): words}``) is the state a
    persistent HBM keeps; by default the ``CTRL``, ``COUNTS``, ``CNT``,
    ``OFFS`` and ``EXPAND`` blocks of the dispatch run just read back.
    """
    cfg = machine.config
    lay = layout_of(cfg, params)
    wpb = cfg.words_per_block
    if carried is None:
        blocks = ([lay.CTRL] + list(range(lay.COUNTS, lay.WEIGHTS))
                  + list(range(lay.IMETA, lay.MCBUF)))     # UBEP-INC's IMETA (else empty)
        carried = {(r, b): machine.read_mem(r, machine.address(0, b), wpb)
                   for r in range(cfg.ranks) for b in blocks}
    carried = dict(carried)
    machine.clear()
    for (r, block), words in sorted(carried.items()):
        machine.write_mem(r, machine.address(0, block), words)
    fp = params.get("dtype") == "bf16"
    for r in range(cfg.ranks):
        _write_packed(machine, r, lay.ROUTE, w.topk_idx[r], wpb)
        _write_packed(machine, r, lay.WEIGHTS,
                      bf16.weight_bits(w.topk_w[r]) if fp else w.topk_w[r], wpb)
        rows = np.asarray(expert_out[r], dtype=np.uint64)
        for p in range(len(rows)):
            for b in range(lay.hidden_blocks):
                machine.write_mem(r, machine.address(0, lay.OUT + p * lay.hidden_blocks + b),
                                  rows[p, b].tolist())
        for guard in (lay.CWIN_GUARD, lay.YOUT_GUARD):
            machine.write_mem(r, machine.address(0, guard), [GUARD] * wpb)
    for (r, c), prog in combine_programs(cfg, params).items():
        machine.load_program(r, c, prog)
    machine.read_back([(lay.CWIN_GUARD, 1), (lay.YOUT, lay.batch * lay.hidden_blocks + 1)])


def _write_packed(machine, rank, block, values, wpb):
    """16-bit ``values`` (flattened) two to a word from ``block`` on."""
    v = np.asarray(values).reshape(-1).astype(np.uint64)
    if len(v) % 2:
        v = np.append(v, np.uint64(0))
    words = (v[0::2] | (v[1::2] << 16)).tolist()
    for b in range(0, len(words), wpb):
        machine.write_mem(rank, machine.address(0, block + b // wpb), words[b:b + wpb])


def read_out(machine, lay, d, rows):
    """Rank ``d``'s ``OUT``: ``rows`` × blocks × words, as read back."""
    if not rows:
        return np.zeros((0, lay.hidden_blocks, lay.words), dtype=np.uint64)
    return np.array(machine.read_mem(d, machine.address(0, lay.OUT), rows * lay.hidden_blocks * 128),
                    dtype=np.uint64).reshape(rows, lay.hidden_blocks, 128)[:, :, :lay.words]


class Combine(Dispatch):
    """MoE combine after a dispatch (module docstring)."""

    name = "combine"
    description = ("MoE combine (CANN EP's BSP kernel or UBEP's) after a dispatch, "
                   "checked bit-exact against numpy")
    params = tuple(Param("broken", None, "a negative control of system='ubep' or 'ubep-inc'",
                         choices=(None, "no_flag_poll")) if p.name == "broken" else p
                   for p in Dispatch.params) + (
        Param("dtype", "int16", "element type: int16 (16-bit lanes mod 2^16) or bf16 (bf16 "
              "rows, fp32 weights and sums, bf16 y; cores with fp; cann and ubep in a fixed "
              "order, ubep-inc in the switches' arrival order, within an error bound)",
              choices=bf16.DTYPES),)
    needs_combine = True
    trace_phases = {**Dispatch.trace_phases, combine.EVENTS["c_init"]: "Combine init",
                    combine.EVENTS["c_send"]: "Combine send",
                    combine.EVENTS["c_sync"]: "Combine flag wait + SyncAll",
                    combine.EVENTS["c_combine"]: "Combine sum"}

    def trace_flows(self, config, params):
        """Flow arrows of the combine run's trace (its report holds the combine's MARKs only):

        * CANN: "flag" from AIV ``a`` of rank ``d``'s "Combine send" (after its fence it
          writes ``CSTATUS[d]`` on each source rank ``s`` of ``split(R, A, a)``) to the AIV
          of rank ``s`` whose "Combine flag wait + SyncAll" polls ``CSTATUS[d]``
          (``d`` in its ``split(R, A, ·)``).
        * UBEP: "answers" from the AIV ``q mod A`` of the expert's rank ``d``
          (``q = e_l·R + s``), whose "Combine send" sends the pair's rows to source ``s``,
          to the AIV of rank ``s`` whose "Combine sum" polls the answer of token ``t``
          (``t`` in its ``split(BS, A, ·)``), for every slot of the run's routing (from its
          seed). None with ``broken="no_flag_poll"`` (nothing polls).
        """
        from ..ubep.cann import split
        from .dispatch import workload_of
        R, A = config.ranks, config.aivs_per_die
        flows = set()
        if params["system"] == "cann":
            for d in range(R):
                for a in range(A):
                    for s in range(*split(R, A, a)):
                        waiter = next(b for b in range(A) if d in range(*split(R, A, b)))
                        flows.add(("flag", (d, a, "Combine send"),
                                   (s, waiter, "Combine flag wait + SyncAll")))
            return sorted(flows)
        if params.get("combine_broken") == "no_flag_poll":
            return []
        epr = params["experts"] // R
        w = workload_of(params, R, config.words_per_block)
        if params["system"] != "ubep":             # UBEP-INC: a pre-sum per (token, die)
            for s in range(R):
                for t in range(w.batch):
                    summer = next(b for b in range(A) if t in range(*split(w.batch, A, b)))
                    for d in {int(e) // epr for e in w.topk_idx[s][t]}:
                        flows.add(("answers", (d, s % A, "Combine send"),
                                   (s, summer, "Combine sum")))
            return sorted(flows)
        for s in range(R):
            for t in range(w.batch):
                summer = next(b for b in range(A) if t in range(*split(w.batch, A, b)))
                for e in w.topk_idx[s][t].tolist():
                    d, e_l = divmod(e, epr)
                    flows.add(("answers", (d, (e_l * R + s) % A, "Combine send"),
                               (s, summer, "Combine sum")))
        return sorted(flows)

    def resolve_params(self, params):
        p = dict(params or {})
        broken = p.pop("broken", None) or p.pop("combine_broken", None)
        p.pop("combine_broken", None)
        self.param("broken").check(broken)
        dtype = p.pop("dtype", None) or "int16"
        self.param("dtype").check(dtype)
        resolved = DISPATCH.resolve_params(p)
        if broken and resolved["system"] == "cann":
            raise UserError("broken variants of the combine are negative controls of "
                            "system='ubep' or 'ubep-inc'")
        return {**resolved, "combine_broken": broken, "broken": None, "dtype": dtype}

    def configs(self, preset, topology=None, aivs=None, params=None):
        """The dispatch's machines (:meth:`Dispatch.configs`); with ``dtype="bf16"`` their cores
        have the fp unit (the preset's shape) and room in the UBuf for fp32 sums, and a machine
        whose switches reduce (``ep_window``) sums bf16 lanes there (``ep_dtype``)."""
        resolved = self.resolve_params(params)
        out = super().configs(preset, topology, aivs, params)
        dtype = resolved["dtype"]
        if dtype == "int16":
            return out
        new = []
        for c in out:
            lay = layout_of(c, resolved)
            rows = [combine.ubuf_rows_needed(replace(lay, inc=False), dtype)]
            if c.ep_window:
                rows.append(ubep_inc.ubuf_rows_needed(replace(lay, inc=True), dtype))
            new.append(replace(c, fp=True, ubuf_rows=max(c.ubuf_rows, pow2_at_least(max(rows))),
                               **({"ep_dtype": dtype} if c.ep_window else {})))
        return new

    def programs(self, config, params):
        return DISPATCH.programs(config, params)

    load_runs = True

    def load(self, machine, params, max_cycles=None):
        """Run the dispatch (under ``max_cycles``, default the dispatch's); load the combine."""
        cfg = machine.config
        w, _, epoch = DISPATCH.load(machine, params)
        lay = layout_of(cfg, params)
        if lay.inc and params.get("dtype") == "bf16":   # IMETA gets the bf16 combine's weights
            for r in range(cfg.ranks):
                _write_packed(machine, r, lay.WEIGHTS, bf16.weight_bits(w.topk_w[r]),
                              cfg.words_per_block)
        report = machine.run(DISPATCH.default_max_cycles if max_cycles is None else max_cycles)
        verdict = DISPATCH.check(machine, report, (w, params, epoch))
        cnt = [len(rows) for rows in dispatch_out(w)[0]]     # rows each rank should hold
        delivered = [read_out(machine, lay, d, cnt[d]) for d in range(cfg.ranks)]
        experts = bf16.expert_outputs if params.get("dtype") == "bf16" else expert_outputs
        carry_to_combine(machine, w, params, experts(w, delivered))
        before = {"cycles": report.cycles, "ns": report.ns, "correct": verdict["correct"],
                  "problems": verdict["problems"], "phases": verdict["phases"],
                  "syncall_share": verdict["syncall_share"], "links": verdict["links"],
                  "out_payload_digest": verdict["out_payload_digest"]}
        # the checker's expected expert outputs: the stand-in applied to numpy's dispatch
        return w, params, before, delivered, experts(w, dispatch_out(w)[0]), report

    def inner_runs(self, inputs):
        """``[(name, report)]`` of the machine runs :meth:`load` made before the combine's own:
        the dispatch (``run_kernel`` keeps them in the combine's
        :class:`~epfabric.sw.kernels.result.MachineRun`; ``epfabric run combine --trace``
        draws them before it)."""
        return [("dispatch", inputs[5])]

    def check(self, machine, report, inputs):
        w, params, before, _delivered, expert_ref = inputs[:5]     # [5]: the dispatch report
        system = params["system"]
        cfg = machine.config
        lay = layout_of(cfg, params)
        wpb = cfg.words_per_block
        problems = [f"dispatch: {p}" for p in before["problems"]]
        fp = params.get("dtype") == "bf16"
        want = (bf16.combine_out if fp else combine_out)(w, expert_ref)
        lo = HEADER_WORDS if system != "cann" else 0
        bound = fp and system in INC_SYSTEMS       # summed in arrival order: judged by a bound
        digests, ys = [], []
        for s in range(cfg.ranks):
            got = np.array(machine.read_mem(s, machine.address(0, lay.YOUT),
                                            w.batch * w.hidden_blocks * 128),
                           dtype=np.uint64).reshape(w.batch, w.hidden_blocks, 128)[:, :, :wpb]
            payload = got[:, :, HEADER_WORDS:]
            digests.append(hashlib.sha1(np.ascontiguousarray(payload)).hexdigest()[:16])
            ys.append(got)
            if not bound and not np.array_equal(got[:, :, lo:], want[s][:, :, lo:]):
                bad = int(np.flatnonzero((got[:, :, lo:] != want[s][:, :, lo:])
                                         .any(axis=(1, 2)))[0])
                problems.append(f"rank {s}: YOUT token {bad} of {w.batch} differs from numpy")
            for guard in (lay.CWIN_GUARD, lay.YOUT_GUARD):
                if machine.read_mem(s, machine.address(0, guard), wpb) != [GUARD] * wpb:
                    problems.append(f"rank {s}: guard block {guard} was overwritten")
        figures = {} if not fp else {"y_rule": "exact"}
        if bound:
            figures, past = _judge_by_bound(ys, w, expert_ref, lo, want)
            problems += past
        if report.trace_dropped:
            problems.append(f"the MARK trace dropped {report.trace_dropped} events")
        names = {v: k for k, v in combine.EVENTS.items()}
        phases = {}
        for t in report.trace:
            if t["event"] in names:
                phases.setdefault(f"{t['rank']}.{t['core']}", {})[names[t["event"]]] = t["cycle"]
        if len(phases) != cfg.cores or any(list(v) != list(combine.PHASES[system])
                                           for v in phases.values()):
            problems.append(f"{len(phases)} of {cfg.cores} AIVs reported every combine phase "
                            f"in order")
        latency_ns = report.ns
        share = None
        if system == "cann" and phases and report.cycles:
            waits = [v["c_sync"] - v["c_send"] for v in phases.values()
                     if "c_sync" in v and "c_send" in v]
            share = sum(waits) / len(waits) / report.cycles if waits else None
        return {"correct": not problems, "syncall_share": share, "problems": problems,
                "system": system,
                "links": links_of(report, w, cfg, params, "combine", machine.preset),
                "latency_us": latency_ns / 1000,
                "bandwidth_gbps": (w.bytes_moved(hidden_bytes(params)) / latency_ns
                                   if latency_ns else None),
                "phases": dict(sorted(phases.items())), "dispatch": before,
                "y_payload_digest": digests, **figures,
                "cycle_ns": machine.preset.cycle_ns}

    def summary(self, result):
        return summary_lines(self.name, result,
                             lambda run: f" (after a dispatch of "
                                         f"{run.check['dispatch']['cycles']} cycles)"
                                         + _bound_note(run.check),
                             "flag wait + SyncAll")


def _judge_by_bound(ys, w, expert_ref, first_word, fixed):
    """``(figures, problems)`` of a ``y`` summed in arrival order (``ys[s]``: rank ``s``'s),
    judged by :func:`~epfabric.sw.ubep.bf16.inc_check` from word ``first_word`` on; ``fixed``
    is the fixed order's ``y``, measured beside it."""
    v = bf16.inc_check(ys, w, expert_ref, first_word=first_word, fixed=fixed)
    problems, seen = [], set()
    for s, t in v["bad"]:
        if s not in seen:
            seen.add(s)
            problems.append(f"rank {s}: YOUT token {t} of {w.batch} is past its error bound "
                            f"(bf16.inc_bound)")
    return {"y_rule": "bound", "y_max_error_ulps": v["max_error_ulps"],
            "y_max_error_over_bound": v["max_error_over_bound"],
            "y_same_sign_bound_ulps": v["same_sign_bound_ulps"],
            "y_fixed_max_error_ulps": v["fixed_max_error_ulps"]}, problems


def _bound_note(check):
    """``"; y within its bound: ..."`` for a ``y`` judged by an error bound, else ``""``."""
    if check.get("y_rule") != "bound":
        return ""
    return (f"; y {'within' if check['y_max_error_over_bound'] <= 1 else 'PAST'} its error "
            f"bound: max {check['y_max_error_ulps']:.2f} ULPs of the fp64 sum (fixed order "
            f"{check['y_fixed_max_error_ulps']:.2f}; bound {check['y_same_sign_bound_ulps']:.2f} "
            f"where no terms cancel), {check['y_max_error_over_bound']:.2f} of the bound")


KERNEL = register(Combine())
