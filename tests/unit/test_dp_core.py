"""The distributed-DP core (issue 33; ``coded_fl.dp``) against independent oracles: Google's
dp-accounting for the Gaussian mechanism, scipy's Hadamard matrix, exact moments of the Skellam
distribution, and brute-force checks of the rounding's bound."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.linalg
import scipy.stats
from dp_accounting import dp_event
from dp_accounting.rdp import RdpAccountant
from hypothesis import given, settings
from hypothesis import strategies as st

from coded_fl.dp import (
    DistributedDP,
    calibrate_mu,
    clip_l2,
    epsilon_of,
    group_mu,
    rotate,
    round_conditionally,
    round_randomized,
    rounded_sensitivity,
    skellam,
    skellam_rdp,
)
from coded_fl.dp.accounting import ORDERS
from coded_fl.dp.noise import BLOCK
from coded_fl.errors import ConfigurationError, InputError

KEY = bytes(range(32))


# ----------------------------------------------------------------------------- accounting
@pytest.mark.parametrize("sigma", [0.8, 1.5, 4.0])
@pytest.mark.parametrize("rounds", [1, 20])
def test_skellam_is_the_gaussian_plus_a_small_integer_price(sigma, rounds):
    """At variance 2 mu = (sigma * l2)^2 the Skellam RDP is the Gaussian's plus a term that
    vanishes as mu grows: epsilon just above dp-accounting's Gaussian epsilon."""
    l2 = 1000.0
    l1 = l2 * 30
    mu = (sigma * l2) ** 2 / 2
    ours = epsilon_of(mu, delta=1e-5, rounds=rounds, l2=l2, l1=l1)
    acc = RdpAccountant(list(ORDERS))
    acc.compose(dp_event.GaussianDpEvent(sigma), rounds)
    gauss = acc.get_epsilon(1e-5)
    assert gauss <= ours <= gauss * 1.01


def test_the_rdp_terms_are_the_papers():
    a = np.array([2.0, 10.0])
    got = skellam_rdp(a, l2=3.0, l1=5.0, mu=7.0)
    want = a * 9 / 28 + np.minimum(((2 * a - 1) * 9 + 30) / (16 * 49), 15 / 28)
    assert np.allclose(got, want)


@settings(max_examples=25, deadline=None)
@given(
    eps=st.floats(0.5, 10.0),
    rounds=st.integers(1, 50),
    l2=st.floats(10.0, 1e4),
)
def test_calibration_meets_the_target_and_no_less_noise_would(eps, rounds, l2):
    l1 = l2 * 10
    mu = calibrate_mu(epsilon=eps, delta=1e-5, rounds=rounds, l2=l2, l1=l1)
    assert epsilon_of(mu, delta=1e-5, rounds=rounds, l2=l2, l1=l1) <= eps
    assert epsilon_of(mu * 0.99, delta=1e-5, rounds=rounds, l2=l2, l1=l1) > eps


def test_more_noise_or_fewer_rounds_is_never_less_private():
    kw = {"delta": 1e-5, "l2": 100.0, "l1": 1000.0}
    eps = [epsilon_of(mu, rounds=10, **kw) for mu in (1e3, 1e4, 1e5, 1e6)]
    assert eps == sorted(eps, reverse=True)
    eps = [epsilon_of(1e5, rounds=r, **kw) for r in (1, 5, 20, 100)]
    assert eps == sorted(eps)


def test_rounded_sensitivity_is_the_smaller_bound():
    l2, l1 = rounded_sensitivity(100.0, 4, 0.5)
    squared = 100**2 + 1 + math.sqrt(2 * math.log(2)) * (100 + 1)
    assert l2 == pytest.approx(math.sqrt(squared)) and l1 == pytest.approx(2 * l2)
    l2, _ = rounded_sensitivity(1.0, 4, 1e-300)  # a tiny beta: the triangle inequality wins
    assert l2 == pytest.approx(1.0 + 2.0)
    with pytest.raises(ConfigurationError, match="beta"):
        rounded_sensitivity(1.0, 4, 1.0)


# ----------------------------------------------------------------------------- the noise
def test_the_noise_is_the_same_everywhere_and_another_context_is_independent():
    a = skellam(KEY, b"run/1/group/0", mu=100.0, size=3000)
    assert (a == skellam(KEY, b"run/1/group/0", mu=100.0, size=3000)).all()
    b = skellam(KEY, b"run/1/group/1", mu=100.0, size=3000)
    c = skellam(bytes(32), b"run/1/group/0", mu=100.0, size=3000)
    for other in (b, c):
        assert abs(np.corrcoef(a, other)[0, 1]) < 0.08


def test_a_block_drawn_on_its_own_is_the_same_noise():
    whole = skellam(KEY, b"ctx", mu=30.0, size=2 * BLOCK + 10)
    part = skellam(KEY, b"ctx", mu=30.0, size=BLOCK, start=BLOCK - 7)
    assert (part == whole[BLOCK - 7 : 2 * BLOCK - 7]).all()


@pytest.mark.parametrize("mu", [0.7, 25.0, 4e6])
def test_the_noise_has_the_skellam_moments(mu):
    x = skellam(KEY, b"moments", mu=mu, size=200_000).astype(np.float64)
    n = x.size
    var = 2 * mu
    # mean: within 5 standard errors; variance: within 5 of its standard error (kurtosis of
    # Skellam: 3 + 1 / (2 mu))
    assert abs(x.mean()) < 5 * math.sqrt(var / n)
    se_var = var * math.sqrt((2 + 1 / (2 * mu)) / n)
    assert abs(x.var() - var) < 5 * se_var


def test_small_mu_matches_the_exact_distribution():
    mu = 1.5
    x = skellam(KEY, b"pmf", mu=mu, size=100_000)
    ks = np.arange(-6, 7)
    observed = np.array([(x == k).sum() for k in ks] + [(np.abs(x) > 6).sum()])
    pmf = scipy.stats.skellam.pmf(ks, mu, mu)
    expected = np.append(pmf, 1 - pmf.sum()) * x.size
    assert scipy.stats.chisquare(observed, expected).pvalue > 1e-4


def test_colluders_calibrate_the_groups_share_and_too_many_are_refused():
    assert group_mu(900.0, groups=10, colluders=1) == pytest.approx(100.0)
    assert group_mu(900.0, groups=3, colluders=2) == pytest.approx(900.0)
    with pytest.raises(ConfigurationError, match="privacy_threshold=3"):
        group_mu(900.0, groups=3, colluders=3)


def test_a_bad_key_or_size_is_refused():
    with pytest.raises(InputError, match="32 bytes"):
        skellam(b"short", b"c", mu=1.0, size=3)
    with pytest.raises(ConfigurationError, match="mu"):
        skellam(KEY, b"c", mu=float("nan"), size=3)


# ----------------------------------------------------------------------------- transforms
# (the rotation against scipy's Hadamard matrices: tests/unit/test_dp_pipeline.py)


@settings(max_examples=30, deadline=None)
@given(d=st.integers(1, 400), c=st.floats(1.0, 500.0), seed=st.integers(0, 2**31))
def test_conditional_rounding_meets_the_bound_and_is_unbiased_per_coordinate(d, c, seed):
    rng = np.random.default_rng(seed)
    x, _ = clip_l2(rng.normal(size=d) * c, c)
    l2, l1 = rounded_sensitivity(c, d, math.exp(-0.5))
    out = round_conditionally(x, bound_sq=l2 * l2, rng=rng)
    assert float(out @ out) <= l2 * l2 + 1e-9
    assert np.abs(out - x).max() < 1.0
    assert np.abs(out).sum() <= l1 + 1e-9


def _drifted(seed: int, d: int = 4000, c: float = 2.0**16) -> tuple[np.ndarray, np.ndarray]:
    """A clipped update in steps and a replica of it computed elsewhere: every coordinate off
    by a relative float drift of about 1e-7 (float32 kernels that differ)."""
    rng = np.random.default_rng(seed)
    x = rotate(clip_l2(rng.normal(size=d), 1.0)[0], seed=seed) * c
    return x, x * (1.0 + 1e-7 * rng.standard_normal(d))


@pytest.mark.parametrize("seed", range(5))
def test_randomized_rounding_keeps_drifting_replicas_together(seed):
    # the same rounding key at both replicas: they round apart only where a coordinate's drift
    # crosses its draw's threshold (a handful of 4,000 here), so the vote's per-coordinate
    # tolerance absorbs it as it absorbs the quantizer's
    x, y = _drifted(seed)
    a = round_randomized(x, rng=np.random.default_rng(99))
    b = round_randomized(y, rng=np.random.default_rng(99))
    assert int((a != b).sum()) <= 4
    assert np.abs(a - b).max() <= 1


def test_conditional_rounding_can_split_drifting_replicas_everywhere():
    # why the plan's default is plain randomized rounding: with conditional rounding whether a
    # draw is kept depends on the whole vector's norm. When the first draw's squared norm
    # lies between the two replicas' (a drift of one coordinate across its threshold moves
    # it), one replica keeps the draw and the other draws again: they then disagree at about
    # half the coordinates, beyond any tolerance, and the vote would take drift for corruption
    x, y = _drifted(0)
    u = np.random.default_rng(99).random(x.size)
    frac = x - np.floor(x)
    i = int(np.argmin(np.abs(u - frac)))  # the coordinate whose draw a drift crosses first
    y = x.copy()
    y[i] = np.floor(x[i]) + u[i] + (1e-9 if frac[i] < u[i] else -1e-9)
    first_x = round_randomized(x, rng=np.random.default_rng(99))
    first_y = round_randomized(y, rng=np.random.default_rng(99))
    assert int((first_x != first_y).sum()) == 1
    bound_sq = float(min(first_x @ first_x, first_y @ first_y))
    a = round_conditionally(x, bound_sq=bound_sq, rng=np.random.default_rng(99))
    b = round_conditionally(y, bound_sq=bound_sq, rng=np.random.default_rng(99))
    assert int((a != b).sum()) > x.size // 4


@pytest.mark.parametrize("d", [10, 11_122, 97_858, 1_000_000, 25_000_000])
def test_the_default_resolution_keeps_the_rounding_within_one_percent_of_the_clip(d):
    dp = DistributedDP(noise_multiplier=1.0, clip=1.0)
    c = dp.resolution(d)
    assert c >= 2**16 and math.log2(c).is_integer()
    l2, _ = rounded_sensitivity(c, d)
    assert l2 == pytest.approx(c + math.sqrt(d))
    assert l2 / c - 1 <= 0.01
    plan = dp.plan(d=d, partitions=10, groups=5, colluders=1, rounds=20, modulus=2**61 - 1)
    assert plan.rounding == "randomized" and plan.l2 == pytest.approx(l2)


def test_clip_scales_only_long_vectors():
    x, f = clip_l2(np.array([3.0, 4.0]), 10.0)
    assert f == 1.0 and (x == [3.0, 4.0]).all()
    x, f = clip_l2(np.array([3.0, 4.0]), 1.0)
    assert f == pytest.approx(0.2) and np.linalg.norm(x) == pytest.approx(1.0)
    with pytest.raises(InputError, match="NaN"):
        clip_l2(np.array([np.nan]), 1.0)


# ----------------------------------------------------------------------------- the switch
def test_the_plan_states_the_guarantee_and_refuses_a_field_too_small():
    dp = DistributedDP(noise_multiplier=1.0, clip=0.5)
    plan = dp.plan(d=11_125, partitions=10, groups=5, colluders=1, rounds=20, modulus=2**61 - 1)
    # the noise that survives one colluder is the central noise z * clip ...
    assert math.sqrt(2 * plan.mu) * plan.step == pytest.approx(0.5)
    # ... and all of it is g / (g - T) times that variance
    assert plan.noise_std == pytest.approx(0.5 * math.sqrt(5 / 4))
    assert 0 < plan.epsilon_round < plan.epsilon_run < math.inf
    with pytest.raises(ConfigurationError, match="steps_per_clip"):
        dp.plan(d=11_125, partitions=10, groups=5, colluders=1, rounds=20, modulus=2**20 + 7)
    with pytest.raises(ConfigurationError, match="noise_multiplier"):
        DistributedDP(noise_multiplier=0.0, clip=1.0)


# ----------------------------------------------------------------------------- noise keys
@pytest.mark.parametrize(("g", "t"), [(3, 1), (4, 1), (4, 2), (5, 2), (6, 3), (6, 1), (7, 4)])
def test_no_coalition_of_t_groups_holds_a_clean_groups_noise_key(g, t):
    """Every way T colluders can sit in T groups: for every group without a colluder, some
    edge at it has neither end in the coalition, so its noise key is out of reach."""
    from itertools import combinations

    from coded_fl.dp.keys import check_noise_keys
    from coded_fl.secagg.aligned import mask_graph

    check_noise_keys(g, t)
    edges = mask_graph(g, t)
    for coalition in combinations(range(g), t):
        for q in set(range(g)) - set(coalition):
            at_q = [e for e in edges if q in e]
            assert any(not (set(e) & set(coalition)) - {q} for e in at_q), (coalition, q)


def test_with_g_equal_t_plus_one_a_coalition_could_hold_a_key_and_it_is_refused():
    from itertools import combinations

    from coded_fl.dp.keys import check_noise_keys
    from coded_fl.secagg.aligned import mask_graph

    g, t = 3, 2
    edges = mask_graph(g, t)
    leaks = [
        (c, q)
        for c in combinations(range(g), t)
        for q in set(range(g)) - set(c)
        if all((set(e) - {q}) <= set(c) for e in edges if q in e)
    ]
    assert leaks  # the claim above can fail: this is the setting it excludes
    with pytest.raises(ConfigurationError, match="privacy_threshold=2"):
        check_noise_keys(g, t)


def test_the_noise_key_needs_every_edge_at_the_group():
    from coded_fl.dp.keys import noise_key
    from coded_fl.secagg.aligned import mask_graph

    edges = mask_graph(5, 1)
    keys = {e: bytes([i + 1]) * 32 for i, e in enumerate(edges)}
    k0 = noise_key(keys, 0, run_id=b"run")
    assert k0 == noise_key(dict(reversed(list(keys.items()))), 0, run_id=b"run")
    assert k0 != noise_key(keys, 1, run_id=b"run") and k0 != noise_key(keys, 0, run_id=b"x")
    at0 = [e for e in edges if 0 in e]
    changed = {**keys, at0[-1]: bytes(32)}
    assert noise_key(changed, 0, run_id=b"run") != k0  # one edge key unknown: another key
    with pytest.raises(InputError, match="no edge key"):
        noise_key({(1, 2): bytes(32)}, 0, run_id=b"run")
