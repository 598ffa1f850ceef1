"""``coded_secagg_mod``: the client side of coded secure aggregation as a Flower mod.

Add it to an existing ClientApp and leave the ``@app.train`` function as it is::

    app = ClientApp(mods=[coded_secagg_mod])

For each coded-fl message the mod drives the silo's :class:`coded_fl.secagg.ClientMachine`
(state kept in ``context.state``):

- key and recovery requests are answered by the mod alone (the train function is not called);
- a train request makes the mod call the wrapped train function once per partition the silo
  holds, with ``node_config["partition-id"]`` set to that partition, ``num-partitions`` to K,
  and every RNG (torch, numpy, random) seeded from (run, round, partition), so every replica of
  a partition computes the same update; the replies are turned into
  :math:`(w_k / W)(\\theta_k - \\theta)` plus the weight and the requested metrics, quantized,
  encoded with the gradient code, masked and uploaded. The silo's individual update never
  leaves it in the clear.

Evaluation (and every non-``train`` message) passes through untouched. A ``train`` message
without coded-fl content is refused with advice: the server must use ``strategies.CodedSecAgg``.

The train function must be a deterministic function of (model, config, partition data, seed):
it gets a fresh ``context.state`` for each partition, because replicas of a partition on other
silos do not share this silo's state.
"""

from __future__ import annotations

import hashlib
import random
import time

import numpy as np
import torch
from flwr.app import ConfigRecord, Context, Message, MessageType, MetricRecord, RecordDict
from flwr.clientapp.typing import ClientAppCallable

from coded_fl.errors import ConfigurationError, InputError, RemoteProtocolError
from coded_fl.kernels import warm_up
from coded_fl.secagg.client import ClientMachine, TrainTask
from coded_fl.secagg.messages import SERVER, KeyRequest, RecoveryRequest, TrainRequest
from coded_fl.secagg.messages import Message as ProtocolMessage
from strategies.records import (
    INFO_KEY,
    MSG_KEY,
    TRAIN_KEY,
    TrainSpec,
    accusation_tag,
    check_same_layout,
    flatten,
    message_from,
    message_record,
)

__all__ = ["METRIC_BOUND", "coded_secagg_mod", "partition_seed"]

STATE_KEY = "codedfl.state"
#: Metrics travel scaled by clip_range / METRIC_BOUND (and clipped to +-METRIC_BOUND).
METRIC_BOUND = 1000.0


def partition_seed(run_id: str, server_round: int, partition: int) -> int:
    """The seed every replica of ``partition`` uses in ``server_round`` (63 bits)."""
    h = hashlib.blake2b(
        f"{run_id}/{server_round}/{partition}".encode(), digest_size=8, person=b"codedfl-train"
    )
    return int.from_bytes(h.digest(), "little") >> 1


def _load(context: Context) -> ClientMachine:
    if STATE_KEY not in context.state.config_records:
        return ClientMachine()
    raw = context.state.config_records[STATE_KEY].get("state")
    if not isinstance(raw, bytes):
        raise ConfigurationError(f"context.state['{STATE_KEY}'] was overwritten by other code")
    return ClientMachine.from_bytes(raw)


def _save(context: Context, machine: ClientMachine) -> None:
    context.state[STATE_KEY] = ConfigRecord({"state": machine.to_bytes()})


def coded_secagg_mod(msg: Message, context: Context, call_next: ClientAppCallable) -> Message:
    """Flower mod: coded secure aggregation for the train messages of a ClientApp."""
    if msg.metadata.message_type != MessageType.TRAIN:
        return call_next(msg, context)
    proto = message_from(msg.content)
    if proto is None:
        raise ConfigurationError(
            "coded_secagg_mod received a train message without coded-fl content: wrap the "
            "server's strategy with strategies.CodedSecAgg, or remove the mod from the ClientApp"
        )
    machine = _load(context)  # a restarted node has none: the machine says NEEDS_KEYS
    info: dict[str, float] = {}
    reply: ProtocolMessage
    if isinstance(proto, KeyRequest):
        reply = machine.on_key_request(proto)
        warm_up()  # compile/load the kernels now, not during round 1
    elif isinstance(proto, TrainRequest):
        task = machine.on_train_request(proto)
        t0 = time.perf_counter()
        partials = _train_partitions(msg, context, call_next, task, machine)
        info["train-seconds"] = time.perf_counter() - t0
        reply = machine.upload(task, partials)
    elif isinstance(proto, RecoveryRequest):
        try:
            reply = machine.on_recovery_request(proto)
        except RemoteProtocolError as exc:
            if exc.sender is None or exc.sender == SERVER:
                raise
            # another silo's share failed authentication: name it, machine-readably
            raise RemoteProtocolError(f"{exc} {accusation_tag(exc.sender)}") from None
    else:
        raise RemoteProtocolError(f"a silo does not accept {type(proto).__name__}")
    _save(context, machine)
    content = RecordDict({MSG_KEY: message_record(reply)})
    if info:
        content[INFO_KEY] = ConfigRecord(info)  # type: ignore[arg-type]
    return Message(content, reply_to=msg)


def _train_partitions(
    msg: Message,
    context: Context,
    call_next: ClientAppCallable,
    task: TrainTask,
    machine: ClientMachine,
) -> list[torch.Tensor]:
    cfg = machine.config
    if cfg is None:  # pragma: no cover - on_train_request checked it
        raise ConfigurationError("no protocol configuration")
    if TRAIN_KEY not in msg.content:
        raise RemoteProtocolError(f"train request lacks the '{TRAIN_KEY}' record")
    spec = TrainSpec.from_record(msg.content[TRAIN_KEY])  # type: ignore[arg-type]
    if spec.arrays_key not in msg.content:
        raise RemoteProtocolError(f"train request lacks the model under '{spec.arrays_key}'")
    model = msg.content[spec.arrays_key]
    theta = flatten(model)  # type: ignore[arg-type]
    d_model = theta.numel()
    expect = d_model + 2 + len(spec.metric_keys)
    if cfg.vector_length != expect:
        raise ConfigurationError(
            f"protocol vector_length={cfg.vector_length} but the model has {d_model} values "
            f"(+1 weight, +1 clip rate, +{len(spec.metric_keys)} metrics = {expect})"
        )
    c = cfg.clip_range
    K = cfg.gradient_code.K
    original = msg.content
    partials = []
    try:
        for k in task.partitions:
            seed = partition_seed(cfg.run_id, task.round, k)
            torch.manual_seed(seed)
            np.random.seed(seed % 2**32)
            random.seed(seed)
            # the user's function sees an ordinary train message: no coded-fl records
            sub = RecordDict({n: r for n, r in original.items() if not n.startswith("codedfl.")})
            if spec.config_key in sub:
                conf = ConfigRecord(dict(sub.config_records[spec.config_key].items()))
            else:
                conf = ConfigRecord()
            conf["codedfl.partition"] = k
            conf["codedfl.seed"] = seed
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
            partials.append(_partial(reply, model, theta, spec, c, k))
    finally:
        msg.content = original
    return partials


def _partial(
    reply: Message, model: object, theta: torch.Tensor, spec: TrainSpec, c: float, k: int
) -> torch.Tensor:
    who = f"the train function (partition {k})"
    if reply.has_error():
        raise InputError(f"{who} failed: {reply.error.reason}")
    content = reply.content
    arrays = content.get(spec.arrays_key)
    if arrays is None:
        raise InputError(f"{who} returned no ArrayRecord under '{spec.arrays_key}'")
    check_same_layout(arrays, model, who=who)  # type: ignore[arg-type]
    metrics = next(
        (r for r in content.values() if isinstance(r, MetricRecord) and spec.weight_key in r), None
    )
    if metrics is None:
        raise InputError(f"{who} returned no MetricRecord with '{spec.weight_key}'")
    w = float(metrics[spec.weight_key])  # type: ignore[arg-type]
    if not w > 0:
        raise InputError(f"{who} reported {spec.weight_key}={w}; it must be > 0")
    rho = w / spec.max_weight
    if rho > 1.0:
        raise ConfigurationError(
            f"{who} reported {spec.weight_key}={w:g}, more than max_weight={spec.max_weight:g}: "
            f"set max_weight >= {w:g} in strategies.CodedSecAgg (run config codedfl-max-weight)"
        )
    delta = (flatten(arrays) - theta) * rho  # type: ignore[arg-type]
    if not torch.isfinite(delta).all():
        raise InputError(f"{who} produced a NaN/Inf update: lower the learning rate")
    clipped = float((delta.abs() > c).float().mean())
    extras = [rho * c, rho * clipped * c]
    for name in spec.metric_keys:
        value = float(metrics.get(name, 0.0))  # type: ignore[arg-type]
        value = max(-METRIC_BOUND, min(METRIC_BOUND, value))
        extras.append(rho * value * c / METRIC_BOUND)
    return torch.cat([delta, torch.tensor(extras, dtype=torch.float32)])
