"""Partitions of a gradient code made of shuffle units: the placement the code needs, mixing.

Silos start with their own data only. Each silo's data is cut into units (:func:`own_units`),
so silo j starts holding units ``"s<j>-0" .. "s<j>-<u-1>"``. A *partition map* lists the units
of each of the code's K partitions; the gradient code's support (B, n x K) then decides who
holds what (:func:`~coded_fl.shuffling.placement.assignment_from_support`): silo i must hold
every unit of every partition j with :math:`B_{ij} \\ne 0`. The first map is "partition j is
silo j's own data"; a reshuffle draws a new map that deals every unit to a random partition
(:func:`mixed_partitions`), so partitions that started non-IID become mixed.

:class:`Holdings` is the server's view of what each silo verifiably holds, updated from each
epoch's :class:`~coded_fl.shuffling.results.ShuffleResult`: a silo that missed part of an epoch
keeps its old units plus the verified new ones (the store's commit rule), so the next job's
current assignment is exactly what its store holds, and that job repairs it.

A unit's bytes are a NumPy ``.npz`` of named arrays with the same first dimension
(:func:`pack_examples`, :func:`unpack_examples`; no pickles).

>>> parts = own_partitions(3, 2)
>>> parts[1]
('s1-0', 's1-1')
>>> sorted(own_assignment(parts)['s2-1'])
[2]
"""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from coded_fl.errors import InputError
from coded_fl.shuffling.placement import assignment_from_support
from coded_fl.shuffling.results import ShuffleResult
from coded_fl.shuffling.units import UnitId

__all__ = [
    "Holdings",
    "code_assignment",
    "mixed_partitions",
    "own_assignment",
    "own_partitions",
    "own_units",
    "pack_examples",
    "partition_holders",
    "unpack_examples",
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
    :func:`~coded_fl.shuffling.placement.assignment_from_support`).

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


@dataclass
class Holdings:
    """The server's view of the units each silo verifiably holds (its store's units).

    Attributes
    ----------
    held
        Silo -> the unit ids its store holds.
    """

    held: dict[int, set[UnitId]] = field(default_factory=dict)

    @classmethod
    def from_assignment(cls, assignment: Mapping[UnitId, frozenset[int]], K: int) -> Holdings:
        """The view in which every silo holds exactly what ``assignment`` gives it."""
        held: dict[int, set[UnitId]] = {k: set() for k in range(K)}
        for u, silos in assignment.items():
            for k in silos:
                held[k].add(u)
        return cls(held)

    def assignment(self) -> dict[UnitId, frozenset[int]]:
        """Unit -> the silos that hold it (the next job's current assignment)."""
        out: dict[UnitId, set[int]] = {}
        for k, units in self.held.items():
            for u in units:
                out.setdefault(u, set()).add(k)
        return {u: frozenset(s) for u, s in out.items()}

    def update(self, result: ShuffleResult) -> bool:
        """Apply an epoch's outcome: a complete silo holds its target units; any other keeps
        its old units plus the units it reported received (verified and committed). "Its old
        units" are what its store reported at the epoch's hello when it did (that corrects a
        view left behind by a reply lost after a commit), else what this view had.

        Returns
        -------
        bool
            True iff a store's reported holdings differed from this view (it was corrected).
        """
        _, target = result.job.assignments()
        job_units = set(result.job.units)
        corrected = False
        for outcome in result.silos:
            k = outcome.silo
            old = self.held.setdefault(k, set())
            if outcome.holdings is not None:
                reported = set(outcome.holdings)
                if reported != old & job_units:
                    corrected = True
                old = self.held[k] = (old - job_units) | reported
            if not result.aborted and outcome.status == "complete":
                self.held[k] = {u for u, silos in target.items() if k in silos}
            else:
                old.update(outcome.received)
        return corrected

    def ready(self, silo: int, partitions: Sequence[int], parts: Partitions) -> bool:
        """True iff ``silo`` holds every unit of every partition in ``partitions``."""
        have = self.held.get(silo, set())
        return all(u in have for j in partitions for u in parts[j])


def pack_examples(arrays: Mapping[str, np.ndarray]) -> bytes:
    """One unit's bytes: the arrays (same first dimension) as an uncompressed ``.npz``.

    Parameters
    ----------
    arrays
        Name -> array (plain dtypes; the first dimension counts examples).

    Returns
    -------
    bytes

    Raises
    ------
    InputError
        If there are no arrays or their first dimensions differ.
    """
    sizes = {len(np.asarray(a)) for a in arrays.values()}
    if len(sizes) != 1:
        raise InputError(f"a unit needs arrays with one common first dimension, got {sizes}")
    buf = io.BytesIO()
    named: dict[str, Any] = {k: np.ascontiguousarray(v) for k, v in sorted(arrays.items())}
    np.savez(buf, **named)
    return buf.getvalue()


def unpack_examples(raw: bytes) -> dict[str, np.ndarray]:
    """The arrays of one unit (:func:`pack_examples`).

    Parameters
    ----------
    raw
        The unit's bytes.

    Returns
    -------
    dict of str to numpy.ndarray

    Raises
    ------
    InputError
        Not a ``.npz`` of plain arrays (object arrays, pickles are refused).
    """
    try:
        with np.load(io.BytesIO(raw), allow_pickle=False) as z:
            return {k: z[k] for k in z.files}
    except (ValueError, OSError) as exc:
        raise InputError(f"a unit is not a .npz of plain arrays: {exc}") from None
