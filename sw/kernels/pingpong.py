"""``pingpong``: one-way latency per distance class, measured by AIV programs.

Core 0 of rank 0 (the pinger) stores a 512 B DataBlock whose leading word is
a sequence number into a peer's HBM (one atomic UB write, Token-Flag-Fusion
style); the peer's core 0 polls its own HBM until the word arrives and
answers with a block into rank 0's HBM, which the pinger polls. MARKs
``START + seq`` / ``END + seq`` bracket each round trip; one-way latency is
half of it. Peers are chosen from the topology, one per class (UBEP Table 2):
``intra`` (the other die of the NPU), ``one_hop`` (a die of another NPU on
the board), ``two_hop`` (a die on another board) — plus ``local``: core 1 of
rank 0, whose round trip never leaves the die and so measures the cores' own
overhead (store issue, UB commit, poll detection) on both ends.
"""

from tabulate import tabulate

from ..assembler import Program
from ..isa import address
from ..machine import region_names
from . import Kernel, register

__all__ = ["START", "END", "peers", "programs", "ROUNDS", "PingPong", "KERNEL"]

START, END = 1000, 2000
ROUNDS = 3
PING, PONG = 1, 4   # first ping block on a peer; first pong block on rank 0 (one per class)


def peers(config):
    """``{class: (rank, core)}`` of the peers that exist in ``config``'s topology."""
    topo = config.topology
    out = {}
    if config.aivs_per_die >= 2:
        out["local"] = (0, 1)
    if topo[0] == "superpod":
        dpn, npb, boards = topo[1:]
        if dpn >= 2:
            out["intra"] = (1, 0)
        if npb >= 2:
            out["one_hop"] = (dpn, 0)
        if boards >= 2:
            out["two_hop"] = (dpn * npb, 0)
    else:
        out["one_hop"] = (1, 0)
    return out


def _seq(k, i):
    return k * ROUNDS + i + 1


def programs(config):
    """``{(rank, core): Program}`` for every participating core."""
    classes = list(peers(config).items())
    ping = Program()
    pongs = {}
    ping.li(10, 0)                                       # UBuf row 0
    for k, (cls, (prank, pcore)) in enumerate(classes):
        pong = pongs.setdefault((prank, pcore), Program())
        ping.li(1, address(prank, PING + k))
        ping.li(2, address(0, PONG + k))
        pong.li(1, address(prank, PING + k))
        pong.li(2, address(0, PONG + k))
        pong.li(10, 0)
        for i in range(ROUNDS):
            seq = _seq(k, i)
            ping.li(9, seq)
            ping.usw(9, 10, 0)                           # block word 0 = seq
            ping.mark(START + seq)
            ping.stb(10, 1, 0)                           # one 512 B store to the peer
            ping.poll(5, 2, 9, "ge")                     # wait for the answer
            ping.mark(END + seq)
            pong.li(9, seq)
            pong.poll(5, 1, 9, "ge")                     # wait for the ping
            pong.usw(9, 10, 0)
            pong.stb(10, 2, 0)                           # answer
        pong.fence()
    ping.halt()
    for p in pongs.values():
        p.halt()
    return {(0, 0): ping, **pongs}


class PingPong(Kernel):
    """One-way latency per distance class, and the cores' own overhead (module docstring)."""

    name = "pingpong"
    description = "one-way latency per distance class (and the cores' own overhead) by AIV programs"
    default_preset = "cm384"

    def default_topology(self, preset):
        """The smallest superpod with all three distance classes the preset allows."""
        if preset.topology != "superpod":
            return ("star", 2)
        return ("superpod", min(2, preset.dies_per_npu), min(2, preset.npus_per_board),
                min(2, preset.boards))

    def sizes(self, config):
        return {"hbm_blocks": 8, "imem_depth": 128}

    def load(self, machine, params):
        machine.describe = region_names([("PING", PING, PONG - PING, None), ("PONG", PONG, 3, None)],
                                        machine.config.words_per_block)
        for (rank, core), prog in programs(machine.config).items():
            machine.load_program(rank, core, prog)

    def check(self, machine, report, inputs):
        """Per-class one-way latency (ns, mean over the rounds) next to the fabric's, and a verdict.

        ``latency_ns`` excludes ``local``, which is ``core_overhead_ns``: the
        expected one-way latency of a class is the fabric's plus that overhead.
        """
        problems = []
        latency = {}
        cycle_ns = machine.preset.cycle_ns
        for k, cls in enumerate(peers(machine.config)):
            rtts = []
            for i in range(ROUNDS):
                seq = _seq(k, i)
                s, e = report.marks(event=START + seq), report.marks(event=END + seq)
                if len(s) != 1 or len(e) != 1:
                    problems.append(f"{cls} round {i}: marks missing")
                    continue
                rtts.append(e[0]["cycle"] - s[0]["cycle"])
            if rtts:
                latency[cls] = sum(rtts) / len(rtts) / 2 * cycle_ns
            prank, _ = peers(machine.config)[cls]
            last = _seq(k, ROUNDS - 1)
            if machine.read_mem(prank, address(0, PING + k))[0] != last:
                problems.append(f"{cls}: peer's ping block does not hold sequence {last}")
            if machine.read_mem(0, address(0, PONG + k))[0] != last:
                problems.append(f"{cls}: rank 0's pong block does not hold sequence {last}")
        overhead = latency.pop("local", None)
        fabric = {c: machine.preset.latency_ns()[c] for c in latency}
        expected = {c: fabric[c] + overhead for c in latency} if overhead is not None else {}
        return {"correct": not problems, "problems": problems, "latency_ns": latency,
                "core_overhead_ns": overhead, "fabric_latency_ns": fabric,
                "expected_latency_ns": expected,
                "error_pct": {c: 100.0 * (latency[c] - expected[c]) / expected[c]
                              for c in expected}}

    def summary(self, result):
        lines = []
        for run in (r.check for r in result.runs):
            overhead = run["core_overhead_ns"]
            lines.append(f"pingpong on {result.preset} [{result.backend}]: " + (
                f"core overhead {overhead:.1f} ns one-way" if overhead is not None else
                "core overhead not measured (it needs 2 AIVs per die)"))
            table = []
            for c in run["latency_ns"]:
                expected = run["expected_latency_ns"].get(c)
                table.append((c, f"{run['latency_ns'][c]:.1f}", f"{run['fabric_latency_ns'][c]:.1f}",
                              f"{expected:.1f}" if expected else "—",
                              f"{run['error_pct'][c]:+.2f}%" if expected else "—"))
            lines.append(tabulate(table, headers=("class", "one-way ns", "fabric ns",
                                                  "fabric+overhead", "error"),
                                  disable_numparse=True, colalign=("right",) * 5))
        return lines


KERNEL = register(PingPong())
