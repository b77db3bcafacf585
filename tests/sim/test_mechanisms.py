"""The ``mechanisms`` micro-benchmarks (sim/lab/experiments/mechanisms.py): each timing
mechanism alone, against its closed form."""

import functools

import pytest

from epfabric.hw.validate import UserError
from epfabric.sim.lab.experiments import EXPERIMENTS
from epfabric.sim.lab.experiments.mechanisms import (DESTINATIONS, VECTOR_LANES, VECTOR_REPEAT,
                                                      READ_REPEAT, barrier_release,
                                                      inject_streams, local_latency,
                                                      poll_expected, read_runs,
                                                      store_streams, vector_runs, window_expected)
from epfabric.sw.presets import get_preset

#: per class: 2 then 4 block stores; then 4 word stores two hops away
SEGMENTS = [seg for d in DESTINATIONS.values() for seg in ((d, 2, "stb"), (d, 4, "stb"))] \
    + [(DESTINATIONS["two_hop"], 4, "sw")]


@pytest.fixture
def streams():
    """``{window: [cycles of each segment]}`` on the tiny preset (pysim)."""
    return _streams()


@functools.lru_cache(maxsize=None)
def _streams():
    # called from a test, not a module fixture: a module fixture is set up before
    # tests/conftest.py shares the test process's pysim simulators, so each of its runs
    # would build the design again (one build serves both windows here)
    return {w: store_streams(preset="tiny", backend="pysim", segments=SEGMENTS, window=w)
            for w in (1, 2)}


@pytest.mark.parametrize("window", [1, 2])
def test_each_window_of_block_stores_costs_one_round_trip(streams, window):
    """With W staging buffers, each W more blocks cost one round trip ``2L + 3`` (the store's
    way out, 2 cycles to leave the destination, the ack's way back, the cycle it is counted):
    the 2 blocks that 4 adds cost ``2/W`` round trips exactly, per distance class."""
    lat = get_preset("tiny").latency_cycles()
    for k, cls in enumerate(DESTINATIONS):
        two, four = streams[window][2 * k], streams[window][2 * k + 1]
        assert four - two == 2 // window * (2 * lat[cls] + 3), (cls, two, four)
        # and each stream whole, its issue included (the experiment's closed form)
        assert (two, four) == (window_expected(lat[cls], window, 2),
                               window_expected(lat[cls], window, 4)), cls


def test_word_stores_do_not_see_the_window(streams):
    """The knob limits block stores (a sender's staging buffers); flag and count words keep
    the core's whole window."""
    assert streams[1][-1] == streams[2][-1]
    assert streams[1][-1] < streams[1][-2]           # 4 words two hops away < 4 blocks at W = 1


@functools.lru_cache(maxsize=None)
def _reads(extra, poll_extra):
    return read_runs(preset="tiny", backend="pysim", extra=extra, poll_extra=poll_extra)


@pytest.mark.parametrize("extra", [3, 40])
def test_every_read_pays_the_read_extra_knob(extra):
    """A copy of :data:`READ_REPEAT` blocks (``ldb``, then ``ldbc``) pays ``read_extra`` once:
    ``R`` cycles more at ``read_extra = R`` than at 0, not ``8 R``; the loads and polls, scalar
    reads of global memory, do not pay it (``1 + L`` each, a load as much as a poll's read)."""
    base = _reads(None, None)
    got = _reads(extra, None)
    assert base[0] == base[1] == got[0] == got[1] == READ_REPEAT * (1 + local_latency())
    assert got[2] - base[2] == extra


@pytest.mark.parametrize("poll_extra, extra", [(3, None), (40, 7)])
def test_every_scalar_read_pays_the_poll_extra_knob(poll_extra, extra):
    """The mechanisms row "N polls cost N (1 + P + L)": at ``poll_extra = P`` the
    :data:`READ_REPEAT` satisfied polls take exactly their closed form, the loads as long,
    whatever ``read_extra`` is; the copy pays ``read_extra`` once and not ``P``."""
    base = _reads(None, None)
    got = _reads(extra, poll_extra)
    assert got[1] == poll_expected(poll_extra) == READ_REPEAT * (1 + poll_extra + local_latency())
    assert got[0] == got[1]
    assert got[2] - base[2] == (extra or 0)


def test_the_knob_is_checked_and_goes_to_every_die():
    from epfabric.sim.backends.machine import backend
    from epfabric.sw.machine import Machine
    m = Machine("tiny", backend=backend("pysim"), topology=("superpod", 2, 1, 1),
                max_outstanding=8)
    with pytest.raises(UserError, match="store_window must be in"):
        m.set_knob("store_window", 9)
    with pytest.raises(UserError, match="store_window must be in"):
        m.set_knob("store_window", 0)
    with pytest.raises(UserError, match="knob must be one of store_window, syncall_cycles, "
                                        "inject_rate, vector_extra, read_extra, poll_extra, "
                                        "not 'window'"):
        m.set_knob("window", 2)
    with pytest.raises(UserError, match="syncall_cycles must be in"):
        m.set_knob("syncall_cycles", 1 << 24)
    with pytest.raises(UserError, match="vector_extra must be in"):
        m.set_knob("vector_extra", 1 << 12)
    with pytest.raises(UserError, match="read_extra must be in"):
        m.set_knob("read_extra", 1 << 12)
    with pytest.raises(UserError, match="poll_extra must be in"):
        m.set_knob("poll_extra", 1 << 12)
    m.set_knob("store_window", 3)
    ctrl = [w for w in m.session(100)["writes"] if w[0] == 3]
    assert ctrl == [[3, 0, 0, 0, 3]]                    # one CTRL write; the system broadcasts it
    m.set_knob("store_window", None)
    assert [w for w in m.session(100)["writes"] if w[0] == 3] == []


def test_a_presets_syncall_becomes_the_knob():
    assert get_preset("cm384").replace(syncall="hard", syncall_ns=1500.0).knobs() == {
        "syncall_cycles": 1500}
    with pytest.raises(UserError, match="syncall_ns=100.0 needs syncall='hard'"):
        get_preset("cm384").replace(syncall_ns=100.0)
    with pytest.raises(UserError, match="syncall must be one of soft, hard"):
        get_preset("cm384").replace(syncall="fast")


def test_a_presets_send_window_becomes_the_knob():
    preset = get_preset("cm384").replace(send_window_bytes=14336)
    assert preset.knobs() == {"store_window": 28}           # two 7 KiB tokens
    assert get_preset("cm384").replace(send_window_bytes=513).knobs() == {"store_window": 2}
    assert get_preset("cm384").knobs() == {}
    with pytest.raises(UserError, match="send_window_bytes must be >= 1"):
        get_preset("cm384").replace(send_window_bytes=0)


@pytest.mark.parametrize("wait", [0, 7])
def test_the_hardware_syncall_releases_its_wait_after_the_last_arrival(wait):
    """``bar``: every core of the die stalls until the last one arrives, then the
    ``syncall_cycles`` knob more, and all leave together (1 cycle for the last one)."""
    assert barrier_release(preset="tiny", backend="pysim", kind="hard", aivs=3,
                           syncall_cycles=wait) == wait + 1


def test_the_soft_syncall_costs_its_fetch_adds_and_polls():
    """CANN's barrier as the model ran it before: a fetch-add and a poll of a die-local word,
    several cycles after the last arrival, more than the hardware barrier at no wait."""
    soft = barrier_release(preset="tiny", backend="pysim", kind="soft", aivs=3)
    assert soft > barrier_release(preset="tiny", backend="pysim", kind="hard", aivs=3)
    assert soft >= 2 + 3            # the last AIV's fetch-add (2 + L) and one poll read (1 + L)


def test_each_die_has_its_own_barrier_and_it_can_be_reused():
    """Two dies at different times, two barriers back to back: each die releases at its own
    last arrival, and the second barrier waits for every core again."""
    from epfabric.sim.backends.machine import backend
    from epfabric.sw.assembler import Program
    from epfabric.sw.machine import Machine
    m = Machine("tiny", backend=backend("pysim"), topology=("superpod", 2, 1, 1), aivs_per_die=2,
                max_outstanding=8)
    for r in range(2):
        for c in range(2):
            p = Program().li(1, 1 + 10 * c + 25 * r).label("spin").addi(1, 1, -1)
            p.bne(1, 0, "spin").mark(1).bar().mark(2)
            p.li(1, 1 + 10 * (1 - c)).label("spin2").addi(1, 1, -1).bne(1, 0, "spin2")
            p.mark(3).bar().mark(4).halt()
            m.load_program(r, c, p)
    m.set_knob("syncall_cycles", 3)
    marks = {}
    for e in m.run(5000).marks():
        marks.setdefault((e["rank"], e["event"]), []).append(e["cycle"])
    for r in range(2):
        assert min(marks[r, 2]) == max(marks[r, 1]) + 2 + 3
        assert min(marks[r, 4]) == max(marks[r, 3]) + 2 + 3
        assert min(marks[r, 2]) > max(marks[r, 1]) and min(marks[r, 4]) > max(marks[r, 3])
    assert min(marks[1, 2]) > max(marks[0, 2]) + 20        # die 1 did not wait for die 0


def test_the_experiment_checks_its_settings():
    with pytest.raises(UserError, match="windows must be"):
        EXPERIMENTS["mechanisms"].resolve(windows="1,x")
    with pytest.raises(UserError, match="syncall_cycles must name one or more integers >= 0"):
        EXPERIMENTS["mechanisms"].resolve(syncall_cycles="-1")
    with pytest.raises(UserError, match=r"vector_extra must name one or more integers in "
                                        r"\[0, 4095\], not '0,4096'"):
        EXPERIMENTS["mechanisms"].resolve(vector_extra="0,4096")
    points = EXPERIMENTS["mechanisms"].points(EXPERIMENTS["mechanisms"].resolve(), quick=True)
    assert {(p["class"], p["window"]) for p in points if p["mechanism"] == "store_window"} == {
        (c, w) for c in DESTINATIONS for w in (1, 2)}
    assert [(p["kind"], p["syncall_cycles"]) for p in points if p["mechanism"] == "syncall"] \
        == [("soft", None), ("hard", 0), ("hard", 100)]


def test_a_barrier_a_core_never_reaches_is_named_by_the_watchdog():
    from epfabric.sim.backends.machine import backend
    from epfabric.sw.assembler import Program
    from epfabric.sw.machine import Machine, WatchdogTimeout
    m = Machine("tiny", backend=backend("pysim"), topology=("superpod", 2, 1, 1), aivs_per_die=2,
                max_outstanding=8)
    m.load_program(0, 0, Program().bar().halt())
    m.load_program(0, 1, Program().label("spin").j("spin"))      # never arrives, never halts
    with pytest.raises(WatchdogTimeout, match=r"rank 0 core 0 \(pc 0\) waits at its die's "
                                              r"barrier \(bar\)"):
        m.run(300)


def test_the_injection_limit_sets_the_dies_egress(limit=64):
    """3 AIVs of a 4-die superpod, each streaming to a rank of its own: 4 blocks more each
    cost 12 blocks of the die's injection credit, 12 * 512 / limit cycles; without a limit
    the die's link (0.75 blocks a cycle on tiny) is what binds."""
    rate = limit * 1024                                  # bytes per cycle x INJECT_DEN
    limited, free = (inject_streams(preset="tiny", backend="pysim", aivs=3, blocks=[2, 6],
                                    rate=r, topology=("superpod", 2, 2, 1)) for r in (rate, None))
    assert limited[1] - limited[0] == 12 * 512 // limit
    assert free[1] - free[0] == 16                       # 12 / 0.75 at the link's rate


def test_a_presets_injection_limit_becomes_the_knob():
    preset = get_preset("cm384").replace(die_injection_gbytes_s=100.0)
    assert preset.knobs() == {"inject_rate": 102400}
    with pytest.raises(UserError, match="die_injection_gbytes_s=2000.0 is 2000.0 bytes per cycle"):
        get_preset("cm384").replace(die_injection_gbytes_s=2000.0)


def test_every_vector_instruction_pays_the_vector_extra_knob():
    """vsum of 1, 16, 17 and 256 elements, 4 each, on a die's core: ``ceil(L/16) + 3`` cycles
    a vsum without the knob, 20 more each with ``vector_extra = 20``; counted by hand."""
    by_hand = {1: 4, 16: 4, 17: 5, 256: 19}                # max(1, ceil(L/16)) + 3
    lengths = list(by_hand)
    free = vector_runs(preset="tiny", backend="pysim", lengths=lengths)
    slow = vector_runs(preset="tiny", backend="pysim", lengths=lengths, extra=20)
    assert VECTOR_LANES == 16 and VECTOR_REPEAT == 4
    assert free == [1 + 4 * by_hand[n] for n in lengths]
    assert slow == [1 + 4 * (by_hand[n] + 20) for n in lengths]


def test_a_presets_vector_op_cost_becomes_the_knob():
    assert get_preset("cm384").replace(vector_op_ns=35.0).knobs() == {"vector_extra": 35}
    with pytest.raises(UserError, match="vector_op_ns must be in"):
        get_preset("cm384").replace(vector_op_ns=5000.0)


def test_a_presets_read_start_becomes_the_knob():
    """``read_start_ns`` is the copy start's knob, and the scalar reads' too while the preset
    names no ``poll_ns`` (every preset before the two were apart)."""
    assert get_preset("cm384").replace(read_start_ns=240.4).knobs() == {"read_extra": 240,
                                                                       "poll_extra": 240}
    with pytest.raises(UserError, match="read_start_ns must be in"):
        get_preset("cm384").replace(read_start_ns=5000.0)
    with pytest.raises(UserError, match="read_start_ns must be in"):
        get_preset("cm384").replace(read_start_ns=-1.0)


def test_a_presets_poll_cost_becomes_its_own_knob():
    """``poll_ns`` sets ``poll_extra`` apart from ``read_extra``; unset, it is
    ``read_start_ns``: the presets that do not name it write the knobs they wrote before
    the two were apart (none for cm384, cm384-ascend and tiny; cm384-fit its fitted read start
    on both)."""
    cm384 = get_preset("cm384")
    assert cm384.poll_ns is None and cm384.knobs() == {}
    assert cm384.replace(read_start_ns=240.0, poll_ns=90.4).knobs() == {"read_extra": 240,
                                                                       "poll_extra": 90}
    assert cm384.replace(poll_ns=90.0).knobs() == {"poll_extra": 90}
    assert cm384.replace(read_start_ns=240.0, poll_ns=0.0).knobs() == {"read_extra": 240}
    for name in ("cm384", "cm384-ascend", "tiny", "incmoe-testbed"):
        assert get_preset(name).knobs() == {}, name
    fit = get_preset("cm384-fit")
    assert fit.poll_ns is None
    knobs = fit.knobs()
    assert knobs.pop("poll_extra") == knobs["read_extra"] == round(fit.read_start_ns)
    assert set(knobs) == {"store_window", "syncall_cycles", "inject_rate", "read_extra"}
    with pytest.raises(UserError, match="poll_ns must be in"):
        cm384.replace(poll_ns=5000.0)
    with pytest.raises(UserError, match="poll_ns must be in"):
        cm384.replace(poll_ns=-1.0)


def test_canns_update_token_nums_pays_a_scalar_read_per_running_total():
    """CANN's UpdateTokenNumsOut (two experts a die): at poll_extra 4 the last AIV's update
    takes exactly 3 x 4 cycles more than at 0 (its 2·epr − 1 scalar reads), the other AIV's
    the same; the row check sees a run that does not pay them."""
    from epfabric.sim.lab.experiments.mechanisms import update_check, update_expected, update_runs
    base = update_runs(preset="tiny", backend="pysim", poll_extra=0)
    got = update_runs(preset="tiny", backend="pysim", poll_extra=4)
    assert got == update_expected(base, 4) == [base[0], base[1] + 12]
    rows = [{"poll_extra": 0, "update_cycles": base}, {"poll_extra": 4, "update_cycles": got}]
    assert update_check(rows)[0]
    assert not update_check([rows[0], {**rows[1], "update_cycles": base}])[0]


def test_ubeps_tokens_take_the_blocks_their_headers_need():
    """1,000 B tokens on the small dispatch: the links carry UBEP's 3 blocks a remote slot
    against CANN's 2 (480 B of payload a Token-Flag-Fused block, 512 a raw one), exactly; the
    row check sees a UBEP at CANN's count."""
    from epfabric.sim.lab.experiments.mechanisms import token_blocks_check, token_link_blocks
    got = token_link_blocks(preset="tiny", backend="pysim", hidden_bytes=1000)
    assert got["cann"] > 0 and 2 * got["ubep"] == 3 * got["cann"]
    assert token_blocks_check([{"hidden_bytes": 1000, "link_blocks": got}])[0]
    bad = {"cann": got["cann"], "ubep": got["cann"]}
    assert not token_blocks_check([{"hidden_bytes": 1000, "link_blocks": bad}])[0]



def test_a_senders_token_buffers_are_a_window_of_whole_tokens():
    """A preset's ``send_buffers`` S with the machine told its tokens' b blocks, no knob set:
    a stream of 4 two-block tokens costs the window's closed form at W = S·b exactly (one
    buffer 83 cycles, two 51, measured on tiny); the row check sees a window of S blocks."""
    from epfabric.sim.lab.experiments.mechanisms import buffer_check, buffer_stream
    lat = get_preset("tiny").latency_cycles()["intra"]
    rows = [{"send_buffers": s, "token_blocks": 2, "expected_cycles": window_expected(lat, 2 * s, 8),
             "stb_cycles": buffer_stream(preset="tiny", backend="pysim", send_buffers=s, tokens=4,
                                         token_blocks=2, dst=DESTINATIONS["intra"])}
            for s in (1, 2)]
    assert [r["stb_cycles"] for r in rows] == [r["expected_cycles"] for r in rows]
    assert rows[1]["stb_cycles"] < rows[0]["stb_cycles"]
    assert buffer_check(rows)[0]
    blocks = [{**r, "stb_cycles": window_expected(lat, r["send_buffers"], 8)} for r in rows]
    assert not buffer_check(blocks)[0]


def test_eq8s_rule_sets_the_calcumsum_aivs_from_the_measured_slopes():
    """UBEP's dispatch of 32 experts on 2 dies of 4 AIVs with one CalCumSum AIV: positive
    slopes α (a slot) and β (an expert), and Eq. 8 with their ratio gives C = 3 (measured:
    β/α ≈ 0.16, 0.16 x 4 x 32 / 8 ≈ 2.6), which the run with the preset's ``cumsum_ratio``
    uses -- neither the slopes run's 1 nor App. A's fixed-3 default (2 here); the row check
    sees a run with another C."""
    from epfabric.sim.lab.experiments.mechanisms import EQ8_AIVS, EQ8_CASE, eq8_check, eq8_runs
    from epfabric.sw.ubep.ubep import cumsum_rule, default_cumsum_aivs
    shape = (EQ8_AIVS, EQ8_CASE["experts"], EQ8_CASE["topk"], EQ8_CASE["batch"])
    got = eq8_runs(preset="tiny", backend="pysim")
    assert got["alpha"] > 0 and got["beta"] > 0 and got["ratio"] == got["beta"] / got["alpha"]
    assert got["rule_c"] == cumsum_rule(*shape, got["ratio"]) == 3
    assert got["run_c"] == 3 != default_cumsum_aivs(*shape)
    assert eq8_check([got])[0]
    assert not eq8_check([{**got, "run_c": 2}])[0]


def test_canns_count_as_the_open_kernels_five_vector_instructions():
    """``cann_count="ascend"`` (the Ascend structure): CANN's slot index and its experts' counts
    by Duplicate, Sub, Abs, Mins and ReduceSum (``valu`` x4, ``vsum``), as the open kernel's
    ``CalTokenSendExpertCnt``. Both dispatches bit-exact (2 dies of 2 AIVs, tiny), every AIV's
    Token-Sending at the closed form from the one-``vcount`` run's (a sent slot 4 vector
    instructions more), and 5 experts' counts over 1,024 ids at theirs both ways (measured at
    16 lanes, a vector instruction 67 cycles: 3 + 5 x (1 + 5 x 67 + 2) + 1 = 1,694 cycles
    against 1 + (3 + 67 + 3) + (3 + 67 + 2) + 1 = 147); the row check sees a count at one
    instruction."""
    from epfabric.sim.lab.experiments.mechanisms import (count_check, count_expected,
                                                          count_runs, expert_counts,
                                                          expert_counts_expected)
    lanes = get_preset("tiny").vector_lanes
    got = count_runs(preset="tiny", backend="pysim")
    expected = count_expected(got["vcount"], lanes=lanes, extra=0)
    assert got["ascend"] == expected
    assert all(got["ascend"][k] > got["vcount"][k] for k in got["vcount"])
    experts = expert_counts(preset="tiny", backend="pysim")
    assert experts == expert_counts_expected(lanes=lanes, extra=0)
    row = {"cycles": got, "expected": expected, "experts_cycles": experts,
           "experts_expected": expert_counts_expected(lanes=lanes, extra=0)}
    assert count_check([row])[0]
    assert not count_check([{**row, "cycles": {**got, "ascend": got["vcount"]}}])[0]
    assert not count_check([{**row, "experts_cycles": {**experts,
                                                       "ascend": experts["vcount"]}}])[0]
