"""Where shuffle packets meet Flower records (server and client side): the one translation.

Record key ``codedfl.shuffle.msg`` (ArrayRecord, one uint8 Array ``"msg"``): an encoded
:mod:`coded_fl.shuffling.wire` packet. Carried as an Array, like ``codedfl.msg`` of the secure
aggregation (:mod:`strategies.records`), so that Flower chunks large deliveries like any model.
Shuffle messages have the message type ``query.codedfl_shuffle``
(:data:`SHUFFLE_MESSAGE_TYPE`): a ClientApp answers them with the handler that
:func:`clients.shuffle.register_shuffle` registers.
"""

from __future__ import annotations

import numpy as np
from flwr.app import Array, ArrayRecord, MessageType, RecordDict

from coded_fl.errors import RemoteProtocolError
from coded_fl.shuffling.wire import Packet, decode, encode

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
    raw = np.frombuffer(encode(packet), dtype=np.uint8)
    return RecordDict({SHUFFLE_KEY: ArrayRecord({"msg": Array(raw)})})


def packet_from(content: RecordDict) -> Packet | None:
    """The packet in a message's content, or None if it carries none (RemoteProtocolError if
    it is malformed)."""
    if SHUFFLE_KEY not in content:
        return None
    rec = content[SHUFFLE_KEY]
    if not isinstance(rec, ArrayRecord) or "msg" not in rec:
        raise RemoteProtocolError(f"'{SHUFFLE_KEY}' must be an ArrayRecord holding one Array 'msg'")
    arr = rec["msg"].numpy()
    if arr.dtype != np.uint8 or arr.ndim != 1:
        raise RemoteProtocolError(f"'{SHUFFLE_KEY}' must hold a 1-D uint8 array")
    return decode(arr.tobytes())
