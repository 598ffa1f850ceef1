r"""Loads the shuffling schemes achieve: what each one sends, in units.

The storage a level t costs (:func:`storage_for_level`), the worst-case and random-demand loads
of the uncoded, centralized and decentralized schemes (:func:`uncoded_load`,
:func:`centralized_load`, :func:`decentralized_load`) and the t = 0 relay fan-out with and
without swaps (:func:`fanout_load`, :func:`swap_fanout_load`). The derivations and sources are
in :mod:`coded_fl.shuffling.plan.theory`; the converse bounds in
:mod:`coded_fl.shuffling.plan.bounds`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from math import comb

from coded_fl.errors import ConfigurationError

__all__ = [
    "centralized_load",
    "decentralized_load",
    "fanout_load",
    "storage_for_level",
    "swap_fanout_load",
    "uncoded_load",
]


def _check(K: int, t: int) -> None:
    if K < 1:
        raise ConfigurationError(f"the number of silos K must be >= 1, got {K}")
    if not 0 <= t <= K:
        raise ConfigurationError(f"storage level t must be in 0..K = 0..{K}, got {t}")


def storage_for_level(K: int, t: int, held: float, N: float) -> float:
    """Storage (in units) a silo holding ``held`` of ``N`` units in full needs at level t.

    Its held units in full plus the cached fraction t/K of every other unit:
    :math:`held + (N - held)\\,t/K` (:math:`M_t` when held = q, N = qK).

    Parameters
    ----------
    K
        The number of silos.
    t
        The storage level, ``0..K``.
    held
        Units the silo holds in full.
    N
        Units in all.

    Returns
    -------
    float
        The storage, in units.

    Raises
    ------
    ConfigurationError
        If K < 1 or t is outside ``0..K``.

    Examples
    --------
    >>> storage_for_level(4, 2, 2, 8)   # q = 2: q (1 + t (K-1)/K) = 2 * 2.5
    5.0
    """
    _check(K, t)
    return float(held + (N - held) * t / K)


def _counts(K: int, needs: Sequence[int] | int) -> list[int]:
    m = [needs] * K if isinstance(needs, int) else list(needs)
    if len(m) != K or any(x < 0 for x in m):
        raise ConfigurationError(f"needs must be K = {K} counts >= 0, got {needs!r}")
    return sorted(m, reverse=True)


def uncoded_load(K: int, t: int, needs: Sequence[int] | int) -> float:
    """Missing subfiles sent one by one: :math:`\\sum_k m_k (K-t)/K`.

    Parameters
    ----------
    K
        The number of silos.
    t
        The storage level, ``0..K``.
    needs
        :math:`m_k`, the number of units each silo k must receive: K counts, or one count for
        every silo (the worst case, q).

    Returns
    -------
    float
        The load, in units.

    Raises
    ------
    ConfigurationError
        If K < 1, t is outside ``0..K``, or ``needs`` is not K counts >= 0.

    Examples
    --------
    >>> uncoded_load(4, 1, 2)   # worst case q(K - t)
    6.0
    """
    _check(K, t)
    return sum(_counts(K, needs)) * (K - t) / K


def centralized_load(K: int, t: int, needs: Sequence[int] | int) -> float:
    """Load of the centralized scheme for silos needing ``needs`` units each.

    :math:`\\sum_{S} \\max_{k \\in S} m_k / \\binom{K}{t}`, computed with the silos sorted by need:
    the i-th largest need tops :math:`\\binom{K-i}{t}` of the (t+1)-sets.

    Parameters
    ----------
    K
        The number of silos.
    t
        The storage level, ``0..K``.
    needs
        :math:`m_k`, the number of units each silo k must receive: K counts, or one count for
        every silo (the worst case, q).

    Returns
    -------
    float
        The load, in units.

    Raises
    ------
    ConfigurationError
        If K < 1, t is outside ``0..K``, or ``needs`` is not K counts >= 0.

    Examples
    --------
    >>> centralized_load(4, 1, 2), 2 * (4 - 1) / (1 + 1)   # worst case q(K-t)/(t+1)
    (3.0, 3.0)
    >>> centralized_load(3, 0, [1, 0, 2])
    3.0
    """
    _check(K, t)
    m = _counts(K, needs)
    return sum(mi * comb(K - 1 - i, t) for i, mi in enumerate(m)) / comb(K, t)


def decentralized_load(K: int, t: int, needs: Sequence[int] | int) -> float:
    """Load of the decentralized scheme (pieces of 1/t subfile, one message per sender of S).

    For the i-th round of a (t+1)-set S, with c silos of S still needing a unit, c >= 2 makes all
    t+1 silos of S send, c = 1 makes the t others send. At t = 0 every needed unit is sent whole
    by a holder, once per receiver (when several silos need the same unit the planner sends it
    once for all of them: :func:`fanout_load`); at t = K nothing is sent.

    Parameters
    ----------
    K
        The number of silos.
    t
        The storage level, ``0..K``.
    needs
        :math:`m_k`, the number of units each silo k must receive: K counts, or one count for
        every silo (the worst case, q).

    Returns
    -------
    float
        The load, in units.

    Raises
    ------
    ConfigurationError
        If K < 1, t is outside ``0..K``, or ``needs`` is not K counts >= 0.

    Examples
    --------
    >>> decentralized_load(4, 1, 2), 2 * (4 - 1) / 1   # worst case q(K-t)/t
    (6.0, 6.0)
    >>> decentralized_load(4, 0, 2)
    8.0
    """
    _check(K, t)
    m = _counts(K, needs)
    if t == 0:
        return float(sum(m))
    total = 0
    for i in range(max(m, default=0)):
        a = sum(1 for x in m if x > i)  # silos still needing a unit in round i
        one = a * comb(K - a, t)
        many = comb(K, t + 1) - comb(K - a, t + 1) - one
        total += (t + 1) * many + t * one
    return total / (t * comb(K, t))


def fanout_load(needs: Sequence[Iterable[int]]) -> float:
    """Load of the decentralized scheme at t = 0 with the relay's fan-out: each unit some
    silo must receive is sent once, whole, by one holder, and the relay forwards it to every
    silo that needs it.

    With the gradient code a unit is wanted by every silo of its new partition's support
    (s + 1 of them), so one upload serves them all where plain copying sends it to each.
    The gain is the fan-out of replicated demands, not coding: nothing is XORed.

    Parameters
    ----------
    needs
        ``needs[k]``: the units (any hashable ids) silo k must receive.

    Returns
    -------
    float
        The number of distinct units needed by some silo, in units.

    Examples
    --------
    >>> fanout_load([(0, 1), (0, 1), (2,)])  # units 0 and 1 go to two silos each
    3.0
    """
    return float(len(set().union(*(set(n) for n in needs)))) if needs else 0.0


def swap_fanout_load(holders: Sequence[frozenset[int]], target: Sequence[frozenset[int]]) -> float:
    """Load of the t = 0 decentralized scheme with swaps: the fan-out, where every pair of units
    that trade holder sets is sent as one XOR.

    Units are grouped by (holders now A, holders next B); a unit is *moved* when B is not inside
    A. For every unordered pair of classes (A, B) and (B, A) whose sets meet, min of their sizes
    pairs are formed: a silo of A and B holds both units and sends their XOR once; every new
    holder of the one (a silo of B outside A) holds the other, so each decodes what it lacks,
    and the relay forwards the XOR to the new holders of both. The other moved units go alone
    (:func:`fanout_load`). Classes whose sets are disjoint (the repetition code's groups) pair
    nothing: the load is then the plain fan-out.

    Parameters
    ----------
    holders, target
        The current and next holders of each unit (any order, the same in both).

    Returns
    -------
    float
        Messages, in units: for each such class pair max(|A->B|, |B->A|), for every other
        moved class its size.

    Examples
    --------
    >>> A, B, C = frozenset({0, 1, 2}), frozenset({1, 2, 3}), frozenset({5, 6, 7})
    >>> swap_fanout_load([A, A, B], [B, B, A])  # two units A->B, one B->A: one XOR, one alone
    2.0
    >>> swap_fanout_load([A, C], [C, A])  # disjoint holders: no silo holds both
    2.0
    """
    counts: dict[tuple[frozenset[int], frozenset[int]], int] = {}
    for a, b in zip(holders, target, strict=True):
        if not b <= a:
            counts[(a, b)] = counts.get((a, b), 0) + 1
    total = 0
    for (a, b), c in counts.items():
        back = counts.get((b, a), 0)
        if a & b and back:
            total += max(c, back) if _canonical(a, b) else 0  # each class pair counted once
        else:
            total += c
    return float(total)


def _canonical(a: frozenset[int], b: frozenset[int]) -> bool:
    return sorted(a) < sorted(b)
