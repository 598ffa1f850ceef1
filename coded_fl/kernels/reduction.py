"""Mersenne-31 reduction helpers and the block size shared by the CPU kernels.

For the Mersenne prime :math:`p = 2^{31}-1` a product :math:`x < 2^{62}` is folded with
``(x & p) + (x >> 31)`` (no division); other primes use ``%``. Loops over several input vectors
are blocked (:data:`_BLOCK` elements) so that the accumulator stays in L1 and each input is
streamed once.
"""

from __future__ import annotations

import numpy as np
from numba import njit
from numba.core.registry import CPUDispatcher

from coded_fl.kernels.cache import share_cache

__all__: list[str] = []

_M31 = np.uint64(2**31 - 1)
_S31 = np.uint64(31)
_BLOCK = 2048


@njit(inline="always", cache=True)
def _fold_m31(x):  # x: uint64 < 2^64 -> uint64 < 2^32 + 2^31, congruent mod 2^31-1
    return (x & _M31) + (x >> _S31)


@njit(inline="always", cache=True)
def _final_m31(x):  # x: any uint64 -> canonical in [0, p)
    x = (x & _M31) + (x >> _S31)
    x = (x & _M31) + (x >> _S31)
    return x - _M31 if x >= _M31 else x


# every kernel defined (or imported) above keeps its compiled code where coded_fl.kernels.cache
# says (one folder for every copy of this file when CODED_FL_KERNEL_CACHE is set)
share_cache(*(f for f in tuple(globals().values()) if isinstance(f, CPUDispatcher)))
