"""A member's side of the shuffle transport: one silo (or the central sender) across epochs.

Theory of operation
-------------------
Sans-IO, as h11: :meth:`ShuffleMember.receive` is the one entry point. It takes a request
packet (:mod:`~coded_fl.shuffling.transport.wire`) and the member's
:class:`~coded_fl.shuffling.storage.store.UnitStore`, and returns the reply packet; no socket, no
Flower. The ClientApp handler (:mod:`clients.shuffle`) decodes the request, calls ``receive``,
encodes the reply, and keeps :meth:`ShuffleMember.to_bytes` (keys included) in
``context.state``; the state never leaves the member.

Rules:

1. A request is checked in this order: it is a request at all (a member accepts no reply); its
   envelope (a Hello's digest is its job's; any other request is for the job this member said
   hello to and addressed to this member); the pair (stage, request type) is in the transition
   table below. Anything else raises :class:`~coded_fl.errors.RemoteProtocolError`: the relay
   sent something stale, replayed, misaddressed or out of order.
2. A refused request changes nothing. The handlers check before they act, and ``receive``
   puts the state back if a handler still raises (handlers replace attributes, never mutate
   them in place), so a driver may keep the machine after an error.
3. Within an epoch the same request twice gets the same answer: the leader's boxes are kept,
   never sealed twice; a delivery is never committed twice. A Hello for a new job starts over
   with fresh keys.

Transition table, (stage, request) -> stage after the reply (``.``: refused)::

    stage \\ request  Hello   GroupKeyRequest  JoinRequest  PlanRequest  DeliverRequest
    idle             hello   .                .            .            .
    hello            hello*  keyed (leader)   keyed        planned**    .
    keyed            hello*  keyed (leader)   keyed        planned      .
    planned          hello*  .                .            planned      delivered (silos)
    delivered        hello*  .                .            .            delivered

    hello*: the same job keeps its stage (and its key pair); a new job starts over in "hello".
    planned**: the relay skipped the key stages; the member continues the previous epoch's
    group key if it offered to at the hello and the roster has the same members, else refused.
    A node the job does not list as a member gets an empty HelloReply; nothing changes.

What each handler does: Hello, a fresh X25519 key pair for the epoch, and an offer to continue
the previous epoch's group key (:mod:`~coded_fl.shuffling.transport.keyreuse`); GroupKeyRequest (the
leader only), draw the group key and seal it for every other member; JoinRequest (the others),
open the group key; both answer with this member's sealed manifest share
(:mod:`~coded_fl.shuffling.transport.shares`); PlanRequest, open and merge every share, plan, make
this member's coded messages (the central sender all of them, a decentralized silo its own);
DeliverRequest (silos only), decode and verify what the relay forwarded, commit atomically
(:func:`~coded_fl.shuffling.storage.silo.commit_delivery`), report.

The stage's stored form (:meth:`ShuffleMember.to_bytes`) is its value (``"idle"``, ``"hello"``,
...), as before :class:`MemberStage` existed.

The handlers are split by phase over the shared state of
:class:`~coded_fl.shuffling.transport.member_state.MemberCore`: the key agreement (Hello,
GroupKeyRequest, JoinRequest: :mod:`~coded_fl.shuffling.transport.member_keys`) and the plan
and delivery (PlanRequest, DeliverRequest: :mod:`~coded_fl.shuffling.transport.member_delivery`);
this module puts them together with the constructor, the persistence, the entry point and the
table.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any

from coded_fl.errors import InputError, RemoteProtocolError
from coded_fl.shuffling.storage.store import UnitStore
from coded_fl.shuffling.transport.keyreuse import KeyCarry
from coded_fl.shuffling.transport.member_delivery import MemberDeliveryPhase
from coded_fl.shuffling.transport.member_keys import MemberKeysPhase
from coded_fl.shuffling.transport.member_state import MemberStage
from coded_fl.shuffling.transport.wire import (
    DeliverReply,
    DeliverRequest,
    GroupKeyRequest,
    Hello,
    JoinRequest,
    Packet,
    PlanRequest,
    ShuffleJob,
    decode,
    encode,
    roster_from_json,
    roster_to_json,
)

__all__ = ["MemberStage", "ShuffleMember"]

_STATE_VERSION = 2  # 2: the carried group key and the pending continuation


def _hex(b: bytes | None) -> str | None:
    return None if b is None else b.hex()


def _unhex(s: str | None) -> bytes | None:
    return None if s is None else bytes.fromhex(s)


class ShuffleMember(MemberKeysPhase, MemberDeliveryPhase):
    """One member of the shuffle transport: its state machine across epochs.

    Parameters
    ----------
    member
        Silo index ``0..K-1``, or ``K`` for the central sender.
    org_key
        The organisation's key that vouches for public keys (optional; never stored).
    entropy
        Source of key pairs, the group key and nonces.

    Raises
    ------
    InputError
        ``member`` is not an integer >= 0.

    Attributes
    ----------
    stage : MemberStage
        Where the member is in the current epoch (see the module's transition table).
    job : ShuffleJob or None
        The job of the last Hello this member answered as a member.
    roster : Roster or None
        The epoch's roster, once the group key is known.
    plan_id : bytes or None
        The epoch's plan id, once planned.
    """

    def __init__(
        self,
        member: int,
        *,
        org_key: bytes | None = None,
        entropy: Callable[[int], bytes] = os.urandom,
    ) -> None:
        if isinstance(member, bool) or not isinstance(member, int) or member < 0:
            raise InputError(f"member id must be an integer >= 0, got {member!r}")
        self.member = member
        self._org_key = org_key
        self._entropy = entropy
        self._carry = None
        self._reset(None)

    @property
    def org_key(self) -> bytes | None:
        """The organisation key given at construction (not part of :meth:`to_bytes`)."""
        return self._org_key

    def __repr__(self) -> str:  # no key material
        epoch = None if self.job is None else self.job.epoch
        return f"ShuffleMember(member={self.member}, epoch={epoch}, stage={self.stage.value})"

    # ------------------------------------------------------------------ persistence
    def to_bytes(self) -> bytes:
        """The whole state, keys included (keep it on the member, e.g. in ``context.state``).

        Returns
        -------
        bytes
            JSON; :meth:`from_bytes` reads it back.
        """
        state = {
            "v": _STATE_VERSION,
            "member": self.member,
            "stage": self.stage.value,
            "job": None if self.job is None else self.job.to_json(),
            "private": _hex(self._private),
            "roster": None if self.roster is None else roster_to_json(self.roster),
            "group_key": _hex(self._group_key),
            "boxes": None
            if self._boxes is None
            else [[m, b.hex()] for m, b in self._boxes.items()],
            "share": _hex(self._share),
            "specs": self._specs,
            "plan_id": _hex(self.plan_id),
            "delivered": None if self._delivered is None else encode(self._delivered).hex(),
            "carry": None if self._carry is None else self._carry.to_json(),
            "resume_key": _hex(self._resume_key),
            "resume_share": _hex(self._resume_share),
            "resume_members": None if self._resume_members is None else list(self._resume_members),
        }
        return json.dumps(state, separators=(",", ":")).encode()

    @classmethod
    def from_bytes(
        cls,
        raw: bytes,
        *,
        org_key: bytes | None = None,
        entropy: Callable[[int], bytes] = os.urandom,
    ) -> ShuffleMember:
        """The member a :meth:`to_bytes` state describes.

        Parameters
        ----------
        raw
            What :meth:`to_bytes` returned.
        org_key, entropy
            As for the constructor (neither is stored).

        Returns
        -------
        ShuffleMember
            The member, in the stage it was saved in.

        Raises
        ------
        InputError
            The state is damaged or of another version.
        """
        try:
            s = json.loads(raw)
            if s.get("v") not in (1, _STATE_VERSION):  # 1: before keys were carried
                raise InputError("shuffle member state has another version")
            m = cls(int(s["member"]), org_key=org_key, entropy=entropy)
            m._reset(None if s["job"] is None else ShuffleJob.from_json(s["job"]))
            m.stage = MemberStage(s["stage"])
            m._private = _unhex(s["private"])
            m.roster = None if s["roster"] is None else roster_from_json(s["roster"])
            m._group_key = _unhex(s["group_key"])
            m._boxes = (
                None if s["boxes"] is None else {int(k): bytes.fromhex(b) for k, b in s["boxes"]}
            )
            m._share = _unhex(s["share"])
            m._specs = s["specs"]
            m.plan_id = _unhex(s["plan_id"])
            if s["delivered"] is not None:
                reply = decode(bytes.fromhex(s["delivered"]))
                if not isinstance(reply, DeliverReply):
                    raise InputError("stored delivery reply is not a DeliverReply")
                m._delivered = reply
            if s.get("carry") is not None:
                m._carry = KeyCarry.from_json(s["carry"])
            m._resume_key = _unhex(s.get("resume_key"))
            m._resume_share = _unhex(s.get("resume_share"))
            members = s.get("resume_members")
            m._resume_members = None if members is None else tuple(int(x) for x in members)
        except (KeyError, TypeError, ValueError, RemoteProtocolError) as exc:
            raise InputError(f"shuffle member state is damaged: {exc}") from None
        return m

    def _on_plan_continued(self, p: PlanRequest, store: UnitStore) -> Packet:
        """A PlanRequest right after the hello: continue the previous epoch's group key
        (refused unless this member offered one for the roster's members), then plan."""
        self._continue_key(p)
        return self._on_plan(p, store)

    # ------------------------------------------------------------------ the entry point
    def receive(self, packet: Packet, store: UnitStore) -> Packet:
        """Answer one request from the relay.

        Parameters
        ----------
        packet
            A request: ``Hello``, ``GroupKeyRequest``, ``JoinRequest``, ``PlanRequest`` or
            ``DeliverRequest``.
        store
            This member's unit store (read for shares and side information, committed to by a
            delivery).

        Returns
        -------
        Packet
            The reply (``HelloReply``, ``GroupKeyReply``, ...).

        Raises
        ------
        RemoteProtocolError
            The request is refused: not a request, another job or member, not allowed in this
            stage (see the transition table), or its content fails a check.
        InputError
            This member cannot take part (its store lacks units it should hold, units nobody
            vouches for).

        Notes
        -----
        On any error the state is as it was before the call.
        """
        kind = type(packet)
        if kind not in _REQUESTS:
            raise RemoteProtocolError(f"a member does not accept {kind.__name__}")
        self._check_envelope(packet)
        handler = _TRANSITIONS.get((self.stage, kind))
        if handler is None:
            allowed = ", ".join(s.value for s in MemberStage if (s, kind) in _TRANSITIONS)
            raise RemoteProtocolError(
                f"{kind.__name__} arrived in stage {self.stage.value} (expected in {allowed})"
            )
        saved = dict(vars(self))
        try:
            return handler(self, packet, store)
        except BaseException:
            vars(self).update(saved)
            raise

    def _check_envelope(self, packet: Packet) -> None:
        if isinstance(packet, Hello):
            if packet.job is None or packet.digest != packet.job.digest():
                raise RemoteProtocolError("Hello's digest does not match its job")
            return
        job = self.job
        if job is None or packet.digest != job.digest():
            raise RemoteProtocolError(
                f"{type(packet).__name__} is for another shuffle job than the one this member "
                "said hello to (stale, replayed or out of order)"
            )
        if packet.member != self.member:
            raise RemoteProtocolError(
                f"{type(packet).__name__} is addressed to member {packet.member}, "
                f"this is member {self.member}"
            )


_Handler = Callable[[ShuffleMember, Any, UnitStore], Packet]

#: The transition table: (stage, request type) -> handler; a pair not in it is refused.
_TRANSITIONS: dict[tuple[MemberStage, type[Packet]], _Handler] = {
    (MemberStage.IDLE, Hello): ShuffleMember._on_hello,
    (MemberStage.HELLO, Hello): ShuffleMember._on_hello,
    (MemberStage.HELLO, GroupKeyRequest): ShuffleMember._on_group_key,
    (MemberStage.HELLO, JoinRequest): ShuffleMember._on_join,
    (MemberStage.HELLO, PlanRequest): ShuffleMember._on_plan_continued,
    (MemberStage.KEYED, Hello): ShuffleMember._on_hello,
    (MemberStage.KEYED, GroupKeyRequest): ShuffleMember._on_group_key,
    (MemberStage.KEYED, JoinRequest): ShuffleMember._on_join,
    (MemberStage.KEYED, PlanRequest): ShuffleMember._on_plan,
    (MemberStage.PLANNED, Hello): ShuffleMember._on_hello,
    (MemberStage.PLANNED, PlanRequest): ShuffleMember._on_plan,
    (MemberStage.PLANNED, DeliverRequest): ShuffleMember._on_deliver,
    (MemberStage.DELIVERED, Hello): ShuffleMember._on_hello,
    (MemberStage.DELIVERED, DeliverRequest): ShuffleMember._on_deliver,
}
_REQUESTS = frozenset(kind for _, kind in _TRANSITIONS)
