"""The relay machine's state: its stages, and the core every stage of it works on.

:class:`RelayCore` declares the attributes that
:class:`~coded_fl.shuffling.transport.coordinator.RelayCoordinator` sets in its constructor,
and holds the bookkeeping every stage shares (the stage check, a reply's envelope, failures,
the abort, the roster's members).
"""

from __future__ import annotations

from enum import Enum

from coded_fl.errors import LocalProtocolError, RemoteProtocolError
from coded_fl.shuffling.plan.planner import ShufflePlan
from coded_fl.shuffling.plan.units import UnitId
from coded_fl.shuffling.transport.groupkey import Roster
from coded_fl.shuffling.transport.routing import Traffic
from coded_fl.shuffling.transport.wire import DeliverReply, Packet, PlanReply, ShuffleJob

__all__ = ["RelayCore", "RelayStage"]


class RelayStage(str, Enum):
    """Where the relay is in its epoch (see the transition table of
    :mod:`~coded_fl.shuffling.transport.coordinator`)."""

    HELLO = "hello"
    KEY = "key"
    JOIN = "join"
    PLAN = "plan"
    DELIVER = "deliver"
    DONE = "done"


class RelayCore:
    """The state every stage of :class:`~coded_fl.shuffling.transport.coordinator.RelayCoordinator`
    works on (set in its constructor), and the bookkeeping the stages share.

    Attributes
    ----------
    job, stage, aborted, roster, routing, uncoded
        As :class:`~coded_fl.shuffling.transport.coordinator.RelayCoordinator` documents them.
    """

    job: ShuffleJob
    routing: ShufflePlan
    uncoded: ShufflePlan
    stage: RelayStage
    aborted: str
    _keys: dict[int, tuple[bytes, bytes]]
    _store_epoch: dict[int, int | None]
    _holdings: dict[int, tuple[UnitId, ...] | None]
    _node: dict[int, int]
    _errors: dict[int, str]
    _notes: list[str]
    roster: Roster | None
    _boxes: dict[int, bytes]
    _shares: dict[int, bytes]
    _plans: dict[int, PlanReply]
    _plan_id: bytes
    _traffic: Traffic
    _reports: dict[int, DeliverReply]
    _offers: dict[int, tuple[bytes, tuple[int, ...], bytes]]
    reuse_keys: bool
    keys_reused: bool

    # ------------------------------------------------------------------ bookkeeping
    def _expect(self, *stages: RelayStage) -> None:
        if self.stage not in stages:
            raise LocalProtocolError(
                f"relay is in stage {self.stage.value}, not {' or '.join(s.value for s in stages)}"
            )

    def _check(self, p: Packet, member: int) -> None:
        if p.digest != self.job.digest() or p.member != member:
            raise RemoteProtocolError(
                f"{type(p).__name__} is for another job or member ({p.member})", sender=member
            )

    def fail(self, member: int, reason: str) -> None:
        """Record that ``member`` errored or missed the deadline in the current stage.

        Parameters
        ----------
        member
            The member's id.
        reason
            What happened (the first reason recorded for a member is kept).
        """
        self._errors.setdefault(member, f"{self.stage.value}: {reason}")

    def note(self, text: str) -> None:
        """Record a problem no member can be named for (a node's failed hello).

        Parameters
        ----------
        text
            The problem, as it will appear in the result's ``errors``.
        """
        self._notes.append(text)

    def _abort(self, reason: str) -> bool:
        self.aborted, self.stage = reason, RelayStage.DONE
        return False

    def _ok(self, member: int) -> bool:
        return member not in self._errors

    @property
    def members(self) -> tuple[int, ...]:
        """Members in the roster (after the hello; empty before)."""
        return () if self.roster is None else self.roster.members

    def node_of(self, member: int) -> int:
        """The node a member answered the hello from.

        Parameters
        ----------
        member
            A member that answered the hello.

        Returns
        -------
        int
            Its node id.

        Raises
        ------
        KeyError
            The member did not answer the hello.
        """
        return self._node[member]
