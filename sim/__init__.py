"""Simulation: everything that runs, checks, exports or measures the hardware of :mod:`epfabric.hw`.

Rooms, lowest first; each imports only rooms before it in this list, and
``epfabric.sw``/``epfabric.hw`` (``tests/test_layering.py`` checks it):

* :mod:`.output` — where builds and waveforms go, progress lines, safe writes;
* :mod:`.extras` — the optional dependency groups, and the one-line error
  naming the extra a missing tool comes with;
* :mod:`.tb` — testbench hardware (race tops, soak fabric, traffic sources,
  formal property harnesses) and bus-functional models (test intents);
* :mod:`.backends` — the testbench API and the simulators (pysim, Icarus and
  Verilator under cocotb, the native Verilator backend), simulation Verilog,
  waveforms, and the machine backends :class:`~epfabric.sw.machine.Machine`
  runs on;
* :mod:`.flows` — Verilog out of the house: export, lint, FPGA synthesis,
  formal proofs;
* :mod:`.verify` — verification campaigns: curated mutations, soaks;
* :mod:`.lab` — experiments, their grids, the result cache and files, plots,
  and ``epfabric reproduce``;
* :mod:`.cli` — the ``epfabric`` command, thin modules over the above.
"""

from importlib import metadata as _metadata

try:
    __version__ = _metadata.version("epfabric")
except _metadata.PackageNotFoundError:      # a source tree that was never installed
    __version__ = "0+unknown"
