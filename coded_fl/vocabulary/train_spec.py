"""The train spec (what the mod reads from the user's train replies and how it scales them),
its bounds, the metric slots' names, and the digest of everything a silo's training consumes.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import blake3

from coded_fl.errors import RemoteProtocolError
from coded_fl.vocabulary.names import TRAIN_KEY

__all__ = [
    "CLIP_WIDENING",
    "MAX_DELTA_SCALE",
    "MAX_METRIC_SLOTS",
    "MODEL_DIGEST_CONTEXT",
    "TrainSpec",
    "auto_metric_names",
    "inputs_digest",
    "metric_slot_names",
]

#: At most this many metric slots in a train spec (each costs one coordinate of the vector).
MAX_METRIC_SLOTS = 64

#: The largest :attr:`TrainSpec.delta_scale` (a clip range 2^16 times the configured one).
MAX_DELTA_SCALE = 2.0**16

#: How much the server widens (or narrows) the clip range in one step, through the delta
#: scale (2 bits); a silo flags a partition with an entry beyond c / CLIP_WIDENING, so the
#: server knows whether a narrower range would clip.
CLIP_WIDENING = 4.0


@dataclass(frozen=True)
class TrainSpec:
    """What the mod reads from the user's train replies and how it scales them.

    ``max_weight`` W normalises the sample weights: partition k contributes
    :math:`(w_k / W)(\\theta_k - \\theta)` and :math:`w_k / W`, so with ``clip_range`` c the
    quantized entries stay within c as long as :math:`w_k \\le W` (a larger weight is refused
    with advice) and :math:`|\\theta_k - \\theta| \\le c`.

    Parameters
    ----------
    arrays_key, config_key, weight_key
        Where the wrapped strategy puts the model and the train config, and which metric holds
        the sample weight.
    max_weight
        W, the largest sample weight a partition may report.
    metric_keys
        Train metrics aggregated securely (weighted by the sample weights).
    metric_slots
        With no ``metric_keys``: this many slots for the metrics the train function returns,
        whatever their names (:func:`auto_metric_names`: its numeric metrics but the weight,
        by name, the first ``metric_slots``); each silo packs them in that order and names
        them in its reply's :data:`INFO_KEY` record (:data:`METRIC_NAMES_ENTRY`). 0: none.
    auto_weight
        W is the server's automatic bound (a power of two): a larger weight is answered with
        a ``WEIGHT_BOUND`` refusal asking for the bound it needs, not refused as a setting.
    delta_scale
        g, a power of two >= 1 chosen by the server for the round: the model entries are
        packed as :math:`(w_k / W)(\\theta_k - \\theta) / g`, so the round's clip range is
        effectively :math:`g c` (and its quantization step g times coarser). The server raises
        it after a round that clipped (:mod:`strategies.adaptation`); public, like W.
    integer_arrays
        The names of the model's integer arrays (integer dtype in the run's initial model),
        summed exactly (:mod:`coded_fl.layout`); fixed for the run, since Flower's FedAvg hands
        them back as float64.
    """

    arrays_key: str = "arrays"
    config_key: str = "config"
    weight_key: str = "num-examples"
    max_weight: float = 1000.0
    metric_keys: tuple[str, ...] = ()
    metric_slots: int = 0
    auto_weight: bool = False
    delta_scale: float = 1.0
    integer_arrays: tuple[str, ...] = ()

    @property
    def packed_metrics(self) -> tuple[str, ...]:
        """The metric coordinates' names in the layout: ``metric_keys``, or one placeholder
        per slot (:func:`metric_slot_names`)."""
        return self.metric_keys or metric_slot_names(self.metric_slots)

    def to_dict(self) -> dict[str, str | float]:
        """The entries of the :data:`TRAIN_KEY` config record."""
        return {
            "arrays-key": self.arrays_key,
            "config-key": self.config_key,
            "weight-key": self.weight_key,
            "max-weight": float(self.max_weight),
            "metric-keys": ",".join(self.metric_keys),
            "metric-slots": int(self.metric_slots),
            "auto-weight": int(self.auto_weight),
            "delta-scale": float(self.delta_scale),
            "integer-arrays": json.dumps(list(self.integer_arrays)),
        }

    @classmethod
    def from_dict(cls, entries: Mapping[str, object]) -> TrainSpec:
        """Read what :meth:`to_dict` wrote.

        Parameters
        ----------
        entries
            The train record's entries.

        Returns
        -------
        TrainSpec

        Raises
        ------
        RemoteProtocolError
            If an entry is missing or of the wrong type, or max-weight is not finite and > 0.
        """
        try:
            keys = str(entries["metric-keys"])
            spec = cls(
                arrays_key=str(entries["arrays-key"]),
                config_key=str(entries["config-key"]),
                weight_key=str(entries["weight-key"]),
                max_weight=float(entries["max-weight"]),  # type: ignore[arg-type]
                metric_keys=tuple(k for k in keys.split(",") if k),
                metric_slots=_count(entries.get("metric-slots", 0)),
                auto_weight=bool(int(entries.get("auto-weight", 0))),  # type: ignore[call-overload]
                delta_scale=float(entries.get("delta-scale", 1.0)),  # type: ignore[arg-type]
                integer_arrays=_names(entries.get("integer-arrays", "[]")),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise RemoteProtocolError(f"malformed '{TRAIN_KEY}' record: {exc}") from None
        if not (math.isfinite(spec.max_weight) and spec.max_weight > 0):
            # every partition's weight is divided by it
            raise RemoteProtocolError(
                f"'{TRAIN_KEY}' record: max-weight must be finite and > 0, got {spec.max_weight}"
            )
        if spec.auto_weight and math.frexp(spec.max_weight)[0] != 0.5:
            # the automatic bound moves on powers of two only: a silo's refusals then tell the
            # server at most the power of two of its partitions' weights, never finer
            raise RemoteProtocolError(
                f"'{TRAIN_KEY}' record: an automatic max-weight must be a power of two, got "
                f"{spec.max_weight}"
            )
        if not 0 <= spec.metric_slots <= MAX_METRIC_SLOTS or (
            spec.metric_slots and spec.metric_keys
        ):
            raise RemoteProtocolError(
                f"'{TRAIN_KEY}' record: metric-slots must be in [0, {MAX_METRIC_SLOTS}] and 0 "
                f"when metric-keys names the metrics, got {spec.metric_slots}"
            )
        g = spec.delta_scale
        if not (math.isfinite(g) and 1 <= g <= MAX_DELTA_SCALE and math.frexp(g)[0] == 0.5):
            # a power of two: dividing by it is exact in float32, so replicas stay identical
            raise RemoteProtocolError(
                f"'{TRAIN_KEY}' record: delta-scale must be a power of two in [1, "
                f"{MAX_DELTA_SCALE:g}], got {g}"
            )
        return spec


def _count(raw: object) -> int:
    """A whole number (the ``metric-slots`` entry); ValueError otherwise."""
    if isinstance(raw, bool) or not isinstance(raw, int | float) or raw != int(raw):
        raise ValueError(f"metric-slots must be a whole number, got {raw!r}")
    return int(raw)


def metric_slot_names(slots: int) -> tuple[str, ...]:
    """Placeholder names of metric slots in the layout: the silos name what each carries in
    their replies.

    Parameters
    ----------
    slots
        How many slots (:attr:`TrainSpec.metric_slots`).

    Returns
    -------
    tuple of str
        ``("#0", "#1", ...)``, ``slots`` of them.
    """
    return tuple(f"#{j}" for j in range(slots))


def auto_metric_names(metrics: Mapping[str, object], weight_key: str) -> tuple[str, ...]:
    """The metrics a silo packs into the metric slots, in slot order.

    Parameters
    ----------
    metrics
        A train function's metric record.
    weight_key
        The entry that holds the sample weight (not a metric).

    Returns
    -------
    tuple of str
        Every entry that is a number (int or float, not bool), but the weight, sorted by name
        (lists are skipped).
    """
    return tuple(
        sorted(
            k
            for k, v in metrics.items()
            if k != weight_key and isinstance(v, int | float) and not isinstance(v, bool)
        )
    )


def _names(raw: object) -> tuple[str, ...]:
    """A JSON list of strings (the ``integer-arrays`` entry); ValueError otherwise."""
    names = json.loads(str(raw))
    if not (isinstance(names, list) and all(isinstance(n, str) for n in names)):
        raise ValueError(f"integer-arrays must be a JSON list of names, got {raw!r}")
    if len(set(names)) != len(names):
        raise ValueError("integer-arrays names an array twice")
    return tuple(names)


#: BLAKE3's key-derivation context for the inputs digest (its domain separation).
MODEL_DIGEST_CONTEXT = "coded-fl 2026-11-26 train inputs digest v5"


def inputs_digest(content: Any, spec: TrainSpec) -> bytes:
    """BLAKE3 (256 bits, key-derivation mode) of everything a silo's training consumes, as
    it was sent: the model (each array's name and npy bytes, in name order; no copy), the train
    spec (``max-weight``, ``delta-scale``, ... under :data:`TRAIN_KEY`) and the user's config
    record (learning rate, epochs, ...); nothing per silo. The silo computes it over the train
    message it received (``clients.mod._model_digest``), the server's driver over the content
    it sends (the server judges a disputed mask share under it). BLAKE3 hashes a 4 MB model in
    0.6 ms where SHA-256 takes 2.2 ms (one core).

    Parameters
    ----------
    content
        A Flower ``RecordDict`` (its ``array_records`` and ``config_records``).
    spec
        The train spec it carries (names the model's and the user's records).

    Returns
    -------
    bytes
        32 bytes.
    """
    h = blake3.blake3(derive_key_context=MODEL_DIGEST_CONTEXT)
    record = content.array_records[spec.arrays_key]
    for name in sorted(record):
        raw, data = name.encode(), record[name].data
        h.update(len(raw).to_bytes(4, "little") + raw + len(data).to_bytes(8, "little"))
        h.update(data)
    configs = content.config_records
    for key in (TRAIN_KEY, spec.config_key):
        h.update(_config_bytes(key, configs.get(key)))
    return h.digest()


def _config_bytes(key: str, record: Mapping[str, Any] | None) -> bytes:
    """A config record as unambiguous bytes: its key, then each entry (in key order) as its
    name, the value's type and ``repr`` (exact for floats, ints, strings, bytes and lists of
    them), each length-prefixed; a missing record differs from an empty one."""
    parts = [key.encode(), b"-" if record is None else b"+"]
    for name in sorted(record or ()):
        value = record[name]  # type: ignore[index]
        parts += [name.encode(), type(value).__name__.encode(), repr(value).encode()]
    return b"".join(len(p).to_bytes(4, "little") + p for p in parts)
