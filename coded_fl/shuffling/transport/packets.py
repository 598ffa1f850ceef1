"""The ten packet types of the shuffle transport, relay -> member requests and member -> relay
replies, each a frozen dataclass with its kind byte (their encoding:
:mod:`~coded_fl.shuffling.transport.wire`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from coded_fl.shuffling.plan.units import UnitId
from coded_fl.shuffling.storage.delivery import DeliveryReport
from coded_fl.shuffling.storage.sealing import ShuffleMessage
from coded_fl.shuffling.transport.job import ShuffleJob
from coded_fl.shuffling.transport.roster import Roster

__all__ = [
    "DeliverReply",
    "DeliverRequest",
    "GroupKeyReply",
    "GroupKeyRequest",
    "Hello",
    "HelloReply",
    "JoinReply",
    "JoinRequest",
    "Packet",
    "PlanReply",
    "PlanRequest",
]


@dataclass(frozen=True)
class Packet:
    """Common header: the job's digest and the member the packet is from (replies) or for
    (requests; -1: every node, the Hello)."""

    KIND: ClassVar[int] = 0
    digest: bytes
    member: int


@dataclass(frozen=True)
class Hello(Packet):
    """Relay -> every node: the job; asks for a fresh public key for the epoch."""

    KIND: ClassVar[int] = 1
    job: ShuffleJob | None = None


@dataclass(frozen=True)
class HelloReply(Packet):
    """Member -> relay: its public key for the epoch (empty: not a member of this job), the
    organisation tag (empty without an organisation key), its store's epoch, and (a silo) the
    units of the job its store holds in full: the relay checks the job's current assignment
    against them before anything else is done (a reply lost after a commit leaves the server's
    view of a store behind; public unit ids only, as in a delivery report).

    A member that kept the previous epoch's group key also offers to continue from it
    (:mod:`~coded_fl.shuffling.transport.keyreuse`): ``resume`` is the continuation id (empty:
    no offer), ``resume_members`` the member set the key is for, ``resume_share`` the member's
    manifest share sealed under the continued key."""

    KIND: ClassVar[int] = 2
    public_key: bytes = b""
    tag: bytes = b""
    store_epoch: int | None = None
    holdings: tuple[UnitId, ...] | None = None
    resume: bytes = b""
    resume_members: tuple[int, ...] = ()
    resume_share: bytes = field(default=b"", repr=False)


@dataclass(frozen=True)
class GroupKeyRequest(Packet):
    """Relay -> leader: the roster; asks for the group key's boxes."""

    KIND: ClassVar[int] = 3
    roster: Roster | None = None


@dataclass(frozen=True)
class GroupKeyReply(Packet):
    """Leader -> relay: the group key sealed for each other member, and the leader's share
    of the manifest (sealed under the epoch's manifest key)."""

    KIND: ClassVar[int] = 4
    boxes: tuple[tuple[int, bytes], ...] = field(default=(), repr=False)
    share: bytes = field(default=b"", repr=False)


@dataclass(frozen=True)
class JoinRequest(Packet):
    """Relay -> member: the roster and the member's sealed group key."""

    KIND: ClassVar[int] = 5
    roster: Roster | None = None
    box: bytes = field(default=b"", repr=False)


@dataclass(frozen=True)
class JoinReply(Packet):
    """Member -> relay: its sealed share of the manifest."""

    KIND: ClassVar[int] = 6
    share: bytes = field(default=b"", repr=False)


@dataclass(frozen=True)
class PlanRequest(Packet):
    """Relay -> member: every member's sealed manifest share, and the roster (which a member
    that continued the previous epoch's group key, skipping the key stages, checks here)."""

    KIND: ClassVar[int] = 7
    shares: tuple[tuple[int, bytes], ...] = field(default=(), repr=False)
    roster: Roster | None = None


@dataclass(frozen=True)
class PlanReply(Packet):
    """Member -> relay: the id of the plan it made, and its coded messages (sealed)."""

    KIND: ClassVar[int] = 8
    plan_id: bytes = b""
    messages: tuple[ShuffleMessage, ...] = field(default=(), repr=False)


@dataclass(frozen=True)
class DeliverRequest(Packet):
    """Relay -> silo: the messages the plan routes to it."""

    KIND: ClassVar[int] = 9
    messages: tuple[ShuffleMessage, ...] = field(default=(), repr=False)


@dataclass(frozen=True)
class DeliverReply(Packet):
    """Silo -> relay: what it received and committed (unit ids only), the messages it refused
    (and why), its store's epoch after the commit."""

    KIND: ClassVar[int] = 10
    report: DeliveryReport | None = None
    refused: tuple[str, ...] = ()
    store_epoch: int | None = None
