"""The protocol driver's transport over Flower (:class:`FlowerTransport`): how a silo's Flower
reply is read (:func:`read_reply`), and what a late reply still tells (:func:`late_reply`).

Every failure to read one silo's reply (a Flower error, a record that is not coded-fl's, a
message that does not decode) reaches the driver as that silo's failure for the stage
(:func:`coded_fl.secagg.driver.take`); it never ends the run.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence

from flwr.app import Message, MessageType, RecordDict

from coded_fl.errors import CodedFLError, RemoteProtocolError
from coded_fl.secagg.messages import Limits, Refusal, Upload
from coded_fl.secagg.messages import Message as ProtocolMessage
from coded_fl.secagg.replies import take_late
from coded_fl.secagg.transport import Batch, Reply
from coded_fl.vocabulary import MSG_KEY
from coded_fl_flower.records import message_from, message_record

from .exchange import Exchange, LateReply
from .records import metric_names
from .run import RunState

__all__ = ["FlowerTransport", "flower_message", "late_reply", "read_reply"]

TRAIN = MessageType.TRAIN

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


def read_reply(state: RunState, silo: int, reply: Message, expect: tuple[type, ...]) -> Reply:
    """A silo's Flower reply as the protocol driver takes it: its decoded message, or why there
    is none (a Flower error, a record that is not coded-fl's, bytes that do not decode).

    The type is read from the header first: a body is decoded only if ``expect`` takes it, and
    within the limits of the run's configuration.

    Parameters
    ----------
    state
        The run.
    silo
        The silo the reply came from (by its node).
    reply
        The Flower reply.
    expect
        The protocol message types the stage takes.

    Returns
    -------
    coded_fl.secagg.driver.Reply
    """
    if reply.has_error():
        return Reply(silo, error=str(reply.error.reason))
    try:
        msg = message_from(reply.content, expect=expect, limits=Limits.for_config(state.config))
        if msg is None:
            raise RemoteProtocolError(
                "replied without coded-fl content: add coded_fl_flower.coded_secagg_mod to its "
                "ClientApp (ClientApp(mods=[coded_secagg_mod]))",
                sender=silo,
            )
    except CodedFLError as exc:
        return Reply(silo, error=str(exc), unreadable=True)
    # an upload's metric names (names only), kept once the machine takes the upload
    return Reply(silo, msg, meta=metric_names(reply) if isinstance(msg, Upload) else None)


class FlowerTransport:
    """The protocol driver's transport over Flower's Grid (:class:`Exchange`): protocol
    messages go out as Flower train messages to the silos' nodes, replies come back decoded.

    Parameters
    ----------
    exchange
        The run's message exchange.
    state
        The run (its node <-> silo maps and configuration).
    """

    def __init__(self, exchange: Exchange, state: RunState) -> None:
        self.exchange = exchange
        self.state = state
        #: the records a train request carries besides the protocol message (the model, the
        #: user's config, the train spec), in order: set by the round driver before a round
        self.train_records: Callable[[ProtocolMessage], RecordDict] | None = None
        #: the Flower messages of the last train stage sent
        self.sent_train: list[Message] = []

    def now(self) -> float:
        """Monotonic seconds."""
        return time.monotonic()

    def send(self, requests: Sequence[ProtocolMessage], *, stage: str, round_: int) -> Batch:
        """Push one stage's requests to the silos' nodes.

        Parameters
        ----------
        requests
            The protocol requests.
        stage
            The stage (``keys``, ``train``, ``recovery``, ``reveal``).
        round_
            The round the exchange files them under (the Flower round).

        Returns
        -------
        coded_fl.secagg.driver.Batch
        """
        st = self.state
        if stage == "train" and self.train_records is not None:
            make = self.train_records
            msgs = [
                Message(content=make(q), dst_node_id=st.node_of[q.recipient], message_type=TRAIN)
                for q in requests
            ]
            self.sent_train = msgs
        else:
            msgs = [flower_message(st.node_of[q.recipient], q) for q in requests]
        ids = self.exchange.push(msgs, stage=stage, round_=round_)
        return Batch(stage, round_, tuple(st.silo_of[node] for node in ids.values()), ids)

    def collect(
        self,
        batch: Batch,
        expect: tuple[type, ...],
        on_reply: Callable[[Reply], bool],
        *,
        deadline: Callable[[], float],
    ) -> None:
        """Pull replies until ``on_reply`` says done or the deadline (see
        :meth:`Exchange.collect`).

        Parameters
        ----------
        batch
            What :meth:`send` returned.
        expect
            The protocol message types the stage takes.
        on_reply
            Takes each reply; True: done.
        deadline
            The monotonic time to stop at.
        """
        st = self.state

        def each(node: int, reply: Message) -> bool:
            return on_reply(read_reply(st, st.silo_of[node], reply, expect))

        self.exchange.collect(batch.handle, each, deadline=deadline)


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
    got = read_reply(state, silo, reply, expect)
    taken = take_late(state.machine, state.notes, got) is None
    if taken and isinstance(got.message, Upload) and got.message.sender == silo:
        state.taken(got)  # it came before the stage's close was processed: it is in the sum
