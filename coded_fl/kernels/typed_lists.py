"""Typed lists of arrays (what the multi-input kernels take), built in cached kernels."""

from __future__ import annotations

from numba import njit
from numba.core.registry import CPUDispatcher
from numba.typed import List

from coded_fl.kernels.cache import share_cache

__all__ = ["list_append", "list_of"]


@njit(cache=True)
def list_of(first):
    """A typed list holding ``first`` (what the multi-input kernels take).

    Built here, in a cached kernel, rather than by ``numba.typed.List().append`` from Python:
    that compiles the list's methods for each item type in every fresh process (about 1 s per
    type, not cacheable), where this loads from numba's cache like the other kernels.

    Parameters
    ----------
    first
        A 1-D array.
    """
    out = List()
    out.append(first)
    return out


@njit(cache=True)
def list_append(items, item):
    """Append ``item`` to a typed list made by :func:`list_of` (in place).

    Parameters
    ----------
    items
        A typed list made by list_of.
    item
        A 1-D array of the same type.
    """
    items.append(item)


# every kernel defined (or imported) above keeps its compiled code where coded_fl.kernels.cache
# says (one folder for every copy of this file when CODED_FL_KERNEL_CACHE is set)
share_cache(*(f for f in tuple(globals().values()) if isinstance(f, CPUDispatcher)))
