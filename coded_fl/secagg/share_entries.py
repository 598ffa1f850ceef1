"""Share entries on the wire, and the statements their senders and accusers sign.

An entry is ``E_ij (32 bytes) | payload | signature (0, 64 or 96 bytes)``; the payload is the
sealed box (4 m + 28 bytes) or the tag (8 bytes) (:class:`Entry`, :func:`entry_sizes`,
:func:`sealed_payload_bytes`). With identity keys the sender signs :func:`share_statement` for
every entry and an accuser signs :func:`accusation_statement`. The protocol they serve,
verifiable accusations: :mod:`coded_fl.secagg.evidence`.
"""

from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass

from coded_fl.crypto import SEAL_OVERHEAD
from coded_fl.errors import RemoteProtocolError
from coded_fl.secagg.endorsement import CREDENTIAL_SIZES
from coded_fl.secagg.share_keys import EPHEMERAL_BYTES, _fields

__all__ = [
    "SIGNATURE_SIZES",
    "Entry",
    "accusation_statement",
    "entry_sizes",
    "sealed_payload_bytes",
    "share_statement",
]
#: The sizes a signature in an entry may have (0: unsigned; P-256; P-384).
SIGNATURE_SIZES = tuple(sorted({s for _, s in CREDENTIAL_SIZES}))
_SHARE_DOMAIN = b"coded-fl 2026-11-26 share statement v1\x00"
_ACCUSE_DOMAIN = b"coded-fl 2026-11-26 accusation v1\x00"


@dataclass(frozen=True)
class Entry:
    """One share's entry in an upload: its ephemeral public key, payload and signature."""

    ephemeral: bytes
    payload: bytes
    signature: bytes = b""

    def to_bytes(self) -> bytes:
        """``ephemeral | payload | signature``."""
        return self.ephemeral + self.payload + self.signature

    @classmethod
    def parse(cls, raw: bytes, *, payload_bytes: int, blame: int) -> Entry:
        """Split an entry whose payload has ``payload_bytes``.

        Parameters
        ----------
        raw
            The entry's bytes.
        payload_bytes
            The payload size (the sealed box's, or the tag's).
        blame
            Whom a malformed entry is blamed on (the sender of the message it came in).

        Returns
        -------
        Entry

        Raises
        ------
        RemoteProtocolError
            Blaming ``blame``, if the size fits no signature size.
        """
        raw = bytes(raw)
        sig = len(raw) - EPHEMERAL_BYTES - payload_bytes
        if sig not in SIGNATURE_SIZES:
            raise RemoteProtocolError(
                f"a share entry of {len(raw)} bytes; expected {entry_sizes(payload_bytes)}",
                sender=blame,
            )
        head = EPHEMERAL_BYTES + payload_bytes
        return cls(raw[:EPHEMERAL_BYTES], raw[EPHEMERAL_BYTES:head], raw[head:])


def entry_sizes(payload_bytes: int) -> tuple[int, ...]:
    """The sizes an entry with a payload of ``payload_bytes`` may have.

    Parameters
    ----------
    payload_bytes
        The payload size.

    Returns
    -------
    tuple[int, ...]
    """
    return tuple(EPHEMERAL_BYTES + payload_bytes + s for s in SIGNATURE_SIZES)


def share_statement(
    *,
    digest: bytes,
    run_id: bytes,
    round_: int,
    sender: int,
    recipient: int,
    kind: bytes,
    context: bytes,
    ephemeral: bytes,
    recipient_key: bytes,
    payload: bytes,
) -> bytes:
    """What a sender with an identity signs for one entry.

    Parameters
    ----------
    digest, run_id, round_, sender, recipient
        The configuration, run, round and share.
    kind
        :data:`SEALED` or :data:`DERIVED`.
    context
        The upload's share context (derived shares; empty for sealed ones).
    ephemeral
        E_ij.
    recipient_key
        The recipient's key-agreement key the share was made for: a recipient whose key
        differs (a key replayed by the relay) finds the signature wrong and accuses nobody,
        so no share made for another key is ever revealed.
    payload
        The box or the tag (hashed).

    Returns
    -------
    bytes
    """
    return (
        _SHARE_DOMAIN
        + struct.pack("<Qii", round_, sender, recipient)
        + _fields(
            digest,
            run_id,
            kind,
            context,
            ephemeral,
            recipient_key,
            hashlib.sha256(payload).digest(),
        )
    )


def accusation_statement(
    *, digest: bytes, run_id: bytes, round_: int, accuser: int, accused: int, item: bytes
) -> bytes:
    """What an accuser with an identity signs: the item it could not use, as relayed.

    Parameters
    ----------
    digest, run_id, round_
        The configuration, run and round.
    accuser, accused
        The recipient and the sender of the share.
    item
        The relayed entry (sealed share) or token (context and entry of a derived share).

    Returns
    -------
    bytes
    """
    return (
        _ACCUSE_DOMAIN
        + struct.pack("<Qii", round_, accuser, accused)
        + _fields(digest, run_id, hashlib.sha256(item).digest())
    )


def sealed_payload_bytes(piece_length: int) -> int:
    """The sealed box's size for pieces of ``piece_length`` elements (4 m + 28).

    Parameters
    ----------
    piece_length
        m.

    Returns
    -------
    int
    """
    return 4 * piece_length + SEAL_OVERHEAD
