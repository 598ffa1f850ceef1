"""A member's side of the shuffle transport: one silo (or the central sender) across epochs.

Sans-IO: :meth:`ShuffleMember.handle` takes a request packet (:mod:`~coded_fl.shuffling.wire`)
and the member's :class:`~coded_fl.shuffling.store.UnitStore`, and returns the reply packet.
The state (keys included) round-trips through :meth:`ShuffleMember.to_bytes` /
:meth:`ShuffleMember.from_bytes`, so a Flower ClientApp keeps it in ``context.state``; it never
leaves the member.

Stages of one epoch (anything else raises and changes nothing)::

    Hello            -> fresh X25519 key pair              stage "hello"
    GroupKeyRequest  -> (leader) draw the group key, seal  stage "keyed"
    JoinRequest      -> (others) open the group key        stage "keyed"
    PlanRequest      -> open every manifest share, plan,   stage "planned"
                        make this member's coded messages
    DeliverRequest   -> (silos) decode, verify, commit     stage "delivered"

A Hello for a new job starts over (fresh keys); the same request twice gets the same answer
(the leader's boxes are kept, never sealed twice; a delivery is never committed twice).

Manifest shares: with the group key every member seals, under the epoch's manifest key, the
length and SHA-256 of the units it vouches for: in the centralized setting the sender vouches for
every unit (silos for none), in the decentralized setting each silo for every unit its store
knows (held, or recorded by an earlier placement or shuffle).
Members merge the shares; two members that disagree on a unit, or a unit nobody vouches for,
stop the epoch with an error naming them. The relay never sees a hash or a length of a unit.
"""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Callable
from typing import Any

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from coded_fl.errors import CodedFLError, InputError, LocalProtocolError, RemoteProtocolError
from coded_fl.prg import fresh_seed
from coded_fl.secagg.keys import KeyPair
from coded_fl.shuffling.codec import SegmentBuffer
from coded_fl.shuffling.groupkey import (
    Roster,
    check_roster,
    derive_key,
    key_tag,
    make_group_key,
    open_group_key,
)
from coded_fl.shuffling.harness import commit_delivery, load_silo
from coded_fl.shuffling.planner import ShufflePlan, plan_shuffle
from coded_fl.shuffling.session import SenderSession, SiloSession
from coded_fl.shuffling.store import UnitStore
from coded_fl.shuffling.units import UnitId, UnitManifest, UnitSpec, digest
from coded_fl.shuffling.wire import (
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

__all__ = ["ShuffleMember"]

_SHARE_DOMAIN = b"codedfl-shuffle-manifest-share-v1"
_STATE_VERSION = 1
_NONCE = 12
_PLACEHOLDER = digest(b"")


def _hex(b: bytes | None) -> str | None:
    return None if b is None else b.hex()


def _unhex(s: str | None) -> bytes | None:
    return None if s is None else bytes.fromhex(s)


class ShuffleMember:
    """One member of the shuffle transport. ``member``: silo index 0..K-1, or K for the central
    sender; ``org_key``: the organisation's key that vouches for public keys (optional)."""

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
        self.stage = "idle"
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
        return f"ShuffleMember(member={self.member}, epoch={epoch}, stage={self.stage})"

    # ------------------------------------------------------------------ persistence
    def to_bytes(self) -> bytes:
        """The whole state, keys included (keep it on the member, e.g. in ``context.state``)."""
        state = {
            "v": _STATE_VERSION,
            "member": self.member,
            "stage": self.stage,
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
        """The member a :meth:`to_bytes` state describes (InputError if it is damaged)."""
        try:
            s = json.loads(raw)
            if s.get("v") != _STATE_VERSION:
                raise InputError("shuffle member state has another version")
            m = cls(int(s["member"]), org_key=org_key, entropy=entropy)
            m._reset(None if s["job"] is None else ShuffleJob.from_json(s["job"]))
            m.stage = str(s["stage"])
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

    # ------------------------------------------------------------------ dispatch
    def handle(self, packet: Packet, store: UnitStore) -> Packet:
        """Answer one request (RemoteProtocolError/InputError if refused; state unchanged)."""
        if isinstance(packet, Hello):
            return self.on_hello(packet, store)
        if isinstance(packet, GroupKeyRequest):
            return self.on_group_key(packet, store)
        if isinstance(packet, JoinRequest):
            return self.on_join(packet, store)
        if isinstance(packet, PlanRequest):
            return self.on_plan(packet, store)
        if isinstance(packet, DeliverRequest):
            return self.on_deliver(packet, store)
        raise RemoteProtocolError(f"a member does not accept {type(packet).__name__}")

    # ------------------------------------------------------------------ helpers
    def _job(self, packet: Packet, *stages: str) -> ShuffleJob:
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
        if self.stage not in stages:
            raise RemoteProtocolError(
                f"{type(packet).__name__} arrived in stage {self.stage} "
                f"(expected in {', '.join(stages)})"
            )
        return job

    def _is_silo(self, job: ShuffleJob) -> bool:
        return self.member < job.K

    def _keys(self) -> KeyPair:
        if self._private is None:  # pragma: no cover - stage checks make this unreachable
            raise LocalProtocolError("no key pair for this epoch")
        return KeyPair.from_private_bytes(self._private)

    def _key(self, job: ShuffleJob, label: str) -> bytes:
        if self._group_key is None:  # pragma: no cover - stage checks make this unreachable
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

    @staticmethod
    def _share_aad(job: ShuffleJob, member: int) -> bytes:
        return _SHARE_DOMAIN + job.digest() + struct.pack("<I", member)

    def _make_share(self, job: ShuffleJob, store: UnitStore) -> bytes:
        """This member's sealed manifest share (made once per epoch)."""
        if self._share is not None:
            return self._share
        if self.member == job.sender:
            held = set(store.units())
            mine = {u: store.spec(u) for u in job.units if u in held}
        elif job.mode == "decentralized":
            mine = store.known_specs()
        else:
            mine = {}
        specs = [[u, mine[u].length, mine[u].sha256.hex()] for u in job.units if u in mine]
        nonce = self._entropy(_NONCE)
        if len(nonce) != _NONCE:
            raise InputError("the entropy source must return the bytes asked for")
        plain = json.dumps(specs, separators=(",", ":")).encode()
        aead = AESGCM(self._key(job, "manifest"))
        return nonce + aead.encrypt(nonce, plain, self._share_aad(job, self.member))

    def _open_shares(
        self, job: ShuffleJob, shares: tuple[tuple[int, bytes], ...]
    ) -> list[list[Any]]:
        roster = self.roster
        if roster is None:  # pragma: no cover - stage checks make this unreachable
            raise LocalProtocolError("no roster")
        aead = AESGCM(self._key(job, "manifest"))
        vouched: dict[UnitId, tuple[int, int, str]] = {}
        seen = set()
        for m, share in shares:
            if m not in roster.members or m in seen:
                raise RemoteProtocolError(
                    f"manifest share of member {m}: not in the roster or twice"
                )
            seen.add(m)
            try:
                plain = aead.decrypt(share[:_NONCE], share[_NONCE:], self._share_aad(job, m))
                specs = json.loads(plain)
                if not isinstance(specs, list):
                    raise ValueError("not a list")
            except (InvalidTag, ValueError):
                raise RemoteProtocolError(
                    "manifest share fails authentication or is malformed", sender=m
                ) from None
            for item in specs:
                if not (isinstance(item, list) and len(item) == 3):
                    raise RemoteProtocolError("malformed manifest share", sender=m)
                u, length, sha = item
                if (
                    isinstance(length, bool)
                    or not isinstance(length, int)
                    or length < 0
                    or not isinstance(sha, str)
                    or len(sha) != 64
                    or any(c not in "0123456789abcdef" for c in sha)
                ):
                    raise RemoteProtocolError("malformed manifest share", sender=m)
                if u not in job.units:
                    raise RemoteProtocolError(
                        f"manifest share names unit {u!r} not in the job", sender=m
                    )
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
        return [
            [u, *vouched[u][1:]] if u in vouched else [u, 0, _PLACEHOLDER.hex()] for u in job.units
        ]

    def _plan(self, job: ShuffleJob) -> ShufflePlan:
        if self._specs is None:  # pragma: no cover - stage checks make this unreachable
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

    def _check_holdings(self, plan: ShufflePlan, store: UnitStore) -> None:
        held = set(store.units())
        lacking = [
            plan.manifest.ids[n]
            for n in range(len(plan.manifest))
            if self.member in plan.holders[n]
            and (
                plan.manifest.ids[n] not in held
                or store.spec(plan.manifest.ids[n]) != plan.manifest.specs[n]
            )
        ]
        if lacking:
            raise InputError(
                f"silo {self.member}'s store lacks units {lacking} (or holds other versions) that "
                "the current assignment gives it: it cannot take part in this epoch"
            )

    # ------------------------------------------------------------------ stages
    def on_hello(self, p: Hello, store: UnitStore) -> HelloReply:
        """A new job: a fresh key pair for its epoch (the same one if asked again)."""
        job = p.job
        if job is None or p.digest != job.digest():
            raise RemoteProtocolError("Hello's digest does not match its job")
        if self.member not in job.members:
            return HelloReply(p.digest, self.member, b"", b"", store.epoch)
        if self._is_silo(job) and store.epoch is not None and job.epoch <= store.epoch:
            raise RemoteProtocolError(
                f"job epoch {job.epoch} is not after this silo's store epoch {store.epoch} "
                "(stale or replayed job)"
            )
        if self.job is None or self.job.digest() != p.digest or self.stage == "idle":
            self._reset(job)
            self._private = fresh_seed(self._entropy)
            self.stage = "hello"
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
        return HelloReply(p.digest, self.member, pub, tag, store.epoch)

    def on_group_key(self, p: GroupKeyRequest, store: UnitStore) -> GroupKeyReply:
        """The leader draws the group key and seals it for every other member (once)."""
        job = self._job(p, "hello", "keyed")
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
        self._share, self.stage = share, "keyed"
        return GroupKeyReply(p.digest, self.member, tuple(sorted(self._boxes.items())), share)

    def on_join(self, p: JoinRequest, store: UnitStore) -> JoinReply:
        """Open the group key the leader sealed for this member; answer with the share."""
        job = self._job(p, "hello", "keyed")
        roster = self._check_roster(job, p.roster)
        if roster.leader == self.member:
            raise RemoteProtocolError("the leader is not sent a group key box")
        key = open_group_key(self._keys(), roster, me=self.member, box=p.box)
        if self._group_key is not None and key != self._group_key:
            raise RemoteProtocolError("a second, different group key for the same epoch")
        self._group_key, self.roster = key, roster
        share = self._make_share(job, store)
        self._share, self.stage = share, "keyed"
        return JoinReply(p.digest, self.member, share)

    def on_plan(self, p: PlanRequest, store: UnitStore) -> PlanReply:
        """Merge the manifest, plan, and make this member's coded messages."""
        job = self._job(p, "keyed", "planned")
        specs = self._open_shares(job, p.shares)
        if self._specs is not None and specs != self._specs:
            raise RemoteProtocolError("a second, different set of manifest shares for this epoch")
        self._specs = specs
        try:
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
                self._check_holdings(plan, store)
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
        except CodedFLError:
            self._specs = None
            raise
        self.plan_id, self.stage = plan.plan_id, "planned"
        return PlanReply(p.digest, self.member, plan.plan_id, tuple(msgs))

    def on_deliver(self, p: DeliverRequest, store: UnitStore) -> DeliverReply:
        """Decode and verify what the relay forwarded, commit atomically, report (once)."""
        job = self._job(p, "planned", "delivered")
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
        self._delivered, self.stage = reply, "delivered"
        return reply
