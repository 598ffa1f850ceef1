"""The organisation's group key for one shuffle epoch, agreed through an untrusted relay.

Construction (the project's key agreement, :mod:`coded_fl.crypto`, used as in secure
aggregation):

1. Every member of the epoch (the K silos, plus the central sender in the centralized setting)
   makes a fresh X25519 :class:`~coded_fl.crypto.KeyPair` and sends its public key to the
   relay, optionally with a tag ``HMAC-SHA256(org_key, run, epoch, member, public key)``
   (:func:`key_tag`) when the organisation's members share an ``org_key`` out of band.
2. The relay hands every member the same :class:`Roster` (all public keys and tags).
   Each member checks it (:func:`check_roster`): its own key is there, every key is a valid
   X25519 point, every member belongs to the epoch, and, with an ``org_key``, every tag.
3. The *leader*, the lowest member of the roster, draws a fresh 32-byte group key from the OS
   CSPRNG and seals it for every other member under their pairwise key
   (:func:`~coded_fl.crypto.pairwise_key`: HKDF over the X25519 secret, bound to the run
   and the pair) with AES-256-GCM (:func:`~coded_fl.crypto.seal`), the associated data
   naming the run, the epoch, leader, recipient and :meth:`Roster.transcript`, a hash of the
   whole roster (:func:`make_group_key`). The relay forwards each box to its member, who opens
   it (:func:`open_group_key`).
4. Keys for the epoch's payloads are derived from the group key with HKDF, one per purpose and
   bound to run and epoch (:func:`derive_key`): the coded messages, the sealed unit manifest.

Who reads what: the relay sees public keys, tags, the boxes (ciphertext) and who is a member; it
never holds a private key, a pairwise key, the group key or anything derived from them. Every
member of the roster learns the group key. A member that was not in the roster (it did not
answer in time) learns nothing of this epoch. A key per epoch: a past or future epoch's
messages do not open under this epoch's keys (the next epoch with the same members may continue
this key one-way instead of agreeing a fresh one: :mod:`~coded_fl.shuffling.transport.keyreuse`).

Trust in the relay: without an ``org_key`` the relay is trusted to pass public keys unchanged
(honest but curious, the threat model of the secure aggregation in ``docs/protocol.md``): an
active relay that replaced a member's public key by its own would be sent the group key. With an
``org_key`` (a secret of the organisation, never sent) such a substitution fails the tag check at
every member, so even an active relay cannot obtain the group key; it can still drop or delay
messages (denial of service), which the deadlines and reports handle.

One group key per (epoch, roster): every box has a fresh random nonce
(:func:`~coded_fl.crypto.seal`), so sealing twice is safe, but a second call of
:func:`make_group_key` draws a second group key; the leader's caller keeps the boxes it made and
hands the same ones out again if asked twice, so every member opens the same key
(:class:`~coded_fl.shuffling.transport.member.ShuffleMember` does).

The roster, the organisation tags and the roster's checks (steps 1 and 2) are in
:mod:`~coded_fl.shuffling.transport.roster`; this module holds the leader's and the members' steps
and the derived keys, and re-exports the roster's names.

>>> import os
>>> from coded_fl.crypto import KeyPair
>>> kp = {m: KeyPair.generate() for m in (0, 1, 4)}
>>> roster = Roster.of("run-1", 3, {m: k.public_bytes for m, k in kp.items()})
>>> gk, boxes = make_group_key(kp[0], roster, me=0)
>>> sorted(boxes), open_group_key(kp[4], roster, me=4, box=boxes[4]) == gk
([1, 4], True)
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from coded_fl.crypto import KEY_BYTES, KeyPair, open_sealed, pairwise_key, seal
from coded_fl.errors import InputError, LocalProtocolError, RemoteProtocolError
from coded_fl.prg import fresh_seed
from coded_fl.shuffling.transport.roster import (
    Roster,
    RosterEntry,
    _check_epoch,
    check_roster,
    key_tag,
)

__all__ = [
    "GROUP_KEY_PURPOSE",
    "Roster",
    "RosterEntry",
    "check_roster",
    "derive_key",
    "key_tag",
    "make_group_key",
    "open_group_key",
]

GROUP_KEY_PURPOSE = b"codedfl-shuffle-group-key"
_KDF_INFO = b"codedfl-shuffle-v1/"


def _pair(keys: KeyPair, roster: Roster, me: int, peer: int) -> bytes:
    return pairwise_key(
        keys, roster.public_key(peer), run_id=roster.run_id.encode(), me=me, peer=peer
    )


def make_group_key(
    keys: KeyPair,
    roster: Roster,
    *,
    me: int,
    entropy: Callable[[int], bytes] = os.urandom,
) -> tuple[bytes, dict[int, bytes]]:
    """The leader's step: a fresh group key and one sealed box for every other member.

    Call it once per (epoch, roster) and keep the result: a second call draws another group
    key (module docstring). Each box is AES-256-GCM under the pairwise key of the leader and
    that member, its associated data naming run, epoch, leader, recipient and the roster's
    :meth:`~Roster.transcript`.

    Parameters
    ----------
    keys
        The leader's key pair for the epoch.
    roster
        The checked roster (:func:`check_roster`).
    me
        This member's id; must be ``roster.leader``.
    entropy
        Source of the group key's 32 bytes (the OS CSPRNG unless a test passes its own).

    Returns
    -------
    group_key : bytes
        The 32-byte group key.
    boxes : dict of int to bytes
        Member id -> its sealed box, for every member but the leader.

    Raises
    ------
    LocalProtocolError
        If ``me`` is not the roster's leader.
    InputError
        If ``entropy`` does not return 32 bytes, or a member's public key is not usable.
    """
    if me != roster.leader:
        raise LocalProtocolError(f"member {me} is not the leader of this roster ({roster.leader})")
    group_key = fresh_seed(entropy)
    purpose = GROUP_KEY_PURPOSE + roster.transcript()
    boxes = {
        m: seal(
            _pair(keys, roster, me, m),
            group_key,
            run_id=roster.run_id.encode(),
            round_=roster.epoch,
            sender=me,
            recipient=m,
            purpose=purpose,
        )
        for m in roster.members
        if m != me
    }
    return group_key, boxes


def open_group_key(keys: KeyPair, roster: Roster, *, me: int, box: bytes) -> bytes:
    """A member's step: open the leader's box (RemoteProtocolError naming the leader if it
    fails: altered, for another member, epoch or roster).

    Parameters
    ----------
    keys
        This member's key pair for the epoch.
    roster
        The checked roster (:func:`check_roster`); the same the leader sealed under.
    me
        This member's id (not the leader).
    box
        The box the leader sealed for this member.

    Returns
    -------
    bytes
        The 32-byte group key.

    Raises
    ------
    LocalProtocolError
        If ``me`` is the leader (it has no box).
    RemoteProtocolError
        Naming the leader, if the box fails authentication or holds no 32-byte key.
    InputError
        If the leader's public key is not usable.
    """
    leader = roster.leader
    if me == leader:
        raise LocalProtocolError("the leader made the group key; it has no box to open")
    key = open_sealed(
        _pair(keys, roster, me, leader),
        box,
        run_id=roster.run_id.encode(),
        round_=roster.epoch,
        sender=leader,
        recipient=me,
        purpose=GROUP_KEY_PURPOSE + roster.transcript(),
    )
    if len(key) != KEY_BYTES:
        raise RemoteProtocolError("group key box holds no 32-byte key", sender=leader)
    return key


def derive_key(group_key: bytes, label: str, *, run_id: str, epoch: int) -> bytes:
    """The 32-byte key for one purpose (``"messages"``, ``"manifest"``) of one epoch.

    HKDF-SHA256 of the group key, salted with the epoch and the run, the label in its info:
    keys of different purposes, runs or epochs are independent.

    Parameters
    ----------
    group_key
        The epoch's 32-byte group key.
    label
        The purpose: ``"messages"`` (the coded messages) or ``"manifest"`` (the manifest
        shares).
    run_id, epoch
        The run and epoch the key belongs to.

    Returns
    -------
    bytes
        The 32-byte key.

    Raises
    ------
    InputError
        If ``group_key`` is not 32 bytes or ``epoch`` is outside [0, 2**63).
    """
    if not isinstance(group_key, bytes) or len(group_key) != KEY_BYTES:
        raise InputError("the group key is 32 bytes")
    _check_epoch(epoch)
    run = run_id.encode()
    hkdf = HKDF(
        algorithm=hashes.SHA256(),
        length=KEY_BYTES,
        salt=struct.pack("<QI", epoch, len(run)) + run,
        info=_KDF_INFO + label.encode(),
    )
    return hkdf.derive(group_key)
