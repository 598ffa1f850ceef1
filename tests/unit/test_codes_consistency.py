"""What extra replies detect and locate (the documented guarantees), and never a wrong sum."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from coded_fl.codes import FractionalRepetitionCode, PolynomialCode
from coded_fl.codes.consistency import Location, locate
from coded_fl.errors import DecodingError
from coded_fl.field import PrimeField
from coded_fl.linalg import mat_mul
from tests.codes_helpers import all_replies, partition_vectors


def corrupt(reply: torch.Tensor, p: int, rng: np.random.Generator, *, one_coordinate: bool):
    """reply + E with E != 0 (every coordinate, or a single one), elements kept < p."""
    v = reply.to(torch.int64)
    if one_coordinate:
        err = torch.zeros_like(v)
        err[int(rng.integers(v.numel()))] = int(rng.integers(1, p))
    else:
        err = torch.from_numpy(rng.integers(1, p, size=v.numel()))
    return ((v + err) % p).to(torch.uint32)


@pytest.mark.parametrize("n", [3, 4, 5, 6])
def test_polynomial_detects_up_to_e_and_locates_up_to_half(n):
    rng = np.random.default_rng(n)
    for s in range(1, n):
        code = PolynomialCode(n, s)
        p = code.field.p
        replies = all_replies(code, partition_vectors(code, d=3, seed=s))
        for m in range(n - s + 1, n + 1):
            e = m - (n - s)
            for survivors in itertools.combinations(range(n), m):
                honest = {i: replies[i] for i in survivors}
                assert code.check_consistency(honest) == e
                for t in range(1, e + 1):
                    for bad in itertools.combinations(survivors, t):
                        got = dict(honest)
                        one = bool(rng.integers(2))
                        for i in bad:
                            got[i] = corrupt(got[i], p, rng, one_coordinate=one)
                        with pytest.raises(DecodingError) as info:
                            code.decode(got)
                        if 2 * t <= e:
                            assert info.value.suspects == bad, (n, s, survivors, bad)


@pytest.mark.parametrize("seed", range(6))
def test_polynomial_locates_in_larger_codes(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(20, 80))
    s = int(rng.integers(4, n // 2))
    code = PolynomialCode(n, s)
    p = code.field.p
    replies = all_replies(code, partition_vectors(code, d=50, seed=seed))
    e = int(rng.integers(2, 5))
    survivors = sorted(rng.choice(n, n - s + e, replace=False).tolist())
    honest = {i: replies[i] for i in survivors}
    assert code.check_consistency(honest) == e
    t = e // 2
    bad = tuple(sorted(rng.choice(survivors, t, replace=False).tolist()))
    got = dict(honest)
    for i in bad:
        got[i] = corrupt(got[i], p, rng, one_coordinate=seed % 2 == 0)
    with pytest.raises(DecodingError, match="disagree") as info:
        code.decode(got)
    assert info.value.suspects == bad
    with pytest.raises(DecodingError):
        code.check_consistency(got)
    # no redundancy, nothing checked: the documented limit (the caller decides to wait for more)
    exact = {i: got[i] for i in survivors[: n - s]}
    assert code.check_consistency(exact) == 0


def test_repetition_locates_by_majority_and_names_ties():
    code = FractionalRepetitionCode(9, 2)  # groups {0,1,2}, {3,4,5}, {6,7,8}
    p = code.field.p
    rng = np.random.default_rng(0)
    replies = all_replies(code, partition_vectors(code, d=5, seed=0))
    assert code.check_consistency(replies) == 6
    bad = dict(replies)
    bad[4] = corrupt(bad[4], p, rng, one_coordinate=True)
    with pytest.raises(DecodingError) as info:
        code.decode(bad)
    assert info.value.suspects == (4,)
    tie = {i: bad[i] for i in (0, 1, 3, 4, 6, 7, 8)}  # group 1 has two replies that differ
    with pytest.raises(DecodingError, match="no strict majority") as info:
        code.decode(tie)
    assert info.value.suspects == (3, 4)
    # a lone replica cannot be checked: the documented blind spot
    alone = {i: bad[i] for i in (0, 1, 2, 4, 6, 7, 8)}
    assert code.check_consistency(alone) == 4
    assert code.decode(alone).tolist() != code.decode(replies).tolist()


def test_check_false_skips_the_comparison():
    code = PolynomialCode(6, 2)
    rng = np.random.default_rng(1)
    replies = all_replies(code, partition_vectors(code, d=3, seed=1))
    got = dict(replies)
    got[5] = corrupt(got[5], code.field.p, rng, one_coordinate=False)
    with pytest.raises(DecodingError):
        code.decode(got)
    # silo 5 has coefficient 0 (not among the 4 smallest ids): the sum is still exact
    expect = code.decode({i: replies[i] for i in range(4)})
    assert code.decode(got, check=False).tolist() == expect.tolist()


def test_one_extra_reply_detects_but_does_not_name_anyone():
    code = PolynomialCode(8, 3)
    rng = np.random.default_rng(2)
    replies = all_replies(code, partition_vectors(code, d=4, seed=2))
    got = {i: replies[i] for i in range(6)}  # n - s = 5 replies plus one
    got[1] = corrupt(got[1], code.field.p, rng, one_coordinate=True)
    with pytest.raises(DecodingError, match="two extra replies per corrupted one") as info:
        code.decode(got)
    assert info.value.suspects == ()


def test_fewer_partitions_than_replies_needed_still_checks_exactly():
    # K < n - s: the columns of B span less than all polynomials of degree < n - s, so even
    # exactly n - s replies carry parity checks (the general left null space is used)
    code = PolynomialCode(10, 2, num_partitions=4)
    replies = all_replies(code, partition_vectors(code, d=6, seed=4))
    survivors = [0, 1, 2, 4, 5, 7, 8, 9]
    honest = {i: replies[i] for i in survivors}
    assert code.check_consistency(honest) == len(survivors) - 4
    bad = dict(honest)
    bad[4] = corrupt(bad[4], code.field.p, np.random.default_rng(0), one_coordinate=False)
    with pytest.raises(DecodingError):
        code.decode(bad)


def syndromes(h: np.ndarray, errors: np.ndarray, p: int) -> torch.Tensor:
    """:math:`H E` for an error matrix E (|S| x d), as field elements."""
    return torch.from_numpy(mat_mul(h, errors, p).astype(np.uint32))


@pytest.mark.parametrize("n, s", [(5, 2), (6, 3), (7, 2)])
def test_locate_with_radius_one_names_one_silo_only_with_two_checks(n, s):
    """The secure-aggregation server's use: it holds the syndromes, never a reply."""
    code = PolynomialCode(n, s)
    p = code.field.p
    rng = np.random.default_rng(n)
    for m in range(n - s + 1, n + 1):
        survivors = list(range(n - m, n))
        h = code.parity_checks(survivors)
        e = h.shape[0]
        for bad in range(m):
            errors = np.zeros((m, 3), dtype=np.int64)
            errors[bad] = rng.integers(1, p, 3)
            found = locate(code.field, h, syndromes(h, errors, p), radius=1)
            if e >= 2:
                assert found == Location(sets=((bad,),))
            else:
                assert found.sets == () and "two extra replies" in found.why
        if m - 2 >= n - s:  # two corrupted replies are never named with radius 1
            errors = np.zeros((m, 3), dtype=np.int64)
            errors[[0, 1]] = rng.integers(1, p, (2, 3))
            assert len(locate(code.field, h, syndromes(h, errors, p), radius=1).sets) != 1


def test_locate_does_not_choose_between_replies_the_checks_cannot_tell_apart():
    p = 101
    h = np.array([[1, 2, 1, 0], [1, 2, 0, 1]])  # columns 0 and 1 are parallel
    errors = np.zeros((4, 2), dtype=np.int64)
    errors[0] = [3, 4]
    found = locate(PrimeField(p), h, syndromes(h, errors, p), radius=1)
    assert found.sets == ((0,), (1,))


def test_locate_explains_passing_checks_with_the_empty_set():
    h = np.array([[1, 1, 1], [1, 2, 3]])
    assert locate(PrimeField(101), h, torch.zeros((2, 4), dtype=torch.uint32)).sets == ((),)
