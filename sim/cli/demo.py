"""``epfabric demo``: UBEP Algorithm 1 (quaternary search) on the simulated vector unit.

Front end of the ``quaternary`` experiment (:mod:`epfabric.sim.lab.experiments.quaternary`).
"""

from ..lab.experiments import EXPERIMENTS

__all__ = ["add_arguments", "prepare"]

EXPERIMENT = EXPERIMENTS["quaternary"]


def add_arguments(parser):
    for p in EXPERIMENT.params:
        parser.add_argument(f"--{p.name}", type=p.type, default=p.default, help=p.help,
                            choices=p.choices)


def prepare(args):
    params = EXPERIMENT.resolve(**{p.name: getattr(args, p.name) for p in EXPERIMENT.params})

    def job():
        print(f"quaternary search (UBEP Alg. 1) on the vector unit [{params['backend']}]: "
              f"{params['tokens']} tokens x top-{params['topk']}, {params['experts']} experts, "
              f"E has {params['tokens'] * params['topk']} entries, {params['lanes']} lanes",
              flush=True)
        rows = EXPERIMENT.run(**params)
        print(EXPERIMENT.format(rows))
        r = rows[0]
        print(f"each VectorCount: ceil({r['entries']}/{params['lanes']}) + 1 = {r['count_cycles']} "
              f"cycles for three pivots; {r['total_cycles']} cycles simulated in {r['wall_s']:.1f} s")
        ok = all(r["match"] for r in rows)
        print("all lookups match numpy" if ok else "MISMATCH against numpy")
        return 0 if ok else 1
    return job
