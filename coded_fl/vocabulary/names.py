"""The names coded-fl puts on the wire: record keys, config entries, ``context.state`` keys,
node-config keys, Flower's legacy record names and the shuffle messages' action.

:mod:`coded_fl.vocabulary` groups them (and re-exports them); every name of ours is
``codedfl.<name>`` (:func:`is_ours`).
"""

from __future__ import annotations

__all__ = [
    "DATA_STORE_NODE_KEY",
    "INFO_KEY",
    "LEGACY_FIT_ARRAYS",
    "LEGACY_FIT_CONFIG",
    "LEGACY_RES_ARRAYS",
    "LEGACY_RES_METRICS",
    "LEGACY_RES_STATUS",
    "LEGACY_RES_WEIGHT",
    "LEGACY_WEIGHT_KEY",
    "METRIC_NAMES_ENTRY",
    "MSG_KEY",
    "ORG_KEY_FILE_NODE_KEY",
    "PARTITION_ENTRY",
    "PARTITION_UNITS_ENTRY",
    "PREFIX",
    "SEED_ENTRY",
    "SHUFFLE_ACTION",
    "SHUFFLE_KEY",
    "SHUFFLE_STATE_KEY",
    "SILO_NODE_KEY",
    "STATE_KEY",
    "STORE_NODE_KEY",
    "TRAIN_KEY",
    "is_ours",
]

PREFIX = "codedfl."

MSG_KEY = PREFIX + "msg"
TRAIN_KEY = PREFIX + "train"
INFO_KEY = PREFIX + "info"
#: The entry of a silo's :data:`INFO_KEY` record that names, as a JSON list, the metrics it
#: packed into the metric slots (a train spec with ``metric-slots``): names, never values.
METRIC_NAMES_ENTRY = "metric-names"
SHUFFLE_KEY = PREFIX + "shuffle.msg"

PARTITION_ENTRY = PREFIX + "partition"
SEED_ENTRY = PREFIX + "seed"
#: Train config entry (JSON ``[[unit ids of partition 0], ...]``): the partition map of a run
#: whose data coded shuffling placed (``strategies.placement``, ``clients.data``).
PARTITION_UNITS_ENTRY = PREFIX + "partition-units"
#: Node config entry a silo's own store path is pinned under while the coded-fl mod calls the
#: train function with another ``partition-id`` (``clients.data.silo_data_mod``).
DATA_STORE_NODE_KEY = PREFIX + "data-store"

STATE_KEY = PREFIX + "state"
SHUFFLE_STATE_KEY = PREFIX + "shuffle.state"

SILO_NODE_KEY = PREFIX + "silo"
STORE_NODE_KEY = PREFIX + "store"
ORG_KEY_FILE_NODE_KEY = PREFIX + "org-key-file"

#: Flower's legacy train request (``FitIns``): the model and the config a NumPyClient's ``fit``
#: gets, and its reply (``FitRes``): model, sample weight, metrics, status.
LEGACY_FIT_ARRAYS = "fitins.parameters"
LEGACY_FIT_CONFIG = "fitins.config"
LEGACY_RES_ARRAYS = "fitres.parameters"
LEGACY_RES_WEIGHT = "fitres.num_examples"
LEGACY_RES_METRICS = "fitres.metrics"
LEGACY_RES_STATUS = "fitres.status"
#: The entry of :data:`LEGACY_RES_WEIGHT` that holds ``FitRes.num_examples``.
LEGACY_WEIGHT_KEY = "num_examples"

#: The action of shuffle messages: their Flower message type is ``query.codedfl_shuffle``
#: (Flower message types allow no dot after the category).
SHUFFLE_ACTION = "codedfl_shuffle"


def is_ours(key: str) -> bool:
    """True for a record key or config entry that coded-fl owns (the user's code never sees
    those).

    Parameters
    ----------
    key
        A record key or config entry name.

    Returns
    -------
    bool
    """
    return key.startswith(PREFIX)
