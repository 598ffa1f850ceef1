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

The achievable loads live in :mod:`~coded_fl.shuffling.plan.loads`, the converse bounds in
:mod:`~coded_fl.shuffling.plan.bounds`; this module re-exports both and sets them side by side
(:func:`worst_case_loads`, :func:`reshuffle_bounds`).
"""

from __future__ import annotations

from collections.abc import Sequence

from coded_fl.shuffling.plan.bounds import (
    acyclic_bound,
    centralized_lower_bound,
    held_units,
    holder_cut_bound,
)
from coded_fl.shuffling.plan.loads import (
    centralized_load,
    decentralized_load,
    fanout_load,
    storage_for_level,
    swap_fanout_load,
    uncoded_load,
)

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
