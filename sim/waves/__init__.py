"""Waveforms a person can read: dumps, GTKWave save files that open on the moment that matters.

* :mod:`.dump` — :class:`Waveform` (a dump requested of simulator runs),
  :func:`read_dump` (the variables of a VCD or FST file, a VCD's value
  changes), :func:`sanitize_vcd`;
* :mod:`.gtkw` — :func:`write_gtkw` (a save file from design paths resolved
  against the dump), :func:`fit_gtkw`, :func:`read_gtkw`;
* :mod:`.views` — the save file of a machine run (``epfabric run --vcd``):
  :func:`machine_view`, :func:`generic_view`, :func:`write_run_views`.

The backends (:mod:`epfabric.sim.backends`) write the dumps this package reads;
it imports no backend.
"""

from .dump import CLOCK_PERIOD_NS, Dump, Var, Waveform, read_dump, sanitize_vcd, vcd_edges
from .gtkw import (GTKW_SIZE, Comment, Group, Marker, SaveFile, Trace, fit_gtkw, read_gtkw,
                   write_gtkw, zoom_for)
from .views import (generic_view, machine_view, parse_scopes, run_window, scopes_for,
                    write_run_views)

__all__ = ["CLOCK_PERIOD_NS", "Var", "Dump", "read_dump", "sanitize_vcd", "Waveform", "vcd_edges",
           "Trace", "Comment", "Group", "Marker", "write_gtkw", "fit_gtkw", "read_gtkw",
           "SaveFile", "zoom_for", "GTKW_SIZE", "parse_scopes", "scopes_for", "run_window",
           "machine_view", "generic_view", "write_run_views"]
