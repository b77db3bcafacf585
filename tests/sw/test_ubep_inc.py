"""UBEP-INC's die-mask code (sw/ubep/ubep_inc.py) on one AIV core: the two-word masks of
machines of more than 32 dies, which only a 64-die run uses otherwise. The kernels' runs are
in test_dispatch and test_combine."""

from epfabric.sim.tb.core_memory import run_programs
from epfabric.sw.assembler import Program
from epfabric.sw.ubep.ubep_inc import _mask_of, _without

from utils import ComponentSpec, run

SPEC = ComponentSpec("epfabric.hw.aiv_core:AIVCore",
                     {"core_id": 0, "imem_depth": 512, "ubuf_rows": 2, "data_bytes": 32,
                      "lanes": 4, "width": 16, "max_outstanding": 7})
ROUTE, OUT = 0x400, 0x800
EXPERTS, EPR, K = 128, 2, 8          # 64 dies, 2 experts a die, top-8
#: two tokens' experts: dies 0, 31 | 32, 63 at the words' edges, and shared dies
TOKENS = ([0, 1, 62, 63, 64, 127, 90, 33], [126, 125, 100, 101, 2, 3, 64, 65])


def _mask(token):
    return sum({1 << e // EPR for e in token})


def _program(t, drop):
    """Token ``t``'s mask (lo, hi) and that mask without die ``drop`` under both register
    patterns the combine uses, stored from ``OUT``."""
    p = Program().li(1, ROUTE).li(10, 0).ldb(10, 1, 0).li(2, OUT)
    p.li(7, t * K)
    _mask_of(p, 0, 7, K, EPR, EXPERTS, out=11, e=12, rank_reg=9, tmp=14, hi=8)
    p.sw(11, 2, 0).sw(8, 2, 4)
    p.mv(4, 11).mv(15, 8)                         # phase 1: (r4, r15) -> (r15, r5)
    _without(p, drop, lo=4, hi=15, out_lo=15, out_hi=5, tmp=6)
    p.sw(15, 2, 8).sw(5, 2, 12)
    p.mv(4, 11).mv(7, 8)                          # phase 2: (r4, r7) -> (r5, r7)
    _without(p, drop, lo=4, hi=7, out_lo=5, out_hi=7, tmp=14)
    p.sw(5, 2, 16).sw(7, 2, 20)
    return p.halt()


def test_a_two_word_die_mask_and_a_die_taken_out():
    words = [a | b << 16 for a, b in zip(*[iter(TOKENS[0] + TOKENS[1])] * 2)]
    memory = {ROUTE + 4 * w: x for w, x in enumerate(words)}
    cases = [(t, drop) for t in range(2) for drop in (0, 31, 32, 63, 45)]
    results, _ = run(SPEC, run_programs, {"programs": [
        {"words": _program(t, d).assemble(), "memory": memory} for t, d in cases]})
    for (t, drop), res in zip(cases, results):
        assert not res["timeout"] and not res["fault"]
        mem = {int(a): v for a, v in res["memory"].items()}
        got = [mem.get(OUT + 4 * w, 0) for w in range(6)]
        mask = _mask(TOKENS[t])
        rest = mask & ~(1 << drop)
        want = [mask & 0xFFFFFFFF, mask >> 32] + [rest & 0xFFFFFFFF, rest >> 32] * 2
        assert got == want, (t, drop, [hex(x) for x in got], [hex(x) for x in want])
    assert _mask(TOKENS[0]) >> 32 and _mask(TOKENS[0]) & 0xFFFFFFFF   # both words used

