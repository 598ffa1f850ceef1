"""Approximate gradient coding: best estimate, its error bound, its exact region."""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import numpy as np
import pytest
import torch

from coded_fl.codes import ApproximateCode
from coded_fl.errors import DecodingError, InputError
from tests.codes_helpers import as_tensor


def signed_partitions(code, d, max_abs, rng):
    """K vectors of signed integers |q| <= max_abs (quantized partial updates) and their lift."""
    q = rng.integers(-max_abs, max_abs + 1, size=(code.K, d))
    q[:, 0] = max_abs
    q[:, 1] = -max_abs
    lifted = [as_tensor([int(v) % code.field.p for v in row]) for row in q]
    return q, lifted


@pytest.mark.parametrize(
    ("n", "s", "r", "K"), [(6, 3, 2, 6), (10, 4, 3, 10), (12, 6, 2, 25), (9, 4, 4, 9)]
)
def test_error_bound_holds_on_random_inputs(n, s, r, K):
    code = ApproximateCode(n, s, replication=r, num_partitions=K)
    rng = np.random.default_rng(n * s)
    max_abs = 1000
    F = code.field
    for _ in range(30):
        q, lifted = signed_partitions(code, 20, max_abs, rng)
        replies = {i: code.encode(i, [lifted[j] for j in code.support(i)]) for i in range(n)}
        stragglers = set(rng.choice(n, int(rng.integers(0, s + 1)), replace=False).tolist())
        est = code.estimate({i: v for i, v in replies.items() if i not in stragglers})
        true = q.sum(axis=0)
        got = F.to_signed(est.total).numpy()
        assert got.tolist() == q[list(est.recovered)].sum(axis=0).tolist()  # exact on C
        assert np.abs(got - true).max() <= est.error_bound(max_abs)
        rescaled = np.abs(est.scale * got - true).max()
        assert rescaled <= est.error_bound(max_abs, rescaled=True) + 1e-6
        assert est.exact == (not est.missing)
        assert est.missing_fraction == len(est.missing) / K
        if len(stragglers) <= code.exact_tolerance:
            assert est.exact
            assert (
                F.to_signed(
                    code.decode({i: v for i, v in replies.items() if i not in stragglers})
                ).tolist()
                == true.tolist()
            )


def test_storage_replication_and_refusals():
    code = ApproximateCode(12, 5, replication=2)
    assert code.replication == 2 < code.s + 1
    assert code.storage == 2 == code.storage_lower_bound
    assert code.exact_tolerance == 1 and not code.exact
    uneven = ApproximateCode(7, 4, replication=2)  # groups of 3, 2 and 2
    assert [len(g) for g in uneven.groups] == [3, 2, 2] and uneven.replication == 2
    est_code = ApproximateCode(6, 3, replication=2)
    F = est_code.field
    replies = {i: est_code.encode(i, [F.element([1])] * 2) for i in (0, 1, 4)}
    with pytest.raises(DecodingError, match="estimate"):
        est_code.decode(replies)
    with pytest.raises(DecodingError, match="need at least"):
        est_code.estimate({0: replies[0]})
    with pytest.raises(InputError, match="max_abs"):
        est_code.estimate(replies).error_bound(-1)


@pytest.mark.parametrize(("n", "r", "K"), [(6, 2, 6), (7, 2, 7), (8, 3, 11)])
def test_expected_missing_fraction_matches_enumeration(n, r, K):
    code = ApproximateCode(n, n - 1, replication=r, num_partitions=K)
    F = code.field
    replies = {i: code.encode(i, [F.element([1])] * len(code.support(i))) for i in range(n)}
    for t in range(n):  # t stragglers, every set of them
        total = Fraction(0)
        sets = list(itertools.combinations(range(n), t))
        for stragglers in sets:
            kept = {i: v for i, v in replies.items() if i not in stragglers}
            total += Fraction(len(code.estimate(kept, check=False).missing), K)
        assert math.isclose(code.expected_missing_fraction(t), float(total / len(sets)))


def test_estimate_refuses_inconsistent_replicas():
    code = ApproximateCode(6, 3, replication=3)
    F = code.field
    replies = {i: code.encode(i, [F.element([j]) for j in code.support(i)]) for i in range(6)}
    replies[1] = torch.tensor(np.array([5], dtype=np.uint32))
    with pytest.raises(DecodingError) as info:
        code.estimate(replies)
    assert info.value.suspects == (1,)
