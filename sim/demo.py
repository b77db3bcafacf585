"""``epfabric demo``: UBEP Algorithm 1 (quaternary search) on the vector unit.

Random top-k routing gives the expert list ``E``; for several target token
indices the mapper's search runs with every ``VectorCount`` executed by the
simulated :class:`~epfabric.hw.vector_unit.VectorUnit` (three pivots per
command), and the result is printed next to the numpy reference.
"""

import sys
import time

import numpy as np

from epfabric.sw.mapper import quaternary_search, reference_lookup

from .harness import ComponentSpec, run
from .tools import SIMULATORS
from .vector_driver import command, run_commands

__all__ = ["search_intent", "add_arguments", "main"]


async def search_intent(bench, expert_list, targets, n_experts):
    """Harness intent: run the search for each target; return results and cycles."""
    out = []
    for target in targets:
        start = bench.cycle

        async def count3(pivots):
            r = await run_commands(bench, [command("COUNT", expert_list, cond="LT", s=pivots)])
            return r["results"][0]

        expert, offset, steps = await quaternary_search(count3, target, n_experts)
        out.append({"target": target, "expert": expert, "offset": offset,
                    "steps": steps, "cycles": bench.cycle - start})
    return out


def add_arguments(parser):
    parser.add_argument("--tokens", type=int, default=32, help="batch size (tokens)")
    parser.add_argument("--topk", type=int, default=8, help="experts per token")
    parser.add_argument("--experts", type=int, default=256, help="number of experts")
    parser.add_argument("--lanes", type=int, default=16, help="vector-unit lanes")
    parser.add_argument("--targets", type=int, default=6, help="target token indices to look up")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--backend", choices=SIMULATORS, default="pysim", help="simulator")


def main(args):
    for name in ("tokens", "topk", "experts", "lanes", "targets"):
        if getattr(args, name) < 1:
            raise ValueError(f"--{name} must be >= 1, not {getattr(args, name)}")
    if args.topk > args.experts:
        raise ValueError(f"--topk ({args.topk}) must not exceed --experts ({args.experts})")
    rng = np.random.default_rng(args.seed)
    topk_idx = np.stack([rng.choice(args.experts, args.topk, replace=False)
                         for _ in range(args.tokens)])
    expert_list = [int(e) for e in topk_idx.reshape(-1)]
    targets = sorted(int(t) for t in rng.choice(len(expert_list), args.targets, replace=False))
    width = max(1, int(args.experts).bit_length())
    spec = ComponentSpec("epfabric.hw.vector_unit:VectorUnit",
                         {"lanes": args.lanes, "width": width, "max_len": len(expert_list)})
    print(f"quaternary search (UBEP Alg. 1) on the vector unit [{args.backend}]: "
          f"{args.tokens} tokens x top-{args.topk}, {args.experts} experts, "
          f"E has {len(expert_list)} entries, {args.lanes} lanes", flush=True)
    t0 = time.monotonic()
    results, total = run(spec, search_intent, {"expert_list": expert_list, "targets": targets,
                                               "n_experts": args.experts},
                         simulator=args.backend)
    wall = time.monotonic() - t0
    print(f"{'target':>7} {'expert':>7} {'offset':>7} {'counts':>6} {'cycles':>7}   numpy (expert, offset)")
    ok = True
    for r in results:
        ref = reference_lookup(expert_list, r["target"], args.experts)
        match = (r["expert"], r["offset"]) == ref
        ok &= match
        print(f"{r['target']:>7} {r['expert']:>7} {r['offset']:>7} {r['steps']:>6} "
              f"{r['cycles']:>7}   {ref}  {'ok' if match else 'MISMATCH'}")
    per_count = -(-len(expert_list) // args.lanes) + 1
    print(f"each VectorCount: ceil({len(expert_list)}/{args.lanes}) + 1 = {per_count} cycles "
          f"for three pivots; {total} cycles simulated in {wall:.1f} s")
    print("all lookups match numpy" if ok else "MISMATCH against numpy")
    return 0 if ok else 1


if __name__ == "__main__":
    import argparse
    p = argparse.ArgumentParser()
    add_arguments(p)
    sys.exit(main(p.parse_args()))
