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

The per-share keys are in :mod:`coded_fl.secagg.share_keys`, the entries and the signed
statements in :mod:`coded_fl.secagg.share_entries` (both re-exported here); this module opens a
share and judges a dispute (:func:`open_share`, :func:`judge`).
"""

from __future__ import annotations

import numpy as np
import torch

from coded_fl.crypto import KEY_BYTES, open_sealed
from coded_fl.errors import InputError, RemoteProtocolError
from coded_fl.field import PrimeField
from coded_fl.prg import SEED_BYTES
from coded_fl.secagg.derive import tags_match
from coded_fl.secagg.share_entries import (
    SIGNATURE_SIZES,
    Entry,
    accusation_statement,
    entry_sizes,
    sealed_payload_bytes,
    share_statement,
)
from coded_fl.secagg.share_keys import (
    DERIVED,
    EPHEMERAL_BYTES,
    SEALED,
    SHARE_PURPOSE,
    ephemeral_secret,
    exchange,
    public_of,
    share_purpose,
    share_secret,
)
from coded_fl.secagg.share_keys import SECRET_BYTES as SECRET_BYTES

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
