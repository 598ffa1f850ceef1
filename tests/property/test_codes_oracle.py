"""Randomised codes up to n = 200 against galois (linear algebra) and Python ints (sums)."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from coded_fl.codes import FractionalRepetitionCode, PolynomialCode
from coded_fl.field import PrimeField
from tests.codes_helpers import all_replies, partition_vectors, python_sum
from tests.conftest import PRIMES, galois_field


@st.composite
def code_and_survivors(draw, *, max_n: int = 200):
    p = draw(st.sampled_from(PRIMES))
    n = draw(st.integers(1, min(max_n, p - 1)))
    s = draw(st.integers(0, n - 1))
    smallest = math.ceil(n / (s + 1))
    k = draw(st.one_of(st.just(n), st.integers(smallest, max(smallest, 2 * n))))
    repetition = n % (s + 1) == 0 and draw(st.booleans())
    field = PrimeField(p)
    if repetition:
        code = FractionalRepetitionCode(n, s, num_partitions=k, field=field)
    else:
        code = PolynomialCode(n, s, num_partitions=k, field=field)
    m = draw(st.integers(n - s, n))
    seed = draw(st.integers(0, 2**32 - 1))
    survivors = np.random.default_rng(seed).choice(n, m, replace=False).tolist()
    return code, survivors, seed


@given(case=code_and_survivors())
def test_decoding_vector_against_galois(case):
    code, survivors, _ = case
    GF = galois_field(code.field.p)
    a = GF(code.decoding_vector(survivors))
    b_s = GF(code.matrix[survivors])
    assert np.array_equal(a @ b_s, GF(np.ones(code.K, dtype=np.int64)))
    h = code.parity_checks(survivors)
    assert not np.any(GF(h) @ b_s)
    rank = np.linalg.matrix_rank(b_s)
    assert h.shape == (len(survivors) - rank, len(survivors))
    if h.shape[0]:
        assert np.linalg.matrix_rank(GF(h)) == h.shape[0]
    assert code.storage == math.ceil(code.K * (code.s + 1) / code.n)


@given(case=code_and_survivors())
def test_decode_equals_the_python_int_sum(case):
    code, survivors, seed = case
    vectors = partition_vectors(code, d=3, seed=seed)
    replies = all_replies(code, vectors)
    got = code.decode({i: replies[i] for i in survivors})
    assert got.tolist() == python_sum(vectors, code.field.p)
