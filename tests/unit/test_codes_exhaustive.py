"""Every survivor set, for every n <= 10 and every s < n: exact decoding, exact storage.

The oracle is Python integers: :math:`a^T B_S = 1^T` is checked term by term, and the decoded
vector is compared with the sum of the partitions' vectors.
"""

from __future__ import annotations

import itertools
import math

import pytest

from coded_fl.codes import FractionalRepetitionCode, PlainAggregation, PolynomialCode, make_code
from coded_fl.field import PrimeField
from tests.codes_helpers import all_replies, partition_vectors, python_sum, satisfies_decoding

NS = [(n, s) for n in range(1, 11) for s in range(n)]


def survivor_sets(n: int, s: int):
    for m in range(n - s, n + 1):
        yield from itertools.combinations(range(n), m)


def constructions(
    n: int,
    s: int,
    p: int = 2**31 - 1,
    num_partitions: int | None = None,
    *,
    unequal_groups: bool = True,
):
    field = PrimeField(p)
    yield PolynomialCode(n, s, field=field, num_partitions=num_partitions)
    if unequal_groups or n % (s + 1) == 0:  # else groups of unequal size, more storage
        yield FractionalRepetitionCode(n, s, field=field, num_partitions=num_partitions)
    if s == 0:
        yield PlainAggregation(n, field=field, num_partitions=num_partitions)


@pytest.mark.parametrize(("n", "s"), NS)
def test_every_survivor_set_decodes_exactly(n, s):
    p = 2**31 - 1
    for code in constructions(n, s, p):
        vectors = partition_vectors(code, d=2, seed=n * 100 + s)
        replies = all_replies(code, vectors)
        expect = python_sum(vectors, p)
        for survivors in survivor_sets(n, s):
            a = code.decoding_vector(survivors)
            assert satisfies_decoding(a, code.matrix[list(survivors)], p), (code, survivors)
            got = code.decode({i: replies[i] for i in survivors})  # check=True: no false alarm
            assert got.tolist() == expect, (code, survivors)


@pytest.mark.parametrize("p", [101, 2**31 - 19, 65537])
@pytest.mark.parametrize("n", [1, 4, 7, 10])
def test_every_survivor_set_other_primes(n, p):
    for s in range(n):
        for code in constructions(n, s, p):
            for survivors in survivor_sets(n, s):
                a = code.decoding_vector(survivors)
                assert satisfies_decoding(a, code.matrix[list(survivors)], p), (code, survivors)


@pytest.mark.parametrize(("n", "s"), [(n, s) for n in range(1, 8) for s in range(n)])
def test_other_partition_counts(n, s):
    p = 2**31 - 1
    smallest = math.ceil(n / (s + 1))
    for K in sorted({smallest, max(smallest, n - 1), n + 1, 2 * n + 1}):
        for code in constructions(n, s, p, num_partitions=K):
            assert code.K == K
            vectors = partition_vectors(code, d=2, seed=K)
            replies = all_replies(code, vectors)
            expect = python_sum(vectors, p)
            for survivors in survivor_sets(n, s):
                a = code.decoding_vector(survivors)
                assert satisfies_decoding(a, code.matrix[list(survivors)], p)
                assert code.decode({i: replies[i] for i in survivors}).tolist() == expect


@pytest.mark.parametrize(("n", "s"), NS)
def test_storage_is_the_lower_bound(n, s):
    for code in constructions(n, s, unequal_groups=False):
        assert code.replication == s + 1
        assert all(len(code.holders(j)) == s + 1 for j in range(code.K))
        assert code.storage == s + 1 == code.storage_lower_bound
        assert all(len(code.support(i)) == s + 1 for i in range(n))
    for K in range(math.ceil(n / (s + 1)), 3 * n + 1):
        for code in constructions(n, s, num_partitions=K, unequal_groups=False):
            assert code.storage == math.ceil(K * (s + 1) / n) == code.storage_lower_bound


@pytest.mark.parametrize(("n", "s"), NS)
def test_matrix_is_zero_exactly_outside_the_placement(n, s):
    for code in constructions(n, s):
        for i in range(n):
            held = set(code.support(i))
            row = code.matrix[i]
            assert [j for j in range(code.K) if row[j] != 0] == sorted(held)
            assert code.coefficients(i).tolist() == [int(row[j]) for j in code.support(i)]
            assert all(i in code.holders(j) for j in held)


def test_polynomial_matrix_matches_the_formula_with_python_ints():
    for n, s in [(1, 0), (5, 2), (9, 4), (10, 9), (10, 0)]:
        code = PolynomialCode(n, s)
        p = code.field.p
        x = [int(v) for v in code.points]
        assert len(set(x)) == n and all(0 < v < p for v in x)
        for j in range(code.K):
            others = [k for k in range(n) if k not in code.holders(j)]
            for i in code.holders(j):
                assert int(code.matrix[i, j]) == math.prod((x[i] - x[k]) % p for k in others) % p


def test_make_code_picks_each_construction():
    assert type(make_code(7, 0)) is PlainAggregation
    assert type(make_code(7, 2)) is FractionalRepetitionCode  # auto: never mixes replicas
    assert type(make_code(6, 2, kind="repetition")) is FractionalRepetitionCode
    assert type(make_code(6, 2, kind="polynomial")) is PolynomialCode
    assert make_code(5, 1, num_partitions=9).K == 9
