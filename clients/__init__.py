"""Client side Flower adapter of coded-fl.

>>> from clients import coded_secagg_mod
"""

from clients.mod import coded_secagg_mod

__all__ = ["coded_secagg_mod"]
