"""The load formulas: closed forms, the converse, and the acyclic bound of the real placement."""

from __future__ import annotations

import itertools
from fractions import Fraction
from math import comb

import pytest

from coded_fl.errors import ConfigurationError
from coded_fl.shuffling import (
    centralized_load,
    centralized_lower_bound,
    decentralized_load,
    storage_for_level,
    uncoded_load,
    worst_case_loads,
)


@pytest.mark.parametrize("K", [2, 3, 4, 5, 8, 16])
@pytest.mark.parametrize("q", [1, 3])
def test_worst_case_closed_forms(K, q):
    for t in range(K + 1):
        w = worst_case_loads(K, t, q)
        assert w["storage"] == pytest.approx(q * (1 + t * (K - 1) / K))
        assert w["uncoded"] == pytest.approx(q * (K - t))
        assert w["centralized"] == pytest.approx(q * (K - t) / (t + 1))
        if 1 <= t < K:
            assert w["decentralized"] == pytest.approx(q * (K - t) / t)
        # the scheme meets the uncoded-storage converse for t >= 1; K/(K-1) above it at t = 0
        if t >= 1:
            assert w["lower_bound"] == pytest.approx(w["centralized"])
        else:
            assert w["lower_bound"] == pytest.approx(q * (K - 1))
        assert w["uncoded"] >= (t + 1) * w["centralized"] - 1e-9


def test_identity_behind_the_converse():
    for L in range(1, 12):
        for s in range(L + 1):
            total = sum(Fraction(comb(L - s, j), comb(L, j)) for j in range(1, L + 1))
            assert total == Fraction(L - s, s + 1)


def test_lower_bound_is_convex_and_decreasing():
    K, q = 6, 2
    Ms = [q + x * 0.25 for x in range(int((K - 1) * q / 0.25) + 1)]
    vals = [centralized_lower_bound(K, q, M) for M in Ms]
    diffs = [b - a for a, b in itertools.pairwise(vals)]
    assert all(d <= 1e-12 for d in diffs)
    assert all(b - a >= -1e-12 for a, b in itertools.pairwise(diffs))
    assert vals[-1] == 0.0


def _acyclic_bound_of_placement(K: int, t: int) -> Fraction:
    """Max over orders of the acyclic index-coding bound for the level-t placement, q = 1,
    single-cycle demand (silo k wants the unit of silo k+1): what any scheme must send."""
    T = list(itertools.combinations(range(K), t))
    best = Fraction(0)
    for order in itertools.permutations(range(K)):
        seen: set[int] = set()
        total = Fraction(0)
        for k in order:
            seen.add(k)
            owner = (k + 1) % K
            if owner in seen:
                continue  # an earlier silo holds the whole unit
            total += Fraction(sum(1 for s in T if not seen & set(s)), len(T))
        best = max(best, total)
    return best


@pytest.mark.parametrize("K", [2, 3, 4, 5])
def test_scheme_is_optimal_for_its_placement(K):
    for t in range(1, K + 1):
        bound = _acyclic_bound_of_placement(K, t)
        assert float(bound) == pytest.approx(centralized_load(K, t, 1))


def test_demand_dependent_loads():
    # silos needing nothing cost nothing; one needy silo gets its subfiles uncoded
    assert centralized_load(4, 2, [0, 0, 0, 0]) == 0
    assert centralized_load(4, 2, [1, 0, 0, 0]) == pytest.approx(uncoded_load(4, 2, [1, 0, 0, 0]))
    assert decentralized_load(4, 2, [1, 0, 0, 0]) == pytest.approx(uncoded_load(4, 2, [1, 0, 0, 0]))
    assert decentralized_load(4, 4, 3) == 0


def test_bad_settings_are_refused():
    with pytest.raises(ConfigurationError, match="storage level t"):
        centralized_load(4, 5, 1)
    with pytest.raises(ConfigurationError, match="counts"):
        uncoded_load(3, 1, [1, 2])
    with pytest.raises(ConfigurationError, match="storage M"):
        centralized_lower_bound(4, 2, 1)
    assert storage_for_level(4, 0, 2, 8) == 2
