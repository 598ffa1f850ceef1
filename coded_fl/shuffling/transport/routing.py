"""The relay's routing for one epoch: its plan, the plan id it follows, what it forwards.

Pure functions for :class:`~coded_fl.shuffling.transport.coordinator.RelayCoordinator`'s plan stage:

- :func:`relay_plan`: the plan's messages, senders and receivers, made from the public job
  alone (the relay never learns a unit's length or hash);
- :func:`agreed_plan_id`: the plan id the relay follows (the central sender's, or the one most
  silos made);
- :func:`forward`: route every coded message the members made (checking plan id, epoch, index,
  sender and size), into one inbox per silo, and count the bytes (:class:`Traffic`).
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from coded_fl.errors import RemoteProtocolError
from coded_fl.shuffling.plan.planner import CENTRAL, ShufflePlan, plan_shuffle
from coded_fl.shuffling.plan.units import UnitManifest, UnitSpec, digest
from coded_fl.shuffling.storage.session import RelaySession, ShuffleMessage
from coded_fl.shuffling.transport.results import ShuffleResult
from coded_fl.shuffling.transport.wire import ShuffleJob

__all__ = ["Traffic", "agreed_plan_id", "forward", "relay_plan", "suspect_senders"]

_GCM_TAG = 16


def relay_plan(job: ShuffleJob, *, coded: bool | None = None) -> ShufflePlan:
    """The relay's plan: the same messages, senders and receivers as the members' plan.

    Parameters
    ----------
    job
        The epoch's public job.
    coded
        Plan coded (True) or uncoded (False) delivery; None: as the job says.

    Returns
    -------
    ShufflePlan
        Made from the public job alone: unit lengths and hashes are replaced by placeholders,
        so its ``plan_id`` and byte sizes are not the members'; only its routing is used.

    Raises
    ------
    ConfigurationError
        The job's settings admit no plan.
    """
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


def suspect_senders(result: ShuffleResult) -> frozenset[int]:
    """Silos whose messages failed someone in an epoch: a receiver waited for them in vain
    (``waiting_on``), or decoded from them a unit that failed its SHA-256 check (a corrupt or
    lying sender; with a coded pair, the XOR's one sender). An epoch planned again should not
    send from them (``ShuffledTraining.place``).

    Parameters
    ----------
    result
        The epoch's outcome.

    Returns
    -------
    frozenset of int
        Silo indices (never the central sender).
    """
    out = {k for o in result.silos for k in o.waiting_on if k != CENTRAL}
    failed = {u for o in result.silos for u in o.failed}
    if failed:
        plan = relay_plan(result.job)
        index = {u: n for n, u in enumerate(plan.manifest.ids)}
        want = {index[u] for u in failed if u in index}
        units = plan.unit_of_row(plan.term_row)
        hit = np.unique(plan.term_message()[np.isin(units, list(want))])
        out |= {int(k) for k in plan.msg_sender[hit] if k != CENTRAL}
    return frozenset(out)


def agreed_plan_id(ids: Mapping[int, bytes], *, sender: int | None) -> bytes:
    """The plan id the relay follows.

    Parameters
    ----------
    ids
        Member -> the plan id it made (not empty).
    sender
        The central sender's member id (None in the decentralized setting).

    Returns
    -------
    bytes
        The central sender's plan id; in the decentralized setting the id most members made,
        on a tie the one of the lowest such member.

    Raises
    ------
    KeyError
        The central sender made no plan (the caller aborts the epoch before asking).
    """
    if sender is not None:
        return ids[sender]
    counts = Counter(ids.values())
    top = max(counts.values())
    return ids[min(m for m, i in ids.items() if counts[i] == top)]


@dataclass(frozen=True)
class Traffic:
    """What the relay forwarded in one epoch (payload bytes unless named wire).

    Attributes
    ----------
    inbox
        Silo -> the messages routed to it, in the order they were relayed.
    refused
        One line per message refused (wrong sender, size, plan, epoch, index or a duplicate).
    silent
        Senders (:data:`~coded_fl.shuffling.plan.planner.CENTRAL` for the central sender) whose
        messages never came.
    piece
        Payload bytes of one message (0 before any was relayed).
    relayed, up, up_wire, down
        Messages relayed; payload and wire bytes received (once per message); payload bytes
        forwarded (once per receiver in ``inbox``).
    """

    inbox: Mapping[int, tuple[ShuffleMessage, ...]] = field(default_factory=dict)
    refused: tuple[str, ...] = ()
    silent: tuple[int, ...] = ()
    piece: int = 0
    relayed: int = 0
    up: int = 0
    up_wire: int = 0
    down: int = 0


def forward(
    routing: ShufflePlan,
    messages: Iterable[tuple[int, Sequence[ShuffleMessage]]],
    *,
    plan_id: bytes,
    epoch: int,
    sender: int | None,
    silos: Iterable[int],
) -> Traffic:
    """Route every member's coded messages to the silos that need them.

    Parameters
    ----------
    routing
        The relay's plan (:func:`relay_plan`).
    messages
        (member, its messages) in the order to relay them.
    plan_id
        The agreed plan id (:func:`agreed_plan_id`); a message for another plan is refused.
    epoch
        The epoch; a message of another epoch is refused.
    sender
        The central sender's member id (its messages carry the sender
        :data:`~coded_fl.shuffling.plan.planner.CENTRAL`); None in the decentralized setting.
    silos
        The silos to forward to (the roster's); messages for others are not forwarded.

    Returns
    -------
    Traffic
        The inboxes, refused messages, silent senders and byte counts.
    """
    relay = RelaySession(dataclasses.replace(routing, plan_id=plan_id), epoch=epoch)
    inbox: dict[int, list[ShuffleMessage]] = {k: [] for k in silos}
    refused: list[str] = []
    piece = relayed = up = up_wire = down = 0
    for member, msgs in messages:
        claimed = CENTRAL if member == sender else member
        for msg in msgs:
            try:
                if msg.sender != claimed:
                    raise RemoteProtocolError(
                        f"sent message {msg.index} as sender {msg.sender}", sender=member
                    )
                size = len(msg.body) - _GCM_TAG
                if size < 1 or (piece and size != piece):
                    raise RemoteProtocolError(
                        f"message {msg.index} has the wrong size", sender=member
                    )
                targets = relay.route(msg)
            except RemoteProtocolError as exc:
                refused.append(str(exc))
                continue
            piece = size
            relayed += 1
            up += size
            up_wire += msg.wire_bytes
            for k in sorted(targets):
                if k in inbox:
                    inbox[k].append(msg)
                    down += size
    return Traffic(
        inbox={k: tuple(v) for k, v in inbox.items()},
        refused=tuple(refused),
        silent=tuple(relay.silent_senders()),
        piece=piece,
        relayed=relayed,
        up=up,
        up_wire=up_wire,
        down=down,
    )
