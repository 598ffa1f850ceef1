"""The one home of the translation between coded-fl's messages and Flower records, used by
both adapters (the strategy in ``strategies/``, the mods and handlers in ``clients/``) for
the secure aggregation and the shuffle alike.

A message travels as its encoded bytes in one framed record: an ``ArrayRecord`` holding one
1-D uint8 ``Array`` (:data:`coded_fl.vocabulary.FRAME_ARRAY`), so that Flower chunks a large
upload or delivery like any model. Both kinds are framed the same way, with one copy of the
payload (:func:`coded_fl.vocabulary.frame_npy`: the ``.npy`` bytes that ``Array`` would
otherwise build from an ndarray with two more copies), and read back through
:func:`coded_fl.vocabulary.read_frame`, which checks the record's shape and the npy header
before it touches the payload. The record keys and the shuffle's message type come from
:mod:`coded_fl.vocabulary`, the owner of the wire vocabulary.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from flwr.app import Array, ArrayRecord, MessageType, RecordDict

from coded_fl.errors import RemoteProtocolError
from coded_fl.secagg.messages import Limits, Message, decode, encode_parts, peek_type
from coded_fl.shuffling.transport import wire
from coded_fl.vocabulary import (
    FRAME_ARRAY,
    MSG_KEY,
    SHUFFLE_ACTION,
    SHUFFLE_KEY,
    frame_npy,
    read_frame,
)

__all__ = [
    "SHUFFLE_MESSAGE_TYPE",
    "framed_record",
    "message_from",
    "message_record",
    "packet_content",
    "packet_from",
]

#: The Flower message type of the shuffle's messages (a ClientApp answers them with the
#: handler :func:`clients.shuffle.register_shuffle` registers).
SHUFFLE_MESSAGE_TYPE = f"{MessageType.QUERY}.{SHUFFLE_ACTION}"


def framed_record(parts: Sequence[bytes | memoryview]) -> ArrayRecord:
    """Encoded bytes, given in pieces, as a framed record (one copy of the payload).

    Parameters
    ----------
    parts
        The encoded message in pieces, joined in order.

    Returns
    -------
    ArrayRecord
        One 1-D uint8 Array under :data:`coded_fl.vocabulary.FRAME_ARRAY`.
    """
    n, data = frame_npy(parts)
    return ArrayRecord({FRAME_ARRAY: Array("uint8", (n,), "numpy.ndarray", data)})


def message_record(msg: Message) -> ArrayRecord:
    """An encoded protocol message as a Flower ArrayRecord.

    Parameters
    ----------
    msg
        The protocol message.

    Returns
    -------
    ArrayRecord
        To put under :data:`coded_fl.vocabulary.MSG_KEY` of a message's content.
    """
    return framed_record(encode_parts(msg))


def message_from(
    content: RecordDict,
    *,
    expect: tuple[type[Message], ...] | None = None,
    limits: Limits | Callable[[bytes], Limits | None] | None = None,
) -> Message | None:
    """The protocol message in a message's content, or None if it carries none.

    Parameters
    ----------
    content
        A Flower message's content.
    expect
        The message types the receiver takes now: any other is refused from its header,
        before the body is decoded.
    limits
        The limits of the receiver's configuration (:meth:`Limits.for_config`), or a function
        of the framed bytes that picks them (a silo decodes a message of its own session
        within its limits, one of another session without them): counts and sizes beyond
        them are refused before anything is built from them.

    Returns
    -------
    coded_fl.secagg.messages.Message | None

    Raises
    ------
    RemoteProtocolError
        If the record is not a framed record, the bytes are not a valid message, the message
        is of a type not in ``expect`` or exceeds ``limits``.
    """
    raw = read_frame(content, MSG_KEY)
    if raw is None:
        return None
    if expect is not None:
        kind = peek_type(raw)
        if kind not in expect:
            raise RemoteProtocolError(
                f"sent {kind.__name__}, expected {' or '.join(t.__name__ for t in expect)}"
            )
    return decode(raw, limits=limits(raw) if callable(limits) else limits)


def packet_content(packet: wire.Packet) -> RecordDict:
    """A shuffle packet as the content of a Flower message.

    Parameters
    ----------
    packet
        A shuffle packet (:mod:`coded_fl.shuffling.transport.wire`).

    Returns
    -------
    RecordDict
        The packet framed under :data:`coded_fl.vocabulary.SHUFFLE_KEY`.
    """
    return RecordDict({SHUFFLE_KEY: framed_record([wire.encode(packet)])})


def packet_from(content: RecordDict) -> wire.Packet | None:
    """The shuffle packet in a message's content, or None if it carries none.

    Parameters
    ----------
    content
        A Flower message's content.

    Returns
    -------
    Packet | None

    Raises
    ------
    RemoteProtocolError
        If the record is malformed or the bytes are not a valid packet.
    """
    raw = read_frame(content, SHUFFLE_KEY)
    return None if raw is None else wire.decode(raw)
