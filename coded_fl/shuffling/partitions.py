"""Partitions of a gradient code made of shuffle units: the placement the code needs, mixing.

Silos start with their own data only. Each silo's data is cut into units (:func:`own_units`),
so silo j starts holding units ``"s<j>-0" .. "s<j>-<u-1>"``. A *partition map* lists the units
of each of the code's K partitions; the gradient code's support (B, n x K) then decides who
holds what (:func:`~coded_fl.shuffling.plan.placement.assignment_from_support`): silo i must hold
every unit of every partition j with :math:`B_{ij} \\ne 0`. The first map is "partition j is
silo j's own data"; a reshuffle draws a new map that deals every unit to a random partition
(:func:`mixed_partitions`), so partitions that started non-IID become mixed.

:class:`Holdings` is the server's view of what each silo verifiably holds, updated from each
epoch's :class:`~coded_fl.shuffling.transport.results.ShuffleResult`: a silo that missed part of an
epoch keeps its old units plus the verified new ones (the store's commit rule), so the next job's
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

from coded_fl.errors import ConfigurationError, InputError
from coded_fl.shuffling.plan.placement import assignment_from_support
from coded_fl.shuffling.plan.units import UnitId
from coded_fl.shuffling.transport.results import ShuffleResult

__all__ = [
    "Holdings",
    "code_assignment",
    "mixed_partitions",
    "own_assignment",
    "own_partitions",
    "own_units",
    "pack_examples",
    "partition_holders",
    "swap_partners",
    "swapped_partitions",
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


def swap_partners(support: np.ndarray) -> dict[int, tuple[int, ...]]:
    """The partitions each partition can trade units with at one coded XOR per pair.

    Partitions p and q are partners when their holder sets (the silos whose row of B has p,
    resp. q, in its support) differ and meet: a silo of both sends the XOR of a unit of p and
    a unit of q, and each silo that gains one of them holds the other. The cyclic support of
    the polynomial code gives every partition 2s partners (the partitions at cyclic distance
    1..s); the repetition code gives none (its groups are disjoint and a group's partitions
    share one holder set), so no reshuffle of it can be coded (see
    :func:`~coded_fl.shuffling.plan.theory.holder_cut_bound`).

    Parameters
    ----------
    support
        B or its zero pattern, n x K.

    Returns
    -------
    dict
        Partition -> its partners, increasing (an empty tuple when it has none).
    """
    B = np.asarray(support) != 0
    holders = [frozenset(np.flatnonzero(B[:, j]).tolist()) for j in range(B.shape[1])]
    return {
        p: tuple(q for q, hq in enumerate(holders) if hq != hp and hq & hp)
        for p, hp in enumerate(holders)
    }


def swapped_partitions(
    parts: Partitions,
    support: np.ndarray,
    *,
    rng: np.random.Generator,
    tries: int = 32,
) -> tuple[tuple[UnitId, ...], ...]:
    """A new partition map made of swaps the reshuffle can send as one XOR each.

    The coordinator pairs units at random across partner partitions (:func:`swap_partners`):
    units are visited in a random order, and each unpaired one trades places with a unit drawn
    uniformly among the unpaired units of its partners. Every unit thus takes one step of a
    random walk over the partner graph (for the polynomial code's cyclic support: to one of the
    2s partitions at cyclic distance 1..s, about equally likely), partition sizes are kept, and
    the plan sends one XOR per pair where a uniform reshuffle sends each moved unit alone
    (:func:`~coded_fl.shuffling.plan.theory.swap_fanout_load`). Of ``tries`` random draws the first
    that pairs every unit is kept, else the one that pairs the most (a unit left unpaired
    stays where it is).

    Parameters
    ----------
    parts
        The current map.
    support
        B or its zero pattern, n x K (K = ``len(parts)``).
    rng
        The generator that draws the pairs.
    tries
        Random draws at most.

    Returns
    -------
    tuple of tuple
        The new map; every unit appears exactly once.

    Raises
    ------
    ConfigurationError
        If no partition has a partner (the repetition code): use :func:`mixed_partitions`.
    """
    partners = swap_partners(support)
    if len(partners) != len(parts):
        raise InputError(f"the support has {len(partners)} partitions, the map {len(parts)}")
    if not any(partners.values()):
        raise ConfigurationError(
            "no two partitions of this code have holder sets that meet and differ (the "
            "repetition code's groups are disjoint): a reshuffle cannot be coded; draw it with "
            "mixed_partitions"
        )
    home = [(u, p) for p, units in enumerate(parts) for u in units]
    best: list[tuple[int, int]] = []
    for _ in range(max(1, tries)):
        free: dict[int, list[int]] = {}
        for i, (_, p) in enumerate(home):
            free.setdefault(p, []).append(i)
        pairs: list[tuple[int, int]] = []
        paired = np.zeros(len(home), dtype=bool)
        for i in rng.permutation(len(home)).tolist():
            if paired[i]:
                continue
            p = home[i][1]
            pool = [j for q in partners[p] for j in free.get(q, ())]
            if not pool:
                continue
            j = pool[int(rng.integers(len(pool)))]
            for k in (i, j):
                paired[k] = True
                free[home[k][1]].remove(k)
            pairs.append((i, j))
        _augment(pairs, [i for i in range(len(home)) if not paired[i]], home, partners)
        if len(pairs) > len(best):
            best = pairs
        if 2 * len(best) == len(home):
            break
    where = [p for _, p in home]
    for i, j in best:
        where[i], where[j] = home[j][1], home[i][1]
    out: list[list[UnitId]] = [[] for _ in parts]
    for (u, _), p in zip(home, where, strict=True):
        out[p].append(u)
    return tuple(tuple(sorted(units, key=str)) for units in out)


def _augment(
    pairs: list[tuple[int, int]],
    lone: list[int],
    home: list[tuple[UnitId, int]],
    partners: dict[int, tuple[int, ...]],
) -> None:
    """Pair the units the random pass left alone through one existing pair: lone i and l, pair
    (j, k) with i, j partners and k, l partners become (i, j) and (k, l). In place."""

    def ok(x: int, y: int) -> bool:
        return home[y][1] in partners[home[x][1]]

    def step() -> bool:
        for a, i in enumerate(lone):
            for m in lone[a + 1 :]:
                if ok(i, m):
                    pairs.append((i, m))
                    lone[:] = [x for x in lone if x not in (i, m)]
                    return True
                for n, (j, k) in enumerate(pairs):
                    for x, y in ((j, k), (k, j)):
                        if ok(i, x) and ok(y, m):
                            pairs[n] = (i, x)
                            pairs.append((y, m))
                            lone[:] = [z for z in lone if z not in (i, m)]
                            return True
        return False

    while len(lone) > 1 and step():
        pass


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
        """The view in which every silo holds exactly what ``assignment`` gives it.

        Parameters
        ----------
        assignment
            Unit -> the silos that hold it.
        K
            Silos.

        Returns
        -------
        Holdings
        """
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

        Parameters
        ----------
        result
            The epoch's result.

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
        """True iff ``silo`` holds every unit of every partition in ``partitions``.

        Parameters
        ----------
        silo
            The silo.
        partitions
            The partitions it must hold.
        parts
            Partition -> its units.

        Returns
        -------
        bool
        """
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
