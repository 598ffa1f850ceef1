"""Mask expansion: reproducible, exactly uniform, rejection sampling checked against a reference."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from scipy import stats

from coded_fl.errors import InputError
from coded_fl.prg import expand_field_elements, fresh_seed
from tests.conftest import PRIMES


def reference(seed: bytes, count: int, p: int) -> list[int]:
    """Word by word: AES-256-CTR keystream, low bits, reject >= p."""
    enc = Cipher(algorithms.AES(seed), modes.CTR(bytes(16))).encryptor()
    mask = (1 << p.bit_length()) - 1
    out: list[int] = []
    while len(out) < count:
        w = int.from_bytes(enc.update(bytes(4)), "little") & mask
        if w < p:
            out.append(w)
    return out


@pytest.mark.parametrize("count", [0, 1, 5, 1000, 300_001])
def test_matches_the_word_by_word_reference(prime, count):
    seed = bytes(range(32))
    got = expand_field_elements(seed, count, prime)
    assert got.dtype == torch.uint32 and got.shape == (count,)
    if count <= 1000:
        assert got.tolist() == reference(seed, count, prime)
    else:
        assert int(got.to(torch.int64).max()) < prime
        assert got[:1000].tolist() == reference(seed, 1000, prime)


def test_rejection_keeps_the_order_of_accepted_words():
    # p just above 2^30: about half the words are rejected, which exercises the top-up path.
    p = 2**30 + 3
    seed = bytes([7] * 32)
    assert expand_field_elements(seed, 3000, p).tolist() == reference(seed, 3000, p)


def test_reproducible_and_seed_sensitive():
    a = expand_field_elements(bytes(32), 10_000, 2**31 - 1)
    b = expand_field_elements(bytes(32), 10_000, 2**31 - 1)
    c = expand_field_elements(bytes(31) + b"\x01", 10_000, 2**31 - 1)
    assert torch.equal(a, b) and not torch.equal(a, c)
    assert torch.equal(expand_field_elements(bytes(32), 100, 2**31 - 1), a[:100])


@pytest.mark.parametrize("p", [101, 65537, 2**31 - 1])
def test_uniform_chi_square(p):
    n = 1_000_000
    x = expand_field_elements(b"uniformity-test-seed-0123456789!", n, p).numpy().astype(np.int64)
    if p <= 65537:
        counts = np.bincount(x, minlength=p)
        assert stats.chisquare(counts).pvalue > 1e-4
        return
    # 1024 bins of near-equal width; expected counts from the exact bin sizes
    edges = (np.arange(1025, dtype=np.int64) * p) // 1024
    counts = np.histogram(x, bins=edges)[0]
    expected = np.diff(edges) / p * n
    assert stats.chisquare(counts, expected).pvalue > 1e-4


def test_bad_seeds_are_refused_without_echoing_them():
    secret = b"s" * 31
    with pytest.raises(InputError) as err:
        expand_field_elements(secret, 10, 101)
    assert "sss" not in str(err.value)
    with pytest.raises(InputError):
        expand_field_elements(bytes(32), -1, 101)


def test_fresh_seed_uses_the_given_entropy():
    assert fresh_seed(lambda n: b"\x01" * n) == b"\x01" * 32
    assert len(fresh_seed()) == 32 and fresh_seed() != fresh_seed()
    with pytest.raises(InputError):
        fresh_seed(lambda n: b"short")


def test_all_test_primes_work():
    for p in PRIMES:
        assert int(expand_field_elements(bytes(32), 5000, p).to(torch.int64).max()) < p


@pytest.mark.parametrize("p", [2**30 + 3, 101, 2**31 - 1])
def test_mask_stream_in_any_chunks_equals_the_whole(p):
    from coded_fl.prg import MaskStream

    whole = expand_field_elements(bytes(range(32)), 20_000, p).numpy()
    stream = MaskStream(bytes(range(32)), p)
    parts = [stream.fill(np.empty(n, dtype=np.uint32)) for n in (1, 7, 1000, 0, 3, 9000, 9989)]
    assert np.array_equal(np.concatenate(parts), whole)
    assert "seed" not in repr(stream) or "p=" in repr(stream)


def test_expand_into_a_given_buffer():
    buf = torch.empty(100, dtype=torch.uint32)
    got = expand_field_elements(bytes(32), 100, 101, out=buf)
    assert got.data_ptr() == buf.data_ptr()
    assert torch.equal(got, expand_field_elements(bytes(32), 100, 101))
    with pytest.raises(InputError, match="out must be"):
        expand_field_elements(bytes(32), 100, 101, out=torch.empty(99, dtype=torch.uint32))
