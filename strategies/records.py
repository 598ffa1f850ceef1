"""The server's model records: the reply's metric names, and a decoded flat vector back into
a model record.

Names come from :mod:`coded_fl.vocabulary` (the one owner of the wire vocabulary, shared with
the client mod); the update-vector layout and the flattening of a model come from
:mod:`coded_fl.layout`; framing a protocol message into a record and reading it back is
:mod:`coded_fl_flower.records`, which both adapters share.
Model arrays travel flattened in a fixed order (the ArrayRecord's key order) as float32;
integer arrays are summed exactly apart from them (:mod:`coded_fl.layout`) and come back as
float64 weighted means, as Flower's FedAvg returns them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

import numpy as np
import torch
from flwr.app import Array, ArrayRecord

from coded_fl.errors import ConfigurationError
from coded_fl.layout import DecodedUpdate
from coded_fl.vocabulary import INFO_KEY, METRIC_NAMES_ENTRY

__all__ = [
    "integer_arrays",
    "keep_layout",
    "metric_names",
    "unflatten",
]


#: Bounds on a reply's metric names (they only label sums; anything beyond is not read).
MAX_METRIC_NAMES, MAX_METRIC_NAME = 256, 256


def metric_names(reply: object) -> tuple[str, ...] | None:
    """The metric names a silo's reply gives for the metric slots (its :data:`INFO_KEY`
    record's :data:`METRIC_NAMES_ENTRY`, a JSON list), or None where it gives none or
    something else: a malformed entry only leaves that round's metrics unlabelled.

    Parameters
    ----------
    reply
        A silo's Flower reply.

    Returns
    -------
    tuple[str, ...] | None
    """
    try:
        raw = reply.content[INFO_KEY][METRIC_NAMES_ENTRY]  # type: ignore[attr-defined]
        if not isinstance(raw, str) or len(raw) > MAX_METRIC_NAMES * (MAX_METRIC_NAME + 4):
            return None
        names = json.loads(raw)
    except (KeyError, TypeError, ValueError, AttributeError):
        return None
    if not (
        isinstance(names, list)
        and len(names) <= MAX_METRIC_NAMES
        and all(isinstance(n, str) and 0 < len(n) <= MAX_METRIC_NAME for n in names)
        and len(set(names)) == len(names)
    ):
        return None
    return tuple(names)


def unflatten(
    vector: torch.Tensor,
    like: ArrayRecord,
    *,
    integers: Mapping[str, np.ndarray] | None = None,
) -> ArrayRecord:
    """Split a flat vector into arrays shaped (and typed) like ``like``.

    Parameters
    ----------
    vector
        The flat model, in ``like``'s key order (the arrays in ``integers`` left out).
    like
        The record whose names, shapes and dtypes the result takes.
    integers
        Arrays taken as they are, in ``like``'s key order (:func:`integer_arrays`).

    Returns
    -------
    ArrayRecord

    Raises
    ------
    ConfigurationError
        If the vector's length is not the model's.
    """
    out = ArrayRecord()
    pos = 0
    flat = vector.detach().cpu().numpy()
    given = integers or {}
    for name, arr in like.items():
        if name in given:
            out[name] = Array(np.asarray(given[name], order="C"))
            continue
        size = int(np.prod(arr.shape)) if arr.shape else 1
        piece = flat[pos : pos + size].reshape(arr.shape).astype(arr.dtype)
        out[name] = Array(np.asarray(piece, order="C"))  # asarray keeps a 0-d shape
        pos += size
    if pos != flat.size:
        raise ConfigurationError(f"vector has {flat.size} elements, the model {pos}")
    return out


def integer_arrays(
    decoded: DecodedUpdate, names: Sequence[str], like: ArrayRecord
) -> dict[str, np.ndarray]:
    """The integer arrays' weighted means as Flower's FedAvg gives them: float64, shaped like
    ``like``'s arrays; where replicas disagreed (erased) the value in ``like`` is kept.

    Parameters
    ----------
    decoded
        The round's decoded update (:attr:`~coded_fl.layout.DecodedUpdate.integer_mean`).
    names
        The model's integer arrays, in the layout's order.
    like
        The model of the round.

    Returns
    -------
    dict[str, numpy.ndarray]
    """
    out, at = {}, 0
    for name in names:
        old = like[name].numpy()
        mean = decoded.integer_mean[at : at + old.size]
        kept = decoded.integer_erased[at : at + old.size]
        value = np.where(kept, old.reshape(-1).astype(np.float64), mean)
        out[name] = value.reshape(old.shape)
        at += old.size
    return out


def keep_layout(got: ArrayRecord, like: ArrayRecord) -> ArrayRecord:
    """``got`` with each floating array cast back to the dtype of the same array in ``like``.

    Server-side optimisers may change the dtype of the model (under NumPy 2, FedAdam's float64
    step promotes a float32 model to float64); the silos train the model they are sent and
    their replies must keep its layout, so the global model keeps the dtypes it started with.
    Arrays whose name or shape differ are left as they are.

    Parameters
    ----------
    got
        The wrapped strategy's aggregate.
    like
        The model of the round.

    Returns
    -------
    ArrayRecord
    """
    out = ArrayRecord()
    for name, arr in got.items():
        ref = like.get(name) if name in like else None
        if (  # decided on the metadata: only an array to cast is deserialised
            isinstance(ref, Array)
            and tuple(ref.shape) == tuple(arr.shape)
            and np.dtype(ref.dtype) != np.dtype(arr.dtype)
            and np.issubdtype(np.dtype(arr.dtype), np.floating)
            and np.issubdtype(np.dtype(ref.dtype), np.floating)
        ):
            out[name] = Array(np.asarray(arr.numpy().astype(ref.dtype), order="C"))
        else:
            out[name] = arr
    return out
