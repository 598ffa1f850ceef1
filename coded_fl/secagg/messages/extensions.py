"""Scheme-owned message extensions: the fields a masking scheme adds to a TrainRequest or an
Upload, and the registry of their codecs.

A :class:`MessageExtension` is a frozen dataclass that a masking scheme defines in its own
module (:mod:`coded_fl.secagg.masking`), with a one-byte wire id and the message type it travels
on; its writer and reader are registered side by side (:func:`register_extension`, called when
the scheme is registered). On the wire the extension follows the message's shared fields: its id
byte (0: none) and its body. The reader reads the body through the message's bounds-checked
:class:`~coded_fl.secagg.messages.framing.Reader`, with the receiver's
:class:`~coded_fl.secagg.messages.records.Limits`; an unknown id, or an extension that does not
travel on the message read, is a :class:`~coded_fl.errors.RemoteProtocolError`.

This module imports no other module of the package at run time (``records`` imports it).
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple

from coded_fl.errors import ConfigurationError, InputError, RemoteProtocolError

if TYPE_CHECKING:
    from coded_fl.secagg.messages.framing import Parts, Reader
    from coded_fl.secagg.messages.records import Limits, Message

__all__ = ["ExtensionCodec", "MessageExtension", "register_extension"]

#: The id byte of a message without an extension.
NO_EXTENSION = 0


@dataclass(frozen=True)
class MessageExtension:
    """A masking scheme's own fields on one message type.

    Attributes
    ----------
    WIRE_ID
        Its id byte on the wire, 1..255, distinct among the registered extensions.
    MESSAGE
        The message class that carries it (:class:`TrainRequest` or :class:`Upload`).
    """

    WIRE_ID: ClassVar[int] = NO_EXTENSION
    MESSAGE: ClassVar[type[Message] | None] = None


class ExtensionCodec(NamedTuple):
    """One extension type's layout, its writer and reader side by side.

    Parameters
    ----------
    cls
        The extension's class.
    write
        Appends an instance's body to the message's parts.
    read
        Parses a body with the receiver's limits (None: a receiver without them).
    """

    cls: type[MessageExtension]
    write: Callable[[Any, Parts], None]
    read: Callable[[Reader, Limits | None], MessageExtension]


#: Every registered extension's codec, by wire id.
_BY_ID: dict[int, ExtensionCodec] = {}


def register_extension(
    cls: type[MessageExtension],
    write: Callable[[Any, Parts], None],
    read: Callable[[Reader, Limits | None], MessageExtension],
) -> ExtensionCodec:
    """Make ``cls`` travel on its message type (registering it again replaces its codec).

    Parameters
    ----------
    cls
        A :class:`MessageExtension` subclass with its ``WIRE_ID`` and ``MESSAGE``.
    write
        Appends an instance's body to the message's parts.
    read
        Reads a body from the message's reader, checked against the receiver's limits.

    Returns
    -------
    ExtensionCodec

    Raises
    ------
    ConfigurationError
        If the id is not 1..255 or is another extension's, or ``MESSAGE`` is unset.
    """
    wire_id = cls.WIRE_ID
    if not isinstance(wire_id, int) or not 0 < wire_id < 256 or cls.MESSAGE is None:
        raise ConfigurationError(
            f"extension {cls.__name__} needs a WIRE_ID in 1..255 and the MESSAGE it travels on"
        )
    taken = _BY_ID.get(wire_id)
    if taken is not None and taken.cls is not cls:
        raise ConfigurationError(
            f"extension id {wire_id} of {cls.__name__} is {taken.cls.__name__}'s already"
        )
    codec = ExtensionCodec(cls, write, read)
    _BY_ID[wire_id] = codec
    return codec


def write_extension(msg: Message, parts: Parts) -> None:
    """Append ``msg.extension``'s id byte and body (one zero byte without one).

    Parameters
    ----------
    msg
        A message with an ``extension`` field.
    parts
        The message's encoded pieces so far.

    Raises
    ------
    InputError
        If the extension is not registered, or does not travel on this message type.
    """
    ext = getattr(msg, "extension", None)
    if ext is None:
        parts.append(struct.pack("<B", NO_EXTENSION))
        return
    codec = _BY_ID.get(type(ext).WIRE_ID)
    if codec is None or codec.cls is not type(ext):
        raise InputError(f"extension {type(ext).__name__} is not registered")
    if type(ext).MESSAGE is not type(msg):
        raise InputError(f"extension {type(ext).__name__} does not travel on {type(msg).__name__}")
    parts.append(struct.pack("<B", ext.WIRE_ID))
    codec.write(ext, parts)


def read_extension(
    r: Reader, message: type[Message], lim: Limits | None
) -> MessageExtension | None:
    """Read the extension id byte and, if not 0, the extension's body.

    Parameters
    ----------
    r
        The message's reader, at the id byte.
    message
        The class of the message being read.
    lim
        The receiver's limits, if it knows them.

    Returns
    -------
    MessageExtension | None

    Raises
    ------
    RemoteProtocolError
        If the id is unknown, the extension does not travel on ``message``, or its body is
        malformed or beyond ``lim``.
    """
    (wire_id,) = r.unpack("<B")
    if wire_id == NO_EXTENSION:
        return None
    codec = _BY_ID.get(wire_id)
    if codec is None:
        raise RemoteProtocolError(f"unknown message extension {wire_id}")
    if codec.cls.MESSAGE is not message:
        raise RemoteProtocolError(
            f"extension {codec.cls.__name__} does not travel on {message.__name__}"
        )
    return codec.read(r, lim)
