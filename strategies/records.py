"""The one place where coded-fl protocol messages meet Flower records (server and client side).

Record keys are namespaced ``codedfl.*``:

- ``codedfl.msg`` (ArrayRecord, one uint8 Array ``"msg"``): an encoded
  :mod:`coded_fl.secagg.messages` message. Carried as an Array so that Flower chunks large
  uploads like any model.
- ``codedfl.train`` (ConfigRecord): how the client mod turns the user's train replies into the
  vector the protocol aggregates (record keys, weight normalisation, metric names).
- ``codedfl.info`` (ConfigRecord): non-secret telemetry a silo adds to its replies
  (its training time), used for progress lines.

Model arrays travel flattened in a fixed order (the ArrayRecord's key order) as float32.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from flwr.app import Array, ArrayRecord, ConfigRecord, RecordDict

from coded_fl.errors import ConfigurationError, InputError, RemoteProtocolError
from coded_fl.secagg.messages import Message, decode, encode

__all__ = [
    "INFO_KEY",
    "MSG_KEY",
    "TRAIN_KEY",
    "TrainSpec",
    "accusation_tag",
    "accused_in",
    "bytes_record",
    "flatten",
    "keep_layout",
    "message_from",
    "message_record",
    "record_bytes",
    "unflatten",
]

MSG_KEY = "codedfl.msg"
TRAIN_KEY = "codedfl.train"
INFO_KEY = "codedfl.info"
_ACCUSES = re.compile(r"\[codedfl\.accuses=(\d+)\]")


def accusation_tag(silo: int) -> str:
    """Appended to a silo's error reply when a share *from* ``silo`` failed authentication."""
    return f"[codedfl.accuses={int(silo)}]"


def accused_in(reason: str) -> int | None:
    """The silo an error reply accuses (see :func:`accusation_tag`), or None."""
    m = _ACCUSES.search(reason)
    return int(m.group(1)) if m else None


def bytes_record(raw: bytes) -> ArrayRecord:
    """Encoded bytes as a Flower ArrayRecord (one uint8 Array ``"msg"``, so that Flower chunks
    large messages like any model)."""
    return ArrayRecord({"msg": Array(np.frombuffer(raw, dtype=np.uint8))})


def record_bytes(content: RecordDict, key: str) -> bytes | None:
    """The bytes :func:`bytes_record` put under ``key``, or None if ``content`` has no ``key``
    (RemoteProtocolError if the record there is not such a record)."""
    if key not in content:
        return None
    rec = content[key]
    if not isinstance(rec, ArrayRecord) or "msg" not in rec:
        raise RemoteProtocolError(f"'{key}' must be an ArrayRecord holding one Array 'msg'")
    arr = rec["msg"].numpy()
    if arr.dtype != np.uint8 or arr.ndim != 1:
        raise RemoteProtocolError(f"'{key}' must hold a 1-D uint8 array")
    return arr.tobytes()


def message_record(msg: Message) -> ArrayRecord:
    """An encoded protocol message as a Flower ArrayRecord."""
    return bytes_record(encode(msg))


def message_from(content: RecordDict) -> Message | None:
    """The protocol message in a RecordDict, or None if it carries none."""
    raw = record_bytes(content, MSG_KEY)
    return None if raw is None else decode(raw)


@dataclass(frozen=True)
class TrainSpec:
    """What the mod reads from the user's train replies and how it scales them.

    ``max_weight`` normalises the sample weights: partition k contributes
    :math:`(w_k / W)(\\theta_k - \\theta)` and :math:`w_k / W`, so with ``clip_range`` c the
    quantized entries stay within c as long as :math:`w_k \\le W` (a larger weight is refused
    with advice) and :math:`|\\theta_k - \\theta| \\le c`.
    """

    arrays_key: str = "arrays"
    config_key: str = "config"
    weight_key: str = "num-examples"
    max_weight: float = 1000.0
    metric_keys: tuple[str, ...] = ()

    def to_record(self) -> ConfigRecord:
        return ConfigRecord(
            {
                "arrays-key": self.arrays_key,
                "config-key": self.config_key,
                "weight-key": self.weight_key,
                "max-weight": float(self.max_weight),
                "metric-keys": ",".join(self.metric_keys),
            }
        )

    @classmethod
    def from_record(cls, rec: ConfigRecord) -> TrainSpec:
        try:
            keys = str(rec["metric-keys"])
            return cls(
                arrays_key=str(rec["arrays-key"]),
                config_key=str(rec["config-key"]),
                weight_key=str(rec["weight-key"]),
                max_weight=float(rec["max-weight"]),  # type: ignore[arg-type]
                metric_keys=tuple(k for k in keys.split(",") if k),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise RemoteProtocolError(f"malformed '{TRAIN_KEY}' record: {exc}") from None


def flatten(arrays: ArrayRecord) -> torch.Tensor:
    """All arrays of a record, in key order, as one float32 vector."""
    parts = []
    for name, arr in arrays.items():
        a = arr.numpy()
        if not np.issubdtype(a.dtype, np.floating):
            raise InputError(
                f"array '{name}' has dtype {a.dtype}: coded-fl aggregates floating point "
                "arrays only (keep integer buffers such as BatchNorm counters out of the record)"
            )
        parts.append(torch.from_numpy(np.ascontiguousarray(a, dtype=np.float32).reshape(-1)))
    if not parts:
        raise InputError("the ArrayRecord is empty: nothing to aggregate")
    return torch.cat(parts)


def layout(arrays: ArrayRecord) -> tuple[tuple[str, tuple[int, ...], str], ...]:
    """(name, shape, dtype) of every array, in order: what must match between records."""
    out = []
    for name, arr in arrays.items():
        out.append((name, tuple(arr.shape), str(arr.dtype)))
    return tuple(out)


def unflatten(vector: torch.Tensor, like: ArrayRecord) -> ArrayRecord:
    """Split a flat vector into arrays shaped (and typed) like ``like``."""
    out = ArrayRecord()
    pos = 0
    flat = vector.detach().cpu().numpy()
    for name, arr in like.items():
        size = int(np.prod(arr.shape)) if arr.shape else 1
        piece = flat[pos : pos + size].reshape(arr.shape).astype(arr.dtype)
        out[name] = Array(np.ascontiguousarray(piece))
        pos += size
    if pos != flat.size:
        raise ConfigurationError(f"vector has {flat.size} elements, the model {pos}")
    return out


def keep_layout(got: ArrayRecord, like: ArrayRecord) -> ArrayRecord:
    """``got`` with each floating array cast back to the dtype of the same array in ``like``.

    Server-side optimisers may change the dtype of the model (under NumPy 2, FedAdam's float64
    step promotes a float32 model to float64); the silos train the model they are sent and
    their replies must keep its layout, so the global model keeps the dtypes it started with.
    Arrays whose name or shape differ are left as they are."""
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
            out[name] = Array(np.ascontiguousarray(arr.numpy().astype(ref.dtype)))
        else:
            out[name] = arr
    return out


def check_same_layout(got: ArrayRecord, expected: ArrayRecord, *, who: str) -> None:
    if layout(got) != layout(expected):
        raise InputError(
            f"{who} returned arrays whose names/shapes/dtypes differ from the model it received: "
            f"{_describe(layout(got))} vs {_describe(layout(expected))}"
        )


def _describe(lay: Sequence[tuple[str, tuple[int, ...], str]]) -> str:
    shown = ", ".join(f"{n}{list(s)}" for n, s, _ in lay[:4])
    return f"[{shown}{', ...' if len(lay) > 4 else ''}]"
