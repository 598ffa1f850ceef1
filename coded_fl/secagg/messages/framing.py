"""The framing every message shares: the common header's layout, length-prefixed byte strings,
uint32 vectors, signed entries, and the bounds-checked :class:`Reader`."""

from __future__ import annotations

import struct
from typing import Any

import numpy as np
import torch

from coded_fl.errors import InputError, RemoteProtocolError
from coded_fl.secagg.evidence import SIGNATURE_SIZES
from coded_fl.secagg.identity import check_credential_sizes
from coded_fl.secagg.messages.records import SERVER

HEADER = struct.Struct("<3sBB8sQii")

#: A message's encoded pieces, joined on the wire (a writer appends its body's).
Parts = list[bytes | memoryview]
#: The decoded header's fields, passed to a body's reader.
Head = dict[str, Any]


#: Bytes of the common header (what :func:`peek_type` reads).
HEADER_BYTES = HEADER.size


def vector_bytes(v: torch.Tensor) -> memoryview:
    """The vector's little-endian uint32 bytes, a view where no conversion is needed (the
    caller joins it into the message: one copy in all).

    Parameters
    ----------
    v
        A uint32 field vector.

    Raises
    ------
    InputError
        If the vector is not uint32.
    """
    if v.dtype != torch.uint32:
        raise InputError(f"field vectors travel as uint32, got {v.dtype}")
    a = v.detach().cpu().contiguous().numpy().astype("<u4", copy=False)
    return np.ascontiguousarray(a).data.cast("B")


def blob_bytes(b: bytes) -> bytes:
    """A byte string with its u32 length in front (what :meth:`Reader.blob` reads).

    Parameters
    ----------
    b
        The bytes to frame.
    """
    return struct.pack("<I", len(b)) + b


def credential_pairs(
    creds: tuple[tuple[bytes, bytes], ...], n: int, what: str
) -> tuple[tuple[bytes, bytes], ...]:
    """One (identity, signature) pair per entry: ``creds``, or unsigned pairs if empty.

    Parameters
    ----------
    creds
        The message's credentials (empty: no entry is signed).
    n
        The number of entries they sign.
    what
        The entries' name, for the error.

    Raises
    ------
    InputError
        If ``creds`` is neither empty nor one pair per entry.
    """
    if not creds:
        return ((b"", b""),) * n
    if len(creds) != n:
        raise InputError(f"credentials: {len(creds)} pairs for {n} {what} entries")
    return creds


class Reader:
    """Reads a message's bytes front to back; every read is checked against the bytes left,
    and a short or inconsistent buffer raises :class:`RemoteProtocolError`.

    Parameters
    ----------
    buf
        The encoded message.
    """

    def __init__(self, buf: bytes | bytearray | memoryview) -> None:
        self.buf = memoryview(buf)
        self.pos = 0

    def take(self, n: int) -> memoryview:
        """The next ``n`` bytes.

        Parameters
        ----------
        n
            How many bytes.
        """
        if n < 0 or self.pos + n > len(self.buf):
            raise RemoteProtocolError("message is truncated or has a bad length field")
        out = self.buf[self.pos : self.pos + n]
        self.pos += n
        return out

    def unpack(self, fmt: str) -> tuple[int, ...]:
        """The next fixed-size fields.

        Parameters
        ----------
        fmt
            Their :mod:`struct` format.
        """
        s = struct.Struct(fmt)
        return s.unpack(self.take(s.size))

    def blob(self, size: int | None = None, what: str = "byte string") -> bytes:
        """A length-prefixed byte string.

        Parameters
        ----------
        size
            The only length allowed (any if None).
        what
            The field's name, for the error.
        """
        (n,) = self.unpack("<I")
        if size is not None and n != size:
            raise RemoteProtocolError(f"{what} has {n} bytes, expected {size}")
        return bytes(self.take(n))

    def vector(self, count: int) -> torch.Tensor:
        """The next ``count`` uint32 field elements, as a tensor.

        Parameters
        ----------
        count
            How many elements.
        """
        raw = self.take(4 * count)
        return torch.from_numpy(np.frombuffer(raw, dtype="<u4").astype(np.uint32))

    def left(self) -> int:
        """Bytes not read yet."""
        return len(self.buf) - self.pos

    def blob_in(self, sizes: tuple[int, ...] | None, what: str) -> bytes:
        """A length-prefixed byte string whose length is one of ``sizes``.

        Parameters
        ----------
        sizes
            The lengths allowed (any if None).
        what
            The field's name, for the error.
        """
        (n,) = self.unpack("<I")
        if sizes is not None and n not in sizes:
            raise RemoteProtocolError(f"{what} has {n} bytes, expected one of {list(sizes)}")
        return bytes(self.take(n))

    def credential(self) -> tuple[bytes, bytes]:
        """An (identity key, signature) pair: both empty or of one supported curve's sizes."""
        identity = self.blob(None, "identity key")
        signature = self.blob(None, "signature")
        try:
            check_credential_sizes(identity, signature, sender=SERVER)
        except RemoteProtocolError as exc:
            raise RemoteProtocolError(str(exc)) from None
        return identity, signature

    def count(self, item_bytes: int, most: int | None = None, what: str = "list") -> int:
        """A list length, checked against ``most`` and against what is left (every item takes
        at least ``item_bytes``), so a huge length cannot allocate.

        Parameters
        ----------
        item_bytes
            The fewest bytes one item takes.
        most
            The most items the configuration allows (no bound if None).
        what
            The list's name, for the error.
        """
        (n,) = self.unpack("<I")
        if most is not None and n > most:
            raise RemoteProtocolError(f"{what} has {n} entries; the configuration allows {most}")
        if n * item_bytes > self.left():
            raise RemoteProtocolError("message is truncated or has a bad length field")
        return int(n)


def signed_sizes(unsigned: int) -> tuple[int, ...]:
    """The sizes of an entry of ``unsigned`` bytes, unsigned or with a signature.

    Parameters
    ----------
    unsigned
        The entry's size without a signature.
    """
    return tuple(unsigned + s for s in SIGNATURE_SIZES)


def signed_or_empty(creds: tuple[tuple[bytes, bytes], ...]) -> tuple[tuple[bytes, bytes], ...]:
    """The decoded credentials: empty when no entry is signed (as a sender that signs none
    builds them).

    Parameters
    ----------
    creds
        One (identity, signature) pair per entry, as read.
    """
    return creds if any(i or g for i, g in creds) else ()
