"""Sans-IO state machines of one shuffle: a sender, each silo, and the relay between them.

Theory of operation. Every party computes the same
:class:`~coded_fl.shuffling.plan.planner.ShufflePlan`
from the same inputs (manifest, current and next assignment, K, t, mode) and checks its
``plan_id``. Then:

1. Senders make their messages: :meth:`SenderSession.messages` (centralized: the one party with
   all data) or :meth:`SiloSession.outgoing` (decentralized: each silo sends its share).
2. The relay (the Flower server) passes each message to :meth:`RelaySession.route`, which checks
   it belongs to this plan and epoch, comes from the sender the plan names and was not relayed
   before, and returns the silos to forward it to. It never sees plaintext when a group key is set.
3. Each silo feeds what it receives to :meth:`SiloSession.receive`; a unit becomes available
   (:meth:`SiloSession.units`) only once all its pieces are decoded and its SHA-256 matches.
4. At the deadline, :meth:`SiloSession.finish` returns a :class:`DeliveryReport`: the units
   received, the units that could not be (and the messages and senders they waited for).

Messages are frozen :class:`ShuffleMessage` records. With a 32-byte ``group_key`` (shared by the
organisation's silos; agreed per epoch in :mod:`~coded_fl.shuffling.transport.groupkey`) each
payload is
sealed with AES-256-GCM under a fresh random 96-bit nonce, with associated data binding the plan,
epoch, message index and sender: a corrupted, replayed (other epoch or plan) or re-routed (other
index or sender) message fails authentication and is refused with
:class:`~coded_fl.errors.RemoteProtocolError` naming the message and its sender, and the silo's
state is unchanged. Without a key, a SHA-256 tag over the same fields detects accidental
corruption only (anyone can recompute it). Keys never appear in reprs or error messages.

Where the parts live: the message and its sealing in :mod:`~coded_fl.shuffling.storage.sealing`,
the silo's session and its report in :mod:`~coded_fl.shuffling.storage.delivery`; this module
holds the sender's and the relay's sessions and re-exports the others.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from coded_fl.errors import LocalProtocolError, RemoteProtocolError
from coded_fl.shuffling.codec import SegmentBuffer, encode
from coded_fl.shuffling.plan.planner import CENTRAL, ShufflePlan
from coded_fl.shuffling.storage.delivery import DeliveryReport, SiloSession
from coded_fl.shuffling.storage.sealing import ShuffleMessage, _check_header, _Sealer

__all__ = [
    "DeliveryReport",
    "RelaySession",
    "SenderSession",
    "ShuffleMessage",
    "SiloSession",
]


class SenderSession:
    """The centralized sender: holds every unit and makes all messages of a centralized plan.

    Parameters
    ----------
    plan
        A centralized plan.
    data
        The sender's buffer, every unit put in full (:meth:`SegmentBuffer.put_unit`).
    epoch
        The shuffle's epoch (bound into every message).
    group_key
        The 32-byte key that seals the payloads (AES-256-GCM), or None for an integrity-only
        SHA-256 tag.
    entropy
        Source of the nonces (the OS CSPRNG unless a test passes its own).

    Attributes
    ----------
    plan : ShufflePlan
        As given.
    epoch : int
        As given.

    Raises
    ------
    LocalProtocolError
        If the plan is not centralized.
    InputError
        If ``group_key`` is not 32 bytes.
    """

    def __init__(
        self,
        plan: ShufflePlan,
        data: SegmentBuffer,
        *,
        epoch: int,
        group_key: bytes | None = None,
        entropy: Callable[[int], bytes] = os.urandom,
    ) -> None:
        if plan.mode != "centralized":
            raise LocalProtocolError("a SenderSession drives centralized plans only")
        self.plan, self.epoch = plan, epoch
        self._data = data
        self._sealer = _Sealer(group_key, entropy)

    def messages(self) -> list[ShuffleMessage]:
        """Every message of the plan, sealed (InputError if the sender lacks some unit)."""
        idx = self.plan.messages_from(CENTRAL)
        payloads = encode(self.plan, self._data, idx)
        return [
            self._sealer.seal(self.plan, self.epoch, int(i), CENTRAL, p.tobytes())
            for i, p in zip(idx, payloads, strict=True)
        ]


class RelaySession:
    """The relay's view of one shuffle: routes messages, refuses strays and duplicates.

    Needs no key and sees no plaintext: it checks headers only (plan id, epoch, index, sender).

    Parameters
    ----------
    plan
        The shuffle's plan (the relay's own,
        :func:`~coded_fl.shuffling.transport.routing.relay_plan`,
        has the same messages, senders and receivers).
    epoch
        The shuffle's epoch.

    Attributes
    ----------
    plan : ShufflePlan
        As given.
    epoch : int
        As given.
    """

    def __init__(self, plan: ShufflePlan, *, epoch: int) -> None:
        self.plan, self.epoch = plan, epoch
        self._seen: set[int] = set()

    def route(self, msg: ShuffleMessage) -> frozenset[int]:
        """The silos to forward ``msg`` to (RemoteProtocolError if it does not belong here).

        Parameters
        ----------
        msg
            A sender's message.

        Returns
        -------
        frozenset[int]
        """
        _check_header(self.plan, self.epoch, msg)
        if msg.index in self._seen:
            raise RemoteProtocolError(f"message {msg.index} relayed twice", sender=msg.sender)
        self._seen.add(msg.index)
        return self.plan.receivers(msg.index)

    def pending(self) -> list[int]:
        """Indices of the plan's messages not yet relayed, increasing."""
        return [i for i in range(self.plan.n_messages) if i not in self._seen]

    def silent_senders(self) -> list[int]:
        """Senders with messages not yet relayed (dropped or late silos)."""
        return sorted({int(self.plan.msg_sender[i]) for i in self.pending()})
