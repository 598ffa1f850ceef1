"""Training a silo's partitions: the user's train function once per partition, replies packed.

For a train request the mod (:mod:`clients.mod`) hands the machine's :class:`TrainTask` here:
for every partition k the silo holds, every RNG is seeded from (run, round, k), the user's
function is called on an ordinary train message (no coded-fl records; the partition and seed in
its config, ``partition-id`` and ``num-partitions`` in its node config, a fresh
``context.state``), and its reply (Message-API or a legacy ``FitRes``, :mod:`clients.legacy`) is
checked against the model and packed into partition k's vector
(:math:`(w_k / W)(\\theta_k - \\theta)` plus the weight and the requested metrics).
"""

from __future__ import annotations

import logging

import torch
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp.typing import ClientAppCallable

from coded_fl.errors import ConfigurationError, InputError, RemoteProtocolError
from coded_fl.layout import UpdateLayout, check_same_layout, flatten
from coded_fl.secagg.client import ClientMachine, TrainTask
from coded_fl.secagg.config import ProtocolConfig
from coded_fl.secagg.private import dp_partial
from coded_fl.secagg.silo import (
    partition_seed,
    same_metric_names,
    seed_everything,
    silo_layout,
    weight_ratio,
)
from coded_fl.vocabulary import (
    PARTITION_ENTRY,
    SEED_ENTRY,
    TRAIN_KEY,
    TrainSpec,
    auto_metric_names,
    is_ours,
    metric_slot_names,
)

from .legacy import from_legacy_reply, is_legacy_reply

LOG = logging.getLogger("flwr")

__all__: list[str] = []


def _train_partitions(
    msg: Message,
    context: Context,
    call_next: ClientAppCallable,
    task: TrainTask,
    machine: ClientMachine,
    spec: TrainSpec | None,
) -> tuple[list[torch.Tensor], tuple[str, ...] | None]:
    """Train every partition of the task; the packed partials, and with metric slots the
    names of the metrics the train function returned (the same for every partition)."""
    cfg = machine.config
    if cfg is None:  # pragma: no cover - on_train_request checked it
        raise ConfigurationError("no protocol configuration")
    if spec is None:  # _train_spec found no train spec in the request
        raise RemoteProtocolError(f"train request lacks the '{TRAIN_KEY}' record")
    if spec.arrays_key not in msg.content:
        raise RemoteProtocolError(f"train request lacks the model under '{spec.arrays_key}'")
    model = msg.content[spec.arrays_key]
    ints = spec.integer_arrays
    missing = [name for name in ints if name not in model]
    if missing:
        raise RemoteProtocolError(f"train spec names integer arrays not in the model: {missing}")
    theta = flatten(model, integers=ints)
    lay = silo_layout(model, theta, spec, cfg)
    K = cfg.gradient_code.K
    original = msg.content
    partials = []
    named: dict[int, tuple[str, ...]] = {}
    try:
        for k in task.partitions:
            seed = partition_seed(cfg.seed_id, task.round, k)
            seed_everything(seed)
            # the user's function sees an ordinary train message: no coded-fl records
            sub = RecordDict({n: r for n, r in original.items() if not is_ours(n)})
            if spec.config_key in sub:
                conf = ConfigRecord(dict(sub.config_records[spec.config_key].items()))
            else:
                conf = ConfigRecord()
            conf[PARTITION_ENTRY] = k
            conf[SEED_ENTRY] = seed
            sub[spec.config_key] = conf
            msg.content = sub
            sub_ctx = Context(
                run_id=context.run_id,
                node_id=context.node_id,
                node_config={**context.node_config, "partition-id": k, "num-partitions": K},
                state=RecordDict(),
                run_config=context.run_config,
            )
            reply = call_next(msg, sub_ctx)
            if cfg.dp_plan is not None:  # distributed DP: the clipped, rotated update only
                partials.append(_dp_partial(reply, model, theta, spec, lay, cfg, task.round, k))
                continue
            partial, named[k] = _partial(reply, model, theta, spec, lay, cfg.clip_range, k)
            partials.append(partial)
    finally:
        msg.content = original
    if not spec.metric_slots or cfg.dp_plan is not None:
        return partials, None
    return partials, same_metric_names(named)


def _dp_partial(
    reply: Message,
    model: object,
    theta: torch.Tensor,
    spec: TrainSpec,
    lay: UpdateLayout,
    cfg: ProtocolConfig,
    round_: int,
    k: int,
) -> torch.Tensor:
    """Partition k's update under distributed DP: theta_k - theta, unweighted (a weight
    would reveal the partition's size and scale its update past the clip), clipped to the
    L2 clip and rotated (:func:`coded_fl.secagg.private.dp_partial`); no metrics travel."""
    who = f"the train function (partition {k})"
    _, arrays = _reply_arrays(reply, model, spec, lay, who)
    trained = flatten(arrays, integers=lay.integer_names)
    try:
        return dp_partial(trained - theta, cfg, round_)
    except InputError as exc:
        raise InputError(f"{who}: {exc}") from None


def _reply_arrays(
    reply: Message, model: object, spec: TrainSpec, lay: UpdateLayout, who: str
) -> tuple[RecordDict, ArrayRecord]:
    """The train function's reply content (a legacy ``FitRes`` read as records) and its
    model, checked against the model sent; typed errors naming ``who``."""
    if reply.has_error():
        raise InputError(f"{who} failed: {reply.error.reason}")
    content = reply.content
    if is_legacy_reply(content):  # a NumPyClient app (client_fn): Flower's FitRes records
        content = from_legacy_reply(content, model, spec, who=who)  # type: ignore[arg-type]
    arrays = content.get(spec.arrays_key)
    if arrays is None:
        raise InputError(f"{who} returned no ArrayRecord under '{spec.arrays_key}'")
    check_same_layout(arrays, model, who=who, integers=lay.integer_names)  # type: ignore[arg-type]
    return content, arrays  # type: ignore[return-value]


def _partial(
    reply: Message,
    model: object,
    theta: torch.Tensor,
    spec: TrainSpec,
    lay: UpdateLayout,
    c: float,
    k: int,
) -> tuple[torch.Tensor, tuple[str, ...]]:
    """Partition k's packed vector, and the names of its metrics (with metric slots)."""
    who = f"the train function (partition {k})"
    content, arrays = _reply_arrays(reply, model, spec, lay, who)
    metrics = next(
        (r for r in content.values() if isinstance(r, MetricRecord) and spec.weight_key in r), None
    )
    if metrics is None:
        raise InputError(f"{who} returned no MetricRecord with '{spec.weight_key}'")
    w = float(metrics[spec.weight_key])  # type: ignore[arg-type]
    rho = weight_ratio(w, spec, who=who, log=LOG)
    names: tuple[str, ...] = ()
    if spec.metric_keys:
        values = {name: float(metrics.get(name, 0.0)) for name in spec.metric_keys}  # type: ignore[arg-type]
    else:  # the slots carry its numeric metrics, by name (the reply names them)
        names = auto_metric_names(metrics, spec.weight_key)
        slots = zip(metric_slot_names(spec.metric_slots), names, strict=False)
        values = {slot: float(metrics[name]) for slot, name in slots}  # type: ignore[arg-type]
    try:
        packed = lay.pack_arrays(
            arrays,
            theta,
            rho=rho,
            clip_range=c,
            metrics=values,
            delta_scale=spec.delta_scale,
            examples=w,
        )
    except InputError as exc:
        raise InputError(f"{who}: {exc}") from None
    return packed, names
