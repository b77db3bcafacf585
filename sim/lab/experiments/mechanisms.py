"""Micro-benchmarks that pin one timing mechanism each, alone (``epfabric reproduce mechanisms``).

The calibration adds mechanisms the paper's numbers imply and the model
lacked; each gets a micro-benchmark here that measures it without the kernels
around it, next to its closed form, so a mechanism that is removed or broken
shows as a wrong row (tests/sim/test_mechanisms.py, and mutations).

**Store window** (knob ``store_window``, :data:`epfabric.hw.die.KNOBS`): one AIV
on rank 0 streams ``blocks`` DataBlock stores (``stb``), or word stores (``sw``),
to one destination of each distance class, then fences. A block store may issue
only while fewer than ``W`` stores await their ack; the ack of a store comes back
``2 L + 3`` cycles after its issue (``L`` the class latency: the store's way out,
2 cycles to leave the destination (UB answer register, RSP queue), the ack's way
back, and the cycle the core counts it; hw/die.py, hw/router.py). So a stream of
``n`` blocks costs ``ceil(n / W) (2 L + 3)`` cycles plus its issue
(:func:`window_expected`, exact), and word stores do not see the knob at all. Each
row carries that closed form and the model's cycles.

**SyncAll** (knob ``syncall_cycles``; the preset's ``syncall``/``syncall_ns``): on one die
of ``aivs`` AIVs, AIV ``a`` spins about ``a * spread`` cycles, MARKs its arrival and
enters the barrier; the row's ``release`` is the cycles from the last arrival MARK to the
first MARK after the barrier, less the one cycle of that arrival MARK. The hardware
barrier (``bar``) releases ``syncall_cycles + 1`` cycles after the last core reached it;
the soft one (a fetch-add of a die-local counter, then a poll until every AIV arrived,
as CANN's kernels ran in the model before) costs what its fetch-adds and polls cost:
its row shows the model's intrinsic SyncAll before calibration.

**Injection limit** (knob ``inject_rate``; the preset's ``die_injection_gbytes_s``): rank
0's ``aivs`` AIVs each stream block stores to a destination of its own (no link or switch
output shared past the die), with ``blocks`` and ``2 * blocks`` blocks; the difference is
the cost of ``aivs * blocks`` more blocks, ``aivs * blocks * 512 / r`` cycles at an
injection limit of ``r`` bytes per cycle below what the links and the AIVs' issue give.

**Vector instruction cost** (knob ``vector_extra``; the preset's ``vector_op_ns``): one AIV
runs :data:`VECTOR_REPEAT` ``vsum`` of each length ``L`` back to back between two MARKs; each
costs ``max(1, ceil(L / lanes)) + 3 + X`` cycles at ``vector_extra = X``
(:meth:`~epfabric.hw.aiv_core.AIVCore.vector_cycles`), so a row's cycles are ``1 +``
:data:`VECTOR_REPEAT` ``x`` that (the ``1``: the first MARK), exact.

**Scalar read and copy start** (knobs ``poll_extra`` and ``read_extra``; the preset's
``poll_ns`` and ``read_start_ns``): one AIV runs :data:`READ_REPEAT` loads (``lw``) of a word
of its own die's memory, then as many polls of it whose condition already holds (one read
each), then one copy of :data:`READ_REPEAT` blocks (an ``ldb``, then ``ldbc`` for the rest),
each group between two MARKs. A scalar read of global memory (a load, a poll's read) costs
``1 + P + L`` cycles at ``poll_extra = P`` (``L`` the die's local access time, the system's
``hbm_latency``, :func:`local_latency`), so a ``poll`` row's ``N`` polls cost
``N (1 + P + L)``, exactly (:func:`poll_expected`), its loads as much, and its copy what the
copy costs at ``P = 0``. A copy pays its start once (the copy engine), so a ``read`` row at
``read_extra = R`` takes exactly ``R`` cycles more for its copy than the row at 0, and its
loads and polls do not change. The rows' ``read_ns`` is what one local scalar read (a poll)
costs.

**CANN's UpdateTokenNumsOut** (knob ``poll_extra``; docs/fidelity/preregistration.md M4):
CANN's dispatch of :data:`UPDATE_CASE` (two experts a die) ends with SyncAll #3, then the
last AIV reads ``2·epr − 1 = 3`` running totals by scalar and writes the experts' totals;
each row is die 0's AIVs' cycles from the barrier's exit to the end of the update
(:func:`update_runs`). At ``poll_extra = P`` the last AIV's take exactly ``3 P`` more than at
0 and the other AIV's the same (:func:`update_expected`): the update's reads are scalar reads
of global memory, and only the last AIV makes them.

**A token's blocks** (the kernels' ``hidden_bytes``; preregistration M8): CANN's and UBEP's
dispatch of :data:`UPDATE_CASE` with ``H``-byte tokens, the same routing; each row is the
data blocks the links counted for each system (:func:`token_link_blocks`). UBEP's blocks
carry 480 B after their 32 B Token-Flag-Fusion header, CANN's 512, so UBEP's count over
CANN's is ``⌈H/480⌉ / ⌈H/512⌉`` exactly (15/14 at Table 4's 7,168 B).

**A sender's token buffers** (the preset's ``send_buffers``; preregistration M6): one AIV
streams :data:`BUFFER_CASE`'s tokens of ``b`` blocks to one destination on a machine whose
preset holds ``S`` token buffers a sender and whose kernel declared ``b``-block tokens
(:meth:`~epfabric.sw.machine.Machine.set_token_blocks`), no knob set: the dies' store window
is then ``S·b`` blocks, so the stream costs the window's closed form at ``W = S·b``
(:func:`window_expected`), exactly (:func:`buffer_stream`).

**Eq. 8's CalCumSum group size** (the preset's ``cumsum_ratio``; preregistration M9): UBEP's
dispatch of :data:`EQ8_CASE` on 2 dies of 4 AIVs with one CalCumSum AIV gives App. A's slopes
α (cycles a slot of the slowest T-AIV's Token-Sending) and β (cycles an expert of its C-AIV's
TokenCnt + CalCumSum) and ``β/α``, the value a preset's ``cumsum_ratio`` is measured from;
Eq. 8 (:func:`~epfabric.sw.ubep.ubep.cumsum_rule`) turns it into ``C``, and a second run with
the preset's ``cumsum_ratio`` at ``β/α`` and no ``cumsum_aivs`` must run that many CalCumSum
AIVs a die (:func:`eq8_runs`).

**CANN's five-instruction count** (the preset's ``cann_count``; preregistration M3): CANN's
dispatch of :data:`UPDATE_CASE` on 2 dies of 2 AIVs with ``cann_count`` ``"vcount"`` and
``"ascend"``: each AIV's Token-Sending grows by 2 cycles of set-up and 4 vector instructions
a sent slot ``n`` (``Duplicate, Sub, Abs, Mins, ReduceSum`` against one ``vcount``, each
``v(L) = max(1, ⌈L/lanes⌉) + 3 + X`` at its prefix length ``L = n``), exactly
(:func:`count_runs`, :func:`count_expected`). SendFlag & Count ends in the fence that waits
for the last token's ack, which hides its count at cm384's latencies, so the experts' counts
are measured alone: one AIV counts :data:`COUNT_EXPERTS` experts over :data:`COUNT_SLOTS`
ids both ways, each at its closed form (:func:`expert_counts`,
:func:`expert_counts_expected`).
"""

import inspect
import math

from tabulate import tabulate

from ....hw.aiv_core import POLL_EXTRA_BITS, READ_EXTRA_BITS, VECTOR_EXTRA_BITS
from ....hw.die import INJECT_DEN
from ....hw.validate import UserError
from ...backends import SIMULATORS
from . import Experiment, Param, int_list, register

__all__ = ["store_streams", "barrier_release", "inject_streams", "vector_runs", "read_runs",
           "update_runs", "update_expected", "token_link_blocks", "buffer_stream", "eq8_runs",
           "count_runs", "count_expected", "expert_counts", "expert_counts_expected",
           "window_expected",
           "local_latency", "poll_expected",
           "Mechanisms", "EXPERIMENT"]

#: MARK event before the first stream (stream ``k`` ends with ``MARK0 + 1 + k``)
MARK0 = 1
#: the superpod with every distance class: 2 dies an NPU, 2 NPUs a board, 2 boards
TOPOLOGY = ("superpod", 2, 2, 2)
#: destination rank of each class from rank 0 on TOPOLOGY
DESTINATIONS = {"intra": 1, "one_hop": 2, "two_hop": 4}


def store_streams(*, preset, backend, segments, window=None, max_outstanding=64,
                  token_blocks=None):
    """Cycles of each of one AIV's store streams, from its first store's issue to the end
    of its fence, in one run.

    Rank 0's core 0 runs the ``segments`` one after the other, each ``(dst, n, op)``:
    ``n`` stores (``op`` ``"stb"`` or ``"sw"``) to consecutive blocks of rank ``dst``, then
    a fence; ``window`` sets the dies' ``store_window`` knob (``None``: its reset value,
    ``max_outstanding``); ``token_blocks`` declares the blocks of a kernel's token
    (:meth:`~epfabric.sw.machine.Machine.set_token_blocks`: with a preset's ``send_buffers``,
    the window is that many tokens).
    """
    from ....sw.assembler import Program
    from ....sw.isa import address
    from ....sw.kernels import pow2_at_least
    from ....sw.machine import Machine
    from ...backends.machine import backend as make_backend
    for dst, n, op in segments:
        if op not in ("stb", "sw"):
            raise UserError(f"op must be 'stb' or 'sw', not {op!r}")
    longest = max(n for _, n, _ in segments)
    total = sum(n for _, n, _ in segments)
    m = Machine(preset, backend=make_backend(backend), topology=TOPOLOGY, aivs_per_die=1,
                hbm_blocks=pow2_at_least(longest + 1),
                imem_depth=pow2_at_least(3 * total + 4 * len(segments) + 8),
                max_outstanding=max_outstanding, trace_depth=pow2_at_least(len(segments) + 1))
    p = Program()
    p.li(10, 0)                                     # UBuf row 0 (its bytes do not matter)
    p.mark(MARK0)
    for k, (dst, n, op) in enumerate(segments):
        for i in range(n):
            p.li(2, address(dst, 1 + i))
            if op == "stb":
                p.stb(10, 2, 0)
            else:
                p.sw(10, 2, 0)
        p.fence()
        p.mark(MARK0 + 1 + k)
    p.halt()
    m.load_program(0, 0, p)
    m.read_back([(0, 1)])
    if token_blocks is not None:
        m.set_token_blocks(token_blocks)
    if window is not None:
        m.set_knob("store_window", window)
    rtt = 2 * max(m.preset.latency_cycles().values()) + 8
    report = m.run(max_cycles=2 * total * rtt + 10_000)
    marks = {e["event"]: e["cycle"] for e in report.marks()}
    return [marks[MARK0 + 1 + k] - marks[MARK0 + k] for k in range(len(segments))]


#: vector instructions of each length in :func:`vector_runs`
VECTOR_REPEAT = 4
#: lanes of the vector benchmark's cores (cm384's 16 lanes of 16-bit elements; cm384-ascend and
#: cm384-fit take 128: the closed form holds at any width)
VECTOR_LANES = 16


def vector_runs(*, preset, backend, lengths, extra=None):
    """Cycles from a MARK to the next of one AIV that runs :data:`VECTOR_REPEAT` ``vsum`` of
    each of ``lengths`` in turn, with the dies' ``vector_extra`` knob at ``extra`` (``None``:
    its reset value, 0)."""
    from ....sw.assembler import Program
    from ....sw.kernels import pow2_at_least
    from ....sw.machine import Machine
    from ...backends.machine import backend as make_backend
    rows = max(1, math.ceil(max(lengths) * 16 / 4096))
    m = Machine(preset, backend=make_backend(backend), topology=("superpod", 2, 1, 1),
                aivs_per_die=1, hbm_blocks=4, ubuf_rows=pow2_at_least(rows), data_bytes=512,
                lanes=VECTOR_LANES, width=16,
                imem_depth=pow2_at_least((VECTOR_REPEAT + 2) * len(lengths) + 4),
                trace_depth=pow2_at_least(2 * len(lengths) + 2))
    p = Program()
    p.mark(MARK0)
    for k, length in enumerate(lengths):
        p.li(2, length)
        p.mark(MARK0 + 1 + 2 * k)
        for _ in range(VECTOR_REPEAT):
            p.vsum(1, 0, 2)
        p.mark(MARK0 + 2 + 2 * k)
    p.halt()
    m.load_program(0, 0, p)
    m.read_back([(0, 1)])
    if extra is not None:
        m.set_knob("vector_extra", extra)
    report = m.run(max_cycles=10_000 + VECTOR_REPEAT * sum(length // VECTOR_LANES + 10
                                                           + (extra or 0) for length in lengths))
    marks = {e["event"]: e["cycle"] for e in report.marks()}
    return [marks[MARK0 + 2 + 2 * k] - marks[MARK0 + 1 + 2 * k] for k in range(len(lengths))]


#: loads, then polls, in :func:`read_runs`
READ_REPEAT = 8


def read_runs(*, preset, backend, extra=None, poll_extra=None):
    """``[cycles of the loads, cycles of the polls, cycles of the copy]`` of one AIV's
    :data:`READ_REPEAT` local loads, :data:`READ_REPEAT` satisfied polls and one copy of
    :data:`READ_REPEAT` blocks (an ``ldb``, then ``ldbc``: the copy's start is paid once;
    module docstring), with the dies' ``read_extra`` knob at ``extra`` and ``poll_extra`` at
    ``poll_extra`` (``None``: the preset's value, or the knob's reset, 0)."""
    from ....sw.assembler import Program
    from ....sw.isa import address
    from ....sw.machine import Machine
    from ...backends.machine import backend as make_backend
    m = Machine(preset, backend=make_backend(backend), topology=("superpod", 2, 1, 1),
                aivs_per_die=1, hbm_blocks=4, imem_depth=64, trace_depth=4)
    p = Program()
    p.li(2, address(0, 1, 0))                   # a word of the die's own memory (0 there)
    p.mark(MARK0)
    for _ in range(READ_REPEAT):
        p.lw(1, 2, 0)
    p.mark(MARK0 + 1)
    for _ in range(READ_REPEAT):
        p.poll(1, 2, 0, "ge")                   # holds at the first read
    p.mark(MARK0 + 2)
    p.li(3, address(0, 0, 0))                   # blocks 0.. of the die's own memory
    p.ldb(0, 3, 0)                              # one copy: its start ...
    for b in range(1, READ_REPEAT):
        p.ldbc(0, 3, (b % 4) * 512)             # ... then its next blocks
    p.mark(MARK0 + 3)
    p.halt()
    m.load_program(0, 0, p)
    m.read_back([(0, 1)])
    if extra is not None:
        m.set_knob("read_extra", extra)
    if poll_extra is not None:
        m.set_knob("poll_extra", poll_extra)
    report = m.run(max_cycles=10_000 + 3 * READ_REPEAT * (m.knobs.get("read_extra", 0)
                                                         + m.knobs.get("poll_extra", 0)))
    marks = {e["event"]: e["cycle"] for e in report.marks()}
    # each group less its closing MARK's cycle
    return [marks[MARK0 + 1 + g] - marks[MARK0 + g] - 1 for g in range(3)]


#: the CANN dispatch of :func:`update_runs`: 2 dies of 2 AIVs, 2 experts a die
UPDATE_CASE = {"batch": 4, "topk": 2, "experts": 4}
#: experts and routing elements of :func:`expert_counts` (two groups of a ``vcount``: 3 and 2)
COUNT_EXPERTS, COUNT_SLOTS = 5, 1024


def _cann_phases(preset, backend, what, knobs=()):
    """``{"rank.core": {phase: cycle}}`` of CANN's dispatch of :data:`UPDATE_CASE` on 2 dies of
    2 AIVs on ``preset``, with the dies' ``knobs`` (``(name, value)`` pairs) set; raises
    ``RuntimeError`` naming ``what`` when the run is not bit-exact."""
    from ....sw.kernels import KERNELS
    from ....sw.machine import Machine
    from ...backends.machine import backend as make_backend
    kernel = KERNELS["dispatch"]
    params = kernel.resolve_params({**UPDATE_CASE, "system": "cann"})
    config = kernel.configs(preset, ("superpod", 2, 1, 1), 2, params)[0]
    m = Machine(backend=make_backend(backend), config=config)
    for name, value in knobs:
        m.set_knob(name, value)
    inputs = kernel.load(m, params)
    verdict = kernel.check(m, m.run(kernel.default_max_cycles), inputs)
    if not verdict["correct"]:
        raise RuntimeError(f"the {what}'s dispatch is wrong: {verdict['problems'][0]}")
    return verdict["phases"]


def update_runs(*, preset, backend, poll_extra):
    """``[cycles of each AIV's UpdateTokenNumsOut on die 0]``: CANN's dispatch of
    :data:`UPDATE_CASE` with the dies' ``poll_extra`` knob at ``poll_extra``; an AIV's cycles
    are its ``update`` MARK less its ``sync3_out`` MARK (after SyncAll #3, module
    docstring). Raises ``RuntimeError`` when the run is not bit-exact."""
    phases = _cann_phases(preset, backend, "update benchmark", [("poll_extra", poll_extra)])
    return [phases[f"0.{c}"]["update"] - phases[f"0.{c}"]["sync3_out"] for c in range(2)]


def update_expected(base, poll_extra, epr=UPDATE_CASE["experts"] // 2):
    """The update cycles of :func:`update_runs` at ``poll_extra = P`` from those at 0
    (``base``): the last AIV's grow by ``(2·epr − 1)·P`` (its scalar reads), the other's
    not at all."""
    return [base[0], base[1] + (2 * epr - 1) * poll_extra]


def update_check(rows):
    """``(holds, words)`` of the update rows: each at :func:`update_expected` from the first
    row's (at ``poll_extra`` 0), exactly."""
    if not rows:
        return True, ""
    base = rows[0]["update_cycles"]
    ok = [r["update_cycles"] == update_expected(base, r["poll_extra"] - rows[0]["poll_extra"])
          for r in rows]
    per = ", ".join(f"{r['update_cycles'][1]} at poll_extra {r['poll_extra']}" for r in rows)
    return all(ok), (f"{sum(ok)}/{len(rows)} UpdateTokenNumsOut runs: the last AIV's 3 scalar "
                     f"reads pay poll_extra each, the other AIV nothing (tolerance: none; {per})")


def token_link_blocks(*, preset, backend, hidden_bytes):
    """``{system: data blocks on the links}`` of CANN's and UBEP's dispatch of
    :data:`UPDATE_CASE` with ``hidden_bytes``-byte tokens (the same routing for both: every
    remote slot crosses the same links). Raises ``RuntimeError`` when a run is not bit-exact."""
    from ....sw.kernels import KERNELS, run_kernel
    from ...backends.machine import backend as make_backend
    out = {}
    for system in ("cann", "ubep"):
        result = run_kernel(KERNELS["dispatch"], make_backend(backend), preset=preset,
                            topology=("superpod", 2, 1, 1), aivs=2,
                            params={**UPDATE_CASE, "system": system, "hidden_bytes": hidden_bytes})
        run = result.runs[0]
        if not run.correct:
            raise RuntimeError(f"the token-block benchmark's {system} dispatch is wrong: "
                               f"{run.problems[0]}")
        out[system] = sum(m["blocks"] for m in run.check["links"]["measured"].values())
    return out


def token_blocks_check(rows):
    """``(holds, words)`` of the token-block rows: UBEP's link data blocks over CANN's are
    ``⌈H/480⌉ / ⌈H/512⌉`` exactly at each ``H``."""
    from ....sw.kernels.dispatch import token_blocks
    if not rows:
        return True, ""
    ok = [r["link_blocks"]["ubep"] * token_blocks(r["hidden_bytes"], "cann")
          == r["link_blocks"]["cann"] * token_blocks(r["hidden_bytes"], "ubep") for r in rows]
    per = ", ".join(f"{r['link_blocks']['ubep']}/{r['link_blocks']['cann']} at "
                    f"{r['hidden_bytes']} B" for r in rows)
    return all(ok), (f"{sum(ok)}/{len(rows)} token sizes: UBEP's link data blocks over CANN's "
                     f"at ceil(H/480)/ceil(H/512) (tolerance: none; {per})")


def variant(preset, **fields):
    """The reference of a machine file holding ``preset`` with ``fields`` changed (in the build
    folder, :func:`~epfabric.sw.preset_file.saved_preset`): machine configurations, and the
    simulator processes they cross into, take only named presets."""
    from ....sw.preset_file import saved_preset
    from ....sw.presets import get_preset
    from ...output import build_cache_dir
    return saved_preset(get_preset(preset).replace(**fields), build_cache_dir() / "presets").name


#: the stream of :func:`buffer_stream` rows: 4 tokens of UBEP's 15 blocks (7,168 B) to the
#: other die of the NPU
BUFFER_CASE = {"tokens": 4, "token_blocks": 15, "class": "intra"}


def buffer_stream(*, preset, backend, send_buffers, tokens, token_blocks, dst):
    """Cycles of one AIV's stream of ``tokens`` tokens of ``token_blocks`` block stores to rank
    ``dst`` and its fence, on ``preset`` with ``send_buffers`` token buffers a sender and the
    machine told its tokens' blocks (no knob set: the window comes from the preset)."""
    n = tokens * token_blocks
    return store_streams(preset=variant(preset, send_buffers=send_buffers),
                         backend=backend, segments=[(dst, n, "stb")],
                         max_outstanding=max(64, send_buffers * token_blocks),
                         token_blocks=token_blocks)[0]


def buffer_check(rows):
    """``(holds, words)`` of the send_buffers rows: each stream at the window's closed form
    with ``W = send_buffers × token_blocks`` (:func:`window_expected`), exactly."""
    if not rows:
        return True, ""
    ok = [r["expected_cycles"] is not None and r["stb_cycles"] == r["expected_cycles"]
          for r in rows]
    per = ", ".join(f"{r['stb_cycles']} at {r['send_buffers']} x {r['token_blocks']} blocks"
                    for r in rows)
    return all(ok), (f"{sum(ok)}/{len(rows)} token streams at a window of send_buffers x "
                     f"token_blocks blocks (tolerance: none; {per})")


#: the UBEP dispatch of :func:`eq8_runs` (2 dies of 4 AIVs): 32 experts, 4 tokens of top-2
EQ8_CASE = {"batch": 4, "topk": 2, "experts": 32}
#: AIVs a die of :func:`eq8_runs`
EQ8_AIVS = 4


def eq8_runs(*, preset, backend):
    """``{alpha, beta, ratio, rule_c, run_c}`` of UBEP's dispatch of :data:`EQ8_CASE`: Eq. 8's
    slopes from a run with one CalCumSum AIV a die (``eq8_slopes``), the ``C`` Eq. 8 gives
    with ``β/α`` (:func:`~epfabric.sw.ubep.ubep.cumsum_rule`), and the CalCumSum AIVs of die
    0 (those that MARK ``cumsum``) in a second run whose preset's ``cumsum_ratio`` is ``β/α``
    and whose ``cumsum_aivs`` is unset. Raises ``RuntimeError`` when a run is not bit-exact."""
    from ....sw.kernels import KERNELS, run_kernel
    from ....sw.presets import get_preset
    from ....sw.ubep.ubep import cumsum_rule
    from ...backends.machine import backend as make_backend

    def run(p, params):
        result = run_kernel(KERNELS["dispatch"], make_backend(backend), preset=p,
                            topology=("superpod", 2, 1, 1), aivs=EQ8_AIVS,
                            params={**EQ8_CASE, "system": "ubep", **params})
        r = result.runs[0]
        if not r.correct:
            raise RuntimeError(f"the Eq. 8 benchmark's dispatch is wrong: {r.problems[0]}")
        return r.check

    base = get_preset(preset)
    slopes = run(base, {"cumsum_aivs": 1})["eq8_slopes"]
    rule = cumsum_rule(EQ8_AIVS, EQ8_CASE["experts"], EQ8_CASE["topk"], EQ8_CASE["batch"],
                       slopes["ratio"])
    phases = run(variant(base, cumsum_ratio=slopes["ratio"]), {})["phases"]
    used = sum("cumsum" in v for k, v in phases.items() if k.startswith("0."))
    return {**slopes, "rule_c": rule, "run_c": used}


def eq8_check(rows):
    """``(holds, words)`` of the eq8 rows: the run with the preset's ``cumsum_ratio`` ran
    Eq. 8's ``C`` CalCumSum AIVs, and the slopes are positive."""
    if not rows:
        return True, ""
    ok = [r["run_c"] == r["rule_c"] and r["alpha"] > 0 and r["beta"] > 0 for r in rows]
    per = ", ".join(f"alpha {r['alpha']:.1f} cycles a slot, beta {r['beta']:.1f} an expert, "
                    f"beta/alpha {r['ratio']:.3f}: C {r['rule_c']}, run with {r['run_c']}"
                    for r in rows)
    return all(ok), (f"{sum(ok)}/{len(rows)} Eq. 8 runs with the rule's C (tolerance: none; "
                     f"{per})")


def count_runs(*, preset, backend):
    """``{count: {"rank.core": send cycles}}``: CANN's dispatch of :data:`UPDATE_CASE` on 2 dies
    of 2 AIVs with the preset's ``cann_count`` at ``"vcount"`` and ``"ascend"``; an AIV's send
    cycles are its ``send`` MARK less its ``init`` (Token-Sending, a count a slot). Raises
    ``RuntimeError`` when a run is not bit-exact."""
    out = {}
    for count in ("vcount", "ascend"):
        phases = _cann_phases(variant(preset, cann_count=count), backend,
                              f"count benchmark ({count})")
        out[count] = {k: v["send"] - v["init"] for k, v in phases.items()}
    return out


def count_expected(base, *, lanes, extra, aivs=2, case=UPDATE_CASE):
    """The ``"ascend"`` send cycles of :func:`count_runs` from its ``"vcount"`` ones (``base``):
    a sent slot ``n`` 4 vector instructions more (``v(n)`` each, its prefix length), plus 2
    of set-up; ``v(L) = max(1, ⌈L/lanes⌉) + 3 + extra``. Exact while no store of the slots
    waits for the window (the small case's)."""
    from ....hw.aiv_core import AIVCore
    slots = case["batch"] * case["topk"]
    out = {}
    for key, send in base.items():
        core = int(key.split(".")[1])
        n0, n1 = core * slots // aivs, (core + 1) * slots // aivs
        out[key] = send + 2 + sum(4 * AIVCore.vector_cycles(n, lanes, extra)
                                  for n in range(n0, n1))
    return out


def expert_counts(*, preset, backend, experts=COUNT_EXPERTS, slots=COUNT_SLOTS):
    """``{count: cycles}`` of one AIV counting ``experts`` experts over ``slots`` routing
    elements as CANN's SendFlag & Count does (:func:`~epfabric.sw.ubep.cann.count_experts`,
    three a ``vcount``; :func:`~epfabric.sw.ubep.cann.count_experts_ascend`, five vector
    instructions an expert), between two MARKs each, with no store in flight."""
    from ....sw.assembler import Program
    from ....sw.kernels import pow2_at_least
    from ....sw.machine import Machine
    from ....sw.presets import get_preset
    from ....sw.ubep.cann import count_experts, count_experts_ascend
    from ...backends.machine import backend as make_backend
    rows = max(1, math.ceil(slots * 16 / 4096))
    m = Machine(preset, backend=make_backend(backend), topology=("superpod", 2, 1, 1),
                aivs_per_die=1, hbm_blocks=4, ubuf_rows=pow2_at_least(2 * rows + 1),
                data_bytes=512, lanes=get_preset(preset).vector_lanes, width=16,
                imem_depth=pow2_at_least(12 * experts + 16), trace_depth=8)
    p = Program()
    emit = lambda e, reg: p.usw(reg, 0, rows * 512 + 4 * e)        # noqa: E731
    p.mark(MARK0)
    count_experts(p, 0, experts, slots, emit)
    p.mark(MARK0 + 1)
    count_experts_ascend(p, 0, experts, slots, emit, (rows + 1) * 512)
    p.mark(MARK0 + 2)
    p.halt()
    m.load_program(0, 0, p)
    m.read_back([(0, 1)])
    report = m.run(max_cycles=10_000 + 100 * experts * (slots + 100))
    marks = {e["event"]: e["cycle"] for e in report.marks()}
    return {"vcount": marks[MARK0 + 1] - marks[MARK0], "ascend": marks[MARK0 + 2] - marks[MARK0 + 1]}


def expert_counts_expected(*, lanes, extra, experts=COUNT_EXPERTS, slots=COUNT_SLOTS):
    """The closed forms of :func:`expert_counts`: ``vcount``, ``1 + Σ (3 + v(S) + q)`` over
    the groups of ``q ≤ 3`` experts (three ``li`` pivots, the ``vcount``, a ``usw`` each) after
    the length's ``li``; ``ascend``, ``3 + E (1 + 5 v(S) + 2)`` (the length, the 1 and the work
    row; per expert its ``li``, Duplicate, Sub, Abs, Mins, ReduceSum, the ``sub`` and the
    ``usw``); ``v(L) = max(1, ⌈L/lanes⌉) + 3 + extra``; the MARK after, 1 more each."""
    from ....hw.aiv_core import AIVCore
    v = AIVCore.vector_cycles(slots, lanes, extra)
    groups = [min(3, experts - g) for g in range(0, experts, 3)]
    return {"vcount": 1 + sum(3 + v + q for q in groups) + 1,
            "ascend": 3 + experts * (1 + 5 * v + 2) + 1}


def count_check(rows):
    """``(holds, words)`` of the count rows: every AIV's ``"ascend"`` send cycles at
    :func:`count_expected` from its ``"vcount"`` ones, and the expert counts at
    :func:`expert_counts_expected`, exactly."""
    if not rows:
        return True, ""
    ok = [r["cycles"]["ascend"] == r["expected"] and r["experts_cycles"] == r["experts_expected"]
          for r in rows]
    per = ", ".join(f"AIV {k}'s send {v} (one vcount: {r['cycles']['vcount'][k]}); "
                    f"{COUNT_EXPERTS} experts' counts {r['experts_cycles']['ascend']} (one "
                    f"vcount: {r['experts_cycles']['vcount']})"
                    for r in rows for k, v in list(r["cycles"]["ascend"].items())[:1])
    return all(ok), (f"{sum(ok)}/{len(rows)} CANN counts at five vector instructions a count "
                     f"(tolerance: none; {per})")


def barrier_release(*, preset, backend, kind, aivs, spread=4, syncall_cycles=None):
    """Cycles from a die's last arrival at a SyncAll to its first core's release (see the
    module docstring); ``kind`` ``"hard"`` (``bar``) or ``"soft"`` (fetch-add and poll)."""
    from ....sw.assembler import Program
    from ....sw.isa import address
    from ....sw.machine import Machine
    from ...backends.machine import backend as make_backend
    if kind not in ("hard", "soft"):
        raise UserError(f"kind must be 'hard' or 'soft', not {kind!r}")
    m = Machine(preset, backend=make_backend(backend), topology=("superpod", 2, 1, 1),
                aivs_per_die=aivs, hbm_blocks=4, imem_depth=32, max_outstanding=8,
                trace_depth=max(16, 1 << (2 * aivs).bit_length()))
    for a in range(aivs):
        p = Program()
        p.li(1, a * spread // 2 + 1)
        p.label("spin")
        p.addi(1, 1, -1)
        p.bne(1, 0, "spin")                     # 2 cycles an iteration
        p.mark(MARK0)
        if kind == "hard":
            p.bar()
        else:
            p.li(2, address(0, 1, 0))
            p.li(3, 1)
            p.fadd(4, 2, 3)                     # arrive
            p.li(3, aivs)
            p.poll(4, 2, 3, "ge")               # every AIV of the die arrived
        p.mark(MARK0 + 1)
        p.halt()
        m.load_program(0, a, p)
    m.read_back([(0, 1)])
    if syncall_cycles is not None:
        m.set_knob("syncall_cycles", syncall_cycles)
    report = m.run(max_cycles=100 * aivs * spread + 10 * (syncall_cycles or 0) + 10_000)
    marks = report.marks()
    last = max(e["cycle"] for e in marks if e["event"] == MARK0)
    first = min(e["cycle"] for e in marks if e["event"] == MARK0 + 1)
    return first - last - 1


def inject_streams(*, preset, backend, aivs, blocks, rate=None, topology=TOPOLOGY):
    """Cycles of each of rank 0's injection bursts, in one run: for each ``n`` of ``blocks``
    in turn, its ``aivs`` AIVs each store ``n`` blocks to a destination rank of its own
    (``1 + a``: no link or switch output shared past the die) and fence; a burst lasts from
    its first AIV's start to its last AIV's fence. ``rate`` sets the dies' ``inject_rate``
    knob (``None``: no limit); ``topology`` is a superpod's."""
    from ....sw.assembler import Program
    from ....sw.isa import address
    from ....sw.kernels import pow2_at_least
    from ....sw.machine import Machine
    from ...backends.machine import backend as make_backend
    ranks = topology[1] * topology[2] * topology[3]
    if not 1 <= aivs < ranks:
        raise UserError(f"aivs must be in [1, {ranks - 1}] (a destination rank each), not {aivs!r}")
    m = Machine(preset, backend=make_backend(backend), topology=topology, aivs_per_die=aivs,
                hbm_blocks=pow2_at_least(max(blocks) + 1),
                imem_depth=pow2_at_least(3 * sum(blocks) + 4 * len(blocks) + 8),
                max_outstanding=512, trace_depth=pow2_at_least(2 * aivs * len(blocks) + 1))
    for a in range(aivs):
        p = Program()
        p.li(10, 0)
        for k, n in enumerate(blocks):
            p.mark(MARK0 + 2 * k)
            for i in range(n):
                p.li(2, address(1 + a, 1 + i))
                p.stb(10, 2, 0)
            p.fence()
            p.mark(MARK0 + 2 * k + 1)
            p.bar()                                 # the next burst starts together
        p.halt()
        m.load_program(0, a, p)
    m.read_back([(0, 1)])
    if rate is not None:
        m.set_knob("inject_rate", rate)
    report = m.run(max_cycles=sum(blocks) * aivs * 10_000 + 10_000)
    marks = report.marks()
    return [max(e["cycle"] for e in marks if e["event"] == MARK0 + 2 * k + 1)
            - min(e["cycle"] for e in marks if e["event"] == MARK0 + 2 * k)
            for k in range(len(blocks))]


#: cycles a stream's store costs to issue: ``li`` of a remote address (``lui`` + ``addi``), ``stb``
ISSUE = 3


def window_expected(latency, window, blocks):
    """Cycles from the MARK before a stream of ``blocks`` block stores to the MARK after its
    fence, at store window ``W`` and class latency ``L``: each window's first store issues one
    round trip ``2L + 3`` after the previous window's first (the ack of that store frees its
    slot), the stores of a window :data:`ISSUE` cycles apart, and the fence ends one round
    trip after the last store — ``ISSUE + ISSUE (w - 1) + ceil(n / W)(2L + 3) + 1`` with
    ``w`` the last window's stores. Exact while a window issues within a round trip
    (``ISSUE * W <= 2L + 3``) or the stream fits one window (``n <= W``); ``None`` otherwise."""
    rtt = 2 * latency + 3
    if ISSUE * window > rtt and blocks > window:
        return None
    windows = math.ceil(blocks / window)
    last = blocks - (windows - 1) * window
    return ISSUE + ISSUE * (last - 1) + windows * rtt + 1


def local_latency():
    """``L``: cycles from a local read's request to its answer, the system's ``hbm_latency``
    (:class:`~epfabric.hw.system.System`; no preset or machine of the experiments sets it)."""
    from ....hw.system import System
    return inspect.signature(System).parameters["hbm_latency"].default


def poll_expected(poll_extra, latency=None):
    """Cycles of :data:`READ_REPEAT` satisfied local polls at ``poll_extra = P``:
    ``N (1 + P + L)`` (one read each; ``L`` :func:`local_latency` unless given)."""
    latency = local_latency() if latency is None else latency
    return READ_REPEAT * (1 + poll_extra + latency)


def read_check(rows):
    """``(holds, words)`` of the read rows (``read_extra`` set, ``poll_extra`` not): each
    row's copy takes ``R - R0`` cycles more than the first row's (``R0``: a copy pays its start
    once), its loads and polls as many cycles as the first row's (a scalar read does not pay
    a copy's start), and its loads as long as its polls (one read each), exactly."""
    if not rows:
        return True, ""
    base = rows[0]
    ok = [r["load_cycles"] == base["load_cycles"] == r["poll_cycles"] == base["poll_cycles"]
          and r.get("copy_cycles", 0) - base.get("copy_cycles", 0) == (r["read_extra"]
                                                                   - base["read_extra"])
          for r in rows]
    per = ", ".join(f"{r['read_ns']:g} ns at read_extra {r['read_extra']}" for r in rows)
    return all(ok), (f"{sum(ok)}/{len(rows)} copy runs at read_extra more once a copy, their "
                     f"loads and polls unchanged (tolerance: none; a local read {per})")


def poll_check(rows):
    """``(holds, words)`` of the poll rows (``poll_extra = P`` set, ``read_extra`` not): each
    row's :data:`READ_REPEAT` polls take their closed form ``N (1 + P + L)``
    (:func:`poll_expected`), its loads as long, and every row's copy as many cycles (a copy
    does not pay a scalar read's cost), exactly."""
    if not rows:
        return True, ""
    ok = [r["poll_cycles"] == r["expected_cycles"] == r["load_cycles"]
          and r["copy_cycles"] == rows[0]["copy_cycles"] for r in rows]
    per = ", ".join(f"{r['poll_cycles']} at poll_extra {r['poll_extra']}" for r in rows)
    return all(ok), (f"{sum(ok)}/{len(rows)} poll runs at N (1 + P + L), N = {READ_REPEAT} "
                     f"(tolerance: none; {per}), their copies unchanged")


#: ``{mechanism: check}`` of the rows checked each by a function of their own (``(holds,
#: words)``, words empty when there is no such row)
ROW_CHECKS = {"read": read_check, "poll": poll_check, "update": update_check,
              "token_blocks": token_blocks_check, "send_buffers": buffer_check,
              "eq8": eq8_check, "cann_count": count_check}


class Mechanisms(Experiment):
    """One row per (mechanism, distance class, setting): the model's cycles beside the closed form."""

    name = "mechanisms"
    title = "each calibrated timing mechanism alone, against its closed form"
    paper = "UBEP §3.3 (per-AIV network delay)"
    headline = "a sender holds a staging buffer until its block's remote write completes"
    params = (
        Param("preset", "cm384", "machine preset", str),
        Param("backend", "verilator", "simulator", str, SIMULATORS),
        Param("blocks", 32, "stores in each stream", int, minimum=1),
        Param("windows", "1,2,4,512", "store_window values (blocks), comma-separated", str),
        Param("aivs", 48, "AIVs of the die of the SyncAll benchmark", int, minimum=1),
        Param("syncall_cycles", "0,100,5000", "syncall_cycles values of the hardware SyncAll, "
              "comma-separated", str),
        Param("inject", "100,196", "die injection limits (GB/s), comma-separated", str),
        Param("inject_aivs", 6, "AIVs of the injection benchmark (a destination rank each)", int,
              minimum=1),
        Param("vector_lengths", "1,16,17,256", "vsum lengths of the vector benchmark, "
              "comma-separated", str),
        Param("vector_extra", "0,20", "vector_extra values (cycles), comma-separated", str),
        Param("read_extra", "0,5,200", "read_extra values (cycles), comma-separated; the "
              "first is the base the others are measured against", str),
        Param("poll_extra", "0,5,200", "poll_extra values (cycles), comma-separated; each "
              "measured against its closed form N (1 + P + L)", str),
        Param("hidden_bytes", "1000,7168", "token sizes (bytes) of the token-block rows, "
              "comma-separated", str),
        Param("send_buffers", "1,2", "send_buffers values (token buffers a sender) of the "
              "token-stream rows, comma-separated", str),
    )

    def resolve(self, **given):
        p = super().resolve(**given)
        from ....sw.presets import get_preset
        get_preset(p["preset"])
        if not 1 <= p["inject_aivs"] < TOPOLOGY[1] * TOPOLOGY[2] * TOPOLOGY[3]:
            raise UserError(f"inject_aivs must be in [1, 7] (a destination rank each), not "
                            f"{p['inject_aivs']!r}")
        int_list("windows", p["windows"])
        int_list("syncall_cycles", p["syncall_cycles"], lo=0)
        int_list("vector_lengths", p["vector_lengths"], hi=4096)
        int_list("vector_extra", p["vector_extra"], lo=0, hi=(1 << VECTOR_EXTRA_BITS) - 1)
        int_list("read_extra", p["read_extra"], lo=0, hi=(1 << READ_EXTRA_BITS) - 1)
        int_list("poll_extra", p["poll_extra"], lo=0, hi=(1 << POLL_EXTRA_BITS) - 1)
        int_list("hidden_bytes", p["hidden_bytes"], lo=1)
        int_list("send_buffers", p["send_buffers"], lo=1)
        try:
            limits = [float(g) for g in p["inject"].split(",")]
        except ValueError:
            raise UserError(f"inject must be comma-separated numbers, not {p['inject']!r}") \
                from None
        preset = get_preset(p["preset"])
        for g in limits:
            preset.replace(die_injection_gbytes_s=g)       # a limit the knob cannot hold fails
        return p

    def points(self, params, quick=False):
        windows = int_list("windows", params["windows"])
        if quick:
            windows = windows[:2]
        waits = int_list("syncall_cycles", params["syncall_cycles"], lo=0)
        if quick:
            waits = waits[:2]
        base = {"preset": params["preset"], "backend": params["backend"]}
        return ([{**base, "mechanism": "store_window", "blocks": params["blocks"], "window": w,
                  "class": cls} for cls in DESTINATIONS for w in windows]
                + [{**base, "mechanism": "syncall", "aivs": params["aivs"], "kind": "soft",
                    "syncall_cycles": None}]
                + [{**base, "mechanism": "syncall", "aivs": params["aivs"], "kind": "hard",
                    "syncall_cycles": w} for w in waits]
                + [{**base, "mechanism": "inject", "aivs": params["inject_aivs"],
                    "blocks": params["blocks"], "inject_gbytes_s": g}
                   for g in [None] + [float(x) for x in params["inject"].split(",")]]
                + [{**base, "mechanism": "vector", "lengths": params["vector_lengths"],
                    "vector_extra": x}
                   for x in int_list("vector_extra", params["vector_extra"], lo=0)]
                + [{**base, "mechanism": "read", "read_extra": x}
                   for x in int_list("read_extra", params["read_extra"], lo=0)]
                + [{**base, "mechanism": "poll", "poll_extra": x}
                   for x in int_list("poll_extra", params["poll_extra"], lo=0)]
                + [{**base, "mechanism": "update", "poll_extra": x}
                   for x in [0] + int_list("poll_extra", params["poll_extra"], lo=0)[1:]]
                + [{**base, "mechanism": "token_blocks", "hidden_bytes": h}
                   for h in int_list("hidden_bytes", params["hidden_bytes"])]
                + [{**base, "mechanism": "send_buffers", "send_buffers": n, **BUFFER_CASE}
                   for n in int_list("send_buffers", params["send_buffers"], lo=1)]
                + [{**base, "mechanism": "eq8", **EQ8_CASE, "aivs": EQ8_AIVS}]
                + [{**base, "mechanism": "cann_count", **UPDATE_CASE}])

    def measure(self, point):
        from ....sw.presets import get_preset
        if point["mechanism"] == "syncall":
            release = barrier_release(preset=point["preset"], backend=point["backend"],
                                      kind=point["kind"], aivs=point["aivs"],
                                      syncall_cycles=point["syncall_cycles"])
            expected = None if point["kind"] == "soft" else point["syncall_cycles"] + 1
            return {**point, "release_cycles": release, "expected_cycles": expected}
        if point["mechanism"] == "token_blocks":
            return {**point, "link_blocks": token_link_blocks(
                preset=point["preset"], backend=point["backend"],
                hidden_bytes=point["hidden_bytes"])}
        if point["mechanism"] == "update":
            return {**point, "update_cycles": update_runs(preset=point["preset"],
                                                          backend=point["backend"],
                                                          poll_extra=point["poll_extra"])}
        if point["mechanism"] == "eq8":
            return {**point, **eq8_runs(preset=point["preset"], backend=point["backend"])}
        if point["mechanism"] == "cann_count":
            p = get_preset(point["preset"])
            at = dict(lanes=p.vector_lanes, extra=p.knobs().get("vector_extra", 0))
            cycles = count_runs(preset=point["preset"], backend=point["backend"])
            return {**point, "cycles": cycles, "expected": count_expected(cycles["vcount"], **at),
                    "experts_cycles": expert_counts(preset=point["preset"],
                                                    backend=point["backend"]),
                    "experts_expected": expert_counts_expected(**at)}
        if point["mechanism"] == "vector":
            from ....hw.aiv_core import AIVCore
            lengths = int_list("lengths", point["lengths"])
            x = point["vector_extra"]
            got = vector_runs(preset=point["preset"], backend=point["backend"], lengths=lengths,
                              extra=x)
            return {**point, "cycles": got,
                    "expected_cycles": [1 + VECTOR_REPEAT * AIVCore.vector_cycles(n, VECTOR_LANES, x)
                                        for n in lengths]}
        preset = get_preset(point["preset"])
        if point["mechanism"] in ("read", "poll"):
            loads, polls, copy = read_runs(preset=preset.name, backend=point["backend"],
                                           extra=point.get("read_extra", 0),
                                           poll_extra=point.get("poll_extra", 0))
            out = {**point, "load_cycles": loads, "poll_cycles": polls, "copy_cycles": copy,
                   "read_ns": preset.ns(polls / READ_REPEAT)}
            if point["mechanism"] == "poll":
                out["expected_cycles"] = poll_expected(point["poll_extra"])
            return out
        if point["mechanism"] == "inject":
            g = point["inject_gbytes_s"]
            rate = None if g is None else preset.replace(die_injection_gbytes_s=g).inject_rate()
            n = point["blocks"]
            times = inject_streams(preset=preset.name, backend=point["backend"],
                                   aivs=point["aivs"], blocks=[n, 2 * n], rate=rate)
            extra = point["aivs"] * n * preset.block_bytes
            return {**point, "inject_rate": rate, "marginal_cycles": times[1] - times[0],
                    "gbytes_s": preset.gbytes_s(extra, times[1] - times[0]),
                    "expected_cycles": None if rate is None else extra * INJECT_DEN / rate}
        latency = preset.latency_cycles()[point["class"]]
        if point["mechanism"] == "send_buffers":
            s, b = point["send_buffers"], point["token_blocks"]
            got = buffer_stream(preset=preset.name, backend=point["backend"], send_buffers=s,
                                tokens=point["tokens"], token_blocks=b,
                                dst=DESTINATIONS[point["class"]])
            return {**point, "latency_cycles": latency, "stb_cycles": got,
                    "expected_cycles": window_expected(latency, s * b, point["tokens"] * b)}
        window, blocks = point["window"], point["blocks"]
        dst = DESTINATIONS[point["class"]]
        stb, sw = store_streams(preset=preset.name, backend=point["backend"], window=window,
                                segments=[(dst, blocks, "stb"), (dst, blocks, "sw")],
                                max_outstanding=max(64, window))
        expected = window_expected(latency, window, blocks)
        return {**point, "latency_cycles": latency, "round_trip_cycles": 2 * latency + 3,
                "stb_cycles": stb, "sw_cycles": sw, "expected_cycles": expected}

    def verdict(self, rows):
        """Holds when every block stream takes exactly the closed form's cycles
        (:func:`window_expected`, where it applies), no word-store stream's cycles depend on
        the window (the knob limits block stores only), every hardware SyncAll releases
        exactly ``syncall_cycles + 1`` cycles after its last arrival, and each injection
        limit's extra blocks take their bytes over the rate (2 % + 4 cycles: the credit's
        burst and rounding), every vector run and every poll run is at its closed form, and a
        copy pays ``read_extra`` once while scalar reads do not (:func:`read_check`,
        :func:`poll_check`; no tolerance); and the UpdateTokenNumsOut, token-block, token-buffer
        Eq. 8 and CANN-count rows hold their checks (:func:`update_check`,
        :func:`token_blocks_check`, :func:`buffer_check`, :func:`eq8_check`,
        :func:`count_check`; no tolerance)."""
        streams = [r for r in rows if r.get("mechanism") == "store_window"]
        bars = [r for r in rows if r.get("mechanism") == "syncall" and r["kind"] == "hard"]
        closed = [r for r in streams if r["expected_cycles"] is not None]
        bad = [r for r in closed if r["stb_cycles"] != r["expected_cycles"]]
        by_class = {}
        for r in streams:
            by_class.setdefault(r["class"], set()).add(r["sw_cycles"])
        words = all(len(v) == 1 for v in by_class.values())
        bars_ok = all(r["release_cycles"] == r["expected_cycles"] for r in bars)
        soft = [r["release_cycles"] for r in rows
                if r.get("mechanism") == "syncall" and r["kind"] == "soft"]
        limits = [r for r in rows if r.get("mechanism") == "inject"
                  and r["expected_cycles"] is not None]
        off = [r for r in limits if abs(r["marginal_cycles"] - r["expected_cycles"])
               > 0.02 * r["expected_cycles"] + 4]
        vec = [r for r in rows if r.get("mechanism") == "vector"]
        vec_ok = all(r["cycles"] == r["expected_cycles"] for r in vec)
        checked = [ROW_CHECKS[kind]([r for r in rows if r.get("mechanism") == kind])
                   for kind in ROW_CHECKS]
        return (not bad and words and bool(closed) and bars_ok and not off and vec_ok
                and all(ok for ok, _ in checked),
                f"{len(closed) - len(bad)}/{len(closed)} block streams at the window's closed "
                f"form (tolerance: none; {'inside' if not bad else 'OUTSIDE'}); word "
                f"stores {'do not depend' if words else 'DEPEND'} on the window; "
                f"{sum(r['release_cycles'] == r['expected_cycles'] for r in bars)}/{len(bars)} "
                f"hardware SyncAlls release at syncall_cycles + 1 (tolerance: none)"
                + (f"; the soft SyncAll costs {soft[0]} cycles" if soft else "")
                + f"; {len(limits) - len(off)}/{len(limits)} injection limits at "
                  f"bytes / rate (tolerance: 2 % + 4 cycles)"
                + (f"; {sum(r['cycles'] == r['expected_cycles'] for r in vec)}/{len(vec)} vector "
                   f"runs at ceil(L/lanes) + 3 + vector_extra a vsum (tolerance: none)"
                   if vec else "")
                + "".join(f"; {text}" for _, text in checked if text))

    def plot(self, rows, path):
        from ..results.plot import save, subplots
        fig, (ax, bx, cx, dx) = subplots(1, 4, width=18)
        streams = [r for r in rows if r["mechanism"] == "store_window"]
        for k, cls in enumerate(DESTINATIONS):
            pts = sorted((r["window"], r["stb_cycles"], r["expected_cycles"])
                         for r in streams if r["class"] == cls)
            if not pts:
                continue
            ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-", color=f"C{k}",
                    label=f"{cls}: model")
            exp = [(p[0], p[2]) for p in pts if p[2] is not None]
            ax.plot([p[0] for p in exp], [p[1] for p in exp], "x--", color=f"C{k}",
                    label=f"{cls}: ceil(n/W)(2L+3)")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("store_window W (blocks)")
        ax.set_ylabel("cycles of a block stream + fence")
        ax.legend(fontsize=7)
        bars = [r for r in rows if r["mechanism"] == "syncall"]
        bx.bar([r["kind"] + ("" if r["syncall_cycles"] is None else f" {r['syncall_cycles']}")
                for r in bars], [max(1, r["release_cycles"]) for r in bars])
        bx.set_yscale("log")
        bx.set_xlabel("SyncAll (hard: syncall_cycles)")
        bx.set_ylabel("cycles from the last arrival to the release")
        inj = [r for r in rows if r["mechanism"] == "inject"]
        cx.bar([str(r["inject_gbytes_s"] or "none") for r in inj], [r["gbytes_s"] for r in inj])
        cx.set_xlabel("die injection limit (GB/s)")
        cx.set_ylabel("measured die egress (GB/s)")
        for k, r in enumerate(r for r in rows if r["mechanism"] == "vector"):
            lengths = int_list("lengths", r["lengths"])
            dx.plot(lengths, r["cycles"], "o-", color=f"C{k}",
                    label=f"vector_extra {r['vector_extra']}: model")
            dx.plot(lengths, r["expected_cycles"], "x--", color=f"C{k}",
                    label=f"vector_extra {r['vector_extra']}: closed form")
        dx.set_xscale("log", base=2)
        dx.set_xlabel(f"vsum length L ({VECTOR_LANES} lanes)")
        dx.set_ylabel(f"cycles of {VECTOR_REPEAT} vsum")
        dx.legend(fontsize=7)
        save(fig, path, f"timing mechanisms alone: store window, SyncAll, injection, vector op "
                        f"({rows[0]['preset']}, {rows[0]['backend']})")

    def run(self, **params):
        p = self.resolve(**params)
        return [self.measure(pt) for pt in self.points(p)]

    def format(self, rows):
        out = []
        for r in rows:
            if r["mechanism"] == "store_window":
                out.append((r["mechanism"], f"{r['class']}, W {r['window']}", r["stb_cycles"],
                            "-" if r["expected_cycles"] is None else r["expected_cycles"],
                            f"sw stream {r['sw_cycles']}"))
            elif r["mechanism"] == "vector":
                out.append((r["mechanism"], f"vector_extra {r['vector_extra']}, {VECTOR_REPEAT} "
                            f"vsum of length {r['lengths']}", ",".join(map(str, r["cycles"])),
                            ",".join(map(str, r["expected_cycles"])), ""))
            elif r["mechanism"] == "read":
                out.append((r["mechanism"], f"read_extra {r['read_extra']}, {READ_REPEAT} lw, "
                            f"then {READ_REPEAT} poll, then a {READ_REPEAT}-block copy",
                            f"{r['load_cycles']},{r['poll_cycles']},{r.get('copy_cycles')}",
                            "", f"{r['read_ns']:g} ns a read"))
            elif r["mechanism"] == "poll":
                out.append((r["mechanism"], f"poll_extra {r['poll_extra']}, {READ_REPEAT} poll "
                            f"(N (1 + P + L)); {READ_REPEAT} lw, a {READ_REPEAT}-block copy",
                            str(r["poll_cycles"]), str(r["expected_cycles"]),
                            f"lw {r['load_cycles']}, copy {r['copy_cycles']}"))
            elif r["mechanism"] == "update":
                out.append((r["mechanism"], f"poll_extra {r['poll_extra']}, CANN's "
                            f"UpdateTokenNumsOut, AIVs 0 and 1 of die 0",
                            ",".join(map(str, r["update_cycles"])), "", ""))
            elif r["mechanism"] == "token_blocks":
                blocks = r["link_blocks"]
                out.append((r["mechanism"], f"{r['hidden_bytes']} B tokens: link data blocks, "
                            f"UBEP / CANN", f"{blocks['ubep']} / {blocks['cann']}", "", ""))
            elif r["mechanism"] == "send_buffers":
                exp = r["expected_cycles"]
                out.append((r["mechanism"], f"{r['class']}, {r['send_buffers']} buffer"
                            f"{'s' if r['send_buffers'] != 1 else ''}, "
                            f"{r['tokens']} tokens of {r['token_blocks']} blocks",
                            r["stb_cycles"], "-" if exp is None else exp, ""))
            elif r["mechanism"] == "eq8":
                out.append((r["mechanism"], f"UBEP, {r['aivs']} AIVs, E {r['experts']}, "
                            f"k {r['topk']}, BS {r['batch']}: C = Eq. 8's, run's",
                            f"{r['rule_c']}, {r['run_c']}", "",
                            f"alpha {r['alpha']:.1f}, beta {r['beta']:.1f}, "
                            f"beta/alpha {r['ratio']:.3f}"))
            elif r["mechanism"] == "cann_count":
                key = next(iter(r["cycles"]["ascend"]))
                out.append((r["mechanism"], f"CANN, five instructions a count: AIV {key}'s "
                            f"send, then {COUNT_EXPERTS} experts over {COUNT_SLOTS} ids",
                            f"{r['cycles']['ascend'][key]},{r['experts_cycles']['ascend']}",
                            f"{r['expected'][key]},{r['experts_expected']['ascend']}",
                            f"one vcount: {r['cycles']['vcount'][key]},"
                            f"{r['experts_cycles']['vcount']}"))
            elif r["mechanism"] == "inject":
                exp = r["expected_cycles"]
                out.append((r["mechanism"], f"{r['inject_gbytes_s'] or 'no'} limit, "
                            f"{r['aivs']} AIVs x {r['blocks']} blocks more",
                            r["marginal_cycles"], "-" if exp is None else f"{exp:.0f}",
                            f"{r['gbytes_s']:.1f} GB/s"))
            else:
                setting = r["kind"] + ("" if r["syncall_cycles"] is None
                                       else f", {r['syncall_cycles']} cycles")
                out.append((r["mechanism"], f"{setting}, {r['aivs']} AIVs", r["release_cycles"],
                            "-" if r["expected_cycles"] is None else r["expected_cycles"], ""))
        return tabulate(out, headers=("mechanism", "setting", "model cycles", "closed form",
                                      ""), disable_numparse=True)


EXPERIMENT = register(Mechanisms())
