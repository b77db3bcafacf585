"""INC-MoE tail assistance (sw/incmoe/program.py): a tail band's rows split among its helpers.

In the last ``tail`` bands the owning reduce AIV adds the switch's sums into
rows ``j*beta``, step ``B_AG + 1``, and gather AIV g into rows
``j*beta + 1 + g``, same step: together every row of the band exactly once.
A band of at most ``B_AG + 1`` rows gives each participant one row at most,
so the step is never taken there (tests/sw/test_moe_layer.py's tail case has
bands of 2 rows): a wrong step shows only once a participant takes a second
row. Here a tail band of 6 rows has 2 helpers and the owner, two rows each.
"""

from epfabric.sim.backends.machine import backend
from epfabric.sw.incmoe.program import MARKS
from epfabric.sw.incmoe.reference import partials
from epfabric.sw.kernels import KERNELS
from epfabric.sw.machine import Machine

K = KERNELS["moe-layer"]

#: one band (the tail): rank 0 has 6 rows (owner rows 0, 3; gather 0 rows 1, 4; gather 1 rows
#: 2, 5), rank 1 has 3. topk=3 of 4 experts on 2 ranks: every token has an expert on each
#: rank, so every row's switch sum is non-zero and a row left unreduced is a wrong row.
TAIL = dict(ranks=2, counts=(6, 3), experts=4, topk=3, roles=(2, 1, 1), bands=1, tail=1,
            mode="inc")


def test_every_row_of_a_tail_band_is_reduced_once():
    params = K.resolve_params(TAIL)
    config = K.configs("tiny", params=params)[0]
    m = Machine(backend=backend("pysim"), config=config)
    inputs = K.load(m, params)
    case, spec = inputs["case"], inputs["spec"]
    # the shape this test is about: a tail band of >= 2 * (B_AG + 1) rows, B_AG >= 2 helpers
    assert spec.tail == spec.bands == 1 and spec.roles[0] == 2
    assert inputs["beta"] == 6 and case.counts[0] == 6
    # every reduced row carries a non-zero sum from the other rank (else skipping it,
    # or adding it twice, would not change the output)
    for r in range(case.ranks):
        others = partials(case, 1 - r)[r]
        assert (others != 0).any(axis=1).all(), (r, others)
    report = m.run(50_000)
    verdict = K.check(m, report, inputs)
    assert verdict["correct"], verdict["problems"]
    # the owner and both helpers marked the tail band on every rank
    marks = [e for e in report.trace if e["event"] == MARKS["rs_done"]]
    assert sorted((e["rank"], e["core"]) for e in marks) == [(r, c) for r in range(2)
                                                              for c in (0, 1, 3)]
