"""One key per share: the ephemeral X25519 scalar of each share and the key material from it.

Every share silo i leaves for silo j in an upload has its own ephemeral key
(:func:`ephemeral_secret`, :func:`public_of`); the share's key material is HKDF of the X25519
of that scalar and j's key (:func:`exchange`, :func:`share_secret`), bound to the digest of the
round's training inputs (:func:`share_purpose` for a sealed share's associated data). The
protocol these keys serve, verifiable accusations: :mod:`coded_fl.secagg.evidence`.
"""

from __future__ import annotations

import struct

from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from coded_fl.crypto import KEY_BYTES
from coded_fl.errors import InputError
from coded_fl.prg import SEED_BYTES
from coded_fl.secagg.derive import CONFIRM_BYTES

__all__ = [
    "DERIVED",
    "EPHEMERAL_BYTES",
    "SEALED",
    "SECRET_BYTES",
    "SHARE_PURPOSE",
    "ephemeral_secret",
    "exchange",
    "public_of",
    "share_purpose",
    "share_secret",
]
#: Bytes of an ephemeral X25519 key (either half).
EPHEMERAL_BYTES = KEY_BYTES
#: The kinds of share entry (domain separation in every derivation and statement).
SEALED = b"sealed"
DERIVED = b"derived"
#: The purpose a sealed mask share's associated data names.
SHARE_PURPOSE = b"mask-share"

_EPHEMERAL_SALT = b"coded-fl/v7/share-ephemeral"
_SHARE_SALT = b"coded-fl/v7/share-key"
#: Key material per share: a 32-byte key or seed and an 8-byte tag.
SECRET_BYTES = SEED_BYTES + CONFIRM_BYTES


def share_purpose(inputs: bytes) -> bytes:
    """A sealed share's purpose (in its associated data): :data:`SHARE_PURPOSE` and the digest
    of the round's training inputs, so a share sealed by a silo sent other inputs than the
    recipient fails authentication at the recipient.

    Parameters
    ----------
    inputs
        The digest of the round's training inputs (empty where the caller has none).

    Returns
    -------
    bytes
    """
    return SHARE_PURPOSE + bytes(inputs)


def _fields(*parts: bytes) -> bytes:
    """Length-prefixed concatenation: unambiguous whatever the parts hold."""
    return b"".join(struct.pack("<I", len(p)) + p for p in parts)


def ephemeral_secret(
    private: bytes, *, run_id: bytes, round_: int, sender: int, recipient: int, context: bytes
) -> bytes:
    """The ephemeral X25519 scalar of the share ``sender`` -> ``recipient`` in one upload.

    A PRF (HKDF-SHA256) of the sender's private key: fresh for every upload (``context`` holds
    a fresh nonce), independent of every other share's, and recomputable by the sender alone
    when asked to reveal it.

    Parameters
    ----------
    private
        The sender's X25519 private key (32 bytes; secret).
    run_id, round_, sender, recipient
        The share.
    context
        The upload's share context (:func:`~coded_fl.secagg.derive.share_context`).

    Returns
    -------
    bytes
        32 bytes (secret until revealed).
    """
    if not 0 <= round_ < 2**63:
        raise InputError("the round must be in [0, 2**63)")
    info = struct.pack("<Qii", round_, sender, recipient) + _fields(run_id, bytes(context))
    hkdf = HKDF(algorithm=hashes.SHA256(), length=KEY_BYTES, salt=_EPHEMERAL_SALT, info=info)
    return hkdf.derive(bytes(private))


def public_of(secret: bytes) -> bytes:
    """The X25519 public key of a 32-byte scalar.

    Parameters
    ----------
    secret
        The scalar.

    Returns
    -------
    bytes
        32 bytes.

    Raises
    ------
    InputError
        If ``secret`` is not 32 bytes.
    """
    if not isinstance(secret, (bytes, bytearray)) or len(secret) != KEY_BYTES:
        raise InputError("an X25519 scalar is 32 bytes")
    return (
        X25519PrivateKey.from_private_bytes(bytes(secret))
        .public_key()
        .public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    )


def exchange(private: bytes, public: bytes) -> bytes:
    """X25519 of a scalar and a public key (not memoised: ephemeral keys serve once).

    Parameters
    ----------
    private
        32-byte scalar.
    public
        32-byte public key.

    Returns
    -------
    bytes
        The shared secret.

    Raises
    ------
    InputError
        If a key is not 32 bytes or ``public`` is a small-order point.
    """
    if len(private) != KEY_BYTES or len(public) != KEY_BYTES:
        raise InputError("X25519 keys are 32 bytes")
    try:
        return X25519PrivateKey.from_private_bytes(bytes(private)).exchange(
            X25519PublicKey.from_public_bytes(bytes(public))
        )
    except ValueError:
        raise InputError("a public key is a small-order X25519 point") from None


def share_secret(
    dh: bytes,
    *,
    run_id: bytes,
    round_: int,
    sender: int,
    recipient: int,
    ephemeral: bytes,
    recipient_key: bytes,
    context: bytes,
    kind: bytes,
    inputs: bytes = b"",
) -> bytes:
    """The key material of one share: a 32-byte key (sealed) or seed (derived), then the
    8-byte tag of a derived share.

    Parameters
    ----------
    dh
        X25519(e_ij, pk_j) = X25519(sk_j, E_ij).
    run_id, round_, sender, recipient
        The share.
    ephemeral
        E_ij.
    recipient_key
        pk_j, the recipient's key the sender used.
    context
        The upload's share context (derived shares; empty for sealed ones, whose recipient
        does not receive it).
    kind
        :data:`SEALED` or :data:`DERIVED`.
    inputs
        The digest of the round's training inputs as the silo computing the key holds it: the
        sender its own at upload, the recipient *its own* at recovery (never one the server
        relays), the server judging a dispute the digest of the inputs it sent the accused.
        Two silos sent different inputs compute unrelated keys (issue 29).

    Returns
    -------
    bytes
        :data:`SECRET_BYTES` bytes (secret).
    """
    if not 0 <= round_ < 2**63:
        raise InputError("the round must be in [0, 2**63)")
    info = struct.pack("<Qii", round_, sender, recipient) + _fields(
        kind, run_id, bytes(ephemeral), bytes(recipient_key), bytes(context), bytes(inputs)
    )
    hkdf = HKDF(algorithm=hashes.SHA256(), length=SECRET_BYTES, salt=_SHARE_SALT, info=info)
    return hkdf.derive(dh)
