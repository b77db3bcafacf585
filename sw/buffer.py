"""A DeepEP-like API over the simulated machine: ``Buffer.dispatch`` and ``Buffer.combine``.

::

    from epfabric.sim.backends.machine import backend
    from epfabric.sw.buffer import Buffer

    buf = Buffer(backend("verilator"), preset="cm384", topology=("superpod", 2, 2, 1),
                 aivs=4, batch=16, topk=4, experts=16, system="ubep")
    recv_x, per_expert, handle, report = buf.dispatch(x, topk_idx, topk_weights)
    expert_out = [my_expert(rows) for rows in recv_x]          # anything, per rank
    y, report = buf.combine(expert_out, handle)

``x`` is ranks × BS × blocks × 32-bit words (every rank's tokens: the whole
machine is simulated), ``topk_idx``/``topk_weights`` ranks × BS × k. The
buffer is one machine configuration (its layout is sized for ``batch``,
``topk``, ``experts`` and ``hidden_blocks``); every call is a machine run
checked against numpy (a wrong result raises). Between runs the buffer
keeps what a persistent HBM would: the ``CTRL`` words (cumulative SyncAll
counters), the status, count and offset words and ``EXPAND``; each
dispatch runs at the next epoch, so stale flags of an earlier call can
never be taken for new ones. With ``system="ubep"``, words 0–3 of every
block are the Token-Flag Fusion header in both directions: the payload is
words 4 and up (480 of 512 B), as on the real fabric.
"""

import numpy as np

from ..hw.validate import UserError
from .isa import address
from .machine import Machine
from .ubep.workload import Workload

__all__ = ["Buffer", "DispatchError"]


class DispatchError(RuntimeError):
    """A dispatch or combine whose result differs from numpy (the message lists the problems)."""


class Buffer:
    """Dispatch/combine buffer bound to one machine configuration (module docstring).

    Parameters
    ----------
    backend : Backend
        ``epfabric.sim.backends.machine.backend(name)``.
    preset, topology, aivs
        The machine (default: cm384, the dispatch kernel's default shape, 4 AIVs per die).
    batch, topk, experts, hidden_blocks
        The largest call the buffer serves (BS tokens per rank, k, E, 512 B blocks per token;
        ``hidden_blocks`` defaults to 1). ``topk`` and ``experts`` are required unless
        ``model`` is given.
    model : str
        A model of UBEP Table 3 (:data:`~epfabric.sw.ubep.workload.MODELS`: ``deepseek-v3``,
        ``qwen3-30b``, ``glm-4.7``): sets ``topk``, ``experts`` and ``hidden_blocks`` (its
        hidden size in ``system``'s blocks,
        :func:`~epfabric.sw.kernels.dispatch.model_shape`); a differing explicit one is
        refused. The buffer's shape is then fixed: a call with the other system moves the
        same blocks.
    system : str
        ``"cann"`` or ``"ubep"`` (each call may override it).
    max_cycles : int
        Watchdog limit per run.
    """

    def __init__(self, backend, *, preset="cm384", topology=None, aivs=4, batch, topk=None,
                 experts=None, hidden_blocks=None, model=None, system="ubep",
                 max_cycles=2_000_000):
        from .kernels import KERNELS
        self._dispatch, self._combine = KERNELS["dispatch"], KERNELS["combine"]
        shape = {"topk": topk, "experts": experts, "hidden_blocks": hidden_blocks}
        if model is None:
            missing = [name for name in ("topk", "experts") if shape[name] is None]
            if missing:
                raise UserError(f"Buffer needs {' and '.join(missing)} (or a model)")
        given = {name: v for name, v in shape.items() if v is not None}
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

    def _restore(self):
        self.machine.clear()
        for (r, block), words in sorted(self._state.items()):
            self.machine.write_mem(r, address(0, block), words)

    def _save(self):
        wpb = self.config.words_per_block
        for lo, n in self._persistent():
            for block in range(lo, lo + n):
                for r in range(self.ranks):
                    self._state[(r, block)] = self.machine.read_mem(r, address(0, block), wpb)

    def _read_back_too(self):
        ranges = list(self.machine._read_ranges) + self._persistent()
        self.machine.read_back(ranges)

    def get_dispatch_layout(self, topk_idx, num_experts):
        """DeepEP's layout: ``(num_tokens_per_rank, num_tokens_per_expert, is_token_in_rank)``.

        Per source rank ``s``: tokens going to each destination rank (a token
        counts once per rank however many of its experts live there), slots
        per expert, and the BS × R token-to-rank mask. Host-side numpy, for
        sizing and inspection; the kernels compute what they need themselves.
        """
        idx = np.asarray(topk_idx)
        if idx.ndim != 3 or idx.shape[0] != self.ranks:
            raise UserError(f"topk_idx must be ranks ({self.ranks}) x tokens x k, "
                            f"not shape {idx.shape}")
        if num_experts % self.ranks:
            raise UserError(f"num_experts ({num_experts}) must be a multiple of the ranks "
                            f"({self.ranks})")
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
        """Run a dispatch; return ``(recv_x, num_recv_tokens_per_expert, handle, report)``.

        ``recv_x[d]`` is rank ``d``'s received tokens in CANN's order (local
        expert, source rank, slot), ``num_recv_tokens_per_expert[d]`` its
        tokens per local expert, ``handle`` what :meth:`combine` needs.

        Raises
        ------
        ValueError
            On shapes or values the buffer cannot take (named).
        DispatchError
            When the machine's result differs from numpy.
        """
        p = self.params
        w = Workload.from_arrays(x, topk_idx, topk_weights, p["experts"])
        want = (self.ranks, p["batch"], p["topk"], p["hidden_blocks"], self.config.words_per_block)
        if (w.ranks, w.batch, w.topk, w.hidden_blocks, w.words) != want:
            raise UserError(f"this buffer takes ranks x BS x k x blocks x words = {want}, not "
                            f"{(w.ranks, w.batch, w.topk, w.hidden_blocks, w.words)}")
        params = {**p, "system": system or p["system"]}
        self._dispatch.resolve_params(params)
        self.epoch += 1
        self._restore()
        inputs = self._dispatch.load(self.machine, params, workload=w, epoch=self.epoch)
        self._read_back_too()
        report = self.machine.run(self.max_cycles)
        verdict = self._dispatch.check(self.machine, report, inputs)
        if not verdict["correct"]:
            raise DispatchError("dispatch differs from numpy: " + "; ".join(verdict["problems"]))
        self._save()
        from .kernels.combine import read_out
        recv = [read_out(self.machine, self.layout, d, n)
                for d, n in enumerate(verdict["tokens_received"])]
        per_expert = [list(c) for c in verdict["recv_count"]]
        handle = {"system": params["system"], "epoch": self.epoch, "workload": w,
                  "params": params, "rows": verdict["tokens_received"], "dispatch": verdict}
        return recv, per_expert, handle, report

    def combine(self, expert_out, handle):
        """Send ``expert_out[d]`` (rows as ``recv_x[d]``) back, weighted, summed: ``(y, report)``.

        ``y[s]`` is BS × blocks × words: ``Σ_i w[t,i] · expert_out(t, i)`` in
        16-bit lanes (UBEP: words 4 and up; words 0–3 are its header).
        """
        if handle.get("epoch") != self.epoch:
            raise UserError(f"handle of dispatch epoch {handle.get('epoch')} is stale: the "
                            f"buffer's last dispatch is epoch {self.epoch}")
        w, params = handle["workload"], handle["params"]
        outs = []
        for d, rows in enumerate(handle["rows"]):
            o = np.asarray(expert_out[d])
            if o.shape != (rows, w.hidden_blocks, w.words):
                raise UserError(f"expert_out[{d}] must be {rows} x {w.hidden_blocks} x "
                                f"{w.words} (what rank {d} received), not {o.shape}")
            outs.append(o.astype(np.uint64))
        from .kernels.combine import carry_to_combine
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
        y = [np.array(self.machine.read_mem(s, address(0, lay.YOUT),
                                            w.batch * w.hidden_blocks * 128),
                      dtype=np.uint64).reshape(w.batch, w.hidden_blocks, 128)[:, :, :w.words]
             for s in range(self.ranks)]
        return y, report
