"""Server side Flower adapter of coded-fl.

>>> from strategies import CodedSecAgg, ShuffleRelay
"""

from .coded_secagg import CodedSecAgg, RoundReport
from .composable import NotComposableError
from .legacy import CodedSecAggWorkflow, LegacyStrategy, coded_server_app
from .placement import ShuffledTraining
from .shuffle import ShuffleRelay

__all__ = [
    "CodedSecAgg",
    "CodedSecAggWorkflow",
    "LegacyStrategy",
    "NotComposableError",
    "RoundReport",
    "ShuffleRelay",
    "ShuffledTraining",
    "coded_server_app",
]
