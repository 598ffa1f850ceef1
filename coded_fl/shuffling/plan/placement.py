"""Who holds what: assignments of units to silos, the cache placement, storage checks.

An *assignment* maps each unit to the silos that hold it in full (one silo for a plain batch
split; s+1 silos for the gradient-code placement). The *cache placement* at storage level t is
fixed and the same in every epoch: unit n is split into :math:`\\binom{K}{t}` subfiles
:math:`W_{n,T}`, one per t-subset T of the silos, and silo k caches :math:`W_{n,T}` for every
:math:`T \\ni k` and every unit n. Because it does not depend on the assignment, a reshuffle
never has to rebuild a cache: a silo that receives a unit keeps it whole, a silo that gives a
unit up keeps only its cached subfiles.

Subfiles are numbered by the colexicographic rank of T
(:math:`\\sum_i \\binom{T_i}{i+1}` for :math:`T_0 < T_1 < \\dots`).

>>> subsets(4, 2).tolist()
[[0, 1], [0, 2], [1, 2], [0, 3], [1, 3], [2, 3]]
>>> int(colex_rank(np.array([[1, 3]]))[0])
4
>>> a = cyclic_assignment(4, 1)
>>> [sorted(a[u]) for u in range(4)]   # partition j held by silos j-s..j
[[0, 3], [0, 1], [1, 2], [2, 3]]
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from math import comb

import numpy as np

from coded_fl.errors import ConfigurationError, InputError
from coded_fl.shuffling.plan.theory import storage_for_level
from coded_fl.shuffling.plan.units import UnitId, UnitManifest

__all__ = [
    "MAX_SUBFILES",
    "Assignment",
    "assignment_from_support",
    "batch_assignment",
    "check_storage",
    "colex_rank",
    "cyclic_assignment",
    "largest_level",
    "normalize_assignment",
    "shifted_assignment",
    "subsets",
]

#: unit id -> the silos that hold it in full.
Assignment = Mapping[UnitId, frozenset[int]]

#: Cap on C(K, t): more subfiles than this make units tiny and plans huge.
MAX_SUBFILES = 1 << 16


def subsets(K: int, t: int) -> np.ndarray:
    """All t-subsets of ``range(K)`` as rows of a ``(C(K,t), t)`` int64 array, in colex order.

    Row j is the set T of colex rank j (each row increasing), so row j names subfile
    :math:`W_{n,T}` of every unit n.

    Parameters
    ----------
    K
        The number of silos.
    t
        The subset size (the storage level), ``0..K``.

    Returns
    -------
    numpy.ndarray
        ``(C(K, t), t)`` int64; at t = 0 one empty row.

    Raises
    ------
    ConfigurationError
        If :math:`\\binom{K}{t}` exceeds :data:`MAX_SUBFILES`.
    """
    n = comb(K, t)
    if n > MAX_SUBFILES:
        raise ConfigurationError(
            f"C(K={K}, t={t}) = {n} subfiles per unit is more than {MAX_SUBFILES}: "
            "choose a smaller storage level t (or fewer silos per shuffle group)"
        )
    out = np.empty((n, t), dtype=np.int64)
    if t == 0:
        return out
    row = list(range(t))
    for i in range(n):
        out[i] = row
        j = 0  # colex successor: bump the lowest element that can move, reset those below it
        while j < t - 1 and row[j] + 1 == row[j + 1]:
            j += 1
        row[j] += 1
        row[:j] = range(j)
    return out


def colex_rank(rows: np.ndarray) -> np.ndarray:
    """Colex rank of each sorted row (vectorised combinatorial number system).

    The rank of :math:`T_0 < T_1 < \\dots` is :math:`\\sum_i \\binom{T_i}{i+1}`: the inverse of
    :func:`subsets`.

    Parameters
    ----------
    rows
        A 2-d integer array, one subset per row, each row increasing and non-negative (not
        checked: an unsorted row gets a meaningless rank).

    Returns
    -------
    numpy.ndarray
        int64, the rank of each row (all zeros for 0-element rows).

    Raises
    ------
    InputError
        If ``rows`` is not 2-d.
    """
    rows = np.asarray(rows, dtype=np.int64)
    if rows.ndim != 2:
        raise InputError("colex_rank takes a 2-d array of sorted subsets")
    if rows.shape[1] == 0:
        return np.zeros(rows.shape[0], dtype=np.int64)
    top = int(rows.max(initial=0)) + 1
    table = np.array(
        [[comb(v, i + 1) for i in range(rows.shape[1])] for v in range(top)], dtype=np.int64
    )
    return table[rows, np.arange(rows.shape[1])].sum(axis=1)


def normalize_assignment(
    manifest: UnitManifest, assignment: Mapping[UnitId, Iterable[int]], K: int, *, name: str
) -> tuple[frozenset[int], ...]:
    """Holders of each manifest unit, in manifest order (empty for a unit not listed).

    Parameters
    ----------
    manifest
        The units (their canonical order is the order of the result).
    assignment
        Unit id -> the silos that hold it in full.
    K
        The number of silos; every silo index must be in ``0..K-1``.
    name
        What the assignment is called in error messages (``"current assignment"``).

    Returns
    -------
    tuple of frozenset of int
        One holder set per manifest unit.

    Raises
    ------
    InputError
        If a unit is given to a silo outside ``0..K-1``, or a listed unit is not in the
        manifest.
    """
    out: list[frozenset[int]] = [frozenset()] * len(manifest)
    for unit, silos in assignment.items():
        held = frozenset(int(k) for k in silos)
        bad = sorted(k for k in held if not 0 <= k < K)
        if bad:
            raise InputError(f"{name}: unit {unit!r} is given to silos {bad}, outside 0..{K - 1}")
        out[manifest.index(unit)] = held
    return tuple(out)


def check_storage(
    K: int,
    t: int,
    storage: float,
    assignments: Sequence[tuple[str, Sequence[frozenset[int]]]],
) -> None:
    """Refuse a level t whose cache plus the assigned units overflow some silo's storage.

    A silo holding h of the N units in full needs :math:`h + (N - h)\\,t/K` units of storage
    at level t (:func:`~coded_fl.shuffling.plan.theory.storage_for_level`); every silo of every
    assignment given must fit in ``storage``.

    Parameters
    ----------
    K
        The number of silos.
    t
        The storage level, ``0..K``.
    storage
        Storage per silo, in units (M).
    assignments
        ``(label, holders)`` pairs, ``holders`` one holder set per unit in manifest order (as
        :func:`normalize_assignment` returns); N is the length of the first.

    Raises
    ------
    ConfigurationError
        If some silo does not fit; names the silo, the assignment's label and the largest t
        that would fit (or the storage its assigned units alone need). Also if K < 1 or t is
        outside ``0..K``.
    """
    N = len(assignments[0][1]) if assignments else 0
    for label, holders in assignments:
        for k in range(K):
            held = sum(1 for h in holders if k in h)
            need = storage_for_level(K, t, held, N)
            if need > storage + 1e-9:
                best = largest_level(K, storage, held, N)
                raise ConfigurationError(
                    f"storage too small: silo {k} holds {held} units in the {label} assignment "
                    f"and needs {need:g} units of storage at level t={t}, but has {storage:g}; "
                    + (
                        f"use t <= {best} or give each silo >= {need:g} units"
                        if best is not None
                        else f"give each silo >= {held} units (its assigned units alone)"
                    )
                )


def largest_level(K: int, storage: float, held: int, N: int) -> int | None:
    """The largest t whose storage fits ``storage`` for a silo holding ``held`` units.

    Parameters
    ----------
    K
        The number of silos.
    storage
        Storage per silo, in units (M).
    held
        How many units the silo holds in full.
    N
        The number of units.

    Returns
    -------
    int or None
        The largest t in ``0..K`` with :math:`held + (N - held)\\,t/K \\le M`, or None if even
        the held units alone do not fit.
    """
    fits = [t for t in range(K + 1) if storage_for_level(K, t, held, N) <= storage + 1e-9]
    return max(fits) if fits else None


def cyclic_assignment(
    K: int, s: int, partitions: Sequence[Sequence[UnitId]] | None = None
) -> dict[UnitId, frozenset[int]]:
    """The cyclic gradient-code placement: silo i holds partitions i, i+1, ..., i+s (mod K).

    Partition j is thus held by silos j-s, ..., j (mod K): s+1 holders each.

    Parameters
    ----------
    K
        The number of silos (and of partitions).
    s
        The number of stragglers the code tolerates, ``0..K-1``.
    partitions
        ``partitions[j]`` lists the units of partition j (default: unit j is partition j).

    Returns
    -------
    dict
        Unit id -> the s+1 silos that hold it.

    Raises
    ------
    ConfigurationError
        If s is outside ``0..K-1``.
    InputError
        If ``partitions`` does not list K partitions.
    """
    if not 0 <= s < K:
        raise ConfigurationError(f"stragglers s must be in 0..K-1 = 0..{K - 1}, got {s}")
    support = np.zeros((K, K), dtype=bool)
    for i in range(K):
        support[i, [(i + d) % K for d in range(s + 1)]] = True
    return assignment_from_support(support, partitions)


def assignment_from_support(
    support: np.ndarray, partitions: Sequence[Sequence[UnitId]] | None = None
) -> dict[UnitId, frozenset[int]]:
    """Assignment from the support of a gradient code B (n x K; silo i holds j iff B_ij != 0).

    Parameters
    ----------
    support
        B, or any array with its zero pattern: row i a silo, column j a partition.
    partitions
        ``partitions[j]`` lists the units of partition j (default: unit j is partition j).

    Returns
    -------
    dict
        Unit id -> the silos i with :math:`B_{ij} \\ne 0` for its partition j.

    Raises
    ------
    InputError
        If ``support`` is not 2-d, ``partitions`` does not list one entry per column, or a
        partition has no holder.
    """
    B = np.asarray(support) != 0
    if B.ndim != 2:
        raise InputError("support must be an n x K matrix")
    K = B.shape[1]
    parts = [[j] for j in range(K)] if partitions is None else partitions
    if len(parts) != K:
        raise InputError(f"support has {K} partitions but {len(parts)} were listed")
    out: dict[UnitId, frozenset[int]] = {}
    for j, units in enumerate(parts):
        holders = frozenset(int(i) for i in np.flatnonzero(B[:, j]))
        if not holders:
            raise InputError(f"partition {j} has no holder in the support")
        for u in units:
            out[u] = holders
    return out


def batch_assignment(
    units: Sequence[UnitId], K: int, *, rng: np.random.Generator
) -> dict[UnitId, frozenset[int]]:
    """A random split of the units into K batches of (nearly) equal size, one per silo.

    Parameters
    ----------
    units
        The unit ids.
    K
        The number of silos.
    rng
        The generator that draws the permutation.

    Returns
    -------
    dict
        Unit id -> a single silo; batch sizes differ by at most one.
    """
    order = rng.permutation(len(units))
    return {units[int(i)]: frozenset({pos % K}) for pos, i in enumerate(order)}


def shifted_assignment(
    assignment: Assignment, K: int, shift: int = 1
) -> dict[UnitId, frozenset[int]]:
    """Every unit moves from silo k to silo k - shift (mod K).

    With one holder per unit (a batch split) no silo keeps anything: the worst case of the
    papers (a single cycle of batches when ``shift`` is coprime with K). With s+1 holders per
    unit (the gradient-code placement) the old and new holder sets overlap.

    Parameters
    ----------
    assignment
        Unit id -> its holders.
    K
        The number of silos.
    shift
        How far each holder moves down (mod K).

    Returns
    -------
    dict
        Unit id -> the shifted holders.

    Raises
    ------
    ConfigurationError
        If ``shift`` is a multiple of K.
    """
    if shift % K == 0:
        raise ConfigurationError("shift must not be a multiple of K (nothing would move)")
    return {u: frozenset((k - shift) % K for k in h) for u, h in assignment.items()}
