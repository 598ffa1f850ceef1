"""The relay's side of the shuffle transport (sans-IO): who is in, what to forward, what happened.

Theory of operation
-------------------
A :class:`RelayCoordinator` drives one epoch through the five stages of
:mod:`~coded_fl.shuffling.transport.wire`; no socket, no Flower. The transport (the Flower server,
:mod:`strategies.shuffle`, or :func:`~coded_fl.shuffling.transport.loopback.run_loopback`) sends the
requests it returns, hands every reply to :meth:`RelayCoordinator.receive`, tells it about
members that errored or missed a deadline (:meth:`RelayCoordinator.fail`), and calls the
stage's ``close_*`` at the deadline. :meth:`RelayCoordinator.finish` says what happened
(:class:`~coded_fl.shuffling.transport.results.ShuffleResult`), at any point.
:meth:`RelayCoordinator.steps` lists the stages after the hello for a driver's loop.

Rules:

1. :meth:`~RelayCoordinator.receive` is the one entry point for what members send. The pair
   (stage, packet type) must be in the table below, else
   :class:`~coded_fl.errors.RemoteProtocolError` (the member sent something late, early or of
   the wrong kind; ``sender`` names it); the handler then checks the reply's job and member
   before it records anything. A refused reply changes nothing.
2. The driver's own calls (the requests, the ``close_*``) are allowed in one stage each;
   out of order they raise :class:`~coded_fl.errors.LocalProtocolError` (a bug in the driver)
   and change nothing. ``fail``, ``note``, ``finish`` and the read-only properties work in
   every stage.
3. ``close_*`` moves to the next stage, or to ``done`` and returns False when nothing useful
   can follow (the epoch is aborted; no store changed).

Transition table (``done``: aborted, when nothing useful can follow)::

    stage    receive(source, ...)       driver calls                          close -> stage
    hello    HelloReply (source: node)  hello(), close_hello()                key, or done
    key      GroupKeyReply (leader)     key_request(), close_key()            join, or done
    join     JoinReply                  join_requests(), close_join()         plan, or done
    plan     PlanReply                  plan_requests(), close_plan()         deliver, or done
    deliver  DeliverReply (silos)       deliver_requests(), close_deliver()   done
    done     (nothing)                  (nothing)

    aborts: close_hello without the central sender or any silo; close_key if the leader
    shared no group key; close_join if the central sender did not join; close_plan if no
    member (or not the central sender) made a plan.

What the relay knows: the public :class:`~coded_fl.shuffling.transport.wire.ShuffleJob`, the
members' public keys, and its own routing plan (:func:`relay_plan`: the plan's messages, senders and
receivers, computed from the job alone). It never holds a key, a unit, a hash or a length: the
silos' plan id (which covers the manifest) comes from the members, who must agree on it.
Routing (:mod:`~coded_fl.shuffling.transport.routing`: :func:`relay_plan`, plan-id agreement,
forwarding with byte counts) and the result types (:mod:`~coded_fl.shuffling.transport.results`) are
pure code in their own modules, re-exported here.

Robustness: a member that drops, errors or misses a deadline is named; the epoch goes on without
it where it can (a silo absent from the hello gets no key and no messages; a decentralized silo
that never sends leaves the units that depended on it missing in the others' reports; a silo
that drops during delivery is reported with every unit it was to receive). It stops (aborts)
only when nothing useful can follow: no central sender, no leader, no agreed plan. Stores
commit only in the delivery stage, atomically, so an aborted epoch changes no store.

Length: about 300 lines of code (455 before routing and results moved out); the rest is the
docstrings of its twenty public names. One machine, five stages, each with a request builder, a
reply handler and a close, plus the entry point, the table and the result: splitting the stages
would scatter one object's state over several modules.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from enum import Enum
from typing import Any

from coded_fl.errors import InputError, LocalProtocolError, RemoteProtocolError
from coded_fl.shuffling.plan.planner import CENTRAL
from coded_fl.shuffling.plan.units import UnitId
from coded_fl.shuffling.transport.groupkey import Roster
from coded_fl.shuffling.transport.results import ShuffleResult, SiloOutcome, Status
from coded_fl.shuffling.transport.routing import Traffic, agreed_plan_id, forward, relay_plan
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
)

__all__ = [
    "RelayCoordinator",
    "RelayStage",
    "ShuffleResult",
    "SiloOutcome",
    "Step",
    "relay_plan",
]

_NO_PLAN = bytes(16)

#: (name, requests, on_reply, close) of one stage (see :meth:`RelayCoordinator.steps`).
Step = tuple[
    str,
    Callable[[], Sequence[tuple[int, Packet]]],
    Callable[[int, Packet], None],
    Callable[[], bool],
]


class RelayStage(str, Enum):
    """Where the relay is in its epoch (see the module's transition table)."""

    HELLO = "hello"
    KEY = "key"
    JOIN = "join"
    PLAN = "plan"
    DELIVER = "deliver"
    DONE = "done"


class RelayCoordinator:
    """The relay's state machine for one epoch (see the module docstring).

    Parameters
    ----------
    job
        The epoch's public job.

    Raises
    ------
    ConfigurationError
        The job's settings admit no plan (e.g. storage too small), before any member is
        contacted.
    InputError
        Units missing from every silo that nothing can deliver (decentralized, t = 0).

    Attributes
    ----------
    job : ShuffleJob
        The epoch's job.
    stage : RelayStage
        Where the relay is (see the module's transition table).
    aborted : str
        Why the epoch stopped ("" while it has not).
    roster : Roster or None
        The epoch's roster, once the hello is closed.
    routing, uncoded : ShufflePlan
        The relay's plan (:func:`relay_plan`) and its uncoded counterpart (for the figures).
    """

    def __init__(self, job: ShuffleJob) -> None:
        lost = job.unvouched()
        if lost:
            raise InputError(
                f"units missing from every silo: {list(lost)}: no silo holds them now and at "
                "t = 0 there are no caches to send them from; give them to a silo, use a "
                "storage level t >= 1, or a central sender"
            )
        self.job = job
        self.routing = relay_plan(job)
        self.uncoded = relay_plan(job, coded=False)
        self.stage = RelayStage.HELLO
        self.aborted = ""
        self._keys: dict[int, tuple[bytes, bytes]] = {}
        self._store_epoch: dict[int, int | None] = {}
        self._holdings: dict[int, tuple[UnitId, ...] | None] = {}
        self._node: dict[int, int] = {}
        self._errors: dict[int, str] = {}
        self._notes: list[str] = []
        self.roster: Roster | None = None
        self._boxes: dict[int, bytes] = {}
        self._shares: dict[int, bytes] = {}
        self._plans: dict[int, PlanReply] = {}
        self._plan_id = _NO_PLAN
        self._traffic = Traffic()
        self._reports: dict[int, DeliverReply] = {}

    def __repr__(self) -> str:
        return f"RelayCoordinator({self.job.describe()}, stage={self.stage.value})"

    # ------------------------------------------------------------------ the entry point
    def receive(self, source: int, packet: Packet) -> None:
        """Take one reply from a member.

        Parameters
        ----------
        source
            Who sent it, as the transport knows: in the hello stage the node the reply came
            from (the relay learns its member id from the reply), afterwards the member the
            request was addressed to.
        packet
            The reply.

        Raises
        ------
        RemoteProtocolError
            The reply is not expected in this stage (see the transition table), or is for
            another job or member, or its content is inconsistent; nothing changes.
        """
        handler = _TRANSITIONS.get((self.stage, type(packet)))
        if handler is None:
            got = type(packet).__name__
            if self.stage is RelayStage.HELLO:
                raise RemoteProtocolError(f"node {source} answered the hello with {got}")
            expected = [kind.__name__ for stage, kind in _TRANSITIONS if stage is self.stage]
            if not expected:
                raise RemoteProtocolError(f"sent {got} after the epoch ended", sender=source)
            raise RemoteProtocolError(f"sent {got}, expected {expected[0]}", sender=source)
        handler(self, source, packet)

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

    # ------------------------------------------------------------------ 1. hello
    def hello(self) -> Hello:
        """The request for every node (members answer with their public key).

        Returns
        -------
        Hello
            Carries the public job.

        Raises
        ------
        LocalProtocolError
            Not in the hello stage.
        """
        self._expect(RelayStage.HELLO)
        return Hello(self.job.digest(), -1, self.job)

    def _on_hello(self, node: int, p: HelloReply) -> None:
        if p.digest != self.job.digest():
            raise RemoteProtocolError(f"node {node} answered the hello with {type(p).__name__}")
        if not p.public_key:
            return  # not a member of this job
        m = p.member
        if m not in self.job.members:
            raise RemoteProtocolError(f"node {node} claims member {m}, not in this job")
        if m in self._node and self._node[m] != node:
            raise RemoteProtocolError(
                f"nodes {self._node[m]} and {node} both claim member {m}: give each node its "
                "own codedfl.silo in its node config"
            )
        self._node[m] = node
        self._keys[m] = (p.public_key, p.tag)
        self._store_epoch[m] = p.store_epoch
        self._holdings[m] = p.holdings

    def stale_silos(self) -> dict[int, tuple[UnitId, ...]]:
        """Silos whose hello reported a store that lacks units the job's current assignment
        gives them (the server's view fell behind, e.g. a delivery reply lost after the
        commit): silo -> those units. The job cannot be delivered as planned.

        Returns
        -------
        dict of int to tuple of UnitId
            Empty when every answering silo holds what the job says it holds (or did not
            report its holdings).
        """
        current, _ = self.job.assignments()
        out: dict[int, tuple[UnitId, ...]] = {}
        for k, held in sorted(self._holdings.items()):
            if held is None or k >= self.job.K:
                continue
            have = set(held)
            lacking = tuple(u for u in self.job.units if k in current.get(u, ()) and u not in have)
            if lacking:
                out[k] = lacking
        return out

    def hello_complete(self) -> bool:
        """True once every member of the job answered the hello (a driver may stop waiting)."""
        return len(self._keys) == len(self.job.members)

    def close_hello(self) -> bool:
        """Fix the roster.

        Returns
        -------
        bool
            False (aborted) without a central sender or any silo.

        Raises
        ------
        LocalProtocolError
            Not in the hello stage.
        """
        self._expect(RelayStage.HELLO)
        for m in self.job.members:
            if m not in self._keys:
                self.fail(m, "did not answer the hello")
        sender = self.job.sender
        if sender is not None and sender not in self._keys:
            return self._abort(f"the central sender (member {sender}) did not answer the hello")
        if not any(m < self.job.K for m in self._keys):
            return self._abort("no silo answered the hello")
        # a stale silo that must send cannot: stop before any key is made (the others would
        # wait on it); one that only receives drops at the plan stage, naming what it lacks
        stale = {k: u for k, u in self.stale_silos().items() if self.routing.messages_from(k).size}
        if stale:
            named = "; ".join(
                f"silo {k} lacks {len(u)} unit(s) it is listed as holding, e.g. {list(u[:3])}"
                for k, u in sorted(stale.items())
            )
            return self._abort(
                f"stale view of the stores: {named}: plan again from the holdings the silos "
                "reported (ShuffleResult.silos[k].holdings)"
            )
        self.roster = Roster.of(
            self.job.run_id,
            self.job.epoch,
            {m: k for m, (k, _) in self._keys.items()},
            {m: t for m, (_, t) in self._keys.items()},
        )
        self.stage = RelayStage.KEY
        return True

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

    # ------------------------------------------------------------------ 4. plan
    def plan_requests(self) -> list[tuple[int, PlanRequest]]:
        """(member, request) for every member with a share, each carrying every share.

        Raises
        ------
        LocalProtocolError
            Not in the plan stage.
        """
        self._expect(RelayStage.PLAN)
        shares = tuple(sorted(self._shares.items()))
        return [(m, PlanRequest(self.job.digest(), m, shares)) for m in sorted(self._shares)]

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

    # ------------------------------------------------------------------ the stages
    def steps(self) -> list[Step]:
        """The stages after the hello, in order, for a transport to drive.

        Returns
        -------
        list of Step
            ``(name, requests, on_reply, close)`` per stage: ``requests()`` gives (member,
            packet) pairs to send; each reply goes to ``on_reply(member, packet)``
            (:meth:`receive`); ``close()`` at the deadline returns False if the epoch was
            aborted.
        """
        return [
            ("key", lambda: [(self.leader, self.key_request())], self.receive, self.close_key),
            ("join", self.join_requests, self.receive, self.close_join),
            ("plan", self.plan_requests, self.receive, self.close_plan),
            ("deliver", self.deliver_requests, self.receive, self._close_deliver),
        ]

    def _close_deliver(self) -> bool:
        self.close_deliver()
        return True

    # ------------------------------------------------------------------ result
    def _needs(self, k: int) -> tuple[UnitId, ...]:
        ids = self.routing.manifest.ids
        return tuple(ids[n] for n in self.routing.needs[k])

    def _outcome(self, k: int) -> SiloOutcome:
        err = self._errors.get(k, "")
        epoch = self._store_epoch.get(k)
        rep = self._reports.get(k)
        if rep is not None and rep.report is not None:
            r = rep.report
            return SiloOutcome(
                k,
                "complete" if r.complete else "incomplete",
                r.received,
                r.missing,
                r.failed,
                r.waiting_on,
                rep.store_epoch,
                rep.refused,
                "" if r.complete else err,
                self._holdings.get(k),
            )
        if self.aborted:
            status: Status = "aborted"
        elif k in self._keys:
            status = "dropped"
        else:
            status = "absent"
        return SiloOutcome(
            k,
            status,
            missing=self._needs(k),
            store_epoch=epoch,
            error=err,
            holdings=self._holdings.get(k),
        )

    def finish(self, *, seconds: Mapping[str, float] | None = None) -> ShuffleResult:
        """The result so far (call it after the last stage, or after an abort).

        Parameters
        ----------
        seconds
            Time per stage, as the driver measured it (copied into the result).

        Returns
        -------
        ShuffleResult
            Per-silo outcome, loads, bytes, errors.
        """
        plan, unc, traffic = self.routing, self.uncoded, self._traffic
        piece = traffic.piece
        return ShuffleResult(
            job=self.job,
            aborted=self.aborted,
            plan_id=self._plan_id,
            messages=plan.n_messages,
            load=plan.load,
            formula_load=plan.formula_load(),
            uncoded_messages=unc.n_messages,
            uncoded_load=unc.load,
            message_bytes=piece,
            relayed=traffic.relayed,
            uplink_bytes=traffic.up,
            uplink_wire_bytes=traffic.up_wire,
            downlink_bytes=traffic.down,
            uncoded_uplink_bytes=unc.n_messages * piece,
            uncoded_downlink_bytes=int(unc.term_row.size) * piece,
            silos=tuple(self._outcome(k) for k in range(self.job.K)),
            errors=tuple(
                f"{'central sender' if m == self.job.sender else f'silo {m}'}: {e}"
                for m, e in sorted(self._errors.items())
            )
            + tuple(self._notes),
            refused=traffic.refused,
            seconds=dict(seconds or {}),
        )


_Handler = Callable[[RelayCoordinator, int, Any], None]

#: The transition table: (stage, reply type) -> handler; a pair not in it is refused.
_TRANSITIONS: dict[tuple[RelayStage, type[Packet]], _Handler] = {
    (RelayStage.HELLO, HelloReply): RelayCoordinator._on_hello,
    (RelayStage.KEY, GroupKeyReply): RelayCoordinator._on_key_reply,
    (RelayStage.JOIN, JoinReply): RelayCoordinator._on_join_reply,
    (RelayStage.PLAN, PlanReply): RelayCoordinator._on_plan_reply,
    (RelayStage.DELIVER, DeliverReply): RelayCoordinator._on_deliver_reply,
}
