"""Coded reshuffles: partner partitions and the partition maps made of one-XOR swaps."""

from __future__ import annotations

import numpy as np

from coded_fl.errors import ConfigurationError, InputError
from coded_fl.shuffling.partitions.maps import Partitions
from coded_fl.shuffling.plan.units import UnitId

__all__ = ["swap_partners", "swapped_partitions"]


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
