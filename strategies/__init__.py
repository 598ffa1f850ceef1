"""Server side Flower adapter of coded-fl.

>>> from strategies import CodedSecAgg
"""

from strategies.coded_secagg import CodedSecAgg, RoundReport

__all__ = ["CodedSecAgg", "RoundReport"]
