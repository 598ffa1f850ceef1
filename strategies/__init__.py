"""Server side Flower adapter of coded-fl.

>>> from strategies import CodedSecAgg, ProtocolSettings, ShuffleRelay, Timeouts
"""

from .coded_secagg import CodedSecAgg, RoundReport
from .composable import NotComposableError
from .legacy import CodedSecAggWorkflow, LegacyStrategy, coded_server_app
from .placement import ShuffledTraining
from .settings import ProtocolSettings, Timeouts
from .shuffle import ShuffleRelay

__all__ = [
    "CodedSecAgg",
    "CodedSecAggWorkflow",
    "LegacyStrategy",
    "NotComposableError",
    "ProtocolSettings",
    "RoundReport",
    "ShuffleRelay",
    "ShuffledTraining",
    "Timeouts",
    "coded_server_app",
]
