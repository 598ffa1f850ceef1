"""Client side Flower adapter of coded-fl.

>>> from clients import coded_secagg_mod, make_coded_secagg_mod, register_shuffle, silo_store
"""

from .data import (
    MissingDataError,
    partition_arrays,
    partition_dataset,
    partition_tensors,
    seed_own_data,
    silo_data_mod,
)
from .mod import coded_secagg_mod, make_coded_secagg_mod
from .shuffle import register_shuffle, shuffle_client_app, silo_store

__all__ = [
    "MissingDataError",
    "coded_secagg_mod",
    "make_coded_secagg_mod",
    "partition_arrays",
    "partition_dataset",
    "partition_tensors",
    "register_shuffle",
    "seed_own_data",
    "shuffle_client_app",
    "silo_data_mod",
    "silo_store",
]
