r"""Loads of coded data shuffling: the formulas the planner is measured against.

Glossary: K silos (workers), N units, q = N/K units per silo per epoch, storage level
t in {0..K}: every silo caches the subfiles :math:`W_{n,T}` (T a t-subset of the K silos,
:math:`k \in T`) of every unit n, plus its assigned units in full. That costs

.. math:: M_t = q + (N - q)\,t/K = q\,(1 + t(K-1)/K)

units of storage (ANCHORS.md section 3; the "MAN" placement of Maddah-Ali and Niesen applied to
all K silos, so the cache never has to be rebuilt when the assignment changes). Loads are in
units (bytes sent / unit size), summed over all messages on the shared link.

Worst case (next batch of every silo disjoint from what it holds), at :math:`M_t`:

- uncoded (send the missing subfiles one by one): :math:`q(K - t)`;
- centralized coded (one sender with all data; Attia and Tandon, "Near optimal coded data
  shuffling for distributed learning", IEEE Trans. IT 2019, arXiv 1801.01875; the XOR of
  :math:`W_{d_k, S \setminus k}` over each (t+1)-set S): :math:`q(K - t)/(t + 1)` for
  :math:`t \ge 1`, and :math:`qK` at t = 0 for this scheme (a cyclic XOR chain reaches
  :math:`q(K-1)` there; not implemented);
- decentralized coded (silos send to each other over a shared relay; each silo j of S sends the
  XOR of its pieces of the other t terms, the "distributed clique cover" of Wan, Tuninetti, Ji,
  Caire and Piantanida, "Fundamental limits of decentralized data shuffling", IEEE Trans. IT
  2020, arXiv 1807.00056): :math:`q(K - t)/t` for :math:`1 \le t < K`; qK at t = 0 (only a holder
  can send); 0 at t = K.

Lower bound (centralized, uncoded storage, worst case). Derived here with the acyclic
index-coding argument, the way Wan et al. and Elmahdy and Mohajer ("On the fundamental limits of
coded data shuffling for distributed machine learning", IEEE Trans. IT 2020, arXiv 1807.04255)
bound these systems: order the silos :math:`k_1..k_K` at random and let :math:`k_j` want the batch
of :math:`k_{j+1}`; the load is at least the demanded bits that none of :math:`k_1..k_j` stores.
Averaging over orders, with :math:`x_s` the fraction of the data stored by exactly s silos other
than its holder (:math:`\sum_s s x_s \le (M - q)/q`) and
:math:`\sum_{j=1}^{L} \binom{L-s}{j}/\binom{L}{j} = (L-s)/(s+1)`,

.. math:: R^*(M) \ge q \cdot \mathrm{conv}_{s \in \{0..K-1\}} \frac{K-1-s}{s+1}\Big|_{s=(M-q)/q}.

At :math:`M_t` (t >= 1) the right side equals :math:`q(K-t)/(t+1)`: the centralized scheme is
optimal under uncoded storage there, and at t = 0 the bound is q(K-1), a factor K/(K-1) below
the scheme. A master holding all data can emulate any decentralized scheme, so the same bound
holds for the decentralized setting (Wan et al. prove a tighter one, within 3/2 of their scheme).

Sources and what was checked. The stored copies of the papers available here show their
abstracts and introductions, not the theorem statements, so the formulas above are derived in
this module and checked by the tests (exhaustively for K <= 5, including the acyclic bound of the
placement by brute force over all silo orders), and the papers are cited for what their abstracts
state: Attia and Tandon, a scheme within a factor K/(K-1) of their lower bound, optimal for K < 5
with aligned coded shuffling; Elmahdy and Mohajer, the exact worst-case load-memory trade-off
under uncoded storage; Wan et al., decentralized converse and schemes within a factor 3/2,
optimal for large storage or K <= 4. Lee et al. ("Speeding up distributed machine learning using
codes", IEEE Trans. IT 2018) treat random (not worst-case) shuffles with a master; their gain
:math:`(\alpha + 1/n)\gamma(n)` equals t+1 with :math:`\alpha = t/K`, :math:`\gamma(n) = n = K`.

Random (not worst-case) demands: with :math:`m_k` the number of units silo k must receive, the
centralized scheme sends :math:`\max_{k \in S} m_k` XORs for each (t+1)-set S
(:func:`centralized_load`), the decentralized one counts senders per S (:func:`decentralized_load`).
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence
from math import comb

import numpy as np

from coded_fl.errors import ConfigurationError

__all__ = [
    "acyclic_bound",
    "centralized_load",
    "centralized_lower_bound",
    "decentralized_load",
    "fanout_load",
    "held_units",
    "holder_cut_bound",
    "reshuffle_bounds",
    "storage_for_level",
    "swap_fanout_load",
    "uncoded_load",
    "worst_case_loads",
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
    group, this equals the plain fan-out (:func:`fanout_load`): no coding of any kind lowers
    the upload of a reshuffle below sending each moved unit once.

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


def reshuffle_bounds(
    holders: Sequence[frozenset[int]], target: Sequence[frozenset[int]], K: int
) -> dict[str, float]:
    """Every load figure of one reshuffle at t = 0 (the gradient code's replicas as the only
    side information), in units.

    Parameters
    ----------
    holders, target
        The current and next holders of each unit.
    K
        The number of silos.

    Returns
    -------
    dict of str to float
        ``plain_copy`` (one upload per receiver), ``fanout`` (each moved unit once),
        ``swap_fanout`` (the scheme: :func:`swap_fanout_load`), ``acyclic``
        (:func:`acyclic_bound`), ``cut`` (:func:`holder_cut_bound`) and ``converse``, the
        larger of the two bounds.
    """
    needs = [
        {n for n, (a, b) in enumerate(zip(holders, target, strict=True)) if k in b and k not in a}
        for k in range(K)
    ]
    side = held_units(holders, K)
    acyc = acyclic_bound(needs, side)
    cut = holder_cut_bound(holders, target)
    return {
        "plain_copy": float(sum(len(n) for n in needs)),
        "fanout": fanout_load(needs),
        "swap_fanout": swap_fanout_load(holders, target),
        "acyclic": acyc,
        "cut": cut,
        "converse": max(acyc, cut),
    }


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


def worst_case_loads(K: int, t: int, q: int = 1) -> dict[str, float]:
    """All worst-case figures at level t: storage, uncoded, both schemes and the lower bound.

    Worst case: each silo holds q units and must receive q others (N = qK).

    Parameters
    ----------
    K
        The number of silos.
    t
        The storage level, ``0..K``.
    q
        Units per silo per epoch.

    Returns
    -------
    dict of str to float
        ``storage`` (:math:`M_t`), ``uncoded``, ``centralized``, ``decentralized`` and
        ``lower_bound`` (loads in units).

    Raises
    ------
    ConfigurationError
        If K < 1, t is outside ``0..K``, or q < 1.

    Examples
    --------
    >>> worst_case_loads(4, 2)["centralized"]
    0.6666666666666666
    """
    M = storage_for_level(K, t, q, K * q)
    return {
        "storage": M,
        "uncoded": uncoded_load(K, t, q),
        "centralized": centralized_load(K, t, q),
        "decentralized": decentralized_load(K, t, q),
        "lower_bound": centralized_lower_bound(K, q, M),
    }
