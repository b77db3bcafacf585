"""The in-switch reduction unit (hw/inc_reduce.py) alone, fed in an order the test chooses.

tests/hw/test_inc_switch.py runs the unit inside a switch, where the order of the
contributions is the arbiter's; here the bench offers them itself, so a floating-point
result must be bit-exact against numpy's sum in that order
(:func:`~epfabric.sw.lane_sums.ordered_sum` from the unit's identity ``-0``), and the cycles are specified: a floating-point sum
takes :func:`~epfabric.hw.lane_arith.add_latency` more cycles, and a contribution whose
slot has a sum in the pipeline waits for it.
"""

import numpy as np
import pytest

from epfabric.hw.lane_arith import add_latency
from epfabric.sw.lane_sums import ordered_sum, to_bits
from rejected import rejected
from utils import ComponentSpec, run

HEADER, DATA = 128, 256


def spec(dtype):
    return ComponentSpec("epfabric.hw.inc_reduce:_Example",
                         {"window": 8, "counter_width": 16, "dtype": dtype})


async def unit_intent(bench, flits, cycles, stall_every=0):
    """Offer ``flits`` in order (one a cycle when taken); the output stalls every
    ``stall_every``-th cycle. Returns the releases with their cycles and the counters."""
    outs, pending = [], list(flits)
    for cycle in range(cycles):
        bench.set("o_stream.ready", int(not stall_every or cycle % stall_every))
        bench.set("i_stream.valid", int(bool(pending)))
        if pending:
            bench.set("i_stream.payload", pending[0])
        took = pending and await bench.get("i_stream.ready")
        if (await bench.get("o_stream.ready")) and await bench.get("o_stream.valid"):
            f = bench.decode("o_stream.payload", await bench.get("o_stream.payload"))
            outs.append({"dst": int(f.dst), "block": int(f.addr.block), "count": int(f.count),
                         "data": int(f.data), "cycle": cycle})
        await bench.tick()
        if took:
            pending.pop(0)
    counters = {k: await bench.get(k) for k in ("o_absorbed", "o_released", "o_errors", "o_open")}
    return {"outs": outs, "counters": counters, "left": len(pending)}


def _contribution(src, dst, mask, block, lanes, bits):
    data = 0x0D0D_0000 | dst << 8 | block                   # a header, not summed
    for k, v in enumerate(lanes):
        data |= int(v) << (HEADER + bits * k)
    return {"dst": dst, "src": src, "red": 1, "mcast": 0, "mask": mask, "count": 1,
            "addr": {"block": block, "word": 0}, "data": data}


def _groups(rng, dtype, n_groups):
    """Groups (dst, block) with 1..3 contributors (every other die), interleaved: per group
    the contributors in a random order; returns the flits and ``{key: [terms in order]}``."""
    bits = 32 if dtype == "fp32" else 16
    lanes = (DATA - HEADER) // bits
    groups, flits = {}, []
    keys = [(d, b) for d in range(4) for b in range(8)]
    for i in rng.permutation(len(keys))[:n_groups]:
        dst, block = keys[i]
        srcs = [s for s in rng.permutation(4) if s != dst][:rng.integers(1, 4)]
        mask = sum(1 << int(s) for s in srcs)
        x = (rng.choice([-1.0, 1.0], (len(srcs), lanes)) * rng.uniform(1, 2, (len(srcs), lanes))
             * 2.0 ** rng.integers(-20, 21, (len(srcs), lanes))).astype(np.float32)
        if dtype in ("fp32", "bf16"):
            terms = to_bits(x, dtype)
        else:
            terms = rng.integers(0, 1 << 16, (len(srcs), lanes)).astype(np.uint32)
        groups[(dst, block)] = (srcs, mask, terms)
    queue = [(key, k) for key, (srcs, _m, _t) in groups.items() for k in range(len(srcs))]
    order = rng.permutation(len(queue))                  # groups interleaved
    seen = {key: [] for key in groups}
    for j in order:
        key, _ = queue[j]
        srcs, mask, terms = groups[key]
        k = len(seen[key])
        seen[key].append(terms[k])
        flits.append(_contribution(int(srcs[k]), key[0], mask, key[1], terms[k], bits))
    return flits, {key: np.array(v) for key, v in seen.items()}


def _lanes_of(data, bits):
    return np.array([(data >> (HEADER + bits * k)) & ((1 << bits) - 1)
                     for k in range((DATA - HEADER) // bits)], dtype=np.uint32)


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_float_groups_are_the_sum_in_the_order_taken(dtype):
    """Interleaved groups under output stalls: each release is the numpy fp32 sum of its
    contributions in the order offered, from ``-0`` (bf16: accumulated in fp32, rounded
    once), with the last contribution's header."""
    flits, terms = _groups(np.random.default_rng(3), dtype, 12)
    res, cycles = run(spec(dtype), unit_intent, {"flits": flits, "cycles": 80, "stall_every": 3})
    assert res["left"] == 0 and res["counters"]["o_errors"] == 0
    assert res["counters"]["o_open"] == 0
    bits = 32 if dtype == "fp32" else 16
    assert sorted((o["dst"], o["block"]) for o in res["outs"]) == sorted(terms)
    for o in res["outs"]:
        want = ordered_sum(terms[(o["dst"], o["block"])], dtype, start=-0.0)
        assert (_lanes_of(o["data"], bits) == want).all(), (o, want)
        assert o["data"] & 0xFFFF_FFFF == 0x0D0D_0000 | o["dst"] << 8 | o["block"]


def test_a_float_sum_takes_its_latency_and_a_slot_waits_for_its_sum():
    """No stalls. Groups whose contributions are offered more than ``latency`` flits apart
    release ``add_latency("fp32")`` cycles after the 16-bit integer unit releases them; three
    contributions to one slot back to back each wait for the sum before them, so the group
    releases ``3 * latency`` cycles after the integer one."""
    lat = add_latency("fp32")
    assert lat == 5 and add_latency("int16") == 0

    def c(src, dst, mask, block):
        return _contribution(src, dst, mask, block, [0x3F80_0000] * 4, 32)

    groups = [(0, 0b0110, b) for b in (1, 2, 3)] + [(1, 0b0101, b) for b in (1, 2, 3)]
    apart = ([c(2, d, mask, b) for d, mask, b in groups]           # 6 apart: more than 5
             + [c(d ^ 1, d, mask, b) for d, mask, b in groups])
    together = [c(1, 0, 0b1110, 3), c(2, 0, 0b1110, 3), c(3, 0, 0b1110, 3)]
    for flits, extra, total in ((apart, lat, 0x4000_0000), (together, 3 * lat, 0x4040_0000)):
        got = {d: run(spec(d), unit_intent, {"flits": flits, "cycles": 40})[0]
               for d in ("int16", "fp32")}
        assert [o["cycle"] + extra for o in got["int16"]["outs"]] == \
            [o["cycle"] for o in got["fp32"]["outs"]]
        assert all(o["data"] >> HEADER == total * (1 + (1 << 32) + (1 << 64) + (1 << 96))
                   for o in got["fp32"]["outs"])


def test_a_lane_type_wider_than_the_data_is_refused():
    from epfabric.hw.inc_reduce import ReduceUnit
    from epfabric.hw.inc_switch import inc_payload
    with pytest.raises(ValueError, match=r"dtype 'fp32': a 32-bit lane does not fit the 16 "
                                         r"data bits past the header"):
        rejected(ReduceUnit, payload=inc_payload(4), subtree=(0, 0, 0, 0), header_bits=240,
                 dtype="fp32")
    with pytest.raises(ValueError, match=r"dtype must be a lane type"):
        rejected(ReduceUnit, payload=inc_payload(4), subtree=(0, 0, 0, 0), dtype="fp16")
