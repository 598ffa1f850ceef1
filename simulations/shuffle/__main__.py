"""``python -m simulations.shuffle``: see :mod:`simulations.shuffle.cli`."""

import sys

from simulations.shuffle.cli import main

sys.exit(main())
