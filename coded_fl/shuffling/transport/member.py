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
    hello            hello*  keyed (leader)   keyed        .            .
    keyed            hello*  keyed (leader)   keyed        planned      .
    planned          hello*  .                .            planned      delivered (silos)
    delivered        hello*  .                .            .            delivered

    hello*: the same job keeps its stage (and its key pair); a new job starts over in "hello".
    A node the job does not list as a member gets an empty HelloReply; nothing changes.

What each handler does: Hello, a fresh X25519 key pair for the epoch; GroupKeyRequest (the
leader only), draw the group key and seal it for every other member; JoinRequest (the others),
open the group key; both answer with this member's sealed manifest share
(:mod:`~coded_fl.shuffling.transport.shares`); PlanRequest, open and merge every share, plan, make
this member's coded messages (the central sender all of them, a decentralized silo its own);
DeliverRequest (silos only), decode and verify what the relay forwarded, commit atomically
(:func:`~coded_fl.shuffling.storage.silo.commit_delivery`), report.

The stage's stored form (:meth:`ShuffleMember.to_bytes`) is its value (``"idle"``, ``"hello"``,
...), as before :class:`MemberStage` existed.

Length: about 340 lines of code (420 before shares and store checks moved out), the rest
docstrings. One machine: five handlers, the persistence of every field of its state, the entry
point and the table; what is not the machine's state is split out (manifest shares in
:mod:`~coded_fl.shuffling.transport.shares`, the store-side steps in
:mod:`~coded_fl.shuffling.storage.silo`), and
splitting the handlers would scatter one object's state over several modules.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from enum import Enum
from typing import Any

from coded_fl.crypto import KeyPair
from coded_fl.errors import CodedFLError, InputError, LocalProtocolError, RemoteProtocolError
from coded_fl.prg import fresh_seed
from coded_fl.shuffling.codec import SegmentBuffer
from coded_fl.shuffling.plan.planner import ShufflePlan, plan_shuffle
from coded_fl.shuffling.plan.units import UnitManifest, UnitSpec
from coded_fl.shuffling.storage.session import SenderSession, SiloSession
from coded_fl.shuffling.storage.silo import check_holdings, commit_delivery, load_silo
from coded_fl.shuffling.storage.store import UnitStore
from coded_fl.shuffling.transport.groupkey import (
    Roster,
    check_roster,
    derive_key,
    key_tag,
    make_group_key,
    open_group_key,
)
from coded_fl.shuffling.transport.shares import open_shares, seal_share, vouched_units
from coded_fl.shuffling.transport.wire import (
    DeliverReply,
    DeliverRequest,
    GroupKeyReply,
    GroupKeyRequest,
    Hello,
    HelloReply,
    JoinReply,
    JoinRequest,
    Packet,
    PlanReply,
    PlanRequest,
    ShuffleJob,
    decode,
    encode,
    roster_from_json,
    roster_to_json,
)

__all__ = ["MemberStage", "ShuffleMember"]

_STATE_VERSION = 1


class MemberStage(str, Enum):
    """Where a member is in its current epoch (the value is the stored form)."""

    IDLE = "idle"
    HELLO = "hello"
    KEYED = "keyed"
    PLANNED = "planned"
    DELIVERED = "delivered"


def _hex(b: bytes | None) -> str | None:
    return None if b is None else b.hex()


def _unhex(s: str | None) -> bytes | None:
    return None if s is None else bytes.fromhex(s)


class ShuffleMember:
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
        self._reset(None)

    def _reset(self, job: ShuffleJob | None) -> None:
        self.stage = MemberStage.IDLE
        self.job = job
        self._private: bytes | None = None
        self.roster: Roster | None = None
        self._group_key: bytes | None = None
        self._boxes: dict[int, bytes] | None = None
        self._share: bytes | None = None
        self._specs: list[list[Any]] | None = None
        self.plan_id: bytes | None = None
        self._delivered: DeliverReply | None = None

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
            if s.get("v") != _STATE_VERSION:
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
        except (KeyError, TypeError, ValueError, RemoteProtocolError) as exc:
            raise InputError(f"shuffle member state is damaged: {exc}") from None
        return m

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

    # ------------------------------------------------------------------ helpers
    def _current_job(self) -> ShuffleJob:
        if self.job is None:  # pragma: no cover - receive checks the envelope first
            raise LocalProtocolError("no job")
        return self.job

    def _is_silo(self, job: ShuffleJob) -> bool:
        return self.member < job.K

    def _keys(self) -> KeyPair:
        if self._private is None:  # pragma: no cover - the table makes this unreachable
            raise LocalProtocolError("no key pair for this epoch")
        return KeyPair.from_private_bytes(self._private)

    def _key(self, job: ShuffleJob, label: str) -> bytes:
        if self._group_key is None:  # pragma: no cover - the table makes this unreachable
            raise LocalProtocolError("no group key for this epoch")
        return derive_key(self._group_key, label, run_id=job.run_id, epoch=job.epoch)

    def _check_roster(self, job: ShuffleJob, roster: Roster | None) -> Roster:
        if roster is None:
            raise RemoteProtocolError("request carries no roster")
        check_roster(
            roster,
            run_id=job.run_id,
            epoch=job.epoch,
            me=self.member,
            my_public_key=self._keys().public_bytes,
            allowed=job.members,
            org_key=self._org_key,
        )
        if self.roster is not None and self.roster != roster:
            raise RemoteProtocolError(
                "a second, different roster for the same epoch (the relay equivocates)"
            )
        return roster

    def _make_share(self, job: ShuffleJob, store: UnitStore) -> bytes:
        """This member's sealed manifest share (made once per epoch)."""
        if self._share is not None:
            return self._share
        return seal_share(
            vouched_units(job, self.member, store),
            job=job,
            member=self.member,
            key=self._key(job, "manifest"),
            entropy=self._entropy,
        )

    def _plan(self, job: ShuffleJob) -> ShufflePlan:
        if self._specs is None:  # pragma: no cover - the table makes this unreachable
            raise LocalProtocolError("no manifest yet")
        manifest = UnitManifest(
            tuple(UnitSpec(u, int(n), bytes.fromhex(h)) for u, n, h in self._specs)
        )
        current, nxt = job.assignments()
        return plan_shuffle(
            manifest,
            current,
            nxt,
            K=job.K,
            t=job.t,
            mode=job.mode,
            coded=job.coded,
            storage=job.storage,
        )

    # ------------------------------------------------------------------ handlers (the table)
    def _on_hello(self, p: Hello, store: UnitStore) -> HelloReply:
        """A new job: a fresh key pair for its epoch (the same one if asked again)."""
        job = p.job
        if job is None:  # pragma: no cover - the envelope check refuses it
            raise RemoteProtocolError("Hello's digest does not match its job")
        if self.member not in job.members:
            return HelloReply(p.digest, self.member, b"", b"", store.epoch)
        if self._is_silo(job) and store.epoch is not None and job.epoch <= store.epoch:
            raise RemoteProtocolError(
                f"job epoch {job.epoch} is not after this silo's store epoch {store.epoch} "
                "(stale or replayed job)"
            )
        if self.job is None or self.job.digest() != p.digest or self.stage == MemberStage.IDLE:
            self._reset(job)
            self._private = fresh_seed(self._entropy)
            self.stage = MemberStage.HELLO
        pub = self._keys().public_bytes
        tag = b""
        if self._org_key is not None:
            tag = key_tag(
                self._org_key,
                run_id=job.run_id,
                epoch=job.epoch,
                member=self.member,
                public_key=pub,
            )
        held = None
        if self._is_silo(job):
            have = set(store.units())
            held = tuple(u for u in job.units if u in have)
        return HelloReply(p.digest, self.member, pub, tag, store.epoch, held)

    def _on_group_key(self, p: GroupKeyRequest, store: UnitStore) -> GroupKeyReply:
        """The leader draws the group key and seals it for every other member (once)."""
        job = self._current_job()
        roster = self._check_roster(job, p.roster)
        if roster.leader != self.member:
            raise RemoteProtocolError(
                f"member {self.member} is not the leader of this roster ({roster.leader} is)"
            )
        if self._boxes is None:
            self._group_key, self._boxes = make_group_key(
                self._keys(), roster, me=self.member, entropy=self._entropy
            )
            self.roster = roster
        share = self._make_share(job, store)
        self._share, self.stage = share, MemberStage.KEYED
        return GroupKeyReply(p.digest, self.member, tuple(sorted(self._boxes.items())), share)

    def _on_join(self, p: JoinRequest, store: UnitStore) -> JoinReply:
        """Open the group key the leader sealed for this member; answer with the share."""
        job = self._current_job()
        roster = self._check_roster(job, p.roster)
        if roster.leader == self.member:
            raise RemoteProtocolError("the leader is not sent a group key box")
        key = open_group_key(self._keys(), roster, me=self.member, box=p.box)
        if self._group_key is not None and key != self._group_key:
            raise RemoteProtocolError("a second, different group key for the same epoch")
        self._group_key, self.roster = key, roster
        share = self._make_share(job, store)
        self._share, self.stage = share, MemberStage.KEYED
        return JoinReply(p.digest, self.member, share)

    def _on_plan(self, p: PlanRequest, store: UnitStore) -> PlanReply:
        """Merge the manifest, plan, and make this member's coded messages."""
        job = self._current_job()
        roster = self.roster
        if roster is None:  # pragma: no cover - the table makes this unreachable
            raise LocalProtocolError("no roster")
        specs = open_shares(
            p.shares, job=job, members=roster.members, key=self._key(job, "manifest")
        )
        if self._specs is not None and specs != self._specs:
            raise RemoteProtocolError("a second, different set of manifest shares for this epoch")
        self._specs = specs
        plan = self._plan(job)
        msg_key = self._key(job, "messages")
        if self.member == job.sender:
            buf = SegmentBuffer.for_plan(plan)
            for n, u in enumerate(plan.manifest.ids):
                buf.put_unit(n, plan.layout.pad(store.read_unit(u)))
            msgs = SenderSession(
                plan, buf, epoch=job.epoch, group_key=msg_key, entropy=self._entropy
            ).messages()
        else:
            check_holdings(plan, self.member, store)
            msgs = []
            if job.mode == "decentralized":
                msgs = SiloSession(
                    plan,
                    self.member,
                    load_silo(plan, self.member, store),
                    epoch=job.epoch,
                    group_key=msg_key,
                    entropy=self._entropy,
                ).outgoing()
        self.plan_id, self.stage = plan.plan_id, MemberStage.PLANNED
        return PlanReply(p.digest, self.member, plan.plan_id, tuple(msgs))

    def _on_deliver(self, p: DeliverRequest, store: UnitStore) -> DeliverReply:
        """Decode and verify what the relay forwarded, commit atomically, report (once)."""
        job = self._current_job()
        if not self._is_silo(job):
            raise RemoteProtocolError("the central sender receives nothing")
        if self._delivered is not None:
            return self._delivered
        plan = self._plan(job)
        session = SiloSession(
            plan,
            self.member,
            load_silo(plan, self.member, store),
            epoch=job.epoch,
            group_key=self._key(job, "messages"),
            entropy=self._entropy,
        )
        refused = []
        for msg in p.messages:
            try:
                session.receive(msg)
            except CodedFLError as exc:  # the report names what is missing because of it
                refused.append(f"message {msg.index}: {exc}")
        report = session.finish()
        commit_delivery(plan, store, session.units(), report, epoch=job.epoch)
        reply = DeliverReply(p.digest, self.member, report, tuple(refused), store.epoch)
        self._delivered, self.stage = reply, MemberStage.DELIVERED
        return reply


_Handler = Callable[[ShuffleMember, Any, UnitStore], Packet]

#: The transition table: (stage, request type) -> handler; a pair not in it is refused.
_TRANSITIONS: dict[tuple[MemberStage, type[Packet]], _Handler] = {
    (MemberStage.IDLE, Hello): ShuffleMember._on_hello,
    (MemberStage.HELLO, Hello): ShuffleMember._on_hello,
    (MemberStage.HELLO, GroupKeyRequest): ShuffleMember._on_group_key,
    (MemberStage.HELLO, JoinRequest): ShuffleMember._on_join,
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
