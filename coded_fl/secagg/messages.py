"""Protocol messages: frozen dataclasses with a compact, versioned binary encoding.

Layout of every message (little endian)::

    magic "CFL" | version u8 | type u8 | config digest 8 B | round u64 | sender i32 | recipient i32
    | body

``sender``/``recipient`` are silo indices, ``-1`` for the server. Field vectors are packed
``uint32`` (4 bytes per element, no pickles, no text); byte strings and lists carry explicit
lengths, and :func:`decode` checks every length against the buffer, so truncated, padded or
garbled input raises :class:`RemoteProtocolError` instead of producing a half-read message.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
import torch

from coded_fl.errors import InputError, RemoteProtocolError

__all__ = [
    "SERVER",
    "VERSION",
    "KeyReply",
    "KeyRequest",
    "Message",
    "RecoveryReply",
    "RecoveryRequest",
    "TrainRequest",
    "Upload",
    "decode",
    "encode",
]

MAGIC = b"CFL"
VERSION = 1
SERVER = -1
_HEADER = struct.Struct("<3sBB8sQii")


def _vector_bytes(v: torch.Tensor) -> bytes:
    if v.dtype != torch.uint32:
        raise InputError(f"field vectors travel as uint32, got {v.dtype}")
    return v.detach().cpu().contiguous().numpy().astype("<u4", copy=False).tobytes()


@dataclass(frozen=True)
class Message:
    """Common header. ``digest`` is the public configuration's digest (both ends must agree)."""

    TYPE: ClassVar[int] = 0
    digest: bytes
    round: int
    sender: int
    recipient: int


@dataclass(frozen=True)
class KeyRequest(Message):
    """Server -> silo: the public configuration (JSON bytes); asks for the silo's public key."""

    TYPE: ClassVar[int] = 1
    config: bytes = b""


@dataclass(frozen=True)
class KeyReply(Message):
    """Silo -> server: its X25519 public key for this run."""

    TYPE: ClassVar[int] = 2
    public_key: bytes = b""


@dataclass(frozen=True)
class TrainRequest(Message):
    """Server -> silo: start round ``round``; ``roster`` is (silo, public key) of every member."""

    TYPE: ClassVar[int] = 3
    roster: tuple[tuple[int, bytes], ...] = ()


@dataclass(frozen=True, eq=False)
class Upload(Message):
    """Silo -> server: the masked coded vector and one sealed mask share per member (its own
    share sealed to itself)."""

    TYPE: ClassVar[int] = 4
    masked: torch.Tensor = field(default_factory=lambda: torch.empty(0, dtype=torch.uint32))
    shares: tuple[tuple[int, bytes], ...] = ()


@dataclass(frozen=True)
class RecoveryRequest(Message):
    """Server -> silo: the survivor set, the weight rows to apply, and the sealed shares that
    the survivors addressed to this silo (one per survivor, in the order of ``survivors``)."""

    TYPE: ClassVar[int] = 5
    survivors: tuple[int, ...] = ()
    weights: tuple[tuple[int, ...], ...] = ()
    shares: tuple[bytes, ...] = ()
    #: the survivors' public keys (the roster a silo needs even if it missed the TrainRequest)
    keys: tuple[bytes, ...] = ()


@dataclass(frozen=True, eq=False)
class RecoveryReply(Message):
    """Silo -> server: for each weight row, the weighted sum of the survivors' shares."""

    TYPE: ClassVar[int] = 6
    rows: torch.Tensor = field(default_factory=lambda: torch.empty((0, 0), dtype=torch.uint32))


_TYPES: dict[int, type[Message]] = {
    cls.TYPE: cls
    for cls in (KeyRequest, KeyReply, TrainRequest, Upload, RecoveryRequest, RecoveryReply)
}


# ----------------------------------------------------------------------------- encoding


def _blob(b: bytes) -> bytes:
    return struct.pack("<I", len(b)) + b


def encode(msg: Message) -> bytes:
    """Serialise a message (see the module docstring for the layout)."""
    if len(msg.digest) != 8:
        raise InputError("config digest must be 8 bytes")
    head = _HEADER.pack(MAGIC, VERSION, msg.TYPE, msg.digest, msg.round, msg.sender, msg.recipient)
    parts = [head]
    if isinstance(msg, KeyRequest):
        parts.append(_blob(msg.config))
    elif isinstance(msg, KeyReply):
        parts.append(_blob(msg.public_key))
    elif isinstance(msg, TrainRequest):
        parts.append(struct.pack("<I", len(msg.roster)))
        parts += [struct.pack("<i", s) + _blob(k) for s, k in msg.roster]
    elif isinstance(msg, Upload):
        parts.append(_blob(_vector_bytes(msg.masked)))
        parts.append(struct.pack("<I", len(msg.shares)))
        parts += [struct.pack("<i", r) + _blob(c) for r, c in msg.shares]
    elif isinstance(msg, RecoveryRequest):
        n = len(msg.survivors)
        if any(len(w) != n for w in msg.weights) or len(msg.shares) != n or len(msg.keys) != n:
            raise InputError("RecoveryRequest: weights, shares, keys must match the survivors")
        parts.append(struct.pack("<II", n, len(msg.weights)))
        parts.append(np.asarray(msg.survivors, dtype="<i4").tobytes())
        parts.append(np.asarray(msg.weights, dtype="<u4").reshape(-1).tobytes())
        parts += [_blob(c) for c in msg.shares]
        parts += [_blob(k) for k in msg.keys]
    elif isinstance(msg, RecoveryReply):
        rows = msg.rows
        if rows.dim() != 2:
            raise InputError("RecoveryReply rows must be a 2-D tensor")
        parts.append(struct.pack("<II", rows.shape[0], rows.shape[1]))
        parts.append(_vector_bytes(rows.reshape(-1)))
    else:  # pragma: no cover - every subclass is handled above
        raise InputError(f"cannot encode {type(msg).__name__}")
    return b"".join(parts)


class _Reader:
    def __init__(self, buf: bytes | bytearray | memoryview) -> None:
        self.buf = memoryview(buf)
        self.pos = 0

    def take(self, n: int) -> memoryview:
        if n < 0 or self.pos + n > len(self.buf):
            raise RemoteProtocolError("message is truncated or has a bad length field")
        out = self.buf[self.pos : self.pos + n]
        self.pos += n
        return out

    def unpack(self, fmt: str) -> tuple[int, ...]:
        s = struct.Struct(fmt)
        return s.unpack(self.take(s.size))

    def blob(self) -> bytes:
        (n,) = self.unpack("<I")
        return bytes(self.take(n))

    def vector(self, count: int) -> torch.Tensor:
        raw = self.take(4 * count)
        return torch.from_numpy(np.frombuffer(raw, dtype="<u4").astype(np.uint32))

    def count(self, item_bytes: int) -> int:
        """A list length, checked against what is left so a huge length cannot allocate."""
        (n,) = self.unpack("<I")
        if n * item_bytes > len(self.buf) - self.pos:
            raise RemoteProtocolError("message is truncated or has a bad length field")
        return int(n)


def decode(buf: bytes | bytearray | memoryview) -> Message:
    """Parse bytes into a message; anything malformed raises :class:`RemoteProtocolError`."""
    r = _Reader(buf)
    magic, version, kind, digest, round_, sender, recipient = r.unpack(_HEADER.format)
    if magic != MAGIC:
        raise RemoteProtocolError("not a coded-fl message (bad magic)")
    if version != VERSION:
        raise RemoteProtocolError(
            f"message version {version} is not supported (this side speaks {VERSION}); "
            "run the same coded-fl version on the server and the silos"
        )
    cls = _TYPES.get(kind)
    if cls is None:
        raise RemoteProtocolError(f"unknown message type {kind}")
    head: dict[str, Any] = {
        "digest": bytes(digest),
        "round": round_,
        "sender": sender,
        "recipient": recipient,
    }
    msg: Message
    if cls is KeyRequest:
        msg = KeyRequest(**head, config=r.blob())
    elif cls is KeyReply:
        msg = KeyReply(**head, public_key=r.blob())
    elif cls is TrainRequest:
        n = r.count(8)
        roster = tuple((r.unpack("<i")[0], r.blob()) for _ in range(n))
        msg = TrainRequest(**head, roster=roster)
    elif cls is Upload:
        (nbytes,) = r.unpack("<I")
        if nbytes % 4:
            raise RemoteProtocolError("masked vector length is not a multiple of 4 bytes")
        masked = r.vector(nbytes // 4)
        n = r.count(8)
        shares = tuple((r.unpack("<i")[0], r.blob()) for _ in range(n))
        msg = Upload(**head, masked=masked, shares=shares)
    elif cls is RecoveryRequest:
        n, rows = r.unpack("<II")
        if (n + n * rows) * 4 + n * 4 > len(r.buf) - r.pos:
            raise RemoteProtocolError("message is truncated or has a bad length field")
        survivors = tuple(int(v) for v in np.frombuffer(r.take(4 * n), dtype="<i4"))
        w = np.frombuffer(r.take(4 * n * rows), dtype="<u4").reshape(rows, n)
        weights = tuple(tuple(int(v) for v in row) for row in w)
        boxes = tuple(r.blob() for _ in range(n))
        keys = tuple(r.blob() for _ in range(n))
        msg = RecoveryRequest(**head, survivors=survivors, weights=weights, shares=boxes, keys=keys)
    else:
        rows, cols = r.unpack("<II")
        if rows * cols * 4 > len(r.buf) - r.pos:
            raise RemoteProtocolError("message is truncated or has a bad length field")
        msg = RecoveryReply(**head, rows=r.vector(rows * cols).reshape(rows, cols))
    if r.pos != len(r.buf):
        raise RemoteProtocolError(f"{len(r.buf) - r.pos} unexpected trailing bytes in message")
    return msg
