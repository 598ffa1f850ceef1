r"""Converse bounds: no scheme delivers a shuffle with less load than these, in units.

The centralized worst-case bound under uncoded storage (:func:`centralized_lower_bound`), the
acyclic index-coding bound of any given demand (:func:`acyclic_bound`, with the side information
of :func:`held_units`) and the cut around disjoint holder sets that bounds the silos' total
upload (:func:`holder_cut_bound`). The derivations and sources are in
:mod:`coded_fl.shuffling.plan.theory`; the loads the schemes achieve in
:mod:`coded_fl.shuffling.plan.loads`.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence
from math import comb

import numpy as np

from coded_fl.errors import ConfigurationError
from coded_fl.shuffling.plan.loads import _check

__all__ = ["acyclic_bound", "centralized_lower_bound", "held_units", "holder_cut_bound"]


def acyclic_bound(
    needs: Sequence[Iterable[Hashable]],
    side: Sequence[Iterable[Hashable]],
    *,
    t: int = 0,
    orders: int = 64,
    seed: int = 0,
) -> float:
    r"""A lower bound on the load of *any* scheme that delivers ``needs`` to silos holding
    ``side`` in full and, at level t, the cache of every unit (units of equal size,
    independent; uncoded side information).

    The acyclic index-coding bound: for every order :math:`k_1, \dots, k_K` of the silos, a
    receiver given the side information of :math:`k_1..k_i` and the demands of
    :math:`k_1..k_{i-1}` decodes :math:`k_i`'s demand from the messages, so the load is at
    least the part of :math:`k_i`'s demand outside all of that, summed over i: a unit first
    demanded at step i and held in full by none of :math:`k_1..k_i` counts
    :math:`\binom{K-i}{t} / \binom{K}{t}` (its subfiles cached by none of them). Every order
    gives a valid bound; this returns the largest over a greedy order (each step the silo
    adding the most) and ``orders`` random orders. It holds for one sender that knows
    everything, hence for the silos through a relay or over direct links too (the sender can
    emulate them).

    Parameters
    ----------
    needs
        ``needs[k]``: the units silo k must receive.
    side
        ``side[k]``: the units silo k holds in full.
    t
        The storage level of the caches (0: none).
    orders
        Random orders tried besides the greedy one.
    seed
        Seeds the random orders (the bound is deterministic).

    Returns
    -------
    float
        The bound, in units.

    Examples
    --------
    >>> acyclic_bound([{1}, {0}], [{0}, {1}])  # a swap: one XOR suffices, and is needed
    1.0
    >>> acyclic_bound([{1}, {0}], [set(), set()])  # no side information: both are needed
    2.0
    >>> acyclic_bound([{1}, {0}], [set(), set()], t=1)  # each caches half of the other's unit
    0.5
    """
    W = [set(n) for n in needs]
    Z = [set(z) for z in side]
    K = len(W)
    _check(K, t)
    if t == K:
        return 0.0
    weight = [comb(K - i, t) / comb(K, t) for i in range(1, K + 1)]

    def value(order: Sequence[int]) -> float:
        seen: set[Hashable] = set()
        total = 0.0
        for i, k in enumerate(order):
            seen |= Z[k]
            total += len(W[k] - seen) * weight[i]
            seen |= W[k]
        return total

    greedy: list[int] = []
    seen: set[Hashable] = set()
    left = set(range(K))
    while left:
        k = max(sorted(left), key=lambda j: len(W[j] - (seen | Z[j])))
        greedy.append(k)
        seen |= Z[k] | W[k]
        left.remove(k)
    best = value(greedy)
    rng = np.random.default_rng(seed)
    for _ in range(orders):
        best = max(best, value(rng.permutation(K).tolist()))
    return float(best)


def held_units(holders: Sequence[Iterable[int]], K: int) -> list[set[int]]:
    """The side information of each silo: the indices of the units it holds in full.

    Parameters
    ----------
    holders
        ``holders[n]``: the silos that hold unit n.
    K
        The number of silos.

    Returns
    -------
    list of set of int
        ``out[k]``: the units silo k holds.

    Examples
    --------
    >>> held_units([{0}, {0, 1}], 3)
    [{0, 1}, {1}, set()]
    """
    out: list[set[int]] = [set() for _ in range(K)]
    for n, silos in enumerate(holders):
        for k in silos:
            out[k].add(n)
    return out


def holder_cut_bound(holders: Sequence[frozenset[int]], target: Sequence[frozenset[int]]) -> float:
    """A lower bound on the silos' total upload for any decentralized scheme (relay or direct
    links, any number of rounds): a cut around disjoint holder sets.

    A unit held only inside a silo set S and needed by some silo outside S must leave S: the
    silos outside S know nothing of it, so S's uploads carry at least those units in full.
    Uploads of disjoint sets add up, so the load is at least the largest sum over pairwise
    disjoint holder sets S of the units held only within S and needed outside it (searched
    exactly over the distinct holder sets when there are at most 20 of them, else greedily by
    weight: still a valid bound).

    For the repetition code, whose groups are disjoint and every unit held by exactly one
    group, this equals the plain fan-out (:func:`~coded_fl.shuffling.plan.loads.fanout_load`):
    no coding of any kind lowers the upload of a reshuffle below sending each moved unit once.

    Parameters
    ----------
    holders, target
        The current and next holders of each unit.

    Returns
    -------
    float
        The bound, in units.

    Examples
    --------
    >>> g0, g1 = frozenset({0, 1, 2}), frozenset({3, 4, 5})
    >>> holder_cut_bound([g0, g0, g1], [g1, g0, g0])  # two units leave their group
    2.0
    """
    sets = sorted({h for h in holders if h}, key=sorted)
    weight = []
    for S in sets:
        weight.append(
            sum(1 for a, b in zip(holders, target, strict=True) if a and a <= S and not b <= S)
        )
    cand = [(S, w) for S, w in zip(sets, weight, strict=True) if w]
    if len(cand) <= 20:
        best = 0
        for mask in range(1 << len(cand)):
            chosen = [cand[i] for i in range(len(cand)) if mask >> i & 1]
            union: set[int] = set()
            ok = True
            for S, _ in chosen:
                if union & S:
                    ok = False
                    break
                union |= S
            if ok:
                best = max(best, sum(w for _, w in chosen))
        return float(best)
    used: set[int] = set()
    total = 0
    for S, w in sorted(cand, key=lambda x: (-x[1], sorted(x[0]))):
        if not used & S:
            used |= S
            total += w
    return float(total)


def centralized_lower_bound(K: int, q: float, M: float) -> float:
    """Worst-case load of any centralized scheme with uncoded storage M (units), q units/silo.

    The lower convex envelope of :math:`q (K-1-s)/(s+1)` at :math:`s = (M-q)/q` (module docstring).

    Parameters
    ----------
    K
        The number of silos.
    q
        Units per silo per epoch (q = N/K).
    M
        Storage per silo, in units (:math:`M \\ge q`).

    Returns
    -------
    float
        The bound, in units; 0 once :math:`M \\ge qK` (s reaches K - 1: every silo can store
        all N units).

    Raises
    ------
    ConfigurationError
        If q <= 0 or M < q.

    Examples
    --------
    >>> from coded_fl.shuffling.plan.loads import storage_for_level
    >>> centralized_lower_bound(4, 1, storage_for_level(4, 2, 1, 4)), (4 - 2) / (2 + 1)
    (0.6666666666666666, 0.6666666666666666)
    >>> centralized_lower_bound(4, 1, 1)   # t = 0: q (K - 1)
    3.0
    """
    if q <= 0 or q > M:
        raise ConfigurationError(f"need q > 0 and storage M >= q, got q={q}, M={M}")
    s = min((M - q) / q, K - 1)
    lo = int(s)
    if lo >= K - 1:
        return 0.0

    def f(x: int) -> float:
        return (K - 1 - x) / (x + 1)

    return q * (f(lo) + (s - lo) * (f(lo + 1) - f(lo)))
