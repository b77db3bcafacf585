"""``daf``: the Data-as-Flag micro-benchmark (UBEP §3.4, Fig. 6, Fig. 10).

Every rank sends ``bytes`` (g) to every other rank and every receiver
detects and consumes all of it, with one of four synchronisation protocols
(``docs/spec/kernels.md`` §1.7, formats in :mod:`epfabric.sw.dataflag`):

======== ====================================================================
``sw``   stop-and-wait (CANN EP's): ⌈g/512⌉ raw blocks to every destination,
         one ``fence`` (every ack back), then one flag word ``EPOCH`` per
         destination into ``SIG[src]``; the receiver polls the flag, then
         reads the message.
``tff``  Token-Flag Fusion: ⌈g/480⌉ blocks, each one atomic 512 B store whose
         leading 32 B are the flag field (word 0 ``0x0D0D0000 | EPOCH``,
         word 1 ``src << 16 | dst``, word 2 0, word 3 the block index b,
         words 4–7 0) and whose bytes 32–511 carry 480 B of the message; the
         receiver polls word 0 of each block.
``dc``   Data-for-Checksum: ⌈g/512⌉ raw blocks, then one checksum block per
         (src, dst) message into ``SIG[src]`` (word 0 ``EPOCH``, word 1 the
         sum of the blocks' markers mod 2³², words 2–7 0; a marker is the sum
         of a block's eight leading words, :func:`~epfabric.sw.dataflag.dc_marker`);
         the sender sums the markers as it sends, the receiver polls the
         checksum's word 0, then re-sums the markers of the message's blocks
         until the sum equals the checksum.
``sp``   Sentinel Polling: ⌈g/512⌉ raw blocks into a receive region the host
         pre-filled with :data:`~epfabric.sw.dataflag.RESERVED_SENTINEL`; the
         receiver polls word 0 of each block until it differs from the
         sentinel and, once it has consumed every block of its sources,
         re-arms them (eight local ``sw`` of the sentinel per block,
         charged to the receiver after its ``DONE_MARK``, so not
         in the latency but reported as ``rearm_cycles`` — the region is
         needed again only by the next round).
======== ====================================================================

"Consume" is the same for every protocol: the receiver loads each block it
has detected into its UBuf (``ldb``) and stores it to its ``OUT`` region
(``stb``), so what the receiver read right after detection is in memory for
the checker (a torn read shows there, see ``broken``).

Work split, with A AIVs per die: destination ``d = (rank + i) mod R`` for
``i = 1 .. R-1`` is served by sender core ``(i - 1) mod A`` (an even split,
nearest offsets first), and receiver core ``c`` of a rank takes the sources
``s = (rank - i) mod R`` with the same ``i``, so each (src, dst) message is
sent and received by cores of the same index. Each core sends first, then
receives. MARKs: ``START_MARK`` by core 0 of rank 0 as it starts (every core
starts in the same cycle; a MARK from every core there would queue them on
the trace merge, one per cycle), ``DONE_MARK`` by every core once it has
detected and consumed every message of its sources, and (SP) ``REARM_MARK``
once it has re-armed them; latency = last ``DONE_MARK`` − ``START_MARK``;
``rearm_cycles`` = the longest ``REARM_MARK`` − ``DONE_MARK`` of a core.
All MARKs share the system's one trace merge (one event a cycle), so a
core's MARK may wait a few cycles behind others' (at 8 ranks × 4 AIVs, SP's
REARM marks moved its latency by 9 of ~980 cycles).

Memory map of every rank (DataBlock indices; ``nb`` blocks per message,
``R`` ranks): block 0 unused; ``SIG + s`` (flag / checksum of source s) and
a guard block; ``RECV + s*(nb+1) + b`` (block b of source s's message, a
guard block after each message); ``OUT`` laid out like ``RECV``;
``SEND + (i-1)*nb + b`` (the message to rank ``rank + i``, written by the
host in the protocol's block format: raw, or TFF with a zero flag field).
Everything the run must not write holds a canary (:data:`CANARY`) or the
host's data, and the checker reads it back.

Programs depend on the configuration and ``protocol``/``bytes`` only; the
message bytes are data the host writes (``seed``). Cycle counts do not
depend on ``data_bytes``; the checker compares every modelled byte (the
leading ``data_bytes`` of every block).

``broken`` (negative controls): ``"tear"`` runs ``tff`` on a non-atomic UB
port (``MachineConfig.non_atomic_port``: 64 B beats, flag first) with
``data_bytes = 512``, so a receiver that reads a block right after seeing its
flag reads a torn block; ``"sentinel"`` (``sp``) makes the leading 32 B of
the first block from rank 0 to rank 1 equal the sentinel, which rank 1 never
detects (the watchdog names the waiting core); ``"nofence"`` (``sw``) drops
the fence between data and flag — on this fabric a (src, dst) pair's stores
travel one path in order, so the flag cannot overtake the data and the
variant stays correct (and faster).
"""

import numpy as np

from ...hw.validate import UserError, check_int
from ..assembler import Program
from ..config import MachineConfig
from ..dataflag import (BLOCK_BYTES, FLAG_BYTES, RESERVED_SENTINEL, SENTINEL_WORD, TFF_PAYLOAD_BYTES,
                        TFF_TAG, dc_checksum)
from ..isa import address
from ..machine import region_names
from ..presets import get_preset
from ..param import Param
from . import Kernel, pow2_at_least, register

__all__ = ["PROTOCOLS", "BROKEN", "EPOCH", "TFF_FLAG", "CANARY", "START_MARK", "DONE_MARK", "REARM_MARK",
           "Layout", "blocks_per_message", "layout", "destinations", "sources",
           "program", "messages", "message_blocks", "machine_sizes", "Daf", "KERNEL"]

PROTOCOLS = ("sw", "tff", "dc", "sp")
BROKEN = ("none", "tear", "sentinel", "nofence")
#: the protocol each negative control belongs to
BROKEN_PROTOCOL = {"tear": "tff", "sentinel": "sp", "nofence": "sw"}
EPOCH = 1
#: TFF word 0: the tag and the epoch (docs/spec/kernels.md §1.7)
TFF_FLAG = TFF_TAG | EPOCH
#: what the host writes where the run must not write (and where data has not arrived yet)
CANARY = 0xC3A5C3A5
START_MARK, DONE_MARK, REARM_MARK = 400, 402, 403
MAX_BYTES = 1 << 16
_FLAG_WORDS = FLAG_BYTES // 4


def blocks_per_message(protocol, nbytes):
    """DataBlocks one message of ``nbytes`` takes: ⌈g/480⌉ with TFF, ⌈g/512⌉ otherwise."""
    per = TFF_PAYLOAD_BYTES if protocol == "tff" else BLOCK_BYTES
    return -(-nbytes // per)


class Layout:
    """Block indices of one run's memory map (module docstring)."""

    def __init__(self, ranks, nb):
        self.ranks, self.nb = ranks, nb
        self.SIG = 1
        self.SIG_GUARD = self.SIG + ranks
        self.RECV = self.SIG_GUARD + 1
        self.OUT = self.RECV + ranks * (nb + 1)
        self.SEND = self.OUT + ranks * (nb + 1)
        self.end = self.SEND + (ranks - 1) * nb

    def recv(self, s, b=0):
        return self.RECV + s * (self.nb + 1) + b

    def out(self, s, b=0):
        return self.OUT + s * (self.nb + 1) + b

    def send(self, i, b=0):
        """Block b of the message to rank ``rank + i`` (``i`` = 1 .. R-1)."""
        return self.SEND + (i - 1) * self.nb + b


def layout(config, protocol, nbytes):
    return Layout(config.ranks, blocks_per_message(protocol, nbytes))


def destinations(config, rank, core):
    """``[(i, d), ...]`` the sender core serves: ``d = rank + i``, ``(i - 1) mod A == core``."""
    R, A = config.ranks, config.aivs_per_die
    return [(i, (rank + i) % R) for i in range(1, R) if (i - 1) % A == core]


def sources(config, rank, core):
    """``[(i, s), ...]`` the receiver core polls: ``s = rank - i``, same ``i`` rule."""
    R, A = config.ranks, config.aivs_per_die
    return [(i, (rank - i) % R) for i in range(1, R) if (i - 1) % A == core]


def _marker_sum(p, row_reg):
    """r6 += the marker of the UBuf row at ``row_reg`` (its eight leading words)."""
    for k in range(_FLAG_WORDS):
        p.ulw(5, row_reg, 4 * k)
        p.add(6, 6, 5)


def program(config, rank, core, protocol, nbytes, broken="none"):
    """The program of ``(rank, core)`` (see the module docstring); data-independent."""
    lay = layout(config, protocol, nbytes)
    nb = lay.nb
    p = Program()
    if rank == 0 and core == 0:
        p.mark(START_MARK)          # one core: every core starts in the same cycle
    # r0 = UBuf row 0 (the block in hand); r11 = UBuf row 1 (DC's checksum block)
    # --- send ------------------------------------------------------------------------------
    dests = destinations(config, rank, core)
    if protocol == "tff":
        p.li(9, TFF_FLAG)
    if protocol == "dc":
        p.li(9, EPOCH)
        p.li(11, BLOCK_BYTES)
        for k in range(2, _FLAG_WORDS):
            p.usw(0, 11, 4 * k)                          # checksum block words 2..7 = 0
    for i, d in dests:
        p.li(1, address(rank, lay.send(i)))
        p.li(2, address(d, lay.recv(rank)))
        if protocol == "tff":
            p.li(8, rank << 16 | d)
        if protocol == "dc":
            p.li(6, 0)
        for b in range(nb):
            p.ldb(0, 1, b * BLOCK_BYTES)                 # the message block -> UBuf
            if protocol == "tff":
                p.usw(9, 0, 0)                           # flag field: word 0 flag,
                p.usw(8, 0, 4)                           # word 1 src<<16|dst,
                if b:
                    p.li(7, b)
                p.usw(7 if b else 0, 0, 12)              # word 3 block index
            if protocol == "dc":
                _marker_sum(p, 0)
            p.stb(0, 2, b * BLOCK_BYTES)                 # one atomic 512 B store
        if protocol == "dc":                             # the checksum packet
            p.usw(9, 11, 0)
            p.usw(6, 11, 4)
            p.li(3, address(d, lay.SIG + rank))
            p.stb(11, 3, 0)
    if protocol == "sw" and dests:
        if broken != "nofence":
            p.fence()                                    # stop-and-wait: every ack back
        p.li(9, EPOCH)
        for i, d in dests:
            p.li(3, address(d, lay.SIG + rank))
            p.sw(9, 3, 0)                                # the flag word
    # --- receive: detect, consume (ldb + stb to OUT) ----------------------------------------
    srcs = sources(config, rank, core)
    p.li(9, {"sw": EPOCH, "dc": EPOCH, "tff": TFF_FLAG, "sp": SENTINEL_WORD}[protocol])
    for n, (i, s) in enumerate(srcs):
        p.li(1, address(rank, lay.recv(s)))
        p.li(2, address(rank, lay.out(s)))
        if protocol in ("sw", "dc"):
            p.li(3, address(rank, lay.SIG + s))
            p.poll(5, 3, 9, "eq")                        # flag / checksum epoch
        if protocol == "dc":
            p.lw(4, 3, 4)                                # the checksum
            p.label(f"verify{n}")
            p.li(6, 0)
        for b in range(nb):
            if protocol in ("tff", "sp"):
                p.addi(3, 1, b * BLOCK_BYTES)
                p.poll(5, 3, 9, "eq" if protocol == "tff" else "ne")
            p.ldb(0, 1, b * BLOCK_BYTES)
            if protocol == "dc":
                _marker_sum(p, 0)
            p.stb(0, 2, b * BLOCK_BYTES)
        if protocol == "dc":
            p.bne(6, 4, f"verify{n}")                    # not all there yet: sum again
    p.mark(DONE_MARK)
    if protocol == "sp":                                 # re-arm every used block
        for i, s in srcs:
            p.li(1, address(rank, lay.recv(s)))
            for b in range(nb):
                for k in range(_FLAG_WORDS):
                    p.sw(9, 1, b * BLOCK_BYTES + 4 * k)      # committed as issued (local)
        p.mark(REARM_MARK)
    p.halt()
    return p


def messages(config, nbytes, seed, broken="none"):
    """Message bytes ``[src, dst, byte]`` (uint8; the diagonal is unused).

    No 32-bit word equals the sentinel word (so every protocol sends the same
    data and SP can detect all of it), except with ``broken="sentinel"``: the
    leading 32 B (or all of a shorter message) of rank 0's message to rank 1
    are the sentinel.
    """
    R = config.ranks
    rng = np.random.default_rng(seed)
    padded = -(-nbytes // 4) * 4
    data = rng.integers(0, 256, size=(R, R, padded), dtype=np.uint8)
    data[..., nbytes:] = 0
    words = data.view("<u4")
    words[words == SENTINEL_WORD] ^= 1
    if broken == "sentinel":
        n = min(_FLAG_WORDS, padded // 4)
        words[0, 1, :n] = RESERVED_SENTINEL[:n]
    return data[..., :nbytes]


def message_blocks(message, protocol, src, dst):
    """One message in the protocol's block format, as ``(nb, 128)`` uint32 words.

    ``src``/``dst`` fill TFF's flag field; ``None`` leaves it zero (the host's
    send buffer, before the sender writes it).
    """
    nbytes = len(message)
    nb = blocks_per_message(protocol, nbytes)
    out = np.zeros((nb, BLOCK_BYTES), dtype=np.uint8)
    if protocol == "tff":
        for b in range(nb):
            chunk = message[b * TFF_PAYLOAD_BYTES:(b + 1) * TFF_PAYLOAD_BYTES]
            out[b, FLAG_BYTES:FLAG_BYTES + len(chunk)] = chunk
    else:
        out.reshape(-1)[:nbytes] = message
    words = out.view("<u4").astype(np.uint32)
    if protocol == "tff" and src is not None:
        words[:, 0] = TFF_FLAG
        words[:, 1] = src << 16 | dst
        words[:, 3] = np.arange(nb)
    return words


def _program_lengths(config, protocol, nbytes):
    return max(len(program(config, r, c, protocol, nbytes))
               for r in range(config.ranks) for c in range(config.aivs_per_die))


def machine_sizes(config, max_bytes, protocols=PROTOCOLS):
    """``hbm_blocks``, ``imem_depth``, ``trace_depth`` for every protocol in ``protocols``
    at every size up to ``max_bytes`` on ``config``'s shape (one machine for a whole grid)."""
    blocks = max(layout(config, p, max_bytes).end for p in protocols)
    longest = max(_program_lengths(config, p, max_bytes) for p in protocols)
    return {"hbm_blocks": pow2_at_least(blocks), "imem_depth": pow2_at_least(longest),
            "trace_depth": max(64, pow2_at_least(2 * config.cores + 1))}


class Daf(Kernel):
    """The Data-as-Flag micro-benchmark (module docstring)."""

    name = "daf"
    description = ("Data-as-Flag micro-benchmark: every rank sends `bytes` to every other rank "
                   "with sw / tff / dc / sp synchronisation, checked against numpy")
    params = (Param("protocol", "tff", "how a receiver detects a message: stop-and-wait, "
                    "Token-Flag Fusion, Data-for-Checksum or Sentinel Polling", str, PROTOCOLS),
              Param("bytes", 512, "bytes every rank sends every other rank (g)", int),
              Param("seed", 0, "message data seed", int, minimum=0),
              Param("broken", "none", "a negative control: tear (tff), sentinel (sp), nofence "
                    "(sw)", str, BROKEN))
    default_preset = "cm384"
    default_aivs = (2,)
    default_max_cycles = 1_000_000

    def resolve_params(self, params):
        p = super().resolve_params(params)
        check_int("bytes", p["bytes"], 1, MAX_BYTES)
        if p["broken"] != "none" and BROKEN_PROTOCOL[p["broken"]] != p["protocol"]:
            raise UserError(f"broken={p['broken']!r} is a negative control of protocol="
                            f"{BROKEN_PROTOCOL[p['broken']]!r}, not of protocol={p['protocol']!r}")
        return p

    def configs(self, preset, topology=None, aivs=None, params=None):
        """One machine per AIV count, sized for ``params``; ``broken="tear"`` gets the non-atomic
        port and 512 modelled bytes per block (the torn words must be modelled to be seen)."""
        params = self.resolve_params(params)
        p = get_preset(preset)
        topology = tuple(topology) if topology is not None else self.default_topology(p)
        extra = ({"non_atomic_port": True, "data_bytes": BLOCK_BYTES}
                 if params["broken"] == "tear" else {"data_bytes": 64})
        out = []
        for a in ([aivs] if aivs is not None else self.default_aivs):
            shape = MachineConfig(p.name, topology=topology, aivs_per_die=a)
            sizes = machine_sizes(shape, params["bytes"], (params["protocol"],))
            out.append(MachineConfig(p.name, topology=topology, aivs_per_die=a, **sizes, **extra))
        return out

    def load(self, machine, params):
        """Programs, canaries, sentinels and send buffers; returns what the checker needs."""
        params = self.resolve_params(params)
        cfg = machine.config
        protocol, nbytes, broken = params["protocol"], params["bytes"], params["broken"]
        lay = layout(cfg, protocol, nbytes)
        per = lay.nb + 1
        machine.describe = region_names(
            [("SIG", lay.SIG, cfg.ranks, None), ("SIG_GUARD", lay.SIG_GUARD, 1, None),
             ("RECV", lay.RECV, cfg.ranks * per, None), ("OUT", lay.OUT, cfg.ranks * per, None),
             ("SEND", lay.SEND, lay.end - lay.SEND, None)], cfg.words_per_block)
        if cfg.hbm_blocks < lay.end:
            raise UserError(f"daf ({protocol}, {nbytes} B on {cfg.ranks} ranks) needs hbm_blocks "
                            f">= {lay.end}, not {cfg.hbm_blocks}")
        if cfg.trace_depth < 2 * cfg.cores + 1:
            raise UserError(f"daf needs trace_depth >= {2 * cfg.cores + 1} (a START, and a DONE "
                            f"and a REARM MARK per core), not {cfg.trace_depth}")
        if broken == "tear" and not cfg.non_atomic_port:
            raise UserError("broken='tear' needs a machine with non_atomic_port=True")
        if cfg.non_atomic_port:
            # a host block write is one UB BLOCK_WRITE per cycle, which a port busy with
            # the beats of the previous one would lose: load word by word instead
            machine.row_writes = False
        data = messages(cfg, nbytes, params["seed"], broken)
        wpb = cfg.words_per_block
        R = cfg.ranks
        canary = [CANARY] * wpb
        armed = [SENTINEL_WORD] * _FLAG_WORDS + [CANARY] * (wpb - _FLAG_WORDS)
        for r in range(R):
            for c in range(cfg.aivs_per_die):
                machine.load_program(r, c, program(cfg, r, c, protocol, nbytes, broken))
            for blk in range(lay.SIG, lay.SEND):
                machine.write_mem(r, address(0, blk), canary)
            if protocol == "sp":                         # pre-fill: every receive block armed
                for s in set(range(R)) - {r}:
                    for b in range(lay.nb):
                        machine.write_mem(r, address(0, lay.recv(s, b)), armed)
            for i in range(1, R):
                words = message_blocks(data[r, (r + i) % R], protocol, None, None)
                for b in range(lay.nb):
                    machine.write_mem(r, address(0, lay.send(i, b)), words[b, :wpb].tolist())
        machine.read_back([(0, lay.end)])
        return {"params": params, "data": data, "layout": lay}

    def check(self, machine, report, inputs):
        """Every message exactly once in ``RECV`` and ``OUT``, signals, guards, re-arming; latency."""
        cfg = machine.config
        params, data, lay = inputs["params"], inputs["data"], inputs["layout"]
        protocol = params["protocol"]
        R, wpb, nb = cfg.ranks, cfg.words_per_block, lay.nb
        problems = []

        def blocks(rank, first, n):
            return np.array([machine.read_mem(rank, address(0, b), wpb)
                             for b in range(first, first + n)], dtype=np.uint64)

        canary = np.full(wpb, CANARY, dtype=np.uint64)
        for d in range(R):
            mem = blocks(d, 0, lay.end)
            if mem[0].any():
                problems.append(f"rank {d}: block 0 was written")
            for s in range(R):
                sig, recv = mem[lay.SIG + s], mem[lay.recv(s):lay.recv(s) + nb]
                out = mem[lay.out(s):lay.out(s) + nb]
                if s == d:
                    if not (np.all(recv == canary) and np.all(out == canary)
                            and np.all(sig == canary)):
                        problems.append(f"rank {d}: its own receive/out/signal blocks were written")
                    continue
                want = message_blocks(data[s, d], protocol, s, d)[:, :wpb]
                if not np.array_equal(out, want):
                    bad = sorted({int(b) for b in np.nonzero((out != want).any(axis=1))[0]})
                    problems.append(f"rank {d}: what core {self._core(cfg, d, s)} consumed from "
                                    f"rank {s} differs in block(s) {bad}")
                got = recv.copy()
                if protocol == "sp":
                    if not np.all(got[:, :_FLAG_WORDS] == SENTINEL_WORD):
                        problems.append(f"rank {d}: receive blocks of rank {s} were not re-armed")
                    got[:, :_FLAG_WORDS] = want[:, :_FLAG_WORDS]
                if not np.array_equal(got, want):
                    problems.append(f"rank {d}: receive blocks of rank {s} differ")
                want_sig = canary.copy()
                if protocol == "sw":
                    want_sig[0] = EPOCH
                elif protocol == "dc":
                    raw = message_blocks(data[s, d], protocol, s, d)
                    full = [blk.astype("<u4").tobytes() for blk in raw]
                    want_sig[:] = 0                     # one block store: every word
                    want_sig[:2] = [EPOCH, dc_checksum(full)]
                if not np.array_equal(sig, want_sig):
                    problems.append(f"rank {d}: signal block of rank {s} holds "
                                    f"{[hex(int(w)) for w in sig[:2]]}")
                for guard in (lay.recv(s, nb), lay.out(s, nb)):
                    if not np.array_equal(mem[guard], canary):
                        problems.append(f"rank {d}: guard block {guard} was overwritten")
            if not np.array_equal(mem[lay.SIG_GUARD], canary):
                problems.append(f"rank {d}: guard block {lay.SIG_GUARD} was overwritten")
            for i in range(1, R):
                want = message_blocks(data[d, (d + i) % R], protocol, None, None)[:, :wpb]
                if not np.array_equal(mem[lay.send(i):lay.send(i) + nb], want):
                    problems.append(f"rank {d}: send buffer to rank {(d + i) % R} was modified")
        # flits each rank sent / received: its stores (or the peers') plus the acks of the
        # stores it received (coalesced: at least one, at most one per store)
        stores = self.remote_stores(cfg, protocol, params["bytes"])
        for key in ("tx_blocks", "rx_blocks"):
            for r, n in enumerate(report.counters.get(key, [])):
                if not stores < n <= 2 * stores:
                    problems.append(f"rank {r}: {key} {n} is not {stores} stores plus 1..{stores} "
                                    f"acks")
        done = report.marks(event=DONE_MARK)
        start = report.marks(event=START_MARK)
        if report.trace_dropped:
            problems.append(f"the MARK trace dropped {report.trace_dropped} events")
        if len(done) != cfg.cores or len(start) != 1:
            problems.append(f"{len(done)} of {cfg.cores} cores marked DONE")
        latency = (max(m["cycle"] for m in done) - min(m["cycle"] for m in start)
                   if done and start else None)
        rearm_cycles = None
        if protocol == "sp":
            rearm = {(m["rank"], m["core"]): m["cycle"] for m in report.marks(event=REARM_MARK)}
            if len(rearm) != cfg.cores:
                problems.append(f"{len(rearm)} of {cfg.cores} cores marked REARM")
            rearm_cycles = max((rearm[m["rank"], m["core"]] - m["cycle"] for m in done
                                if (m["rank"], m["core"]) in rearm), default=None)
        cycle_ns = machine.preset.cycle_ns
        per_rank = {}
        for m in done:
            per_rank[m["rank"]] = max(per_rank.get(m["rank"], 0), m["cycle"])
        return {"correct": not problems, "problems": problems, "protocol": protocol,
                "bytes": params["bytes"], "blocks_per_message": nb, "ranks": R,
                "aivs_per_die": cfg.aivs_per_die, "latency_cycles": latency,
                "latency_ns": None if latency is None else latency * cycle_ns,
                "done_cycle_per_rank": [per_rank.get(r) for r in range(R)],
                "rearm_cycles": rearm_cycles,
                "rearm_ns": None if rearm_cycles is None else rearm_cycles * cycle_ns,
                "remote_stores": stores}

    @staticmethod
    def _core(config, rank, src):
        """The receiver core of ``rank`` that takes ``src``'s message."""
        return ((rank - src) % config.ranks - 1) % config.aivs_per_die

    @staticmethod
    def remote_stores(config, protocol, nbytes):
        """Remote stores each rank issues: data blocks plus SW flags / DC checksums."""
        nb = blocks_per_message(protocol, nbytes)
        return (config.ranks - 1) * (nb + (protocol in ("sw", "dc")))

    def summary(self, result):
        return [f"daf {c['protocol']} on {result.preset} [{result.backend}]: "
                f"{c['ranks']} ranks x {c['aivs_per_die']} AIVs, {c['bytes']} B per message "
                f"({c['blocks_per_message']} blocks), latency {c['latency_cycles']} cycles "
                f"({c['latency_ns']:.0f} ns)" if c["latency_cycles"] is not None else
                f"daf: no latency ({'; '.join(c['problems'][:2])})"
                for c in (run.check for run in result.runs)]


KERNEL = register(Daf())
