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

from collections.abc import Iterable, Sequence
from math import comb

from coded_fl.errors import ConfigurationError

__all__ = [
    "centralized_load",
    "centralized_lower_bound",
    "decentralized_load",
    "fanout_load",
    "storage_for_level",
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
