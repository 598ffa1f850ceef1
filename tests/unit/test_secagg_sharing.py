"""Mask sharing: any U holders recover any weighted mask sum; T shares are uniform."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from coded_fl.errors import ConfigurationError, DecodingError
from coded_fl.field import PrimeField
from coded_fl.secagg.sharing import MaskSharing
from tests.conftest import PRIMES


@given(data=st.data())
def test_any_u_holders_recover_weighted_mask_sums(data):
    p = data.draw(st.sampled_from(PRIMES[:4]))
    n = data.draw(st.integers(1, 9))
    u = data.draw(st.integers(1, n))
    t = data.draw(st.integers(0, u - 1))
    d = data.draw(st.integers(1, 40))
    F = PrimeField(p)
    ms = MaskSharing(n=n, privacy=t, threshold=u, length=d, field=F)
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    streams = [
        torch.from_numpy(rng.integers(0, p, ms.stream_length).astype(np.uint32)) for _ in range(n)
    ]
    shares = [ms.encode(ms.pieces_from_stream(s)) for s in streams]  # shares[i][j]: i's share for j
    weights = rng.integers(0, p, (2, n))
    holders = sorted(data.draw(st.sets(st.integers(0, n - 1), min_size=u, max_size=n)))
    replies = {j: F.matmul(weights, [shares[i][j] for i in range(n)]) for j in holders}
    got = ms.decode(replies)
    for r in range(2):
        expect = [
            sum(int(weights[r, i]) * int(streams[i][e]) for i in range(n)) % p for e in range(d)
        ]
        assert got[r].tolist() == expect


def test_t_shares_are_exactly_uniform_whatever_the_mask():
    # p = 11, n = 4, T = 2, U = 3, d = 1: enumerate all noise for two different masks; the joint
    # distribution of any 2 shares is uniform on GF(11)^2 in both cases (exact, not sampled).
    p, n, t, u = 11, 4, 2, 3
    F = PrimeField(p)
    ms = MaskSharing(n=n, privacy=t, threshold=u, length=1, field=F)
    w = ms.encoding_matrix
    for mask in (0, 5):
        for pair in itertools.combinations(range(n), 2):
            counts: dict[tuple[int, int], int] = {}
            for noise in itertools.product(range(p), repeat=t):
                pieces = np.array([mask, *noise], dtype=np.int64)
                sh = tuple(int(w[j] @ pieces % p) for j in pair)
                counts[sh] = counts.get(sh, 0) + 1
            assert len(counts) == p * p and set(counts.values()) == {1}, (mask, pair)


def test_errors():
    F = PrimeField(101)
    with pytest.raises(ConfigurationError, match="0 <= T < U <= n"):
        MaskSharing(n=3, privacy=2, threshold=2, length=4, field=F)
    with pytest.raises(ConfigurationError, match="too small"):
        MaskSharing(n=60, privacy=1, threshold=50, length=4, field=F)
    ms = MaskSharing(n=4, privacy=1, threshold=3, length=4, field=F)
    with pytest.raises(DecodingError, match="U=3"):
        ms.decode({0: F.zeros((1, ms.piece_length)), 1: F.zeros((1, ms.piece_length))})
