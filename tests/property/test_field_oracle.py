"""Every GF(p) operation, on both backends, against galois and Python integers."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from coded_fl.errors import ConfigurationError, InputError
from coded_fl.field import PrimeField
from tests.conftest import PRIMES, galois_field

BACKENDS = ["auto", "torch"]


def elements(p: int, size: int | None = None):
    edge = st.sampled_from([0, 1, 2, p - 2, p - 1, p // 2, (p + 1) // 2])
    one = st.one_of(edge, st.integers(0, p - 1))
    n = st.integers(1, 40) if size is None else st.just(size)
    return n.flatmap(lambda k: st.lists(one, min_size=k, max_size=k))


@st.composite
def field_and_pair(draw):
    p = draw(st.sampled_from(PRIMES))
    n = draw(st.integers(1, 40))
    return p, draw(elements(p, n)), draw(elements(p, n))


def t32(values):
    return torch.tensor(np.array(values, dtype=np.uint32))


@pytest.mark.parametrize("backend", BACKENDS)
@given(case=field_and_pair())
def test_binary_ops_match_galois(backend, case):
    p, a, b = case
    F = PrimeField(p, backend=backend)
    GF = galois_field(p)
    ga, gb = GF(a), GF(b)
    ta, tb = t32(a), t32(b)
    assert F.add(ta, tb).tolist() == (ga + gb).tolist()
    assert F.sub(ta, tb).tolist() == (ga - gb).tolist()
    assert F.mul(ta, tb).tolist() == (ga * gb).tolist()
    assert F.neg(ta).tolist() == (-ga).tolist()
    assert F.add(ta, tb).dtype == torch.uint32


@pytest.mark.parametrize("backend", BACKENDS)
@given(case=field_and_pair(), e=st.integers(0, 2**40))
def test_pow_inverse_and_scalar_mul_match_python_ints(backend, case, e):
    p, a, b = case
    F = PrimeField(p, backend=backend)
    ta = t32(a)
    assert F.pow(ta, e).tolist() == [pow(x, e, p) for x in a]
    assert F.mul(ta, b[0]).tolist() == [x * b[0] % p for x in a]
    assert F.mul(ta, -b[0]).tolist() == [x * -b[0] % p for x in a]
    nonzero = [x for x in a if x]
    if nonzero:
        inv = F.inv(t32(nonzero)).tolist()
        assert inv == [pow(x, -1, p) for x in nonzero]
        assert F.pow(t32(nonzero), -3).tolist() == [pow(x, -3, p) for x in nonzero]


@pytest.mark.parametrize("backend", BACKENDS)
@given(data=st.data())
def test_lincomb_and_matmul_match_python_ints(backend, data):
    p = data.draw(st.sampled_from(PRIMES))
    k = data.draw(st.integers(1, 9))
    d = data.draw(st.integers(1, 5000))
    rows = data.draw(st.integers(1, 4))
    seed = data.draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    vecs = rng.integers(0, p, size=(k, d), dtype=np.int64)
    vecs[:, 0] = p - 1  # the largest products
    coeffs = data.draw(st.lists(st.integers(-(2**70), 2**70), min_size=k, max_size=k))
    F = PrimeField(p, backend=backend)
    tv = [torch.from_numpy(v.astype(np.uint32)) for v in vecs]
    expect = [sum(int(c) * int(vecs[j, i]) for j, c in enumerate(coeffs)) % p for i in range(d)]
    assert F.lincomb(coeffs, tv).tolist() == expect
    m = rng.integers(0, p, size=(rows, k))
    m[0, :] = p - 1
    got = F.matmul(m, tv).tolist()
    for r in range(rows):
        assert got[r] == [
            sum(int(m[r, j]) * int(vecs[j, i]) for j in range(k)) % p for i in range(d)
        ]
    stacked = torch.stack(tv)
    assert F.matmul(m, stacked).tolist() == got


@pytest.mark.parametrize("backend", BACKENDS)
def test_large_lincomb_cannot_overflow(backend):
    # 300 terms of (p-1)*(p-1): the accumulator bound is the point of this test.
    p = 2**31 - 1
    F = PrimeField(p, backend=backend)
    k, d = 300, 3
    vecs = [torch.full((d,), p - 1, dtype=torch.uint32) for _ in range(k)]
    assert F.lincomb([p - 1] * k, vecs).tolist() == [k * (p - 1) ** 2 % p] * d


@given(data=st.data())
def test_signed_lift_round_trip(data):
    p = data.draw(st.sampled_from(PRIMES))
    half = (p - 1) // 2
    xs = data.draw(st.lists(st.integers(-half, half), min_size=1, max_size=50))
    F = PrimeField(p)
    fx = F.from_signed(torch.tensor(xs, dtype=torch.int64))
    assert fx.tolist() == [x % p for x in xs]
    assert F.to_signed(fx).tolist() == xs
    Ft = PrimeField(p, backend="torch")
    assert Ft.to_signed(Ft.from_signed(torch.tensor(xs))).tolist() == xs


def test_element_reduces_any_integers_and_validate_refuses_out_of_range(prime):
    F = PrimeField(prime)
    assert F.element([-1, prime, prime + 5, 2**70]).tolist() == [
        prime - 1,
        0,
        5 % prime,
        2**70 % prime,
    ]
    F.validate(F.element([0, prime - 1]))
    bad = torch.tensor(np.array([0, prime], dtype=np.uint32)) if prime < 2**32 - 1 else None
    with pytest.raises(InputError, match="not an element"):
        F.validate(bad)
    with pytest.raises(InputError, match="uint32"):
        F.validate(torch.tensor([1, 2]))


def test_errors_for_wrong_inputs():
    F = PrimeField()
    a = F.element([1, 2, 3])
    with pytest.raises(InputError, match="shape mismatch"):
        F.add(a, F.element([1, 2]))
    with pytest.raises(InputError, match="no inverse"):
        F.inv(F.element([1, 0]))
    with pytest.raises(InputError, match="no inverse"):
        F.inv_scalar(0)
    with pytest.raises(InputError, match="2 coefficients for 3 vectors"):
        F.lincomb([1, 2], [a, a, a])
    with pytest.raises(InputError, match="uint32"):
        F.add(a, torch.tensor([1, 2, 3], dtype=torch.int32))
    with pytest.raises(InputError, match="integers"):
        F.element(torch.tensor([0.5]))
    with pytest.raises(ConfigurationError, match="backend"):
        PrimeField(backend="gpu")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="not an odd prime"):
        PrimeField(2**31 - 3)


def test_field_equality_and_repr():
    assert PrimeField() == PrimeField(2**31 - 1)
    assert PrimeField(101) != PrimeField()
    assert len({PrimeField(), PrimeField()}) == 1
    assert repr(PrimeField(101)) == "PrimeField(p=101)"
    assert PrimeField().bits == 31
