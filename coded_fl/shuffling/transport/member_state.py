"""The member machine's state: its stages, and the core every handler of it works on.

:class:`MemberCore` declares the attributes that
:class:`~coded_fl.shuffling.transport.member.ShuffleMember` sets (its constructor,
:meth:`~coded_fl.shuffling.transport.member.ShuffleMember.from_bytes`, a new job's hello), with
the reset that sets them, and holds what the handlers share: the current job, whether this
member is a silo, its key pair, and the epoch's keys derived from the group key. The group key
kept for the next epoch (:class:`~coded_fl.shuffling.transport.keyreuse.KeyCarry`) outlives the
reset; the continuation offered at the hello is per epoch.
"""

from __future__ import annotations

from collections.abc import Callable
from enum import Enum
from typing import Any

from coded_fl.crypto import KeyPair
from coded_fl.errors import LocalProtocolError
from coded_fl.shuffling.transport.groupkey import Roster, derive_key
from coded_fl.shuffling.transport.keyreuse import KeyCarry
from coded_fl.shuffling.transport.wire import DeliverReply, ShuffleJob

__all__ = ["MemberCore", "MemberStage"]


class MemberStage(str, Enum):
    """Where a member is in its current epoch (the value is the stored form)."""

    IDLE = "idle"
    HELLO = "hello"
    KEYED = "keyed"
    PLANNED = "planned"
    DELIVERED = "delivered"


class MemberCore:
    """The state every handler of
    :class:`~coded_fl.shuffling.transport.member.ShuffleMember` works on, and the helpers they
    share.

    Attributes
    ----------
    member, stage, job, roster, plan_id
        As :class:`~coded_fl.shuffling.transport.member.ShuffleMember` documents them.
    """

    member: int
    _org_key: bytes | None
    _entropy: Callable[[int], bytes]
    stage: MemberStage
    job: ShuffleJob | None
    _private: bytes | None
    roster: Roster | None
    _group_key: bytes | None
    _boxes: dict[int, bytes] | None
    _share: bytes | None
    _specs: list[list[Any]] | None
    plan_id: bytes | None
    _delivered: DeliverReply | None
    _carry: KeyCarry | None
    _resume_key: bytes | None
    _resume_share: bytes | None
    _resume_members: tuple[int, ...] | None

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
        self._resume_key: bytes | None = None
        self._resume_share: bytes | None = None
        self._resume_members: tuple[int, ...] | None = None

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
