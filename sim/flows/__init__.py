"""Verilog out of the house: the components registry, export, lint, FPGA synthesis and formal proofs.

* :mod:`.registry` — components a module of :mod:`epfabric.hw` registers
  with ``VERILOG_EXPORTS``;
* :mod:`.export` — ``epfabric verilog``; :mod:`.lint` — ``make lint``
  (Verilator ``-Wall``, waivers in ``lint.vlt``);
* :mod:`.synth` — ``epfabric synth`` (YoWASP Yosys and nextpnr);
* :mod:`.formal` — ``epfabric prove`` (SymbiYosys over :mod:`epfabric.sim.tb.formal`).

Simulation Verilog (what the simulators run) is :mod:`epfabric.sim.backends.verilog`.
"""
