"""Small dense linear algebra over GF(p) against galois and Python integers."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from coded_fl import linalg
from coded_fl.errors import InputError
from tests.conftest import PRIMES, galois_field


@st.composite
def square(draw, max_n=8):
    p = draw(st.sampled_from(PRIMES))
    n = draw(st.integers(1, max_n))
    rows = draw(
        st.lists(st.lists(st.integers(0, p - 1), min_size=n, max_size=n), min_size=n, max_size=n)
    )
    return p, np.array(rows, dtype=np.int64)


@given(case=square())
def test_inverse_and_solve_match_galois(case):
    p, a = case
    GF = galois_field(p)
    ga = GF(a)
    singular = np.linalg.matrix_rank(ga) < a.shape[0]
    if singular:
        with pytest.raises(linalg.SingularMatrixError):
            linalg.inverse(a, p)
        return
    inv = linalg.inverse(a, p)
    assert inv.tolist() == np.linalg.inv(ga).tolist()
    b = np.arange(a.shape[0], dtype=np.int64) * 7 % p
    assert linalg.solve(a, b, p).tolist() == np.linalg.solve(ga, GF(b)).tolist()


@given(case=square(max_n=12), other=st.integers(1, 6))
def test_mat_mul_matches_python_ints(case, other):
    p, a = case
    b = (a[:, :1] * np.arange(1, other + 1)[None, :] + 3) % p
    got = linalg.mat_mul(a, b, p)
    for i in range(a.shape[0]):
        for j in range(b.shape[1]):
            assert got[i, j] == sum(int(a[i, k]) * int(b[k, j]) for k in range(a.shape[1])) % p


@given(data=st.data())
def test_lagrange_basis_interpolates_any_polynomial(data):
    p = data.draw(st.sampled_from(PRIMES))
    k = data.draw(st.integers(1, 10))
    nodes = data.draw(st.lists(st.integers(0, p - 1), min_size=k, max_size=k, unique=True))
    targets = data.draw(st.lists(st.integers(0, p - 1), min_size=1, max_size=6))
    coeffs = data.draw(st.lists(st.integers(0, p - 1), min_size=k, max_size=k))

    def poly(x: int) -> int:
        return sum(c * pow(x, j, p) for j, c in enumerate(coeffs)) % p

    basis = linalg.lagrange_basis(nodes, targets, p)
    values = np.array([poly(x) for x in nodes], dtype=np.int64)
    got = [
        sum(int(basis[r, i]) * int(values[i]) for i in range(k)) % p for r in range(len(targets))
    ]
    assert got == [poly(t) for t in targets]


@given(data=st.data())
def test_vandermonde_and_batch_inverse(data):
    p = data.draw(st.sampled_from(PRIMES))
    xs = data.draw(st.lists(st.integers(1, p - 1), min_size=1, max_size=20))
    v = linalg.vandermonde(xs, 5, p)
    assert v.tolist() == [[pow(x, j, p) for j in range(5)] for x in xs]
    assert linalg.batch_inverse(xs, p).tolist() == [pow(x, -1, p) for x in xs]
    assume(len(set(xs)) == len(xs))


@st.composite
def matrix(draw, max_rows=8, max_cols=7):
    """A matrix over a PRIMES field, often rank deficient (small entries, repeated rows)."""
    p = draw(st.sampled_from(PRIMES))
    r = draw(st.integers(1, max_rows))
    c = draw(st.integers(0, max_cols))
    hi = draw(st.sampled_from([2, p - 1]))
    rows = draw(
        st.lists(st.lists(st.integers(0, hi), min_size=c, max_size=c), min_size=r, max_size=r)
    )
    a = np.array(rows, dtype=np.int64).reshape(r, c)
    if r > 1 and draw(st.booleans()):
        a[-1] = a[0]
    return p, a


@given(case=matrix())
def test_rref_and_rank_match_galois(case):
    p, a = case
    m, pivots = linalg.rref(a, p)
    if a.shape[1]:
        assert m.tolist() == galois_field(p)(a).row_reduce().tolist()
    assert (
        linalg.rank(a, p)
        == len(pivots)
        == (np.linalg.matrix_rank(galois_field(p)(a)) if a.size else 0)
    )


@given(case=matrix())
def test_left_null_space_is_a_basis(case):
    p, a = case
    GF = galois_field(p)
    h = linalg.left_null_space(a, p)
    rank = np.linalg.matrix_rank(GF(a)) if a.size else 0
    assert h.dtype == np.int64
    assert h.shape == (a.shape[0] - rank, a.shape[0])
    assert not np.any(GF(h) @ GF(a))  # h^T A = 0
    if h.shape[0]:
        assert np.linalg.matrix_rank(GF(h)) == h.shape[0]  # independent rows
        # reduced on the free columns: each row has a 1 at its own free column, 0 at the others
        free = [c for c in range(a.shape[0]) if c not in linalg.rref(a.T, p)[1]]
        assert h[:, free].tolist() == np.eye(len(free), dtype=np.int64).tolist()


def test_errors():
    p = 101
    with pytest.raises(InputError, match="no inverse"):
        linalg.batch_inverse([1, 0], p)
    with pytest.raises(InputError, match="distinct"):
        linalg.lagrange_basis([1, 1], [0], p)
    with pytest.raises(InputError, match="square"):
        linalg.inverse(np.ones((2, 3), dtype=np.int64), p)
    with pytest.raises(linalg.SingularMatrixError, match="singular"):
        linalg.inverse(np.ones((2, 2), dtype=np.int64), p)
    with pytest.raises(InputError, match="matrix"):
        linalg.left_null_space(np.ones(3, dtype=np.int64), p)
