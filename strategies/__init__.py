"""Server side Flower adapter of coded-fl.

>>> from strategies import CodedSecAgg, ShuffleRelay
"""

from .coded_secagg import CodedSecAgg, RoundReport
from .placement import ShuffledTraining
from .shuffle import ShuffleRelay

__all__ = ["CodedSecAgg", "RoundReport", "ShuffleRelay", "ShuffledTraining"]
