"""Data blocks per link class: what a dispatch or combine must put on the superpod's links.

The superpod (:func:`epfabric.hw.topology.superpod`) has five kinds of link
(:data:`~epfabric.hw.topology.SUPERPOD_HOPS`) and counts, per kind, the data-block flits and
the small (control) flits that enter its links (``link_blocks.<kind>``,
``link_small.<kind>`` in a run's report). A flit from rank ``s`` to rank ``d`` crosses one
link of each kind of its path:

==================  =====================================
``s`` and ``d``     links crossed
==================  =====================================
the same rank       none (the die's own UB port serves it)
the same NPU        ``direct``
the same board      ``up``, ``down``
other boards        ``up``, ``t2_up``, ``t2_down``, ``down``
==================  =====================================

**Exact counts** (:func:`exact_link_blocks`), from a workload's routing. What each system
stores where (read from the programs, :mod:`.cann`, :mod:`.ubep`, :mod:`.combine`):

* ``cann`` and ``ubep``, dispatch: slot ``(t, i)`` of source ``s`` is ``B_tok`` block stores
  from ``s`` to the rank of expert ``topk_idx[s][t, i]`` (into ``RECV``); combine: the same
  ``B_tok`` blocks from the expert's rank back to ``s`` (into ``CWIN``). Nothing else either
  kernel sends is a block: counts, flags, offsets and SyncAll are word stores (small flits),
  UBEP's ``TCNT`` blocks, the reordering into ``OUT`` and the combine's ``YOUT`` are stores to
  the own die. So there are no metadata blocks, and every variant (``send_split``,
  ``mapping``, ``sync``, ``syncall``) moves the same blocks.
* ``ubep-inc`` (the in-network system, hw/inc_switch.py, :mod:`.ubep_inc`): dispatch,
  one ``stbm`` per token block to the dies holding its experts (the own die's copy crosses no
  link), copied by the switches where the paths part: one copy on each sibling's direct link,
  one up the die's uplink for all dies outside its NPU, one up the tier-2 layer (the source's
  plane, ``Switch`` ``mcast_uplinks``) for all other boards, one down to each of those boards,
  one down to each destination die. Each slot's ``t`` and weight travel as two word stores
  (small flits), so there are no metadata blocks. Combine: one pre-summed contribution per
  (token block, other die holding one of its experts), reduced where paths meet on the way
  down (the tier-2 plane, the root's tier-1 die port): a tier-1 switch does not sum
  contributions leaving its board (the deadlock argument, docs/concepts/inc-deadlock.md), so
  every contributing die of another board puts one block on ``t2_up``.

Small flits are not predicted: acks are coalesced per (source, core), so their number
depends on timing.

**Closed form** (:func:`expected_link_blocks`): the expectation under uniform top-k routing
(every set of ``k`` distinct experts of ``E`` equally likely, as :func:`~epfabric.sw.routing.route`
draws without hot experts or Zipf weights), INC-MoE §2.2's way of counting, per token and
token block, with ``n`` dies per NPU, ``D`` per board, ``B`` boards, ``R = D·B`` ranks,
``epr = E/R`` and ``q(m) = C(E − m·epr, k) / C(E, k)``, the chance that none of a token's
experts is on a given set of ``m`` dies:

===========  ===============  ==============================  ===========================
kind         cann, ubep       ubep-inc dispatch               ubep-inc combine
===========  ===============  ==============================  ===========================
``direct``   ``k(n−1)/R``     ``(n−1)(1−q(1))``               ``(n−1)(1−q(1))``
``up``       ``k(R−n)/R``     ``1−q(R−n)``                    ``(R−n)(1−q(1))``
``t2_up``    ``k(R−D)/R``     ``1−q(R−D)``                    ``(R−D)(1−q(1))``
``t2_down``  ``k(R−D)/R``     ``(B−1)(1−q(D))``               ``1−q(R−D)``
``down``     ``k(R−n)/R``     ``(R−n)(1−q(1))``               ``1−q(R−n)``
===========  ===============  ==============================  ===========================

(CANN and UBEP move the same blocks in dispatch and combine, in opposite directions.) A run's
expectation is ``R · BS · B_tok`` times the table, plus the metadata blocks, which are exact.
"""

from math import comb

import numpy as np

from ...hw.hbm import BLOCK_BYTES
from ...hw.topology import SUPERPOD_HOPS, check_topology
from ...hw.validate import UserError, check_choice, check_int
from ..config import link_counter

__all__ = ["SYSTEMS", "KERNELS", "LINK_KINDS", "superpod_shape", "path_links",
           "link_blocks_per_token", "exact_link_blocks", "expected_link_blocks",
           "per_token_expectation", "measured_links", "link_report"]

#: systems with a count: the two kernels and the in-network one (module docstring)
SYSTEMS = ("cann", "ubep", "ubep-inc")
#: the kernels whose traffic is counted
KERNELS = ("dispatch", "combine")
#: the link kinds, in the order of the hardware's counter arrays
LINK_KINDS = SUPERPOD_HOPS


def superpod_shape(shape):
    """``(dies_per_npu, npus_per_board, boards)`` of a superpod topology tuple (or of the
    three sizes); ``UserError`` naming a star or a bad shape."""
    shape = tuple(shape)
    if len(shape) == 3 and shape[0] != "superpod":
        shape = ("superpod", *shape)
    kind, *sizes = check_topology(shape)
    if kind != "superpod":
        raise UserError(f"link classes are a superpod's; topology {shape!r} is a {kind}")
    return tuple(sizes)


def path_links(src, dst, shape):
    """The link kinds a flit from rank ``src`` to rank ``dst`` crosses, in order (table above)."""
    n, npb, _nb = superpod_shape(shape)
    dpb = n * npb
    if src == dst:
        return ()
    if src // n == dst // n:
        return ("direct",)
    if src // dpb == dst // dpb:
        return ("up", "down")
    return ("up", "t2_up", "t2_down", "down")


def _check(workload, system, kernel, shape):
    check_choice("system", system, SYSTEMS)
    check_choice("kernel", kernel, KERNELS)
    n, npb, nb = superpod_shape(shape)
    if n * npb * nb != workload.ranks:
        raise UserError(f"shape {(n, npb, nb)} has {n * npb * nb} dies; the workload has "
                        f"{workload.ranks} ranks")
    return n, n * npb, nb


def link_blocks_per_token(workload, shape, system, kernel="dispatch"):
    """``{kind: counts}``: each token's data blocks on each link class, per token block
    (arrays of shape ``ranks × batch``), without metadata (module docstring)."""
    n, D, nb = _check(workload, system, kernel, shape)
    R = workload.ranks
    die = np.asarray(workload.topk_idx) // workload.epr             # [s, t, i]: expert's rank
    s = np.arange(R)[:, None, None]
    if system != "ubep-inc":                       # one stream of blocks per slot, s <-> die
        local = die == s
        npu = (die // n == s // n) & ~local
        board = (die // D == s // D) & ~(die // n == s // n)
        far = die // D != s // D
        per = {"direct": npu, "up": board | far, "down": board | far, "t2_up": far,
               "t2_down": far}
        return {kind: per[kind].sum(axis=2) for kind in LINK_KINDS}
    r = np.arange(R)
    hit = (die[:, :, :, None] == r).any(axis=2)                     # [s, t, r]: r has one
    sib = (r[None, :] // n == np.arange(R)[:, None] // n) & (r[None, :] != np.arange(R)[:, None])
    out = r[None, :] // n != np.arange(R)[:, None] // n             # [s, r]: outside s's NPU
    far_dies = hit & out[:, None, :]
    boards = far_dies.reshape(R, workload.batch, nb, D).any(axis=3)  # [s, t, b]
    own = np.arange(R) // D
    remote = boards & (np.arange(nb)[None, None, :] != own[:, None, None])
    direct = (hit & sib[:, None, :]).sum(axis=2)
    if kernel == "dispatch":
        return {"direct": direct, "up": far_dies.any(axis=2).astype(np.int64),
                "t2_up": remote.any(axis=2).astype(np.int64),
                "t2_down": remote.sum(axis=2), "down": far_dies.sum(axis=2)}
    other_board = r[None, :] // D != np.arange(R)[:, None] // D     # [s, r]
    return {"direct": direct, "up": far_dies.sum(axis=2),
            "t2_up": (hit & other_board[:, None, :]).sum(axis=2),
            "t2_down": remote.any(axis=2).astype(np.int64),
            "down": far_dies.any(axis=2).astype(np.int64)}


def _metadata_blocks(shape, system, kernel, batch, topk):
    """``{kind: blocks}`` the system sends besides its token blocks: none (module docstring;
    every system's metadata are word stores)."""
    superpod_shape(shape)
    return {kind: 0 for kind in LINK_KINDS}


def exact_link_blocks(workload, shape, system, kernel="dispatch"):
    """``{kind: blocks}``: the data blocks ``system``'s ``kernel`` must put on each link class
    of the superpod ``shape`` for ``workload``'s routing (module docstring), metadata included.

    ``shape``: a topology tuple ``("superpod", dies_per_npu, npus_per_board, boards)`` or the
    three sizes. ``UserError`` on a system, kernel or shape that does not fit (named).
    """
    per = link_blocks_per_token(workload, shape, system, kernel)
    meta = _metadata_blocks(shape, system, kernel, workload.batch, workload.topk)
    return {kind: int(per[kind].sum()) * workload.hidden_blocks + meta[kind]
            for kind in LINK_KINDS}


def per_token_expectation(shape, system, kernel="dispatch", *, experts, topk):
    """``{kind: blocks}`` one token block puts on each link class, expected under uniform
    top-k routing (the module docstring's table)."""
    check_choice("system", system, SYSTEMS)
    check_choice("kernel", kernel, KERNELS)
    n, npb, nb = superpod_shape(shape)
    D, R = n * npb, n * npb * nb
    check_int("experts", experts, 1)
    check_int("topk", topk, 1, experts)
    if experts % R:
        raise UserError(f"experts ({experts}) must be a multiple of the {R} ranks")
    epr = experts // R

    def q(m):                       # no expert of the token on a given set of m dies
        return comb(experts - m * epr, topk) / comb(experts, topk)
    if system != "ubep-inc":
        return {"direct": topk * (n - 1) / R, "up": topk * (R - n) / R,
                "down": topk * (R - n) / R, "t2_up": topk * (R - D) / R,
                "t2_down": topk * (R - D) / R}
    if kernel == "dispatch":
        return {"direct": (n - 1) * (1 - q(1)), "up": 1 - q(R - n),
                "t2_up": 1 - q(R - D), "t2_down": (nb - 1) * (1 - q(D)),
                "down": (R - n) * (1 - q(1))}
    return {"direct": (n - 1) * (1 - q(1)), "up": (R - n) * (1 - q(1)),
            "t2_up": (R - D) * (1 - q(1)), "t2_down": 1 - q(R - D), "down": 1 - q(R - n)}


def expected_link_blocks(shape, system, kernel="dispatch", *, experts, topk, batch,
                         hidden_blocks=1):
    """``{kind: blocks}``: the closed form of :func:`exact_link_blocks` for a run of ``batch``
    tokens a rank under uniform top-k routing (:func:`per_token_expectation` times
    ``ranks · batch · hidden_blocks``, plus the metadata blocks)."""
    check_int("batch", batch, 1)
    check_int("hidden_blocks", hidden_blocks, 1)
    n, npb, nb = superpod_shape(shape)
    per = per_token_expectation(shape, system, kernel, experts=experts, topk=topk)
    meta = _metadata_blocks(shape, system, kernel, batch, topk)
    return {kind: n * npb * nb * batch * hidden_blocks * per[kind] + meta[kind]
            for kind in LINK_KINDS}


def measured_links(counters, control_bytes, block_bytes=BLOCK_BYTES):
    """``{kind: {"blocks", "small", "bytes"}}`` from a report's counters (``link_blocks.<kind>``,
    ``link_small.<kind>``): bytes = ``block_bytes`` · blocks + ``control_bytes`` · small (a
    preset's). ``None`` when the machine has none (a star)."""
    if link_counter("blocks", LINK_KINDS[0]) not in counters:
        return None
    out = {}
    for kind in LINK_KINDS:
        blocks, = counters[link_counter("blocks", kind)]
        small, = counters[link_counter("small", kind)]
        out[kind] = {"blocks": blocks, "small": small,
                     "bytes": block_bytes * blocks + control_bytes * small}
    return out


def link_report(counters, workload, topology, system, kernel, preset, uniform=True):
    """A run's link figures: ``{"measured": measured_links(...), "exact": exact_link_blocks,
    "closed_form": expected_link_blocks}``, bytes at ``preset``'s block and control sizes;
    ``closed_form`` is ``None`` unless the routing was drawn uniformly (``uniform``, and no hot
    experts or Zipf weights). ``None`` on a star."""
    measured = measured_links(counters, preset.control_bytes, preset.block_bytes)
    if measured is None:
        return None
    uniform = uniform and not workload.hot and not workload.zipf
    return {"measured": measured,
            "exact": exact_link_blocks(workload, topology, system, kernel),
            "closed_form": (expected_link_blocks(topology, system, kernel,
                                                 experts=workload.experts, topk=workload.topk,
                                                 batch=workload.batch,
                                                 hidden_blocks=workload.hidden_blocks)
                            if uniform else None)}
