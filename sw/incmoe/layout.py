"""Where the INC-MoE layer keeps its data in a die's HBM (DataBlock indices).

The registered buffers come first, at the machine's
:attr:`~epfabric.sw.config.MachineConfig.nic_regions` (the network interface
reads and writes them directly, INC-MoE §3.1):

* ``XG`` — the padded gather buffer X̂: ``ranks`` blocks of ``tmax`` rows;
  rank q's token c at ``XG + q*tmax + c``;
* ``Z`` — the partials, same shape; after the layer rank r's own block holds
  its output (zero-copy, INC-MoE §3.5);
* ``RSIN`` — ``tmax`` rows where the reduced rows of this rank arrive.

Then the kernel's own data:

* ``X`` — this rank's input tokens (``tmax`` rows);
* ``META`` — word q = T_q (rows of rank q; vLLM's DP metadata), word
  ``ranks`` = the band size beta (chosen by the host runtime from the counts,
  INC-MoE §3.4);
* ``FLAGS`` — word 0 = bands released by the gather role (``agReady``),
  word 1 = gather AIVs' finished copies (when there are several), word 2 =
  bands whose ReduceScatter is posted (``RSPOST``);
* ``PROG`` — word f = bands finished by compute AIV f (its progress counter);
* ``WEIGHTS`` — block ``WEIGHTS + e_l`` holds ``a, b`` of local expert e_l.
"""

from ...hw.validate import UserError

__all__ = ["Layout"]


class Layout:
    """Block indices of one configuration (see the module docstring)."""

    def __init__(self, config, local_experts, compute_aivs):
        if not config.has_nic:
            raise UserError("the moe-layer kernel needs an INC machine (nic_mode 'inc' or 'ring')")
        if config.ranks + 1 > config.words_per_block:
            raise UserError(f"META holds {config.ranks} counts and beta in one block: "
                            f"{config.ranks} ranks need data_bytes >= {4 * (config.ranks + 1)}")
        if compute_aivs > config.words_per_block:
            raise UserError(f"PROG holds one word per compute AIV: {compute_aivs} need "
                            f"data_bytes >= {4 * compute_aivs}")
        reg = config.nic_regions
        self.ranks, self.tmax = config.ranks, config.nic_tmax
        self.XG, self.Z, self.RSIN = reg["xg"], reg["z"], reg["rsin"]
        self.X = reg["end"]
        self.META = self.X + self.tmax
        self.FLAGS = self.META + 1
        self.PROG = self.FLAGS + 1
        self.WEIGHTS = self.PROG + 1
        self.end = self.WEIGHTS + local_experts

    def output(self, mode, rank):
        """First block of rank ``rank``'s output rows: its Z block (INC) or RSIN (ring)."""
        return self.Z + rank * self.tmax if mode == "inc" else self.RSIN
