"""``agrs``: one AllGather and one ReduceScatter, in-network (INC) or on a ring (INC-MoE §3.1–3.2).

Runs on an :class:`~epfabric.sw.config.AgrsConfig` machine: ``ranks``
endpoints on a star, the switch's INC engine multicasting and reducing
(``mode="inc"``) or the ring baseline (``mode="ring"``). Buffers use the
padded layout of INC-MoE §3.1 — ``ranks`` blocks of ``tmax`` rows, rank
``r``'s ``T_r`` rows at the start of block ``r`` — and one row is one 512 B
DataBlock of which ``lanes`` int32 words are modelled.

* AllGather: rank ``r`` contributes its ``T_r`` rows; afterwards every rank
  holds every rank's rows in its gather buffer.
* ReduceScatter: every rank holds partials of the whole padded buffer;
  afterwards rank ``r``'s reduced shard holds the sum over all ranks of block
  ``r``'s first ``T_r`` rows, in lanes of ``dtype``: int32 (wrapping, the
  default), fp32, or bf16 (two lanes a word).

How a floating-point ReduceScatter is checked (docs/concepts/inc-numerics.md): the
ring adds in the ring's order (block ``q``'s chain starts at rank ``q + 1``, every
hop adds its partial and rounds, the root last), which is fixed, so the shard is
bit-exact against :func:`~epfabric.sw.lane_sums.ordered_sum` of that chain; the INC
engine adds the other ranks' partials in arrival order (fp32, a bf16 sum rounded
once when it leaves) and the root adds its own, so the shard is checked against the
exact sum with :func:`~epfabric.sw.lane_sums.error_bound` (``ranks`` terms; bf16: two
roundings), and the largest error is reported in ulps.

:func:`reference` is the numpy model :meth:`Agrs.check` compares with;
:func:`bound_gbps` the equivalent-bandwidth bounds of INC-MoE Eq. 4–5. The
endpoints are hardware traffic engines: nothing here is a program, and what
a run does depends only on the configuration and the control registers
(row counts, concurrent, barrier), never on the data.
"""

import numpy as np

from ...hw.inc_endpoint import MODES, agrs_memory_map
from ...hw.inc_engine import DTYPES, check_dtype
from ...hw.isa import block_bits
from ...hw.validate import UserError, check_bool, check_int
from ..config import AgrsConfig
from ..lane_sums import compare, ordered_sum, to_bits
from ..presets import get_preset
from ..param import Param
from . import Kernel, register

__all__ = ["make_case", "check_counts", "reference", "bound_gbps", "max_tmax", "max_bytes",
           "check_fits", "check_tmax", "Agrs", "KERNEL"]

#: DataBlocks the host can address in one rank's buffers (``AgrsConfig.rank_bits``).
RANK_BLOCKS = 1 << block_bits(AgrsConfig.rank_bits)


def max_tmax(ranks):
    """Largest ``tmax`` (rows per rank) whose padded layout fits a rank's :data:`RANK_BLOCKS`.

    The layout (:func:`~epfabric.hw.inc_endpoint.agrs_memory_map`) is the
    same for ``mode="inc"`` and ``"ring"``: a gather buffer of ``ranks * tmax``
    blocks, a reduced shard of ``tmax`` and RS partials of ``ranks * tmax``,
    so ``(2 * ranks + 1) * tmax`` blocks in all. 0 if not even one row fits.
    """
    check_int("ranks", ranks, 2)
    t = RANK_BLOCKS // agrs_memory_map(ranks, 1)["end"]
    while t > 0 and agrs_memory_map(ranks, t)["end"] > RANK_BLOCKS:
        t -= 1
    while agrs_memory_map(ranks, t + 1)["end"] <= RANK_BLOCKS:
        t += 1
    return t


def max_bytes(preset, ranks):
    """Largest ``S`` (bytes per collective, ``ranks * tmax`` blocks) that fits: :func:`max_tmax` rows."""
    return max_tmax(ranks) * ranks * get_preset(preset).block_bytes


def _layout_note(ranks, tmax_limit=None):
    return (f"a rank addresses 2**{block_bits(AgrsConfig.rank_bits)} blocks and the gather, reduced and RS buffers "
            f"take (2*{ranks}+1)*tmax of them"
            + ("" if tmax_limit is None else f", so tmax <= {tmax_limit}"))


def check_fits(name, nbytes, *, preset, ranks, ranks_name="ranks"):
    """``nbytes`` if ``S = nbytes`` fits a rank's memory at ``ranks``; else one-line ``UserError``.

    ``name`` and ``ranks_name`` are how the caller calls the size and the rank
    count (``--bytes``/``--ranks`` on the command line). Checked before anything
    is built: past the limit the host's block addresses overflow.
    """
    limit = max_bytes(preset, ranks)
    if nbytes > limit:
        raise UserError(f"{name} must be at most {limit} at {ranks_name} {ranks} ("
                        f"{_layout_note(ranks, max_tmax(ranks))}), not {nbytes}")
    return nbytes


def check_tmax(tmax, ranks):
    """``tmax`` if its padded layout fits a rank's memory at ``ranks``; else one-line ``UserError``."""
    limit = max_tmax(ranks)
    if tmax > limit:
        raise UserError(f"tmax must be at most {limit} at ranks {ranks} "
                        f"({_layout_note(ranks)}), not {tmax}")
    return tmax


def make_case(*, ranks, tmax, lanes, counts=None, seed=0, dtype="int32"):
    """Random inputs for one AG + RS: ``{"counts", "ag_in", "rs_in"}`` (lists).

    ``ag_in[r]`` are rank r's own ``counts[r]`` rows (int32); ``rs_in[r]`` its partials
    of the whole padded buffer (``ranks * tmax`` rows of ``lanes`` words): int32, or
    for ``fp32``/``bf16`` the words' bits (uint32; bf16 two lanes a word, low half first)
    of finite values of both signs over ``2**-20 .. 2**20``.
    """
    rng = np.random.default_rng(seed)
    if counts is None:
        counts = [tmax] * ranks
    counts = check_counts(counts, ranks, tmax)
    check_dtype(dtype)
    ag_in = [rng.integers(-2**31, 2**31, size=(c, lanes), dtype=np.int64).tolist() for c in counts]
    if dtype == "int32":
        rs_in = rng.integers(-2**31, 2**31, size=(ranks, ranks * tmax, lanes), dtype=np.int64)
    else:
        per_word = 2 if dtype == "bf16" else 1
        shape = (ranks, ranks * tmax, lanes * per_word)
        x = (rng.choice([-1.0, 1.0], shape) * rng.uniform(1, 2, shape)
             * 2.0 ** rng.integers(-20, 21, shape)).astype(np.float32)
        rs_in = _pack(to_bits(x, dtype), dtype)
    return {"counts": counts, "ag_in": ag_in, "rs_in": rs_in.tolist()}


def _pack(lanes, dtype):
    """32-bit words of lane bits (last axis; bf16: two lanes a word, low half first)."""
    lanes = np.asarray(lanes, dtype=np.uint32)
    return lanes[..., ::2] | lanes[..., 1::2] << 16 if dtype == "bf16" else lanes


def _unpack(words, dtype):
    """Lane bits of 32-bit ``words`` (last axis), the inverse of :func:`_pack`."""
    words = np.asarray(words, dtype=np.uint32)
    if dtype != "bf16":
        return words
    return np.stack([words & 0xFFFF, words >> 16], axis=-1).reshape(*words.shape[:-1], -1)


def float_reference(case, *, ranks, tmax, dtype, mode):
    """The floating-point shards: ``(out, terms)``. ``out[r]`` are rank r's rows (words) for
    the ring (its fixed order, bit-exact) and ``None`` for INC (arrival order: checked with
    the bound); ``terms[r]`` are the ``ranks`` partials (lane bits) of each of its rows."""
    lanes = _unpack(case["rs_in"], dtype)               # (ranks, rows, lanes)
    out, terms = [], []
    for r in range(ranks):
        rows = slice(r * tmax, r * tmax + case["counts"][r])
        terms.append(lanes[:, rows])
        if mode == "ring":                              # chain r+1, r+2, ..., r, each hop rounded
            chain = [(r + 1 + k) % ranks for k in range(ranks)]
            acc = lanes[chain[0], rows]
            for q in chain[1:]:
                acc = ordered_sum(np.stack([acc, lanes[q, rows]]), dtype)
            out.append(_pack(acc, dtype).tolist())
        else:
            out.append(None)
    return out, terms


def check_counts(counts, ranks, tmax):
    """``counts`` as a list of ``ranks`` row counts, each an integer in ``[0, tmax]``."""
    if isinstance(counts, (str, bytes)) or not hasattr(counts, "__len__") or len(counts) != ranks:
        raise UserError(f"counts must be {ranks} row counts in [0, {tmax}], not {counts!r}")
    return [check_int(f"counts[{i}]", c, 0, tmax) for i, c in enumerate(counts)]


def reference(case, *, ranks, tmax):
    """numpy results: ``(gathered, out)`` — ``{row: values}`` every rank must hold, ``out[r]`` rows."""
    counts = case["counts"]
    gathered = {}
    for q in range(ranks):
        for i in range(counts[q]):
            gathered[q * tmax + i] = list(case["ag_in"][q][i])
    rs = np.array(case["rs_in"], dtype=np.int64).astype(np.int32)
    total = rs.sum(axis=0, dtype=np.int32)  # wrapping int32 sum
    out = [total[r * tmax: r * tmax + counts[r]].astype(np.int64).tolist() for r in range(ranks)]
    return gathered, out


def bound_gbps(preset, mode, ranks):
    """Equivalent-bandwidth bound in Gb/s: ring ``N/(N-1)*BW``, INC ``2*BW`` (INC-MoE Eq. 4–5)."""
    bw = get_preset(preset).bandwidth_gbits_s
    return 2 * bw if mode == "inc" else ranks / (ranks - 1) * bw


def _u32(v):
    return int(v) & 0xFFFFFFFF


def _s32(v):
    return v - (1 << 32) if v >= 1 << 31 else v


class Agrs(Kernel):
    """One AG + one RS on an :class:`AgrsConfig` machine (module docstring).

    Parameters (``params``): ``mode``, ``tmax``, ``lanes``, ``slots`` and
    ``dtype`` (the RS lane type) shape the machine; ``counts`` (rows per rank,
    default ``tmax`` each),
    ``seed``, ``concurrent`` (AG and RS at once) and ``barrier`` (a
    cross-rank barrier first, INC only) shape the operation.
    """

    name = "agrs"
    description = "one AllGather + one ReduceScatter, in-network (INC) or ring, checked against numpy"
    params = (Param("mode", "inc", "in-network (the switch's INC engine) or the ring baseline",
                    str, MODES),
              Param("tmax", 4, "rows of a rank's block of the padded buffers", int),
              Param("lanes", 2, "int32 words modelled of a row's 512 B block", int),
              Param("slots", 16, "aggregator slots of the INC engine", int),
              Param("counts", None, "rows of each rank (unset: tmax each)"),
              Param("seed", 0, "row data seed", int, minimum=0),
              Param("concurrent", True, "AllGather and ReduceScatter at once", bool),
              Param("barrier", False, "a cross-rank barrier first (INC only)", bool),
              Param("dtype", "int32", "lane type of the ReduceScatter's sums (bf16: two lanes "
                    "a word)", str, DTYPES))
    default_preset = "incmoe-testbed"
    default_max_cycles = 10_000_000

    def default_topology(self, preset):
        return ("star", preset.ranks)

    def configs(self, preset, topology=None, aivs=None, params=None):
        params = self.resolve_params(params)
        p = get_preset(preset)
        topology = tuple(topology) if topology is not None else self.default_topology(p)
        if topology[0] != "star" or len(topology) != 2:
            raise UserError(f"agrs runs on a star topology (star:N), not {topology!r}")
        if aivs is not None:
            raise UserError("agrs has no AIV cores: its endpoints are hardware traffic engines "
                            "(do not give --aivs)")
        config = AgrsConfig(p.name, ranks=topology[1], mode=params["mode"], tmax=params["tmax"],
                            lanes=params["lanes"], slots=params["slots"], dtype=params["dtype"])
        check_tmax(config.tmax, config.ranks)
        check_bool("concurrent", params["concurrent"])
        check_bool("barrier", params["barrier"])
        if params["counts"] is not None:
            check_counts(params["counts"], config.ranks, config.tmax)
        return [config]

    def load(self, machine, params):
        """AG rows, RS partials and the control registers; returns the case (inputs)."""
        cfg = machine.config
        case = make_case(ranks=cfg.ranks, tmax=cfg.tmax, lanes=cfg.lanes, counts=params["counts"],
                         seed=params["seed"], dtype=cfg.dtype)
        mm = cfg.memory_map
        for r in range(cfg.ranks):
            for i, row in enumerate(case["ag_in"][r]):
                machine.write_mem(r, machine.address(0, mm["ag"] + r * cfg.tmax + i), [_u32(v) for v in row])
            for a, row in enumerate(case["rs_in"][r]):
                machine.write_mem(r, machine.address(0, mm["rs"] + a), [_u32(v) for v in row])
        ctrl = cfg.control_map
        for q, c in enumerate(case["counts"]):
            machine.write_control(ctrl["counts"] + q, c)
        machine.write_control(ctrl["concurrent"], int(bool(params["concurrent"])))
        machine.write_control(ctrl["barrier"], int(bool(params["barrier"])))
        return case

    def check(self, machine, report, inputs):
        """Every rank's gather buffer against :func:`reference`, bit for bit; its reduced
        shard bit for bit (int32, and the ring's fixed order) or within the bound (INC
        floating point; the module docstring)."""
        cfg = machine.config
        gathered, out = reference(inputs, ranks=cfg.ranks, tmax=cfg.tmax)
        mm = cfg.memory_map
        problems = []
        for r in range(cfg.ranks):
            for row, want in gathered.items():
                got = [_s32(v) for v in machine.read_mem(r, machine.address(0, mm["ag"] + row), cfg.lanes)]
                if got != want:
                    problems.append(f"rank {r}: gathered row {row} differs")
        shards = [[machine.read_mem(r, machine.address(0, mm["out"] + i), cfg.lanes)
                   for i in range(inputs["counts"][r])] for r in range(cfg.ranks)]
        extra = {}
        if cfg.dtype == "int32":
            for r in range(cfg.ranks):
                for i, want in enumerate(out[r]):
                    if [_s32(v) for v in shards[r][i]] != want:
                        problems.append(f"rank {r}: reduced row {i} differs")
        else:
            extra = self._check_float(cfg, inputs, shards, problems)
        nbytes = cfg.ranks * max(inputs["counts"]) * machine.preset.block_bytes
        return {"correct": not problems, "problems": problems[:20] + (
                    [f"... {len(problems) - 20} more"] if len(problems) > 20 else []),
                "errors": len(problems), "bytes": nbytes, "mode": cfg.mode,
                "slot_stalls": report.counters["slot_stalls"][0], **extra}

    @staticmethod
    def _check_float(cfg, inputs, shards, problems):
        """Floating-point shards: exact (ring) or within the bound (INC); the verdict's
        ``rule``, the largest error in ulps of the exact sum and its ratio to the bound."""
        out, terms = float_reference(inputs, ranks=cfg.ranks, tmax=cfg.tmax, dtype=cfg.dtype,
                                     mode=cfg.mode)
        worst_ulps, worst_ratio = 0.0, 0.0
        for r in range(cfg.ranks):
            if not shards[r]:
                continue
            got = _unpack(shards[r], cfg.dtype)
            if cfg.mode == "ring":
                bad = [i for i, (g, w) in enumerate(zip(shards[r], out[r])) if list(g) != w]
                problems += [f"rank {r}: reduced row {i} differs" for i in bad]
            verdict = compare(got, terms[r], cfg.dtype,
                              roundings=2 if cfg.dtype == "bf16" else 0)
            if not verdict["ok"]:
                problems.append(f"rank {r}: reduced rows beyond the error bound ({verdict})")
            worst_ulps = max(worst_ulps, verdict["max_error_ulps"])
            worst_ratio = max(worst_ratio, verdict["max_error_over_bound"])
        return {"rule": "exact" if cfg.mode == "ring" else "bound",
                "max_error_ulps": worst_ulps, "max_error_over_bound": worst_ratio}

    def summary(self, result):
        return [f"agrs {run.check['mode']} on {result.preset} [{result.backend}]: "
                f"S={run.check['bytes']} B, {run.cycles} cycles ({run.ns:.0f} ns)"
                for run in result.runs]


KERNEL = register(Agrs())
