"""Quantization: configuration checks, exactness against a Python oracle, statistics."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from scipy import stats

from coded_fl.errors import ConfigurationError, DecodingError, InputError
from coded_fl.field import PrimeField
from coded_fl.kernels import torch_impl
from coded_fl.quantize import (
    QuantizationConfig,
    QuantizationStats,
    RoundingKey,
    dequantize,
    quantize,
    stochastic_round,
)
from tests import oracles
from tests.conftest import PRIMES

P = 2**31 - 1


def cfg(**kw):
    base = {"clip_range": 2.0, "scale": 2.0**16, "num_summands": 8}
    base.update(kw)
    return QuantizationConfig(**base)


# ----------------------------------------------------------------------------- configuration


def test_config_rejects_wraparound_and_says_which_setting_to_change():
    with pytest.raises(ConfigurationError) as err:
        QuantizationConfig(clip_range=8.0, scale=2.0**24, num_summands=100)
    msg = str(err.value)
    assert "num_summands=100" in msg and "set scale <=" in msg and "clip_range <=" in msg
    suggested = float(msg.split("set scale <= ")[1].split(",")[0])
    QuantizationConfig(clip_range=8.0, scale=suggested, num_summands=100)  # the advice works


@pytest.mark.parametrize(
    ("kw", "words"),
    [
        ({"clip_range": 0.0}, "clip_range must be a finite number > 0"),
        ({"clip_range": -1.0}, "clip_range must be a finite number > 0"),
        ({"clip_range": math.inf}, "clip_range must be a finite number > 0"),
        ({"clip_range": math.nan}, "clip_range must be a finite number > 0"),
        ({"scale": 0.0}, "scale must be a finite number > 0"),
        ({"scale": -2.0}, "scale must be a finite number > 0"),
        ({"num_summands": 0}, "num_summands must be an int >= 1"),
        ({"num_summands": 2.5}, "num_summands must be an int >= 1"),
        ({"nonfinite": "ignore"}, "nonfinite must be"),
        ({"p": 2**31 - 3}, "not an odd prime"),
    ],
)
def test_config_validation_messages(kw, words):
    with pytest.raises(ConfigurationError, match=words):
        cfg(**kw)


@given(
    n=st.integers(1, 10_000),
    clip=st.floats(1e-3, 1e3),
    p=st.sampled_from([P, 2**31 - 19, 2**30 + 3]),
)
def test_for_summands_is_the_finest_valid_power_of_two(n, clip, p):
    if (p - 1) // 2 // n < clip:  # not even scale 1 fits: the constructor must refuse
        with pytest.raises(ConfigurationError):
            QuantizationConfig.for_summands(n, clip_range=clip, p=p)
        return
    c = QuantizationConfig.for_summands(n, clip_range=clip, p=p)
    assert n * c.max_abs <= (p - 1) // 2
    with pytest.raises(ConfigurationError):
        QuantizationConfig(clip_range=clip, scale=c.scale * 2, num_summands=n, p=p)


# ----------------------------------------------------------------------------- exactness


floats = st.one_of(
    st.floats(-4.0, 4.0, allow_nan=False, width=32),
    st.sampled_from([0.0, -0.0, 2.0, -2.0, 1e-30, -1e-30, 1.5e-45, 3e38, -3e38]),
)


@given(
    xs=st.lists(floats, min_size=1, max_size=200),
    k0=st.integers(0, 2**32 - 1),
    k1=st.integers(0, 2**32 - 1),
    offset=st.integers(0, 2**31),
    scale=st.sampled_from([1.0, 3.0, 2.0**16, 1000.5]),
)
def test_stochastic_round_matches_python_oracle_bit_for_bit(xs, k0, k1, offset, scale):
    c = cfg(scale=scale)
    key = RoundingKey(k0, k1)
    x = torch.tensor(xs, dtype=torch.float32)
    expect = [
        oracles.stochastic_round(float(v), offset + i, c.clip_range, scale, k0, k1)
        for i, v in enumerate(x.tolist())
    ]
    assert stochastic_round(x, c, key, offset=offset).tolist() == expect
    # the torch implementation (the CUDA path) gives the same bits on any device
    tq = torch_impl.stochastic_round(x, c.clip_range, scale, k0, k1, offset)
    assert tq.tolist() == expect
    q = quantize(x, c, key, offset=offset)
    assert q.dtype == torch.uint32
    assert q.tolist() == [v % P for v in expect]


def test_float64_input_is_rounded_in_float64():
    c = cfg()
    x = torch.tensor([0.1234567890123, -1.0000000001], dtype=torch.float64)
    key = RoundingKey(5, 6)
    expect = [oracles.stochastic_round(v, i, 2.0, 2.0**16, 5, 6) for i, v in enumerate(x.tolist())]
    assert stochastic_round(x, c, key).tolist() == expect


def test_chunked_quantization_equals_whole():
    c = cfg()
    key = RoundingKey.for_partition(7, 3, 1)
    x = torch.randn(10_000, generator=torch.Generator().manual_seed(0))
    whole = quantize(x, c, key)
    parts = torch.cat([quantize(x[i : i + 777], c, key, offset=i) for i in range(0, 10_000, 777)])
    assert torch.equal(whole, parts)


def test_same_key_same_bits_different_key_different_bits():
    c = cfg()
    x = torch.randn(5000, generator=torch.Generator().manual_seed(1)) * 0.01
    a = quantize(x, c, RoundingKey.for_partition("run", 4, 2))
    b = quantize(x.clone(), c, RoundingKey.for_partition("run", 4, 2))
    other = quantize(x, c, RoundingKey.for_partition("run", 4, 3))
    later = quantize(x, c, RoundingKey.for_partition("run", 5, 2))
    assert torch.equal(a, b)
    assert not torch.equal(a, other) and not torch.equal(a, later)


def test_rounding_keys_share_k0_within_a_round():
    a = RoundingKey.for_partition(1, 2, 3)
    b = RoundingKey.for_partition(1, 2, 4)
    c = RoundingKey.for_partition(1, 3, 3)
    assert a.k0 == b.k0 and a.k1 != b.k1 and a.k0 != c.k0
    assert RoundingKey.derive("x", 1) == RoundingKey.derive("x", 1) != RoundingKey.derive("x1")
    with pytest.raises(InputError):
        RoundingKey(2**32, 0)
    with pytest.raises(InputError):
        RoundingKey.derive(1.5)  # type: ignore[arg-type]


@given(
    xs=st.lists(st.floats(-100, 100, allow_nan=False), min_size=1, max_size=300),
    scale=st.sampled_from([4.0, 2.0**10, 2.0**20, 12345.678]),
    p=st.sampled_from(PRIMES[:3]),
)
def test_round_trip_error_is_below_one_step(xs, scale, p):
    clip = 8.0
    c = QuantizationConfig(clip_range=clip, scale=scale, num_summands=1, p=p)
    x = torch.tensor(xs, dtype=torch.float64)
    back = dequantize(quantize(x, c, RoundingKey(1, 2)), c, PrimeField(p))
    err = (back - x.clamp(-clip, clip)).abs()
    assert float(err.max()) < 1.0 / scale


# ----------------------------------------------------------------------------- statistics


@pytest.mark.parametrize("frac", [0.001, 0.25, 0.5, 0.73, 0.999])
def test_stochastic_rounding_is_unbiased(frac):
    # 10^6 independent roundings of t = 5 + frac: the number rounded up is Binomial(N, frac).
    n = 1_000_000
    c = QuantizationConfig(clip_range=100.0, scale=1.0, num_summands=1)
    x = torch.full((n,), 5.0 + frac, dtype=torch.float64)
    q = stochastic_round(x, c, RoundingKey.for_partition("unbiased", 0, 0))
    ups = int((q == 6).sum())
    assert int((q == 5).sum()) + ups == n
    assert stats.binomtest(ups, n, frac).pvalue > 1e-4  # fixed key: deterministic outcome


def test_rounding_uniforms_are_uniform_and_independent_of_the_partition():
    n = 200_000
    u0 = torch_impl.uniform(n, 11, 12, 0, torch.device("cpu")).numpy()
    u1 = torch_impl.uniform(n, 11, 13, 0, torch.device("cpu")).numpy()
    counts = np.histogram(u0, bins=256, range=(0, 1))[0]
    assert stats.chisquare(counts).pvalue > 1e-4
    joint = np.histogram2d(u0, u1, bins=16, range=[[0, 1], [0, 1]])[0].ravel()
    assert stats.chisquare(joint).pvalue > 1e-4
    assert abs(np.corrcoef(u0, u1)[0, 1]) < 0.01


# ----------------------------------------------------------------------------- bad input


def test_nan_and_inf_are_refused_with_advice():
    c = cfg()
    for bad in (math.nan, math.inf, -math.inf):
        x = torch.tensor([0.5, bad, 0.25])
        with pytest.raises(InputError, match=r"NaN/Inf.*nonfinite='clip'"):
            quantize(x, c, RoundingKey(1, 2))
        with pytest.raises(InputError, match="NaN/Inf"):
            stochastic_round(x, c, RoundingKey(1, 2))


def test_nonfinite_clip_policy_maps_nan_to_zero_and_inf_to_the_clip_range():
    c = cfg(nonfinite="clip")
    x = torch.tensor([math.nan, math.inf, -math.inf, 0.5])
    q = stochastic_round(x, c, RoundingKey(1, 2))
    assert q.tolist() == [0, 2 * 2**16, -2 * 2**16, 2**15]
    assert not torch.isfinite(x).all()  # the caller's tensor is left as it was


def test_stats_count_clipped_values():
    c = cfg()
    s = QuantizationStats()
    quantize(torch.tensor([0.0, 3.0, -5.0, 1.0]), c, RoundingKey(1, 2), stats=s)
    assert (s.total, s.clipped, s.nonfinite) == (4, 2, 0)
    assert s.clipped_fraction == 0.5


def test_wrong_input_types():
    c = cfg()
    with pytest.raises(InputError, match="floating point"):
        quantize(torch.tensor([1, 2]), c, RoundingKey(1, 2))
    with pytest.raises(InputError, match=r"torch\.Tensor"):
        quantize([1.0], c, RoundingKey(1, 2))  # type: ignore[arg-type]


def test_dequantize_refuses_a_corrupt_aggregate():
    c = QuantizationConfig(clip_range=1.0, scale=2.0**10, num_summands=4)
    F = PrimeField()
    garbage = torch.from_numpy(np.random.default_rng(0).integers(0, P, 1000).astype(np.uint32))
    with pytest.raises(DecodingError, match="corrupt"):
        dequantize(garbage, c, F)
    ok = F.from_signed(torch.tensor([4 * 2**10, -4 * 2**10]))
    assert dequantize(ok, c, F, divide_by=4.0).tolist() == [1.0, -1.0]
    with pytest.raises(ConfigurationError, match="differs"):
        dequantize(ok, c, PrimeField(101))
