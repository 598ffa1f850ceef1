"""coded-fl for Flower under one collision-free name: the public API of both adapters.

>>> from coded_fl_flower import CodedSecAgg, coded_secagg_mod

The installed wheel holds the adapters as subpackages of this one,
``coded_fl_flower/strategies/`` (server: :class:`CodedSecAgg`, :class:`ShuffleRelay`) and
``coded_fl_flower/clients/`` (ClientApp: :func:`coded_secagg_mod`, :func:`register_shuffle`),
and no top-level ``strategies`` or ``clients`` that could shadow a project's own modules. In the
source tree they are the folders ``strategies/`` and ``clients/`` beside this package (the
layout the project keeps), imported under those names only. Each adapter module therefore has
exactly one import path where it lives (``strategies.run`` in the source tree,
``coded_fl_flower.strategies.run`` in the wheel), so no module is ever loaded twice as two
copies whose classes differ. This package re-exports the same public API from either,
importing each name on first use, and ``import coded_fl_flower.strategies`` works in the wheel
only. The framework-free core stays ``coded_fl``.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

from coded_fl.secagg import AbortCode
from coded_fl.secagg.policy import ClientPolicy

if TYPE_CHECKING:  # a type checker reads the wheel's layout, what users check against
    from .clients import *  # noqa: F403  (the adapters' __all__ is this package's API)
    from .strategies import *  # noqa: F403

#: Whether this is the source tree (the adapters are the top-level folders beside this package)
SOURCE_TREE = not (Path(__file__).resolve().parent / "strategies" / "__init__.py").is_file()

#: The adapters, in the order their names are looked up
_ADAPTERS = ("clients", "strategies")


def __getattr__(name: str) -> Any:
    """An adapter's public name, imported on first use (PEP 562).

    Lazy, so that the adapters can import :mod:`coded_fl_flower.records` (their shared
    translation of Flower records) without importing each other through this package.
    """
    if name in __all__:
        for adapter in _ADAPTERS:
            module = importlib.import_module(adapter if SOURCE_TREE else f"{__name__}.{adapter}")
            if name in module.__all__:
                value = getattr(module, name)
                globals()[name] = value
                return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


# (the names below come from the star imports a type checker reads, or from __getattr__)
__all__ = [  # noqa: F405
    "AbortCode",
    "ClientPolicy",
    "CodedSecAgg",
    "CodedSecAggWorkflow",
    "LegacyStrategy",
    "MissingDataError",
    "NotComposableError",
    "ProtocolSettings",
    "RoundReport",
    "ShuffleRelay",
    "ShuffledTraining",
    "Timeouts",
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
