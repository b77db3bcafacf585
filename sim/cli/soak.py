"""``epfabric soak [--blocks N] [--pattern P ...] [--seed S ...] [--json FILE]``: long soaks.

Front end of :mod:`epfabric.sim.verify.soak`: runs the scoreboarded superpod fabric
(32-rank ``cm384`` by default, Verilator) for every (pattern, seed) and
prints blocks moved, simulated cycles, wall time and the scoreboard (lost,
misrouted, out of order). Exit status 1 when a soak fails its scoreboard
(a deadlock is reported as the simulator's timeout error), 2 on bad input.

``--kernel NAME --runs N`` instead runs a registered kernel N times with
random data seeds and machine shapes, each run checked against numpy.
"""

from ..tb.soak import PATTERNS
from ...hw.topology import superpod_ranks
from ...hw.validate import UserError, check_int
from ...sw.presets import get_preset
from ..backends import SIMULATORS, missing_reason
from ..output import progress
from ..verify.soak import DEFAULT_SHAPE, INC_SHAPE, check_rates, ok, run_soak
from .common import check_output, parse_params, positive, write_json

__all__ = ["add_arguments", "prepare"]


def add_arguments(parser):
    parser.add_argument("--blocks", type=int, default=None,
                        help="blocks per run, all ranks together (default 100000; rounded up "
                             "to a multiple of the rank count); with --inc the multicasts and "
                             "unicasts per die (default 16)")
    parser.add_argument("--pattern", action="append", choices=PATTERNS,
                        help="traffic pattern (repeatable; default: uniform and hotspot)")
    parser.add_argument("--seed", action="append", type=int,
                        help="generator seed (repeatable; default 1)")
    parser.add_argument("--offer", type=float, default=0.7,
                        help="probability an idle source offers a block in a cycle (default 0.7)")
    parser.add_argument("--stall", type=float, default=0.3,
                        help="probability a receiver stalls in a cycle (default 0.3)")
    parser.add_argument("--backend", default="verilator", choices=SIMULATORS,
                        help="simulator (default verilator)")
    parser.add_argument("--topology", "--shape", dest="shape", metavar="TOPOLOGY",
                        default=None,
                        help="the cm384 superpod: superpod:dies_per_npu,npus_per_board,boards "
                             "(or the three numbers; default 2,8,2: 32 ranks, with --inc "
                             "2,2,2; --shape is the old name)")
    parser.add_argument("--kernel", default=None,
                        help="soak a registered kernel with a seed parameter (e.g. alltoall) "
                             "instead of the fabric")
    parser.add_argument("--runs", type=int, default=100,
                        help="--kernel: runs, each with a random seed and shape (default 100)")
    parser.add_argument("--param", action="append", default=[], metavar="NAME=VALUE",
                        help="--kernel: a fixed kernel parameter (repeatable), e.g. "
                             "system=ubep-inc (its soak draws shapes with tier-2 links)")
    parser.add_argument("--preset", default="tiny",
                        help="--kernel, --inc --adversarial: the machine preset (default tiny; "
                             "cm384 for the superpod's latencies)")
    parser.add_argument("--inc", action="store_true",
                        help="soak a cm384 superpod with in-network switches (default "
                             "superpod:2,2,2) under multicast, unicast and reduction traffic "
                             "with receiver stalls, every delivery checked in Python")
    parser.add_argument("--adversarial", action="store_true",
                        help="--inc: the two-board pattern that deadlocked tier-1 units summing "
                             "groups leaving their board (docs/concepts/inc-deadlock.md) "
                             "instead of random traffic; "
                             "--blocks is the groups per destination, a watchdog reports a "
                             "fabric that stops delivering")
    parser.add_argument("--json", metavar="FILE", help="write the rows as JSON")


def prepare(args):
    if args.blocks is None:
        args.blocks = 16 if args.inc else 100_000
    positive("--blocks", args.blocks)
    if args.shape is None:
        args.shape = ",".join(map(str, INC_SHAPE if args.inc else DEFAULT_SHAPE))
    try:
        shape = tuple(int(x) for x in args.shape.removeprefix("superpod:").split(","))
    except ValueError:
        shape = ()
    if len(shape) != 3:
        raise UserError(f"--topology must be superpod:a,b,c (or a,b,c), not {args.shape!r}")
    check_rates(args.offer, args.stall, prefix="--")
    why = missing_reason(args.backend)
    if why:
        raise UserError(f"--backend {args.backend}: {why}")
    check_output(args.json, "--json")
    for seed in args.seed or ():
        check_int("--seed", seed, 0, 2**32 - 1)
    if args.adversarial and not args.inc:
        raise UserError("--adversarial is a pattern of the --inc soak: give --inc too")
    if args.inc:
        if args.kernel is not None:
            raise UserError("--inc and --kernel are two different soaks: give one")
        return _inc_job(args, shape)
    if args.kernel is not None:
        if len(args.seed or ()) > 1:
            raise UserError(f"--kernel takes one --seed (it draws every run's seed), not "
                            f"{len(args.seed)}: {args.seed}")
        return _kernel_job(args)
    get_preset("cm384").check_shape(*shape)       # what the soak fabric checks, without building it
    ranks = superpod_ranks(*shape)
    per_rank = -(-args.blocks // ranks)
    patterns = args.pattern or list(PATTERNS)
    seeds = args.seed or [1]

    def job():
        rows = []
        for pattern in patterns:
            for seed in seeds:
                progress(f"soak {pattern} seed {seed}: {per_rank * ranks} blocks on {ranks} ranks "
                         f"({args.backend})")
                row = run_soak(blocks_per_rank=per_rank, pattern=pattern, seed=seed,
                               offer=args.offer, stall=args.stall, backend=args.backend,
                               shape=shape)
                row["ok"] = ok(row)
                rows.append(row)
                print(f"{pattern:8s} seed {seed}: {row['received']} / {row['blocks']} blocks "
                      f"moved in {row['cycles']} cycles, lost {row['lost']}, misrouted "
                      f"{row['misrouted']}, out of order {row['out_of_order']}; wall "
                      f"{row['wall_s']:.1f} s (run {row['run_s']:.1f} s) "
                      f"{'ok' if row['ok'] else 'FAILED'}", flush=True)
        if args.json:
            write_json(args.json, rows, recorded=True)
        return 0 if all(r["ok"] for r in rows) else 1
    return job


def _inc_job(args, shape):
    from ..verify.soak import inc_soak
    per_die = args.blocks
    get_preset("cm384").check_shape(*shape)

    def job():
        rows = []
        for seed in args.seed or [1]:
            progress(f"inc soak seed {seed}: superpod:{','.join(map(str, shape))} "
                     f"({args.backend})")
            row = inc_soak(shape=shape, seed=seed, offer=args.offer, stall=args.stall,
                           backend=args.backend, preset=args.preset if args.adversarial
                           else "cm384", **({"adversarial": True, "groups": per_die,
                                             "multicasts": 0} if args.adversarial
                                            else {"multicasts": per_die}))
            rows.append(row)
            print(f"inc seed {seed}: {row['deliveries']} / {row['expected']} deliveries "
                  f"({row['multicasts']} multicasts and unicasts, {row['groups']} groups of "
                  f"{row['contributions']} contributions) in {row['cycles']} cycles, tier-2 "
                  f"blocks {row['t2_blocks']}; wall {row['wall_s']:.1f} s "
                  f"{'(adversarial, window ' + str(row['window']) + ') ' if row['adversarial'] else ''}"
                  f"{'ok' if row['ok'] else 'FAILED: ' + '; '.join(row['problems'])}",
                  flush=True)
        if args.json:
            write_json(args.json, rows, recorded=True)
        return 0 if all(r["ok"] for r in rows) else 1
    return job


def _kernel_job(args):
    from ...sw.kernels import KERNELS
    positive("--runs", args.runs)
    if args.kernel not in KERNELS:
        raise UserError(f"--kernel must be one of {', '.join(sorted(KERNELS))}, "
                        f"not {args.kernel!r}")
    if "seed" not in KERNELS[args.kernel].defaults:
        raise UserError(f"--kernel {args.kernel} has no seed parameter to vary")
    from ..verify.soak import kernel_soak
    params = parse_params(args.param)
    if "seed" in params:
        raise UserError("--param seed=...: the soak draws every run's seed (give --seed for "
                        "the draw)")
    KERNELS[args.kernel].resolve_params(params)            # a bad parameter fails here
    preset = get_preset(args.preset).name

    def show(row):
        print(f"{row['kernel']} run {row['run']}: {row['topology']} x {row['aivs']} AIVs, seed "
              f"{row['seed']}: {row['cycles']} cycles, "
              f"{'correct' if row['correct'] else 'WRONG: ' + '; '.join(row['problems'])} "
              f"({row['wall_s']:.1f} s)", flush=True)

    def job():
        rows = kernel_soak(args.kernel, runs=args.runs, seed=(args.seed or [0])[0],
                           backend=args.backend, progress=show, params=params, preset=preset)
        good = sum(r["correct"] for r in rows)
        print(f"{args.kernel}: {good} / {len(rows)} runs correct")
        if args.json:
            write_json(args.json, rows, recorded=True)
        return 0 if good == len(rows) else 1
    return job
