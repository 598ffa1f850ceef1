"""Encoding and decoding whole messages: the header, then the body by its type's codec."""

from __future__ import annotations

import struct
from typing import Any, NamedTuple

from coded_fl.errors import InputError, RemoteProtocolError
from coded_fl.secagg.messages.codecs import CODECS, TYPES, Head, Parts, Sizes
from coded_fl.secagg.messages.framing import HEADER, Reader
from coded_fl.secagg.messages.records import MAGIC, VERSION, Limits, Message


def encode(msg: Message) -> bytes:
    """Serialise a message (see the module docstring for the layout).

    :func:`encode_parts` gives the same bytes in pieces, for a caller that joins them with
    a header of its own (one copy of a large vector instead of two).

    Parameters
    ----------
    msg
        Any protocol message.

    Returns
    -------
    bytes

    Raises
    ------
    InputError
        If a field does not fit the layout (a digest not 8 bytes, a vector not uint32,
        mismatched list lengths, an integer out of its wire type's range).
    """
    return b"".join(encode_parts(msg))


def encode_parts(msg: Message) -> list[bytes | memoryview]:
    """:func:`encode`'s bytes as a list of pieces (``b"".join`` of them is the encoding).

    Parameters
    ----------
    msg
        Any protocol message.

    Returns
    -------
    list[bytes | memoryview]
        Pieces to join; a large vector is a view of the message's tensor, so join them before
        the tensor changes.

    Raises
    ------
    InputError
        As :func:`encode`.
    """
    try:
        return _encode(msg)
    except InputError:
        raise
    except (struct.error, OverflowError, ValueError, TypeError) as exc:
        raise InputError(
            f"cannot encode {type(msg).__name__}: a field does not fit its wire type ({exc})"
        ) from None


def _encode(msg: Message) -> Parts:
    if len(msg.digest) != 8:
        raise InputError("config digest must be 8 bytes")
    codec = CODECS.get(type(msg))
    if codec is None:
        raise InputError(f"cannot encode {type(msg).__name__}")
    head = HEADER.pack(MAGIC, VERSION, msg.TYPE, msg.digest, msg.round, msg.sender, msg.recipient)
    parts: Parts = [head]
    codec.write(msg, parts)
    return parts


def decode(buf: bytes | bytearray | memoryview, *, limits: Limits | None = None) -> Message:
    """Parse bytes into a message; anything malformed raises :class:`RemoteProtocolError`.

    Parameters
    ----------
    buf
        The encoded message.
    limits
        The receiver's :class:`Limits` (from its configuration), if it knows them: every count
        and size is checked against them before anything is built. Without them counts are
        checked against the bytes left only.

    Returns
    -------
    Message

    Raises
    ------
    RemoteProtocolError
        If the bytes are not a well-formed message, or a count exceeds ``limits``.
    """
    r = Reader(buf)
    header = r.unpack(HEADER.format)
    _, _, _, digest, round_, sender, recipient = header
    cls = _header_type(header)
    head: Head = {
        "digest": bytes(digest),
        "round": round_,
        "sender": sender,
        "recipient": recipient,
    }
    msg = CODECS[cls].read(r, head, limits, Sizes.of(limits))
    if r.pos != len(r.buf):
        raise RemoteProtocolError(f"{len(r.buf) - r.pos} unexpected trailing bytes in message")
    return msg


def _header_type(header: tuple[Any, ...]) -> type[Message]:
    """The message class a header names, after its magic and version are checked.

    Parameters
    ----------
    header
        The unpacked header fields.

    Raises
    ------
    RemoteProtocolError
        If the magic, the version or the type is not this side's.
    """
    magic, version, kind = header[:3]
    if magic != MAGIC:
        raise RemoteProtocolError("not a coded-fl message (bad magic)")
    if version != VERSION:
        raise RemoteProtocolError(
            f"message version {version} is not supported (this side speaks {VERSION}); "
            "run the same coded-fl version on the server and the silos"
        )
    cls = TYPES.get(kind)
    if cls is None:
        raise RemoteProtocolError(f"unknown message type {kind}")
    return cls


class Header(NamedTuple):
    """The common header of an encoded message (what :func:`peek_header` reads).

    Parameters
    ----------
    type
        The message class the header names.
    digest, round, sender, recipient
        The header fields (see the module docstring).
    """

    type: type[Message]
    digest: bytes
    round: int
    sender: int
    recipient: int


def peek_header(buf: bytes | bytearray | memoryview) -> Header:
    """The header of an encoded message, read without parsing its body.

    Parameters
    ----------
    buf
        The encoded message, or at least its first ``HEADER_BYTES`` bytes.

    Returns
    -------
    Header
        The message class, the configuration digest, the round, the sender and the recipient.

    Raises
    ------
    RemoteProtocolError
        If the header is short, not coded-fl's, of another version or of an unknown type.
    """
    if len(buf) < HEADER.size:
        raise RemoteProtocolError("message is shorter than its header")
    header = HEADER.unpack(bytes(buf[: HEADER.size]))
    _, _, _, digest, round_, sender, recipient = header
    return Header(_header_type(header), bytes(digest), round_, sender, recipient)


def peek_type(buf: bytes | bytearray | memoryview) -> type[Message]:
    """The type of an encoded message, read from its header alone (the body is not parsed).

    Parameters
    ----------
    buf
        The encoded message, or at least its first ``HEADER_BYTES`` bytes.

    Returns
    -------
    type[Message]
        The message class named by the header.

    Raises
    ------
    RemoteProtocolError
        If the header is short, not coded-fl's, of another version or of an unknown type.
    """
    return peek_header(buf).type
