"""The ``daf`` Data-as-Flag micro-benchmark (sw/kernels/daf.py) and its negative controls."""

import copy
import dataclasses
import functools

import numpy as np
import pytest

from epfabric.hw.validate import UserError
from epfabric.sim.backends.machine import backend
from epfabric.sw.config import MachineConfig
from epfabric.sw.dataflag import RESERVED_SENTINEL
from epfabric.sw.isa import address
from epfabric.sw.kernels import KERNELS, daf, run_kernel
from epfabric.sw.machine import Machine, WatchdogTimeout

KERNEL = daf.KERNEL
#: the smallest machine with more than one message per receiver core: 4 dies x 2 AIVs,
#: tiny preset (fabric latencies of a few cycles, runs of a few hundred cycles)
SHAPE = dict(preset="tiny", topology=("superpod", 2, 2, 1), aivs=2)
#: 2 raw blocks, 3 TFF blocks per message (the last one partial in both formats)
NBYTES = 1000
MAX_CYCLES = 20_000
#: two dies, one AIV each
TWO = dict(preset="tiny", topology=("superpod", 2, 1, 1), aivs=1)


def grid_machine(preset, topology, aivs, nbytes):
    """The kernel's machine for ``nbytes`` on a shape, sized for every protocol
    (:func:`daf.machine_sizes`, as for a whole grid): one build serves each protocol's runs."""
    config = KERNEL.configs(preset, topology, aivs, {"bytes": nbytes})[0]
    shape = MachineConfig(preset, topology=topology, aivs_per_die=aivs)
    return dataclasses.replace(config, **daf.machine_sizes(shape, nbytes))


#: SHAPE's machine for NBYTES, every protocol's runs on it
SHAPE_MACHINE = grid_machine(SHAPE["preset"], SHAPE["topology"], SHAPE["aivs"], NBYTES)


#: two dies of one cm384 NPU, one AIV each: 218 cycles apart, so a receiver polls before a
#: block arrives and reads it right after its flag lands
NPU = dict(preset="cm384", topology=("superpod", 2, 1, 1), aivs=1)
#: NPU's machine for 16 B messages, every protocol's runs on it
NPU_MACHINE = grid_machine(NPU["preset"], NPU["topology"], NPU["aivs"], 16)


@functools.lru_cache(maxsize=None)
def pysim_run(protocol, nbytes=NBYTES, seed=3):
    """``(machine, report, inputs)`` of one run on Amaranth's simulator, cached per process."""
    params = KERNEL.resolve_params({"protocol": protocol, "bytes": nbytes, "seed": seed})
    m = Machine(backend=backend("pysim"), config=SHAPE_MACHINE)
    inputs = KERNEL.load(m, params)
    return m, m.run(MAX_CYCLES), inputs


def test_registered_under_its_name():
    assert KERNELS["daf"] is KERNEL
    assert KERNEL.defaults == {"protocol": "tff", "bytes": 512, "seed": 0, "broken": "none"}


@pytest.mark.parametrize("protocol", daf.PROTOCOLS)
def test_every_message_arrives_once_in_place(protocol):
    m, report, inputs = pysim_run(protocol)
    verdict = KERNEL.check(m, report, inputs)
    assert verdict["correct"], verdict["problems"]
    assert verdict["blocks_per_message"] == (3 if protocol == "tff" else 2)
    assert 0 < verdict["latency_cycles"] == max(t["cycle"] for t in report.marks(
        event=daf.DONE_MARK)) - report.marks(event=daf.START_MARK)[0]["cycle"]
    # every rank sent exactly its stores (plus at most one ack each)
    stores = KERNEL.remote_stores(m.config, protocol, NBYTES)
    assert verdict["remote_stores"] == stores
    assert stores == 3 * (verdict["blocks_per_message"] + (protocol in ("sw", "dc")))
    for key in ("tx_blocks", "rx_blocks"):
        assert all(stores < n <= 2 * stores for n in report.counters[key]), report.counters
    # ... which the checker verifies: one flit too many (a block stored twice) is named
    report = copy.deepcopy(report)
    report.counters["tx_blocks"][1] = 2 * stores + 1
    assert KERNEL.check(m, report, inputs)["problems"] == [
        f"rank 1: tx_blocks {2 * stores + 1} is not {stores} stores plus 1..{stores} acks"]


def test_sp_region_is_rearmed_and_tff_header_is_the_flag_field():
    m, report, inputs = pysim_run("sp")
    lay = inputs["layout"]
    # receiver core 0 of each rank re-armed 2 sources x 2 blocks x 8 words after its DONE mark
    assert 2 * 2 * 8 <= KERNEL.check(m, report, inputs)["rearm_cycles"] <= 2 * 2 * 8 + 2 * 2 + 1
    for b in range(lay.nb):                     # what rank 0 received from rank 1, re-armed
        assert m.read_mem(0, address(0, lay.recv(1, b)), 8) == RESERVED_SENTINEL.tolist()
    m, _, inputs = pysim_run("tff")
    lay = inputs["layout"]
    got = m.read_mem(2, address(0, lay.recv(1, 2)), 8)
    assert got == [daf.TFF_FLAG, 1 << 16 | 2, 0, 2, 0, 0, 0, 0]


def test_dc_checksum_is_the_sum_of_markers():
    m, _, inputs = pysim_run("dc")
    lay = inputs["layout"]
    blocks = daf.message_blocks(inputs["data"][3, 0], "dc", 3, 0)
    markers = int(blocks[:, :8].astype(np.uint64).sum()) & 0xFFFFFFFF
    assert m.read_mem(0, address(0, lay.SIG + 3), 2) == [daf.EPOCH, markers]


@functools.lru_cache(maxsize=None)
def cm384_latency(protocol, broken="none"):
    """Latency in cycles of 16 B per message between the two dies of one cm384 NPU (218 ns apart)."""
    result = run_kernel("daf", backend("pysim"), **NPU, configs=[NPU_MACHINE],
                        params={"protocol": protocol, "bytes": 16, "broken": broken})
    assert result.correct, result.problems
    return result.runs[0].check["latency_cycles"]


def test_dataflag_is_faster_than_stop_and_wait():
    """SW pays a fence (the ack's trip back) and the flag's trip on top of the data's trip."""
    lat = {p: cm384_latency(p) for p in daf.PROTOCOLS}
    intra = 218                                          # cm384 intra-NPU latency, cycles
    assert all(intra < lat[p] < lat["sw"] - intra for p in ("tff", "dc", "sp")), lat
    assert lat["sw"] > 3 * intra, lat


def test_checker_sees_wrong_data_and_missing_rearm():
    m, report, inputs = pysim_run("sw")
    wrong = {**inputs, "data": inputs["data"].copy()}
    wrong["data"][1, 2, 517] ^= 1            # block 1, byte 5 (modelled: the leading 64 B)
    problems = KERNEL.check(m, report, wrong)["problems"]
    assert "rank 2: what core 0 consumed from rank 1 differs in block(s) [1]" in problems
    assert "rank 2: receive blocks of rank 1 differ" in problems
    # the SW run's receive blocks hold data, not the sentinel: as an SP run it was never re-armed
    as_sp = {**inputs, "params": {**inputs["params"], "protocol": "sp"}}
    problems = KERNEL.check(m, report, as_sp)["problems"]
    assert "rank 0: receive blocks of rank 1 were not re-armed" in problems


def test_checker_sees_a_write_outside_the_regions():
    """A guard block that does not hold the canary afterwards (here: the host wrote it) is named."""
    params = KERNEL.resolve_params({"protocol": "tff", "bytes": NBYTES})
    m = Machine(backend=backend("pysim"), config=KERNEL.configs(
        "tiny", TWO["topology"], TWO["aivs"], params)[0])
    inputs = KERNEL.load(m, params)
    guard = inputs["layout"].out(0, inputs["layout"].nb)
    m.write_mem(1, address(0, guard), [7] * m.config.words_per_block)
    problems = KERNEL.check(m, m.run(MAX_CYCLES), inputs)["problems"]
    assert problems == [f"rank 1: guard block {guard} was overwritten"]


def test_program_does_not_depend_on_data():
    programs = []
    for seed in (1, 2):
        m = Machine(backend=backend("pysim"), config=KERNEL.configs(
            SHAPE["preset"], SHAPE["topology"], SHAPE["aivs"], {"protocol": "dc", "bytes": NBYTES})[0])
        KERNEL.load(m, {"protocol": "dc", "bytes": NBYTES, "seed": seed})
        programs.append(dict(m._programs))
    assert programs[0] == programs[1]


def test_no_payload_word_is_the_sentinel():
    cfg = MachineConfig("tiny", topology=("superpod", 2, 2, 1))
    words = daf.messages(cfg, 4096, 0).view("<u4")
    assert not (words == RESERVED_SENTINEL[0]).any()
    broken = daf.messages(cfg, 4096, 0, "sentinel").view("<u4")
    assert broken[0, 1, :8].tolist() == RESERVED_SENTINEL.tolist()


# --- negative controls ---------------------------------------------------------------------------


def test_tff_tears_on_a_non_atomic_port():
    """The receiver reads a block right after its flag: with 64 B beats it reads a torn block."""
    result = run_kernel("daf", backend("pysim"), **NPU, max_cycles=MAX_CYCLES,
                        params={"protocol": "tff", "bytes": 16, "broken": "tear"})
    config = result.runs[0].config
    assert config.non_atomic_port is True and config.data_bytes == 512
    assert result.problems == [f"rank {d}: what core 0 consumed from rank {1 - d} differs in "
                                  f"block(s) [0]" for d in (0, 1)]
    # the receive blocks themselves end up whole (no "receive blocks ... differ"): the tear is
    # in what the receiver read


def test_tff_does_not_tear_on_the_atomic_port_with_the_same_modelled_bytes():
    params = KERNEL.resolve_params({"protocol": "tff", "bytes": 16})
    shape = MachineConfig("cm384", topology=NPU["topology"])
    cfg = MachineConfig("cm384", topology=NPU["topology"], data_bytes=512,
                        **daf.machine_sizes(shape, 16, ("tff",)))
    m = Machine(backend=backend("pysim"), config=cfg)
    inputs = KERNEL.load(m, params)
    verdict = KERNEL.check(m, m.run(MAX_CYCLES), inputs)
    assert verdict["correct"], verdict["problems"]


def test_sentinel_payload_hangs_sp_and_the_watchdog_names_the_waiting_core():
    with pytest.raises(WatchdogTimeout) as info:
        run_kernel("daf", backend("pysim"), **SHAPE, configs=[SHAPE_MACHINE],
                   max_cycles=1_000,                                        # the run takes ~150
                   params={"protocol": "sp", "bytes": NBYTES, "broken": "sentinel"})
    lay = daf.layout(MachineConfig("tiny", topology=SHAPE["topology"]), "sp", NBYTES)
    # rank 0's message to rank 1 is received by rank 1's core (1 - 0 - 1) mod 2 = 0, block 0
    assert (f"rank 1 core 0 (pc" in str(info.value)
            and f"(rank 1 block {lay.recv(0, 0)} word 0) = RECV block 0 word 0"
            in str(info.value)), str(info.value)
    assert str(info.value).count("waits on") == 1        # nobody else hangs


def test_sw_without_fence_stays_correct_on_this_fabric():
    """One (src, dst) pair's stores travel one path in order: the flag cannot overtake the data."""
    result = run_kernel("daf", backend("pysim"), **SHAPE, configs=[SHAPE_MACHINE],
                        max_cycles=MAX_CYCLES,
                        params={"protocol": "sw", "bytes": NBYTES, "broken": "nofence"})
    assert result.correct, result.problems
    # and on cm384 latencies it saves the fence's wait for the ack
    assert cm384_latency("sw", "nofence") < cm384_latency("sw") - 218   # no ack round trip


# --- parameters and configuration ----------------------------------------------------------------

@pytest.mark.parametrize("params, match", [
    ({"protocol": "xx"}, r"protocol must be one of sw, tff, dc, sp, not 'xx'"),
    ({"bytes": 0}, r"bytes must be .*not 0"),
    ({"bytes": 1 << 20}, r"bytes must be .*not 1048576"),
    ({"bytes": 1.5}, r"bytes must be an integer, not 1.5"),
    ({"broken": "x"}, r"broken must be one of none, tear, sentinel, nofence, not 'x'"),
    ({"protocol": "sw", "broken": "tear"}, r"broken='tear' is a negative control of protocol='tff'"),
    ({"seed": -1}, r"seed must be"),
    ({"bits": 3}, r"unknown parameter\(s\) bits for kernel daf"),
])
def test_bad_parameters_are_named(params, match):
    with pytest.raises((UserError, TypeError), match=match):
        KERNEL.resolve_params(params)


def test_too_small_machine_is_refused():
    m = Machine(backend=backend("pysim"), config=MachineConfig(
        "tiny", topology=SHAPE["topology"], aivs_per_die=2, hbm_blocks=16, imem_depth=1024))
    with pytest.raises(UserError, match=r"daf \(tff, 1000 B on 4 ranks\) needs hbm_blocks >= \d+, "
                                        r"not 16"):
        KERNEL.load(m, {"protocol": "tff", "bytes": NBYTES})


def test_non_atomic_port_option_keeps_default_specs_unchanged():
    """Default machines' JSON (and so their Verilog and build cache keys) has no new field."""
    assert "non_atomic_port" not in MachineConfig("tiny").to_dict()
    assert MachineConfig("tiny", non_atomic_port=True).to_dict()["non_atomic_port"] is True
    with pytest.raises(TypeError, match="non_atomic_port must be a bool, not 1"):
        MachineConfig("tiny", non_atomic_port=1)
    from amaranth.hdl import Fragment
    from epfabric.sw.tops import aiv_system
    beats = {}
    for flag in (False, True):
        top = aiv_system(**MachineConfig("tiny", non_atomic_port=flag).to_dict())
        Fragment.get(top, None)
        beats[flag] = top.dies[0].mem.port.beats
    assert beats == {False: 1, True: 8}
