"""One round of distributed DP over the protocol's vectors, end to end on integers: what a silo
does to each partition's update before the encode, what every member of a group adds, and what
the server does to the decoded sum (issue 33, items 1-2). No field, masks or Flower here: the
caller encodes and masks the group's integer vector as any other, and hands the decoded sum,
centred, to :func:`release`.

- :func:`rotation_seed`: the round's public seed of the rotation (silos and server derive it);
- :func:`prepare`: a partition's update padded to the protocol's vector length, clipped to L2
  norm ``clip`` and rotated, in model units (the upload's quantizer then rounds it at random
  with the partition's rounding key, at the plan's step: the machines' path);
- :func:`privatize`: :func:`prepare`, in steps, rounded (randomized, keyed by the partition:
  every replica of it computes the same integers, up to drift);
- :func:`noisy_group_sum`: the group's combination of its partitions plus the group's Skellam
  noise, drawn from the group's noise key and the round's context (the same at every member,
  so replicas stay identical and the vote is unchanged);
- :func:`release`: the decoded integer sum back to model units, rotated back.

The rotation keeps the protocol's vector length d (:func:`coded_fl.dp.transform.rotate`).
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Mapping, Sequence

import numpy as np

from coded_fl.dp.keys import noise_key
from coded_fl.dp.noise import skellam
from coded_fl.dp.settings import DPPlan
from coded_fl.dp.transform import clip_l2, rotate, round_randomized, unrotate
from coded_fl.errors import InputError
from coded_fl.secagg.aligned_graph import Edge

__all__ = ["group_noise", "noisy_group_sum", "prepare", "privatize", "release", "rotation_seed"]


def rotation_seed(run: str, round_: int) -> int:
    """The public seed of round ``round_``'s rotation (63 bits), the same at every silo and at
    the server: a fresh rotation every round, so no coordinate stays badly spread.

    Parameters
    ----------
    run
        The run's public id (``ProtocolConfig.seed_id``).
    round_
        The protocol round.

    Returns
    -------
    int
    """
    h = hashlib.blake2b(f"{run}/{round_}".encode(), digest_size=8, person=b"codedfl-dprot")
    return int.from_bytes(h.digest(), "little") >> 1


def prepare(update: np.ndarray, plan: DPPlan, *, length: int, seed: int) -> np.ndarray:
    """A partition's update as the vector its replicas quantize: padded with zeros to
    ``length``, clipped to L2 norm ``plan.step * plan.clip_steps``, rotated (model units).

    Parameters
    ----------
    update
        The partition's update in model units (float, at most ``length`` coordinates).
    plan
        The run's plan.
    length
        The protocol's vector length (the rotation keeps it).
    seed
        The round's :func:`rotation_seed`.

    Returns
    -------
    numpy.ndarray
        float64, length ``length``; L2 norm at most the clip.

    Raises
    ------
    InputError
        If the update is longer than ``length``, or has NaN or infinite values.
    """
    flat = np.asarray(update, dtype=np.float64).ravel()
    if flat.size > length:
        raise InputError(f"an update of {flat.size} coordinates does not fit {length}")
    padded = np.zeros(length, dtype=np.float64)
    padded[: flat.size] = flat
    clipped, _ = clip_l2(padded, plan.step * plan.clip_steps)
    return rotate(clipped, seed=seed)


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
    ready = prepare(update, plan, length=np.asarray(update).size, seed=seed)
    return round_randomized(ready / plan.step, rng=rng)


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


def group_noise(
    edge_keys: Mapping[Edge, bytes],
    group: int,
    plan: DPPlan,
    *,
    run_id: bytes,
    round_: int,
    context: bytes,
    size: int,
) -> np.ndarray:
    """Group ``group``'s share of the round's noise: Sk(mu_group, mu_group) per coordinate,
    drawn from the group's noise key (:func:`coded_fl.dp.keys.noise_key`, which only its
    members hold together) and bound to the round and the request's context, so every member
    draws the same vector and a request asked twice with other inputs gets independent noise.

    Parameters
    ----------
    edge_keys
        The mask-graph edge keys the silo holds (every edge at its group).
    group
        The silo's group.
    plan
        The run's plan (``plan.mu_group``).
    run_id
        The run (``ProtocolConfig.run_bytes``).
    round_
        The protocol round.
    context
        The request's mask context (:func:`coded_fl.secagg.aligned.mask_context`: the request
        and the digest of the training inputs).
    size
        The vector length.

    Returns
    -------
    numpy.ndarray
        int64, length ``size``.
    """
    key = noise_key(edge_keys, group, run_id=run_id)
    bound = b"codedfl-dp-noise/" + struct.pack("<QI", round_, group) + context
    return skellam(key, bound, mu=plan.mu_group, size=size)


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
