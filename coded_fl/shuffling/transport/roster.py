"""The roster of one shuffle epoch: every member's public key as the relay hands it out
(:class:`Roster`), the organisation's tag that vouches for a key (:func:`key_tag`) and the checks
every member makes before it trusts a roster (:func:`check_roster`): steps 1 and 2 of the key
agreement in :mod:`~coded_fl.shuffling.transport.groupkey`."""

from __future__ import annotations

import hashlib
import hmac
import struct
from collections.abc import Collection, Mapping
from dataclasses import dataclass

from coded_fl.crypto import check_public_key
from coded_fl.errors import InputError, RemoteProtocolError

__all__ = ["Roster", "RosterEntry", "check_roster", "key_tag"]

_TAG_DOMAIN = b"codedfl-shuffle-key-tag-v1"
_ROSTER_DOMAIN = b"codedfl-shuffle-roster-v1"
_MAX_MEMBER = 2**32 - 1


def _check_epoch(epoch: int) -> None:
    if not isinstance(epoch, int) or not 0 <= epoch < 2**63:
        raise InputError(f"epoch must be an integer in [0, 2**63), got {epoch!r}")


@dataclass(frozen=True)
class RosterEntry:
    """One member's public key for the epoch (``tag``: its organisation tag, or empty)."""

    member: int
    public_key: bytes
    tag: bytes = b""

    def __repr__(self) -> str:
        return f"RosterEntry(member={self.member}, public={self.public_key.hex()[:16]}...)"


@dataclass(frozen=True)
class Roster:
    """The public keys of an epoch's members, sorted by member id (what the relay hands out)."""

    run_id: str
    epoch: int
    entries: tuple[RosterEntry, ...]

    def __post_init__(self) -> None:
        _check_epoch(self.epoch)
        members = [e.member for e in self.entries]
        if not members:
            raise InputError("a roster needs at least one member")
        if members != sorted(set(members)):
            raise InputError("roster members must be distinct and sorted")
        if not all(isinstance(m, int) and 0 <= m <= _MAX_MEMBER for m in members):
            raise InputError("member ids must be integers in [0, 2**32)")

    @classmethod
    def of(
        cls,
        run_id: str,
        epoch: int,
        keys: Mapping[int, bytes],
        tags: Mapping[int, bytes] | None = None,
    ) -> Roster:
        """A roster from member -> public key (and member -> tag).

        Parameters
        ----------
        run_id
            The run.
        epoch
            The shuffle epoch.
        keys
            Member -> its public key.
        tags
            Member -> its key-confirmation tag.

        Returns
        -------
        Roster
        """
        tags = tags or {}
        return cls(
            run_id,
            epoch,
            tuple(RosterEntry(m, bytes(keys[m]), bytes(tags.get(m, b""))) for m in sorted(keys)),
        )

    @property
    def members(self) -> tuple[int, ...]:
        """The member ids, increasing."""
        return tuple(e.member for e in self.entries)

    @property
    def leader(self) -> int:
        """The member that draws and distributes the group key: the lowest id."""
        return self.entries[0].member

    def public_key(self, member: int) -> bytes:
        """A member's public key for the epoch.

        Parameters
        ----------
        member
            The member's id.

        Returns
        -------
        bytes
            Its public key as the roster carries it (not checked here: :func:`check_roster`).

        Raises
        ------
        RemoteProtocolError
            If the member is not in the roster.
        """
        for e in self.entries:
            if e.member == member:
                return e.public_key
        raise RemoteProtocolError(f"member {member} is not in the roster")

    def transcript(self) -> bytes:
        """SHA-256 of everything in the roster: members that open the group key agree on it."""
        h = hashlib.sha256(_ROSTER_DOMAIN)
        run = self.run_id.encode()
        h.update(struct.pack("<QI", self.epoch, len(run)) + run)
        for e in self.entries:
            h.update(struct.pack("<III", e.member, len(e.public_key), len(e.tag)))
            h.update(e.public_key + e.tag)
        return h.digest()


def key_tag(org_key: bytes, *, run_id: str, epoch: int, member: int, public_key: bytes) -> bytes:
    """HMAC-SHA256 by which the organisation vouches for a member's public key of the epoch.

    Parameters
    ----------
    org_key
        The organisation's secret, shared with its members out of band (never sent).
    run_id
        The run.
    epoch
        The epoch.
    member
        The member whose key is vouched for (silo ``0..K-1``, or the sender, K).
    public_key
        The member's X25519 public key for the epoch.

    Returns
    -------
    bytes
        The 32-byte tag over run, epoch, member and key.

    Raises
    ------
    InputError
        If ``org_key`` is not bytes of at least 16 bytes, or ``epoch`` is outside [0, 2**63).
    """
    if not isinstance(org_key, bytes) or len(org_key) < 16:
        raise InputError("the organisation key must be at least 16 bytes")
    _check_epoch(epoch)
    run = run_id.encode()
    msg = _TAG_DOMAIN + struct.pack("<QII", epoch, member, len(run)) + run + public_key
    return hmac.new(org_key, msg, hashlib.sha256).digest()


def check_roster(
    roster: Roster,
    *,
    run_id: str,
    epoch: int,
    me: int,
    my_public_key: bytes,
    allowed: Collection[int],
    org_key: bytes | None = None,
) -> None:
    """Refuse a roster that is for another epoch, lacks this member's key, names a member
    outside ``allowed``, carries an invalid X25519 key, or (with ``org_key``) a bad tag.

    Parameters
    ----------
    roster
        The roster the relay handed out.
    run_id, epoch
        The run and epoch this member takes part in.
    me
        This member's id.
    my_public_key
        This member's own public key for the epoch; the roster must carry it unchanged.
    allowed
        The epoch's members (silos ``0..K-1``, and the sender K in the centralized setting).
    org_key
        The organisation key, if the members have one: every entry's tag is then checked.

    Raises
    ------
    RemoteProtocolError
        If the roster is for another run or epoch, names a member not in ``allowed``, or lacks
        or alters this member's key; naming the member (``sender``) if its key is not a valid
        X25519 point or its tag does not verify.
    """
    if roster.run_id != run_id or roster.epoch != epoch:
        raise RemoteProtocolError(
            f"roster is for run {roster.run_id!r} epoch {roster.epoch}, "
            f"expected run {run_id!r} epoch {epoch}"
        )
    stray = [m for m in roster.members if m not in allowed]
    if stray:
        raise RemoteProtocolError(f"roster names members {stray} that are not in this epoch")
    if me not in roster.members or roster.public_key(me) != my_public_key:
        raise RemoteProtocolError(f"roster does not carry member {me}'s own public key")
    for e in roster.entries:
        check_public_key(e.public_key, sender=e.member)
        if org_key is not None:
            want = key_tag(
                org_key, run_id=run_id, epoch=epoch, member=e.member, public_key=e.public_key
            )
            if not hmac.compare_digest(want, e.tag):
                raise RemoteProtocolError(
                    "public key is not vouched for by the organisation key (substituted on the "
                    "way, or the member has another organisation key)",
                    sender=e.member,
                )
