"""Mask shares derived from pairwise keys instead of sent (seed-derived shares).

Silo i's mask polynomial :math:`f_i` has degree :math:`< U`, so any U of its evaluations fix it.
Silo i derives U of its n shares with a PRF: the share for recipient j in its *derived set*
:math:`P_i` (:meth:`~coded_fl.secagg.sharing.MaskSharing.derived_set`: the U members after i,
cyclically, i included) is the AES-CTR stream (rejection sampled: exactly uniform, as masks are,
:class:`~coded_fl.prg.MaskStream`) of a seed that only i and j can compute. Its mask
:math:`z_i` and its other n - U shares follow by interpolation; only those are sealed and sent.
Recipient j recomputes its derived share itself at recovery.

Keys, from the X25519 secret of the pair through HKDF-SHA256:

- a per-pair *derivation root* (:func:`derivation_root`): the label ``coded-fl/v2/share-root``,
  never the label of the sealing key (:func:`~coded_fl.crypto.pairwise_key`'s default), so the
  two keys are independent; silo i's own share uses the root of i with itself (its X25519
  secret with its own public key, known to i only);
- per (run, round, sender -> recipient, context) a 32-byte seed and an 8-byte key-confirmation
  tag (:func:`derive_share_key`). The direction is in the info: the share i -> j and the share
  j -> i are independent. The context (:func:`share_context`) hashes the request the silo
  answered (configuration, round, roster), the model it was sent, and a fresh 16-byte nonce
  drawn for every upload, so no mask is ever derived twice, even by a stale copy of a silo's
  state that uploads a round a second time. The info also holds the digest of the round's
  training inputs as the deriving silo holds it (the recipient uses its own at recovery), so
  two silos sent different inputs derive independent shares and the tag fails (issue 29).

The tag travels with the upload (8 bytes per derived share) and reaches the recipient with the
recovery request; a recipient whose tag differs refuses with
:class:`~coded_fl.errors.KeyConfirmationError` naming the sender (a stale roster or a rekeyed
peer is named instead of corrupting the sum). The server never learns a seed: it holds
neither key.

>>> from coded_fl.crypto import KeyPair
>>> a, b = KeyPair.generate(), KeyPair.generate()
>>> ra = derivation_root(a, b.public_bytes, run_id=b"run", me=0, peer=1)
>>> rb = derivation_root(b, a.public_bytes, run_id=b"run", me=1, peer=0)
>>> ctx = share_context(b"request", b"", nonce=bytes(16))
>>> derive_share_key(ra, run_id=b"run", round_=1, sender=0, recipient=1, context=ctx) == (
...     derive_share_key(rb, run_id=b"run", round_=1, sender=0, recipient=1, context=ctx))
True
>>> derive_share_key(ra, run_id=b"run", round_=1, sender=0, recipient=1, context=ctx) == (
...     derive_share_key(ra, run_id=b"run", round_=1, sender=1, recipient=0, context=ctx))
False
"""

from __future__ import annotations

import hashlib
import hmac
import struct

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from coded_fl.crypto import KeyPair, pairwise_key
from coded_fl.errors import InputError
from coded_fl.prg import SEED_BYTES

__all__ = [
    "CONFIRM_BYTES",
    "CONTEXT_BYTES",
    "NONCE_BYTES",
    "ROOT_LABEL",
    "derivation_root",
    "derive_share_key",
    "request_digest",
    "share_context",
    "tags_match",
]

#: The HKDF label of the derivation root (distinct from the sealing key's).
ROOT_LABEL = b"coded-fl/v2/share-root"
_SEED_INFO = b"coded-fl/v2/derived-share"
#: Bytes of a key-confirmation tag.
CONFIRM_BYTES = 8
#: Bytes of a share context (what binds a derivation to one upload).
CONTEXT_BYTES = 16
#: Bytes of the fresh nonce in a share context.
NONCE_BYTES = 16


def derivation_root(
    mine: KeyPair, peer_public: bytes, *, run_id: bytes, me: int, peer: int
) -> bytes:
    """The 32-byte root silos ``me`` and ``peer`` derive shares from (the same at both ends).

    Parameters
    ----------
    mine
        This silo's key pair.
    peer_public
        The peer's public key (this silo's own for its own share).
    run_id
        The run and session.
    me, peer
        The two silo ids.

    Returns
    -------
    bytes
        The root (secret: never log it).
    """
    return pairwise_key(mine, peer_public, run_id=run_id, me=me, peer=peer, label=ROOT_LABEL)


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


def derive_share_key(
    root: bytes,
    *,
    run_id: bytes,
    round_: int,
    sender: int,
    recipient: int,
    context: bytes,
    inputs: bytes = b"",
) -> tuple[bytes, bytes]:
    """The seed of the share ``sender`` -> ``recipient`` and its key-confirmation tag.

    Parameters
    ----------
    root
        :func:`derivation_root` of the pair.
    run_id, round_
        The run and round.
    sender, recipient
        The direction (ordered: the share j -> i is independent of i -> j).
    context
        :func:`share_context` of the sender's upload.
    inputs
        The digest of the round's training inputs, as the silo computing the share holds it:
        the sender its own at upload, the recipient *its own* at recovery (never one the server
        relays). Two silos sent different inputs derive independent seeds, so the tag fails.

    Returns
    -------
    tuple[bytes, bytes]
        A 32-byte seed for :class:`~coded_fl.prg.MaskStream` and a :data:`CONFIRM_BYTES` tag.

    Raises
    ------
    InputError
        If ``context`` is not :data:`CONTEXT_BYTES` bytes or the round is out of range.
    """
    if len(context) != CONTEXT_BYTES:
        raise InputError(f"a share context has {CONTEXT_BYTES} bytes, got {len(context)}")
    if not 0 <= round_ < 2**63:
        raise InputError("the round must be in [0, 2**63)")
    info = (
        _SEED_INFO
        + struct.pack("<QiiI", round_, sender, recipient, len(run_id))
        + run_id
        + bytes(context)
    )
    if inputs:  # length-prefixed after the fixed-size context: unambiguous
        info += struct.pack("<I", len(inputs)) + bytes(inputs)
    out = HKDF(
        algorithm=hashes.SHA256(), length=SEED_BYTES + CONFIRM_BYTES, salt=None, info=info
    ).derive(root)
    return out[:SEED_BYTES], out[SEED_BYTES:]


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
