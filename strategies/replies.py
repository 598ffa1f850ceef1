"""How the server reads a silo's reply: hand it to the protocol machine, act on a typed refusal,
or count the silo as a straggler of the stage; and what a late reply still tells.

Every failure to read one silo's reply (a Flower error, a record that is not coded-fl's, a
message that does not decode, one the machine refuses) is that silo's failure for the stage,
recorded under its index; it never ends the run.
"""

from __future__ import annotations

import contextlib
import logging

from flwr.app import Message, MessageType, RecordDict

from coded_fl.errors import CodedFLError, RemoteProtocolError
from coded_fl.secagg.messages import Limits, Refusal, RefusalCode, Upload
from coded_fl.secagg.messages import Message as ProtocolMessage
from coded_fl.secagg.server import ServerStage
from coded_fl.vocabulary import MSG_KEY

from .exchange import LateReply
from .records import message_from, message_record, metric_names
from .run import RunState

__all__ = ["feed", "flower_message", "late_reply"]

LOG = logging.getLogger("flwr")


def flower_message(node: int, msg: ProtocolMessage) -> Message:
    """A protocol message to ``node`` as a Flower train message.

    Parameters
    ----------
    node
        The destination node id.
    msg
        The protocol message.

    Returns
    -------
    flwr.app.Message
    """
    return Message(
        content=RecordDict({MSG_KEY: message_record(msg)}),
        dst_node_id=node,
        message_type=MessageType.TRAIN,
    )


def feed(
    state: RunState,
    silo: int,
    reply: Message,
    kind: type,
    errors: dict[int, str],
    accused: dict[int, str] | None = None,
) -> None:
    """Hand a silo's reply to the run's machine, or record why it was not.

    Parameters
    ----------
    state
        The run.
    silo
        The silo the reply came from (by its node).
    reply
        The Flower reply.
    kind
        The protocol message type the stage expects.
    errors
        Silo -> reason, for a reply that is an error, a refusal or refused.
    accused
        Silo -> accusation, filled from ``ACCUSES`` refusals (recovery stage).
    """
    if reply.has_error():
        errors[silo] = str(reply.error.reason)
        return
    try:
        # the type is read from the header first: a body is decoded only if the stage takes it,
        # and within the limits of the run's configuration
        msg = message_from(
            reply.content, expect=(kind, Refusal), limits=Limits.for_config(state.config)
        )
        if msg is None:
            raise RemoteProtocolError(
                "replied without coded-fl content: add coded_fl_flower.coded_secagg_mod to its "
                "ClientApp (ClientApp(mods=[coded_secagg_mod]))",
                sender=silo,
            )
        if msg.sender != silo:
            raise RemoteProtocolError(
                f"sent {type(msg).__name__} as silo {msg.sender}", sender=silo
            )
        if isinstance(msg, Refusal):
            _refused(state, msg, errors, accused)
            return
        state.machine.receive(msg)
        if isinstance(msg, Upload):  # the names of the metrics in its slots (names only)
            state.metric_names[silo] = metric_names(reply)
    except CodedFLError as exc:
        errors[silo] = str(exc)
        LOG.warning("[coded-fl] refused a reply from silo %d: %s", silo, exc)


def _refused(
    state: RunState, msg: Refusal, errors: dict[int, str], accused: dict[int, str] | None
) -> None:
    """Act on a typed refusal: rekey a silo without keys, record a setting or a weight bound
    that stops the round, record an accusation."""
    silo = msg.sender
    if msg.digest != state.config.digest:
        raise RemoteProtocolError("refusal of a message of another session", sender=silo)
    errors[silo] = msg.detail or msg.code.label
    if msg.code == RefusalCode.NEEDS_KEYS:
        state.needs_keys.add(silo)
    elif msg.code in (RefusalCode.MISCONFIGURED, RefusalCode.UNTRUSTED_KEY):
        # an untrusted key is a setting too (the trusted keys or an identity): it cannot
        # succeed later, and a round that too many silos refuse so stops the run
        state.misconfigured[silo] = errors[silo]
        if msg.code == RefusalCode.UNTRUSTED_KEY:
            LOG.warning("[coded-fl] silo %d refuses a relayed key: %s", silo, errors[silo])
    elif msg.code == RefusalCode.WEIGHT_BOUND:
        state.weight_refused[silo] = int(msg.bound)
    elif (
        msg.code == RefusalCode.ACCUSES
        and accused is not None
        and msg.accused is not None
        and msg.accused != silo
        and 0 <= msg.accused < state.config.n
    ):
        accused[msg.accused] = (
            f"silo {silo} reports that the mask share silo {msg.accused} sent for it failed "
            "authentication or key confirmation (altered in transit or by its sender, or a "
            "false accusation: the evidence decides)"
        )
        LOG.warning("[coded-fl] silo %d accuses silo %d", silo, msg.accused)
    if accused is not None and state.machine.stage == ServerStage.RECOVERING:
        # the machine counts the refusal (it cannot answer) and opens a dispute over the
        # accused share, judged on the evidence (ServerMachine.reveal_requests); a silo proven
        # lying, or accused by max(T + 1, 2) survivors, is dropped from S (retry_recovery)
        try:
            state.machine.receive(msg)
        except RemoteProtocolError as exc:
            LOG.warning("[coded-fl] ignored a refusal from silo %d: %s", silo, exc)


def late_reply(state: RunState, late: LateReply, reply: Message) -> None:
    """A reply that came after its stage closed: time-stamp a late upload, add a late error to
    its round's report (:attr:`RoundReport.errors`), and mark for a rekey a silo whose late
    reply is a ``NEEDS_KEYS`` refusal (a late upload is not decoded: its type is read from the
    header).

    Parameters
    ----------
    state
        The run.
    late
        The time-stamp of the reply.
    reply
        The late Flower reply.
    """
    if late.stage == "train":
        state.late_train.setdefault(late.round, []).append(late.seconds)
    silo = state.silo_of.get(late.node_id)
    if silo is None:
        return
    if reply.has_error():
        # the silo failed after the stage closed: its round's report still says why
        state.late_errors.setdefault(late.round, {}).setdefault(
            silo, f"after the {late.stage} stage closed: {late.reason}"
        )
        for report in state.reports:
            if report.round == late.round:
                report.errors.update(state.late_errors.pop(late.round))
        return
    # one read: the header says the type; a refusal's body is decoded, and with group-aligned
    # masks a late upload's too (a straggler still confirms and deals edge keys)
    expect: tuple[type, ...] = (Refusal, Upload) if state.config.aligned else (Refusal,)
    try:
        msg = message_from(reply.content, expect=expect, limits=Limits.for_config(state.config))
    except CodedFLError:
        return  # a late upload, or a late reply that cannot be read, changes nothing
    if isinstance(msg, Upload):
        if msg.sender == silo:
            with contextlib.suppress(CodedFLError):  # refused as late; its edge fields kept
                state.machine.receive(msg)
                # taken (it came before the stage's close was processed): it is in the sum
                state.metric_names[silo] = metric_names(reply)
        return
    if (
        isinstance(msg, Refusal)
        and msg.sender == silo
        and msg.code == RefusalCode.NEEDS_KEYS
        and msg.digest == state.config.digest
    ):
        state.needs_keys.add(silo)
