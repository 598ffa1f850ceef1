"""Fractional repetition for any n > s against an independent oracle (Python ints, brute force
over survivor sets): exact decoding, s + 1 holders per partition, and no reply set that mixes
replicas, so replicas that disagree still give one replica's sum per partition."""

from __future__ import annotations

import itertools

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from coded_fl.codes import FractionalRepetitionCode
from coded_fl.field import PrimeField
from tests.codes_helpers import as_tensor, satisfies_decoding
from tests.conftest import PRIMES


@st.composite
def codes(draw, *, max_n: int):
    p = draw(st.sampled_from(PRIMES))
    n = draw(st.integers(1, max_n))
    s = draw(st.integers(0, n - 1))
    g = n // (s + 1)
    k = draw(st.one_of(st.just(n), st.integers(g, 3 * n)))
    return FractionalRepetitionCode(n, s, num_partitions=k, field=PrimeField(p))


def survivor_sets(code, rng=None, samples=0):
    n, s = code.n, code.s
    if rng is None:
        for m in range(n - s, n + 1):
            yield from itertools.combinations(range(n), m)
        return
    for _ in range(samples):
        m = int(rng.integers(n - s, n + 1))
        yield tuple(sorted(rng.choice(n, m, replace=False).tolist()))


def check_code(code, sets):
    p, n, K = code.field.p, code.n, code.K
    B = [[int(v) for v in row] for row in code.matrix]
    held = [{j for j in range(K) if B[i][j]} for i in range(n)]
    # every partition has >= s + 1 holders; silo i's entries are 0 or its one scale r_i != 0
    # (1 for plain aggregation)
    assert all(len({v for v in row if v}) == 1 for row in B)
    if code.s == 0:
        assert all(v in (0, 1) for row in B for v in row)
    assert all(sum(1 for i in range(n) if B[i][j]) >= code.s + 1 for j in range(K))
    # holders of a partition hold exactly the same partitions (a group code)
    for j in range(K):
        hs = [i for i in range(n) if B[i][j]]
        assert all(held[i] == held[hs[0]] for i in hs)
    for S in sets:
        a = [int(v) for v in code.decoding_vector(list(S))]
        assert satisfies_decoding(a, code.matrix[list(S)], p), (code, S)
        used = [i for i, ai in zip(S, a, strict=True) if ai]
        # a reads r_i^-1 of the silos it uses, 0 elsewhere
        assert all(ai == 0 or ai * max(B[i]) % p == 1 for i, ai in zip(S, a, strict=True))
        # every partition covered exactly once, by exactly one used silo: no replica mixing
        for j in range(K):
            assert sum(1 for i in used if B[i][j]) == 1, (code, S, j)
        # the smallest surviving id of each group is the one read
        firsts = {}
        for i in S:
            firsts.setdefault(code.group_of(i), i)
        assert sorted(used) == sorted(firsts.values())


@settings(max_examples=60, deadline=None)
@given(code=codes(max_n=9))
def test_every_survivor_set_small_n(code):
    check_code(code, survivor_sets(code))


@settings(max_examples=40, deadline=None)
@given(code=codes(max_n=80), seed=st.integers(0, 2**32 - 1))
def test_sampled_survivor_sets_large_n(code, seed):
    check_code(code, survivor_sets(code, np.random.default_rng(seed), samples=20))


@settings(max_examples=40, deadline=None)
@given(code=codes(max_n=12), seed=st.integers(0, 2**32 - 1))
def test_disagreeing_replicas_decode_to_one_replicas_values(code, seed):
    """Every silo has its own version of each partition it holds; the decoded sum is the sum,
    over partitions, of the version of the one silo read for that partition's group."""
    rng = np.random.default_rng(seed)
    p = code.field.p
    version = rng.integers(0, p, size=(code.n, code.K, 2), dtype=np.int64)
    replies = {
        i: code.encode(i, [as_tensor(version[i, j].tolist()) for j in code.support(i)])
        for i in range(code.n)
    }
    S = next(iter(survivor_sets(code, rng, samples=1)))
    a = code.decoding_vector(list(S))
    reader = {j: i for i, ai in zip(S, a, strict=True) if ai for j in code.support(i)}
    expect = [sum(int(version[reader[j], j, c]) for j in range(code.K)) % p for c in range(2)]
    got = code.decode({i: replies[i] for i in S}, check=False)
    assert got.tolist() == expect
