"""The decoder's hot loop (``PrimeField.lincomb``): grouping, flushes, in-pass validation."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from coded_fl.errors import InputError
from coded_fl.field import PrimeField
from tests.conftest import PRIMES


def _python_lincomb(coeffs: list[int], vecs: np.ndarray, p: int) -> list[int]:
    return [
        sum(int(c) * int(v[i]) for c, v in zip(coeffs, vecs, strict=True)) % p
        for i in range(vecs.shape[1])
    ]


@pytest.mark.parametrize("p", PRIMES)
@pytest.mark.parametrize("k", [1, 3, 4, 5, 8, 11, 67])
def test_lincomb_groups_and_tails_match_python_ints(p, k):
    rng = np.random.default_rng(k * 7919 + p % 1000)
    d = 2048 + 77  # one full block and a tail
    vecs = rng.integers(0, p, size=(k, d), dtype=np.int64)
    vecs[:, :5] = p - 1  # the largest products
    coeffs = [int(c) for c in rng.integers(0, p, size=k)]
    coeffs[0] = p - 1
    F = PrimeField(p)
    got = F.lincomb(coeffs, [torch.from_numpy(v.astype(np.uint32)) for v in vecs], validate=True)
    assert got.tolist() == _python_lincomb(coeffs, vecs, p)


@pytest.mark.parametrize("p", [2**31 - 1, 2**31 - 19])
def test_lincomb_past_the_periodic_reduction(p):
    # more than 4096 inputs: the generic path reduces its accumulators mid-way
    k, d = 4100, 3
    vec = torch.full((d,), p - 1, dtype=torch.uint32)
    F = PrimeField(p)
    assert F.lincomb([p - 1] * k, [vec] * k).tolist() == [k * (p - 1) ** 2 % p] * d


@pytest.mark.parametrize("backend", ["auto", "torch"])
@pytest.mark.parametrize("p", [2**31 - 1, 65537])
def test_validate_refuses_non_elements_and_names_the_vector(backend, p):
    F = PrimeField(p, backend=backend)
    good = F.element([1, 2, 3])
    bad = torch.tensor(np.array([1, p, 3], dtype=np.uint32))
    # without validation any uint32 input still gives the exact sum mod p
    assert F.lincomb([1, 1], [good, bad], validate=False).tolist() == [2, p % p + 2, 6]
    with pytest.raises(InputError, match=r"vectors\[1\].*not an element"):
        F.lincomb([1, 1], [good, bad], validate=True)
    with pytest.raises(InputError, match=r"vectors\[1\].*not an element"):
        F.matmul([[1, 1]], [good, bad], validate=True)
    assert F.matmul([[1, 2]], [good, good], validate=True).tolist() == [[3, 6, 9]]


@pytest.mark.parametrize("backend", ["auto", "torch"])
def test_lincomb_writes_into_out(backend):
    F = PrimeField(backend=backend)
    a, b = F.element([1, 2, 3]), F.element([4, 5, 6])
    out = torch.empty(3, dtype=torch.uint32)
    got = F.lincomb([2, 1], [a, b], out=out)
    assert got is out and out.tolist() == [6, 9, 12]
    with pytest.raises(InputError, match="shape mismatch"):
        F.lincomb([2, 1], [a, b], out=torch.empty(4, dtype=torch.uint32))
    with pytest.raises(InputError, match="uint32"):
        F.lincomb([2, 1], [a, b], out=torch.empty(3, dtype=torch.int64))
    with pytest.raises(InputError, match="contiguous"):
        F.lincomb([2, 1], [a, b], out=torch.empty(6, dtype=torch.uint32)[::2])


@pytest.mark.parametrize("p", [2**31 - 1, 2**31 - 19])
@pytest.mark.parametrize("k", [2, 4, 9])
def test_any_uint32_input_gives_the_exact_sum_mod_p(p, k):
    # the overflow bound of the kernels is stated for inputs below 2^32, not only below p
    F = PrimeField(p)
    top = torch.full((5,), 2**32 - 1, dtype=torch.uint32)
    coeffs = [p - 1] * k
    expect = [k * (p - 1) * (2**32 - 1) % p] * 5
    assert F.lincomb(coeffs, [top] * k, validate=False).tolist() == expect
    with pytest.raises(InputError):
        F.lincomb(coeffs, [top] * k, validate=True)
