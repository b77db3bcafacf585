"""The AIV ISA for program writers: a re-export of :mod:`epfabric.hw.isa`.

The instruction table lives in ``hw/`` because the core's decoder is hardware
generated from it; kernels and the assembler read the same table through
this module (the layering is ``sim`` → ``sw`` → ``hw``, one way).
"""

from epfabric.hw.isa import *            # noqa: F401,F403
from epfabric.hw.isa import __all__      # noqa: F401
