"""The relay's key stages: the leader seals the group key, the other members join."""

from __future__ import annotations

from coded_fl.errors import LocalProtocolError, RemoteProtocolError
from coded_fl.shuffling.transport.relay_core import RelayCore, RelayStage
from coded_fl.shuffling.transport.wire import GroupKeyReply, GroupKeyRequest, JoinReply, JoinRequest

__all__ = ["RelayKeysPhase"]


class RelayKeysPhase(RelayCore):
    """The group key and join stages of
    :class:`~coded_fl.shuffling.transport.coordinator.RelayCoordinator`: their methods, on the state
    :class:`~coded_fl.shuffling.transport.relay_core.RelayCore` declares.

    Attributes
    ----------
    leader : int
        The roster's leader, who seals the group key.
    """

    # ------------------------------------------------------------------ 2. group key
    @property
    def leader(self) -> int:
        """The roster's leader (its lowest member).

        Raises
        ------
        LocalProtocolError
            Before the roster is fixed.
        """
        if self.roster is None:
            raise LocalProtocolError("no roster yet")
        return self.roster.leader

    def key_request(self) -> GroupKeyRequest:
        """The request for the leader: the roster, for it to seal the group key.

        Returns
        -------
        GroupKeyRequest
            Addressed to :attr:`leader`.

        Raises
        ------
        LocalProtocolError
            Not in the key stage.
        """
        self._expect(RelayStage.KEY)
        return GroupKeyRequest(self.job.digest(), self.leader, self.roster)

    def _on_key_reply(self, member: int, p: GroupKeyReply) -> None:
        leader = self.leader
        if member != leader:
            raise RemoteProtocolError(f"sent a group key, but {leader} leads", sender=member)
        self._check(p, leader)
        want = {m for m in self.members if m != leader}
        boxes = dict(p.boxes)
        if set(boxes) != want or len(boxes) != len(p.boxes):
            raise RemoteProtocolError(
                f"group key boxes for {sorted(boxes)}, expected {sorted(want)}", sender=leader
            )
        self._boxes, self._shares[leader] = boxes, p.share

    def close_key(self) -> bool:
        """Close the key stage.

        Returns
        -------
        bool
            False (aborted) if the leader shared no group key.

        Raises
        ------
        LocalProtocolError
            Not in the key stage.
        """
        self._expect(RelayStage.KEY)
        if self.leader not in self._shares:
            self.fail(self.leader, "shared no group key")
            why = self._errors[self.leader]
            return self._abort(
                f"the leader (member {self.leader}) did not share the group key: {why}"
            )
        self.stage = RelayStage.JOIN
        return True

    # ------------------------------------------------------------------ 3. join
    def join_requests(self) -> list[tuple[int, JoinRequest]]:
        """(member, request) for every member but the leader, each with its sealed box.

        Raises
        ------
        LocalProtocolError
            Not in the join stage.
        """
        self._expect(RelayStage.JOIN)
        return [
            (m, JoinRequest(self.job.digest(), m, self.roster, self._boxes[m]))
            for m in self.members
            if m != self.leader
        ]

    def _on_join_reply(self, member: int, p: JoinReply) -> None:
        self._check(p, member)
        self._shares[member] = p.share

    def close_join(self) -> bool:
        """Close the join stage: members without a share have failed.

        Returns
        -------
        bool
            False (aborted) if the central sender did not join.

        Raises
        ------
        LocalProtocolError
            Not in the join stage.
        """
        self._expect(RelayStage.JOIN)
        for m in self.members:
            if m not in self._shares:
                self.fail(m, "did not join")
        sender = self.job.sender
        if sender is not None and sender not in self._shares:
            return self._abort(f"the central sender did not join: {self._errors.get(sender)}")
        self.stage = RelayStage.PLAN
        return True
