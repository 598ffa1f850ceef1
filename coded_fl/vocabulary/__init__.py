"""The wire vocabulary: every name coded-fl puts into a Flower record, config or node config.

Both Flower adapters (``strategies`` on the server, ``clients`` on the silos) take their names
from here, so the two ends cannot drift apart. One rule: every name is ``codedfl.<name>``
(Flower flattens a dotted node-config key ``codedfl.silo=3`` to the same ``"codedfl.silo"``).
Domain-separation labels inside the cryptography (HKDF infos, BLAKE2 personalisations) are not
names on the wire and stay where they are used.

Record keys of a message's content
    :data:`MSG_KEY` (an encoded :mod:`coded_fl.secagg.messages` message, framed by
    :func:`frame`), :data:`TRAIN_KEY` (the :class:`TrainSpec`), :data:`INFO_KEY` (non-secret
    telemetry a silo adds to its replies), :data:`SHUFFLE_KEY` (an encoded shuffle packet).
Entries of the train config the user's train function sees
    :data:`PARTITION_ENTRY`, :data:`SEED_ENTRY`.
Keys of a silo's ``context.state``
    :data:`STATE_KEY`, :data:`SHUFFLE_STATE_KEY` (never leave the node).
Node-config keys
    :data:`SILO_NODE_KEY`, :data:`STORE_NODE_KEY`, :data:`ORG_KEY_FILE_NODE_KEY`.
Flower's own legacy record names (not ours: the names a ``NumPyClient`` app reads and writes)
    :data:`LEGACY_FIT_ARRAYS`, :data:`LEGACY_FIT_CONFIG`, :data:`LEGACY_RES_ARRAYS`,
    :data:`LEGACY_RES_WEIGHT`, :data:`LEGACY_RES_METRICS`, :data:`LEGACY_RES_STATUS`,
    :data:`LEGACY_WEIGHT_KEY`.

The names are defined in :mod:`coded_fl.vocabulary.names`, the framing in
:mod:`coded_fl.vocabulary.frames`, the train spec, its bounds and the inputs digest in
:mod:`coded_fl.vocabulary.train_spec`; this module re-exports them all.

>>> frame_bytes = unframe(frame(b"abc"))
>>> frame_bytes
b'abc'
"""

from __future__ import annotations

from coded_fl.vocabulary.frames import (
    FRAME_ARRAY,
    NPY_HEADER_LIMIT,
    frame,
    frame_npy,
    read_frame,
    read_npy_header,
    unframe,
)
from coded_fl.vocabulary.names import (
    DATA_STORE_NODE_KEY,
    INFO_KEY,
    LEGACY_FIT_ARRAYS,
    LEGACY_FIT_CONFIG,
    LEGACY_RES_ARRAYS,
    LEGACY_RES_METRICS,
    LEGACY_RES_STATUS,
    LEGACY_RES_WEIGHT,
    LEGACY_WEIGHT_KEY,
    METRIC_NAMES_ENTRY,
    MSG_KEY,
    ORG_KEY_FILE_NODE_KEY,
    PARTITION_ENTRY,
    PARTITION_UNITS_ENTRY,
    PREFIX,
    SEED_ENTRY,
    SHUFFLE_ACTION,
    SHUFFLE_KEY,
    SHUFFLE_STATE_KEY,
    SILO_NODE_KEY,
    STATE_KEY,
    STORE_NODE_KEY,
    TRAIN_KEY,
    is_ours,
)
from coded_fl.vocabulary.train_spec import (
    CLIP_WIDENING,
    MAX_DELTA_SCALE,
    MAX_METRIC_SLOTS,
    MODEL_DIGEST_CONTEXT,
    TrainSpec,
    auto_metric_names,
    inputs_digest,
    metric_slot_names,
)

__all__ = [
    "CLIP_WIDENING",
    "DATA_STORE_NODE_KEY",
    "FRAME_ARRAY",
    "INFO_KEY",
    "LEGACY_FIT_ARRAYS",
    "LEGACY_FIT_CONFIG",
    "LEGACY_RES_ARRAYS",
    "LEGACY_RES_METRICS",
    "LEGACY_RES_STATUS",
    "LEGACY_RES_WEIGHT",
    "LEGACY_WEIGHT_KEY",
    "MAX_DELTA_SCALE",
    "MAX_METRIC_SLOTS",
    "METRIC_NAMES_ENTRY",
    "MODEL_DIGEST_CONTEXT",
    "MSG_KEY",
    "NPY_HEADER_LIMIT",
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
    "TrainSpec",
    "auto_metric_names",
    "frame",
    "frame_npy",
    "inputs_digest",
    "is_ours",
    "metric_slot_names",
    "read_frame",
    "read_npy_header",
    "unframe",
]
