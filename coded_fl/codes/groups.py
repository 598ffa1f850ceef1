"""Silo groups and their partitions: the layout of the group codes.

:func:`balanced_groups` splits n silos into g groups of consecutive ids; :func:`spread_partitions`
gives each group its number of partitions for the least storage (the repetition code's choice),
and ``_even_counts`` spreads a count as evenly as possible (the plain group layout).
"""

from __future__ import annotations

from collections.abc import Sequence

from coded_fl.codes.structure import check_count
from coded_fl.errors import ConfigurationError

__all__ = ["balanced_groups", "spread_partitions"]


def balanced_groups(n: int, g: int) -> list[list[int]]:
    """n silos in g groups of consecutive ids, sizes :math:`\\lfloor n/g \\rfloor` or
    :math:`\\lceil n/g \\rceil`: silo i is in group :math:`\\lfloor i g / n \\rfloor`.

    >>> balanced_groups(7, 3)
    [[0, 1, 2], [3, 4], [5, 6]]

    Parameters
    ----------
    n
        Silos.
    g
        Groups, :math:`1 \\le g \\le n`.

    Returns
    -------
    list[list[int]]
        The silos of each group.
    """
    groups: list[list[int]] = [[] for _ in range(g)]
    for i in range(n):
        groups[(i * g) // n].append(i)
    return groups


def _even_counts(total: int, parts: int) -> list[int]:
    """``total`` over ``parts`` slots as evenly as possible: slot r gets
    :math:`\\lceil (r+1) T / L \\rceil - \\lceil r T / L \\rceil`, i.e. item j goes to slot
    :math:`\\lfloor j L / T \\rfloor`."""
    edges = [-(-r * total // parts) for r in range(parts + 1)]
    return [edges[r + 1] - edges[r] for r in range(parts)]


def spread_partitions(sizes: Sequence[int], num_partitions: int) -> list[int]:
    """How many of K partitions each silo group holds, for the least storage (the repetition
    code's choice).

    Every member of group q holds all :math:`K_q` partitions of its group, so silo storage is
    :math:`K_q` and the total number of copies is :math:`\\sum_q |G_q| K_q`. The counts are
    chosen in this order of priority:

    1. the maximum storage :math:`\\max_q K_q` is :math:`c = \\lceil K / g \\rceil`, the least
       possible (the g counts sum to K);
    2. every group holds at least one partition (every silo trains on data), and subject to
       1. the total :math:`\\sum_q |G_q| K_q` (n times the mean storage) is the least possible:
       each group starts with one partition and the rest fill the smallest groups first, up to
       c each (a linear cost under box constraints: moving a partition from a larger group to a
       smaller one with room never raises it, so the greedy fill is optimal);
    3. within groups of one size the counts are as even as possible; with all sizes equal this
       is exactly partition j in group :math:`\\lfloor j g / K \\rfloor`.

    >>> spread_partitions([3, 2, 2], 7)  # n = 7, s = 1: max 3 partitions, 15 copies
    [1, 3, 3]
    >>> spread_partitions([2, 2, 2], 7)  # equal groups: as even as possible
    [3, 2, 2]

    Parameters
    ----------
    sizes
        :math:`|G_q|`, the silos of each group (each >= 1).
    num_partitions
        K, at least the number of groups.

    Returns
    -------
    list[int]
        :math:`K_q` for each group, in the order of ``sizes``; they sum to K.

    Raises
    ------
    ConfigurationError
        If there are no groups, a size is below 1, or K is below the number of groups.
    """
    sizes = [check_count("group size", m, minimum=1) for m in sizes]
    g = len(sizes)
    if g < 1:
        raise ConfigurationError("spread_partitions needs at least one group (sizes is empty)")
    K = check_count("num_partitions", num_partitions, minimum=1)
    if g > K:
        raise ConfigurationError(
            f"num_partitions={K} is fewer than the {g} silo groups: some silos would hold no "
            f"data; use num_partitions >= {g}"
        )
    cap = -(-K // g)
    counts = [0] * g
    left = K
    for size in sorted(set(sizes)):
        members = [q for q in range(g) if sizes[q] == size]
        later = sum(1 for m in sizes if m > size)  # each larger group still needs one
        take = min(len(members) * cap, left - later)
        for q, c in zip(members, _even_counts(take, len(members)), strict=True):
            counts[q] = c
        left -= take
    return counts
