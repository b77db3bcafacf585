"""Simulation: backends, bus-functional models, experiments, Verilog flows and the CLI.

Layers (each imports only those above it, and ``epfabric.sw``/``epfabric.hw``):

* :mod:`.output` — where builds and waveforms go, progress lines, safe writes;
* :mod:`.verilog` — simulation Verilog, export for FPGA flows, lint;
* :mod:`.backends` — the testbench API and the simulators (pysim, Icarus,
  Verilator), and the machine backends :class:`~epfabric.sw.machine.Machine` runs on;
* :mod:`.models` — bus-functional models that stand in for the rest of a
  system around one block in its tests;
* :mod:`.experiments` — one module per question, registered in ``EXPERIMENTS``;
* :mod:`.cli` — the ``epfabric`` command, thin modules over the above.
"""

__version__ = "0.1.0"
