"""Partition maps: a silo's own units, the first map, the placement the code needs, a mixed map.

A partition map lists the unit ids of each of the gradient code's K partitions
(:data:`Partitions`); the code's support decides which silos hold each partition
(:func:`code_assignment`, :func:`partition_holders`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from coded_fl.errors import InputError
from coded_fl.shuffling.plan.placement import assignment_from_support
from coded_fl.shuffling.plan.units import UnitId

__all__ = [
    "Partitions",
    "code_assignment",
    "mixed_partitions",
    "own_assignment",
    "own_partitions",
    "own_units",
    "partition_holders",
]

#: A partition map: ``parts[j]`` lists the unit ids of partition j.
Partitions = Sequence[Sequence[UnitId]]


def own_units(silo: int, units_per_silo: int) -> tuple[str, ...]:
    """The unit ids of silo ``silo``'s own data: ``"s<silo>-<v>"`` for v < ``units_per_silo``.

    Parameters
    ----------
    silo
        The silo's index.
    units_per_silo
        How many units each silo cuts its own data into (>= 1).

    Returns
    -------
    tuple of str

    Raises
    ------
    InputError
        If ``units_per_silo < 1`` or ``silo < 0``.
    """
    if units_per_silo < 1 or silo < 0:
        raise InputError(
            f"units_per_silo must be >= 1 and silo >= 0, got {units_per_silo} and {silo}"
        )
    return tuple(f"s{silo}-{v}" for v in range(units_per_silo))


def own_partitions(K: int, units_per_silo: int) -> tuple[tuple[UnitId, ...], ...]:
    """The first partition map: partition j is silo j's own data.

    Parameters
    ----------
    K
        The number of silos (and partitions).
    units_per_silo
        Units per silo.

    Returns
    -------
    tuple of tuple
        ``parts[j]`` = :func:`own_units` of silo j.
    """
    return tuple(own_units(j, units_per_silo) for j in range(K))


def own_assignment(parts: Partitions) -> dict[UnitId, frozenset[int]]:
    """Who holds what before the placement: silo j holds (only) partition j's units.

    Parameters
    ----------
    parts
        The first partition map (:func:`own_partitions`).

    Returns
    -------
    dict
        Unit id -> ``{j}``.
    """
    return {u: frozenset({j}) for j, units in enumerate(parts) for u in units}


def code_assignment(support: np.ndarray, parts: Partitions) -> dict[UnitId, frozenset[int]]:
    """The placement the gradient code needs (via
    :func:`~coded_fl.shuffling.plan.placement.assignment_from_support`).

    Parameters
    ----------
    support
        B or its zero pattern, n x K: silo i holds partition j iff :math:`B_{ij} \\ne 0`.
    parts
        The partition map.

    Returns
    -------
    dict
        Unit id -> the silos whose support holds its partition.
    """
    return assignment_from_support(support, [list(p) for p in parts])


def mixed_partitions(
    parts: Partitions, *, rng: np.random.Generator
) -> tuple[tuple[UnitId, ...], ...]:
    """A new partition map: every unit dealt to a random partition, partition sizes kept.

    Parameters
    ----------
    parts
        The current map (its unit counts per partition are kept).
    rng
        The generator that draws the permutation.

    Returns
    -------
    tuple of tuple
        The new map; every unit appears exactly once.
    """
    units = [u for p in parts for u in p]
    order = rng.permutation(len(units))
    out, pos = [], 0
    for p in parts:
        out.append(tuple(sorted((units[int(i)] for i in order[pos : pos + len(p)]), key=str)))
        pos += len(p)
    return tuple(out)


def partition_holders(support: np.ndarray, silo: int) -> tuple[int, ...]:
    """The partitions silo ``silo`` trains.

    Parameters
    ----------
    support
        B or its zero pattern, n x K.
    silo
        The silo's index i.

    Returns
    -------
    tuple of int
        The columns j with :math:`B_{ij} \\ne 0`.
    """
    return tuple(int(j) for j in np.flatnonzero(np.asarray(support)[silo] != 0))
