"""The fused client upload step against its definition built from separate operations."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from coded_fl.errors import ConfigurationError, InputError
from coded_fl.field import PrimeField
from coded_fl.kernels import torch_impl
from coded_fl.pipeline import encode_upload
from coded_fl.prg import expand_field_elements
from coded_fl.quantize import QuantizationConfig, QuantizationStats, RoundingKey, quantize
from tests.conftest import PRIMES


@given(
    p=st.sampled_from(PRIMES[:3]),
    k=st.integers(1, 7),
    d=st.integers(1, 6000),
    seed=st.integers(0, 2**32 - 1),
    shared_round_key=st.booleans(),
    masked=st.booleans(),
)
def test_fused_equals_quantize_then_lincomb_then_add(p, k, d, seed, shared_round_key, masked):
    F = PrimeField(p)
    c = QuantizationConfig.for_summands(k * 4, clip_range=1.0, p=p)
    rng = np.random.default_rng(seed)
    gs = [torch.from_numpy(rng.standard_normal(d).astype(np.float32)) for _ in range(k)]
    coeffs = [int(v) for v in rng.integers(0, p, k)]
    coeffs[0] = p - 1
    if shared_round_key:
        keys = [RoundingKey.for_partition(seed, 1, j) for j in range(k)]
    else:
        keys = [RoundingKey.derive(seed, j) for j in range(k)]
    mask = expand_field_elements(seed.to_bytes(32, "little"), d, p) if masked else None
    y = encode_upload(gs, coeffs, keys, c, F, mask=mask)
    expect = F.lincomb(coeffs, [quantize(g, c, kk) for g, kk in zip(gs, keys, strict=False)])
    if mask is not None:
        expect = F.add(expect, mask)
    assert torch.equal(y, expect)
    ty = torch_impl.quantize_encode(
        gs, coeffs, [(kk.k0, kk.k1) for kk in keys], mask, c.clip_range, c.scale, p
    )
    assert torch.equal(ty, y)


def test_mixed_float_dtypes_give_the_same_result_as_separate_quantization():
    F = PrimeField()
    c = QuantizationConfig.for_summands(4, clip_range=1.0)
    a = torch.randn(100, dtype=torch.float64)
    b = torch.randn(100, dtype=torch.float32)
    keys = [RoundingKey(1, 2), RoundingKey(1, 3)]
    y = encode_upload([a, b], [1, 1], keys, c, F)
    assert torch.equal(y, F.add(quantize(a, c, keys[0]), quantize(b, c, keys[1])))


def test_errors_and_stats():
    F = PrimeField()
    c = QuantizationConfig.for_summands(4, clip_range=1.0)
    g = torch.zeros(10)
    keys = [RoundingKey(1, 2)]
    with pytest.raises(InputError, match="need 1 coefficients"):
        encode_upload([g], [1, 2], keys, c, F)
    with pytest.raises(InputError, match="shape"):
        encode_upload([g, torch.zeros(11)], [1, 2], keys * 2, c, F)
    with pytest.raises(InputError, match="mask has 9"):
        encode_upload([g], [1], keys, c, F, mask=F.zeros(9))
    with pytest.raises(InputError, match="NaN/Inf"):
        encode_upload([torch.tensor([float("nan")])], [1], keys, c, F)
    with pytest.raises(ConfigurationError, match="differs"):
        encode_upload([g], [1], keys, c, PrimeField(101))
    wide = QuantizationConfig(clip_range=1.0, scale=2.0**29, num_summands=1)
    with pytest.raises(ConfigurationError, match="overflow"):
        encode_upload([g] * 9, [1] * 9, keys * 9, wide, F)
    s = QuantizationStats()
    encode_upload(
        [torch.tensor([0.5, 2.0]), torch.tensor([-3.0, 0.0])], [1, 1], keys * 2, c, F, stats=s
    )
    assert (s.total, s.clipped) == (4, 2)


@pytest.mark.parametrize("d", [1, 1000, (1 << 18) + 17, 3 * (1 << 18)])
def test_streamed_mask_from_a_seed_equals_the_materialised_mask(d):
    F = PrimeField()
    c = QuantizationConfig.for_summands(10, clip_range=1.0)
    g = torch.Generator().manual_seed(d)
    xs = [torch.randn(d, generator=g) for _ in range(3)]
    keys = [RoundingKey.for_partition(0, 1, j) for j in range(3)]
    seed = bytes(range(32))
    a = encode_upload(xs, [1, 2, 3], keys, c, F, mask=expand_field_elements(seed, d, F.p))
    out = torch.empty(d, dtype=torch.uint32)
    b = encode_upload(xs, [1, 2, 3], keys, c, F, mask_seed=seed, out=out)
    assert b.data_ptr() == out.data_ptr()
    assert torch.equal(a, b)
    with pytest.raises(InputError, match="one of mask, mask_seed and mask_streams"):
        encode_upload(xs, [1, 2, 3], keys, c, F, mask=a, mask_seed=seed)
    with pytest.raises(InputError, match="one of mask, mask_seed and mask_streams"):
        encode_upload(xs, [1, 2, 3], keys, c, F, mask_seed=seed, mask_streams=[(seed, 1)])
    with pytest.raises(InputError, match="out must be"):
        encode_upload(xs, [1, 2, 3], keys, c, F, out=torch.empty(d + 1, dtype=torch.uint32))


@given(
    p=st.sampled_from(PRIMES[:3]),
    d=st.sampled_from([1, 999, (1 << 18) + 5, 2 * (1 << 18)]),
    coeffs=st.lists(st.integers(-(2**40), 2**40), min_size=0, max_size=5),
    k=st.integers(1, 3),
)
def test_streamed_combination_of_masks_equals_the_materialised_one(p, d, coeffs, k):
    # the group mask's path: sum_e c_e PRG(s_e), made chunk by chunk (chunks of 2^18), against
    # the streams expanded whole and combined with Python ints (an independent oracle)
    F = PrimeField(p)
    c = QuantizationConfig.for_summands(4 * k, clip_range=1.0, p=p)
    g = torch.Generator().manual_seed(d + k)
    xs = [torch.randn(d, generator=g) for _ in range(k)]
    keys = [RoundingKey.for_partition(0, 2, j) for j in range(k)]
    streams = [(bytes([e]) * 32, v) for e, v in enumerate(coeffs)]
    oracle = np.zeros(d, dtype=object)
    for seed, v in streams:
        oracle = oracle + (v % p) * expand_field_elements(seed, d, p).numpy().astype(object)
    mask = torch.from_numpy((oracle % p).astype(np.int64).astype(np.uint32))
    a = encode_upload(xs, list(range(1, k + 1)), keys, c, F, mask=mask)
    b = encode_upload(xs, list(range(1, k + 1)), keys, c, F, mask_streams=streams)
    assert torch.equal(a, b)


def test_mask_streams_are_checked():
    F = PrimeField()
    c = QuantizationConfig.for_summands(4, clip_range=1.0)
    xs, keys = [torch.zeros(8)], [RoundingKey.for_partition(0, 1, 0)]
    with pytest.raises(InputError, match="pairs"):
        encode_upload(xs, [1], keys, c, F, mask_streams=[bytes(32)])  # type: ignore[list-item]
    with pytest.raises(InputError, match="integer"):
        encode_upload(xs, [1], keys, c, F, mask_streams=[(bytes(32), 1.0)])  # type: ignore[list-item]
    for seed in (bytes(5), 32, "x" * 32):  # an int would make bytes(32): zeros, not a seed
        for coeff in (1, 0):  # checked even where the term is zero
            with pytest.raises(InputError, match="seed must be 32 bytes"):
                encode_upload(xs, [1], keys, c, F, mask_streams=[(seed, coeff)])  # type: ignore[list-item]


def test_partitions_with_different_round_keys_are_paired_correctly():
    # keys whose k0 differ (not from one round): the kernel must not share the first hash round
    F = PrimeField()
    c = QuantizationConfig.for_summands(10, clip_range=1.0)
    xs = [torch.randn(5000) for _ in range(5)]
    keys = [
        RoundingKey(1, 2),
        RoundingKey(1, 3),
        RoundingKey(9, 3),
        RoundingKey(9, 4),
        RoundingKey(5, 5),
    ]
    y = encode_upload(xs, [1, 2, 3, 4, 5], keys, c, F)
    expect = F.lincomb(
        [1, 2, 3, 4, 5], [quantize(x, c, kk) for x, kk in zip(xs, keys, strict=False)]
    )
    assert torch.equal(y, expect)
