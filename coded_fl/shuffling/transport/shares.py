"""Manifest shares: how the members agree on the units' lengths and SHA-256 without the relay.

The relay's :class:`~coded_fl.shuffling.transport.wire.ShuffleJob` names the units but not their
lengths
or hashes (those would leak low-entropy units). Once the members share the epoch's group key,
every member seals, under the epoch's manifest key (HKDF of the group key,
:func:`~coded_fl.shuffling.transport.groupkey.derive_key` with label ``"manifest"``), the length and
SHA-256 of the units it vouches for (:func:`vouched_units`): in the centralized setting the
sender vouches for every unit (silos for none), in the decentralized setting each silo for every
unit its store knows (held, or recorded by an earlier placement or shuffle). The relay forwards
every share to every member (``PlanRequest``); each member opens and merges them
(:func:`open_shares`). Two members that disagree on a unit, or a unit the epoch needs that
nobody vouches for, stop the epoch with an error naming them.

A share is ``nonce (12 B) | AES-256-GCM(JSON [[unit id, length, sha256 hex], ...])`` with the
associated data ``domain | job digest | member (u32)``, so a share cannot be moved to another
epoch, job or member.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable, Mapping
from typing import Any

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from coded_fl.errors import InputError, RemoteProtocolError
from coded_fl.shuffling.plan.units import UnitId, UnitSpec, digest
from coded_fl.shuffling.storage.store import UnitStore
from coded_fl.shuffling.transport.wire import ShuffleJob

__all__ = ["open_shares", "seal_share", "vouched_units"]

_SHARE_DOMAIN = b"codedfl-shuffle-manifest-share-v1"
_NONCE = 12
_PLACEHOLDER = digest(b"")
_HEX = frozenset("0123456789abcdef")


def _aad(job: ShuffleJob, member: int) -> bytes:
    return _SHARE_DOMAIN + job.digest() + struct.pack("<I", member)


def vouched_units(job: ShuffleJob, member: int, store: UnitStore) -> dict[UnitId, UnitSpec]:
    """The units ``member`` vouches for in ``job``, with their specs, from its store.

    Parameters
    ----------
    job
        The epoch's public job.
    member
        The member's id (silo ``0..K-1``, or the central sender).
    store
        The member's store.

    Returns
    -------
    dict
        Unit id -> spec: the central sender's units of the job; in the decentralized setting,
        every spec the silo's store knows; nothing for a silo in the centralized setting.
    """
    if member == job.sender:
        held = set(store.units())
        return {u: store.spec(u) for u in job.units if u in held}
    if job.mode == "decentralized":
        return store.known_specs()
    return {}


def seal_share(
    mine: Mapping[UnitId, UnitSpec],
    *,
    job: ShuffleJob,
    member: int,
    key: bytes,
    entropy: Callable[[int], bytes],
) -> bytes:
    """Seal ``member``'s manifest share (the specs of the job's units in ``mine``).

    Parameters
    ----------
    mine
        What the member vouches for (:func:`vouched_units`); units not in the job are left out.
    job
        The epoch's public job (bound into the associated data).
    member
        The member's id (bound into the associated data).
    key
        The epoch's manifest key (32 bytes).
    entropy
        Source of the 12-byte nonce.

    Returns
    -------
    bytes
        ``nonce | ciphertext | tag``.

    Raises
    ------
    InputError
        ``entropy`` returned another number of bytes than asked for.
    """
    specs = [[u, mine[u].length, mine[u].sha256.hex()] for u in job.units if u in mine]
    nonce = entropy(_NONCE)
    if len(nonce) != _NONCE:
        raise InputError("the entropy source must return the bytes asked for")
    plain = json.dumps(specs, separators=(",", ":")).encode()
    return nonce + AESGCM(key).encrypt(nonce, plain, _aad(job, member))


def _open_one(aead: AESGCM, job: ShuffleJob, member: int, share: bytes) -> list[Any]:
    try:
        plain = aead.decrypt(share[:_NONCE], share[_NONCE:], _aad(job, member))
        specs = json.loads(plain)
        if not isinstance(specs, list):
            raise ValueError("not a list")
    except (InvalidTag, ValueError):
        raise RemoteProtocolError(
            "manifest share fails authentication or is malformed", sender=member
        ) from None
    return specs


def _item(item: Any, units: frozenset[UnitId], member: int) -> tuple[UnitId, int, str]:
    if not (isinstance(item, list) and len(item) == 3):
        raise RemoteProtocolError("malformed manifest share", sender=member)
    u, length, sha = item
    if (
        isinstance(length, bool)
        or not isinstance(length, int)
        or length < 0
        or not isinstance(sha, str)
        or len(sha) != 64
        or not _HEX.issuperset(sha)
    ):
        raise RemoteProtocolError("malformed manifest share", sender=member)
    if not isinstance(u, (str, int)) or isinstance(u, bool) or u not in units:
        raise RemoteProtocolError(f"manifest share names unit {u!r} not in the job", sender=member)
    return u, length, sha


def open_shares(
    shares: tuple[tuple[int, bytes], ...],
    *,
    job: ShuffleJob,
    members: tuple[int, ...],
    key: bytes,
) -> list[list[Any]]:
    """Open every member's manifest share and merge them into the epoch's manifest.

    Parameters
    ----------
    shares
        (member, sealed share) pairs, as the relay forwarded them.
    job
        The epoch's public job.
    members
        The roster's members (only they may send a share, once each).
    key
        The epoch's manifest key.

    Returns
    -------
    list
        ``[unit id, length, sha256 hex]`` for every unit of the job, in job order (a unit the
        epoch does not need and nobody vouched for gets length 0 and the hash of ``b""``).

    Raises
    ------
    RemoteProtocolError
        A share from outside the roster or twice, one that fails authentication or is
        malformed, one naming a unit not in the job, or two members that disagree on a unit.
    InputError
        Units the epoch needs (held now or assigned next) that nobody vouched for.
    """
    aead = AESGCM(key)
    units = frozenset(job.units)
    vouched: dict[UnitId, tuple[int, int, str]] = {}
    seen = set()
    for m, share in shares:
        if m not in members or m in seen:
            raise RemoteProtocolError(f"manifest share of member {m}: not in the roster or twice")
        seen.add(m)
        for item in _open_one(aead, job, m, share):
            u, length, sha = _item(item, units, m)
            prev = vouched.get(u)
            if prev is not None and prev[1:] != (length, sha):
                raise RemoteProtocolError(
                    f"members {prev[0]} and {m} disagree on unit {u!r} (length or SHA-256): "
                    "their stores hold different versions of it"
                )
            vouched[u] = (m, length, sha)
    needed = {
        u for u, now, nxt in zip(job.units, job.current, job.target, strict=True) if now or nxt
    }
    lost = sorted((u for u in needed if u not in vouched), key=repr)
    if lost:
        who = (
            "the central sender's store lacks them"
            if job.sender is not None
            else "no silo's store knows them"
        )
        raise InputError(
            f"units missing from every silo: {lost}: {who}, so nobody can vouch for their "
            "length and SHA-256; restore them to a store or change the assignment"
        )
    return [[u, *vouched[u][1:]] if u in vouched else [u, 0, _PLACEHOLDER.hex()] for u in job.units]
