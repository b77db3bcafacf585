"""``moe-layer``: INC-MoE's band-pipelined MoE layer on AIV cores, or the ring baseline.

INC-MoE §3 (Algorithm 1, Fig. 3–4) on the INC machine (``incmoe-testbed``:
``ranks`` dies on one switch with the INC engine, 100 Gb/s per direction per
rank; every die has AIV cores, a network interface its cores post to and a
cube unit). ``mode="inc"`` runs the persistent kernel of
:mod:`epfabric.sw.incmoe.program` (AllGather of band j+1 ‖ expert FFN of band
j ‖ ReduceScatter of band j−1); ``mode="ring"`` the ring AllGather → FFN →
ring ReduceScatter of vLLM's default path on the same kind of machine;
``mode="both"`` runs both on the same input and reports the cut.

Every run is checked bit-exactly against numpy (:mod:`epfabric.sw.incmoe.reference`):
every rank's output rows, every rank's gathered buffer (rows beyond a rank's
count must stay zero), every partial in ``Z`` and (INC) every reduced row
the switch delivered, and the completion counters.
"""

import numpy as np

from ...hw.validate import UserError, check_int
from ..config import MachineConfig
from ..incmoe.layout import Layout
from ..incmoe.program import MARKS, TRACE_SPANS, LayerSpec, program, role_of
from ..incmoe.reference import layer_output, partials
from ..incmoe.workload import band_rows, make_case
from ..isa import address
from ..presets import get_preset
from ..param import Param
from . import Kernel, pow2_at_least, register
from .compare import cut

__all__ = ["MoeLayer", "KERNEL", "band_times"]

MODES = ("inc", "ring", "both")


def _ints(name, value):
    """An int or a sequence of ints (a CLI literal gives a tuple) as a tuple."""
    if isinstance(value, int) and not isinstance(value, bool):
        return (value,)
    if isinstance(value, str) or not hasattr(value, "__iter__"):
        raise UserError(f"{name} must be integers separated by commas, not {value!r}")
    return tuple(check_int(f"{name}[{i}]", v, 0) for i, v in enumerate(value))


def band_times(report, spec):
    """Per band ``{"ag", "ffn", "rs"}: [first start, last end]`` in cycles over every rank.

    From the MARK trace: the k-th event of a kind on a core is band k, except
    on a reduce AIV i, whose k-th is band ``i + k * B_RS`` (it owns every
    B_RS-th band), and for the tail helpers' ``rs_start``/``rs_done`` on gather
    AIVs (band ``bands - tail + k``).
    """
    seen = {}
    spans = [{role: [None, None] for role in ("ag", "ffn", "rs")} for _ in range(spec.bands)]
    kinds = {v: k for k, v in MARKS.items()}
    for ev in report.trace:
        kind = kinds.get(ev["event"])
        if kind is None:
            continue
        key = (ev["rank"], ev["core"], kind)
        k = seen.get(key, 0)
        seen[key] = k + 1
        role, index = role_of(spec, ev["core"])
        if role == "gather" and kind in ("rs_start", "rs_done"):
            k += spec.bands - spec.tail
        elif role == "reduce":              # reduce AIV i owns bands i, i + B_RS, ...
            k = index + k * spec.roles[2]
        if k >= spec.bands:
            continue
        if kind == "rs_start":
            continue
        which, edge = {"ag_post": ("ag", 0), "ag_done": ("ag", 1), "ffn_start": ("ffn", 0),
                       "ffn_end": ("ffn", 1), "rs_post": ("rs", 0), "rs_done": ("rs", 1)}[kind]
        span = spans[k][which]
        t = ev["cycle"]
        span[edge] = t if span[edge] is None else (min if edge == 0 else max)(span[edge], t)
    return spans


class MoeLayer(Kernel):
    """The INC-MoE layer (module docstring)."""

    name = "moe-layer"
    description = ("INC-MoE's band-pipelined MoE layer (AG ‖ FFN ‖ RS on AIV roles, INC "
                   "post/wait, cube unit) or the ring baseline, checked against numpy")
    params = (Param("mode", "both", "INC-MoE's pipelined layer, the ring baseline, or both "
                    "on the same input (and the cut)", str, MODES),
              Param("ranks", 4, "ranks (N)", int),
              Param("tokens", 8, "tokens of every rank (unless counts)", int),
              Param("counts", (), "tokens of each rank, one count per rank", sequence=True),
              Param("bands", 3, "bands of the pipeline", int),
              Param("roles", (1, 5, 2), "(gather, compute, reduce) AIVs of a die", sequence=True),
              Param("tail", 0, "last bands whose reduction a gather AIV joins", int),
              Param("experts", 64, "experts (E), spread evenly over the ranks", int),
              Param("topk", 8, "experts per token (k)", int),
              Param("seed", 1, "routing and token seed", int, minimum=0),
              Param("tmax", 0, "rows of a rank's block (0: the largest count)", int),
              Param("slots", 0, "aggregator slots of the INC engine (0: the least that "
                    "holds a band)", int))
    default_preset = "incmoe-testbed"
    default_aivs = (8,)
    default_max_cycles = 5_000_000
    #: AG / FFN / RS slices in ``epfabric run --trace`` (:data:`~epfabric.sw.incmoe.program.TRACE_SPANS`)
    trace_spans = TRACE_SPANS

    def resolve_params(self, params):
        p = super().resolve_params(params)
        check_int("ranks", p["ranks"], 2, 64)
        check_int("tokens", p["tokens"], 0, 1 << 14)
        counts = _ints("counts", p["counts"]) if p["counts"] not in ((), None, "") else ()
        if counts and len(counts) != p["ranks"]:
            raise UserError(f"counts must give {p['ranks']} token counts (one per rank), "
                            f"not {counts!r}")
        p["counts"] = counts or (p["tokens"],) * p["ranks"]
        if max(p["counts"]) == 0:
            raise UserError(f"counts/tokens must give at least one rank a token, not {p['counts']!r}")
        p["roles"] = _ints("roles", p["roles"])
        check_int("bands", p["bands"], 1, 1 << 12)
        check_int("tail", p["tail"], 0, p["bands"])
        check_int("experts", p["experts"], p["ranks"])
        if p["experts"] % p["ranks"]:
            raise UserError(f"experts must be a multiple of ranks ({p['ranks']}), not {p['experts']}")
        check_int("topk", p["topk"], 1, p["experts"])
        check_int("tmax", p["tmax"], 0, 1 << 14)
        if p["tmax"] and p["tmax"] < max(p["counts"]):
            raise UserError(f"tmax={p['tmax']} (rows per rank block) is below the largest token "
                            f"count {max(p['counts'])}")
        check_int("slots", p["slots"], 0, 1 << 12)
        self.spec(p, "inc")        # roles, tail: checked here, before any machine
        return p

    @staticmethod
    def spec(params, mode):
        ring = mode == "ring"
        return LayerSpec(mode=mode, bands=1 if ring else params["bands"], roles=params["roles"],
                         tail=0 if ring else params["tail"],
                         local_experts=params["experts"] // params["ranks"], topk=params["topk"])

    @staticmethod
    def beta(params, mode):
        return band_rows(params["counts"], 1 if mode == "ring" else params["bands"])

    def slots(self, params):
        """Engine slots: ``slots`` or the smallest power of two >= ranks * beta (and >= 16)."""
        need = params["ranks"] * self.beta(params, "inc")
        if params["slots"]:
            if params["slots"] < need:
                raise UserError(f"slots={params['slots']} is below ranks * beta = {need}: two "
                                f"chunks of one band would share an aggregator slot and the "
                                f"reduction could deadlock (docs/spec/kernels.md §0.10)")
            return params["slots"]
        return max(16, pow2_at_least(need))

    def configs(self, preset, topology=None, aivs=None, params=None):
        params = self.resolve_params(params)
        pr = get_preset(preset)
        n = params["ranks"]
        if topology is not None and tuple(topology) != ("star", n):
            raise UserError(f"moe-layer runs on a star of --ranks {n} ranks, not {topology!r}")
        spec = self.spec(params, "inc")
        if aivs is not None and aivs != spec.aivs:
            raise UserError(f"--aivs {aivs} does not match roles {params['roles']} "
                            f"({spec.aivs} AIVs per die)")
        tmax = params["tmax"] or max(params["counts"])
        modes = ("inc", "ring") if params["mode"] == "both" else (params["mode"],)
        # modelled words: the preset's, or enough for META (counts + beta), PROG (a word per
        # compute AIV) and a token's routing words plus as many data words
        words = max(pr.data_bytes // 4, n + 1, spec.roles[1], 2 * params["topk"])
        data_bytes = 32 * -(-4 * words // 32)
        if data_bytes > 512:
            raise UserError(f"ranks={n}, roles={params['roles']}, topk={params['topk']} need "
                            f"{words} modelled words per block; a block has 128")
        out = []
        for mode in modes:
            # the ring never uses the engine's aggregator slots
            slots = self.slots(params) if mode == "inc" else (params["slots"] or 16)
            base = dict(topology=("star", n), aivs_per_die=spec.aivs, data_bytes=data_bytes,
                        lanes=8, width=32, ubuf_rows=4, nic_mode=mode, nic_tmax=tmax,
                        inc_slots=pow2_at_least(slots))
            shape = MachineConfig(pr.name, **base, hbm_blocks=1 << 15)
            lay = Layout(shape, spec.local_experts, spec.roles[1])
            longest = max(len(program(shape, r, c, self.spec(params, mode), lay).assemble())
                          for r in range(n) for c in range(spec.aivs))
            marks = n * (spec.bands * (2 + 2 * spec.roles[1] + 3) + 2 * spec.roles[0] * spec.tail)
            if marks > 65535:
                raise UserError(f"bands={spec.bands} on {n} ranks with roles {params['roles']} "
                                f"need {marks} MARK trace entries; the trace holds at most 65535")
            out.append(MachineConfig(pr.name, **base, hbm_blocks=pow2_at_least(lay.end),
                                     imem_depth=pow2_at_least(longest),
                                     trace_depth=min(65535, max(1024, pow2_at_least(marks)))))
        return out

    def load(self, machine, params):
        params = self.resolve_params(params)
        cfg = machine.config
        mode = cfg.nic_mode
        spec = self.spec(params, mode)
        n, words = cfg.ranks, cfg.words_per_block
        if 2 * params["topk"] > words:
            raise UserError(f"topk={params['topk']} routing words need data_bytes >= "
                            f"{8 * params['topk']} (half of a block's modelled words are data)")
        case = make_case(ranks=n, counts=params["counts"], experts=params["experts"],
                         topk=params["topk"], words=words, seed=params["seed"])
        lay = Layout(cfg, spec.local_experts, spec.roles[1])
        beta = self.beta(params, mode)
        for r in range(n):
            for c in range(spec.aivs):
                machine.load_program(r, c, program(cfg, r, c, spec, lay))
            for t in range(case.counts[r]):
                machine.write_mem(r, address(0, lay.X + t), case.x[r][t].tolist())
            machine.write_mem(r, address(0, lay.META), list(case.counts) + [beta])
            for el in range(spec.local_experts):
                e = r * spec.local_experts + el
                machine.write_mem(r, address(0, lay.WEIGHTS + el), [int(case.a[e]), int(case.b[e])])
        machine.read_back([(0, cfg.nic_regions["end"])])
        return {"params": params, "case": case, "layout": lay, "spec": spec, "beta": beta}

    def check(self, machine, report, inputs):
        cfg = machine.config
        case, lay, spec = inputs["case"], inputs["layout"], inputs["spec"]
        mode, n, words, tmax = cfg.nic_mode, cfg.ranks, cfg.words_per_block, lay.tmax
        problems = []

        def rows(rank, first, count):
            out = [machine.read_mem(rank, address(0, first + i), words) for i in range(count)]
            return np.array(out, dtype=np.uint32).reshape(count, words)

        want = layer_output(case)
        parts = [partials(case, r) for r in range(n)]
        for r in range(n):
            T = case.counts[r]
            got = rows(r, lay.output(mode, r), T)
            bad = np.flatnonzero((got != want[r]).any(axis=1))
            if bad.size:
                problems.append(f"rank {r}: {bad.size} of {T} output rows differ from numpy "
                                f"(first: row {bad[0]})")
            xg = rows(r, lay.XG, n * tmax)
            z = rows(r, lay.Z, n * tmax)
            part = parts[r]
            for q in range(n):
                blk = xg[q * tmax:(q + 1) * tmax]
                Tq = case.counts[q]
                if not np.array_equal(blk[:Tq], case.x[q]):
                    problems.append(f"rank {r}: gathered rows of rank {q} differ from its tokens")
                if blk[Tq:].any():
                    problems.append(f"rank {r}: gathered block of rank {q} has data beyond its "
                                    f"{Tq} rows")
                if q != r and not np.array_equal(z[q * tmax:q * tmax + Tq], part[q]):
                    problems.append(f"rank {r}: partials for rank {q}'s tokens differ from numpy")
                if z[q * tmax + Tq:(q + 1) * tmax].any():
                    problems.append(f"rank {r}: Z block of rank {q} has data beyond its {Tq} rows")
            rsin = rows(r, lay.RSIN, tmax)
            if rsin[T:].any():
                problems.append(f"rank {r}: RSIN has data beyond its {T} rows")
            if mode == "inc" and T:
                others = sum(parts[q][r].astype(np.uint64) for q in range(n) if q != r)
                sums = (others & 0xFFFFFFFF).astype(np.uint32)
                if not np.array_equal(rsin[:T], sums):
                    problems.append(f"rank {r}: the switch's reduced rows differ from numpy")
        c = report.counters
        for r in range(n):
            expect = {"inc_ag": sum(case.counts) - case.counts[r], "inc_rs": case.counts[r],
                      "inc_bar": spec.bands}
            for k, v in expect.items():
                if c[k][r] != v:
                    problems.append(f"rank {r}: {k} counter {c[k][r]}, expected {v}")
        if report.trace_dropped:
            problems.append(f"{report.trace_dropped} MARK events dropped: band times incomplete")
        spans = band_times(report, spec)
        return {"correct": not problems, "problems": problems, "mode": mode,
                "counts": list(case.counts), "bands": spec.bands, "beta": inputs["beta"],
                "roles": list(spec.roles), "tail": spec.tail,
                "layer_us": report.ns / 1000, "band_times": spans}

    def combine_runs(self, runs):
        """With both modes: ``cut`` = 1 − t_INC / t_ring on the same input."""
        by = {r.check["mode"]: r for r in runs}
        if set(by) != {"inc", "ring"}:
            return {}
        return {"cut": cut(by["ring"].cycles, by["inc"].cycles)}

    def summary(self, result):
        lines = []
        for run in result.runs:
            c = run.check
            lines.append(f"moe-layer {c['mode']} on {result.preset} [{result.backend}]: "
                         f"{len(c['counts'])} ranks, tokens {c['counts']}, "
                         f"{c['bands']} band(s) of {c['beta']} rows, roles {c['roles']}, "
                         f"tail {c['tail']}: {run.cycles} cycles ({c['layer_us']:.2f} us), "
                         f"{'correct' if run.correct else 'WRONG: ' + '; '.join(run.problems[:3])}")
        if "cut" in result.figures:
            lines.append(f"layer time cut INC vs ring: {100 * result.figures['cut']:.1f} %")
        return lines


KERNEL = register(MoeLayer())
