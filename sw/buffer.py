"""A DeepEP-like API over the simulated machine: ``Buffer.dispatch`` and ``Buffer.combine``.

::

    from epfabric.sim.backends.machine import backend
    from epfabric.sw.buffer import Buffer

    buf = Buffer(backend("verilator"), preset="cm384", topology=("superpod", 2, 2, 1),
                 aivs=4, batch=16, topk=4, experts=16, system="ubep")
    recv_x, per_expert, handle, report = buf.dispatch(x, topk_idx, topk_weights)
    # DeepEP's names: recv = buf.dispatch(...); recv.recv_topk_idx, recv.recv_topk_weights,
    # recv.num_recv_tokens_per_expert_list (see Buffer.dispatch)
    expert_out = [my_expert(rows) for rows in recv_x]          # anything, per rank
    y, report = buf.combine(expert_out, handle)

``x`` is ranks × BS × blocks × 32-bit words (every rank's tokens: the whole
machine is simulated), ``topk_idx``/``topk_weights`` ranks × BS × k. All
three are integer arrays (a float array is refused, never truncated: the
machine moves 32-bit words and the combine sums 16-bit integer lanes);
``topk_idx`` holds k distinct expert ids in ``[0, E)`` per token (the
kernels send every slot: DeepEP's ``-1`` "no expert" is refused). The
buffer is one machine configuration (its layout and programs are sized for
``batch``, ``topk``, ``experts`` and ``hidden_blocks``): every call has
exactly that shape. Every call is a machine run checked against numpy (a
wrong result raises). Between runs the buffer keeps what a persistent HBM
would: the ``CTRL`` words (cumulative SyncAll counters), the status, count
and offset words and ``EXPAND``; each dispatch runs at the next epoch, so
stale flags of an earlier call can never be taken for new ones. Calls may
switch systems: CANN's SyncAll counters count only CANN's barriers, so
before a CANN run the host moves a counter that UBEP epochs left behind to
where all-CANN epochs would have left it (a counter never goes back). With
``system="ubep"``, words 0–3 of every block are the Token-Flag Fusion header
in both directions: the payload is words 4 and up (480 of 512 B), as on the
real fabric. ``recv_x`` and ``y`` are ``uint32`` arrays, the machine's words
(y: each word two 16-bit lanes, summed modulo 2¹⁶), whatever integer dtype
``x`` has.
"""

import numpy as np

from ..hw.validate import UserError
from .config import parse_topology
from .machine import Machine
from .ubep.workload import Workload

__all__ = ["Buffer", "DispatchError", "Received"]


class DispatchError(RuntimeError):
    """A dispatch or combine whose result differs from numpy (the message lists the problems)."""


class Received(tuple):
    """What :meth:`Buffer.dispatch` returns: ``(recv_x, num_recv_tokens_per_expert_list,
    handle, report)`` (a 4-tuple, unpacked as before) with DeepEP's receive fields by name:
    ``recv_x``, ``recv_topk_idx``, ``recv_topk_weights``, ``num_recv_tokens_per_expert_list``,
    ``handle``, ``report`` (the layout is in :meth:`Buffer.dispatch`)."""

    def __new__(cls, recv_x, recv_topk_idx, recv_topk_weights, per_expert, handle, report):
        self = super().__new__(cls, (recv_x, per_expert, handle, report))
        self.recv_x, self.recv_topk_idx, self.recv_topk_weights = (recv_x, recv_topk_idx,
                                                                   recv_topk_weights)
        self.num_recv_tokens_per_expert_list = per_expert
        self.handle, self.report = handle, report
        return self


class Buffer:
    """Dispatch/combine buffer bound to one machine configuration (module docstring).

    Parameters
    ----------
    backend : Backend
        ``epfabric.sim.backends.machine.backend(name)``.
    preset, topology, aivs
        The machine (default: cm384, the dispatch kernel's default shape, 4 AIVs per die);
        ``preset`` is a preset's name or the path of a machine file ``FILE.toml``
        (:mod:`epfabric.sw.preset_file`); ``topology`` is a tuple ``("superpod", 2, 2, 1)`` or its string
        ``"superpod:2,2,1"``.
    batch, topk, experts, hidden_blocks
        The shape of every call (BS tokens per rank, k, E, 512 B blocks per token;
        ``hidden_blocks`` defaults to 1): the layout and the kernels' programs are sized for
        it, so a call with another shape is refused, naming it. ``topk`` and ``experts`` are
        required unless ``model`` is given.
    model : str
        A model of UBEP Table 3 (:data:`~epfabric.sw.ubep.workload.MODELS`: ``deepseek-v3``,
        ``qwen3-30b``, ``glm-4.7``): sets ``topk``, ``experts`` and ``hidden_blocks`` (its
        hidden size in ``system``'s blocks,
        :func:`~epfabric.sw.kernels.dispatch.model_shape`); a differing explicit one is
        refused. The buffer's shape is then fixed: a call with the other system moves the
        same blocks.
    system : str
        ``"cann"`` or ``"ubep"`` (each call may override it, in either order).
    max_cycles : int
        Watchdog limit per run.
    """

    def __init__(self, backend, *, preset="cm384", topology=None, aivs=4, batch, topk=None,
                 experts=None, hidden_blocks=None, model=None, system="ubep",
                 max_cycles=2_000_000):
        from .kernels import KERNELS
        if isinstance(topology, str):
            topology = parse_topology(topology)
        self._dispatch, self._combine = KERNELS["dispatch"], KERNELS["combine"]
        shape = {"topk": topk, "experts": experts, "hidden_blocks": hidden_blocks}
        if model is None:
            missing = [name for name in ("topk", "experts") if shape[name] is None]
            if missing:
                raise UserError(f"Buffer needs {' and '.join(missing)} (or a model)")
        given = {name: v for name, v in shape.items() if v is not None}
        _check_system(system)
        #: the model of UBEP Table 3 the buffer was sized for, or None
        self.model = model
        self.params = {**self._dispatch.resolve_params(
            {"batch": batch, "system": system, "model": model, **given}), "model": None}
        self.config = self._dispatch.configs(preset, topology, aivs, self.params)[0]
        self.machine = Machine(backend=backend, config=self.config)
        self.max_cycles = max_cycles
        self.epoch = 0
        self._state = {}
        from .kernels.dispatch import layout_of
        self.layout = layout_of(self.config, self.params)

    @property
    def ranks(self):
        return self.config.ranks

    def _persistent(self):
        """Block ranges a persistent HBM keeps between calls (counters, flags, counts, EXPAND)."""
        lay = self.layout
        return [(lay.CTRL, 1), (lay.STATUS, lay.RECV - lay.STATUS),
                (lay.COUNTS, lay.WEIGHTS - lay.COUNTS), (lay.CSTATUS, lay.blocks - lay.CSTATUS)]

    def _catch_up(self, word, count):
        """Raise every rank's ``CTRL[word]`` SyncAll counter to ``count`` if it is behind.

        CANN's barriers poll a cumulative count that assumes every earlier epoch ran CANN;
        UBEP runs have no SyncAll, so after them the host (between runs: no core is
        running) moves the counter to where CANN epochs would have left it.
        """
        wpb = self.config.words_per_block
        for r in range(self.ranks):
            words = list(self._state.get((r, self.layout.CTRL), [0] * wpb))
            if words[word] < count:
                words[word] = count
                self._state[(r, self.layout.CTRL)] = words

    def _restore(self):
        self.machine.clear()
        for (r, block), words in sorted(self._state.items()):
            self.machine.write_mem(r, self.machine.address(0, block), words)

    def _save(self):
        wpb = self.config.words_per_block
        for lo, n in self._persistent():
            for block in range(lo, lo + n):
                for r in range(self.ranks):
                    self._state[(r, block)] = self.machine.read_mem(
                        r, self.machine.address(0, block), wpb)

    def _read_back_too(self):
        ranges = list(self.machine._read_ranges) + self._persistent()
        self.machine.read_back(ranges)

    def _check_idx(self, topk_idx):
        """``topk_idx`` as an array, or ``UserError`` naming its first bad (rank, token, slot)."""
        idx = _integers("topk_idx", topk_idx, "expert ids")
        if idx.ndim != 3 or idx.shape[0] != self.ranks:
            raise UserError(f"topk_idx must be ranks ({self.ranks}) x tokens x k, "
                            f"not shape {idx.shape}")
        e = self.params["experts"]
        bad = np.argwhere((idx < 0) | (idx >= e))
        if len(bad):
            s, t, i = map(int, bad[0])
            why = ("; the kernels send every slot and cannot skip one (DeepEP's -1, "
                   "no expert)" if idx[s, t, i] < 0 else "")
            raise UserError(f"topk_idx[{s}, {t}, {i}] (rank {s}, token {t}, slot {i}) is "
                            f"{int(idx[s, t, i])}: expert ids must be in [0, {e}){why}")
        for s in range(idx.shape[0]):
            for t, row in enumerate(idx[s].tolist()):
                seen = [v for n, v in enumerate(row) if v in row[:n]]
                if seen:
                    raise UserError(f"topk_idx[{s}, {t}] (rank {s}, token {t}) names expert "
                                    f"{seen[0]} twice: the kernels take k distinct experts "
                                    f"per token")
        return idx

    def get_dispatch_layout(self, topk_idx, num_experts):
        """DeepEP's layout: ``(num_tokens_per_rank, num_tokens_per_expert, is_token_in_rank)``.

        Per source rank ``s``: tokens going to each destination rank (a token
        counts once per rank however many of its experts live there), slots
        per expert, and the BS × R token-to-rank mask. Host-side numpy, for
        sizing and inspection; the kernels compute what they need themselves.
        """
        if num_experts != self.params["experts"]:
            raise UserError(f"num_experts must be the Buffer's experts "
                            f"({self.params['experts']}), not {num_experts!r}")
        idx = self._check_idx(topk_idx)
        epr = num_experts // self.ranks
        in_rank = np.zeros((self.ranks, idx.shape[1], self.ranks), dtype=bool)
        per_expert = np.zeros((self.ranks, num_experts), dtype=np.int64)
        for s in range(self.ranks):
            for t, experts in enumerate(idx[s].tolist()):
                for e in experts:
                    in_rank[s, t, e // epr] = True
                    per_expert[s, e] += 1
        return in_rank.sum(axis=1), per_expert, in_rank

    def dispatch(self, x, topk_idx, topk_weights, *, system=None):
        """Run a dispatch; return ``(recv_x, num_recv_tokens_per_expert_list, handle, report)``.

        The return is a :class:`Received`: that 4-tuple, plus DeepEP's receive by name
        (``.recv_x``, ``.recv_topk_idx``, ``.recv_topk_weights``,
        ``.num_recv_tokens_per_expert_list``, ``.handle``, ``.report``). Per rank ``d``:

        * ``recv_x[d]``: the received rows in CANN's order (local expert, source rank,
          slot), rows × blocks × words, ``uint32``;
        * ``num_recv_tokens_per_expert_list[d]``: rows per local expert (a list), read from
          the machine's ``COUNTS`` words (the sum over source ranks);
        * ``recv_topk_idx[d]``: rows × k ``int64``; row ``p`` holds, in column ``i`` (the
          slot of its source token that it is), its local expert ``e - d·epr``, and ``-1``
          in every other column;
        * ``recv_topk_weights[d]``: rows × k ``int64``, the slot's weight in column ``i``,
          0 elsewhere;
        * ``handle["recv_src_idx"][d]``: rows × 2, the (source rank, token) of every row.

        DeepEP receives one row per (token, destination rank), deduplicated: a token
        with two experts on rank ``d`` arrives once, its ``recv_topk_idx`` row naming
        both local experts (``-1`` for the slots routed elsewhere). The kernels modelled
        here (CANN's, UBEP's) send one row per (token, slot), i.e. per (token, expert): that
        token arrives twice, once per expert, each row with one column set. So
        ``recv_topk_idx[d]`` has DeepEP's shape and meaning (rows × k, local expert or
        ``-1``) over this model's rows, and code that sums ``weight · expert(row)`` over
        the columns ≥ 0 gives the same per-token result. The three are computed on the host
        from the machine's ``COUNTS`` and the routing (the rows of (expert, source) are that
        source's tokens routed to the expert, in token order), after the run was checked.

        Raises
        ------
        ValueError
            On shapes or values the buffer cannot take (named).
        DispatchError
            When the machine's result differs from numpy.
        """
        p = self.params
        x = _integers("x", x, "32-bit words")
        wts = _integers("topk_weights", topk_weights,
                        "the hardware sums 16-bit integer lanes")
        idx = _integers("topk_idx", topk_idx, "expert ids")
        if x.ndim != 4:
            raise UserError(f"x must be ranks x tokens x blocks x words, not shape {x.shape}")
        k = idx.shape[2] if idx.ndim == 3 else None
        for name, want, got in (("ranks", self.ranks, x.shape[0]), ("batch", p["batch"],
                                 x.shape[1]), ("topk", p["topk"], k),
                                ("hidden_blocks", p["hidden_blocks"], x.shape[2]),
                                ("words", self.config.words_per_block, x.shape[3])):
            if got is not None and got != want:
                raise UserError(f"{name} must equal the Buffer's {name} ({want}), not {got} "
                                f"(x is {x.shape}, topk_idx {idx.shape})")
        idx = self._check_idx(idx)
        w = Workload.from_arrays(x, idx, wts, p["experts"])
        params = {**p, "system": system or p["system"]}
        _check_system(params["system"])
        self._dispatch.resolve_params(params)
        self.epoch += 1
        if params["system"] == "cann":           # SyncAll #2 of every epoch before this one
            self._catch_up(0, 2 * (self.epoch - 1) * self.config.aivs_per_die)
        self._restore()
        inputs = self._dispatch.load(self.machine, params, workload=w, epoch=self.epoch)
        self._read_back_too()
        report = self.machine.run(self.max_cycles)
        verdict = self._dispatch.check(self.machine, report, inputs)
        if not verdict["correct"]:
            raise DispatchError("dispatch differs from numpy: " + "; ".join(verdict["problems"]))
        self._save()
        from .kernels.combine import read_out
        recv = [read_out(self.machine, self.layout, d, n).astype(np.uint32)
                for d, n in enumerate(verdict["tokens_received"])]
        src, idx_of, w_of, per_expert = self._received(w)
        handle = {"system": params["system"], "epoch": self.epoch, "workload": w,
                  "params": params, "rows": verdict["tokens_received"], "dispatch": verdict,
                  "recv_src_idx": src}
        return Received(recv, idx_of, w_of, per_expert, handle, report)

    def _received(self, w):
        """``(recv_src_idx, recv_topk_idx, recv_topk_weights, per-expert counts)`` per rank,
        from the machine's ``COUNTS`` words and the routing ``w`` (:meth:`dispatch`)."""
        lay, R, k = self.layout, self.ranks, w.topk
        srcs, idxs, wts, per_expert = [], [], [], []
        for d in range(R):
            src, slot_of, weight_of, counts = [], [], [], []
            for e_l in range(w.epr):
                e = d * w.epr + e_l
                n_e = 0
                for s in range(R):
                    block, word = lay.word_at(lay.COUNTS, e_l * R + s)
                    n = self.machine.read_mem(d, self.machine.address(0, block, word))[0]
                    hits = np.argwhere(w.topk_idx[s] == e)[:n]        # (t, i), token order
                    src += [(s, int(t)) for t, _ in hits]
                    slot_of += [(int(i), e_l) for _, i in hits]
                    weight_of += [int(w.topk_w[s][t, i]) for t, i in hits]
                    n_e += n
                counts.append(n_e)
            rows = len(src)
            ti = np.full((rows, k), -1, dtype=np.int64)
            tw = np.zeros((rows, k), dtype=np.int64)
            for p, ((i, e_l), wt) in enumerate(zip(slot_of, weight_of)):
                ti[p, i], tw[p, i] = e_l, wt
            srcs.append(np.array(src, dtype=np.int64).reshape(rows, 2))
            idxs.append(ti)
            wts.append(tw)
            per_expert.append(counts)
        return srcs, idxs, wts, per_expert

    def combine(self, expert_out, handle):
        """Send ``expert_out[d]`` (rows as ``recv_x[d]``) back, weighted, summed: ``(y, report)``.

        ``y[s]`` is BS × blocks × words, ``uint32``: ``Σ_i w[t,i] · expert_out(t, i)``
        in 16-bit lanes, modulo 2¹⁶ each (UBEP: words 4 and up; words 0–3 are its header).
        ``expert_out[d]`` is an integer array of 32-bit words.
        """
        if handle.get("epoch") != self.epoch:
            raise UserError(f"handle of dispatch epoch {handle.get('epoch')} is stale: the "
                            f"buffer's last dispatch is epoch {self.epoch}")
        w, params = handle["workload"], handle["params"]
        outs = []
        for d, rows in enumerate(handle["rows"]):
            o = _integers(f"expert_out[{d}]", expert_out[d], "32-bit words")
            if o.size and (o.min() < 0 or o.max() > 0xFFFFFFFF):
                raise UserError(f"expert_out[{d}] must hold 32-bit words (0 to 2**32 - 1), not "
                                f"{int(o.min()) if o.min() < 0 else int(o.max())}")
            if o.shape != (rows, w.hidden_blocks, w.words):
                raise UserError(f"expert_out[{d}] must be {rows} x {w.hidden_blocks} x "
                                f"{w.words} (what rank {d} received), not {o.shape}")
            outs.append(o.astype(np.uint64))
        from .kernels.combine import carry_to_combine
        if params["system"] == "cann":           # the combine SyncAll of every earlier epoch
            self._catch_up(2, (self.epoch - 1) * self.config.aivs_per_die)
        carry_to_combine(self.machine, w, params, outs, carried=self._state)
        self._read_back_too()
        report = self.machine.run(self.max_cycles)
        inputs = (w, params, {"cycles": None, "ns": None, "correct": True, "problems": [],
                              "phases": {}}, None, outs)
        verdict = self._combine.check(self.machine, report, inputs)
        if not verdict["correct"]:
            raise DispatchError("combine differs from numpy: " + "; ".join(verdict["problems"]))
        self._save()
        lay = self.layout
        y = [np.array(self.machine.read_mem(s, self.machine.address(0, lay.YOUT),
                                            w.batch * w.hidden_blocks * 128),
                      dtype=np.uint32).reshape(w.batch, w.hidden_blocks, 128)[:, :, :w.words]
             for s in range(self.ranks)]
        return y, report


def _integers(name, value, what):
    """``value`` as an array, or ``UserError`` when it is not of an integer dtype (named)."""
    a = np.asarray(value)
    if not np.issubdtype(a.dtype, np.integer):
        raise UserError(f"{name} must be an integer array ({what}), not {a.dtype}")
    return a


def _check_system(system):
    """``UserError`` for ``system="ubep-inc"``: the in-network system needs a machine with
    ``ep_window`` and carries its own state between dispatch and combine, which the Buffer does
    not do yet (``epfabric run dispatch|combine --system ubep-inc`` runs it)."""
    if system == "ubep-inc":
        raise UserError("Buffer runs system='cann' or 'ubep'; system='ubep-inc' (in-network "
                        "EP) runs with epfabric run dispatch|combine --system ubep-inc")
