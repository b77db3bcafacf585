"""The ``dispatch`` kernel (sw/kernels/dispatch.py, sw/ubep/cann.py): CANN EP's BSP dispatch."""

import dataclasses
import functools

import numpy as np
import pytest

from epfabric.sim.backends.machine import backend
from epfabric.hw.validate import UserError
from epfabric.sw.kernels import KERNELS, run_kernel
from epfabric.sw.kernels.dispatch import layout_of
from epfabric.sw.machine import Machine, WatchdogTimeout
from epfabric.sw.ubep.cann import PHASES
from utils import (SMALL_DISPATCH, CM384_MAX_CYCLES, KERNEL_CASE_MAX_CYCLES, cm384_machine, fast_simulator, four_aiv_machine, kernel_cases,
                   machine_simulator, require_simulator, run_on_machine)

K = KERNELS["dispatch"]
#: the smallest case with remote traffic both ways, more than one expert per rank and two AIVs
SMALL = SMALL_DISPATCH          # the small case (tests/utils.py), shared with other files
SHAPE = dict(preset="tiny", topology=("superpod", 2, 1, 1), aivs=2)


pysim_run, outcome = kernel_cases(K, SMALL, SHAPE)


def test_dispatch_is_bit_exact_with_every_phase_marked():
    result, trace, _ = outcome("pysim")
    assert result.correct, result.problems
    run = result.runs[0]
    assert sum(run.check["tokens_received"]) == 2 * 4 * 2            # every slot exactly once
    assert set(run.check["phases"]) == {"0.0", "0.1", "1.0", "1.1"}
    for times in run.check["phases"].values():
        assert list(times) == list(PHASES)                      # in phase order
        assert list(times.values()) == sorted(times.values())


def test_a_tokens_bytes_set_each_systems_blocks():
    """``hidden_bytes``: UBEP Table 4's 7,168 B token is 14 raw blocks for CANN and 15 for UBEP
    and UBEP-INC, whose blocks carry 480 B after the 32 B Token-Flag-Fusion header (§3.4);
    the bandwidth figure counts the bytes; a model or a hidden_blocks that differs is refused."""
    from epfabric.sw.kernels.dispatch import hidden_bytes, token_blocks
    blocks = {s: K.resolve_params({"system": s, "hidden_bytes": 7168})["hidden_blocks"]
              for s in ("cann", "ubep", "ubep-inc")}
    assert blocks == {"cann": 14, "ubep": 15, "ubep-inc": 15}
    assert token_blocks(480, "ubep") == token_blocks(512, "cann") == 1 < token_blocks(481, "ubep")
    assert hidden_bytes(K.resolve_params({"hidden_bytes": 7168})) == 7168
    assert K.resolve_params({"system": "cann", "hidden_bytes": 7168,
                             "hidden_blocks": 14})["hidden_blocks"] == 14
    with pytest.raises(UserError, match=r"^hidden_blocks=14 conflicts with hidden_bytes=7168 "
                                        r"\(15 blocks for system='ubep'\); give one of them$"):
        K.resolve_params({"system": "ubep", "hidden_bytes": 7168, "hidden_blocks": 14})
    with pytest.raises(UserError, match=r"^hidden_bytes=7168 and model='deepseek-v3'"):
        K.resolve_params({"hidden_bytes": 7168, "model": "deepseek-v3"})
    with pytest.raises(UserError, match="hidden_bytes"):
        K.resolve_params({"hidden_bytes": 0})


def test_a_dispatch_with_send_buffers_runs_a_window_of_its_tokens(monkeypatch):
    """``send_buffers=1`` on cm384 with 4-block tokens (a remote write's ack takes 2 x 218 ns
    and more): the run is the one with the ``store_window`` knob at 4 blocks, cycle for cycle,
    and slower than with the whole window (measured: 1,933 cycles against 1,169; 1,493 with
    two buffers). On the flag tests' native build."""
    from epfabric.sw import presets
    require_simulator("native")
    params = {**SMALL, "system": "cann", "hidden_blocks": 4}
    cm384 = presets.PRESETS["cm384"]

    def cycles(preset, knob=None):
        monkeypatch.setitem(presets.PRESETS, "cm384", preset)
        params_ = K.resolve_params(params)
        m = Machine(backend=backend("native"), config=cm384_machine())
        if knob is not None:
            m.set_knob("store_window", knob)
        inputs = K.load(m, params_)
        report = m.run(CM384_MAX_CYCLES)
        assert K.check(m, report, inputs)["correct"]
        return report.cycles

    buffers = cycles(cm384.replace(send_buffers=1))
    assert buffers == cycles(cm384, knob=4)
    assert buffers > cycles(cm384)


def test_two_experts_a_rank_end_with_update_token_nums_out():
    """The open kernel's UpdateTokenNumsOut (a rank hosts 2 experts): SyncAll #3 holds every
    AIV of a die until the last arrives, then the last AIV alone works (it reads 2·epr − 1 = 3
    running totals and writes the experts' totals, checked against numpy by the checker; its
    reads' cost: tests/sim/test_mechanisms.py). One expert a rank: two SyncAlls, no update."""
    from epfabric.sw.ubep.cann import phases as cann_phases
    phases = outcome("pysim")[0].runs[0].check["phases"]         # the small case: 2 a rank
    for rank in (0, 1):
        aivs = [phases[f"{rank}.{c}"] for c in (0, 1)]
        assert all(list(a) == list(cann_phases(2)) for a in aivs)
        assert min(a["sync3_out"] for a in aivs) > max(a["sync3_in"] for a in aivs)
        first, last = (a["update"] - a["sync3_out"] for a in aivs)
        assert last > first
    one = run_kernel(K, backend("pysim"), **SHAPE, params={**SMALL, "experts": 2},
                     max_cycles=KERNEL_CASE_MAX_CYCLES).runs[0]
    assert one.correct, one.problems
    assert all(list(a) == list(cann_phases(1)) for a in one.check["phases"].values())


# Icarus runs the big machine slowly (a minute a run): CI runs it on CANN here and on UBEP in
# test_combine (whose run includes UBEP's dispatch); the other pairing is `slow`.
@pytest.mark.parametrize("simulator, system", [
    ("verilator", "cann"), ("verilator", "ubep"), ("icarus", "cann"),
    pytest.param("icarus", "ubep", marks=pytest.mark.slow)])
def test_same_cycles_and_traces_as_amaranths_simulator(simulator, system):
    require_simulator(simulator)
    ref = outcome("pysim", system)
    got = outcome(simulator, system)
    assert got[0].correct, got[0].problems
    assert got[0].runs[0].cycles == ref[0].runs[0].cycles
    assert got[1] == ref[1] and got[2] == ref[2]


def test_the_checker_sees_a_wrong_token():
    m, report, inputs = pysim_run("cann")
    assert K.check(m, report, inputs)["correct"]
    x = inputs[0].x[1][2][0]
    x[5] ^= np.uint64(1)                                        # what rank 1 token 2 holds
    try:
        verdict = K.check(m, report, inputs)
    finally:
        x[5] ^= np.uint64(1)
    assert not verdict["correct"] and "OUT token" in verdict["problems"][0]


@pytest.mark.parametrize("region", ["COUNTS", "EXPAND", "SENDCNT", "TOKNUMS"])
def test_the_checker_sees_wrong_counts_and_a_wrong_expand(region):
    """The experiments rely on the checker: one flipped bit of COUNTS, EXPAND or (two experts a
    rank) UpdateTokenNumsOut's SENDCNT and TOKNUMS is a problem."""
    m, report, inputs = pysim_run("cann")
    lay = layout_of(m.config, K.resolve_params({**SMALL, "system": "cann"}))
    i = m._block_at[getattr(lay, region)] * m.config.words_per_block     # word 0 of the region
    m._readback[1][i] ^= 1
    try:
        verdict = K.check(m, report, inputs)
    finally:
        m._readback[1][i] ^= 1
    assert not verdict["correct"]
    assert [p.split()[2] for p in verdict["problems"]] == [region]        # "rank 1: COUNTS ..."
    assert verdict["problems"][0].startswith("rank 1: ")


def test_a_reorder_that_does_not_wait_for_the_flags_is_caught():
    """On cm384 the flags take 218 ns to the other die: a reorder that does not wait reads 0s."""
    require_simulator("native")          # one cm384 build serves this and test_combine's
    run = run_on_machine(K, "native", cm384_machine(), {**SMALL, "broken": "no_flag_wait"},
                         max_cycles=CM384_MAX_CYCLES)
    assert not run["correct"]
    assert any("COUNTS" in p or "OUT token" in p for p in run["problems"])


def test_a_syncall_waiting_for_one_core_too_many_hangs_and_the_watchdog_says_where():
    with pytest.raises(WatchdogTimeout,
                       match=r"waits on address 0x0.000000 .rank 0 block 0 word 0\) = "
                             r"CTRL\[0\] \(dispatch SyncAll arrivals\)"):
        run_kernel(K, backend(fast_simulator()), params={**SMALL, "broken": "syncall_one_short"},
                   max_cycles=1000, **SHAPE)


@pytest.mark.parametrize("system", ["cann", "ubep-inc"])
def test_programs_do_not_depend_on_the_data(system):
    cfg = K.configs("tiny", SHAPE["topology"], 2, {**SMALL, "system": system})[0]
    programs = []
    for seed in (1, 2):
        m = Machine(backend=backend("pysim"), config=cfg)
        K.load(m, K.resolve_params({**SMALL, "seed": seed, "system": system}))
        programs.append(dict(m._programs))
    assert programs[0] == programs[1]


def test_an_odd_number_of_slots_packs_its_last_id_and_weight():
    """BS·k odd (3 tokens, top-1): the routing and weights are packed two to a word with the
    last half zero (a float pad once made the load fail); UBEP-INC, which carries the
    weights, is bit-exact. (The kernel sizes the machine of tests/sw/test_combine.py's small
    UBEP-INC case for it: that build serves this run.)"""
    p = {"batch": 3, "topk": 1, "experts": 4, "system": "ubep-inc"}
    combine = KERNELS["combine"]
    assert (combine.configs("tiny", SHAPE["topology"], 2, p)
            == combine.configs("tiny", SHAPE["topology"], 2, {**SMALL, "system": "ubep-inc"}))
    result = run_kernel(combine, backend(fast_simulator()), params=p,
                        max_cycles=KERNEL_CASE_MAX_CYCLES, **SHAPE)
    assert result.correct, result.problems


@pytest.mark.parametrize("system", ["cann", "ubep"])
def test_a_one_bit_rank_field_gives_the_same_run(system):
    """The same dispatch on a machine whose addresses give the rank 1 bit (the rest to the
    block): the programs differ (rank << 31, not << 24), the run does not -- same cycles, same
    MARK trace, bit-exact (issue 29's address design: the rank field only narrows)."""
    import dataclasses
    ref = outcome("pysim", system)
    cfg = dataclasses.replace(K.configs("tiny", SHAPE["topology"], 2, SMALL)[0], rank_bits=1)
    m = Machine(backend=backend("pysim"), config=cfg)
    params = K.resolve_params({**SMALL, "system": system})
    inputs = K.load(m, params)
    report = m.run(KERNEL_CASE_MAX_CYCLES)
    verdict = K.check(m, report, inputs)
    assert verdict["problems"] == [] and report.cycles == ref[0].runs[0].cycles
    assert report.trace == ref[1]
    assert m._programs != pysim_run(system)[0]._programs      # remote addresses moved


@pytest.mark.parametrize("params, message", [
    ({"system": "deepep"}, "system must be one of cann, ubep, ubep-inc, not 'deepep'"),
    ({"system": "ubep", "cumsum_aivs": 2}, r"cumsum_aivs must be in \[1, 1\], not 2"),
    ({"system": "ubep", "broken": "no_flag_wait"}, "negative controls of system='cann'"),
    ({"experts": 5}, r"experts \(5\) must be a multiple of ranks \(2\)"),
    ({"experts": 7, "topk": 3}, r"experts \(7\) must be a multiple of ranks \(2\)"),
    ({"topk": 9}, r"topk \(9\) must be at most experts \(4\): a token's k experts are distinct"),
    ({"topk": 17, "experts": 32}, r"topk must be in \[1, 16\], not 17"),
    ({"topk": 0}, r"topk must be in \[1, 16\], not 0"),
    ({"broken": "nope"}, "broken must be one of None, no_flag_wait, syncall_one_short"),
    ({"cap": 5}, r"cap must be in \[1, 4\], not 5"),
    ({"cap": 1}, "cap 1 is too small: rank 0 routes 3 slots to expert 3; raise cap"),
    ({"mapping": "identity"},
     "mapping='identity' is a variant of system='ubep', not of system='cann'"),
    ({"system": "ubep", "send_split": "expert"},
     "send_split='expert' is a variant of system='cann', not of system='ubep'"),
    ({"system": "ubep", "mapping": "random"},
     "mapping must be one of transpose, identity, not 'random'"),
    ({"send_split": "token"}, "send_split must be one of slot, expert, not 'token'"),
    ({"hot": 1, "hot_share": 1.0}, r"hot_share must be in \(0, 1\), not 1.0"),
    ({"hot": 1, "hot_share": 0}, "hot_share must be a positive number, not 0"),
])
def test_bad_parameters_are_named(params, message):
    with pytest.raises(ValueError, match=message):
        K.configs("tiny", SHAPE["topology"], 2, {**SMALL, **params})


def test_ubep_delivers_what_cann_delivers():
    """Same input, same OUT payload (UBEP's words 0..3 are its TFF header; both vs numpy)."""
    runs = {s: outcome("pysim", s)[0].runs[0] for s in ("cann", "ubep")}
    assert runs["cann"].check["out_payload_digest"] == runs["ubep"].check["out_payload_digest"]
    assert len(set(runs["cann"].check["out_payload_digest"])) == 2     # two ranks, two different OUTs


def test_ubep_slices_that_start_inside_an_expert():
    """Three T-AIVs: a slice starting in the middle of an expert reads that expert's vcomp
    output from its offset on (the small cases have one T-AIV, whose offset is 0)."""
    from epfabric.sw.ubep.ubep import transposition
    from epfabric.sw.ubep.workload import Workload
    params = {**SMALL, "system": "ubep", "cumsum_aivs": 1}
    ranks, n_tok, S = 2, 3, SMALL["batch"] * SMALL["topk"]
    w = Workload(ranks=ranks, batch=SMALL["batch"], topk=SMALL["topk"], experts=SMALL["experts"])
    per = -(-S // n_tok)
    offsets = []
    for s in range(ranks):
        cnt = np.bincount(w.topk_idx[s].ravel(), minlength=SMALL["experts"])
        cum = np.cumsum(cnt[transposition(SMALL["experts"], n_tok)])
        for a in range(1, n_tok):
            p = int((cum <= a * per).sum())
            offsets.append(a * per - (int(cum[p - 1]) if p else 0))
    assert any(offsets), offsets                                   # the case tests what it says
    run = run_on_machine(K, machine_simulator(), four_aiv_machine(K, params), params)
    assert run["correct"], run["problems"]


def test_ubep_token_aivs_wait_for_each_others_counts():
    """Three T-AIVs count 3, 3 and 4 of 10 experts over BS 16 x top-8 (128 slots): the third
    needs a second VectorCount, so the others reach its TCNT block before it is published and
    must poll its flag (a T-AIV that reads it without polling takes zeros and the receivers
    wait for tokens that never come: mutation ``ubep_tcnt_no_flag_poll``)."""
    from epfabric.sw.ubep.ubep import count_chunks
    params = {"batch": 16, "topk": 8, "experts": 10, "system": "ubep", "cumsum_aivs": 1}
    assert [e1 - e0 for e0, e1, _ in count_chunks(10, 3, 128)] == [3, 3, 4]
    run = run_on_machine(K, machine_simulator(), four_aiv_machine(K, params), params,
                         max_cycles=20_000)
    assert run["correct"], run["problems"]


def test_ubep_mapper_pieces():
    from epfabric.sw.ubep.ubep import default_cumsum_aivs, transposition
    assert transposition(8, 3) == [0, 3, 6, 1, 4, 7, 2, 5]      # 3 x 3 matrix, one padding cell
    assert sorted(transposition(32, 7)) == list(range(32))
    assert default_cumsum_aivs(8, 32, 8, 32) == 1                # App. A: E/(k.BS) small -> 1
    assert default_cumsum_aivs(48, 256, 8, 8) == 24              # large E/(k.BS): clamped to A/2


def test_eq8_chooses_c_from_the_models_own_slopes(monkeypatch):
    """App. A's Eq. 8, ``C = round((β/α)·A·E/(k·BS))`` in ``[1, A − 1]``, with β/α a preset's
    measured ``cumsum_ratio``: it replaces App. A's fixed 3 (read from Fig. 14's cells) only
    where a preset names it; a UBEP run reports its own slopes (the longest T-AIV's sending
    cycles per slot of its slice, the longest C-AIV's count and prefix cycles per expert)."""
    from epfabric.sw import presets
    from epfabric.sw.kernels.dispatch import cumsum_aivs
    from epfabric.sw.ubep.ubep import cumsum_rule
    assert cumsum_rule(48, 256, 8, 128, 1 / 3) == 4              # 48·256/(3·1024)
    assert cumsum_rule(48, 256, 8, 128, 1.0) == 12
    assert cumsum_rule(48, 256, 8, 8, 1 / 3) == 47               # up to A − 1, not A/2
    assert cumsum_rule(8, 32, 8, 32, 0.01) == 1
    with pytest.raises(UserError, match=r"^cumsum_ratio must be > 0, not 0$"):
        cumsum_rule(8, 32, 8, 32, 0)
    params = K.resolve_params({**SMALL, "system": "ubep"})
    cfg = K.configs("tiny", SHAPE["topology"], 4, params)[0]
    assert cumsum_aivs(cfg, params) == 1                          # App. A's fit at this shape
    monkeypatch.setitem(presets.PRESETS, "tiny", presets.PRESETS["tiny"].replace(cumsum_ratio=2.0))
    assert cumsum_aivs(cfg, params) == 3              # round(2·4·4/(2·4)) = 4, clamped to A − 1
    monkeypatch.undo()
    run = outcome("pysim", "ubep")[0].runs[0].check
    phases, slopes = run["phases"], run["eq8_slopes"]
    sends = [v["send"] - v["init"] for k, v in phases.items() if k.endswith(".0")]
    counts = [v["cumsum"] - v["init"] for k, v in phases.items() if k.endswith(".1")]
    assert slopes["alpha"] == max(sends) / 8                      # one T-AIV: all 4·2 slots
    assert slopes["beta"] == max(counts) / 4                      # one C-AIV: all 4 experts
    assert slopes["ratio"] == slopes["beta"] / slopes["alpha"] > 0


@pytest.mark.parametrize("params, blocks", [({"batch": 12000}, 1177544),
                                            ({"hidden_blocks": 500}, 1568048)])
def test_a_layout_beyond_the_address_space_is_named_before_running(params, blocks):
    """cm384's default 8 ranks: a 3-bit rank field leaves 2**20 blocks a rank. The combine
    needs its regions (the dispatch alone would run on a dispatch-only layout)."""
    with pytest.raises(ValueError, match=rf"need {blocks} HBM blocks per rank; an address on 8 "
                                         r"ranks holds 1048576 \(a smaller batch, hidden_blocks "
                                         r"or cap\)"):
        KERNELS["combine"].configs("cm384", params=params)


def test_a_batch_beyond_a_cores_ubuf_is_named_before_running():
    """The dispatch alone fits BS 12,000 in its addresses (dispatch-only layout), but a CANN
    AIV's routing and slot lists do not fit a UBuf: the refusal names the batch, not the
    core parameter it would have failed on."""
    with pytest.raises(UserError, match=r"^batch=12000, topk=8, experts=32 on 8 ranks need 1502 "
                                        r"UBuf rows of an AIV .* holds 1024 \(a smaller batch\)$"):
        KERNELS["dispatch"].configs("cm384", params={"batch": 12000})


def test_a_dispatch_whose_combine_cannot_fit_runs_on_a_dispatch_only_layout():
    """The paper's shape at 64 ranks (UBEP Table 4): a 6-bit rank field leaves 2**17 blocks a
    rank; with the combine's window and output the layout needs 175,905, without them
    116,767. The dispatch gets a dispatch-only machine (its programs never address the
    combine's regions); the combine is refused, naming what it needs."""
    from epfabric.sw.kernels.dispatch import layout_of
    params = {"batch": 128, "topk": 8, "experts": 256, "hidden_blocks": 14, "cap": 16}
    cfg = KERNELS["dispatch"].configs("cm384", ("superpod", 2, 8, 4), 2, params)[0]
    assert (cfg.hbm_blocks, cfg.rank_bits) == (1 << 17, 6)
    for system in ("cann", "ubep"):
        lay = layout_of(cfg, KERNELS["dispatch"].resolve_params({**params, "system": system}))
        assert not lay.combine and lay.blocks == 116767
        assert lay.CWIN == lay.CWIN_GUARD == lay.YOUT == lay.YOUT_GUARD == lay.CSTATUS
        assert lay.where(lay.CSTATUS) == "CSTATUS[0]"
        full = dataclasses.replace(lay, combine=True)
        assert full.blocks == 175905 and full.OUT == lay.OUT and full.X == lay.X
    with pytest.raises(ValueError, match=r"need 175905 HBM blocks per rank; an address on 64 "
                                         r"ranks holds 131072"):
        KERNELS["combine"].configs("cm384", ("superpod", 2, 8, 4), 2, params)
    # where the combine fits, the dispatch's layout keeps its regions (16 ranks: 2**19 a rank)
    s1 = KERNELS["dispatch"].configs("cm384", ("superpod", 2, 8, 1), 2, params)[0]
    assert layout_of(s1, KERNELS["dispatch"].resolve_params(params)).combine


def test_a_layout_past_2_15_blocks_narrows_the_rank_field():
    """batch 2000 needs 196293 blocks: over the default 2**15, so the machine's address gives 3
    bits to the rank (8 ranks) and 20 to the block; small layouts keep the default 8/15."""
    big = KERNELS["dispatch"].configs("cm384", params={"batch": 2000})[0]
    assert (big.hbm_blocks, big.rank_bits) == (1 << 18, 3)
    assert KERNELS["dispatch"].configs("cm384")[0].rank_bits == 8


# --- the mapping ablation's variants (UBEP §5.4, Fig. 9; docs/spec/kernels.md §1.6) ----------

VARIANTS = [{"system": "cann", "send_split": "expert"}, {"system": "ubep", "mapping": "identity"}]
ALL_VARIANTS = [{"system": "cann"}, {"system": "ubep"}] + VARIANTS


@pytest.mark.parametrize("variant", VARIANTS, ids=["cann-expert", "ubep-identity"])
def test_a_variant_is_bit_exact_and_delivers_what_its_default_does(variant):
    sim = fast_simulator()
    result = run_kernel(K, backend(sim), params={**SMALL, **variant},
                        max_cycles=KERNEL_CASE_MAX_CYCLES, **SHAPE)
    assert result.correct, result.problems
    run = result.runs[0]
    default = outcome(sim, variant["system"])[0].runs[0]
    assert run.check["out_payload_digest"] == default.check["out_payload_digest"]
    assert run.check["recv_count"] == default.check["recv_count"]


@pytest.mark.parametrize("variant, aivs", [(VARIANTS[0], 2), (VARIANTS[1], 3)],
                         ids=["cann-expert", "ubep-identity"])
def test_a_variant_runs_other_programs(variant, aivs):
    """(With one T-AIV, as on two AIVs, UBEP's identity and transposition cut the same slice.)"""
    params = K.resolve_params({**SMALL, **variant, "cumsum_aivs": 1 if aivs > 2 else None})
    cfg = K.configs("tiny", SHAPE["topology"], aivs, params)[0]
    programs = K.programs(cfg, params)
    defaults = K.programs(cfg, {**params, "mapping": None, "send_split": None})
    assert any(programs[key].assemble() != defaults[key].assemble() for key in programs)


def test_one_machine_serves_every_variant():
    """The kernel sizes the machine for every system and variant: one build runs Fig. 9's four."""
    configs = [K.configs("cm384", ("superpod", 2, 1, 2), 4, {**SMALL, "experts": 8, **v})[0]
               for v in ALL_VARIANTS]
    assert all(c == configs[0] for c in configs[1:])


@pytest.mark.parametrize("variant", VARIANTS, ids=["cann-expert", "ubep-identity"])
def test_variant_programs_do_not_depend_on_the_data(variant):
    cfg = K.configs("tiny", SHAPE["topology"], 2, SMALL)[0]
    programs = []
    for seed in (1, 2):
        m = Machine(backend=backend("pysim"), config=cfg)
        K.load(m, K.resolve_params({**SMALL, **variant, "seed": seed, "hot": seed}))
        programs.append(dict(m._programs))
    assert programs[0] == programs[1]


def _even_experts_run(send_split):
    """Every token goes to experts 0 and 2 (both even): ``{core: send cycles}`` of rank 0."""
    from epfabric.sw.ubep.workload import Workload
    params = K.resolve_params({**SMALL, "send_split": send_split})
    cfg = K.configs("tiny", SHAPE["topology"], 2, params)[0]
    ranks, batch, wpb = cfg.ranks, SMALL["batch"], cfg.words_per_block
    rng = np.random.default_rng(7)
    idx = np.tile([0, 2], (ranks, batch, 1))
    idx[:, ::2] = idx[:, ::2, ::-1]                       # both orders within a token
    w = Workload.from_arrays(rng.integers(0, 2**32, size=(ranks, batch, 1, wpb)), idx,
                             rng.integers(1, 8, size=idx.shape), experts=SMALL["experts"])
    m = Machine(backend=backend(fast_simulator()), config=cfg)
    inputs = K.load(m, params, workload=w)
    verdict = K.check(m, m.run(KERNEL_CASE_MAX_CYCLES), inputs)
    assert verdict["correct"], verdict["problems"]
    return {int(key.split(".")[1]): c for key, c in verdict["send_cycles"].items()
            if key.startswith("0.")}


def test_the_expert_split_gives_an_aiv_the_slots_of_its_experts_only():
    """Experts 0 and 2 only, two AIVs: with the expert split AIV 1 (odd experts) sends nothing,
    with the slot split both send half."""
    expert, slot = _even_experts_run("expert"), _even_experts_run("slot")
    assert expert[1] * 3 < expert[0], expert                    # AIV 1 only looks, AIV 0 sends 8
    assert slot[0] * 2 > slot[1] and slot[1] * 2 > slot[0], slot
    assert expert[0] > max(slot.values()), (expert, slot)


def test_identity_mapping_with_two_token_aivs():
    """Two T-AIVs (4 AIVs, 2 CalCumSum) cut the slot sequence in expert order (π = identity,
    not [0, 2, 1, 3]), bit-exact."""
    params = {**SMALL, "system": "ubep", "cumsum_aivs": 2, "mapping": "identity"}
    run = run_on_machine(K, machine_simulator(), four_aiv_machine(K, params), params)
    assert run["correct"], run["problems"]
    assert len(run["send_cycles"]) == 2 * 2


def test_remapping_and_the_hot_share():
    from epfabric.sw.ubep.ubep import remapping, transposition
    from epfabric.sw.ubep.workload import Workload
    assert remapping(8, 3, "identity") == list(range(8))
    assert remapping(8, 3) == transposition(8, 3) == [0, 3, 6, 1, 4, 7, 2, 5]
    shape = dict(ranks=8, batch=64, topk=8, experts=128, hot=8)
    base = Workload(**shape)
    assert base.hot_experts() == [0, 16, 32, 48, 64, 80, 96, 112]
    assert 0.25 < base.hot_slot_share() < 0.3     # docs/spec/kernels.md §1.6's w_hot: about 30 %
    assert Workload(**shape, hot_share=0.5).hot_slot_share() > 0.4
    assert Workload(**shape, hot_share=0.3).topk_idx.tolist() == base.topk_idx.tolist()


@pytest.mark.parametrize("variant", VARIANTS, ids=["cann-expert", "ubep-identity"])
def test_the_combine_after_a_variant_is_bit_exact(variant):
    """The combine finds each answer by ``EXPAND`` (the slot's j), which no variant changes."""
    result = run_kernel(KERNELS["combine"], backend(fast_simulator()), params={**SMALL, **variant},
                        max_cycles=KERNEL_CASE_MAX_CYCLES, **SHAPE)
    assert result.correct, result.problems
    assert result.runs[0].check["dispatch"]["correct"]


# --- UBEP's synchronisation variants (Data-as-Flag in the dispatch; docs/spec/kernels.md §1.7)

SYNCS = [{"system": "ubep", "sync": "sp"}, {"system": "ubep", "sync": "sw"}]


@pytest.mark.parametrize("variant", SYNCS, ids=["sp", "sw"])
def test_a_sync_variant_delivers_the_raw_tokens_tff_delivers(variant):
    """SP and SW move raw blocks (no header): OUT is CANN's, payload digests equal UBEP-TFF's;
    SP leaves every receive slot re-armed (the checker reads them all)."""
    sim = fast_simulator()
    result = run_kernel(K, backend(sim), params={**SMALL, **variant},
                        max_cycles=KERNEL_CASE_MAX_CYCLES, **SHAPE)
    reports = result.reports
    assert result.correct, result.problems
    run = result.runs[0]
    tff = outcome(sim, "ubep")[0].runs[0]
    cann = outcome(sim, "cann")[0].runs[0]
    assert run.check["out_payload_digest"] == tff.check["out_payload_digest"]
    assert run.check["recv_count"] == cann.check["recv_count"]
    assert run.cycles != tff.cycles                      # other programs ran


def test_sp_checker_sees_a_slot_that_was_not_re_armed():
    m = Machine(backend=backend(fast_simulator()), config=K.configs("tiny", SHAPE["topology"], 2,
                                                           SMALL)[0])
    params = K.resolve_params({**SMALL, "system": "ubep", "sync": "sp"})
    inputs = K.load(m, params)
    report = m.run(KERNEL_CASE_MAX_CYCLES)
    assert K.check(m, report, inputs)["correct"]
    lay = layout_of(m.config, params)
    first = m._block_at[lay.RECV]
    m._readback[1][first * m.config.words_per_block] ^= 1      # slot 0 of rank 1 left as read
    verdict = K.check(m, report, inputs)
    assert any("rank 1: RECV block 0 was not re-armed" in p for p in verdict["problems"])


def test_sp_refuses_a_payload_that_carries_the_sentinel():
    from epfabric.sw.ubep.ubep import SENTINEL_WORD
    from epfabric.sw.ubep.workload import Workload
    cfg = K.configs("tiny", SHAPE["topology"], 2, SMALL)[0]
    w = Workload(ranks=cfg.ranks, words=cfg.words_per_block, seed=0, hidden_blocks=1, **SMALL)
    w.x[1][2][0][0] = SENTINEL_WORD
    m = Machine(backend=backend("pysim"), config=cfg)
    with pytest.raises(UserError, match="token 2 block 0 of rank 1 starts with SP's reserved"):
        K.load(m, K.resolve_params({**SMALL, "system": "ubep", "sync": "sp"}), workload=w)


@pytest.mark.parametrize("params, message", [
    ({"system": "cann", "sync": "sp"}, r"sync='sp' is a variant of system='ubep'"),
    ({"system": "ubep", "sync": "dc"}, r"sync must be one of tff, sp, sw, not 'dc'"),
])
def test_bad_sync_is_named(params, message):
    with pytest.raises(UserError, match=message):
        K.resolve_params({**SMALL, **params})


def test_sync_programs_differ_where_the_protocols_do():
    params = K.resolve_params({**SMALL, "system": "ubep"})
    cfg = K.configs("tiny", SHAPE["topology"], 2, params)[0]
    text = {s: "\n".join(str(p) for p in K.programs(cfg, {**params, "sync": s})[(0, 0)].assemble())
            for s in ("tff", "sp", "sw")}
    assert len(set(text.values())) == 3


# --- any experts per rank, any top-k (UBEP Table 3's GLM-4.7: 5 or 10 a rank; top-6) ----------

#: (experts, topk) on the small case's two ranks: 3 or 5 experts per rank, k = 1, 3, 6
ODD = [(6, 1), (6, 3), (10, 6)]


def _both_systems(params):
    """``{system: run}`` of a dispatch of ``params`` on CANN and UBEP, each correct, on the
    shared 4-AIV machine (its native build serves the UBEP experiments' tests too)."""
    runs = {}
    for system in ("cann", "ubep"):
        p = {**params, "system": system}
        run = run_on_machine(K, machine_simulator(), four_aiv_machine(K, p), p)
        assert run["correct"], (system, run["problems"])
        runs[system] = run
    return runs


@pytest.mark.parametrize("experts, topk", ODD, ids=[f"epr{e // 2}-k{k}" for e, k in ODD])
def test_any_experts_per_rank_and_topk_on_both_systems(experts, topk):
    """Bit-exact against numpy (OUT, COUNTS, EXPAND) on both systems, and the same OUT payload
    and counts from both: the expert → rank split and slot → token are not shifts here."""
    runs = _both_systems({**SMALL, "experts": experts, "topk": topk})
    assert runs["cann"]["out_payload_digest"] == runs["ubep"]["out_payload_digest"]
    assert runs["cann"]["recv_count"] == runs["ubep"]["recv_count"]
    assert len(runs["cann"]["recv_count"][0]) == experts // 2


def test_the_expert_split_and_three_token_aivs_at_k3_and_three_experts_per_rank():
    """CANN's expert split (slot → token by a reciprocal) and UBEP with three T-AIVs (slices that
    start inside an expert), 3 experts per rank, top-3: both bit-exact, the same OUT."""
    params = {**SMALL, "experts": 6, "topk": 3}
    p = {**params, "system": "cann", "send_split": "expert"}
    cann = run_on_machine(K, machine_simulator(), four_aiv_machine(K, p), p)
    assert cann["correct"], cann["problems"]
    params = {**params, "system": "ubep", "cumsum_aivs": 1}
    ubep = run_on_machine(K, machine_simulator(), four_aiv_machine(K, params), params)
    assert ubep["correct"], ubep["problems"]
    assert cann["out_payload_digest"] == ubep["out_payload_digest"]


def _names(program):
    from epfabric.sw.isa import decode
    return [decode(word)[0] for word in program.assemble()]


def _execute(program, regs):
    """The registers after ``program`` (straight-line ALU code) from ``regs`` (a tiny ISS)."""
    from epfabric.sw.isa import decode
    r = dict(regs)
    alu = {"addi": lambda a, b: a + b, "andi": lambda a, b: a & b, "slli": lambda a, b: a << b,
           "srli": lambda a, b: a >> b, "mul": lambda a, b: a * b, "sub": lambda a, b: a - b}
    for word in program.assemble():
        name, args = decode(word)
        if name == "lui":
            r[args[0]] = args[1] << 12
        elif name in ("mul", "sub"):
            r[args[0]] = alu[name](r.get(args[1], 0), r.get(args[2], 0))
        else:
            r[args[0]] = alu[name](r.get(args[1], 0), args[2])
        r[args[0]] &= 0xFFFFFFFF
        r[0] = 0
    return r


@pytest.mark.parametrize("d, bound", [(3, 6), (5, 160), (10, 160), (6, 64 * 6), (3, 2048 * 3),
                                      (7, 4096), (100, 1 << 14), (1, 9), (4, 32), (8, 256)])
def test_division_by_a_shape_constant(d, bound):
    """The emitted quotient and remainder are exact for every dividend below the bound; a power
    of two keeps the shift and the mask (the kernels' original, cheaper sequence)."""
    from epfabric.sw.assembler import Program
    from epfabric.sw.ubep.cann import divmod_const, is_pow2, reciprocal
    p = Program()
    divmod_const(p, 12, 5, 4, d, bound, 7, shift=8)      # r12 = (r4 // d) << 8, r5 = r4 % d
    if is_pow2(d):
        assert _names(p) == ["srli", "slli", "andi"]
    else:
        assert _names(p) == ["addi", "mul", "srli", "addi", "mul", "sub", "slli"]
        m, sh = reciprocal(d, bound)
        xs = np.arange(bound, dtype=np.uint64)              # the whole range, vectorised
        assert (bound - 1) * m < 1 << 32
        assert np.array_equal((xs * np.uint64(m)) >> np.uint64(sh), xs // np.uint64(d))
    for x in sorted({0, 1, d - 1, d, bound - 1} | set(range(0, bound, max(1, bound // 97)))):
        if x < bound:
            r = _execute(p, {4: x})
            assert (r[12] >> 8, r[5]) == divmod(x, d), x


def test_a_reciprocal_that_cannot_fit_32_bits_is_named():
    from epfabric.sw.ubep.cann import reciprocal
    with pytest.raises(UserError, match="no 32-bit multiply-shift divides every value below "
                                        r"4294967296 by 3"):
        reciprocal(3, 1 << 32)


def test_only_a_divisor_that_is_not_a_power_of_two_multiplies():
    """Three experts per rank add ``mul``s to a program; two or four leave it as it was."""
    def muls(params):
        params = K.resolve_params({**SMALL, **params})
        cfg = K.configs("tiny", SHAPE["topology"], 2, params)[0]
        return _names(K.programs(cfg, params)[(0, 0)]).count("mul")
    for system in ("cann", "ubep"):
        assert muls({"system": system, "experts": 6}) > muls({"system": system})
        assert muls({"system": system, "experts": 8}) == muls({"system": system})


# --- UBEP Table 3's models (--model) ---------------------------------------------------------

def test_a_model_sets_topk_experts_and_each_systems_blocks_per_token():
    from epfabric.sw.kernels.dispatch import model_shape
    for model, (k, e, raw, tff) in {"deepseek-v3": (8, 256, 15, 16), "qwen3-30b": (8, 128, 8, 9),
                                    "glm-4.7": (8, 160, 20, 22)}.items():
        cann = K.resolve_params({"model": model})
        ubep = K.resolve_params({"model": model, "system": "ubep", "topk": 8})
        assert (cann["topk"], cann["experts"], cann["hidden_blocks"]) == (k, e, raw)
        assert (ubep["topk"], ubep["experts"], ubep["hidden_blocks"]) == (k, e, tff)
        assert K.resolve_params(ubep) == ubep                       # resolving again: the same
        assert model_shape(model, "ubep")["hidden_blocks"] == tff


@pytest.mark.parametrize("params, message", [
    ({"model": "llama"}, "model must be one of deepseek-v3, qwen3-30b, glm-4.7, not 'llama'"),
    ({"model": "glm-4.7", "topk": 6},
     r"topk=6 conflicts with model='glm-4.7' \(topk=8 for system='cann'\); give one of them"),
    ({"model": "glm-4.7", "experts": 10}, r"experts=10 conflicts with model='glm-4.7' "
                                          r"\(experts=160 for system='cann'\)"),
    ({"model": "qwen3-30b", "system": "ubep", "hidden_blocks": 8},
     r"hidden_blocks=8 conflicts with model='qwen3-30b' \(hidden_blocks=9 for system='ubep'\)"),
])
def test_an_option_that_contradicts_the_model_is_refused(params, message):
    with pytest.raises(UserError, match=message):
        K.resolve_params(params)


def test_a_glm_shaped_dispatch_on_two_ranks():
    """GLM-4.7's top-8 and blocks per token (20 raw, 22 with TFF) with 5 experts per rank (10
    experts on two ranks of 4 AIVs: the full model needs 16 or 32 ranks, see the slow test)."""
    from epfabric.sw.kernels.dispatch import model_shape
    runs = {}
    for system in ("cann", "ubep"):
        params = {**model_shape("glm-4.7", system), "experts": 10, "batch": 1, "system": system}
        run = run_on_machine(K, machine_simulator(), four_aiv_machine(K, params), params,
                             max_cycles=20_000)
        assert run["correct"], (system, run["problems"])
        runs[system] = run
    assert runs["cann"]["recv_count"] == runs["ubep"]["recv_count"]


@pytest.mark.slow
def test_glm_4_7_on_sixteen_ranks():
    """UBEP Table 3's GLM-4.7 as ``model="glm-4.7"``: 160 experts, 10 a rank on 16 ranks, top-8,
    20 raw / 22 Token-Flag-Fused blocks a token; both systems on one machine, bit-exact."""
    runs = {}
    for system in ("cann", "ubep"):
        result = run_kernel(K, backend("pysim"),
                            params={"model": "glm-4.7", "batch": 2, "system": system},
                            preset="cm384", topology=("superpod", 2, 4, 2), aivs=2,
                            max_cycles=200_000)
        assert result.correct, (system, result.problems)
        assert result.params["hidden_blocks"] == {"cann": 20, "ubep": 22}[system]
        runs[system] = result.runs[0]
    assert runs["cann"].config == runs["ubep"].config          # one build serves both
    assert runs["cann"].check["recv_count"] == runs["ubep"].check["recv_count"]
    assert [len(c) for c in runs["cann"].check["recv_count"]] == [10] * 16


def test_the_phase_line_gives_each_phases_end_and_duration():
    from epfabric.sw.kernels.dispatch import _phase_split
    phases = {"0.0": {"init": 10, "send": 50}, "0.1": {"init": 20, "send": 70, "reorder": 90},
              "0.2": {"init": 4, "count": 30, "reorder": 94}}          # another role's phases
    assert _phase_split(phases) == ("init 11 (+11), count 30 (+26), send 60 (+45), "
                                    "reorder 92 (+42)")


def test_the_machines_of_a_comparison_are_sized_once(monkeypatch):
    """configs() does not depend on the system or a variant's option: the second system of a
    comparison gets the first one's machines without generating every program again; any
    other parameter is a different machine."""
    from epfabric.sw.kernels.dispatch import Dispatch
    k = Dispatch()
    calls = []
    real = Dispatch.programs
    monkeypatch.setattr(Dispatch, "programs", lambda self, c, p: calls.append(1) or real(self, c, p))
    cann = k.configs("cm384", params={"system": "cann", "batch": 8})
    n = len(calls)
    assert n > 0
    assert k.configs("cm384", params={"system": "ubep", "batch": 8, "mapping": "identity"}) == cann
    assert len(calls) == n
    assert k.configs("cm384", params={"system": "ubep", "batch": 16}) != cann
    assert len(calls) > n


def test_sizing_generates_a_systems_combine_programs_once(monkeypatch):
    """The combine's programs do not depend on the dispatch's variant: configs() generates one
    set a system, not one a variant (at the paper's shape, 8 s a set)."""
    from epfabric.sw.kernels import dispatch
    calls = []
    real = dispatch.combine_programs
    monkeypatch.setattr(dispatch, "combine_programs",
                        lambda c, p: calls.append(p["system"]) or real(c, p))
    dispatch.Dispatch().configs("cm384", params={"batch": 8})
    assert sorted(calls) == ["cann", "ubep"]


# --- CANN's SyncAll on the die's hardware barrier (issue 30) ---------------------------------

def _hard_syncall_run(wait, kernel=K):
    """A CANN run of SMALL with ``syncall="hard"`` and the die's syncall_cycles knob at ``wait``."""
    params = kernel.resolve_params({**SMALL, "syncall": "hard"})
    cfg = kernel.configs("tiny", SHAPE["topology"], SHAPE["aivs"], params)[0]
    m = Machine(backend=backend(fast_simulator()), config=cfg)
    inputs = kernel.load(m, params, max_cycles=KERNEL_CASE_MAX_CYCLES) if kernel.load_runs \
        else kernel.load(m, params)
    m.set_knob("syncall_cycles", wait)
    report = m.run(KERNEL_CASE_MAX_CYCLES)
    return report, kernel.check(m, report, inputs)


def test_the_hardware_syncall_delivers_what_the_soft_one_does_and_costs_its_knob():
    """``syncall="hard"``: the three SyncAlls (two experts a rank) are the die's ``bar``; OUT
    is the soft run's, and holding each barrier 500 cycles longer makes the run exactly
    3 x 500 cycles longer (every die's cores leave each barrier 500 cycles later, and
    nothing else waits)."""
    soft = outcome(fast_simulator(), "cann")[0].runs[0]
    fast, verdict = _hard_syncall_run(0)
    assert verdict["correct"], verdict["problems"]
    assert verdict["out_payload_digest"] == soft.check["out_payload_digest"]
    assert fast.cycles < soft.cycles                 # no fetch-adds and polls
    fast_release = verdict["syncall_release_share"] * fast.cycles
    slow, verdict = _hard_syncall_run(500)
    assert verdict["correct"], verdict["problems"]
    assert slow.cycles - fast.cycles == 3 * 500
    # F4's measure (last arrival -> release, by the MARKs) takes the 3 x 500 cycles, the waiting
    # none -- within a cycle: measured 1499.5 (a die's third barrier shows 499 by its MARKs:
    # the machine's trace takes one MARK a cycle, round robin over every core, so a MARK can
    # wait a cycle; the run's cycles above are exact)
    assert verdict["syncall_release_share"] * slow.cycles - fast_release == pytest.approx(1500,
                                                                                          abs=1)


def test_the_syncall_release_share_is_last_entry_to_first_exit():
    """Hand-worked: per die and SyncAll, the last AIV's entry to the first AIV's exit, summed
    over the SyncAlls, mean over dies, over the run."""
    from epfabric.sw.kernels.dispatch import syncall_release_share
    die0 = {(0, 0): {"sync1_in": 10, "sync1_out": 30, "sync2_in": 50, "verify": 60},
            (0, 1): {"sync1_in": 25, "sync1_out": 31, "sync2_in": 40, "verify": 61}}
    die1 = {(1, 0): {"sync1_in": 5, "sync1_out": 9, "sync2_in": 70, "verify": 90}}
    # die 0: (30 - 25) + (60 - 50) = 15; die 1: 4 + 20 = 24; mean 19.5 of 100 cycles
    assert syncall_release_share({**die0, **die1}, 100) == pytest.approx(0.195)
    assert syncall_release_share({(0, 0): {"sync1_in": 1}}, 100) is None


def test_the_combine_after_a_hardware_syncall_dispatch_is_bit_exact():
    _, verdict = _hard_syncall_run(40, KERNELS["combine"])
    assert verdict["correct"], verdict["problems"]


def test_the_hardware_syncall_is_cann_only_and_has_no_one_short_control():
    with pytest.raises(UserError, match="syncall"):
        K.resolve_params({**SMALL, "system": "ubep", "syncall": "hard"})
    with pytest.raises(UserError, match="syncall_one_short' is a negative control of the soft"):
        cfg = K.configs("tiny", SHAPE["topology"], 2, SMALL)[0]
        K.programs(cfg, K.resolve_params({**SMALL, "syncall": "hard",
                                          "broken": "syncall_one_short"}))


@pytest.mark.parametrize("skew", [{"zipf": 1.0}, {"hot": 1, "hot_layout": "consecutive", "hot_share": 0.6}],
                         ids=["zipf", "hot-consecutive"])
def test_skewed_routing_is_bit_exact_on_both_systems(skew):
    """Skewed routing is data: the same programs, every token exactly once (issue 30's workload
    options), and the routing really is skewed."""
    from epfabric.sw.kernels.dispatch import workload_of
    for system in ("cann", "ubep"):
        result = run_kernel(K, backend(fast_simulator()), params={**SMALL, **skew,
                                                                  "system": system},
                            max_cycles=KERNEL_CASE_MAX_CYCLES, **SHAPE)
        assert result.correct, result.problems
    w = workload_of(K.resolve_params({**SMALL, "batch": 64, **skew}), 2, 8)
    assert np.bincount(w.topk_idx.ravel(), minlength=4)[0] > 64 * 2 * 2 / 4 * 1.2


def test_skew_options_are_checked_before_anything_runs():
    with pytest.raises(UserError, match="hot=1 and zipf=0.5: choose hot experts or Zipf"):
        K.resolve_params({**SMALL, "hot": 1, "zipf": 0.5})
    with pytest.raises(UserError, match="hot_layout must be one of spread, consecutive"):
        K.resolve_params({**SMALL, "hot_layout": "left"})


def test_a_launch_skew_delays_each_die_by_its_word_and_stays_bit_exact():
    """``launch_skew_ns``: every die spins until its core has run its host-placed delay (data,
    CTRL word 3; the programs do not depend on it), then runs as before; bit-exact on both
    systems, and each die's first MARK comes after its delay."""
    from epfabric.sw.kernels.dispatch import launch_delays
    from epfabric.sw.presets import get_preset
    params = {**SMALL, "launch_skew_ns": 300.0, "seed": 2}
    delays = launch_delays(K.resolve_params(params), 2, get_preset("tiny"))
    assert len(set(delays)) == 2 and max(delays) <= 300
    for system in ("cann", "ubep"):
        result = run_kernel(K, backend(fast_simulator()), max_cycles=KERNEL_CASE_MAX_CYCLES,
                            params={**params, "system": system}, **SHAPE)
        reports = result.reports
        assert result.correct, result.problems
        for r in range(2):
            first = min(m["cycle"] for m in reports[0].marks() if m["rank"] == r)
            assert first >= delays[r]
    cfg = K.configs("tiny", SHAPE["topology"], 2, SMALL)[0]
    progs = [K.programs(cfg, K.resolve_params({**SMALL, "launch_skew_ns": t, "seed": s}))
             for t, s in ((300.0, 2), (900.0, 5))]
    assert all(progs[0][k].assemble() == progs[1][k].assemble() for k in progs[0])
    with pytest.raises(UserError, match=r"launch_skew_ns must be in \[0, 1e7\], not -1.0"):
        K.resolve_params({**SMALL, "launch_skew_ns": -1.0})


@pytest.mark.parametrize("system", ["cann", "ubep"])
def test_the_report_carries_the_link_classes(system):
    """2 dies of one NPU: every remote token block crosses one direct link, so the measured
    data blocks are the routing's remote slots (counted here); the other classes are empty, and
    the run's line shows them (dispatch+combine on every link kind: tests/sw/test_combine.py)."""
    from epfabric.sw.kernels.dispatch import link_line
    m, report, inputs = pysim_run(system)
    links = K.check(m, report, inputs)["links"]
    w = inputs[0]
    remote = sum(int(e) // w.epr != s for s in range(2) for e in w.topk_idx[s].reshape(-1))
    assert remote > 0
    assert links["measured"]["direct"]["blocks"] == links["exact"]["direct"] == remote
    assert all(links["measured"][k] == {"blocks": 0, "small": 0, "bytes": 0}
               for k in ("up", "down", "t2_up", "t2_down"))
    assert link_line(links).startswith(
        f"  links (bytes; data blocks measured, exact, closed form): direct "
        f"{links['measured']['direct']['bytes']:,} B ({remote} blocks + ")


def test_a_star_has_no_link_classes():
    from epfabric.sw.kernels.dispatch import links_of
    from epfabric.sw.config import MachineConfig
    star = MachineConfig("incmoe-testbed", topology=("star", 2))
    assert "link_blocks.up" not in star.status_ports()["counters"]
    assert links_of(None, None, star, {"system": "cann"}, "dispatch", None) is None


def test_the_presets_vector_width_builds_the_cores_and_shortens_canns_counting(monkeypatch):
    """A preset's ``vector_lanes`` is the width of the cores the dispatch's machine is built
    with: at 128 lanes (Ascend's 256 B a repeat) CANN's run is correct and its Token-Sending
    shorter (the longest 339 against 340 cycles): its vector instructions over the BS·k = 18
    routing ids, the per-slot prefix ``vcount`` among them, take one beat instead of two. The
    run is no longer (638 cycles both: the SyncAlls absorb the one cycle). At the tiny
    preset's 16 lanes the kernel sizes the small case's machine for these parameters: its
    build (shared with the tests above; cycles are the same on every simulator) serves that
    run."""
    from epfabric.sw import presets
    params = {"batch": 6, "topk": 3, "experts": 4, "system": "cann"}
    assert presets.PRESETS["tiny"].vector_lanes == 16
    assert K.configs("tiny", SHAPE["topology"], 2, params) == K.configs("tiny", SHAPE["topology"],
                                                                        2, SMALL)
    runs = {}
    for lanes, sim in ((16, fast_simulator()), (128, "pysim")):
        monkeypatch.setitem(presets.PRESETS, "tiny",
                            dataclasses.replace(presets.PRESETS["tiny"], vector_lanes=lanes))
        result = run_kernel(K, backend(sim), **SHAPE, params=params,
                            max_cycles=KERNEL_CASE_MAX_CYCLES)
        assert result.correct, (lanes, result.problems)
        runs[lanes] = result.runs[0]
        assert runs[lanes].config.lanes == lanes
    sending = {k: r.check["send_max_cycles"] for k, r in runs.items()}
    assert sending[128] < sending[16], sending
    assert runs[128].cycles <= runs[16].cycles, {k: r.cycles for k, r in runs.items()}


# --- issue 30: MTE copies and the split CalCumSum scan ----------------------------------------

#: four AIVs a die, so UBEP can have three C-AIVs (chunks of the 2 x 4 entries)
WIDE = {**SMALL, "experts": 8}
WIDE_SHAPE = {**SHAPE, "aivs": 4}


def _wide_run(params, knobs=None):
    """On the shared 2-die x 4-AIV machine (:func:`utils.four_aiv_machine`: one native build
    serves these runs and the UBEP experiments' tests); a run repeated by another test (same
    resolved parameters and knobs) is read from the first."""
    params = K.resolve_params({**WIDE, **params})
    return _wide_run_cached(tuple(sorted(params.items())), tuple(sorted((knobs or {}).items())))


@functools.lru_cache(maxsize=None)
def _wide_run_cached(params, knobs):
    params, knobs = dict(params), dict(knobs) or None
    result = run_kernel(K, backend(machine_simulator()), params=params,
                        max_cycles=KERNEL_CASE_MAX_CYCLES * (1 + 20 * bool(knobs)),
                        knobs=knobs, configs=[four_aiv_machine(K, K.resolve_params(params))],
                        **WIDE_SHAPE)
    reports = result.reports
    assert result.correct, result.problems
    return result.runs[0], reports[0]


@pytest.mark.parametrize("variant", [
    {"system": "cann", "copies": "mte"},
    {"system": "ubep", "copies": "mte", "cumsum_aivs": 1},
    {"system": "ubep", "cumsum_scan": "split", "cumsum_aivs": 3},
    {"system": "ubep", "copies": "mte", "cumsum_scan": "split", "cumsum_aivs": 2}],
    ids=["cann-mte", "ubep-mte", "ubep-split", "ubep-mte-split"])
def test_mte_copies_and_the_split_scan_deliver_what_the_defaults_do(variant):
    """Bit-exact, and the same OUT and counts as the default programs, with and without a
    read start (the knob moves only time; a flag found missing in a copy is polled)."""
    default, _ = _wide_run({k: v for k, v in variant.items() if k not in ("copies", "cumsum_scan")})
    for knobs in (None, {"read_extra": 45, "poll_extra": 45}):
        run, _ = _wide_run(variant, knobs)
        assert run.check["out_payload_digest"] == default.check["out_payload_digest"]
        assert run.check["recv_count"] == default.check["recv_count"]


def test_an_mte_copy_pays_its_start_once():
    """With a read start of 200 cycles (a copy's start and a scalar read's, both knobs),
    'block' reads pay it for every status word its Flag
    Verification, CalCumSum and reordering read; 'mte' copies the slice once and the blocks
    before it once: CANN's run grows less (measured at 0d1ee8f+: 3,196 against 4,589 cycles;
    both also pay it in each SyncAll's polls and each token copy)."""
    grow = {}
    for copies in ("block", "mte"):
        base, _ = _wide_run({"system": "cann", "copies": copies})
        slow, _ = _wide_run({"system": "cann", "copies": copies},
                            {"read_extra": 200, "poll_extra": 200})
        grow[copies] = slow.cycles - base.cycles
    assert 0 < grow["mte"] < grow["block"] - 5 * 200


def test_the_split_scan_shortens_the_c_aivs_chain_when_reads_cost():
    """Three C-AIVs: 'redundant' makes the last poll every count before its experts' (all 8 of
    the die's entries); 'split' gives each a chunk and passes one offset along. With a read
    start of 300 cycles (copies and scalar reads) the last C-AIV's CalCumSum ends earlier with
    'split'."""
    ends = {}
    for scan in ("redundant", "split"):
        run, _ = _wide_run({"system": "ubep", "cumsum_scan": scan, "cumsum_aivs": 3},
                           {"read_extra": 300, "poll_extra": 300})
        ends[scan] = max(t["cumsum"] for key, t in run.check["phases"].items() if "cumsum" in t)
    assert ends["split"] < ends["redundant"]


def test_the_split_scan_programs_poll_a_chunk_each():
    """The programs, not the data: with C = 3 and 8 entries a die, C-AIV c polls its chunk's
    counts (and the one before it) and, past the first, one offset; 'redundant' polls every
    count up to its last expert's."""
    from epfabric.hw.isa import BY_MNEMONIC
    poll = BY_MNEMONIC["poll"].opcode
    params = K.resolve_params({**WIDE, "system": "ubep", "cumsum_aivs": 3})
    cfg = K.configs("tiny", WIDE_SHAPE["topology"], 4, params)[0]

    def polls(scan):
        progs = K.programs(cfg, {**params, "cumsum_scan": scan})
        # the C-AIVs are cores 1..3; their polls before the reordering's: count the first
        # CalCumSum polls by the program text (the reordering polls the same in both)
        return [sum(1 for w in progs[(0, c)].assemble() if w & 63 == poll) for c in (1, 2, 3)]
    redundant, split = polls("redundant"), polls("split")
    assert split[2] < redundant[2]
    with pytest.raises(UserError, match="cumsum_scan must be one of redundant, split"):
        K.resolve_params({**WIDE, "system": "ubep", "cumsum_scan": "tree"})
    with pytest.raises(UserError, match="copies must be one of block, mte"):
        K.resolve_params({**WIDE, "copies": "dma"})

