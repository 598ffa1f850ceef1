"""One round of distributed DP on integers (``coded_fl.dp.pipeline``) and the length-keeping
rotation (``coded_fl.dp.transform.rotate``), against independent oracles: scipy's Hadamard
matrices for the rotation, a plain float clip-and-sum for the released aggregate, Python
integers modulo p for the field's wrap-around."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.linalg import hadamard

from coded_fl.dp import DistributedDP
from coded_fl.dp.noise import skellam
from coded_fl.dp.pipeline import noisy_group_sum, privatize, release
from coded_fl.dp.transform import _signs, block_rotation_size, rotate, unrotate

P = 2**31 - 1  # the protocol's default field


def _matrix(d: int, seed: int) -> np.ndarray:
    """The rotation as an explicit d x d matrix, built from scipy's Hadamard matrix and the
    documented signs (block seeds 2 seed and 2 seed + 1)."""
    b = block_rotation_size(d)
    h = hadamard(b) / math.sqrt(b)
    first, second = np.eye(d), np.eye(d)
    first[:b, :b] = h @ np.diag(_signs(b, 2 * seed))
    if b < d:
        second[d - b :, d - b :] = h @ np.diag(_signs(b, 2 * seed + 1))
    return second @ first


@settings(max_examples=40, deadline=None)
@given(d=st.integers(1, 200), seed=st.integers(0, 2**40))
def test_the_rotation_keeps_d_is_orthogonal_and_is_scipys_matrix(d, seed):
    rng = np.random.default_rng(seed % 2**32)
    x = rng.normal(size=d)
    y = rotate(x, seed=seed)
    assert y.shape == (d,)
    assert np.allclose(y, _matrix(d, seed) @ x)
    assert np.isclose(np.linalg.norm(y), np.linalg.norm(x))
    assert np.allclose(unrotate(y, seed=seed), x)


@pytest.mark.parametrize("d", [1_000, 1_024, 11_122, 40_000])
def test_the_rotation_spreads_a_spike_anywhere(d):
    b = block_rotation_size(d)
    assert b <= d < 2 * b
    for i in (0, d // 2, d - 1):
        x = np.zeros(d)
        x[i] = 1.0
        y = rotate(x, seed=11)
        # every coordinate is sub-Gaussian with scale 1 / sqrt(b): 6 of them is far out
        assert np.abs(y).max() <= 6.0 / math.sqrt(b), (i, np.abs(y).max() * math.sqrt(b))


def _round(d=2_000, k=6, g=3, z=1.0, clip=0.5, seed=0, drift=0.0):
    """A round: k partitions in g groups (k / g each), every partition privatized by its
    replicas, every group's noisy sum, the field sum the decode yields, and the release."""
    rng = np.random.default_rng(seed)
    updates = [rng.normal(size=d) * rng.uniform(0.05, 2.0) for _ in range(k)]
    dp = DistributedDP(noise_multiplier=z, clip=clip)
    plan = dp.plan(d=d, partitions=k, groups=g, colluders=1, rounds=10, modulus=P)
    rot = 1234
    members = k // g
    groups, replicas = [], []
    for q in range(g):
        parts = range(q * members, (q + 1) * members)
        key, context = bytes([q]) * 32, b"run/round-1/inputs-digest"
        # two replicas of the group (two silos), each privatizing with the partition's key;
        # the second computed on a machine whose floats drift
        one = [privatize(updates[j], plan, seed=rot, rng=np.random.default_rng(j)) for j in parts]
        two = [
            privatize(
                updates[j] * (1 + drift * rng.standard_normal(d)),
                plan,
                seed=rot,
                rng=np.random.default_rng(j),
            )
            for j in parts
        ]
        groups.append(noisy_group_sum(one, plan, key=key, context=context))
        replicas.append(noisy_group_sum(two, plan, key=key, context=context))
    # the decode's sum in GF(p), then centred, with Python integers as the oracle
    field_sum = [sum(int(gq[i]) % P for gq in groups) % P for i in range(d)]
    centred = np.array([v - P if v > P // 2 else v for v in field_sum], dtype=np.int64)
    return updates, plan, groups, replicas, centred, release(centred, plan, seed=rot), rot


def test_the_released_sum_is_the_clipped_sum_plus_the_noise_and_nothing_wraps():
    updates, plan, groups, _, centred, released, rot = _round()
    total = np.sum(groups, axis=0)
    assert np.abs(total).max() < plan.wrap_bound < P // 2  # so centring undid the field
    assert np.array_equal(centred, total)
    # the noise, drawn again from the keys alone, and the rounded updates without it
    context = b"run/round-1/inputs-digest"
    noise = sum(
        skellam(bytes([q]) * 32, context, mu=plan.mu_group, size=total.size) for q in range(3)
    )
    rounded = total - noise
    # the oracle: plain float clipping and summing
    clip = plan.step * plan.clip_steps
    clipped = sum(u * min(1.0, clip / np.linalg.norm(u)) for u in updates)
    signal = release(rounded, plan, seed=rot)
    # each partition's rounding moves it by < 1 step per coordinate: < sqrt(d) steps in L2
    bound = len(updates) * math.sqrt(total.size) * plan.step
    assert float(np.linalg.norm(signal - clipped)) < bound
    assert np.allclose(released, signal + release(noise, plan, seed=rot))
    # and the noise has the spread the plan states (g groups' Skellam, variance 2 g mu_group)
    assert np.std(released - clipped) == pytest.approx(plan.noise_std, rel=0.05)


def test_replicas_of_a_group_agree_and_drift_moves_a_few_coordinates_by_one_step():
    _, _, groups, replicas, *_ = _round(drift=0.0)
    assert all(np.array_equal(a, b) for a, b in zip(groups, replicas, strict=True))
    _, _, groups, replicas, *_ = _round(drift=1e-7, seed=1)
    for a, b in zip(groups, replicas, strict=True):
        diff = np.abs(a - b)
        assert diff.max() <= 2 and int((diff > 0).sum()) <= 10  # of 2,000: the vote's to absorb


def test_a_partition_beyond_the_clip_is_clipped_and_its_integers_stay_within_l2():
    dp = DistributedDP(noise_multiplier=1.0, clip=0.1)
    plan = dp.plan(d=5_000, partitions=4, groups=2, colluders=1, rounds=1, modulus=P)
    huge = np.random.default_rng(0).normal(size=5_000) * 1e6
    out = privatize(huge, plan, seed=3, rng=np.random.default_rng(1))
    assert float(np.linalg.norm(out)) <= plan.l2
    assert float(np.linalg.norm(out)) >= plan.clip_steps - math.sqrt(5_000)


def test_the_noise_is_bound_to_the_context():
    # a server that asks one round twice with other inputs gets independent noise, not a
    # difference of two sums with the same noise in them
    dp = DistributedDP(noise_multiplier=1.0, clip=1.0)
    plan = dp.plan(d=1_000, partitions=2, groups=2, colluders=1, rounds=1, modulus=P)
    zero = [np.zeros(1_000, dtype=np.int64)]
    a = noisy_group_sum(zero, plan, key=b"k" * 32, context=b"round 1 inputs A")
    b = noisy_group_sum(zero, plan, key=b"k" * 32, context=b"round 1 inputs B")
    again = noisy_group_sum(zero, plan, key=b"k" * 32, context=b"round 1 inputs A")
    assert np.array_equal(a, again) and not np.array_equal(a, b)
    assert np.std(a - b) == pytest.approx(math.sqrt(4 * plan.mu_group), rel=0.1)
