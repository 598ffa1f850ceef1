"""Kernels of the mask's rejection sampling: a keystream's words cut to the prime's bit length,
counted or kept when below p.
"""

from __future__ import annotations

import numpy as np
from numba import njit
from numba.core.registry import CPUDispatcher

from coded_fl.kernels.cache import share_cache

__all__ = ["accept_below", "mask_words"]


@njit(cache=True)
def mask_words(words, bits_mask, p):
    """In place: keep the low bits of each word; return how many are >= p (to be rejected).

    Parameters
    ----------
    words
        Keystream words (uint32, changed in place).
    bits_mask
        The low-bit mask (2^bits - 1).
    p
        The prime (< 2^31).
    """
    m = np.uint32(bits_mask)
    pp = np.uint32(p)
    rejected = 0
    for i in range(words.size):
        w = words[i] & m
        words[i] = w
        rejected += w >= pp
    return rejected


@njit(cache=True)
def accept_below(words, bits_mask, p, out, filled):
    """Rejection sampling: append each ``words[i] & bits_mask`` that is < p to ``out``.

    Starts at ``out[filled]``; returns the new fill level (stops when ``out`` is full).

    Parameters
    ----------
    words
        Keystream words (uint32).
    bits_mask
        The low-bit mask.
    p
        The prime (< 2^31).
    out
        The field elements so far (uint32).
    filled
        How many of out are filled.
    """
    m = np.uint32(bits_mask)
    pp = np.uint32(p)
    j = filled
    cap = out.size
    for i in range(words.size):
        if j >= cap:
            break
        w = words[i] & m
        if w < pp:
            out[j] = w
            j += 1
    return j


# every kernel defined (or imported) above keeps its compiled code where coded_fl.kernels.cache
# says (one folder for every copy of this file when CODED_FL_KERNEL_CACHE is set)
share_cache(*(f for f in tuple(globals().values()) if isinstance(f, CPUDispatcher)))
