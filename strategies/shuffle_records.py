"""The server's translation between shuffle packets and Flower records.

Record key :data:`coded_fl.vocabulary.SHUFFLE_KEY` (``codedfl.shuffle.msg``): an encoded
:mod:`coded_fl.shuffling.transport.wire` packet, framed like the secure aggregation's messages
(:mod:`strategies.records`) so that Flower chunks large deliveries like any model. Shuffle
messages have the message type ``query.codedfl_shuffle`` (:data:`SHUFFLE_MESSAGE_TYPE`): a
ClientApp answers them with the handler that :func:`clients.shuffle.register_shuffle`
registers.
"""

from __future__ import annotations

from flwr.app import Array, ArrayRecord, MessageType, RecordDict

from coded_fl.shuffling.transport.wire import Packet, decode, encode
from coded_fl.vocabulary import FRAME_ARRAY, SHUFFLE_ACTION, SHUFFLE_KEY, frame, read_frame

__all__ = ["SHUFFLE_MESSAGE_TYPE", "packet_content", "packet_from"]

SHUFFLE_MESSAGE_TYPE = f"{MessageType.QUERY}.{SHUFFLE_ACTION}"


def packet_content(packet: Packet) -> RecordDict:
    """A packet as the content of a Flower message.

    Parameters
    ----------
    packet
        A shuffle packet.

    Returns
    -------
    RecordDict
    """
    return RecordDict({SHUFFLE_KEY: ArrayRecord({FRAME_ARRAY: Array(frame(encode(packet)))})})


def packet_from(content: RecordDict) -> Packet | None:
    """The packet in a message's content, or None if it carries none.

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
        If the record is malformed.
    """
    raw = read_frame(content, SHUFFLE_KEY)
    return None if raw is None else decode(raw)
