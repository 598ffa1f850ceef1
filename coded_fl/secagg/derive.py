"""Mask shares derived from key agreement instead of sent (seed-derived shares).

Silo i's mask polynomial :math:`f_i` has degree :math:`< U`, so any U of its evaluations fix it.
Silo i derives U of its n shares with a PRF: the share for recipient j in its *derived set*
:math:`P_i` (:meth:`~coded_fl.secagg.sharing.MaskSharing.derived_set`: the U members after i,
cyclically, i included) is the AES-CTR stream (rejection sampled: exactly uniform, as masks are,
:class:`~coded_fl.prg.MaskStream`) of a seed that only i and j can compute. Its mask
:math:`z_i` and its other n - U shares follow by interpolation; only those are sealed and sent.
Recipient j recomputes its derived share itself at recovery.

Since wire version 7 the seed of every share (derived or sealed) comes from a key agreement of
its own: X25519 of an ephemeral key of the sender, made for that one share of that one upload,
and the recipient's key; the ephemeral public key travels with the upload, so a disputed share
can be judged by revealing that one ephemeral key (:mod:`coded_fl.secagg.evidence`). Before,
the seed came from a per-pair derivation root, which no dispute could be settled with without
revealing every share of the pair. This module keeps what binds a derivation to one upload:

- the *context* (:func:`share_context`) hashes the request the silo answered (configuration,
  round, roster, :func:`request_digest`), the model it was sent, and a fresh 16-byte nonce
  drawn for every upload, so no mask is ever derived twice, even by a stale copy of a silo's
  state that uploads a round a second time;
- the digest of the round's training inputs (issue 29) is not part of the context: it enters
  every share's key derivation (:func:`~coded_fl.secagg.evidence.share_secret`) as the silo
  computing the key holds it (the sender its own at upload, the recipient *its own* at
  recovery), so two silos sent different inputs compute unrelated keys and the share fails;
- the 8-byte key-confirmation tag (:data:`CONFIRM_BYTES`, compared by :func:`tags_match`)
  travels with the upload and reaches the recipient with the recovery request; a recipient
  whose tag differs refuses with :class:`~coded_fl.errors.KeyConfirmationError` naming the
  sender (an accusation the server then judges).

The server never learns a seed unless a dispute makes the sender reveal that one share's key.

>>> ctx = share_context(b"request", b"", nonce=bytes(16))
>>> len(ctx) == CONTEXT_BYTES
True
"""

from __future__ import annotations

import hashlib
import hmac
import struct

from coded_fl.errors import InputError

__all__ = [
    "CONFIRM_BYTES",
    "CONTEXT_BYTES",
    "NONCE_BYTES",
    "request_digest",
    "share_context",
    "tags_match",
]

#: Bytes of a key-confirmation tag.
CONFIRM_BYTES = 8
#: Bytes of a share context (what binds a derivation to one upload).
CONTEXT_BYTES = 16
#: Bytes of the fresh nonce in a share context.
NONCE_BYTES = 16


def request_digest(
    config_digest: bytes, round_: int, roster: tuple[tuple[int, bytes], ...]
) -> bytes:
    """32 bytes naming a TrainRequest's content: configuration, round and roster.

    Parameters
    ----------
    config_digest
        The configuration's 8-byte digest.
    round_
        The round.
    roster
        (silo, public key) pairs, as the request carries them.

    Returns
    -------
    bytes
    """
    h = hashlib.sha256(b"coded-fl/v2/train-request" + config_digest + struct.pack("<Q", round_))
    for silo, key in sorted(roster):
        h.update(struct.pack("<iI", silo, len(key)) + key)
    return h.digest()


def share_context(request: bytes, model: bytes, *, nonce: bytes) -> bytes:
    """The :data:`CONTEXT_BYTES` that bind one upload's derived shares.

    Parameters
    ----------
    request
        :func:`request_digest` of the TrainRequest the silo answers.
    model
        A digest of the model the silo was sent (empty if the caller has none).
    nonce
        :data:`NONCE_BYTES` fresh random bytes, drawn for every upload.

    Returns
    -------
    bytes

    Raises
    ------
    InputError
        If ``nonce`` is not :data:`NONCE_BYTES` bytes.
    """
    if len(nonce) != NONCE_BYTES:
        raise InputError(f"the context nonce must be {NONCE_BYTES} bytes")
    h = hashlib.sha256(b"coded-fl/v2/share-context")
    for part in (request, model, nonce):
        h.update(struct.pack("<I", len(part)) + part)
    return h.digest()[:CONTEXT_BYTES]


def tags_match(a: bytes, b: bytes) -> bool:
    """Constant-time comparison of two key-confirmation tags.

    Parameters
    ----------
    a, b
        The tags.

    Returns
    -------
    bool
        True if they are equal.
    """
    return hmac.compare_digest(a, b)
