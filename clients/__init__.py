"""Client side Flower adapter of coded-fl.

>>> from clients import coded_secagg_mod, make_coded_secagg_mod, register_shuffle, silo_store
"""

from .mod import coded_secagg_mod, make_coded_secagg_mod
from .shuffle import register_shuffle, shuffle_client_app, silo_store

__all__ = [
    "coded_secagg_mod",
    "make_coded_secagg_mod",
    "register_shuffle",
    "shuffle_client_app",
    "silo_store",
]
