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

The same mod serves a legacy ClientApp (``ClientApp(client_fn=...)`` with a ``NumPyClient``):
the legacy adapter of the server sends the model and config as Flower's ``fitins.*`` records,
the client's ``fit`` is called once per partition (``context.node_config["partition-id"]`` in
its ``client_fn``, the seed and partition in its config) and its ``FitRes`` is read
(:mod:`clients.legacy`). Mods after this one in ``mods=[...]`` (e.g. Flower's
``fixedclipping_mod``) run once per partition, on the user's own records.

Evaluation (and every non-``train`` message) passes through untouched. A ``train`` message
without coded-fl content is refused with advice: the server must use
``coded_fl_flower.CodedSecAgg``.

The protocol's steps around training (seeds, the update layout, the weight bound, the log of
uploads) are :mod:`coded_fl.secagg.silo`'s; this module translates Flower records (the calls of
the train function, one per partition, are :mod:`clients.training`'s).

The train function must be a deterministic function of (model, config, partition data, seed):
it gets a fresh ``context.state`` for each partition, because replicas of a partition on other
silos do not share this silo's state.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path

import torch
from flwr.app import (
    ConfigRecord,
    Context,
    Message,
    MessageType,
    RecordDict,
)
from flwr.clientapp.typing import ClientAppCallable, Mod

from coded_fl.errors import ConfigurationError, RemoteProtocolError, WeightBoundError
from coded_fl.kernels import warm_up
from coded_fl.secagg.client import (
    ClientMachine,
    TrainTask,
    misconfigured,
    refusal_for,
    weight_bound,
)
from coded_fl.secagg.messages import KeyRequest, Limits, TrainRequest, peek_header
from coded_fl.secagg.messages import Message as ProtocolMessage
from coded_fl.secagg.policy import ClientPolicy
from coded_fl.secagg.private import charge_release, keying_round
from coded_fl.secagg.silo import UploadLog, partition_seed
from coded_fl.vocabulary import (
    INFO_KEY,
    METRIC_NAMES_ENTRY,
    MSG_KEY,
    STATE_KEY,
    TRAIN_KEY,
    TrainSpec,
    inputs_digest,
)
from coded_fl_flower.records import message_from, message_record

from .training import _train_partitions

__all__ = ["coded_secagg_mod", "make_coded_secagg_mod", "partition_seed"]


def _load(context: Context, policy: ClientPolicy) -> ClientMachine:
    if STATE_KEY not in context.state.config_records:
        return ClientMachine(policy=policy)
    raw = context.state.config_records[STATE_KEY].get("state")
    if not isinstance(raw, bytes):
        raise ConfigurationError(f"context.state['{STATE_KEY}'] was overwritten by other code")
    return ClientMachine.from_bytes(raw, policy=policy)


def _save(context: Context, machine: ClientMachine) -> None:
    context.state[STATE_KEY] = ConfigRecord({"state": machine.to_bytes()})


#: Where each node keeps the log of its own uploads outside ``context.state``
#: (:class:`coded_fl.secagg.silo.UploadLog`); ``codedfl.state-dir`` in the node config or this
#: variable moves it.
STATE_DIR_ENV = "CODED_FL_STATE_DIR"


def _state_dir(context: Context) -> tuple[Path, bool]:
    """Where this node keeps state outside ``context.state``, and whether the node config or
    the environment chose it (else a folder shared by every node of the machine)."""
    root = context.node_config.get("codedfl.state-dir") or os.environ.get(STATE_DIR_ENV)
    if root:
        return Path(str(root)), True
    return Path(tempfile.gettempdir()) / f"coded-fl-{os.getuid()}", False


def _upload_log(context: Context) -> UploadLog:
    """This node's upload log: Flower's simulation engine runs a node's messages on several
    actors at once and writes back each one's context when it ends, so a straggler's late train
    can write back a state from before the node's next upload (seen in CI)."""
    return UploadLog(_state_dir(context)[0], int(context.node_id))


def _ledger(context: Context) -> Path:
    """This node's privacy ledger (:class:`coded_fl.dp.ledger.PrivacyLedger`): in a state
    folder the site chose, one per site (a restarted SuperNode may get a new node id; the
    ledger must outlive it); in the shared default folder, one per node id. The site's
    ``codedfl.state-dir`` should be durable: the budget is only as long-lived as the file."""
    root, chosen = _state_dir(context)
    return root / ("dp-ledger.json" if chosen else f"dp-ledger-{int(context.node_id)}.json")


def _limits(machine: ClientMachine, raw: bytes) -> Limits | None:
    """The limits a server message is decoded within: those of the silo's configuration, for
    a message of that configuration (one of another session is decoded without them, and the
    machine answers it with ``NEEDS_KEYS``)."""
    cfg = machine.config
    if cfg is None or peek_header(raw).digest != cfg.digest:
        return None
    return Limits.for_config(cfg)


def _reply(
    msg: Message, proto: ProtocolMessage, info: dict[str, float | str] | None = None
) -> Message:
    content = RecordDict({MSG_KEY: message_record(proto)})
    if info:
        content[INFO_KEY] = ConfigRecord(info)  # type: ignore[arg-type]
    return Message(content, reply_to=msg)


def make_coded_secagg_mod(policy: ClientPolicy | None = None) -> Mod:
    """A :func:`coded_secagg_mod` that refuses configurations below ``policy``'s minimums.

    ::

        app = ClientApp(mods=[make_coded_secagg_mod(ClientPolicy(min_privacy_threshold=2))])

    Parameters
    ----------
    policy
        The silo's minimums (T, U - T, n, modulus bits, quantization scale; see
        :class:`coded_fl.secagg.policy.ClientPolicy`). A node's config can raise them
        further (``codedfl.min-privacy-threshold``, ``codedfl.min-scale`` etc.) and pin its
        silo index (``codedfl.expected-silo``); it lowers the privacy minimums (T and the
        scale) only with the explicit opt-out ``codedfl.allow-no-privacy = true``.

    Returns
    -------
    Mod
        The mod to put in ``ClientApp(mods=[...])``.
    """
    base = ClientPolicy() if policy is None else policy

    def mod(msg: Message, context: Context, call_next: ClientAppCallable) -> Message:
        return _handle(msg, context, call_next, base.tightened(context.node_config))

    mod.__name__ = mod.__qualname__ = "coded_secagg_mod"
    mod.__doc__ = coded_secagg_mod.__doc__
    return mod


def coded_secagg_mod(msg: Message, context: Context, call_next: ClientAppCallable) -> Message:
    """Flower mod: coded secure aggregation for the train messages of a ClientApp.

    The silo's minimums come from its node config (``codedfl.min-privacy-threshold``,
    ``codedfl.min-mask-pieces``, ``codedfl.min-silos``, ``codedfl.min-modulus-bits``,
    ``codedfl.min-scale``, ``codedfl.max-silos``, ``codedfl.max-partitions``,
    ``codedfl.max-vector-length``, ``codedfl.expected-silo``, ``codedfl.min-noise-multiplier``,
    ``codedfl.max-epsilon``: the node's privacy budget under distributed DP, kept in
    ``codedfl.state-dir``, ``docs/privacy.md``); by default a silo refuses
    T = 0 and a quantization scale below 2^8 unless its node config sets
    ``codedfl.allow-no-privacy = true``. :func:`make_coded_secagg_mod` sets them in code.
    With ``codedfl.identity-key`` (a path) the silo signs its key-agreement key; with
    ``codedfl.trusted-keys`` (a path) it refuses every relayed peer key that a trusted
    identity did not sign for that silo (``docs/protocol.md``, "Authenticated keys").

    Parameters
    ----------
    msg
        The message Flower hands to the ClientApp.
    context
        The node's context; the protocol state lives in ``context.state``.
    call_next
        The wrapped handler (the user's train function), called once per partition.

    Returns
    -------
    Message
        The protocol reply (a key reply, an upload, a recovery reply, the reveal of one
        disputed share's key, or a typed refusal), or for a non-train message whatever
        ``call_next`` returns.

    Raises
    ------
    ConfigurationError
        A train message without coded-fl content (the server does not run ``CodedSecAgg``).
    CodedFLError
        A server message or a train result that is refused; Flower turns it into an error
        reply and the silo's state is unchanged.
    """
    return _handle(msg, context, call_next, ClientPolicy().tightened(context.node_config))


def _handle(
    msg: Message, context: Context, call_next: ClientAppCallable, policy: ClientPolicy
) -> Message:
    if msg.metadata.message_type != MessageType.TRAIN:
        return call_next(msg, context)
    machine = _load(context, policy)  # a restarted node has none: it refuses with NEEDS_KEYS
    # decoded within the limits of the silo's configuration when it is of its session
    proto = message_from(msg.content, limits=lambda raw: _limits(machine, raw))
    if proto is None:
        raise ConfigurationError(
            "coded_secagg_mod received a train message without coded-fl content: wrap the "
            "server's strategy with coded_fl_flower.CodedSecAgg, or remove the mod from the "
            "ClientApp"
        )
    uploads = _upload_log(context)
    uploads.recall(machine)  # what a stale state written back may lack
    info: dict[str, float | str] = {}
    spec = None
    try:
        spec = _train_spec(msg) if isinstance(proto, TrainRequest) else None
        if spec is not None:  # before anything changes: a bound that would reveal more
            machine.check_weight_bound(spec.max_weight, auto=spec.auto_weight)
        out = machine.receive(proto)
    except RemoteProtocolError as exc:
        refusal = refusal_for(exc, proto)
        if refusal is None:
            raise
        return _reply(msg, refusal)  # a signal the server acts on; the state is unchanged
    if isinstance(out, TrainTask):
        if spec is not None:
            machine.pin_weight_bound(spec.max_weight, auto=spec.auto_weight)
        t0 = time.perf_counter()
        try:
            spent = charge_release(machine.config, out, policy, _ledger(context))  # type: ignore[arg-type]
            if spent is not None:
                info["privacy-spent"] = spent  # the node's own composed epsilon (public)
            if keying_round(machine.config, out):  # type: ignore[arg-type]
                # distributed DP's keying round: no training, zeros (the machine makes them)
                partials, names = [torch.zeros(0)] * len(out.partitions), None
            else:
                partials, names = _train_partitions(msg, context, call_next, out, machine, spec)
        except (WeightBoundError, ConfigurationError) as exc:  # a setting: typed refusals
            # the round is used up before the refusal leaves: asked again, the silo refuses it
            # as a replay, so the server cannot re-ask one round with other bounds (only the
            # power of two that holds a partition's weight is ever revealed: docs/protocol.md)
            _save(context, machine)
            if isinstance(exc, WeightBoundError):
                return _reply(msg, weight_bound(proto, str(exc), exc.bound))
            return _reply(msg, misconfigured(proto, str(exc)))
        info["train-seconds"] = time.perf_counter() - t0
        if names is not None:  # names only: the values travel in the masked upload
            info[METRIC_NAMES_ENTRY] = json.dumps(list(names))
        digest = _model_digest(msg, spec)  # every round: it binds shared masks too
        reply: ProtocolMessage = machine.upload(out, partials, model_digest=digest)
        uploads.remember(machine)
    else:
        reply = out
    if isinstance(proto, KeyRequest):
        warm_up()  # compile/load the kernels now, not during round 1
    _save(context, machine)
    return _reply(msg, reply, info)


def _train_spec(msg: Message) -> TrainSpec | None:
    """The request's train spec (None without one: the train path says what is missing)."""
    if TRAIN_KEY not in msg.content:
        return None
    return TrainSpec.from_dict(dict(msg.content[TRAIN_KEY].items()))


def _model_digest(msg: Message, spec: TrainSpec | None = None) -> bytes:
    """The digest of everything the silo's training consumes, as it was sent
    (:func:`coded_fl.vocabulary.inputs_digest` of the message's content: the model, the train
    spec and the user's config record; nothing per silo, so every silo of an honest round
    computes the same digest, and so does the server over what it sends). A group mask is
    bound to it, and in a shared-mask round the shares' keys and the sealed shares'
    associated data (each silo checks the others' shares against its own digest at recovery;
    the server judges a disputed share under the digest of what it sent the share's sender),
    so silos sent different inputs for one round never share a mask or unmask a round: a
    server that sent one member ``max-weight`` 2^100 (its update then quantizes to zero) or
    another learning rate would otherwise read the group's partition sum off the difference of
    their uploads (issue 29, attack 1). Every member of a group must use the same digest,
    which the message version (5 and later) enforces."""
    if spec is None:  # parsed here only when the caller has not parsed it already
        spec = TrainSpec.from_dict(dict(msg.content[TRAIN_KEY].items()))
    return inputs_digest(msg.content, spec)
