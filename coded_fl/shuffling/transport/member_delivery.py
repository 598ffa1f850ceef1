"""The member's plan and delivery: the coded messages it sends, the ones it decodes and commits."""

from __future__ import annotations

from coded_fl.errors import CodedFLError, LocalProtocolError, RemoteProtocolError
from coded_fl.shuffling.codec import SegmentBuffer
from coded_fl.shuffling.plan.planner import ShufflePlan, plan_shuffle
from coded_fl.shuffling.plan.units import UnitManifest, UnitSpec
from coded_fl.shuffling.storage.session import SenderSession, SiloSession
from coded_fl.shuffling.storage.silo import check_holdings, commit_delivery, load_silo
from coded_fl.shuffling.storage.store import UnitStore
from coded_fl.shuffling.transport.member_state import MemberCore, MemberStage
from coded_fl.shuffling.transport.shares import open_shares
from coded_fl.shuffling.transport.wire import (
    DeliverReply,
    DeliverRequest,
    PlanReply,
    PlanRequest,
    ShuffleJob,
)

__all__ = ["MemberDeliveryPhase"]


class MemberDeliveryPhase(MemberCore):
    """The PlanRequest and DeliverRequest handlers of
    :class:`~coded_fl.shuffling.transport.member.ShuffleMember`, on the state
    :class:`~coded_fl.shuffling.transport.member_state.MemberCore` declares.

    Attributes
    ----------
    plan_id : bytes or None
        The epoch's plan id, once planned.
    """

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
    def _on_plan(self, p: PlanRequest, store: UnitStore) -> PlanReply:
        """Merge the manifest, plan, and make this member's coded messages."""
        job = self._current_job()
        roster = self.roster
        if roster is None:  # pragma: no cover - the table makes this unreachable
            raise LocalProtocolError("no roster")
        if p.roster is not None and p.roster != roster:
            raise RemoteProtocolError(
                "a second, different roster for the same epoch (the relay equivocates)"
            )
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
