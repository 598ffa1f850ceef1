"""Where shuffle packets meet Flower records (server and client side): the one translation.

Record key ``codedfl.shuffle.msg`` (ArrayRecord, one uint8 Array ``"msg"``): an encoded
:mod:`coded_fl.shuffling.wire` packet. Carried as an Array, like ``codedfl.msg`` of the secure
aggregation (:mod:`strategies.records`), so that Flower chunks large deliveries like any model.
Shuffle messages have the message type ``query.codedfl_shuffle``
(:data:`SHUFFLE_MESSAGE_TYPE`): a ClientApp answers them with the handler that
:func:`clients.shuffle.register_shuffle` registers.
"""

from __future__ import annotations

from flwr.app import MessageType, RecordDict

from coded_fl.shuffling.wire import Packet, decode, encode
from strategies.records import bytes_record, record_bytes

__all__ = [
    "SHUFFLE_ACTION",
    "SHUFFLE_KEY",
    "SHUFFLE_MESSAGE_TYPE",
    "packet_content",
    "packet_from",
]

SHUFFLE_KEY = "codedfl.shuffle.msg"
SHUFFLE_ACTION = "codedfl_shuffle"
SHUFFLE_MESSAGE_TYPE = f"{MessageType.QUERY}.{SHUFFLE_ACTION}"


def packet_content(packet: Packet) -> RecordDict:
    """A packet as the content of a Flower message."""
    return RecordDict({SHUFFLE_KEY: bytes_record(encode(packet))})


def packet_from(content: RecordDict) -> Packet | None:
    """The packet in a message's content, or None if it carries none (RemoteProtocolError if
    it is malformed)."""
    raw = record_bytes(content, SHUFFLE_KEY)
    return None if raw is None else decode(raw)
