"""One round of distributed DP over the protocol's vectors, end to end on integers: what a silo
does to each partition's update before the encode, what every member of a group adds, and what
the server does to the decoded sum (issue 33, items 1-2). No field, masks or Flower here: the
caller encodes and masks the group's integer vector as any other, and hands the decoded sum,
centred, to :func:`release`.

- :func:`privatize`: clip to L2 norm ``clip``, rotate, scale to steps and round (randomized,
  keyed by the partition: every replica of it computes the same integers, up to drift);
- :func:`noisy_group_sum`: the group's combination of its partitions plus the group's Skellam
  noise, drawn from the group's noise key and the round's context (the same at every member,
  so replicas stay identical and the vote is unchanged);
- :func:`release`: the decoded integer sum back to model units, rotated back.

The rotation keeps the protocol's vector length d (:func:`coded_fl.dp.transform.rotate`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from coded_fl.dp.noise import skellam
from coded_fl.dp.settings import DPPlan
from coded_fl.dp.transform import clip_l2, rotate, round_randomized, unrotate
from coded_fl.errors import InputError

__all__ = ["noisy_group_sum", "privatize", "release"]


def privatize(
    update: np.ndarray, plan: DPPlan, *, seed: int, rng: np.random.Generator
) -> np.ndarray:
    """A partition's update as the integers its replicas encode: clipped to L2 norm
    ``plan.step * plan.clip_steps``, rotated, in steps, rounded at random.

    Parameters
    ----------
    update
        The partition's update in model units (float, length d).
    plan
        The run's plan (:meth:`coded_fl.dp.settings.DistributedDP.plan`).
    seed
        The round's public rotation seed (the same for every partition: the server rotates
        the sum back once).
    rng
        The partition's rounding randomness (from its rounding key: the same at each
        replica).

    Returns
    -------
    numpy.ndarray
        int64, length d; its L2 norm is at most ``plan.l2``.
    """
    clipped, _ = clip_l2(update, plan.step * plan.clip_steps)
    return round_randomized(rotate(clipped, seed=seed) / plan.step, rng=rng)


def noisy_group_sum(
    rounded: Sequence[np.ndarray], plan: DPPlan, *, key: bytes, context: bytes
) -> np.ndarray:
    """A silo group's partitions summed, plus the group's share of the noise.

    Every member of the group computes the same vector (the same partitions, rounding keys,
    noise key and context), so its replicas agree exactly where the training did.

    Parameters
    ----------
    rounded
        :func:`privatize` of each of the group's partitions.
    plan
        The run's plan (``plan.mu_group``: the group's Skellam parameter).
    key
        The group's noise key (:func:`coded_fl.dp.keys.noise_key`).
    context
        What binds the noise to this request: the run, the round and the digest of the
        training inputs (a server that asks a round twice with other inputs gets independent
        noise, never a difference without noise).

    Returns
    -------
    numpy.ndarray
        int64, length d.
    """
    if not rounded:
        raise InputError("a group holds at least one partition")
    total = np.sum(np.stack([np.asarray(r, dtype=np.int64) for r in rounded]), axis=0)
    return total + skellam(key, context, mu=plan.mu_group, size=total.size)


def release(total: np.ndarray, plan: DPPlan, *, seed: int) -> np.ndarray:
    """The server's decoded sum, centred to signed integers, back in model units.

    Parameters
    ----------
    total
        The decoded sum of every group's :func:`noisy_group_sum`, as signed integers (the
        field's representatives centred around 0).
    plan
        The run's plan.
    seed
        The round's rotation seed.

    Returns
    -------
    numpy.ndarray
        float64, length d: the sum of the clipped updates plus the noise, in model units.
    """
    return unrotate(np.asarray(total, dtype=np.float64) * plan.step, seed=seed)
