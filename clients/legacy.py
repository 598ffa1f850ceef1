"""Reading a legacy (``NumPyClient``) train reply in the form the mod reads every reply.

A ClientApp built from a ``client_fn`` answers a train request with Flower's legacy records
(``fitres.parameters``: the arrays as serialised NumPy bytes without names, shapes or dtypes;
``fitres.num_examples``; ``fitres.metrics`` as a ConfigRecord; ``fitres.status``). The mod
turns that into the Message-API form (the arrays under the model's names, one MetricRecord with
the weight and the numeric metrics) and reads it as it reads any reply: one mod, one path. The
arrays keep their bytes; shapes and dtypes are read from the ``.npy`` headers (no copy).
"""

from __future__ import annotations

from flwr.app import Array, ArrayRecord, MetricRecord, RecordDict
from flwr.common.constant import SType

from coded_fl.errors import InputError
from coded_fl.layout import npy_header
from coded_fl.vocabulary import (
    LEGACY_RES_ARRAYS,
    LEGACY_RES_METRICS,
    LEGACY_RES_STATUS,
    LEGACY_RES_WEIGHT,
    LEGACY_WEIGHT_KEY,
    TrainSpec,
)

__all__ = ["from_legacy_reply", "is_legacy_reply"]


def is_legacy_reply(content: RecordDict) -> bool:
    """True for the content of a legacy ``FitRes`` reply.

    Parameters
    ----------
    content
        A train reply's content.

    Returns
    -------
    bool
    """
    return LEGACY_RES_ARRAYS in content.array_records


def from_legacy_reply(
    content: RecordDict, model: ArrayRecord, spec: TrainSpec, *, who: str
) -> RecordDict:
    """A legacy ``FitRes`` reply as ``{spec.arrays_key: arrays, "metrics": MetricRecord}``.

    Parameters
    ----------
    content
        The reply's content (``fitres.*`` records).
    model
        The model the silo was sent: the arrays take its names, in its order.
    spec
        The round's train spec (where the arrays go, the weight's name).
    who
        Who produced the reply (for the message).

    Returns
    -------
    RecordDict

    Raises
    ------
    InputError
        A status other than OK, or arrays that are not NumPy arrays or not as many as the
        model's.
    """
    if LEGACY_RES_STATUS in content.config_records:
        status = content.config_records[LEGACY_RES_STATUS]
        code, message = status.get("code", 0), status.get("message", "")
        if code != 0:
            raise InputError(f"{who} returned FitRes status {code!r}: {message!r}")
    arrays = content.array_records[LEGACY_RES_ARRAYS]
    if len(arrays) != len(model):
        raise InputError(
            f"{who} returned {len(arrays)} arrays; the model it was sent has {len(model)}"
        )
    named = ArrayRecord()
    for name, arr in zip(model.keys(), arrays.values(), strict=True):
        try:  # labelled from the .npy header: the bytes are used as they are, not copied
            shape, dtype = npy_header(arr.data)
        except InputError as exc:
            raise InputError(
                f"{who} returned parameters that are not NumPy arrays: {exc}"
            ) from None
        named[name] = Array(dtype=str(dtype), shape=shape, stype=SType.NUMPY, data=arr.data)
    metrics: dict[str, int | float | list[int] | list[float]] = {}
    if LEGACY_RES_METRICS in content.config_records:
        for k, v in content.config_records[LEGACY_RES_METRICS].items():
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                metrics[k] = v
    if LEGACY_RES_WEIGHT in content.metric_records:
        weight = content.metric_records[LEGACY_RES_WEIGHT].get(LEGACY_WEIGHT_KEY)
        if isinstance(weight, (int, float)):
            metrics[spec.weight_key] = weight
    return RecordDict({spec.arrays_key: named, "metrics": MetricRecord(metrics)})
