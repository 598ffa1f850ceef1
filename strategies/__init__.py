"""Server side Flower adapter of coded-fl.

>>> from strategies import CodedSecAgg, ShuffleRelay
"""

from strategies.coded_secagg import CodedSecAgg, RoundReport
from strategies.shuffle import ShuffleRelay

__all__ = ["CodedSecAgg", "RoundReport", "ShuffleRelay"]
