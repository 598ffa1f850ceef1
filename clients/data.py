"""Partition k's data for the train function, from the silo's shuffle store.

When coded shuffling placed the data (:class:`strategies.placement.ShuffledTraining`), a silo's
partitions live in its unit store (:func:`clients.shuffle.silo_store`), and the train request
carries the partition map (``codedfl.partition-units``). The train function reads the partition
the coded-fl mod asks for without knowing about stores::

    app = ClientApp(mods=[silo_data_mod, coded_secagg_mod])   # silo_data_mod outside
    register_shuffle(app)

    @app.train()
    def train(msg, context):
        x, y = partition_tensors(msg, context)         # torch tensors of partition k
        ds = partition_dataset(msg, context)           # or a datasets.Dataset (flwr-datasets)
        ...

``silo_data_mod`` pins the silo's own store in the node config before ``coded_secagg_mod``
sets ``partition-id`` to the partition being trained (inside it, the silo's own index is no
longer known). Every unit is read with its SHA-256 checked; a unit the store does not hold
raises :class:`MissingDataError`, so the silo never trains a partition it does not fully hold
(the round counts it as a straggler; the next reshuffle repairs its store).

:func:`seed_own_data` fills an empty store with the silo's own data (units ``s<j>-<v>``,
epoch 0): the start of a run in which silos hold their own data only.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
from flwr.app import Context, Message, MessageType
from flwr.clientapp.typing import ClientAppCallable

from coded_fl.errors import CodedFLError, ConfigurationError
from coded_fl.shuffling.partitions import own_units, pack_examples, unpack_examples
from coded_fl.shuffling.plan.units import UnitSpec, digest
from coded_fl.shuffling.storage.store import UnitStore
from coded_fl.vocabulary import (
    DATA_STORE_NODE_KEY,
    PARTITION_UNITS_ENTRY,
    SHUFFLE_STATE_KEY,
    STORE_NODE_KEY,
)

from .shuffle import member_id, silo_store

__all__ = [
    "MissingDataError",
    "partition_arrays",
    "partition_dataset",
    "partition_tensors",
    "partition_units",
    "seed_own_data",
    "silo_data_mod",
]


class MissingDataError(CodedFLError):
    """The silo's store lacks units of a partition it was asked to train (it missed part of a
    placement or reshuffle): the silo is a straggler of the round until a reshuffle repairs
    it."""


def silo_data_mod(msg: Message, context: Context, call_next: ClientAppCallable) -> Message:
    """Flower mod: pin this silo's own store for the train function (place it outside, i.e.
    before, ``coded_secagg_mod``). A node without a store (it never took part in a shuffle and
    has no ``codedfl.store``) passes through unchanged.

    Parameters
    ----------
    msg, context, call_next
        As for every Flower mod.

    Returns
    -------
    Message
        What ``call_next`` returns.
    """
    if msg.metadata.message_type.split(".")[0] != MessageType.TRAIN or not (
        SHUFFLE_STATE_KEY in context.state or context.node_config.get(STORE_NODE_KEY)
    ):
        return call_next(msg, context)  # no store here: nothing to pin
    root = str(silo_store(context).root)
    pinned = Context(
        run_id=context.run_id,
        node_id=context.node_id,
        node_config={**context.node_config, DATA_STORE_NODE_KEY: root},
        state=context.state,
        run_config=context.run_config,
    )
    return call_next(msg, pinned)


def partition_units(msg: Message, context: Context) -> tuple[int, list[Any]]:
    """(k, the unit ids of partition k) for this train call.

    Parameters
    ----------
    msg
        The train message (its config carries the partition map).
    context
        The context the coded-fl mod passes (``partition-id`` = k).

    Returns
    -------
    tuple
        k and the unit ids of partition k.

    Raises
    ------
    ConfigurationError
        The train config lacks the partition map (the server does not place data with
        ``ShuffledTraining``) or k is outside it.
    """
    conf = msg.content.config_records.get("config")
    raw = None if conf is None else conf.get(PARTITION_UNITS_ENTRY)
    if not isinstance(raw, str):
        raise ConfigurationError(
            f"the train config has no '{PARTITION_UNITS_ENTRY}': the server must place the data "
            "with strategies.placement.ShuffledTraining (or load partitions another way)"
        )
    parts = json.loads(raw)
    k = int(context.node_config["partition-id"])
    if not 0 <= k < len(parts):
        raise ConfigurationError(f"partition {k} is not in the partition map ({len(parts)})")
    return k, list(parts[k])


def _store(context: Context) -> UnitStore:
    path = context.node_config.get(DATA_STORE_NODE_KEY)
    if not path:
        raise ConfigurationError(
            "the silo's store is not pinned: add clients.data.silo_data_mod to the ClientApp's "
            "mods before coded_secagg_mod (ClientApp(mods=[silo_data_mod, coded_secagg_mod]))"
        )
    return UnitStore(str(path))


def partition_arrays(msg: Message, context: Context) -> dict[str, np.ndarray]:
    """Partition k's examples: every array of its units, concatenated in unit order.

    Parameters
    ----------
    msg, context
        The train message and the context the coded-fl mod passes, as for
        :func:`partition_units`.

    Returns
    -------
    dict of str to numpy.ndarray

    Raises
    ------
    MissingDataError
        The store lacks units of partition k (none is read: the silo trains nothing).
    DecodingError
        A stored unit no longer matches its SHA-256.
    """
    k, units = partition_units(msg, context)
    store = _store(context)
    held = set(store.units())
    missing = [u for u in units if u not in held]
    if missing:
        raise MissingDataError(
            f"partition {k}: {len(missing)} of {len(units)} units are not in this silo's store "
            "(it missed part of the latest placement or reshuffle); the silo sits this round "
            "out and the next reshuffle repairs it"
        )
    chunks = [unpack_examples(store.read_unit(u)) for u in units]
    if not chunks:
        return {}
    return {name: np.concatenate([c[name] for c in chunks]) for name in chunks[0]}


def partition_tensors(
    msg: Message, context: Context, keys: Sequence[str] = ("x", "y")
) -> tuple[torch.Tensor, ...]:
    """Partition k's arrays ``keys`` as torch tensors (see :func:`partition_arrays`).

    Parameters
    ----------
    msg, context
        As for :func:`partition_arrays`.
    keys
        The arrays to return, in order.

    Returns
    -------
    tuple of torch.Tensor
    """
    arrays = partition_arrays(msg, context)
    return tuple(torch.from_numpy(np.ascontiguousarray(arrays[name])) for name in keys)


def partition_dataset(msg: Message, context: Context) -> Any:
    """Partition k as a Hugging Face ``datasets.Dataset`` (one column per array), for
    flwr-datasets code. Needs the ``datasets`` package.

    Parameters
    ----------
    msg, context
        As for :func:`partition_arrays`.

    Returns
    -------
    datasets.Dataset

    Raises
    ------
    ConfigurationError
        ``datasets`` is not installed.
    """
    try:
        import datasets
    except ImportError:
        raise ConfigurationError(
            "partition_dataset needs the 'datasets' package: pip install datasets (or use "
            "partition_tensors / partition_arrays)"
        ) from None
    arrays = partition_arrays(msg, context)
    return datasets.Dataset.from_dict(dict(arrays))  # one row per example, arrays as they are


def seed_own_data(
    context: Context, arrays: Mapping[str, np.ndarray], *, units_per_silo: int
) -> UnitStore:
    """Fill this silo's empty store with its own data, cut into ``units_per_silo`` units
    (ids ``s<silo>-<v>``, epoch 0); a store that already has an epoch is left alone.

    Parameters
    ----------
    context
        The node's context (its silo index: ``codedfl.silo`` or the simulation's
        ``partition-id``).
    arrays
        The silo's own examples (same first dimension).
    units_per_silo
        Units to cut them into (the server's ``ShuffledTraining`` uses the same number).

    Returns
    -------
    UnitStore
        The silo's store.
    """
    store = silo_store(context)
    if store.epoch is not None:
        return store
    silo = member_id(context, K=1 << 30)
    ids = own_units(silo, units_per_silo)
    n = len(next(iter(arrays.values())))
    cuts = np.array_split(np.arange(n), units_per_silo)
    add = {}
    for unit_id, idx in zip(ids, cuts, strict=True):
        raw = pack_examples({name: np.asarray(a)[idx] for name, a in arrays.items()})
        add[UnitSpec(unit_id, len(raw), digest(raw))] = raw
    store.commit(add=add, epoch=0, known=list(add))
    return store
