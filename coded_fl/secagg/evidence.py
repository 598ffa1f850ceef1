"""Verifiable accusations: one ephemeral key per share, so a disputed share can be judged.

A survivor that cannot use the share silo i left for it refuses the recovery with an
``ACCUSES`` refusal naming i. Before wire version 7 the share was sealed (or derived) under a
pairwise key the server does not hold, so the server could not tell whether i sent a bad share
or the accuser lied. Now every share silo i leaves for silo j in an upload (sealed or derived)
has its own key:

1. i draws an *ephemeral* X25519 scalar e_ij for (run, round, i -> j, upload context)
   (:func:`ephemeral_secret`: HKDF of i's private key, so it is fresh for every upload, since
   the context carries a fresh nonce, and i can recompute it later without keeping state);
   its public half E_ij travels with the upload, in the share's *entry*;
2. the share's key material is HKDF of X25519(e_ij, pk_j) bound to (run, round, i, j, E_ij,
   pk_j, context, D) (:func:`share_secret`): j computes it as X25519(sk_j, E_ij). A sealed
   share is AES-256-GCM under its first 32 bytes, with :data:`SHARE_PURPOSE` + D in its
   associated data (:func:`share_purpose`); a derived share is the AES-CTR stream of those 32
   bytes, and the next 8 are its key-confirmation tag. D is the digest of the round's training
   inputs (issue 29) *as the silo computing the key holds it*: i its own at upload, j its own
   at recovery (never one the server relays), so two silos sent different inputs compute
   unrelated keys and the share fails;
3. an accused silo is asked to *reveal* e_ij (:class:`~coded_fl.secagg.messages.
   RevealRequest`); the server checks that e_ij is the scalar of E_ij, computes the key with
   the pk_j it relayed and the digest of the inputs *it sent i*, and checks the entry it
   relayed itself (:func:`judge`): the box opens to m field elements, or the tag confirms, and
   the accuser lied; otherwise, or if the accused does not reveal, the accused lied. (A
   server that sent i and j different inputs gets a verdict that names whichever silo its own
   digest bookkeeping says: it could name anyone in its own report anyway, and it learns no
   more than the share j already holds; ``docs/protocol.md``, "Verifiable accusations".)

e_ij serves that one share only: revealing it tells the server the one share j already holds
(and says it could not use), nothing about i's other shares, keys or rounds.

With identity keys (``codedfl.identity-key``) the sender signs every entry
(:func:`share_statement`: configuration, run, round, sender, recipient, kind, context, E_ij,
the recipient's key and the SHA-256 of the payload) and the accuser signs its accusation
(:func:`accusation_statement`, over the relayed item). The server checks both; a recipient
checks the sender's signature before it uses an entry (an altered entry is the relay's fault,
never an accusation), and an accused silo reveals only for an accusation its accuser signed.

An entry on the wire is ``E_ij (32 bytes) | payload | signature (0, 64 or 96 bytes)``; the
payload is the sealed box (4 m + 28 bytes) or the tag (8 bytes).

>>> from coded_fl.crypto import KeyPair
>>> i, j = KeyPair.generate(), KeyPair.generate()
>>> e = ephemeral_secret(i.private_bytes, run_id=b"run", round_=1, sender=0, recipient=1,
...                      context=bytes(16))
>>> E = public_of(e)
>>> ctx = dict(run_id=b"run", round_=1, sender=0, recipient=1, ephemeral=E,
...            recipient_key=j.public_bytes, context=b"", kind=SEALED)
>>> share_secret(exchange(e, j.public_bytes), **ctx) == share_secret(
...     exchange(j.private_bytes, E), **ctx)
True
"""

from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass

import numpy as np
import torch
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from coded_fl.crypto import KEY_BYTES, SEAL_OVERHEAD, open_sealed
from coded_fl.errors import InputError, RemoteProtocolError
from coded_fl.field import PrimeField
from coded_fl.prg import SEED_BYTES
from coded_fl.secagg.derive import CONFIRM_BYTES, tags_match
from coded_fl.secagg.identity import CREDENTIAL_SIZES

__all__ = [
    "DERIVED",
    "EPHEMERAL_BYTES",
    "SEALED",
    "SHARE_PURPOSE",
    "SIGNATURE_SIZES",
    "Entry",
    "accusation_statement",
    "entry_sizes",
    "ephemeral_secret",
    "exchange",
    "judge",
    "open_share",
    "public_of",
    "sealed_payload_bytes",
    "share_purpose",
    "share_secret",
    "share_statement",
]

#: Bytes of an ephemeral X25519 key (either half).
EPHEMERAL_BYTES = KEY_BYTES
#: The sizes a signature in an entry may have (0: unsigned; P-256; P-384).
SIGNATURE_SIZES = tuple(sorted({s for _, s in CREDENTIAL_SIZES}))
#: The kinds of share entry (domain separation in every derivation and statement).
SEALED = b"sealed"
DERIVED = b"derived"
#: The purpose a sealed mask share's associated data names.
SHARE_PURPOSE = b"mask-share"

_EPHEMERAL_SALT = b"coded-fl/v7/share-ephemeral"
_SHARE_SALT = b"coded-fl/v7/share-key"
_SHARE_DOMAIN = b"coded-fl 2026-11-26 share statement v1\x00"
_ACCUSE_DOMAIN = b"coded-fl 2026-11-26 accusation v1\x00"
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


def open_share(
    secret: bytes,
    entry: Entry,
    *,
    kind: bytes,
    field: PrimeField,
    piece_length: int,
    run_id: bytes,
    round_: int,
    sender: int,
    recipient: int,
    inputs: bytes = b"",
) -> torch.Tensor | None:
    """Open a sealed entry (returns the share) or confirm a derived one's tag (returns None:
    the caller expands the seed).

    Parameters
    ----------
    secret
        :func:`share_secret` of the entry.
    entry
        The entry.
    kind
        :data:`SEALED` or :data:`DERIVED`.
    field
        The field the share's elements lie in.
    piece_length
        m: a sealed share's length.
    run_id, round_, sender, recipient
        The share (the box's associated data).
    inputs
        The inputs digest the key was made with (the box's associated data holds it too:
        :func:`share_purpose`).

    Returns
    -------
    torch.Tensor | None

    Raises
    ------
    RemoteProtocolError
        Blaming ``sender``: the box does not open, its plaintext is not m field elements, or
        the tag does not confirm.
    """
    if kind == DERIVED:
        if not tags_match(entry.payload, secret[SEED_BYTES:]):
            raise RemoteProtocolError(
                f"its derived mask share for silo {recipient} in round {round_} fails key "
                "confirmation",
                sender=sender,
            )
        return None
    raw = open_sealed(
        secret[:KEY_BYTES],
        entry.payload,
        run_id=run_id,
        round_=round_,
        sender=sender,
        recipient=recipient,
        purpose=share_purpose(inputs),
    )
    if len(raw) != 4 * piece_length:
        raise RemoteProtocolError(
            f"share has {len(raw)} bytes, expected {4 * piece_length}", sender=sender
        )
    share = torch.from_numpy(np.frombuffer(raw, dtype="<u4").astype(np.uint32))
    try:
        return field.validate(share, name=f"share from silo {sender}")
    except InputError as exc:  # authenticated, yet not field elements: its sender lied
        raise RemoteProtocolError(str(exc), sender=sender) from None


def judge(
    revealed: bytes,
    entry: Entry,
    *,
    kind: bytes,
    recipient_key: bytes,
    context: bytes,
    field: PrimeField,
    piece_length: int,
    run_id: bytes,
    round_: int,
    sender: int,
    recipient: int,
    inputs: bytes = b"",
) -> str | None:
    """The server's verdict on a disputed entry, given the scalar its sender revealed.

    Parameters
    ----------
    revealed
        The scalar the accused revealed.
    entry
        The entry the server relayed.
    kind
        :data:`SEALED` or :data:`DERIVED`.
    recipient_key
        The accuser's public key the server relayed in the round's roster.
    context
        The sender's upload context (derived shares bind it).
    field, piece_length, run_id, round_, sender, recipient
        As for :func:`open_share`.
    inputs
        The digest of the inputs the server sent the *accused* (``sender``) this round: the
        honest accused made its key with it, so an honest round's verdict is exact. Under a
        server that sent the two silos different inputs the verdict names whichever silo the
        server's own bookkeeping implies (``docs/protocol.md``, "Verifiable accusations").

    Returns
    -------
    str | None
        None when the share opens (or confirms) and holds m field elements: the accuser lied.
        Otherwise why the sender is at fault (no key material in it).
    """
    if len(revealed) != EPHEMERAL_BYTES or public_of(revealed) != entry.ephemeral:
        return "the scalar it revealed is not the one of the ephemeral key in its upload"
    try:
        dh = exchange(revealed, recipient_key)
    except InputError:
        return "the recipient key is unusable"  # pragma: no cover - keys are checked on arrival
    secret = share_secret(
        dh,
        run_id=run_id,
        round_=round_,
        sender=sender,
        recipient=recipient,
        ephemeral=entry.ephemeral,
        recipient_key=recipient_key,
        context=context if kind == DERIVED else b"",
        kind=kind,
        inputs=inputs,
    )
    try:
        open_share(
            secret,
            entry,
            kind=kind,
            field=field,
            piece_length=piece_length,
            run_id=run_id,
            round_=round_,
            sender=sender,
            recipient=recipient,
            inputs=inputs,
        )
    except RemoteProtocolError:
        what = "tag does not confirm" if kind == DERIVED else "box does not open to m elements"
        return f"under the key of the scalar it revealed, its share's {what}"
    return None


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
