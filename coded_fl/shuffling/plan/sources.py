r"""Holder-sourced delivery at storage level t >= 1: every needed unit comes from one silo that
holds it in full, and that silo sends, for the units it sources, the centralized scheme's XORs.

Silo j holds each unit it sources in full, so it knows every subfile :math:`W_{n,T}` of it and
can act as the central sender of Attia and Tandon's delivery for those units: in round i, for
every (t+1)-set S of silos with some member k that receives an i-th unit :math:`d_k` from j, j
sends :math:`\bigoplus_{k \in S} W_{d_k, S \setminus k}`. Each receiver k in S caches every
other term (its index set contains k) and decodes its own. With :math:`a_{j,i}` silos receiving
an i-th unit from j, the load is

.. math:: \sum_j \sum_i \frac{\binom{K}{t+1} - \binom{K - a_{j,i}}{t+1}}{\binom{K}{t}}.

When every source spreads its units evenly over the other K - 1 silos (each receives
:math:`q/(K-1)` of them, :func:`balanced_reassignment`), every round has :math:`a = K - 1` and
the load is :math:`\frac{qK}{K-1} \cdot \frac{K-t}{t+1}`: against the relay's fan-out (each of
the qK moved units uploaded once) the ratio is :math:`\frac{K-t}{(K-1)(t+1)} \le \frac{1}{t+1}`
for every t >= 1. The clique cover of Wan et al. (pieces of 1/t subfile from every member of
S) needs no holder and wins on adversarial reassignments; the planner takes whichever of the
two loads less (:func:`~coded_fl.shuffling.plan.planner.plan_shuffle`).

>>> sourced_load(4, 1, [[0, 1, 1, 1], [1, 0, 1, 1], [1, 1, 0, 1], [1, 1, 1, 0]])
6.0
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from math import comb

import numpy as np

from coded_fl.errors import ConfigurationError

__all__ = ["assign_sources", "balanced_reassignment", "source_counts", "sourced_load"]


def sourced_load(K: int, t: int, per_source: Sequence[Sequence[int]]) -> float:
    """Load of the holder-sourced delivery, in units (formula in the module's docstring).

    Parameters
    ----------
    K
        The number of silos.
    t
        The storage level, ``1..K``.
    per_source
        One row per source silo: K counts, how many units each silo receives from it.

    Returns
    -------
    float

    Raises
    ------
    ConfigurationError
        If t is outside ``1..K`` or a row is not K counts >= 0.
    """
    if not 1 <= t <= K:
        raise ConfigurationError(f"holder-sourced delivery needs t in 1..K = 1..{K}, got {t}")
    total = 0
    for row in per_source:
        if len(row) != K or any(x < 0 for x in row):
            raise ConfigurationError(f"each source's row must be K = {K} counts >= 0: {row!r}")
        for i in range(max(row, default=0)):
            a = sum(1 for x in row if x > i)
            total += comb(K, t + 1) - comb(K - a, t + 1)
    return total / comb(K, t)


def assign_sources(
    K: int, needs: Sequence[Sequence[int]], holders: Sequence[frozenset[int]]
) -> tuple[tuple[int, ...], ...] | None:
    """For every unit each silo must receive, the holder that sends it (deterministic).

    A receiver's units are spread over their holders: each goes to the holder that sources
    the fewest units to that receiver so far, then the fewest in all, then the lowest index,
    so that each source's rounds are as full as the holders allow.

    Parameters
    ----------
    K
        The number of silos.
    needs
        ``needs[k]``: the units (indices) silo k must receive.
    holders
        The silos holding each unit in full now.

    Returns
    -------
    tuple of tuple of int, or None
        ``sources[k][i]``: the source of ``needs[k][i]``; None when a needed unit has no
        holder (only the clique cover can deliver it, from the caches).
    """
    to = [[0] * K for _ in range(K)]  # to[j][k]: units j sources to k so far
    total = [0] * K
    out = []
    for k, units in enumerate(needs):
        row = []
        for n in units:
            if not holders[n]:
                return None
            j = min(holders[n], key=lambda h: (to[h][k], total[h], h))
            to[j][k] += 1
            total[j] += 1
            row.append(j)
        out.append(tuple(row))
    return tuple(out)


def source_counts(K: int, sources: Sequence[Sequence[int]]) -> list[list[int]]:
    """``counts[j][k]``: how many units silo k receives from source j.

    Parameters
    ----------
    K
        The number of silos.
    sources
        :func:`assign_sources`'s result.

    Returns
    -------
    list of list of int
    """
    counts = [[0] * K for _ in range(K)]
    for k, row in enumerate(sources):
        for j in row:
            counts[j][k] += 1
    return counts


def balanced_reassignment(
    current: Mapping[Hashable, int], K: int, rng: np.random.Generator
) -> dict[Hashable, int]:
    """A next assignment the coordinator picks so that every silo's units spread evenly over
    the other silos (the permutation the holder-sourced delivery codes best).

    In round r every silo sends its r-th unit (its units in a random order) to the silo a
    fixed shift away in a random relabelling of the silos; the shifts of successive rounds
    run through 1..K-1 from a random start. Each round is a permutation, so every silo
    receives as many units as it sends, and a silo's units reach K - 1 different silos before
    any receives a second. Marginally a unit moves to a uniformly drawn other silo; it never
    stays.

    Parameters
    ----------
    current
        Unit id -> the silo holding it now (each silo the same number of units q).
    K
        The number of silos (>= 2).
    rng
        The coordinator's random generator (the permutation is public, not a secret).

    Returns
    -------
    dict
        Unit id -> its next silo.

    Raises
    ------
    ConfigurationError
        If K < 2, a silo index is outside 0..K-1, or the silos hold different numbers of units.
    """
    if K < 2:
        raise ConfigurationError(f"a reassignment needs K >= 2 silos, got {K}")
    held: list[list[Hashable]] = [[] for _ in range(K)]
    for u, k in sorted(current.items(), key=lambda item: repr(item[0])):
        if not 0 <= k < K:
            raise ConfigurationError(f"unit {u!r} is at silo {k}, outside 0..{K - 1}")
        held[k].append(u)
    q = len(held[0])
    if any(len(h) != q for h in held):
        raise ConfigurationError(
            f"every silo must hold the same number of units: {[len(h) for h in held]}"
        )
    label = rng.permutation(K).tolist()  # position -> silo
    start = int(rng.integers(K - 1))
    nxt: dict[Hashable, int] = {}
    held = [[units[i] for i in rng.permutation(q).tolist()] for units in held]
    for pos in range(K):
        j = label[pos]
        for r, u in enumerate(held[j]):
            shift = 1 + (start + r) % (K - 1)
            nxt[u] = label[(pos + shift) % K]
    return nxt
