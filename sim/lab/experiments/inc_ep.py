"""The in-network question: what if the superpod's UB switches multicast and reduce?

Each point runs the ``combine`` kernel (a dispatch, the stand-in experts, the combine) of
CANN EP, UBEP and UBEP-INC (:mod:`epfabric.sw.ubep.ubep_inc`) on one machine whose switches
multicast and reduce (``ep_window``; CANN and UBEP do not use it), on the same routing, and
records each system's dispatch and combine latency and the data blocks on every link class,
measured by the fabric's counters beside the routing's exact count and the uniform-routing
closed form (:mod:`epfabric.sw.ubep.traffic`, INC-MoE §2.2's way of counting). Every run is
checked bit-exact by the kernel's checker (a wrong run raises: no row comes from one).

Shapes: 4 dies ``superpod:2,1,2`` (the quick grid), 8 ``superpod:2,2,2``, 16
``superpod:2,4,2``, 32 ``superpod:2,8,2`` (two boards each, so tier-2 carries traffic), 64
``superpod:2,8,4`` (four boards). ``experts = 2 · ranks``, top-8 (top-4 at 4 dies, which have
8 experts).

32 and 64 dies run on the native backend only. The flat Verilog model of that
machine (Verilator, Icarus) does not convert here: Yosys's WebAssembly build runs out of its
4 GiB (``bad_alloc``, measured at ``ep_window`` 256 and 64), because each tier-1 switch, 32
ports of 512 B flits with a reduction slot of a block for every (destination, result block),
is one module. The native backend builds it as a control part and data planes
(:class:`~epfabric.hw.inc_switch.PlanarIncSwitch`), each converted alone.
Past 32 dies a die mask is two registers and two header words
(:attr:`~epfabric.sw.ubep.layout.Layout.wide_mask`).
"""

from ....hw.validate import UserError
from ....sw.config import format_topology, parse_topology
from ....sw.kernels import KERNELS
from ....sw.machine import Machine
from ....sw.ubep.traffic import LINK_KINDS
from ...backends import SIMULATORS
from ...backends.machine import backend as make_backend
from . import Experiment, Param, int_list, register

__all__ = ["IncEp", "EXPERIMENT", "SHAPES", "SYSTEMS", "TOLERANCE"]

#: ranks -> topology (two boards each)
SHAPES = {4: "superpod:2,1,2", 8: "superpod:2,2,2", 16: "superpod:2,4,2", 32: "superpod:2,8,2",
          64: "superpod:2,8,4"}
#: the fewest dies whose flat Verilog model does not convert here (the module docstring)
NATIVE_FROM = 32
SYSTEMS = ("cann", "ubep", "ubep-inc")
#: the issue's bound on |measured - closed form| / closed form of UBEP-INC's tier-2 blocks
TOLERANCE = 0.02


class IncEp(Experiment):
    """One row per (ranks, B_tok, seed, system): latencies and link blocks."""

    name = "inc-ep"
    title = ("dispatch and combine latency and tier-2 bytes of CANN, UBEP and UBEP-INC "
             "(in-network multicast and reduction) by token size")
    paper = ""
    headline = ("a token crosses each link towards its experts once; the combine's "
                "rows are summed where their paths meet")
    params = (Param("preset", "cm384", "preset", str),
              Param("backend", "verilator", "simulator", str, SIMULATORS),
              Param("ranks", "8,16", "dies (comma-separated; of 4, 8, 16, 32, 64: 32 and 64 on backend native)", str),
              Param("blocks", "1,2,4,8,14", "blocks per token B_tok (comma-separated)", str),
              Param("batch", 16, "tokens per die (BS)", int, minimum=1),
              Param("aivs", 4, "AIVs per die", int, minimum=2),
              Param("seeds", 3, "routing seeds per point", int, minimum=1))

    def points(self, params, quick=False):
        ranks = [4] if quick else int_list("ranks", params["ranks"])
        blocks = [1, 2] if quick else int_list("blocks", params["blocks"], 1, 16)
        for r in ranks:
            if r not in SHAPES:
                raise UserError(f"ranks must be of {', '.join(map(str, SHAPES))}, not {r}")
            if r >= NATIVE_FROM and params["backend"] in ("verilator", "icarus"):
                raise UserError(f"ranks={r} needs backend native, not {params['backend']!r}: "
                                f"the flat model of {r} dies with in-network switches does not "
                                f"convert to Verilog here (see inc_ep's docstring)")
        seeds = 1 if quick else params["seeds"]
        batch = 8 if quick else params["batch"]
        aivs = 2 if quick else params["aivs"]
        return [{"preset": params["preset"], "backend": params["backend"], "ranks": r,
                 "topology": SHAPES[r], "aivs": aivs, "batch": batch,
                 "topk": 8 if 2 * r > 8 else 4, "experts": 2 * r, "hidden_blocks": b,
                 "max_blocks": max(blocks), "seed": s}
                for r in ranks for b in blocks for s in range(seeds)]

    def measure(self, point):
        kernel = KERNELS["combine"]
        topo = parse_topology(point["topology"])
        base = {k: point[k] for k in ("batch", "topk", "experts", "seed")}
        # one machine for every system and token size of the shape: sized for UBEP-INC at the
        # largest B_tok (one Verilator build per shape)
        widest = kernel.resolve_params({**base, "hidden_blocks": point["max_blocks"],
                                        "system": "ubep-inc"})
        config = kernel.configs(point["preset"], topo, point["aivs"], widest)[0]
        be = make_backend(point["backend"])
        rows = []
        for system in SYSTEMS:
            params = kernel.resolve_params({**base, "hidden_blocks": point["hidden_blocks"],
                                            "system": system})
            m = Machine(backend=be, config=config)
            inputs = kernel.load(m, params)
            report = m.run(kernel.default_max_cycles)
            v = kernel.check(m, report, inputs)
            if not v["correct"]:
                raise RuntimeError(f"inc-ep: {system} at {format_topology(topo)}, B_tok "
                                   f"{point['hidden_blocks']}, seed {point['seed']} is wrong: "
                                   f"{'; '.join(v['problems'][:3])}")
            row = {"system": system, "dispatch_cycles": v["dispatch"]["cycles"],
                   "combine_cycles": report.cycles,
                   "dispatch_us": v["dispatch"]["ns"] / 1000, "combine_us": v["latency_us"]}
            for kern, links in (("d", v["dispatch"]["links"]), ("c", v["links"])):
                for kind in LINK_KINDS:
                    row[f"{kern}_{kind}_blocks"] = links["measured"][kind]["blocks"]
                    row[f"{kern}_{kind}_exact"] = links["exact"][kind]
                    row[f"{kern}_{kind}_closed"] = round(links["closed_form"][kind], 2)
                row[f"{kern}_t2_bytes"] = (links["measured"]["t2_up"]["bytes"]
                                           + links["measured"]["t2_down"]["bytes"])
            rows.append(row)
        return rows

    def verdict(self, rows):
        exact = all(r[f"{k}_{kind}_blocks"] == r[f"{k}_{kind}_exact"]
                    for r in rows for k in ("d", "c") for kind in LINK_KINDS)
        cells = {}
        for r in rows:
            cells.setdefault((r["ranks"], r["hidden_blocks"]), {}).setdefault(
                r["system"], []).append(r)
        worst, parts = 0.0, []
        for (ranks, b), by in sorted(cells.items()):
            inc, ub = by["ubep-inc"], by["ubep"]
            mean = lambda rs, key: sum(r[key] for r in rs) / len(rs)   # noqa: E731
            t2 = lambda rs, kind: sum(mean(rs, f"{k}_{kind}") for k in ("d_t2_up", "d_t2_down",
                                                                          "c_t2_up", "c_t2_down"))
            measured, closed = t2(inc, "blocks"), t2(inc, "closed")
            if closed:
                worst = max(worst, abs(measured - closed) / closed)
            saving = 1 - measured / t2(ub, "blocks") if t2(ub, "blocks") else 0.0
            closed_saving = 1 - closed / t2(ub, "closed") if t2(ub, "closed") else 0.0
            lat = {s: (mean(by[s], "dispatch_us"), mean(by[s], "combine_us")) for s in SYSTEMS}
            parts.append(f"{ranks} dies B {b}: tier-2 saving {100 * saving:.1f} % (closed form "
                         f"{100 * closed_saving:.1f} %), dispatch/combine us CANN "
                         f"{lat['cann'][0]:.2f}/{lat['cann'][1]:.2f}, UBEP {lat['ubep'][0]:.2f}/"
                         f"{lat['ubep'][1]:.2f}, UBEP-INC {lat['ubep-inc'][0]:.2f}/"
                         f"{lat['ubep-inc'][1]:.2f}")
        holds = exact and worst <= TOLERANCE
        return holds, (f"measured link blocks {'equal' if exact else 'DIFFER FROM'} the routing's "
                       f"exact count in every run; UBEP-INC's tier-2 blocks are within "
                       f"{100 * worst:.1f} % of the closed form "
                       f"(tolerance {100 * TOLERANCE:.0f} %); "
                       + "; ".join(parts))

    def plot(self, rows, path):
        from ..results.plot import save, subplots
        ranks = sorted({r["ranks"] for r in rows})
        fig, axes = subplots(len(ranks), 3, width=13, height=3.6 * len(ranks))
        lines = [axes[3 * k:3 * k + 3] for k in range(len(ranks))]     # a flat list: by row
        for line, n in zip(lines, ranks):
            for system in SYSTEMS:
                mine = [r for r in rows if r["ranks"] == n and r["system"] == system]
                bs = sorted({r["hidden_blocks"] for r in mine})
                avg = lambda key: [sum(r[key] for r in mine if r["hidden_blocks"] == b)   # noqa
                                   / sum(1 for r in mine if r["hidden_blocks"] == b) for b in bs]
                line[0].plot(bs, avg("dispatch_us"), marker="o", label=system)
                line[1].plot(bs, avg("combine_us"), marker="o", label=system)
                t2 = [a + b for a, b in zip(avg("d_t2_up_blocks"), avg("c_t2_up_blocks"))]
                line[2].plot(bs, t2, marker="o", label=f"{system} measured")
                if system == "ubep-inc":
                    closed = [a + b for a, b in zip(avg("d_t2_up_closed"), avg("c_t2_up_closed"))]
                    line[2].plot(bs, closed, linestyle="--", color="k",
                                 label="UBEP-INC closed form")
            for ax, what in zip(line, ("dispatch latency (us)", "combine latency (us)",
                                       "tier-2 up blocks (dispatch + combine)")):
                ax.set_xlabel("blocks per token")
                ax.set_title(f"{n} dies: {what}", fontsize=8)
                ax.legend(fontsize=6)
        save(fig, path, "in-network EP (model only; no paper figure)")


EXPERIMENT = register(IncEp())
