"""IncSwitch: multicast copies where paths part, reductions where they meet, under random stalls."""

import random

import pytest

from epfabric.hw.inc_reduce import ReduceUnit
from epfabric.hw.inc_switch import inc_fields, inc_payload
from epfabric.hw.switch import Switch
from epfabric.hw.validate import UserError
from epfabric.sim.tb.inc_traffic import (check_multicast, check_reductions, flit,
                                         multicast_queues, pack, reduction_queues,
                                         traffic_intent, unpack)
from rejected import rejected
from utils import ComponentSpec, require_simulator, run, simulators

RANKS = 4
HEADER = 128
LANES = (256 - HEADER) // 16
COUNTERS = ("o_absorbed", "o_released", "o_errors", "o_open")


def spec(**params):
    return ComponentSpec("epfabric.hw.inc_switch:StarIncSwitch",
                         {"ranks": RANKS, "depth": 4, "window": 8, "data_bits": 256,
                          "header_bits": HEADER, "counter_width": 16, **params})


def traffic(rounds, cycles, seed=0, simulator="pysim", **kw):
    return run(spec(), traffic_intent, {"rounds": rounds, "cycles": cycles, "ranks": RANKS,
                                        "counters": COUNTERS, "seed": seed, **kw},
               simulator=simulator)


def reductions(rng, groups):
    return reduction_queues(rng, RANKS, groups, window=8, lanes=LANES, header_bits=HEADER)


def test_multicast_reaches_each_destination_once():
    queues, sent = multicast_queues(random.Random(5), RANKS, 24)
    res, _ = traffic([queues], 600, seed=2)
    assert res["left"] == [0]
    check_multicast(res["got"][0], sent)
    assert sum(map(len, res["got"][0])) == sum(bin(m).count("1") for _, m in sent)
    assert res["counters"]["o_absorbed"] == 0


def test_multicast_is_one_flit_per_output_per_cycle():
    """A flit to all four dies from an idle switch: four copies in the same cycle, then the
    input takes its next flit (one cycle per multicast when the outputs are free)."""
    queues = [[flit(src=0, mcast=1, mask=0b1111, data=k + 1) for k in range(8)], [], [], []]
    res, _ = traffic([queues], 40, stall_p=0.0, offer_p=1.0)
    got = res["got"][0]
    for p in range(RANKS):
        assert [f["data"] for f in got[p]] == list(range(1, 9))
    for k in range(8):
        assert len({got[p][k]["cycle"] for p in range(RANKS)}) == 1
    assert [got[0][k]["cycle"] - got[0][0]["cycle"] for k in range(8)] == list(range(8))


def test_reductions_release_once_with_the_exact_sum():
    queues, want = reductions(random.Random(11), 20)
    res, _ = traffic([queues], 400, seed=3)
    assert res["left"] == [0]
    check_reductions(res["got"][0], want, header_bits=HEADER, lanes=LANES)
    c = res["counters"]
    merged = [k for k, w in want.items() if w[1] > 1]
    assert c["o_released"] == len(merged)                      # one-contributor groups bypass
    assert c["o_absorbed"] == sum(want[k][1] for k in merged)
    assert c["o_errors"] == 0 and c["o_open"] == 0


def test_slots_are_reused_run_after_run():
    """The same groups in a second run, with other data: its sums are its own (a released slot
    is free, nothing carries over)."""
    q1, w1 = reductions(random.Random(4), 8)
    q2, w2 = reductions(random.Random(4), 8)
    q2 = [[dict(f, data=f["data"] ^ (0x1234 << HEADER)) for f in q] for q in q2]
    w2 = {k: (mask, n, header, [sum(unpack(f["data"], HEADER, LANES)[1][0] for q in q2 for f in q
                                    if (f["dst"], f["addr"]["block"]) == k) & 0xFFFF] + sums[1:])
          for k, (mask, n, header, sums) in w2.items()}
    res, _ = traffic([q1, q2], 300, seed=1)
    assert res["left"] == [0, 0]
    check_reductions(res["got"][0], w1, header_bits=HEADER, lanes=LANES)
    check_reductions(res["got"][1], w2, header_bits=HEADER, lanes=LANES)
    assert res["counters"]["o_open"] == 0 and res["counters"]["o_errors"] == 0


def test_the_header_is_not_summed():
    """Two contributions with the same flag header and lanes 1 and 2: the result has the
    header once and lane 3."""
    f = [flit(src=s, dst=0, red=1, mask=0b0110, count=1, block=2,
              data=pack(0x0D0D0007, [s] + [0] * (LANES - 1), HEADER)) for s in (1, 2)]
    res, _ = traffic([[[], [f[0]], [f[1]], []]], 30, stall_p=0.0, offer_p=1.0)
    (out,) = res["got"][0][0]
    assert unpack(out["data"], HEADER, LANES) == (0x0D0D0007, [3] + [0] * (LANES - 1))
    assert out["count"] == 2


@pytest.mark.parametrize("hdl_simulator", simulators("icarus", "verilator", slow=("icarus",)),
                         indirect=True)
def test_the_same_cycle_for_cycle_on_verilog_simulators(hdl_simulator):
    """Multicast and reduction traffic together, under stalls: every delivered flit, its
    cycle and the counters are Amaranth's simulator's."""
    rng = random.Random(8)
    mq, _ = multicast_queues(rng, RANKS, 8)
    rq, _ = reductions(rng, 12)
    queues = [a + b for a, b in zip(mq, rq)]
    ref, ref_cycles = traffic([queues], 300, seed=6)
    got, cycles = traffic([queues], 300, seed=6, simulator=hdl_simulator)
    assert ref["left"] == [0]
    assert (got, cycles) == (ref, ref_cycles)


def test_the_planar_form_is_the_same_switch():
    """The switch as the native backend builds one too wide for an Amaranth module
    (:class:`~epfabric.hw.inc_switch.PlanarIncSwitch`): a control part and data planes of 48
    bits -- two of header only, one of header and a lane, two of three lanes, one of a lane
    -- each summing its own lanes. Multicasts and reductions under stalls on Icarus:
    every delivered flit, its cycle and the counters are the switch's own, on Amaranth's
    simulator."""
    from epfabric.hw.inc_switch import PlanarStarIncSwitch
    rng = random.Random(8)
    mq, _ = multicast_queues(rng, RANKS, 8)
    rq, want = reductions(rng, 12)
    queues = [a + b for a, b in zip(mq, rq)]
    ref, ref_cycles = traffic([queues], 300, seed=6)
    assert ref["left"] == [0] and ref["counters"]["o_released"] > 0
    check_reductions(ref["got"][0], want, header_bits=HEADER, lanes=LANES)
    planar = ComponentSpec("epfabric.hw.inc_switch:PlanarStarIncSwitch",
                           {**spec().params, "plane_bits": 48})
    assert [m for _lo, _w, m in PlanarStarIncSwitch.planar_of(**planar.params)._planes("p")] == \
        ["p_dp48h48", "p_dp48h48", "p_dp48h32", "p_dp48", "p_dp48", "p_dp16"]
    require_simulator("icarus")
    got = run(planar, traffic_intent, {"rounds": [queues], "cycles": 300, "ranks": RANKS,
                                       "counters": COUNTERS, "seed": 6}, simulator="icarus")
    assert got == (ref, ref_cycles)


def test_a_plane_that_splits_a_lane_is_refused():
    from epfabric.hw.inc_switch import PlanarStarIncSwitch
    with pytest.raises(UserError, match=r"plane 5 of 40 bits starts at data bit 200, inside "
                                        r"a 16-bit lane"):
        rejected(PlanarStarIncSwitch, **{**spec().params, "plane_bits": 40})


def test_bad_parameters_are_named():
    """An in-network switch's tables are its inner switch's and reduction unit's to check
    (each refuses them before it builds anything: a block built before a refusal would be
    built for nothing)."""
    with pytest.raises(UserError, match="multicast needs payload fields mcast, mask"):
        rejected(Switch, ports=2, multicast=True)
    inner = dict(ports=5, routes=range(4), payload=inc_payload(4), multicast=True, reduce_port=4)
    with pytest.raises(UserError, match=r"subtree has 3 entries, routes 4"):
        rejected(Switch, **inner, subtree=[0, 0, 0])
    with pytest.raises(UserError, match=r"subtree\[1\]"):
        rejected(Switch, **inner, subtree=[0, 99, 0, 0])
    with pytest.raises(UserError, match="window 64 needs 6 bits of addr.block"):
        rejected(ReduceUnit, payload=inc_payload(4, block_bits=4), subtree=[0] * 4, window=64)
    assert inc_fields(6) == {"mcast": 1, "red": 1, "mask": 6, "count": 3}


def _float_queues(queues, dtype, seed):
    """``queues`` with each contribution's lanes replaced by random finite ``dtype`` values
    of both signs over 2**-20..2**20; returns the queues and ``{(dst, block): terms}``."""
    import numpy as np
    from epfabric.sw.lane_sums import to_bits
    rng = np.random.default_rng(seed)
    bits = 32 if dtype == "fp32" else 16
    lanes = (256 - HEADER) // bits
    terms, out = {}, []
    for q in queues:
        new = []
        for f in q:
            if f["red"]:
                x = (rng.choice([-1.0, 1.0], lanes) * rng.uniform(1, 2, lanes)
                     * 2.0 ** rng.integers(-20, 21, lanes)).astype(np.float32)
                v = to_bits(x, dtype)
                terms.setdefault((f["dst"], f["addr"]["block"]), []).append(v)
                data = f["data"] & ((1 << HEADER) - 1)
                for k, w in enumerate(v):
                    data |= int(w) << (HEADER + bits * k)
                f = dict(f, data=data)
            new.append(f)
        out.append(new)
    return out, {k: np.array(v) for k, v in terms.items()}


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_float_reductions_are_within_the_bound(dtype):
    """The reduction traffic of :func:`test_reductions_release_once_with_the_exact_sum` with
    floating-point lanes, under stalls: the order of a group's contributions is the
    arbiter's, so each result is checked against the exact sum with the any-order bound
    (:func:`~epfabric.sw.lane_sums.compare`: ``(n - 1)`` fp32 roundings, one bf16)."""
    import numpy as np
    from epfabric.sw.lane_sums import compare
    queues, want = reductions(random.Random(11), 20)
    fq, terms = _float_queues(queues, dtype, 4)
    args = {"rounds": [fq], "cycles": 400, "ranks": RANKS, "counters": COUNTERS, "seed": 3}
    res, _ = run(spec(dtype=dtype), traffic_intent, args)
    assert res["left"] == [0]
    assert res["counters"]["o_errors"] == 0 and res["counters"]["o_open"] == 0
    bits = 32 if dtype == "fp32" else 16
    lanes = (256 - HEADER) // bits
    checked = 0
    for p, flits in enumerate(res["got"][0]):
        for f in flits:
            t = terms[(p, f["block"])]
            got = np.array([(f["data"] >> (HEADER + bits * k)) & ((1 << bits) - 1)
                            for k in range(lanes)], dtype=np.uint32)
            verdict = compare(got, t, dtype)
            assert verdict["ok"], (p, f["block"], verdict)
            checked += 1
    assert checked == len(want)


@pytest.mark.slow
def test_the_planar_form_of_a_float_switch_is_the_same_switch():
    """fp32 lanes: the planar form (64-bit planes: two of header, two of two lanes; the data
    planes follow the control's pipeline through ``radvance``) delivers every flit in the
    cycle, with the bits, of the switch on Amaranth's simulator."""
    from epfabric.hw.inc_switch import PlanarStarIncSwitch
    rng = random.Random(8)
    mq, _ = multicast_queues(rng, RANKS, 8)
    rq, _ = reductions(rng, 12)
    fq, _ = _float_queues(rq, "fp32", 6)
    queues = [a + b for a, b in zip(mq, fq)]
    args = {"rounds": [queues], "cycles": 300, "ranks": RANKS, "counters": COUNTERS, "seed": 6}
    ref = run(spec(dtype="fp32"), traffic_intent, args)
    assert ref[0]["left"] == [0] and ref[0]["counters"]["o_released"] > 0
    planar = ComponentSpec("epfabric.hw.inc_switch:PlanarStarIncSwitch",
                           {**spec(dtype="fp32").params, "plane_bits": 64})
    assert [m for _lo, _w, m in PlanarStarIncSwitch.planar_of(**planar.params)._planes("p")] == \
        ["p_dp64h64", "p_dp64h64", "p_dp64", "p_dp64"]
    require_simulator("icarus")
    assert run(planar, traffic_intent, args, simulator="icarus") == ref
