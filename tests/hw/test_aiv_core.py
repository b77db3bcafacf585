"""AIV core (hw/aiv_core.py): every instruction run on the core, cycle costs, three simulators.

The programs of each core configuration (the plain core, ``inc``, ``ep``, ``fp``) run in ONE
testbench run per simulator (a module fixture), against the Python memory model of
:mod:`epfabric.sim.tb.core_memory`.
"""

import functools
import random

import ml_dtypes
import numpy as np
import pytest

from epfabric.hw.aiv_core import AIVCore
from epfabric.hw.aiv_fp import check_fp_params
from epfabric.sim.tb.core_memory import MEM_LATENCY as L
from epfabric.sim.tb.core_memory import run_programs
from epfabric.sw.assembler import Program, assemble
from epfabric.hw.isa import BY_MNEMONIC, address
from epfabric.hw.validate import UserError
from epfabric.sim.tb.fp_commands import EDGE_BF16, EDGE_F32, operand_pools, reference

from rejected import rejected
from utils import ComponentSpec, run, simulators

PARAMS = {"core_id": 5, "imem_depth": 64, "ubuf_rows": 2, "data_bytes": 32, "lanes": 4,
          "width": 16, "max_outstanding": 7}
SPEC = ComponentSpec("epfabric.hw.aiv_core:AIVCore", PARAMS)
M32 = 0xFFFFFFFF
OUT = 0x100      # result words are stored from here
RANK = 3         # the ``rank`` input during the runs

# --- programs ------------------------------------------------------------------------------

X, Y, Z = 0x12345678, -3, 5


def _alu():
    ops = [  # (mnemonic, operands after rd, expected)
        ("add", (1, 2), X + Y), ("sub", (1, 2), X - Y), ("and", (1, 2), X & Y),
        ("or", (1, 2), X | Y), ("xor", (1, 2), X ^ Y), ("sll", (2, 3), Y << Z),
        ("srl", (2, 3), (Y & M32) >> Z), ("sra", (2, 3), Y >> Z), ("slt", (2, 3), 1),
        ("sltu", (2, 3), 0), ("mul", (1, 3), X * Z), ("addi", (1, -100), X - 100),
        ("andi", (1, 0x3F0F0), X & 0x3F0F0), ("ori", (2, 0x155), Y | 0x155),
        ("xori", (1, 0x2FFFF), X ^ 0x2FFFF), ("slli", (1, 4), X << 4), ("srli", (2, 28), 0xF),
        ("srai", (2, 1), -2), ("lui", (0xABCDE,), 0xABCDE << 12),
        ("csrr", ("core_id",), PARAMS["core_id"]), ("csrr", ("rank",), RANK),
    ]
    p = Program()
    p.li(1, X).li(2, Y).li(3, Z).li(10, OUT)
    for k, (mn, ops_, _exp) in enumerate(ops):
        p.emit(mn, 4, *ops_)
        p.sw(4, 10, 4 * k)
    p.halt()
    return p, {OUT + 4 * k: exp & M32 for k, (_m, _o, exp) in enumerate(ops)}


def _branches():
    p = Program()
    p.li(1, -1).li(2, 1).li(10, OUT).li(9, 0).li(5, 0)
    # (branch, operands taken, operands not taken); signed: -1 < 1; unsigned: 1 < 0xFFFFFFFF
    cases = [("beq", (1, 1), (1, 2)), ("bne", (1, 2), (1, 1)), ("blt", (1, 2), (2, 1)),
             ("bge", (2, 1), (1, 2)), ("bltu", (2, 1), (1, 2)), ("bgeu", (1, 2), (2, 1))]
    for k, (br, taken, not_taken) in enumerate(cases):
        p.emit(br, *taken, f"ok{k}")
        p.addi(9, 9, 1)             # skipped when the branch works
        p.label(f"ok{k}")
        p.emit(br, *not_taken, f"bad{k}")
        p.addi(5, 5, 1)             # counts correct fall-throughs
        p.label(f"bad{k}")
    p.jal(6, "after_jal")
    p.addi(9, 9, 1)
    p.label("after_jal")
    p.li(8, 0).addi(8, 8, 0)       # r8 = 0; jalr to an absolute label index
    p.jalr(7, 8, "target")
    p.addi(9, 9, 1)
    p.label("target")
    p.sw(9, 10, 0).sw(5, 10, 4).sw(6, 10, 8).sw(7, 10, 12)
    p.halt()
    labels = p.labels
    return p, {OUT: 0, OUT + 4: 6, OUT + 8: labels["after_jal"] - 1,
               OUT + 12: labels["target"] - 1}


LOOP_N = 10
LOOP_SRC = f"""
    li   r1, {LOOP_N}        # 1 cycle
    li   r2, 0               # 1
loop:
    add  r2, r2, r1          # 3 per iteration
    addi r1, r1, -1
    bne  r1, r0, loop
    li   r3, {OUT}           # 1
    sw   r2, r3, 0           # 1 (posted)
    halt                     # 1
"""
LOOP_CYCLES = 2 + 3 * LOOP_N + 1 + 1 + 1

BLK = 0x200                          # source DataBlock in memory
ELEMS = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3]   # 16-bit elements of row 0


def _pack(elems):
    words = [0] * 8
    for i, e in enumerate(elems):
        words[i // 2] |= e << (16 * (i % 2))
    return {BLK + 4 * w: v for w, v in enumerate(words)}


def _mem():
    src = f"""
        li   r1, {BLK}
        li   r2, 512           # UBuf row 1
        ldb  r2, r1, 0         # row 1 = block at 0x200
        ulw  r3, r2, 12        # word 3 of row 1
        li   r4, 0x7777
        usw  r4, r2, 0         # word 0 of row 1
        ulw  r5, r2, 256       # word 64: beyond the modelled 32 B: reads 0
        stb  r2, r1, 0x200     # row 1 -> block at 0x400
        fence
        lw   r6, r1, 0x200     # word 0 of the stored block
        li   r7, 0x300
        li   r8, 2
        fadd r9, r7, r8        # old value 40
        li   r10, {OUT}
        sw   r3, r10, 0
        sw   r5, r10, 4
        sw   r6, r10, 8
        sw   r9, r10, 12
        halt
    """
    mem = {**_pack(ELEMS), 0x300: 40}
    stored = {0x400 + 4 * w: v for w, v in enumerate(_pack(ELEMS).values())}
    stored[0x400] = 0x7777
    return assemble(src), mem, {**stored, 0x300: 42, OUT: mem[BLK + 12], OUT + 4: 0,
                                OUT + 8: 0x7777, OUT + 12: 40}


def _vec():
    n = len(ELEMS)
    src = f"""
        li   r1, {BLK}
        ldb  r0, r1, 0          # row 0 = elements
        li   r2, {n}
        li   r6, 3
        li   r7, 5
        li   r8, 9
        vcount r11, r0, r2, r6, lt
        li   r3, 7
        vcount r12, r0, r3, r6, ge   # r12..r14, first 7 elements only
        vfind r4, r0, r2, r7, gt
        vfind r5, r0, r2, r8, gt     # none
        vsum  r9, r0, r2
        li   r15, 512
        vcmp  r15, r0, r2, r7, ge    # row 1 = 0/1 mask
        stb   r15, r1, 0x200         # -> 0x400
        vadd  r15, r0, r2, r0        # row 1 = 2 * row 0
        stb   r15, r1, 0x400         # -> 0x600
        vmuls r15, r0, r2, r7        # row 1 = 5 * row 0
        stb   r15, r1, 0x600         # -> 0x800
        li   r10, {OUT}
        sw   r11, r10, 0
        sw   r12, r10, 4
        sw   r13, r10, 8
        sw   r14, r10, 12
        sw   r4, r10, 16
        sw   r5, r10, 20
        sw   r9, r10, 24
        halt
    """
    e7 = ELEMS[:7]
    out = {OUT: sum(e < 3 for e in ELEMS), OUT + 4: sum(e >= 3 for e in e7),
           OUT + 8: sum(e >= 5 for e in e7), OUT + 12: sum(e >= 9 for e in e7),
           OUT + 16: next(i for i, e in enumerate(ELEMS) if e > 5), OUT + 20: M32,
           OUT + 24: sum(ELEMS)}
    mask = {k + 0x200: v for k, v in _pack([int(e >= 5) for e in ELEMS]).items()}
    double = {k + 0x400: v for k, v in _pack([2 * e for e in ELEMS]).items()}
    times5 = {k + 0x600: v for k, v in _pack([(5 * e) % (1 << 16) for e in ELEMS]).items()}
    return assemble(src), _pack(ELEMS), {**out, **mask, **double, **times5}


def _valu():
    """CANN's count of a slot's expert (the open kernel's ``CalTokenSendExpertCnt``) on the
    first 13 elements: Duplicate the expert (5), Sub, Abs, Mins 1, then ReduceSum: the
    elements that are not 5; each step's row stored."""
    n, e = 13, 5
    src = f"""
        li   r1, {BLK}
        ldb  r0, r1, 0          # row 0 = elements
        li   r2, {n}
        li   r7, {e}
        li   r8, 1
        li   r15, 512
        valu r15, r0, r2, r7, 0      # row 1 = 5 (Duplicate)
        stb  r15, r1, 0x200          # -> 0x400
        valu r15, r0, r2, r15, 1     # row 1 = row 0 - row 1 (Sub)
        stb  r15, r1, 0x400          # -> 0x600
        valu r15, r15, r2, r0, 2     # row 1 = |row 1| (Abs)
        stb  r15, r1, 0x600          # -> 0x800
        valu r15, r15, r2, r8, 3     # row 1 = min(row 1, 1) (Mins)
        vsum r9, r15, r2             # ReduceSum: the elements that are not 5
        li   r10, {OUT}
        sw   r9, r10, 0
        halt
    """
    vals = ELEMS[:n]
    diff = [(x - e) % (1 << 16) for x in vals]
    absd = [abs(x - e) for x in vals]
    rows = {0x400: [e] * n, 0x600: diff, 0x800: absd}
    expect = {OUT: sum(x != e for x in vals)}
    for base, row in rows.items():
        # words 0..5 (elements 0..11) as stored: word 6 holds element 13 too, which the
        # unit computes from whatever the rows hold there
        expect.update({base + k - BLK: v for k, v in _pack(row).items() if k - BLK < 24})
    return assemble(src), _pack(ELEMS), expect


FILL = 0xAAAAAAAA                    # what the output row holds before a vcomp
FILL_BLK, ROW0_BLK, ROW1_BLK = 0xA00, 0xC00, 0xE00
LANES = PARAMS["lanes"]
NWORDS = PARAMS["data_bytes"] // 4   # modelled words of a UBuf row


def _vcomp(elems, length, cond, pivot):
    """``vcomp`` of ``elems`` (row 0; the rest of the vector reads 0) into row 1.

    Stores the count, the instruction's cycles (two ``csrr cycle`` around it,
    one cycle apart without it) and both rows afterwards. Expected values
    from numpy: the matching indices in order; row 1 keeps ``FILL`` after
    them; words 128.. of the output land in row 0 (the next row).
    """
    vec = np.zeros(length, dtype=np.int64)
    vec[:min(length, len(elems))] = elems[:length]
    ops = {"eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal,
           "gt": np.greater, "ge": np.greater_equal}
    idx = [int(i) for i in np.flatnonzero(ops[cond](vec, pivot))]
    src = f"""
        li   r1, {BLK}
        ldb  r0, r1, 0          # row 0 = elements
        li   r7, 512
        li   r8, {FILL_BLK}
        ldb  r7, r8, 0          # row 1 = FILL
        li   r2, {length}
        li   r3, {pivot}
        li   r6, 512
        csrr r4, cycle
        vcomp r6, r0, r2, r3, {cond}
        csrr r5, cycle
        sub  r5, r5, r4
        li   r10, {OUT}
        sw   r6, r10, 0         # the count
        sw   r5, r10, 4         # cycles + 1
        stb  r0, r8, {ROW0_BLK - FILL_BLK}
        stb  r7, r8, {ROW1_BLK - FILL_BLK}
        halt
    """
    mem = {**_pack(elems), **{FILL_BLK + 4 * w: FILL for w in range(NWORDS)}}
    row1 = (idx[:NWORDS] + [FILL] * NWORDS)[:NWORDS]
    row0 = dict(zip(range(NWORDS), _pack(elems).values()))
    row0.update({m - 128: i for m, i in enumerate(idx) if 128 <= m < 128 + NWORDS})
    expect = {OUT: len(idx), OUT + 4: AIVCore.vcomp_cycles(length, LANES, idx) + 1,
              **{ROW1_BLK + 4 * w: v for w, v in enumerate(row1)},
              **{ROW0_BLK + 4 * w: v for w, v in row0.items()}}
    return assemble(src), mem, expect


def _vcomp_cases():
    """Seeded random vectors (small values: several matches per beat, partial last beats),
    an empty result, length 0, and a long run of matches crossing into the next row."""
    rng = random.Random(46)
    cases = []
    for _ in range(8):
        elems = [rng.randint(0, 3) for _ in range(16)]
        length = rng.choice([1, 3, 5, 13, 15, 16, 17])
        cases.append((elems, length, rng.choice(["eq", "ne", "lt", "le", "gt", "ge"]),
                      rng.randint(0, 3)))
    cases.append((ELEMS, 16, "gt", 9))        # no match
    cases.append((ELEMS, 0, "ne", 100))       # length 0
    cases.append((ELEMS, 16, "lt", 100))      # every element: 4 per beat
    cases.append((ELEMS, 200, "eq", 0))       # 184 zeros (unmodelled elements): words 128..
    return cases


POLL_SRC = f"""
    li   r1, {OUT}
    li   r3, 7
    poll r2, r1, r3, ge      # until mem[OUT] >= 7
    sw   r2, r1, 4
    halt
"""
POLL_EVENTS = [[20, OUT, 3], [40, OUT, 9]]
#: polls (or block copies), poll_extra and read_extra of the split-knob cost probes
SPLIT_N, SPLIT_P, SPLIT_R = 4, 5, 11

MARK_SRC = """
    mark 1
    nop
    nop
    mark 65535
    halt
"""

# (name, program dict, expected memory subset, mnemonics it covers)
PROGRAMS = {}


def _add(name, words, expect, covers, **kw):
    PROGRAMS[name] = ({"words": words, "rank": RANK, **kw}, expect, covers)


_p, _e = _alu()
_add("alu", _p.assemble(), _e, ["add", "sub", "and", "or", "xor", "sll", "srl", "sra", "slt",
                                "sltu", "mul", "addi", "andi", "ori", "xori", "slli", "srli",
                                "srai", "lui", "csrr", "sw"])
_p, _e = _branches()
_add("branches", _p.assemble(), _e, ["beq", "bne", "blt", "bge", "bltu", "bgeu", "jal", "jalr"])
_add("loop", assemble(LOOP_SRC), {OUT: sum(range(1, LOOP_N + 1))}, ["halt"])
_w, _m, _e = _mem()
_add("mem", _w, _e, ["ldb", "stb", "ulw", "usw", "fence", "lw", "fadd"], memory=_m)
_add("ldbc", assemble(f"li r1, {BLK}\nli r2, 1024\nldbc r2, r1, 0\nulw r3, r2, 12\n"
                      f"li r10, {OUT}\nsw r3, r10, 0\nhalt"),
     {OUT: _m[BLK + 12]}, ["ldbc"], memory=_m)
_w, _m, _e = _vec()
_add("vec", _w, _e, ["vcount", "vcmp", "vfind", "vadd", "vsum", "vmuls"], memory=_m)
_w, _m, _e = _valu()
_add("valu", _w, _e, ["valu"], memory=_m)
for _n, _case in enumerate(_vcomp_cases()):
    _w, _m, _e = _vcomp(*_case)
    _add(f"vcomp{_n}", _w, _e, ["vcomp"], memory=_m)
_add("poll", assemble(POLL_SRC), {OUT + 4: 9}, ["poll"], events=POLL_EVENTS)
_add("mark", assemble(MARK_SRC), {}, ["mark"], trace_stall_every=2)
# cycle-cost probes
_add("cost_lw", assemble("lw r1, r0, 0x100\nhalt"), {}, [])
_add("cost_sw_fence", assemble("sw r0, r0, 0x100\nfence\nhalt"), {}, [])
_add("cost_vsum", assemble("li r2, 9\nvsum r1, r0, r2\nhalt"), {}, [])
_add("cost_vsum_extra", assemble("li r2, 9\nvsum r1, r0, r2\nhalt"), {}, [], vector_extra=5)
_add("cost_vsum2_extra", assemble("li r2, 33\nvsum r1, r0, r2\nvsum r3, r0, r2\nhalt"), {}, [],
     vector_extra=7)
_add("cost_fadd", assemble("fadd r1, r0, r0\nhalt"), {}, [])
# the knobs: a scalar read (lw, fadd, each read of a poll) waits poll_extra cycles before its
# request, a copy's start (ldb) read_extra; stores neither
_add("cost_reads_extra", assemble("lw r1, r0, 0x100\nfadd r1, r0, r0\nldb r0, r0, 0\n"
                                  "sw r0, r0, 0x100\nfence\nhalt"), {}, [], read_extra=6,
     poll_extra=4)
_add("poll_extra", assemble(POLL_SRC), {OUT + 4: 9}, [], events=POLL_EVENTS, poll_extra=5,
     read_extra=11)
# N satisfied polls, and N copies of a block, at poll_extra != read_extra
_add("cost_polls_split", assemble("poll r1, r0, r0, ge\n" * SPLIT_N + "halt"), {}, [],
     poll_extra=SPLIT_P, read_extra=SPLIT_R)
_add("cost_copies_split", assemble("ldb r0, r0, 0\n" * SPLIT_N + "halt"), {}, [],
     poll_extra=SPLIT_P, read_extra=SPLIT_R)
# a copy's next blocks (ldbc) do not wait: its start was paid by the ldb
_add("cost_copy_extra", assemble("ldb r0, r0, 0\nldbc r0, r0, 512\nldbc r0, r0, 1024\nhalt"),
     {}, [], read_extra=6)
_add("cost_bar", assemble("bar\nhalt"), {}, ["bar"])     # bar_go high: a lone core's barrier
_add("remote", assemble(f"li r1, {address(7, 3, 2)}\nsw r0, r1, 0\nstb r0, r1, 0\n"
                        "lw r2, r1, 0\nhalt"), {}, [])
_add("fault", [0], {}, [])
# a core without the units faults on them, like an unassigned opcode
_add("no_inc_unit", assemble("li r1, 1\nincbar\nhalt"), {}, [])
_add("no_cube_unit", assemble("cube r0, r0, r0, r0\nhalt"), {}, [])
_add("no_fp_unit", assemble("li r1, 1\nli r2, 2\nvfadd r0, r0, r1, r0\nhalt"), {}, [])
# last: the core stays stuck in its poll
_add("hang", assemble(f"li r1, {OUT}\nli r2, 1\npoll r3, r1, r2, eq\nhalt"), {}, [],
     max_cycles=60)

NAMES = list(PROGRAMS)

# --- INC units: a core built with inc=True (the INC-MoE machine's AIV) -----------------------

INC_PARAMS = {**PARAMS, "data_bytes": 64, "lanes": 8, "width": 32, "ubuf_rows": 4, "inc": True}
INC_SPEC = ComponentSpec("epfabric.hw.aiv_core:AIVCore", INC_PARAMS)
CUBE_CYCLES = 5
SRC, DST = 0x400, 0x800          # blocks the cube reads and its result is stored to
CUBE_X = [(0x9E3779B9 * (w + 1)) & M32 for w in range(16)]
CUBE_A, CUBE_B = 0xDEADBEEF, 0x12345


def _inc_programs():
    progs = {}
    # every post, with the registers it carries; then a wait that is already satisfied
    p = Program()
    p.li(1, 7).li(2, 300).li(3, -1)
    p.incag(1, 2).incrs(2, 1).incbar().inccnt(3, 1)
    p.incwait(4, 1, 0)            # RS counter >= 0 holds at once
    p.li(10, OUT).sw(4, 10, 0).halt()
    progs["posts"] = ({"words": p.assemble()}, {OUT: 0},
                      ["incag", "incrs", "incbar", "inccnt", "incwait"])
    # incwait on the AG counter: released by the counter reaching 9 in cycle 30 (5 first)
    p = Program()
    p.li(2, 9).incwait(4, 0, 2).li(10, OUT).sw(4, 10, 0).halt()
    progs["wait"] = ({"words": p.assemble(), "inc_counters": [[10, 0, 5], [30, 0, 11]]},
                     {OUT: 11}, [])
    # wrap-safe: a counter that wrapped past 2**32 still satisfies a threshold below it
    p = Program()
    p.li(2, 0xFFFFFFF0).incwait(4, 2, 2).li(10, OUT).sw(4, 10, 0).halt()
    progs["wrap"] = ({"words": p.assemble(), "inc_counters": [[0, 2, 0xFFFFFFE0], [20, 2, 3]]},
                     {OUT: 3}, [])
    # cube: dst = a * src + b per word (mod 2**32), then stored
    p = Program()
    p.li(1, SRC).li(5, 1 << 9).ldb(5, 1, 0)
    p.li(2, CUBE_A).li(3, CUBE_B).li(6, 2 << 9)
    p.cube(6, 5, 2, 3)
    p.li(10, DST).stb(6, 10, 0).fence().halt()
    want = {DST + 4 * w: (CUBE_A * x + CUBE_B) & M32 for w, x in enumerate(CUBE_X)}
    progs["cube"] = ({"words": p.assemble(), "cube_cycles": CUBE_CYCLES,
                      "memory": {SRC + 4 * w: x for w, x in enumerate(CUBE_X)}}, want, ["cube"])
    progs["cost_cube"] = ({"words": assemble("cube r0, r0, r0, r0\nhalt"),
                           "cube_cycles": CUBE_CYCLES}, {}, [])
    progs["inc_hang"] = ({"words": assemble("li r2, 1\nincwait r1, 1, r2\nhalt"),
                          "max_cycles": 40}, {}, [])
    return progs


INC_PROGRAMS = _inc_programs()
INC_NAMES = list(INC_PROGRAMS)
NAMES = list(PROGRAMS)


@pytest.fixture(scope="module")
def pysim_results():
    out, _ = run(SPEC, run_programs, {"programs": [PROGRAMS[n][0] for n in NAMES]})
    return dict(zip(NAMES, out))


def _mem_of(result):
    return {int(k): v for k, v in result["memory"].items()}


@pytest.fixture(scope="module")
def inc_results():
    out, _ = run(INC_SPEC, run_programs, {"programs": [INC_PROGRAMS[n][0] for n in INC_NAMES]})
    return dict(zip(INC_NAMES, out))


# --- in-network EP stores: a core built with ep=True (issue 31) ----------------------------

EP_SPEC = ComponentSpec("epfabric.hw.aiv_core:AIVCore", {**PARAMS, "ep": True})
EP_SRC, EP_DST = 0x400, 0x800
EP_X = [(0x9E3779B9 * (w + 3)) & M32 for w in range(8)]


def _ep_programs():
    mem = {EP_SRC + 4 * w: x for w, x in enumerate(EP_X)}
    progs = {}
    p = Program().li(1, EP_SRC).li(5, 1 << 9).ldb(5, 1, 0).li(2, EP_DST).li(3, 0b1011)
    p.mark(1).stbm(5, 2, 3, 0).fence().mark(2).halt()
    progs["stbm"] = ({"words": p.assemble(), "memory": mem},
                     {EP_DST + 4 * w: x for w, x in enumerate(EP_X)}, ["stbm"])
    p = Program().li(1, EP_SRC).li(5, 1 << 9).ldb(5, 1, 0).li(2, address(2, 8, 0)).li(3, 0b0110)
    p.mark(1).stbr(5, 2, 3, 0).fence().mark(2).halt()
    progs["stbr"] = ({"words": p.assemble(), "memory": mem}, {}, ["stbr"])
    return progs


EP_PROGRAMS = _ep_programs()


@pytest.fixture
def ep_results():
    return _ep_results()


@functools.lru_cache(maxsize=None)
def _ep_results():
    # run from a test, not a module fixture (set up before tests/conftest.py shares the
    # process's pysim simulators): test_past_32_dies_a_stbm_mask_is_two_registers runs EP_SPEC
    # again on the same simulator
    names = list(EP_PROGRAMS)
    out, _ = run(EP_SPEC, run_programs, {"programs": [EP_PROGRAMS[n][0] for n in names]})
    return dict(zip(names, out))


def test_stbm_sends_one_request_with_its_mask_and_waits_for_an_ack_per_die(ep_results):
    res = ep_results["stbm"]
    _check_words("stbm", res, EP_PROGRAMS["stbm"][1])
    (req,) = [r for r in res["requests"] if r[1] == "WRITE_MCAST"]
    assert req[2:] == [EP_DST, 0b1011]
    marks = {e: c for _core, c, e in res["trace"]}
    # mark, stbm, then the fence waits for the one answer counting the three dies' acks (the
    # memory's latency after the issue), then mark
    assert marks[2] - marks[1] == 3 + L


def test_stbr_is_posted_and_never_fenced(ep_results):
    res = ep_results["stbr"]
    assert not res["timeout"] and not res["fault"]
    (req,) = [r for r in res["requests"] if r[1] == "WRITE_RED"]
    assert req[2:] == [address(2, 8, 0), 0b0110]
    marks = {e: c for _core, c, e in res["trace"]}
    assert marks[2] - marks[1] == 3                   # mark, stbr, fence: nothing to wait for


EP64_SPEC = ComponentSpec("epfabric.hw.aiv_core:AIVCore", {**PARAMS, "ep": True, "ep_dies": 64})


def test_past_32_dies_a_stbm_mask_is_two_registers():
    # dies 0, 1, 3 in R[rs2] and 32, 34 in R[rs3]: one request with the 64-bit set, and the
    # fence waits for the 5 dies' acks; a 32-die core's request ignores R[rs3]
    def prog():
        p = Program().li(1, EP_SRC).li(5, 1 << 9).ldb(5, 1, 0).li(2, EP_DST)
        p.li(3, 0b1011).li(4, 0b101)
        return p.mark(1).stbm(5, 2, 3, 4).fence().mark(2).halt()
    mem = {EP_SRC + 4 * w: x for w, x in enumerate(EP_X)}
    for spec, mask in ((EP64_SPEC, 0b101 << 32 | 0b1011), (EP_SPEC, 0b1011)):
        (res,), _ = run(spec, run_programs, {"programs": [{"words": prog().assemble(),
                                                             "memory": mem}]})
        _check_words("stbm", res, {EP_DST + 4 * w: x for w, x in enumerate(EP_X)})
        (req,) = [r for r in res["requests"] if r[1] == "WRITE_MCAST"]
        assert req[2:] == [EP_DST, mask]
        marks = {e: c for _core, c, e in res["trace"]}
        assert marks[2] - marks[1] == 3 + L


def test_a_core_names_at_most_64_dies():
    with pytest.raises(UserError, match="ep_dies"):
        rejected(AIVCore, **{**PARAMS, "ep": True, "ep_dies": 65})


# --- floating-point vectors: a core built with fp=True ----------------------------------------
#
# Results are compared bit for bit with numpy: float32, ml_dtypes' bfloat16, and the
# reference of sim/tb/fp_commands.py (the same, with the unit's canonical NaN). FP_SPEC has
# full 512 B rows (every element modelled); FP_RATE_SPEC short rows, a unit slower than a beat
# a cycle (at the most repeat_cycles its latency allows) and a fused multiply-add.

FP_PARAMS = {**PARAMS, "ubuf_rows": 4, "data_bytes": 512, "fp": True, "fp_lanes": 4}
FP_SPEC = ComponentSpec("epfabric.hw.aiv_core:AIVCore", FP_PARAMS)
FP_RATE_PARAMS = {**PARAMS, "ubuf_rows": 4, "data_bytes": 64, "fp": True, "fp_lanes": 2,
                  "fp_latency": 3, "fp_repeat_cycles": (3 + 1) * (64 // 2) + 1, "fp_fused": True}
FP_RATE_SPEC = ComponentSpec("epfabric.hw.aiv_core:AIVCore", FP_RATE_PARAMS)
FP_IN, FP_OUT = 0x1000, 0x8000      # input blocks, and where rows are stored; 0x200 apart
ROW = 512                           # UBuf address of row 1
FP_COST_LENGTHS = [0, 1, 4, 5, 128, 512, 513]   # 513 is clipped to the UBuf's 512 fp32 elements


def _fp_unit(params):
    """The core's floating-point unit parameters as the core resolves them (no core built)."""
    return check_fp_params(lanes=params["fp_lanes"], latency=params.get("fp_latency"),
                           repeat_cycles=params.get("fp_repeat_cycles"),
                           fused=params.get("fp_fused", False), data_bytes=params["data_bytes"])


def _fp_cost(params, length, extra=0):
    unit = _fp_unit(params)
    return AIVCore.fp_vector_cycles(min(length, 128 * params["ubuf_rows"]), unit["lanes"],
                                    unit["latency"], unit["repeat_cycles"], extra)


def _bf16_words(halves):
    """32-bit words of bf16 elements (element 2k in the low half of word k)."""
    h = np.asarray(halves, dtype=np.uint32)
    return [int(w) for w in h[0::2] | h[1::2] << 16]


def _blocks(base, *vectors):
    """``{byte address: word}`` of ``vectors`` (lists of words), one 512 B block each."""
    return {base + 0x200 * k + 4 * i: int(w) for k, v in enumerate(vectors)
            for i, w in enumerate(v)}


def _fp_operands():
    """128 fp32 ``a`` and ``b`` (every EDGE_F32 value in ``a``, against edge values and
    shaped random ones in ``b``), 256 bf16 ``h`` (EDGE_BF16, then the high halves of random
    fp32) and scalars (0.5, a random one, the largest finite, the smallest normal, a NaN
    with a payload, -0, -inf)."""
    pa, pb, ps = operand_pools()
    rng = np.random.default_rng(71)
    edge = np.array(EDGE_F32, dtype=np.uint32)
    a = np.concatenate([edge, pa[rng.integers(0, 4096, 128 - len(edge))]])
    b = np.concatenate([edge[::-1], edge, pb[rng.integers(0, 4096, 128 - 2 * len(edge))]])
    h = np.concatenate([np.array(EDGE_BF16, dtype=np.uint32),
                        pa[rng.integers(0, 4096, 256 - len(EDGE_BF16))] >> 16])
    scalars = [0x3F00_0000, int(ps[17]), 0x7F7F_FFFF, 0x0080_0000, 0x7FC1_2345, 0x8000_0000,
               0xFF80_0000]
    return a, b, h, scalars


def _fp_out(k, words):
    return {FP_OUT + 0x200 * k + 4 * i: int(w) for i, w in enumerate(words)}


def _fp_arithmetic():
    """The casts, vfadd, vfmuls and vfaxpy on FP_SPEC: ``{name: (program, memory, expected
    memory, mnemonics)}``."""
    a, b, h, scalars = _fp_operands()
    mem = _blocks(FP_IN, a, b, _bf16_words(h), [FILL] * 128)
    progs = {}
    # 256 bf16 -> fp32 over rows 1..2; fp32 a -> bf16 onto row 0 (holding h) for 127 elements:
    # words 0..62 and the low half of word 63, whose high half (element 127) becomes +0; the
    # words after it keep h
    p = Program().li(1, FP_IN).li(2, 256).li(3, ROW).li(4, 2 * ROW).li(5, 3 * ROW).li(6, 127)
    p.li(9, FP_OUT).ldb(0, 1, 0x400).ldb(5, 1, 0).vfcastf(3, 0, 2).stb(3, 9, 0).stb(4, 9, 0x200)
    p.vfcastb(0, 5, 6).stb(0, 9, 0x400).halt()
    widened = reference("CAST_BF16_F32", h, 0, 0, fused=False)
    narrowed = np.concatenate([reference("CAST_F32_BF16", a[:127], 0, 0, fused=False), [0],
                               h[128:]])
    progs["fp_cast"] = (p, mem, {**_fp_out(0, widened[:128]), **_fp_out(1, widened[128:]),
                                 **_fp_out(2, _bf16_words(narrowed))}, ["vfcastf", "vfcastb"])
    # a + b; then 37 elements onto a FILL row: words 37.. keep FILL (a partial last beat)
    p = Program().li(1, FP_IN).li(2, 128).li(3, ROW).li(4, 2 * ROW).li(5, 3 * ROW).li(6, 37)
    p.li(9, FP_OUT).ldb(0, 1, 0).ldb(3, 1, 0x200).ldb(5, 1, 0x600)
    p.vfadd(4, 0, 2, 3).vfadd(5, 0, 6, 3).stb(4, 9, 0).stb(5, 9, 0x200).halt()
    total = reference("ADD", a, 0, b, fused=False)
    progs["fp_add"] = (p, mem, {**_fp_out(0, total), **_fp_out(1, [*total[:37], *[FILL] * 91])},
                       ["vfadd"])
    # a times each scalar, in place
    p = Program().li(1, FP_IN).li(2, 128).li(3, ROW).li(9, FP_OUT)
    want = {}
    for k, sc in enumerate(scalars):
        p.li(4, sc).ldb(3, 1, 0).vfmuls(3, 3, 2, 4).stb(3, 9, 0x200 * k)
        want.update(_fp_out(k, reference("MULS", a, sc, 0, fused=False)))
    progs["fp_muls"] = (p.halt(), mem, want, ["vfmuls"])
    # acc = b; acc += a * s0; acc += b * s1, in order: each product rounded, then the sum
    s0, s1 = scalars[1], 0xBF40_0000
    p = Program().li(1, FP_IN).li(2, 128).li(3, ROW).li(4, 2 * ROW).li(9, FP_OUT)
    p.li(5, s0).li(6, s1).ldb(0, 1, 0).ldb(3, 1, 0x200).ldb(4, 1, 0x200)
    p.vfaxpy(4, 0, 2, 5).vfaxpy(4, 3, 2, 6).stb(4, 9, 0).halt()
    acc = reference("AXPY", a, s0, b, fused=False)
    progs["fp_axpy"] = (p, mem, _fp_out(0, reference("AXPY", b, s1, acc, fused=False)),
                        ["vfaxpy"])
    return progs


def _fp_combine(k=3, n=128):
    """One token's combine as CANN's kernel computes it: the fp32 sum set to 0 (its
    ``Duplicate``: here the integer ``vmuls`` by r0 over the sum's 16-bit halves), then each
    of ``k`` bf16 expert rows cast to fp32, times its fp32 weight and added into the sum in
    order, and the sum cast to bf16; once with vfmuls + vfadd (stored to block 1) and once
    with vfaxpy (block 0: the same bits). Expected: numpy float32 arithmetic, ml_dtypes'
    bfloat16."""
    rng = np.random.default_rng(3)
    rows = rng.normal(0, 4, (k, n)).astype(ml_dtypes.bfloat16)
    weights = rng.dirichlet(np.ones(k)).astype(np.float32)
    total = np.zeros(n, dtype=np.float32)
    for row, w in zip(rows, weights):
        total = total + row.astype(np.float32) * w
    want = _bf16_words(total.astype(ml_dtypes.bfloat16).view(np.uint16))
    mem = _blocks(FP_IN, [0x3F80_0000] * 128, *(_bf16_words(r.view(np.uint16)) for r in rows))
    # UBuf rows: 0 an expert row (bf16), 1 the product (fp32), 2 the sum (fp32), 3 the result
    p = Program().li(1, FP_IN).li(2, n).li(3, ROW).li(4, 2 * ROW).li(5, 3 * ROW).li(9, FP_OUT)
    p.li(7, 2 * n).ldb(4, 1, 0)                   # the sum's row holds 1.0s
    for out, variant in ((0x200, "muls_add"), (0, "axpy")):
        p.vmuls(4, 4, 7, 0)                       # sum = +0.0: 2n 16-bit halves times 0
        for i, w in enumerate(weights):
            p.li(6, int(w.view(np.uint32))).ldb(0, 1, 0x200 * (i + 1)).vfcastf(3, 0, 2)
            if variant == "axpy":
                p.vfaxpy(4, 3, 2, 6)
            else:
                p.vfmuls(3, 3, 2, 6).vfadd(4, 4, 2, 3)
        p.vfcastb(5, 4, 2).stb(5, 9, out)
    return p.halt(), mem, {**_fp_out(0, want), **_fp_out(1, want)}


def _fp_costs():
    """Cycle probes on FP_SPEC: ``csrr cycle`` before and after each instruction (1 apart
    with nothing between): vfadd at each of FP_COST_LENGTHS, then the other four back to back
    at length 5."""
    p = Program().li(9, FP_OUT).li(3, ROW)
    for k, length in enumerate(FP_COST_LENGTHS):
        p.li(2, length).csrr(4, "cycle").vfadd(3, 0, 2, 0).csrr(5, "cycle")
        p.sub(5, 5, 4).sw(5, 9, 4 * k)
    p.li(2, 5).csrr(4, "cycle").vfcastf(3, 0, 2).vfcastb(3, 0, 2).vfmuls(3, 0, 2, 0)
    p.vfaxpy(3, 0, 2, 0).csrr(5, "cycle").sub(5, 5, 4).sw(5, 9, 4 * len(FP_COST_LENGTHS))
    return p.halt()


def _fp_cost_expect(params, extra=0):
    costs = [_fp_cost(params, n, extra) for n in FP_COST_LENGTHS]
    return {FP_OUT + 4 * k: c + 1 for k, c in enumerate(costs + [4 * _fp_cost(params, 5, extra)])}


def _fp_rate_programs():
    """FP_RATE_SPEC: three instructions back to back, each paying its closed form (the unit's
    rate credit is full again when the next begins); a fused vfaxpy over short rows."""
    a, b, _h, scalars = _fp_operands()
    nw = FP_RATE_PARAMS["data_bytes"] // 4       # 16 modelled words a row
    progs = {}
    p = Program().li(9, FP_OUT).li(2, 9).li(6, 64).li(7, 1).csrr(4, "cycle")
    p.vfadd(0, 0, 2, 0).vfmuls(0, 0, 6, 0).vfaxpy(0, 0, 7, 0).csrr(5, "cycle").sub(5, 5, 4)
    p.sw(5, 9, 0).halt()
    cost = sum(_fp_cost(FP_RATE_PARAMS, n) for n in (9, 64, 1))
    progs["fp_rate_cost"] = ({"words": p.assemble()}, {FP_OUT: cost + 1}, [])
    # x (rows 0, 1) and acc (rows 2, 3) of 136 elements: row words 0..15 of elements 0..15
    # and row+1 words 0..7 of elements 128..135; elements 16..127 are beyond the modelled
    # 64 B (read 0, writes dropped). acc += x * s, rounded once; row 3's words 8.. keep FILL.
    # Then 32 of acc to bf16 into row 1: elements 16..31 read 0 and become +0.
    mem = _blocks(FP_IN, a[:nw], a[nw:2 * nw], b[:nw], [*b[nw:nw + 8], *[FILL] * 8])
    s = scalars[1]
    p = Program().li(1, FP_IN).li(3, ROW).li(4, 2 * ROW).li(5, 3 * ROW).li(9, FP_OUT)
    for row, k in ((0, 0), (3, 1), (4, 2), (5, 3)):
        p.ldb(row, 1, 0x200 * k)
    p.li(2, 136).li(6, s).li(7, 32).vfaxpy(4, 0, 2, 6).vfcastb(3, 4, 7)
    p.stb(4, 9, 0).stb(5, 9, 0x200).stb(3, 9, 0x400).halt()
    x = np.concatenate([a[:nw], np.zeros(128 - nw, np.uint32), a[nw:nw + 8]])
    acc = np.concatenate([b[:nw], np.zeros(128 - nw, np.uint32), b[nw:nw + 8]])
    fused = reference("AXPY", x, s, acc, fused=True)
    narrowed = reference("CAST_F32_BF16", fused[:32], 0, 0, fused=False)
    progs["fp_rate_axpy"] = ({"words": p.assemble(), "memory": mem}, {
        **_fp_out(0, fused[:nw]), **_fp_out(1, [*fused[128:136], *[FILL] * 8]),
        **_fp_out(2, _bf16_words(narrowed))}, [])
    assert not narrowed[16:].any()              # elements 16..31 were beyond the modelled row
    return progs


def _fp_programs():
    progs = {name: ({"words": p.assemble(), "memory": mem}, want, covers)
             for name, (p, mem, want, covers) in _fp_arithmetic().items()}
    p, mem, want = _fp_combine()
    progs["fp_combine"] = ({"words": p.assemble(), "memory": mem}, want, [])
    words = _fp_costs().assemble()
    progs["fp_cost"] = ({"words": words}, _fp_cost_expect(FP_PARAMS), [])
    progs["fp_cost_extra"] = ({"words": words, "vector_extra": 5},
                              _fp_cost_expect(FP_PARAMS, 5), [])
    return progs


FP_PROGRAMS = _fp_programs()
FP_NAMES = list(FP_PROGRAMS)
FP_RATE_PROGRAMS = _fp_rate_programs()


@pytest.fixture(scope="module")
def fp_results():
    out, _ = run(FP_SPEC, run_programs, {"programs": [FP_PROGRAMS[n][0] for n in FP_NAMES]})
    return dict(zip(FP_NAMES, out))


@pytest.mark.parametrize("name", FP_NAMES)
def test_fp_program_results(fp_results, name):
    """Bit-exact results and closed-form cycle costs of the floating-point instructions."""
    _check_words(name, fp_results[name], FP_PROGRAMS[name][1])


def test_fp_rate_and_fused_programs():
    names = list(FP_RATE_PROGRAMS)
    out, _ = run(FP_RATE_SPEC, run_programs,
                 {"programs": [FP_RATE_PROGRAMS[n][0] for n in names]})
    for name, res in zip(names, out):
        _check_words(name, res, FP_RATE_PROGRAMS[name][1])


def test_fp_cycle_costs_closed_form():
    """The closed form itself: one beat a cycle is ``B + latency + 1 + X``; a slower unit
    spreads the beats ``repeat_cycles`` a repeat of ``64 // lanes``."""
    assert AIVCore.fp_vector_cycles(0, 4, 10) == 1 + 10 + 1
    assert AIVCore.fp_vector_cycles(5, 4, 10, extra=3) == 2 + 10 + 1 + 3
    assert AIVCore.fp_vector_cycles(128, 4, 10, 16) == 32 + 10 + 1
    # 2 lanes, 32 beats a repeat taking 129 cycles: beat n at floor(n * 129 / 32)
    assert AIVCore.fp_vector_cycles(64, 2, 3, 129) == 31 * 129 // 32 + 3 + 2
    assert _fp_unit(FP_PARAMS)["latency"] == 10      # one register per datapath step
    assert _fp_unit(FP_RATE_PARAMS)["latency"] == 3


def test_fp_instructions_fault_without_the_unit(pysim_results):
    res = pysim_results["no_fp_unit"]
    assert res["fault"] == 1 and res["pc"] == 2


def test_every_instruction_runs_on_the_core():
    """The decoder is tested per instruction: fails when an instruction has no program."""
    covered = {mn for table in (PROGRAMS, INC_PROGRAMS, EP_PROGRAMS, FP_PROGRAMS)
               for _p, _e, covers in table.values() for mn in covers}
    assert covered == set(BY_MNEMONIC), sorted(set(BY_MNEMONIC) ^ covered)


def _check_words(name, res, expect):
    assert not res["timeout"] and not res["fault"]
    mem = _mem_of(res)
    for addr, value in expect.items():
        assert mem.get(addr, 0) == value, f"{name}: word {addr:#x} = {mem.get(addr, 0):#x}, " \
                                          f"expected {value:#x}"


@pytest.mark.parametrize("name", [n for n in NAMES if PROGRAMS[n][1]])
def test_program_results(pysim_results, name):
    _check_words(name, pysim_results[name], PROGRAMS[name][1])


def test_loop_cycles(pysim_results):
    assert pysim_results["loop"]["cycles"] == LOOP_CYCLES


def test_cycle_costs(pysim_results):
    r = pysim_results
    assert r["cost_lw"]["cycles"] == (1 + L) + 1
    assert r["cost_fadd"]["cycles"] == (1 + L) + 1
    # sw 1; its ack arrives in cycle L and is counted in L + 1, when fence completes
    assert r["cost_sw_fence"]["cycles"] == 1 + (L + 1) + 1
    assert r["cost_vsum"]["cycles"] == 1 + AIVCore.vector_cycles(9, PARAMS["lanes"]) + 1
    assert r["cost_bar"]["cycles"] == 1 + 1
    # poll_extra = 4: lw and fadd each 1 + 4 + L; read_extra = 6: ldb 1 + 6 + L; the posted sw
    # and its fence as before
    assert r["cost_reads_extra"]["cycles"] == 2 * (1 + 4 + L) + (1 + 6 + L) + 1 + (L + 1) + 1
    assert r["cost_copy_extra"]["cycles"] == (1 + 6 + L) + 2 * (1 + L) + 1
    # the vector_extra knob: every vector instruction waits that many cycles before its beats
    assert r["cost_vsum_extra"]["cycles"] == r["cost_vsum"]["cycles"] + 5 \
        == 1 + AIVCore.vector_cycles(9, PARAMS["lanes"], 5) + 1
    assert r["cost_vsum2_extra"]["cycles"] == 1 + 2 * (AIVCore.vector_cycles(33, PARAMS["lanes"])
                                                       + 7) + 1
    assert AIVCore.vector_cycles(9, 4) == 3 + 3
    assert AIVCore.vector_cycles(0, 4) == 1 + 3
    # vcomp: one extra cycle per match after the first of its beat
    assert AIVCore.vcomp_cycles(9, 4, []) == AIVCore.vector_cycles(9, 4)
    assert AIVCore.vcomp_cycles(9, 4, [0, 1, 2, 5, 8]) == AIVCore.vector_cycles(9, 4) + 2 + 0 + 0
    assert AIVCore.vcomp_cycles(16, 4, range(16)) == AIVCore.vector_cycles(16, 4) + 4 * 3
    with pytest.raises(ValueError, match="match 9 is not an index of a vector of length 9"):
        AIVCore.vcomp_cycles(9, 4, [9])


def test_vcomp_cases_cover_what_they_claim():
    """The vcomp programs have partial last beats, several matches in a beat, an empty result."""
    cases = _vcomp_cases()
    assert any(length % LANES for _e, length, _c, _p in cases)
    counts = [PROGRAMS[f"vcomp{n}"][1][OUT] for n in range(len(cases))]
    assert 0 in counts and max(counts) > 128
    assert any(PROGRAMS[f"vcomp{n}"][1][OUT + 4] > AIVCore.vector_cycles(cases[n][1], LANES) + 1
               for n in range(len(cases)))


def test_poll_waits_for_the_memory_change(pysim_results):
    res = pysim_results["poll"]
    reads = [c for c, op, addr in res["requests"] if op == "READ_WORD" and addr == OUT]
    # reads repeat back to back every L + 1 cycles until one after cycle 40 sees 9
    assert all(b - a == L + 1 for a, b in zip(reads, reads[1:]))
    assert reads[-1] >= 40 and reads[-2] < 40
    assert res["cycles"] == reads[-1] + (L + 1) + 1 + 1


def test_a_poll_pays_poll_extra_and_a_copy_read_extra(pysim_results):
    """A scalar read of global memory and a copy's start are two knobs: N satisfied polls cost
    ``N (1 + P + L)`` at ``poll_extra = P`` whatever ``read_extra`` is, and N copies of a block
    (``ldb``) ``N (1 + R + L)`` at ``read_extra = R`` whatever ``poll_extra`` is (each program
    ends with its 1-cycle ``halt``)."""
    assert SPLIT_P != SPLIT_R
    assert pysim_results["cost_polls_split"]["cycles"] == SPLIT_N * (1 + SPLIT_P + L) + 1
    assert pysim_results["cost_copies_split"]["cycles"] == SPLIT_N * (1 + SPLIT_R + L) + 1


def test_every_read_of_a_poll_pays_poll_extra(pysim_results):
    """At ``poll_extra = 5`` (and ``read_extra = 11``, which a poll does not pay) a poll's
    reads are ``L + 1 + 5`` cycles apart, the first one 5 cycles after the poll began, and the
    result is the same."""
    res, plain = pysim_results["poll_extra"], pysim_results["poll"]
    reads = [c for c, op, addr in res["requests"] if op == "READ_WORD" and addr == OUT]
    first = [c for c, op, addr in plain["requests"] if op == "READ_WORD" and addr == OUT][0]
    assert reads[0] == first + 5
    assert all(b - a == L + 1 + 5 for a, b in zip(reads, reads[1:]))
    assert reads[-1] >= 40 and reads[-2] < 40
    assert res["cycles"] == reads[-1] + (L + 1) + 1 + 1


def test_mark_trace(pysim_results):
    trace = pysim_results["mark"]["trace"]
    assert [(c, e) for c, _t, e in trace] == [(5, 1), (5, 65535)]
    # trace.ready is low on odd cycles here: MARK stalls until accepted
    assert [t for _c, t, _e in trace] == [0, 4]
    assert pysim_results["mark"]["cycles"] >= 5


def test_remote_addresses_carry_the_rank(pysim_results):
    reqs = pysim_results["remote"]["requests"]
    assert [op for _c, op, _a in reqs] == ["WRITE_WORD", "WRITE_BLOCK", "READ_WORD"]
    assert reqs[0][2] == address(7, 3, 2)
    assert reqs[1][2] == address(7, 3, 2)   # block ops keep the address; memory aligns it


def test_unassigned_opcode_faults(pysim_results):
    res = pysim_results["fault"]
    assert res["fault"] == 1 and res["pc"] == 0 and res["cycles"] == 1


@pytest.mark.parametrize("name", [n for n in INC_NAMES if INC_PROGRAMS[n][1]])
def test_inc_program_results(inc_results, name):
    _check_words(name, inc_results[name], INC_PROGRAMS[name][1])


def test_inc_posts_carry_their_registers(inc_results):
    """One post per instruction, one cycle each, op = INC_POSTS[mnemonic], a = R[rs1], b = R[rs2]."""
    from epfabric.hw.aiv_core import INC_POSTS
    posts = inc_results["posts"]["posts"]
    assert [p[1:] for p in posts] == [[INC_POSTS["incag"], 7, 300], [INC_POSTS["incrs"], 300, 7],
                                      [INC_POSTS["incbar"], 0, 0],
                                      [INC_POSTS["inccnt"], M32, 7]]
    cycles = [p[0] for p in posts]
    assert cycles == list(range(cycles[0], cycles[0] + 4))


def test_incwait_stalls_until_the_counter_reaches_the_threshold(inc_results):
    res = inc_results["wait"]
    # li, incwait (satisfied in cycle 30, when 11 >= 9 is first seen; 5 at cycle 10 is not),
    # li, sw, halt
    assert res["cycles"] == 30 + 1 + 3
    # li (lui + addi), incwait (satisfied in cycle 20), li, sw, halt
    assert inc_results["wrap"]["cycles"] == 20 + 1 + 3


def test_cube_costs_its_unit_time(inc_results):
    # the cube instruction's cycle, then CUBE_CYCLES until cube_done, then halt
    assert inc_results["cost_cube"]["cycles"] == 1 + CUBE_CYCLES + 1


def test_incwait_hang_names_the_counter(inc_results):
    from epfabric.hw.aiv_core import INC_WAIT_ADDR
    res = inc_results["inc_hang"]
    assert res["timeout"] and res["waiting"] == 1 and res["wait_addr"] == INC_WAIT_ADDR | 1


def test_units_fault_without_inc(pysim_results):
    for name in ("no_inc_unit", "no_cube_unit"):
        res = pysim_results[name]
        assert res["fault"] == 1 and res["pc"] == (1 if name == "no_inc_unit" else 0)


def test_hung_poll_reports_waiting_address(pysim_results):
    res = pysim_results["hang"]
    assert res["timeout"] and res["waiting"] == 1 and res["wait_addr"] == OUT


# native: the core's own native build (13 s of a cold `make test`); every native machine test
# steps the same core module
@pytest.mark.parametrize("hdl_simulator", simulators("icarus", "verilator", "native",
                                                     slow=("native",)), indirect=True)
def test_same_on_icarus_and_verilator(hdl_simulator, pysim_results):
    """The whole program batch: identical results and cycle counts to Amaranth's simulator.

    There is no ``[pysim]`` case: Amaranth's results are what every test above
    checks against the specified costs and values.
    """
    out, _ = run(SPEC, run_programs, {"programs": [PROGRAMS[n][0] for n in NAMES]},
                 simulator=hdl_simulator)
    assert dict(zip(NAMES, out)) == pysim_results


# Icarus in CI; Verilator and native builds of the INC core (11 + 11 s of a cold `make test`)
# are `slow`: test_agrs runs the INC machine on both
@pytest.mark.parametrize("hdl_simulator", simulators("icarus", "verilator", "native",
                                                     slow=("verilator", "native")), indirect=True)
def test_inc_core_same_on_icarus_and_verilator(hdl_simulator, inc_results):
    """The INC programs (posts, waits, cube): identical to Amaranth's simulator."""
    out, _ = run(INC_SPEC, run_programs, {"programs": [INC_PROGRAMS[n][0] for n in INC_NAMES]},
                 simulator=hdl_simulator)
    assert dict(zip(INC_NAMES, out)) == inc_results


# Icarus in the normal suite; Verilator and native builds of the fp core are `slow`
@pytest.mark.parametrize("hdl_simulator", simulators("icarus", "verilator", "native",
                                                     slow=("verilator", "native")), indirect=True)
def test_fp_core_same_on_icarus_and_verilator(hdl_simulator, fp_results):
    """The floating-point programs: identical results and cycle counts to Amaranth's simulator
    (which the tests above check against numpy and the closed form)."""
    out, _ = run(FP_SPEC, run_programs, {"programs": [FP_PROGRAMS[n][0] for n in FP_NAMES]},
                 simulator=hdl_simulator)
    assert dict(zip(FP_NAMES, out)) == fp_results


@pytest.mark.parametrize("kw, exc, match", [
    ({"core_id": 256}, ValueError, r"core_id must be in \[0, 255\], not 256"),
    ({"imem_depth": 100}, ValueError, r"imem_depth must be a power of two, not 100"),
    ({"ubuf_rows": 0}, ValueError, r"ubuf_rows must be in \[1, 1024\], not 0"),
    ({"data_bytes": 48}, ValueError, r"data_bytes must be a multiple of 32, not 48"),
    ({"lanes": 3}, ValueError, r"lanes must be a power of two, not 3"),
    ({"width": 12}, ValueError, r"width must be one of 8, 16, 32, not 12"),
    ({"lanes": 1, "width": 16}, ValueError, r"lanes \* width must be a multiple of 32"),
    ({"max_outstanding": 0}, ValueError, r"max_outstanding must be in \[1, 4095\], not 0"),
    ({"core_id": "1"}, TypeError, r"core_id must be an integer, not '1'"),
    ({"imem_depth": 64.0}, TypeError, r"imem_depth must be an integer, not 64.0"),
    ({"data_bytes": 1024}, ValueError, r"data_bytes must be in \[32, 512\], not 1024"),
    ({"max_outstanding": None}, TypeError, r"max_outstanding must be an integer, not None"),
    ({"fp": 1}, TypeError, r"fp must be a bool, not 1"),
    ({"fp_lanes": 32}, ValueError, r"fp_lanes \* 32 must divide data_bytes \* 8"),
])
def test_bad_parameters(kw, exc, match):
    with pytest.raises(exc, match=match):
        rejected(AIVCore, **kw)
