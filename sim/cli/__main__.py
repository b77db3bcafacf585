"""``python -m epfabric.sim.cli`` = ``epfabric``."""

import sys

from . import main

sys.exit(main())
