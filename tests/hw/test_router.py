"""Die router (hw/router.py) alone: local/remote routing, REQ/RSP flits, round robin, RSP queue space.

The router's neighbours (cores, UB memory, fabric) are played by the test:
it drives ``mem_req``, ``ub_req.ready``, ``ub_rsp``, the read ports' answers
and ``rx``/``tx.ready``, and reads what the router presents. Everything
from a request to its target is combinational, so a ``get`` after a ``set``
shows the routing decision of that cycle.
"""

import pytest

from epfabric.hw.aiv_core import MemOp
from epfabric.hw.isa import address
from epfabric.hw.router import DieRouter, FlitKind, rsp_depth_bound
from epfabric.hw.ub_port import UBOp
from epfabric.sim.backends import ComponentSpec, run, stream_get
from rejected import rejected

RANK = 1
PARAMS = {"ranks": 4, "aivs": 2, "hbm_blocks": 8, "data_bytes": 32, "hbm_latency": 2, "rsp_depth": 4}
L = PARAMS["hbm_latency"]
N = PARAMS["aivs"]          # read port N serves incoming remote loads and host reads


def spec(**overrides):
    return ComponentSpec("epfabric.hw.router:DieRouter", {**PARAMS, **overrides})


def req(op, rank, block, word=0, data=0, rank_bits=8):
    return {"op": op, "addr": address(rank, block, word, rank_bits), "data": data}


def flit(kind, op, *, dst=RANK, src=0, core=0, block=0, word=0, data=0):
    return {"dst": dst, "src": src, "kind": kind, "op": op, "core": core,
            "addr": {"block": block, "word": word}, "data": data}


def fields(bench, path, raw):
    f = bench.decode(path, raw)
    out = {"op": MemOp(f.op).name, "data": int(f.data)}
    if hasattr(f, "kind"):
        out.update(dst=int(f.dst), src=int(f.src), kind=FlitKind(f.kind).name, core=int(f.core),
                   block=int(f.addr.block), word=int(f.addr.word), small=int(f.small))
    return out


async def reset_inputs(bench):
    bench.set("rank", RANK)
    bench.set("ub_req.ready", 1)
    bench.set("tx.ready", 0)
    for i in range(N):
        bench.set(f"mem_rsp.{i}.ready", 1)


# --- local requests --------------------------------------------------------------------------

async def local_store_intent(bench):
    await reset_inputs(bench)
    bench.set("mem_req.0.payload", req(MemOp.WRITE_WORD, RANK, 3, 5, 0xCAFE))
    bench.set("mem_req.0.valid", 1)
    ub = bench.decode("ub_req.payload", await bench.get("ub_req.payload"))
    seen = {"ub_valid": await bench.get("ub_req.valid"), "ub_op": UBOp(ub.op).name,
            "ub_addr": int(ub.addr), "ub_word": int(ub.word), "ub_data": int(ub.data),
            "core_ready": await bench.get("mem_req.0.ready"), "tx_valid": await bench.get("tx.valid"),
            "read_valid": await bench.get("ub_read.0.req.valid")}
    bench.set("ub_req.ready", 0)                    # UB port busy: the core waits
    seen["core_ready_when_ub_busy"] = await bench.get("mem_req.0.ready")
    bench.set("ub_req.ready", 1)
    await bench.tick()                              # accepted
    bench.set("mem_req.0.valid", 0)
    # the UB port's answer (an ack) goes back to core 0, not to the RSP queue
    bench.set("ub_rsp.payload", {"op": UBOp.WORD_WRITE, "addr": 3, "old": 0})
    bench.set("ub_rsp.valid", 1)
    seen["ack"] = fields(bench, "mem_rsp.0.payload", await bench.get("mem_rsp.0.payload"))
    seen["ack_valid"] = [await bench.get(f"mem_rsp.{i}.valid") for i in range(N)]
    seen["ub_rsp_ready"] = await bench.get("ub_rsp.ready")
    await bench.tick()
    bench.set("ub_rsp.valid", 0)
    bench.set("tx.ready", 1)
    seen["tx_after"] = await bench.get("tx.valid")   # nothing entered the RSP queue
    return seen


def test_local_store_goes_to_the_ub_port():
    r, _ = run(spec(), local_store_intent)
    assert (r["ub_valid"], r["ub_op"], r["ub_addr"], r["ub_word"], r["ub_data"]) == \
        (1, "WORD_WRITE", 3, 5, 0xCAFE)
    assert r["core_ready"] == 1 and r["core_ready_when_ub_busy"] == 0
    assert r["tx_valid"] == 0 and r["read_valid"] == 0
    assert r["ack"]["op"] == "WRITE_WORD" and r["ack_valid"] == [1, 0] and r["ub_rsp_ready"] == 1
    assert r["tx_after"] == 0


async def local_load_intent(bench):
    await reset_inputs(bench)
    bench.set("mem_req.1.payload", req(MemOp.READ_BLOCK, RANK, 6, 2))
    bench.set("mem_req.1.valid", 1)
    seen = {"port_valid": [await bench.get(f"ub_read.{i}.req.valid") for i in range(N + 1)],
            "port_payload": int(bench.decode("ub_read.1.req.payload",
                                             await bench.get("ub_read.1.req.payload")).addr),
            "ready": await bench.get("mem_req.1.ready"), "ub_valid": await bench.get("ub_req.valid")}
    await bench.tick()
    bench.set("mem_req.1.valid", 0)
    await bench.tick(L - 1)
    bench.set("ub_read.1.resp.payload", {"block": 0xB10C, "word": 0x77})
    bench.set("ub_read.1.resp.valid", 1)
    seen["answer"] = fields(bench, "mem_rsp.1.payload", await bench.get("mem_rsp.1.payload"))
    seen["answer_valid"] = [await bench.get(f"mem_rsp.{i}.valid") for i in range(N)]
    return seen


def test_local_load_uses_the_cores_read_port():
    r, _ = run(spec(), local_load_intent)
    assert r["port_valid"] == [0, 1, 0] and r["port_payload"] == 6 and r["ready"] == 1
    assert r["ub_valid"] == 0
    assert r["answer"] == {"op": "READ_BLOCK", "data": 0xB10C} and r["answer_valid"] == [0, 1]


# --- remote requests and incoming flits ----------------------------------------------------------

async def remote_request_intent(bench):
    await reset_inputs(bench)
    bench.set("mem_req.1.payload", req(MemOp.FETCH_ADD, 3, 2, 7, 41))
    bench.set("mem_req.1.valid", 1)
    seen = {"ready_held": await bench.get("mem_req.1.ready"), "ub_valid": await bench.get("ub_req.valid")}
    seen["flit"] = fields(bench, "tx.payload", await stream_get(bench, "tx", decode=False))
    return seen


def test_remote_request_becomes_a_req_flit():
    r, cycles = run(spec(), remote_request_intent)
    assert r["ready_held"] == 0 and r["ub_valid"] == 0     # waits for tx.ready, never the UB port
    assert r["flit"] == {"dst": 3, "src": RANK, "kind": "REQ", "op": "FETCH_ADD", "core": 1,
                         "block": 2, "word": 7, "data": 41, "small": 1}   # no DataBlock on board
    assert cycles == 1


async def narrow_rank_intent(bench):
    """rank_bits=2: rank 3 is the top two bits, and what an 8-bit rank field would read as
    ranks 1 and 2 (bits 24, 25) are block bits of a local address."""
    await reset_inputs(bench)
    bench.set("mem_req.1.payload", req(MemOp.FETCH_ADD, 3, (1 << 16) | 2, 7, 41, rank_bits=2))
    bench.set("mem_req.1.valid", 1)
    seen = {"flit": fields(bench, "tx.payload", await stream_get(bench, "tx", decode=False))}
    bench.set("mem_req.1.valid", 0)
    bench.set("mem_req.0.payload", req(MemOp.WRITE_WORD, RANK, (3 << 15) | 5, 1, 9, rank_bits=2))
    bench.set("mem_req.0.valid", 1)
    ub = bench.decode("ub_req.payload", await bench.get("ub_req.payload"))
    seen["local"] = [await bench.get("ub_req.valid"), await bench.get("tx.valid"), int(ub.addr)]
    return seen


def test_a_narrow_rank_field_routes_by_the_top_bits():
    r, _ = run(spec(rank_bits=2, hbm_blocks=1 << 20), narrow_rank_intent)
    assert (r["flit"]["dst"], r["flit"]["block"], r["flit"]["word"]) == (3, (1 << 16) | 2, 7)
    assert r["local"] == [1, 0, (3 << 15) | 5]


def test_rank_bits_must_name_every_rank_and_hold_the_blocks():
    with pytest.raises(ValueError, match="rank_bits=1 addresses 2 ranks, not 4"):
        rejected(DieRouter, **{**PARAMS, "rank_bits": 1})
    with pytest.raises(ValueError, match=r"hbm_blocks=2097152 does not fit an address with "
                                         r"rank_bits=3 \(at most 1048576"):
        rejected(DieRouter, **{**PARAMS, "rank_bits": 3, "hbm_blocks": 1 << 21})


async def incoming_req_intent(bench):
    await reset_inputs(bench)
    seen = {}
    # a remote block store from core 1 of rank 2: applied on the UB port in the cycle it arrives
    bench.set("rx.payload", flit(FlitKind.REQ, MemOp.WRITE_BLOCK, src=2, core=1, block=4, data=0xD47A))
    bench.set("rx.valid", 1)
    ub = bench.decode("ub_req.payload", await bench.get("ub_req.payload"))
    seen["ub"] = [await bench.get("ub_req.valid"), UBOp(ub.op).name, int(ub.addr), int(ub.data)]
    seen["rx_ready"] = await bench.get("rx.ready")
    await bench.tick()
    bench.set("rx.valid", 0)
    # the UB port's answer enters the RSP queue (this cycle), and is on tx from the next cycle
    bench.set("ub_rsp.payload", {"op": UBOp.BLOCK_WRITE, "addr": 4, "old": 0})
    bench.set("ub_rsp.valid", 1)
    seen["ub_rsp_ready"] = await bench.get("ub_rsp.ready")
    seen["core_valid"] = [await bench.get(f"mem_rsp.{i}.valid") for i in range(N)]
    seen["tx_same_cycle"] = await bench.get("tx.valid")
    await bench.tick()
    bench.set("ub_rsp.valid", 0)
    seen["ack"] = fields(bench, "tx.payload", await stream_get(bench, "tx", decode=False))
    # a remote word load from core 0 of rank 3: read port N, answered L cycles later
    bench.set("rx.payload", flit(FlitKind.REQ, MemOp.READ_WORD, src=3, core=0, block=5, word=9))
    bench.set("rx.valid", 1)
    seen["load_port"] = [await bench.get("ub_read.2.req.valid"), await bench.get("rx.ready")]
    rp = bench.decode("ub_read.2.req.payload", await bench.get("ub_read.2.req.payload"))
    seen["load_addr"] = [int(rp.addr), int(rp.word)]
    await bench.tick()
    bench.set("rx.valid", 0)
    await bench.tick(L - 1)
    bench.set("ub_read.2.resp.payload", {"block": 0x1234, "word": 0x5678})
    bench.set("ub_read.2.resp.valid", 1)
    seen["host_rvalid"] = await bench.get("host.rvalid")     # not the host's read
    await bench.tick()
    bench.set("ub_read.2.resp.valid", 0)
    seen["word"] = fields(bench, "tx.payload", await stream_get(bench, "tx", decode=False))
    return seen


def test_incoming_req_is_applied_and_answered_as_rsp_flit():
    r, _ = run(spec(), incoming_req_intent)
    assert r["ub"] == [1, "BLOCK_WRITE", 4, 0xD47A] and r["rx_ready"] == 1
    assert r["ub_rsp_ready"] == 1 and r["core_valid"] == [0, 0] and r["tx_same_cycle"] == 0
    # the store's ack: counted for (rank 2, core 1), sent as an ack of 1 store, a small flit
    assert r["ack"] == {"dst": 2, "src": RANK, "kind": "RSP", "op": "WRITE_BLOCK", "core": 1,
                        "block": 0, "word": 0, "data": 1, "small": 1}
    assert r["load_port"] == [1, 1] and r["load_addr"] == [5, 9] and r["host_rvalid"] == 0
    assert r["word"] == {"dst": 3, "src": RANK, "kind": "RSP", "op": "READ_WORD", "core": 0,
                         "block": 0, "word": 0, "data": 0x5678, "small": 1}


async def incoming_rsp_intent(bench):
    await reset_inputs(bench)
    bench.set("rx.payload", flit(FlitKind.RSP, MemOp.READ_BLOCK, src=3, core=1, data=0xABCDEF))
    bench.set("rx.valid", 1)
    seen = {"valid": [await bench.get(f"mem_rsp.{i}.valid") for i in range(N)],
            "answer": fields(bench, "mem_rsp.1.payload", await bench.get("mem_rsp.1.payload")),
            "rx_ready": await bench.get("rx.ready")}
    # a local load answer of the same core wins; the flit waits a cycle
    bench.set("ub_read.1.resp.valid", 1)
    bench.set("ub_read.1.resp.payload", {"block": 0, "word": 99})
    seen["rx_ready_blocked"] = await bench.get("rx.ready")
    seen["local_first"] = fields(bench, "mem_rsp.1.payload", await bench.get("mem_rsp.1.payload"))
    return seen


def test_incoming_rsp_reaches_its_core():
    r, _ = run(spec(), incoming_rsp_intent)
    assert r["valid"] == [0, 1] and r["rx_ready"] == 1
    assert r["answer"] == {"op": "READ_BLOCK", "data": 0xABCDEF}
    assert r["rx_ready_blocked"] == 0 and r["local_first"]["data"] == 99


# --- arbitration ---------------------------------------------------------------------------------

async def fairness_intent(bench, beats):
    await reset_inputs(bench)
    for i in range(N):
        bench.set(f"mem_req.{i}.payload", req(MemOp.WRITE_WORD, 0, i, 0, 100 + i))
        bench.set(f"mem_req.{i}.valid", 1)
    bench.set("tx.ready", 1)
    order = []
    for _ in range(beats):
        assert await bench.get("tx.valid")
        order.append(fields(bench, "tx.payload", await bench.get("tx.payload"))["core"])
        ready = [await bench.get(f"mem_req.{i}.ready") for i in range(N)]
        assert ready == [int(c == order[-1]) for c in range(N)]
        await bench.tick()
    return order


def test_round_robin_between_two_cores_remote_requests():
    order, _ = run(spec(), fairness_intent, {"beats": 10})
    assert order.count(0) == order.count(1) == 5
    assert all(a != b for a, b in zip(order, order[1:]))       # strictly alternating


async def host_wins_intent(bench):
    await reset_inputs(bench)
    bench.set("mem_req.0.payload", req(MemOp.WRITE_WORD, RANK, 1, 0, 5))
    bench.set("mem_req.0.valid", 1)
    bench.set("host.we", 1)
    bench.set("host.addr", (7 << 9) | (3 << 2))
    bench.set("host.wdata", 0xF00D)
    ub = bench.decode("ub_req.payload", await bench.get("ub_req.payload"))
    return [int(ub.addr), int(ub.word), int(ub.data), await bench.get("mem_req.0.ready")]


def test_host_write_wins_the_ub_port():
    r, _ = run(spec(), host_wins_intent)
    assert r == [7, 3, 0xF00D, 0]


async def host_read_intent(bench):
    await reset_inputs(bench)
    bench.set("rx.payload", flit(FlitKind.REQ, MemOp.READ_WORD, src=2, block=1))
    bench.set("rx.valid", 1)
    bench.set("host.re", 1)
    bench.set("host.addr", (6 << 9) | (4 << 2))
    rp = bench.decode("ub_read.2.req.payload", await bench.get("ub_read.2.req.payload"))
    seen = {"port": [await bench.get("ub_read.2.req.valid"), int(rp.addr), int(rp.word)],
            "rx_ready": await bench.get("rx.ready")}          # the remote load waits
    await bench.tick()
    bench.set("host.re", 0)
    bench.set("rx.valid", 0)
    await bench.tick(L - 1)
    bench.set("ub_read.2.resp.payload", {"block": 0, "word": 0xBEEF})
    bench.set("ub_read.2.resp.valid", 1)
    seen["answer"] = [await bench.get("host.rvalid"), await bench.get("host.rdata")]
    await bench.tick()
    bench.set("ub_read.2.resp.valid", 0)
    bench.set("tx.ready", 1)
    seen["tx_valid"] = await bench.get("tx.valid")           # the host's answer is not queued
    return seen


def test_host_read_wins_the_shared_read_port():
    r, _ = run(spec(), host_read_intent)
    assert r == {"port": [1, 6, 4], "rx_ready": 0, "answer": [1, 0xBEEF], "tx_valid": 0}


# --- the RSP queue's reserved space --------------------------------------------------------------

async def reserved_space_intent(bench, depth):
    """tx blocked: incoming loads are accepted only while their answers have room."""
    await reset_inputs(bench)
    accepted = 0
    bench.set("rx.valid", 1)
    for k in range(depth + 3):
        bench.set("rx.payload", flit(FlitKind.REQ, MemOp.READ_WORD, src=0, core=0, block=k % 8))
        if await bench.get("rx.ready"):
            accepted += 1
        await bench.tick()
        # answer every load exactly L cycles after it was issued (as the HBM does)
        bench.set("ub_read.2.resp.valid", int(k + 1 >= L and k + 1 - L < accepted))
    bench.set("ub_read.2.resp.valid", 0)
    seen = {"accepted": accepted, "ready_full": await bench.get("rx.ready")}
    # RSP flits are still sunk with the queue full (the deadlock argument)
    bench.set("rx.payload", flit(FlitKind.RSP, MemOp.READ_WORD, core=1, data=1))
    seen["rsp_ready_full"] = await bench.get("rx.ready")
    # a store's ack needs no queue space: counted even with the queue full
    bench.set("rx.payload", flit(FlitKind.REQ, MemOp.WRITE_WORD, src=2, core=1, block=1))
    seen["store_taken"] = await bench.get("rx.ready")
    await bench.tick()
    bench.set("rx.valid", 0)
    bench.set("ub_rsp.payload", {"op": UBOp.WORD_WRITE, "addr": 1, "old": 0})
    bench.set("ub_rsp.valid", 1)
    seen["store_ack_taken_full"] = await bench.get("ub_rsp.ready")
    await bench.tick()
    # a remote fetch-add's answer (data) cannot enter a full queue: ub_rsp is held off
    bench.set("rx.payload", flit(FlitKind.REQ, MemOp.FETCH_ADD, src=2, core=1, block=1))
    bench.set("rx.valid", 1)
    seen["write_taken"] = await bench.get("rx.ready")        # the UB port takes it ...
    await bench.tick()
    bench.set("rx.valid", 0)
    bench.set("ub_rsp.payload", {"op": UBOp.FETCH_ADD, "addr": 1, "old": 7})
    bench.set("ub_rsp.valid", 1)
    seen["ub_rsp_ready_full"] = await bench.get("ub_rsp.ready")   # ... its answer waits
    # drain one entry: the UB answer enters; a load arriving in that same cycle must not
    bench.set("tx.ready", 1)
    await bench.tick()
    bench.set("tx.ready", 0)
    bench.set("rx.payload", flit(FlitKind.REQ, MemOp.READ_WORD, src=0, core=0, block=2))
    bench.set("rx.valid", 1)
    seen["ub_rsp_ready_after_drain"] = await bench.get("ub_rsp.ready")
    seen["load_ready_while_ub_enters"] = await bench.get("rx.ready")
    await bench.tick()
    bench.set("ub_rsp.valid", 0)
    # drain everything: loads are accepted again
    bench.set("rx.valid", 0)
    bench.set("tx.ready", 1)
    drained = 0
    while await bench.get("tx.valid"):
        drained += 1
        await bench.tick()
    bench.set("rx.valid", 1)
    seen["drained"] = drained
    seen["ready_after_drain"] = await bench.get("rx.ready")
    return seen


@pytest.mark.parametrize("depth", [1, 2, 4])
def test_rsp_queue_reserved_space_holds_rx(depth):
    r, _ = run(spec(rsp_depth=depth), reserved_space_intent, {"depth": depth})
    assert r["accepted"] == depth               # answers in flight count against the space
    assert r["ready_full"] == 0
    assert r["rsp_ready_full"] == 1
    assert r["store_taken"] == 1 and r["store_ack_taken_full"] == 1
    assert r["write_taken"] == 1 and r["ub_rsp_ready_full"] == 0
    assert r["ub_rsp_ready_after_drain"] == 1 and r["load_ready_while_ub_enters"] == 0
    assert r["drained"] == depth + 1            # the data answers and the store's ack
    assert r["ready_after_drain"] == 1


# --- parameters ----------------------------------------------------------------------------------

def test_rsp_depth_bound():
    assert rsp_depth_bound(4, 2) == 3 * 2            # one data answer per remote core
    assert rsp_depth_bound(1, 8) == 2


@pytest.mark.parametrize("kw, exc, text", [
    ({"ranks": 0}, ValueError, "ranks must be in [1, 256], not 0"),
    ({"aivs": 1.0}, TypeError, "aivs must be an integer, not 1.0"),
    ({"hbm_blocks": 6}, ValueError, "hbm_blocks must be a power of two, not 6"),
    ({"data_bytes": 48}, ValueError, "data_bytes must be a multiple of 32, not 48"),
    ({"hbm_latency": 0}, ValueError, "hbm_latency must be in [1, 256], not 0"),
    ({"rsp_depth": 0}, ValueError, "rsp_depth must be >= 1, not 0"),
    ({"rsp_depth": None}, TypeError, "rsp_depth must be an integer, not None"),
])
def test_bad_parameters(kw, exc, text):
    with pytest.raises(exc, match=text.replace("[", r"\[").replace("]", r"\]")):
        rejected(DieRouter, **{**PARAMS, **kw})


# --- ack coalescing ----------------------------------------------------------------------------------

async def coalesce_intent(bench, stores):
    """``stores`` remote stores of (rank 2, core 1) committed while tx is blocked: one ack for all."""
    await reset_inputs(bench)
    for k in range(stores + 1):
        # the REQ the UB port takes in cycle k is answered (committed) in cycle k + 1
        bench.set("rx.payload", flit(FlitKind.REQ, MemOp.WRITE_BLOCK, src=2, core=1, block=k))
        bench.set("rx.valid", int(k < stores))
        bench.set("ub_rsp.payload", {"op": UBOp.BLOCK_WRITE if k % 2 else UBOp.WORD_WRITE,
                                     "addr": k, "old": 0})
        bench.set("ub_rsp.valid", int(k > 0))
        await bench.tick()
    bench.set("rx.valid", 0)
    bench.set("ub_rsp.valid", 0)
    await bench.tick()
    acks = []
    bench.set("tx.ready", 1)
    for _ in range(6):
        if await bench.get("tx.valid"):
            acks.append(fields(bench, "tx.payload", await bench.get("tx.payload")))
        await bench.tick()
    return acks


def test_store_acks_are_counted_and_coalesced_into_one_small_flit():
    acks, _ = run(spec(), coalesce_intent, {"stores": 5})
    assert [(a["op"], a["dst"], a["core"], a["data"], a["small"]) for a in acks] == [
        ("WRITE_BLOCK", 2, 1, 5, 1)]
