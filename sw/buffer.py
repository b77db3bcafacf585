"""A DeepEP-like API over the simulated machine: ``Buffer.dispatch`` and ``Buffer.combine``.

::

    import ml_dtypes
    from epfabric.sim.backends.machine import backend
    from epfabric.sw.buffer import Buffer

    buf = Buffer(backend("verilator"), preset="cm384", topology=("superpod", 2, 2, 1),
                 aivs=4, batch=16, topk=4, experts=16, system="ubep")
    x = tokens.astype(ml_dtypes.bfloat16)                 # ranks x BS x buf.hidden
    recv = buf.dispatch(x, topk_idx, topk_weights)        # float32 weights, ranks x BS x k
    # DeepEP's names: recv.recv_x, recv.recv_topk_idx, recv.recv_topk_weights,
    # recv.num_recv_tokens_per_expert_list, recv.handle (see Buffer.dispatch)
    expert_out = [my_expert(rows) for rows in recv.recv_x]      # anything, per rank
    y, report = buf.combine(expert_out, recv.handle)            # per rank BS x hidden, bf16

The whole machine is simulated, so every argument holds every rank's data: ``x`` and
``topk_idx``/``topk_weights`` are ranks × BS × ..., ``expert_out`` and the results lists of
one array per rank. ``topk_idx`` holds k distinct expert ids in ``[0, E)`` per token (the
kernels send every slot: DeepEP's ``-1`` "no expert" is refused).

**Floating-point payloads**, what a DeepEP user passes: ``x`` is ranks × BS × ``hidden``
elements, ``ml_dtypes.bfloat16``, ``float16`` or ``float32`` (or a PyTorch tensor of one of
them when PyTorch is installed: the results are tensors then). [choice] The rules:

* Layout: a token is ``hidden_blocks`` 512 B blocks of :data:`ELEMS_PER_BLOCK` (240) bf16
  elements, in words 8–127 (480 B). Words 0–7 are the 32 B Token-Flag-Fusion header on UBEP
  (the flag in words 0–3, words 4–7 zero) and zero on CANN, whose raw blocks could carry 256:
  the smaller payload, UBEP's, sizes ``hidden``, so one layout serves every call of a buffer
  whose calls switch systems. ``hidden`` (a constructor argument; default
  ``hidden_blocks · 240``) may be less than the blocks hold: the rest of the last block is 0.
* Element type: the machine moves and sums bf16. ``float16`` and ``float32`` ``x`` and
  ``expert_out`` are rounded to bf16 on the host (nearest, ties to even); ``recv_x`` is the
  delivered bf16 converted to ``x``'s dtype, ``y`` too (exact for float32; float16 rounds
  again, and a bf16 beyond float16's range, such as 65504 rounded to bf16's 65536, becomes
  inf). float64 and other dtypes are refused (convert them first: nothing is rounded
  silently).
* Weights: ``topk_weights`` is any real array (DeepEP's is float32), taken as float32 and
  rounded to bf16 (nearest, ties to even) for the machine's 16-bit ``WEIGHTS`` slots (the
  upper half of the fp32 bits, :mod:`~epfabric.sw.ubep.bf16`). ``recv_topk_weights`` is
  the float32 weights as given, DeepEP's; the combine uses the rounded ones.
* The combine, per token and element (:mod:`~epfabric.sw.ubep.bf16`): ``acc =
  fp32(o_0)·w_0``, ``acc += fp32(o_i)·w_i`` for ``i = 1 … k−1`` (each step rounded to fp32),
  ``y = bf16(acc)``. The buffer compares the machine's ``y`` bit for bit with that order in
  numpy; NaN and infinity in ``x``, ``topk_weights`` or ``expert_out`` are refused (the fp
  unit's NaN is canonical, numpy's is not: their bits would differ). Against a plain fp32
  MoE layer the difference is bounded (docs/api/buffer.md).
* Machine: the float calls run on the combine kernel's ``dtype="bf16"`` machine (its cores
  have the fp unit, :class:`~epfabric.sw.config.MachineConfig` ``fp``), built at the first
  float call; integer calls keep the integer machine. Every run is a fresh machine whose
  persistent words the host carries (below), so the two share the buffer's state.

**Integer payloads**, for bit-level tests: ``x`` is ranks × BS × blocks × 32-bit words, moved
as they are; ``topk_weights`` integers in [0, 65535]; ``expert_out[d]`` 32-bit words; ``y``
``uint32`` words, each two 16-bit lanes ``Σ_i w·o`` modulo 2¹⁶; ``recv_x`` ``uint32``
whatever integer dtype ``x`` has; ``recv_topk_weights`` ``int64``. With UBEP, words 0–3 of
every block are the Token-Flag-Fusion header in both directions: the payload is words 4 and
up, as on the real fabric.

**Systems**: ``"cann"``, ``"ubep"`` or ``"ubep-inc"`` (UBEP on switches that multicast and
reduce, :mod:`~epfabric.sw.ubep.ubep_inc`); each call may override the buffer's. A buffer
built with ``"ubep-inc"`` has those switches (``ep_window``) and runs all three systems; one
built with another system runs CANN and UBEP and refuses ``"ubep-inc"``, naming the fix. A
float call with ``"ubep-inc"`` hands ``dtype="bf16"`` to the combine kernel: the switches sum
bf16 partial sums in fp32 in arrival order, so ``y`` is judged by the kernel's error bound
(:func:`~epfabric.sw.ubep.bf16.inc_bound`), not bit for bit.

The buffer is one machine configuration (its layout and programs are sized for ``batch``,
``topk``, ``experts`` and ``hidden_blocks``): every call has exactly that shape, and every
call is a machine run checked against numpy (a wrong result raises :class:`DispatchError`).
Between runs the buffer keeps what a persistent HBM would: the ``CTRL`` words (cumulative
SyncAll counters), the status, count and offset words, ``EXPAND`` (and UBEP-INC's regions);
each dispatch runs at the next epoch, so stale flags of an earlier call can never be taken
for new ones. Calls may switch systems: CANN's SyncAll counters count only CANN's barriers,
so before a CANN run the host moves a counter that UBEP epochs left behind to where all-CANN
epochs would have left it (a counter never goes back).
"""

import copy

import ml_dtypes
import numpy as np

from ..hw.validate import UserError, check_int
from .config import parse_topology
from .dataflag import FLAG_BYTES, TFF_PAYLOAD_BYTES
from .machine import Machine
from .ubep import bf16
from .ubep.cann import syncalls_per_run
from .ubep.workload import Workload

__all__ = ["Buffer", "DispatchError", "Received", "ELEMS_PER_BLOCK", "FLOAT_DTYPES"]

#: bf16 elements a block carries in a float call: UBEP's 480 B payload (module docstring)
ELEMS_PER_BLOCK = TFF_PAYLOAD_BYTES // 2
#: the first word of a block's float payload: words before it are the 32 B header's
PAYLOAD_WORD = FLAG_BYTES // 4
#: the element types a float ``x`` (and ``expert_out``) may have, rounded to bf16 on the host
FLOAT_DTYPES = (np.dtype(ml_dtypes.bfloat16), np.dtype(np.float16), np.dtype(np.float32))
#: the largest weight magnitude a float call takes: the combine kernel's weight convention
#: holds a weight ``w`` as ``8·w`` in fp32, finite below this
MAX_WEIGHT = 2.0 ** 124


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
        ``hidden_blocks`` defaults to 1, or to what ``hidden`` needs): the layout and the
        kernels' programs are sized for it, so a call with another shape is refused, naming
        it. ``topk`` and ``experts`` are required unless ``model`` is given.
    hidden : int
        Elements per token of a float ``x`` (default: ``hidden_blocks`` ×
        :data:`ELEMS_PER_BLOCK`, all the blocks hold); at most what ``hidden_blocks`` hold.
    model : str
        A model of UBEP Table 3 (:data:`~epfabric.sw.ubep.workload.MODELS`: ``deepseek-v3``,
        ``qwen3-30b``, ``glm-4.7``): sets ``topk``, ``experts`` and ``hidden_blocks`` (its
        hidden size in ``system``'s blocks,
        :func:`~epfabric.sw.kernels.dispatch.model_shape`); a differing explicit one is
        refused. The buffer's shape is then fixed: a call with the other system moves the
        same blocks.
    system : str
        ``"cann"``, ``"ubep"`` or ``"ubep-inc"`` (each call may override it; ``"ubep-inc"``
        builds the switches that multicast and reduce, and only such a buffer runs it).
    max_cycles : int
        Watchdog limit per run.

    Attributes
    ----------
    hidden : int
        Elements per token of a float ``x``, ``expert_out`` row and ``y``.
    """

    def __init__(self, backend, *, preset="cm384", topology=None, aivs=4, batch, topk=None,
                 experts=None, hidden_blocks=None, hidden=None, model=None, system="ubep",
                 max_cycles=2_000_000):
        from .kernels import KERNELS
        from .kernels.dispatch import layout_of
        if isinstance(topology, str):
            topology = parse_topology(topology)
        self._dispatch, self._combine = KERNELS["dispatch"], KERNELS["combine"]
        if hidden is not None:
            check_int("hidden", hidden, 1)
            if hidden_blocks is None and model is None:
                hidden_blocks = -(-hidden // ELEMS_PER_BLOCK)
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
        most = self.params["hidden_blocks"] * ELEMS_PER_BLOCK
        if hidden is not None and hidden > most:
            raise UserError(f"hidden={hidden} needs {-(-hidden // ELEMS_PER_BLOCK)} blocks of "
                            f"{ELEMS_PER_BLOCK} bf16 elements; hidden_blocks="
                            f"{self.params['hidden_blocks']} hold {most}")
        self.hidden = most if hidden is None else hidden
        self._shape = (preset, topology, aivs)
        self.config = self._dispatch.configs(preset, topology, aivs, self.params)[0]
        self.machine = Machine(backend=backend, config=self.config)
        self._fp_machine = None
        self.max_cycles = max_cycles
        self.epoch = 0
        self._state = {}
        self.layout = layout_of(self.config, self.params)

    @property
    def ranks(self):
        return self.config.ranks

    def _machine_for(self, params, fp):
        """The machine a call of ``params`` runs on (integer or fp: module docstring), after the
        kernels' checks of ``params`` (the combine's with ``dtype="bf16"`` for a float call)."""
        from .kernels.dispatch import INC_SYSTEMS
        self._dispatch.resolve_params(params)
        if params["system"] in INC_SYSTEMS and self.params["system"] not in INC_SYSTEMS:
            raise UserError(f"system={params['system']!r} needs switches that multicast and "
                            f"reduce: this Buffer was built with system="
                            f"{self.params['system']!r}; build it with system="
                            f"{params['system']!r} (its machine runs every system)")
        if not fp:
            return self.machine
        self._combine.resolve_params({**params, "dtype": "bf16"})
        if self._fp_machine is None:
            config = self._combine.configs(*self._shape, {**self.params, "dtype": "bf16"})[0]
            self._fp_machine = Machine(backend=self.machine.backend, config=config)
        return self._fp_machine

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

    def _restore(self, machine):
        machine.clear()
        for (r, block), words in sorted(self._state.items()):
            machine.write_mem(r, machine.address(0, block), words)

    def _save(self, machine):
        wpb = self.config.words_per_block
        for lo, n in self._persistent():
            for block in range(lo, lo + n):
                for r in range(self.ranks):
                    self._state[(r, block)] = machine.read_mem(r, machine.address(0, block), wpb)

    def _read_back_too(self, machine):
        machine.read_back(list(machine._read_ranges) + self._persistent())

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

    def _check_shape(self, x, idx, last):
        """``UserError`` unless ``x`` (and ``idx``) have the buffer's ranks, batch and topk and
        ``last`` = ``[(name, want, got)]`` of the trailing dimensions."""
        p = self.params
        k = idx.shape[2] if idx.ndim == 3 else None
        for name, want, got in [("ranks", self.ranks, x.shape[0]),
                                ("batch", p["batch"], x.shape[1]), ("topk", p["topk"], k)] + last:
            if got is not None and got != want:
                raise UserError(f"{name} must equal the Buffer's {name} ({want}), not {got} "
                                f"(x is {x.shape}, topk_idx {idx.shape})")

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
        idx = self._check_idx(_host(topk_idx)[0])
        epr = num_experts // self.ranks
        in_rank = np.zeros((self.ranks, idx.shape[1], self.ranks), dtype=bool)
        per_expert = np.zeros((self.ranks, num_experts), dtype=np.int64)
        for s in range(self.ranks):
            for t, experts in enumerate(idx[s].tolist()):
                for e in experts:
                    in_rank[s, t, e // epr] = True
                    per_expert[s, e] += 1
        return in_rank.sum(axis=1), per_expert, in_rank

    def _integer_inputs(self, x, topk_idx, topk_weights):
        """The workload of an integer call (32-bit words; module docstring), checked."""
        wts = _integers("topk_weights", topk_weights, "the hardware sums 16-bit integer lanes "
                        "when x is integer words")
        idx = _integers("topk_idx", topk_idx, "expert ids")
        if x.ndim != 4:
            raise UserError(f"x must be ranks x tokens x blocks x words, not shape {x.shape}")
        self._check_shape(x, idx, [("hidden_blocks", self.params["hidden_blocks"], x.shape[2]),
                                   ("words", self.config.words_per_block, x.shape[3])])
        idx = self._check_idx(idx)
        return Workload.from_arrays(x, idx, wts, self.params["experts"])

    def _float_inputs(self, x, topk_idx, topk_weights):
        """``(workload, float32 weights, the combine's workload)`` of a float call (module
        docstring): the workload holds ``x`` rounded to bf16 as words and the weights' bf16
        bits, the combine's the kernel's form of the rounded weights."""
        _float_dtype("x", x)
        idx = _integers("topk_idx", topk_idx, "expert ids")
        if x.ndim != 3:
            raise UserError(f"x ({x.dtype}) must be ranks x tokens x hidden, not shape "
                            f"{x.shape}")
        self._check_shape(x, idx, [("hidden", self.hidden, x.shape[2])])
        idx = self._check_idx(idx)
        weights, rounded = _float_weights(topk_weights, idx.shape)
        words = self._words(_bf16("x", x))
        bits = bf16.weight_bits(rounded * np.float32(8))
        w = Workload.from_arrays(words, idx, bits, self.params["experts"])
        return w, weights, self._kernel_workload(w, rounded)

    def _words(self, values):
        """``values`` (bf16, … × hidden) as ``uint64`` … × blocks × words (module docstring)."""
        lead, blocks = values.shape[:-1], self.params["hidden_blocks"]
        halves = np.zeros(lead + (blocks * ELEMS_PER_BLOCK,), dtype=np.uint16)
        halves[..., :values.shape[-1]] = values.view(np.uint16)
        halves = halves.reshape(lead + (blocks, ELEMS_PER_BLOCK // 2, 2)).astype(np.uint64)
        words = np.zeros(lead + (blocks, self.config.words_per_block), dtype=np.uint64)
        words[..., PAYLOAD_WORD:PAYLOAD_WORD + ELEMS_PER_BLOCK // 2] = (halves[..., 0]
                                                                       | halves[..., 1] << 16)
        return words

    def _values(self, words, dtype):
        """… × blocks × words of bf16 payload (:meth:`_words`) as … × hidden of ``dtype``."""
        w = np.asarray(words, dtype=np.uint64)[..., PAYLOAD_WORD:
                                               PAYLOAD_WORD + ELEMS_PER_BLOCK // 2]
        halves = np.stack([w & 0xFFFF, w >> 16], axis=-1).astype(np.uint16)
        flat = halves.reshape(w.shape[:-2] + (w.shape[-2] * ELEMS_PER_BLOCK,))
        values = flat[..., :self.hidden].view(ml_dtypes.bfloat16)
        with np.errstate(over="ignore"):
            return values.astype(dtype)

    def dispatch(self, x, topk_idx, topk_weights, *, system=None):
        """Run a dispatch; return ``(recv_x, num_recv_tokens_per_expert_list, handle, report)``.

        The return is a :class:`Received`: that 4-tuple, plus DeepEP's receive by name
        (``.recv_x``, ``.recv_topk_idx``, ``.recv_topk_weights``,
        ``.num_recv_tokens_per_expert_list``, ``.handle``, ``.report``). Per rank ``d``:

        * ``recv_x[d]``: the received rows in CANN's order (local expert, source rank,
          slot): rows × ``hidden`` in ``x``'s dtype for a float ``x``, rows × blocks × words
          ``uint32`` for integer words;
        * ``num_recv_tokens_per_expert_list[d]``: rows per local expert (a list), read from
          the machine's ``COUNTS`` words (the sum over source ranks);
        * ``recv_topk_idx[d]``: rows × k ``int64``; row ``p`` holds, in column ``i`` (the
          slot of its source token that it is), its local expert ``e - d·epr``, and ``-1``
          in every other column;
        * ``recv_topk_weights[d]``: rows × k, the slot's weight in column ``i``, 0 elsewhere
          (``float32`` for a float ``x``: the weights as given; ``int64`` for integer words);
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
            On shapes, values or dtypes the buffer cannot take (named), before any run.
        DispatchError
            When the machine's result differs from numpy.
        """
        x, tensor = _host(x)
        topk_idx, topk_weights = _host(topk_idx)[0], _host(topk_weights)[0]
        x = np.asarray(x)
        fp = not np.issubdtype(x.dtype, np.integer)
        if fp:
            w, weights, w_combine = self._float_inputs(x, topk_idx, topk_weights)
        else:
            w = w_combine = self._integer_inputs(x, topk_idx, topk_weights)
            weights = None
        params = {**self.params, "system": system or self.params["system"]}
        machine = self._machine_for(params, fp)
        self.epoch += 1
        if params["system"] == "cann":           # the last SyncAll of every epoch before this one
            self._catch_up(0, syncalls_per_run(self.layout.epr) * (self.epoch - 1)
                           * self.config.aivs_per_die)
        self._restore(machine)
        inputs = self._dispatch.load(machine, params, workload=w, epoch=self.epoch)
        self._read_back_too(machine)
        report = machine.run(self.max_cycles)
        verdict = self._dispatch.check(machine, report, inputs)
        if not verdict["correct"]:
            raise DispatchError("dispatch differs from numpy: " + "; ".join(verdict["problems"]))
        self._save(machine)
        from .kernels.combine import read_out
        recv = [read_out(machine, self.layout, d, n)
                for d, n in enumerate(verdict["tokens_received"])]
        recv = [self._values(r, x.dtype) if fp else r.astype(np.uint32) for r in recv]
        src, idx_of, w_of, per_expert = self._received(machine, w, weights)
        handle = {"system": params["system"], "epoch": self.epoch, "workload": w,
                  "params": params, "rows": verdict["tokens_received"], "dispatch": verdict,
                  "recv_src_idx": src, "machine": machine, "dtype": x.dtype if fp else None,
                  "tensor": tensor, "combine_workload": w_combine}
        if tensor is not None:
            recv, idx_of, w_of = ([_tensor(a, t) for a in arrays] for arrays, t in
                                  ((recv, tensor), (idx_of, None), (w_of, None)))
        return Received(recv, idx_of, w_of, per_expert, handle, report)

    @staticmethod
    def _kernel_workload(w, rounded):
        """``w`` with the combine kernel's weights for the bf16 weights ``rounded`` (float32).

        The combine kernel takes an integer weight ``n`` as ``bf16(n / 8)``
        (:func:`~epfabric.sw.ubep.bf16.weights_f32`, for its ``WEIGHTS`` slots and its
        checker's reference alike). ``8·w`` is exact in fp32 for ``|w|`` below
        :data:`MAX_WEIGHT`, so ``8·rounded`` makes both hold the caller's rounded weights.
        """
        scaled = rounded * np.float32(8)
        if not np.array_equal(bf16.weights_f32(scaled), rounded):
            raise RuntimeError("the combine kernel's weight convention is no longer "
                               "bf16(n / 8): Buffer._kernel_workload needs updating")
        w = copy.copy(w)
        object.__setattr__(w, "topk_w", scaled)      # a frozen dataclass: a copy with new weights
        return w

    def _received(self, machine, w, weights=None):
        """``(recv_src_idx, recv_topk_idx, recv_topk_weights, per-expert counts)`` per rank,
        from the machine's ``COUNTS`` words and the routing ``w`` (:meth:`dispatch`);
        ``weights`` (float32) in place of ``w``'s integer ones for a float call."""
        lay, R, k = self.layout, self.ranks, w.topk
        wts = w.topk_w if weights is None else weights
        srcs, idxs, out_w, per_expert = [], [], [], []
        for d in range(R):
            src, slot_of, counts = [], [], []
            for e_l in range(w.epr):
                e = d * w.epr + e_l
                n_e = 0
                for s in range(R):
                    block, word = lay.word_at(lay.COUNTS, e_l * R + s)
                    n = machine.read_mem(d, machine.address(0, block, word))[0]
                    hits = np.argwhere(w.topk_idx[s] == e)[:n]        # (t, i), token order
                    src += [(s, int(t)) for t, _ in hits]
                    slot_of += [(s, int(t), int(i), e_l) for t, i in hits]
                    n_e += n
                counts.append(n_e)
            rows = len(src)
            ti = np.full((rows, k), -1, dtype=np.int64)
            tw = np.zeros((rows, k), dtype=np.int64 if weights is None else np.float32)
            for p, (s, t, i, e_l) in enumerate(slot_of):
                ti[p, i], tw[p, i] = e_l, wts[s][t, i]
            srcs.append(np.array(src, dtype=np.int64).reshape(rows, 2))
            idxs.append(ti)
            out_w.append(tw)
            per_expert.append(counts)
        return srcs, idxs, out_w, per_expert

    def combine(self, expert_out, handle):
        """Send ``expert_out[d]`` (rows as ``recv_x[d]``) back, weighted, summed: ``(y, report)``.

        ``y[s]`` is rank ``s``'s ``Σ_i w[t,i] · expert_out(t, i)`` per token: BS × ``hidden``
        in ``x``'s dtype for a float call (the bf16 sum of the module docstring; each
        ``expert_out[d]`` rows × ``hidden``, bfloat16, float16 or float32, rounded to bf16);
        BS × blocks × words ``uint32`` for integer words (16-bit lanes, modulo 2¹⁶ each;
        UBEP: words 4 and up, words 0–3 are its header; ``expert_out[d]`` integer 32-bit
        words).
        """
        if handle.get("epoch") != self.epoch:
            raise UserError(f"handle of dispatch epoch {handle.get('epoch')} is stale: the "
                            f"buffer's last dispatch is epoch {self.epoch}")
        w, params, machine = handle["combine_workload"], handle["params"], handle["machine"]
        fp = handle["dtype"] is not None
        if fp:
            params = {**params, "dtype": "bf16"}
        outs = [self._expert_rows(d, _host(expert_out[d])[0], rows, fp)
                for d, rows in enumerate(handle["rows"])]
        from .kernels.combine import carry_to_combine
        if params["system"] == "cann":           # the combine SyncAll of every earlier epoch
            self._catch_up(2, (self.epoch - 1) * self.config.aivs_per_die)
        carry_to_combine(machine, w, params, outs, carried=self._state)
        self._read_back_too(machine)
        report = machine.run(self.max_cycles)
        inputs = (w, params, {"cycles": None, "ns": None, "correct": True, "problems": [],
                              "phases": {}}, None, outs)
        verdict = self._combine.check(machine, report, inputs)
        if not verdict["correct"]:
            raise DispatchError("combine differs from numpy: " + "; ".join(verdict["problems"]))
        self._save(machine)
        lay = self.layout
        y = [np.array(machine.read_mem(s, machine.address(0, lay.YOUT),
                                       w.batch * w.hidden_blocks * 128),
                      dtype=np.uint32).reshape(w.batch, w.hidden_blocks, 128)[:, :, :w.words]
             for s in range(self.ranks)]
        if fp:
            y = [self._values(ys, handle["dtype"]) for ys in y]
        if handle["tensor"] is not None:
            y = [_tensor(ys, handle["tensor"]) for ys in y]
        return y, report

    def _expert_rows(self, d, o, rows, fp):
        """``expert_out[d]`` as rows × blocks × words ``uint64``, or ``UserError`` naming it."""
        name = f"expert_out[{d}]"
        o = np.asarray(o)
        if fp:
            _float_dtype(name, o)
            if o.shape != (rows, self.hidden):
                raise UserError(f"{name} must be {rows} x {self.hidden} (what rank {d} received, "
                                f"x hidden), not {o.shape}")
            return self._words(_bf16(name, o))
        o = _integers(name, o, "32-bit words")
        if o.size and (o.min() < 0 or o.max() > 0xFFFFFFFF):
            raise UserError(f"{name} must hold 32-bit words (0 to 2**32 - 1), not "
                            f"{int(o.min()) if o.min() < 0 else int(o.max())}")
        want = (rows, self.params["hidden_blocks"], self.config.words_per_block)
        if o.shape != want:
            raise UserError(f"{name} must be {' x '.join(map(str, want))} (what rank {d} "
                            f"received), not {o.shape}")
        return o.astype(np.uint64)


def _integers(name, value, what):
    """``value`` as an array, or ``UserError`` when it is not of an integer dtype (named)."""
    a = np.asarray(value)
    if not np.issubdtype(a.dtype, np.integer):
        raise UserError(f"{name} must be an integer array ({what}), not {a.dtype}")
    return a


def _float_dtype(name, a):
    """``UserError`` unless ``a`` has one of :data:`FLOAT_DTYPES` (named; module docstring)."""
    if a.dtype in FLOAT_DTYPES:
        return
    why = ("; convert it first (the machine carries bf16: nothing is rounded from float64 "
           "silently)" if a.dtype == np.float64 else
           ", or integer 32-bit words for a bit-level call")
    raise UserError(f"{name} must be bfloat16, float16 or float32, not {a.dtype}{why}")


def _where(at):
    return ", ".join(map(str, at))


def _bf16(name, a):
    """``a`` rounded to bf16 (nearest, ties to even); ``UserError`` naming its first element
    that is NaN or infinite, or becomes infinite in bf16."""
    b = a.astype(ml_dtypes.bfloat16)
    bad = np.argwhere(~np.isfinite(b.astype(np.float32)))
    if len(bad):
        at = tuple(map(int, bad[0]))
        was = "" if not np.isfinite(np.float32(a[at])) else " (bf16 rounds it to inf)"
        raise UserError(f"{name}[{_where(at)}] is {a[at]!s}{was}: the combine is checked bit "
                        f"for bit and NaN bits differ between numpy and the fp unit; give "
                        f"finite values within bf16's range")
    return b


def _float_weights(value, shape):
    """``(float32 weights, their bf16 rounding as float32)`` of a float call's
    ``topk_weights`` (module docstring); ``UserError`` naming what is wrong."""
    a = np.asarray(value)
    if not (np.issubdtype(a.dtype, np.integer) or np.issubdtype(a.dtype, np.floating)
            or a.dtype == FLOAT_DTYPES[0]) or a.dtype == np.bool_:
        raise UserError(f"topk_weights must be real numbers (float32, as DeepEP's), not "
                        f"{a.dtype}")
    if a.shape != shape:
        raise UserError(f"topk_weights must have topk_idx's shape {shape}, not {a.shape}")
    with np.errstate(over="ignore"):
        weights = a.astype(np.float32)
    rounded = weights.astype(ml_dtypes.bfloat16).astype(np.float32)
    bad = np.argwhere(~np.isfinite(rounded) | (np.abs(rounded) >= MAX_WEIGHT))
    if len(bad):
        s, t, i = map(int, bad[0])
        raise UserError(f"topk_weights[{s}, {t}, {i}] (rank {s}, token {t}, slot {i}) is "
                        f"{a[s, t, i]!s}: weights must be finite, below 2**124 in magnitude")
    return weights, rounded


def _host(value):
    """``(numpy array or value, the tensor's dtype)`` of a PyTorch tensor, ``(value, None)`` of
    anything else; PyTorch is imported only when it gave the value."""
    if type(value).__module__.partition(".")[0] != "torch":
        return value, None
    import torch
    t = value.detach().cpu()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(ml_dtypes.bfloat16), t.dtype
    return t.numpy(), t.dtype


def _tensor(array, dtype):
    """``array`` as a PyTorch tensor of ``dtype`` (``None``: the array's own)."""
    import torch
    a = np.ascontiguousarray(array)
    if a.dtype == FLOAT_DTYPES[0]:
        return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16).to(dtype)
    return torch.from_numpy(a) if dtype is None else torch.from_numpy(a).to(dtype)
