"""Testbench hardware and bus-functional models: what tests and experiments put around the design.

Nothing here is part of the machine :mod:`epfabric.hw` describes:

* :mod:`.race` — the synchronization-race tops (``epfabric races``);
* :mod:`.traffic` — LFSR traffic sources and sinks for loaded-fabric runs;
* :mod:`.soak` — the soak fabric: a superpod with traffic and a hardware scoreboard;
* :mod:`.formal` — formal property harnesses around blocks (``epfabric prove``);
* :mod:`.core_memory`, :mod:`.vector_commands` — test intents that stand in
  for the rest of a system around one AIV core or one vector unit.
"""
