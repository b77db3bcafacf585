"""The ``combine`` kernel (sw/kernels/combine.py, sw/ubep/combine.py): CANN's and UBEP's."""

import pytest

from epfabric.sim.backends.machine import backend
from epfabric.sw.kernels import KERNELS, run_kernel
from epfabric.sw.kernels.dispatch import layout_of
from epfabric.sw.ubep.reference import slot_index
from epfabric.sw.ubep.combine import PHASES
from utils import (SMALL_DISPATCH, CM384_MAX_CYCLES, KERNEL_CASE_MAX_CYCLES, cm384_machine, four_aiv_machine, kernel_cases,
                   machine_simulator, require_simulator, run_on_machine)

K = KERNELS["combine"]
SMALL = SMALL_DISPATCH          # the small case (tests/utils.py), shared with other files
SHAPE = dict(preset="tiny", topology=("superpod", 2, 1, 1), aivs=2)


pysim_run, outcome = kernel_cases(K, SMALL, SHAPE)


@pytest.mark.parametrize("system", ["cann", "ubep"])
def test_combine_is_bit_exact_with_every_phase_marked(system):
    result, _, _ = outcome("pysim", system)
    assert result.correct, result.problems
    run = result.runs[0]
    assert run.check["dispatch"]["correct"]
    assert set(run.check["phases"]) == {"0.0", "0.1", "1.0", "1.1"}
    for times in run.check["phases"].values():
        assert list(times) == list(PHASES[system])
        assert list(times.values()) == sorted(times.values())
        assert times[PHASES[system][-1]] <= run.cycles


# Icarus: UBEP in CI (its combine run includes UBEP's dispatch), CANN (covered by
# test_dispatch for the dispatch) is `slow`.
@pytest.mark.parametrize("sim, system", [
    ("verilator", "cann"), ("verilator", "ubep"), ("icarus", "ubep"),
    pytest.param("icarus", "cann", marks=pytest.mark.slow)])
def test_same_cycles_and_traces_as_amaranths_simulator(sim, system):
    require_simulator(sim)
    ref, got = outcome("pysim", system), outcome(sim, system)
    assert got[0].correct, got[0].problems
    a, b = got[0].runs[0], ref[0].runs[0]
    assert a.cycles == b.cycles and a.check["phases"] == b.check["phases"]
    for key in ("cycles", "phases"):
        assert a.check["dispatch"][key] == b.check["dispatch"][key]
    assert got[1] == ref[1] and got[2] == ref[2]


def test_the_checker_sees_a_wrong_answer():
    m, report, inputs = pysim_run("cann")
    assert K.check(m, report, inputs)["correct"]
    w = inputs[0]
    w.topk_w[1][3][1] += 1                                       # what rank 1 token 3 weighs
    try:
        verdict = K.check(m, report, inputs)
    finally:
        w.topk_w[1][3][1] -= 1
    assert not verdict["correct"]
    assert verdict["problems"] == ["rank 1: YOUT token 3 of 4 differs from numpy"]


def test_a_combine_that_does_not_poll_the_flags_is_caught():
    """On cm384 an answer takes 218 ns to the other die: a source that does not poll sums zeros."""
    require_simulator("native")          # one cm384 build serves this and test_dispatch's
    run = run_on_machine(K, "native", cm384_machine(),
                         {**SMALL, "system": "ubep", "broken": "no_flag_poll"},
                         max_cycles=CM384_MAX_CYCLES)
    assert not run["correct"]
    assert any("YOUT token" in p for p in run["problems"])
    assert run["dispatch"]["correct"]


@pytest.mark.parametrize("system, blocks", [("cann", 1), ("cann", 4), ("ubep", 4)])
def test_correct_at_cm384_latencies(system, blocks):
    """Normal dispatch + combine runs where a flag takes 218 ns to the other die, with 1- and
    4-block tokens. They catch what the tiny preset's latencies hide (its flags arrive before
    anyone looks): a CANN Flag Verification that accepts the previous epoch's flags (the
    words start at 0, epoch 0; mutation ``cann_flag_accepts_previous_epoch``), a UBEP
    reorder that polls only a token's first block (``ubep_reorder_polls_first_block_only``)
    and a combine that sums block 0 of the answers into every block
    (``combine_reads_block_0_only``)."""
    require_simulator("native")          # the cm384 build of the flag tests above and below
    run = run_on_machine(K, "native", cm384_machine(),
                         {**SMALL, "system": system, "hidden_blocks": blocks},
                         max_cycles=CM384_MAX_CYCLES)
    assert run["correct"], run["problems"]
    assert run["dispatch"]["correct"], run["dispatch"]["problems"]


def test_ubep_and_cann_combine_give_the_same_payload():
    runs = {s: outcome("pysim", s)[0].runs[0] for s in ("cann", "ubep")}
    assert runs["cann"].check["y_payload_digest"] == runs["ubep"].check["y_payload_digest"]
    assert len(set(runs["cann"].check["y_payload_digest"])) == 2        # two ranks, two different y


def test_ubep_inc_is_bit_exact_and_the_same_on_three_simulators():
    """UBEP-INC's dispatch (inside its combine run) and combine are bit-exact against numpy --
    the reference UBEP's and CANN's outputs match too, so OUT's payload and y are theirs -- with
    every phase marked; each run put exactly the routing's data blocks on the links
    (sw/ubep/traffic.py, tolerance 0), fewer than UBEP's; the checker sees a wrong weight;
    Verilator and Icarus give the same cycles, phases, trace and counters (one pysim run serves
    all: it is the slowest part)."""
    from epfabric.sw.ubep.traffic import LINK_KINDS, exact_link_blocks
    result, trace, counters = outcome("pysim", "ubep-inc")
    assert result.correct, result.problems
    run = result.runs[0]
    assert run.check["dispatch"]["correct"]
    for times in run.check["phases"].values():
        assert list(times) == list(PHASES["ubep-inc"])
        assert list(times.values()) == sorted(times.values())
        assert times["c_combine"] <= run.cycles
    m, report, inputs = pysim_run("ubep-inc")
    w = inputs[0]
    for kernel, links in (("dispatch", run.check["dispatch"]["links"]), ("combine", run.check["links"])):
        measured = {kind: links["measured"][kind]["blocks"] for kind in LINK_KINDS}
        assert measured == exact_link_blocks(w, SHAPE["topology"], "ubep-inc", kernel), kernel
        assert 0 < measured["direct"] < exact_link_blocks(w, SHAPE["topology"], "ubep",
                                                          kernel)["direct"]
    w.topk_w[1][3][1] += 1                                       # what rank 1 token 3 weighs
    try:
        verdict = K.check(m, report, inputs)
    finally:
        w.topk_w[1][3][1] -= 1
    assert verdict["problems"] == ["rank 1: YOUT token 3 of 4 differs from numpy"]
    for sim in ("verilator", "icarus"):
        require_simulator(sim)
        got = outcome(sim, "ubep-inc")
        assert got[0].correct, (sim, got[0].problems)
        a, b = got[0].runs[0], run
        assert a.cycles == b.cycles and a.check["phases"] == b.check["phases"], sim
        assert a.check["dispatch"]["cycles"] == b.check["dispatch"]["cycles"], sim
        assert a.check["dispatch"]["phases"] == b.check["dispatch"]["phases"], sim
        assert a.check["y_payload_digest"] == b.check["y_payload_digest"], sim
        assert (a.check["dispatch"]["out_payload_digest"]
                == b.check["dispatch"]["out_payload_digest"]), sim
        assert got[1] == trace and got[2] == counters, sim


# slow: a 45 s native build; tests/hw/test_inc_switch.py runs the planar switch on Icarus
@pytest.mark.slow
def test_ubep_inc_on_planar_switches_is_the_same_run(monkeypatch):
    """The native backend builds a switch too wide for one Amaranth module as a control part
    and data planes; an in-network one (:class:`~epfabric.hw.inc_switch.PlanarIncSwitch`)
    also splits its reduction unit's sums by plane. Every switch of this machine built that
    way, with 96-bit planes (256 data bits: a plane of header only, one of header and four
    lanes, one of 64 bits): the ubep-inc dispatch + combine is the same run as Amaranth's
    simulator's -- cycles, phases, MARK trace, counters -- and bit-exact."""
    require_simulator("native")
    from epfabric.hw import switch, topology
    from epfabric.sim.backends.native_build import native_design
    from epfabric.sim.backends.machine import machine_spec
    monkeypatch.setattr(topology, "MAX_INSTANCE_OUTPUT_BITS", 0)
    monkeypatch.setattr(switch.PlanarSwitch, "PLANE_BITS", 96)
    m, _report, _inputs = pysim_run("ubep-inc")
    modules = native_design(machine_spec(m.config))["modules"]
    switches = [name for name in modules if name.startswith("epf_switch")]
    assert switches and all(f"module {name}_dp96h96(" in modules[name]
                            and f"module {name}_dp96h32(" in modules[name]
                            and f"module {name}_dp64(" in modules[name] for name in switches)
    ref, got = outcome("pysim", "ubep-inc"), outcome("native", "ubep-inc")
    assert got[0].correct, got[0].problems
    a, b = got[0].runs[0], ref[0].runs[0]
    assert a.cycles == b.cycles and a.check["phases"] == b.check["phases"]
    assert a.check["dispatch"]["cycles"] == b.check["dispatch"]["cycles"]
    assert got[1] == ref[1] and got[2] == ref[2]


def test_the_combine_is_fed_what_the_dispatch_delivered():
    m, _, (w, params, _before, delivered, _expected, _dispatch) = pysim_run("ubep")
    lay = layout_of(m.config, params)
    image = lambda r, addr: m._mem.get((r, addr))                 # the combine run's image
    for r in range(2):
        expand = [image(r, (lay.EXPAND << 9) + 4 * n) for n in range(lay.slots)]
        assert expand == slot_index(w.topk_idx[r]).reshape(-1).tolist()
        e = r * lay.epr                                            # the first row's expert
        fed = [image(r, (lay.OUT << 9) + 4 * n) for n in range(128)]
        lanes = lambda v, f: (((v >> 16) * f & 0xFFFF) << 16) | ((v & 0xFFFF) * f & 0xFFFF)
        assert fed == [lanes(int(v), e + 1) for v in delivered[r][0, 0]]  # stand-in FFN of it
        assert delivered[r][0, 0, 0] >> 16 == 0x0D0D              # as delivered: a TFF header
        assert not any((r, (lay.X << 9) + 4 * n) in m._mem for n in range(8))


@pytest.mark.parametrize("params, message", [
    ({"broken": "bogus"}, "broken must be one of"),
    ({"broken": "no_flag_poll", "system": "cann"}, "negative controls of system='ubep' or"),
    ({"system": "mpi"}, "system must be one of"),
])
def test_bad_parameters_are_named(params, message):
    with pytest.raises(ValueError, match=message):
        K.resolve_params(params)


def test_the_inner_dispatch_runs_under_the_callers_watchdog():
    """The combine runs its dispatch first: that run is bounded by the caller's max_cycles too."""
    from epfabric.sw.machine import WatchdogTimeout
    with pytest.raises(WatchdogTimeout) as info:
        run_kernel(K, backend("pysim"), params={**SMALL, "system": "cann"}, max_cycles=40,
                   **SHAPE)
    assert info.value.report.cycles == 40 and info.value.report.timeout


def test_five_experts_per_rank_and_top6_on_both_systems():
    """The combine after a dispatch whose expert → rank split and slot → token are not shifts
    (5 experts per rank, top-6; DeepSeek-V2's k): both bit-exact, the same weighted sums."""
    runs = {}
    for system in ("cann", "ubep"):
        p = {**SMALL, "experts": 10, "topk": 6, "system": system}
        run = run_on_machine(K, machine_simulator(), four_aiv_machine(K, p), p)
        assert run["correct"], (system, run["problems"])
        assert run["dispatch"]["correct"]
        runs[system] = run
    assert runs["cann"]["y_payload_digest"] == runs["ubep"]["y_payload_digest"]


#: the smallest superpod with every link kind: 2 dies an NPU, 1 NPU a board, 2 boards
LINKS_SHAPE = dict(preset="tiny", topology=("superpod", 2, 1, 2), aivs=2)
LINKS_SMALL = {"batch": 4, "topk": 2, "experts": 8}
links_run, _ = kernel_cases(K, LINKS_SMALL, LINKS_SHAPE)


@pytest.mark.parametrize("system", [                 # 23 s of pysim each: UBEP's is `slow`
    "cann", pytest.param("ubep", marks=pytest.mark.slow)])
def test_link_counters_are_the_exact_count_of_the_routing(system):
    """Dispatch (the combine run's first machine run) and combine on 4 dies that use every
    link kind: the measured data blocks per link class are exactly what the routing makes the
    kernels store (sw/ubep/traffic.py, tolerance 0), the small flits are there, and every flit a
    rank sent entered a direct link or its uplink (and every one it got left one of those)."""
    from epfabric.sw.ubep.traffic import LINK_KINDS, exact_link_blocks
    m, report, inputs = links_run(system)
    verdict = K.check(m, report, inputs)
    assert verdict["correct"], verdict["problems"]
    w = inputs[0]
    for kernel, links, counters in (("dispatch", verdict["dispatch"]["links"], inputs[5].counters),
                                    ("combine", verdict["links"], report.counters)):
        measured = {kind: links["measured"][kind]["blocks"] for kind in LINK_KINDS}
        want = exact_link_blocks(w, LINKS_SHAPE["topology"], system, kernel)
        assert measured == links["exact"] == want, kernel
        assert all(want[kind] > 0 for kind in LINK_KINDS)       # the case uses every kind
        small = {kind: links["measured"][kind]["small"] for kind in LINK_KINDS}
        assert small["up"] > 0 and small["direct"] > 0          # counts, flags and acks
        total = {kind: measured[kind] + small[kind] for kind in LINK_KINDS}
        assert sum(counters["tx_blocks"]) == total["direct"] + total["up"]
        assert sum(counters["rx_blocks"]) == total["direct"] + total["down"]
        assert total["up"] == total["down"] and total["t2_up"] == total["t2_down"]
        assert set(links["closed_form"]) == set(LINK_KINDS)
