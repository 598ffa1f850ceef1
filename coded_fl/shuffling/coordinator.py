"""The relay's side of the shuffle transport (sans-IO): who is in, what to forward, what happened.

A :class:`RelayCoordinator` drives one epoch through the stages of
:mod:`~coded_fl.shuffling.wire` (hello, group key, join, plan, deliver). The transport (the
Flower server, :mod:`strategies.shuffle`) sends what it returns, hands it the replies, tells it
about members that errored or missed a deadline (:meth:`RelayCoordinator.fail`), and calls the
``close_*`` step at each stage's deadline. :meth:`RelayCoordinator.finish` says what happened
(:class:`ShuffleResult`), at any point.

What the relay knows: the public :class:`~coded_fl.shuffling.wire.ShuffleJob`, the members'
public keys, and its own routing plan (:func:`relay_plan`: the plan's messages, senders and
receivers, computed from the job alone). It never holds a key, a unit, a hash or a length: the
silos' plan id (which covers the manifest) comes from the members, who must agree on it.

Robustness: a member that drops, errors or misses a deadline is named; the epoch goes on without
it where it can (a silo absent from the hello gets no key and no messages; a decentralized silo
that never sends leaves the units that depended on it missing in the others' reports; a silo
that drops during delivery is reported with every unit it was to receive). It stops (aborts)
only when nothing useful can follow: no central sender, no leader, no agreed plan. Stores
commit only in the delivery stage, atomically, so an aborted epoch changes no store.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from coded_fl.errors import InputError, LocalProtocolError, RemoteProtocolError
from coded_fl.shuffling.groupkey import Roster
from coded_fl.shuffling.planner import CENTRAL, ShufflePlan, plan_shuffle
from coded_fl.shuffling.session import RelaySession, ShuffleMessage
from coded_fl.shuffling.theory import worst_case_loads
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
)

__all__ = ["RelayCoordinator", "ShuffleResult", "SiloOutcome", "Step", "relay_plan"]

_GCM_TAG = 16
_NO_PLAN = bytes(16)

Status = Literal["complete", "incomplete", "dropped", "absent", "aborted"]
#: (name, requests, on_reply, close) of one stage (see :meth:`RelayCoordinator.steps`).
Step = tuple[
    str,
    Callable[[], Sequence[tuple[int, Packet]]],
    Callable[[int, Packet], None],
    Callable[[], bool],
]


def relay_plan(job: ShuffleJob, *, coded: bool | None = None) -> ShufflePlan:
    """The relay's plan: the same messages, senders and receivers as the members' plan, made
    from the public job alone (unit lengths and hashes replaced by placeholders, so its
    ``plan_id`` and byte sizes are not the members'; only its routing is used)."""
    empty = digest(b"")
    placeholder = UnitManifest(tuple(UnitSpec(u, 0, empty) for u in job.units))
    current, nxt = job.assignments()
    return plan_shuffle(
        placeholder,
        current,
        nxt,
        K=job.K,
        t=job.t,
        mode=job.mode,
        coded=job.coded if coded is None else coded,
    )


@dataclass(frozen=True)
class SiloOutcome:
    """One silo's end of an epoch, as the relay saw it.

    ``status``: ``complete`` (received and committed everything, store at the new epoch),
    ``incomplete`` (reported ``missing``/``failed`` units; kept its old units and epoch plus the
    complete verified new ones), ``dropped`` (took part, then errored or missed a deadline;
    every unit it was to receive counts as missing; it committed nothing unless its reply was
    lost after the commit), ``absent`` (never answered), ``aborted`` (the epoch stopped before
    delivery; no store changed).
    """

    silo: int
    status: Status
    received: tuple[UnitId, ...] = ()
    missing: tuple[UnitId, ...] = ()
    failed: tuple[UnitId, ...] = ()
    waiting_on: tuple[int, ...] = ()
    store_epoch: int | None = None
    refused: tuple[str, ...] = ()
    error: str = ""


@dataclass(frozen=True)
class ShuffleResult:
    """What one epoch of the transport did (figures in bytes of payload unless named wire).

    ``uplink_bytes``: payload bytes the relay received (one copy per coded message: the load on
    the shared link of the coded-shuffling model). ``downlink_bytes``: payload bytes it
    forwarded (one copy per receiver: Flower's links are point to point). ``uncoded_*``: the same
    for the uncoded plan of the same job, at the same message size.
    """

    job: ShuffleJob
    aborted: str
    plan_id: bytes
    messages: int
    load: float
    formula_load: float
    uncoded_messages: int
    uncoded_load: float
    message_bytes: int
    relayed: int
    uplink_bytes: int
    uplink_wire_bytes: int
    downlink_bytes: int
    uncoded_uplink_bytes: int
    uncoded_downlink_bytes: int
    silos: tuple[SiloOutcome, ...]
    errors: tuple[str, ...] = ()
    refused: tuple[str, ...] = ()
    seconds: Mapping[str, float] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """True iff the epoch was delivered and every silo is complete."""
        return not self.aborted and all(s.status == "complete" for s in self.silos)

    def outcome(self, silo: int) -> SiloOutcome:
        return self.silos[silo]

    def summary(self) -> dict[str, Any]:
        """Plain figures for printing or JSON."""
        return {
            "epoch": self.job.epoch,
            "K": self.job.K,
            "t": self.job.t,
            "mode": self.job.mode,
            "coded": self.job.coded,
            "units": len(self.job.units),
            "ok": self.ok,
            "aborted": self.aborted,
            "plan_id": self.plan_id.hex(),
            "messages": self.messages,
            "message_bytes": self.message_bytes,
            "load_units": self.load,
            "formula_load_units": self.formula_load,
            "uncoded_messages": self.uncoded_messages,
            "uncoded_load_units": self.uncoded_load,
            "relayed": self.relayed,
            "uplink_bytes": self.uplink_bytes,
            "uplink_wire_bytes": self.uplink_wire_bytes,
            "downlink_bytes": self.downlink_bytes,
            "uncoded_uplink_bytes": self.uncoded_uplink_bytes,
            "uncoded_downlink_bytes": self.uncoded_downlink_bytes,
            "silos": [dataclasses.asdict(s) for s in self.silos],
            "errors": list(self.errors),
            "refused": list(self.refused),
            "seconds": dict(self.seconds),
        }

    def lines(self) -> list[str]:
        """Human-readable report."""
        j = self.job
        out = [f"[coded-fl shuffle] {j.describe()}"]
        if self.aborted:
            out.append(f"  ABORTED before delivery, no store changed: {self.aborted}")
        else:
            out.append(
                f"  plan {self.plan_id.hex()[:16]}: {self.messages} coded messages of "
                f"{self.message_bytes} B, load {self.load:.4g} units (formula "
                f"{self.formula_load:.4g}; uncoded {self.uncoded_load:.4g})"
            )
            out.append(
                f"  relay in (shared link): {self.uplink_bytes:,} B coded vs "
                f"{self.uncoded_uplink_bytes:,} B uncoded ({self.uplink_wire_bytes:,} B on the "
                f"wire); relay out (fan-out): {self.downlink_bytes:,} B vs "
                f"{self.uncoded_downlink_bytes:,} B"
            )
            q = len(j.units) / j.K
            if q.is_integer() and j.t < j.K:
                w = worst_case_loads(j.K, j.t, int(q))
                out.append(
                    f"  theory, worst case (q={q:g}): uncoded {w['uncoded']:.4g}, centralized "
                    f"{w['centralized']:.4g}, decentralized {w['decentralized']:.4g} units"
                )
        for s in self.silos:
            line = f"  silo {s.silo}: {s.status}, received {len(s.received)}"
            if s.missing or s.failed:
                line += f", missing {list(s.missing)}, failed {list(s.failed)}"
            if s.waiting_on:
                line += f" (waited on {list(s.waiting_on)})"
            if s.error:
                line += f": {s.error}"
            out.append(line)
        if self.seconds:
            out.append("  seconds: " + ", ".join(f"{k} {v:.2f}" for k, v in self.seconds.items()))
        return out


class RelayCoordinator:
    """The relay's state machine for one epoch (see the module docstring).

    Raises :class:`~coded_fl.errors.ConfigurationError` or :class:`~coded_fl.errors.InputError`
    at construction for a job that cannot work (storage too small, units missing from every
    silo), before any member is contacted.
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
        self.stage = "hello"
        self.aborted = ""
        self._keys: dict[int, tuple[bytes, bytes]] = {}
        self._store_epoch: dict[int, int | None] = {}
        self._node: dict[int, int] = {}
        self._errors: dict[int, str] = {}
        self._notes: list[str] = []
        self.roster: Roster | None = None
        self._boxes: dict[int, bytes] = {}
        self._shares: dict[int, bytes] = {}
        self._plans: dict[int, PlanReply] = {}
        self._plan_id = _NO_PLAN
        self._inbox: dict[int, list[ShuffleMessage]] = {}
        self._reports: dict[int, DeliverReply] = {}
        self._refused: list[str] = []
        self._piece = 0
        self._relayed = self._up = self._up_wire = self._down = 0

    def __repr__(self) -> str:
        return f"RelayCoordinator({self.job.describe()}, stage={self.stage})"

    # ------------------------------------------------------------------ bookkeeping
    def _expect(self, *stages: str) -> None:
        if self.stage not in stages:
            raise LocalProtocolError(f"relay is in stage {self.stage}, not {' or '.join(stages)}")

    def _check(self, p: Packet, kind: type, member: int) -> Any:
        if not isinstance(p, kind):
            raise RemoteProtocolError(
                f"sent {type(p).__name__}, expected {kind.__name__}", sender=member
            )
        if p.digest != self.job.digest() or p.member != member:
            raise RemoteProtocolError(
                f"{kind.__name__} is for another job or member ({p.member})", sender=member
            )
        return p

    def fail(self, member: int, reason: str) -> None:
        """Record that ``member`` errored or missed the deadline in the current stage."""
        self._errors.setdefault(member, f"{self.stage}: {reason}")

    def note(self, text: str) -> None:
        """Record a problem no member can be named for (a node's failed hello)."""
        self._notes.append(text)

    def _abort(self, reason: str) -> bool:
        self.aborted, self.stage = reason, "done"
        return False

    def _ok(self, member: int) -> bool:
        return member not in self._errors

    @property
    def members(self) -> tuple[int, ...]:
        """Members in the roster (after the hello)."""
        return () if self.roster is None else self.roster.members

    def node_of(self, member: int) -> int:
        return self._node[member]

    # ------------------------------------------------------------------ 1. hello
    def hello(self) -> Hello:
        """The request for every node (members answer with their public key)."""
        self._expect("hello")
        return Hello(self.job.digest(), -1, self.job)

    def on_hello(self, node: int, p: Packet) -> int | None:
        """A node's HelloReply; returns its member id (None: not a member of this job)."""
        self._expect("hello")
        if not isinstance(p, HelloReply) or p.digest != self.job.digest():
            raise RemoteProtocolError(f"node {node} answered the hello with {type(p).__name__}")
        if not p.public_key:
            return None
        m = p.member
        if m not in self.job.members:
            raise RemoteProtocolError(f"node {node} claims member {m}, not in this job")
        if m in self._node and self._node[m] != node:
            raise RemoteProtocolError(
                f"nodes {self._node[m]} and {node} both claim member {m}: give each node its "
                "own codedfl-silo in its node config"
            )
        self._node[m] = node
        self._keys[m] = (p.public_key, p.tag)
        self._store_epoch[m] = p.store_epoch
        return m

    def hello_complete(self) -> bool:
        return len(self._keys) == len(self.job.members)

    def close_hello(self) -> bool:
        """Fix the roster; False (aborted) without a central sender or any silo."""
        self._expect("hello")
        for m in self.job.members:
            if m not in self._keys:
                self.fail(m, "did not answer the hello")
        sender = self.job.sender
        if sender is not None and sender not in self._keys:
            return self._abort(f"the central sender (member {sender}) did not answer the hello")
        if not any(m < self.job.K for m in self._keys):
            return self._abort("no silo answered the hello")
        self.roster = Roster.of(
            self.job.run_id,
            self.job.epoch,
            {m: k for m, (k, _) in self._keys.items()},
            {m: t for m, (_, t) in self._keys.items()},
        )
        self.stage = "key"
        return True

    # ------------------------------------------------------------------ 2. group key
    @property
    def leader(self) -> int:
        if self.roster is None:
            raise LocalProtocolError("no roster yet")
        return self.roster.leader

    def key_request(self) -> GroupKeyRequest:
        """The request for the leader."""
        self._expect("key")
        return GroupKeyRequest(self.job.digest(), self.leader, self.roster)

    def on_key_reply(self, p: Packet) -> None:
        self._expect("key")
        r = self._check(p, GroupKeyReply, self.leader)
        want = {m for m in self.members if m != self.leader}
        boxes = dict(r.boxes)
        if set(boxes) != want or len(boxes) != len(r.boxes):
            raise RemoteProtocolError(
                f"group key boxes for {sorted(boxes)}, expected {sorted(want)}", sender=self.leader
            )
        self._boxes, self._shares[self.leader] = boxes, r.share

    def close_key(self) -> bool:
        self._expect("key")
        if self.leader not in self._shares:
            self.fail(self.leader, "shared no group key")
            why = self._errors[self.leader]
            return self._abort(
                f"the leader (member {self.leader}) did not share the group key: {why}"
            )
        self.stage = "join"
        return True

    # ------------------------------------------------------------------ 3. join
    def join_requests(self) -> list[tuple[int, JoinRequest]]:
        self._expect("join")
        return [
            (m, JoinRequest(self.job.digest(), m, self.roster, self._boxes[m]))
            for m in self.members
            if m != self.leader
        ]

    def on_join_reply(self, member: int, p: Packet) -> None:
        self._expect("join")
        self._shares[member] = self._check(p, JoinReply, member).share

    def close_join(self) -> bool:
        self._expect("join")
        for m in self.members:
            if m not in self._shares:
                self.fail(m, "did not join")
        sender = self.job.sender
        if sender is not None and sender not in self._shares:
            return self._abort(f"the central sender did not join: {self._errors.get(sender)}")
        self.stage = "plan"
        return True

    # ------------------------------------------------------------------ 4. plan
    def plan_requests(self) -> list[tuple[int, PlanRequest]]:
        self._expect("plan")
        shares = tuple(sorted(self._shares.items()))
        return [(m, PlanRequest(self.job.digest(), m, shares)) for m in sorted(self._shares)]

    def on_plan_reply(self, member: int, p: Packet) -> None:
        self._expect("plan")
        self._plans[member] = self._check(p, PlanReply, member)

    def close_plan(self) -> bool:
        """Agree on the plan id, route every message; False (aborted) without a plan."""
        self._expect("plan")
        for m in self._shares:
            if m not in self._plans:
                self.fail(m, "made no plan")
        if not self._plans:
            first = min(self._errors.items(), default=(None, "no reply"))
            who = "" if first[0] is None else f"member {first[0]}: "
            return self._abort(f"no member made a plan ({who}{first[1]})")
        ids = {m: r.plan_id for m, r in self._plans.items()}
        sender = self.job.sender
        if sender is not None:
            if sender not in ids:
                return self._abort(f"the central sender made no plan: {self._errors.get(sender)}")
            agreed = ids[sender]
        else:
            counts = Counter(ids.values())
            top = max(counts.values())
            agreed = ids[min(m for m, i in ids.items() if counts[i] == top)]
        for m, i in ids.items():
            if i != agreed:
                self.fail(m, "made another plan than the others (different job or manifest)")
        self._plan_id = agreed
        relay = RelaySession(
            dataclasses.replace(self.routing, plan_id=agreed), epoch=self.job.epoch
        )
        self._inbox = {k: [] for k in self.members if k < self.job.K}
        for m in sorted(self._plans):
            if not self._ok(m):
                continue
            for msg in self._plans[m].messages:
                self._route(relay, m, msg)
        for s in relay.silent_senders():
            if s != CENTRAL:
                self.fail(s, "its coded messages never came")
        self.stage = "deliver"
        return True

    def _route(self, relay: RelaySession, member: int, msg: ShuffleMessage) -> None:
        claimed = CENTRAL if member == self.job.sender else member
        try:
            if msg.sender != claimed:
                raise RemoteProtocolError(
                    f"sent message {msg.index} as sender {msg.sender}", sender=member
                )
            size = len(msg.body) - _GCM_TAG
            if size < 1 or (self._piece and size != self._piece):
                raise RemoteProtocolError(f"message {msg.index} has the wrong size", sender=member)
            targets = relay.route(msg)
        except RemoteProtocolError as exc:
            self._refused.append(str(exc))
            return
        self._piece = size
        self._relayed += 1
        self._up += size
        self._up_wire += msg.wire_bytes
        for k in sorted(targets):
            if k in self._inbox:
                self._inbox[k].append(msg)
                self._down += size

    # ------------------------------------------------------------------ 5. deliver
    def deliver_requests(self) -> list[tuple[int, DeliverRequest]]:
        """One request per silo in the roster that has not failed: its messages."""
        self._expect("deliver")
        return [
            (k, DeliverRequest(self.job.digest(), k, tuple(msgs)))
            for k, msgs in sorted(self._inbox.items())
            if self._ok(k)
        ]

    def on_deliver_reply(self, member: int, p: Packet) -> None:
        self._expect("deliver")
        r = self._check(p, DeliverReply, member)
        if r.report is None or r.report.silo != member:
            raise RemoteProtocolError("delivery report is for another silo", sender=member)
        self._reports[member] = r

    def close_deliver(self) -> None:
        self._expect("deliver")
        for k in self._inbox:
            if k not in self._reports:
                self.fail(k, "sent no delivery report")
        self.stage = "done"

    # ------------------------------------------------------------------ the stages
    def steps(self) -> list[Step]:
        """The stages after the hello, in order, for a transport to drive: (name, requests,
        on_reply, close). ``requests()`` gives (member, packet) pairs to send; each reply goes
        to ``on_reply(member, packet)``; ``close()`` at the deadline returns False if the
        epoch was aborted."""
        return [
            (
                "key",
                lambda: [(self.leader, self.key_request())],
                lambda _m, p: self.on_key_reply(p),
                self.close_key,
            ),
            ("join", self.join_requests, self.on_join_reply, self.close_join),
            ("plan", self.plan_requests, self.on_plan_reply, self.close_plan),
            ("deliver", self.deliver_requests, self.on_deliver_reply, self._close_deliver),
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
            )
        if self.aborted:
            status: Status = "aborted"
        elif k in self._keys:
            status = "dropped"
        else:
            status = "absent"
        return SiloOutcome(k, status, missing=self._needs(k), store_epoch=epoch, error=err)

    def finish(self, *, seconds: Mapping[str, float] | None = None) -> ShuffleResult:
        """The result so far (call it after the last stage, or after an abort)."""
        plan, unc = self.routing, self.uncoded
        piece = self._piece
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
            relayed=self._relayed,
            uplink_bytes=self._up,
            uplink_wire_bytes=self._up_wire,
            downlink_bytes=self._down,
            uncoded_uplink_bytes=unc.n_messages * piece,
            uncoded_downlink_bytes=int(unc.term_row.size) * piece,
            silos=tuple(self._outcome(k) for k in range(self.job.K)),
            errors=tuple(
                f"{'central sender' if m == self.job.sender else f'silo {m}'}: {e}"
                for m, e in sorted(self._errors.items())
            )
            + tuple(self._notes),
            refused=tuple(self._refused),
            seconds=dict(seconds or {}),
        )
