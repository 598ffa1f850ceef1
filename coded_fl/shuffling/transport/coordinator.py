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
    hello    HelloReply (source: node)  hello(), close_hello()                key, plan*, or done
    key      GroupKeyReply (leader)     key_request(), close_key()            join, or done
    join     JoinReply                  join_requests(), close_join()         plan, or done
    plan     PlanReply                  plan_requests(), close_plan()         deliver, or done
    deliver  DeliverReply (silos)       deliver_requests(), close_deliver()   done
    done     (nothing)                  (nothing)

    plan*: every member offered to continue the previous epoch's group key for exactly this
    roster's members (:mod:`~coded_fl.shuffling.transport.keyreuse`): the key stages are
    skipped, the shares came with the hello. ``reuse_keys=False`` always agrees a fresh key.

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

The stages' code is one module each, over the shared state of
:class:`~coded_fl.shuffling.transport.relay_core.RelayCore`: the hello
(:mod:`~coded_fl.shuffling.transport.relay_hello`), the group key and the join
(:mod:`~coded_fl.shuffling.transport.relay_keys`), the plan and the delivery
(:mod:`~coded_fl.shuffling.transport.relay_delivery`) and the result
(:mod:`~coded_fl.shuffling.transport.relay_result`); this module puts them together with the
constructor, the entry point and the table.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from coded_fl.errors import InputError, RemoteProtocolError
from coded_fl.shuffling.plan.units import UnitId
from coded_fl.shuffling.transport.groupkey import Roster
from coded_fl.shuffling.transport.relay_core import RelayStage
from coded_fl.shuffling.transport.relay_delivery import RelayDeliveryPhase
from coded_fl.shuffling.transport.relay_hello import RelayHelloPhase
from coded_fl.shuffling.transport.relay_keys import RelayKeysPhase
from coded_fl.shuffling.transport.relay_result import RelayResultPhase
from coded_fl.shuffling.transport.results import ShuffleResult, SiloOutcome
from coded_fl.shuffling.transport.routing import Traffic, relay_plan
from coded_fl.shuffling.transport.wire import (
    DeliverReply,
    GroupKeyReply,
    HelloReply,
    JoinReply,
    Packet,
    PlanReply,
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


class RelayCoordinator(RelayHelloPhase, RelayKeysPhase, RelayDeliveryPhase, RelayResultPhase):
    """The relay's state machine for one epoch (see the module docstring).

    Parameters
    ----------
    job
        The epoch's public job.
    reuse_keys
        Skip the key stages when every member offers to continue the previous epoch's group
        key for the same members (the default); False always agrees a fresh key.

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
    keys_reused : bool
        True once the hello closed with the previous epoch's group key continued.
    """

    def __init__(self, job: ShuffleJob, *, reuse_keys: bool = True) -> None:
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
        self._offers: dict[int, tuple[bytes, tuple[int, ...], bytes]] = {}
        self.reuse_keys = reuse_keys
        self.keys_reused = False

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
        keys: list[Step] = [
            ("key", lambda: [(self.leader, self.key_request())], self.receive, self.close_key),
            ("join", self.join_requests, self.receive, self.close_join),
        ]
        return (keys if self.stage is RelayStage.KEY else []) + [
            ("plan", self.plan_requests, self.receive, self.close_plan),
            ("deliver", self.deliver_requests, self.receive, self._close_deliver),
        ]

    def _close_deliver(self) -> bool:
        self.close_deliver()
        return True


_Handler = Callable[[RelayCoordinator, int, Any], None]

#: The transition table: (stage, reply type) -> handler; a pair not in it is refused.
_TRANSITIONS: dict[tuple[RelayStage, type[Packet]], _Handler] = {
    (RelayStage.HELLO, HelloReply): RelayCoordinator._on_hello,
    (RelayStage.KEY, GroupKeyReply): RelayCoordinator._on_key_reply,
    (RelayStage.JOIN, JoinReply): RelayCoordinator._on_join_reply,
    (RelayStage.PLAN, PlanReply): RelayCoordinator._on_plan_reply,
    (RelayStage.DELIVER, DeliverReply): RelayCoordinator._on_deliver_reply,
}
