"""``python -m simulations.report``: see :mod:`simulations.report.document`."""

import sys

from simulations.report.document import main

sys.exit(main())
