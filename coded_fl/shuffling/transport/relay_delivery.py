"""The relay's plan and delivery stages: plan-id agreement, forwarding, the silos' reports."""

from __future__ import annotations

from coded_fl.errors import RemoteProtocolError
from coded_fl.shuffling.plan.planner import CENTRAL
from coded_fl.shuffling.transport.relay_core import RelayCore, RelayStage
from coded_fl.shuffling.transport.routing import agreed_plan_id, forward
from coded_fl.shuffling.transport.wire import DeliverReply, DeliverRequest, PlanReply, PlanRequest

__all__ = ["RelayDeliveryPhase"]


class RelayDeliveryPhase(RelayCore):
    """The plan and deliver stages of
    :class:`~coded_fl.shuffling.transport.coordinator.RelayCoordinator`: their methods, on the state
    :class:`~coded_fl.shuffling.transport.relay_core.RelayCore` declares.

    Attributes
    ----------
    stage : RelayStage
        ``deliver`` after :meth:`close_plan` routed the messages, ``done`` after
        :meth:`close_deliver`.
    """

    # ------------------------------------------------------------------ 4. plan
    def plan_requests(self) -> list[tuple[int, PlanRequest]]:
        """(member, request) for every member with a share, each carrying every share and the
        roster (what a member that continues the previous epoch's key checks).

        Raises
        ------
        LocalProtocolError
            Not in the plan stage.
        """
        self._expect(RelayStage.PLAN)
        shares = tuple(sorted(self._shares.items()))
        digest = self.job.digest()
        return [(m, PlanRequest(digest, m, shares, self.roster)) for m in sorted(self._shares)]

    def _on_plan_reply(self, member: int, p: PlanReply) -> None:
        self._check(p, member)
        self._plans[member] = p

    def close_plan(self) -> bool:
        """Agree on the plan id and route every coded message.

        Returns
        -------
        bool
            False (aborted) if no member, or not the central sender, made a plan.

        Raises
        ------
        LocalProtocolError
            Not in the plan stage.
        """
        self._expect(RelayStage.PLAN)
        for m in self._shares:
            if m not in self._plans:
                self.fail(m, "made no plan")
        if not self._plans:
            first = min(self._errors.items(), default=(None, "no reply"))
            who = "" if first[0] is None else f"member {first[0]}: "
            return self._abort(f"no member made a plan ({who}{first[1]})")
        ids = {m: r.plan_id for m, r in self._plans.items()}
        sender = self.job.sender
        if sender is not None and sender not in ids:
            return self._abort(f"the central sender made no plan: {self._errors.get(sender)}")
        agreed = agreed_plan_id(ids, sender=sender)
        for m, i in ids.items():
            if i != agreed:
                self.fail(m, "made another plan than the others (different job or manifest)")
        self._plan_id = agreed
        self._traffic = forward(
            self.routing,
            [(m, self._plans[m].messages) for m in sorted(self._plans) if self._ok(m)],
            plan_id=agreed,
            epoch=self.job.epoch,
            sender=sender,
            silos=[k for k in self.members if k < self.job.K],
        )
        for s in self._traffic.silent:
            if s != CENTRAL:
                self.fail(s, "its coded messages never came")
        self.stage = RelayStage.DELIVER
        return True

    # ------------------------------------------------------------------ 5. deliver
    def deliver_requests(self) -> list[tuple[int, DeliverRequest]]:
        """One request per silo in the roster that has not failed: its messages.

        Raises
        ------
        LocalProtocolError
            Not in the deliver stage.
        """
        self._expect(RelayStage.DELIVER)
        return [
            (k, DeliverRequest(self.job.digest(), k, msgs))
            for k, msgs in sorted(self._traffic.inbox.items())
            if self._ok(k)
        ]

    def _on_deliver_reply(self, member: int, p: DeliverReply) -> None:
        self._check(p, member)
        if p.report is None or p.report.silo != member:
            raise RemoteProtocolError("delivery report is for another silo", sender=member)
        self._reports[member] = p

    def close_deliver(self) -> None:
        """Close the epoch: every silo without a report has failed.

        Raises
        ------
        LocalProtocolError
            Not in the deliver stage.
        """
        self._expect(RelayStage.DELIVER)
        for k in self._traffic.inbox:
            if k not in self._reports:
                self.fail(k, "sent no delivery report")
        self.stage = RelayStage.DONE
