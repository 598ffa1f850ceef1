"""coded-fl for Flower under one collision-free name: the public API of both adapters.

>>> from coded_fl_flower import CodedSecAgg, coded_secagg_mod

The installed wheel holds the adapters as subpackages of this one,
``coded_fl_flower/strategies/`` (server: :class:`CodedSecAgg`, :class:`ShuffleRelay`) and
``coded_fl_flower/clients/`` (ClientApp: :func:`coded_secagg_mod`, :func:`register_shuffle`),
and no top-level ``strategies`` or ``clients`` that could shadow a project's own modules. In the
source tree they are the folders ``strategies/`` and ``clients/`` beside this package (the
layout the project keeps): this module then registers them as ``coded_fl_flower.strategies``
and ``coded_fl_flower.clients`` (the same module objects as ``strategies`` and ``clients``, so
both spellings name the same classes). The framework-free core stays ``coded_fl``.
"""

from __future__ import annotations

import sys
from pathlib import Path

if not (Path(__file__).resolve().parent / "strategies" / "__init__.py").is_file():
    # the source tree: the adapters are the top-level folders beside this package
    import clients
    import strategies

    sys.modules[f"{__name__}.clients"] = clients
    sys.modules[f"{__name__}.strategies"] = strategies

from coded_fl.secagg import AbortCode
from coded_fl.secagg.policy import ClientPolicy

from .clients import (
    MissingDataError,
    coded_secagg_mod,
    make_coded_secagg_mod,
    partition_arrays,
    partition_dataset,
    partition_tensors,
    register_shuffle,
    seed_own_data,
    shuffle_client_app,
    silo_data_mod,
    silo_store,
)
from .strategies import (
    CodedSecAgg,
    CodedSecAggWorkflow,
    LegacyStrategy,
    NotComposableError,
    RoundReport,
    ShuffledTraining,
    ShuffleRelay,
    coded_server_app,
)

__all__ = [
    "AbortCode",
    "ClientPolicy",
    "CodedSecAgg",
    "CodedSecAggWorkflow",
    "LegacyStrategy",
    "MissingDataError",
    "NotComposableError",
    "RoundReport",
    "ShuffleRelay",
    "ShuffledTraining",
    "coded_secagg_mod",
    "coded_server_app",
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
