"""Protocol messages: frozen dataclasses with a compact, versioned binary encoding.

Layout of every message (little endian)::

    magic "CFL" | version u8 | type u8 | config digest 8 B | round u64 | sender i32 | recipient i32
    | body

``sender``/``recipient`` are silo indices, ``-1`` for the server. Field vectors are packed
``uint32`` (4 bytes per element, no pickles, no text); byte strings and lists carry explicit
lengths, and :func:`decode` checks every length against the buffer, so truncated, padded or
garbled input raises :class:`RemoteProtocolError` instead of producing a half-read message.

Every count and length is checked before anything is built from it: against the bytes left
(a count of empty items must be backed by bytes too), and, when the receiver passes the
:class:`Limits` of its configuration, against what that configuration allows (n silos, d and
m elements, s + 1 weight rows, fixed key and sealed-share sizes). A receiver that knows its
configuration reads the type first (:func:`peek_header`) and decodes with its limits.

Modules: :mod:`~coded_fl.secagg.messages.records` (the message dataclasses, refusal codes,
:class:`Limits`), :mod:`~coded_fl.secagg.messages.framing` (the header's layout and the shared
bounds-checked reader), :mod:`~coded_fl.secagg.messages.codecs` (each type's writer and reader
side by side, in one registry, from which the type bytes' map is derived; the evidence and
view stages' pairs in :mod:`~coded_fl.secagg.messages.stage_codecs`) and
:mod:`~coded_fl.secagg.messages.wire` (:func:`encode`, :func:`decode`, :func:`peek_header`).
A new message type is a dataclass in ``records`` and a writer/reader pair and one registry line
in ``codecs``. A TrainRequest and an Upload end with their masking scheme's extension, if any
(:mod:`~coded_fl.secagg.messages.extensions`: an id byte, 0 for none, and the body its
registered reader reads); the schemes register theirs (:mod:`coded_fl.secagg.masking`).
"""

from coded_fl.secagg.messages.extensions import (
    ExtensionCodec,
    MessageExtension,
    register_extension,
)
from coded_fl.secagg.messages.framing import HEADER_BYTES
from coded_fl.secagg.messages.records import (
    MAX_CONFIG_BYTES,
    SERVER,
    TAG_ENTRY_BYTES,
    TOKEN_BYTES,
    VERSION,
    KeyReply,
    KeyRequest,
    Limits,
    Message,
    RecoveryReply,
    RecoveryRequest,
    Refusal,
    RefusalCode,
    Reveal,
    RevealRequest,
    TrainRequest,
    Upload,
    ViewReply,
    ViewRequest,
)
from coded_fl.secagg.messages.wire import (
    Header,
    decode,
    encode,
    encode_parts,
    peek_header,
    peek_type,
)

__all__ = [
    "HEADER_BYTES",
    "MAX_CONFIG_BYTES",
    "SERVER",
    "TAG_ENTRY_BYTES",
    "TOKEN_BYTES",
    "VERSION",
    "ExtensionCodec",
    "Header",
    "KeyReply",
    "KeyRequest",
    "Limits",
    "Message",
    "MessageExtension",
    "RecoveryReply",
    "RecoveryRequest",
    "Refusal",
    "RefusalCode",
    "Reveal",
    "RevealRequest",
    "TrainRequest",
    "Upload",
    "ViewReply",
    "ViewRequest",
    "decode",
    "encode",
    "encode_parts",
    "peek_header",
    "peek_type",
    "register_extension",
]
