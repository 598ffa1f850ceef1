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

Length: about 260 lines of code (the sender and silo sessions share the sealing); the rest is
documentation.
"""

from __future__ import annotations

import hashlib
import os
import struct
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from coded_fl.errors import InputError, LocalProtocolError, RemoteProtocolError
from coded_fl.shuffling.codec import SegmentBuffer, decode, encode
from coded_fl.shuffling.plan.planner import CENTRAL, ShufflePlan
from coded_fl.shuffling.plan.units import UnitId

__all__ = [
    "DeliveryReport",
    "RelaySession",
    "SenderSession",
    "ShuffleMessage",
    "SiloSession",
]

_DOMAIN = b"codedfl-shuffle-msg-v1"
_NONCE = 12
_TAG = 16


@dataclass(frozen=True)
class ShuffleMessage:
    """One coded message on the wire. ``body``: ciphertext + GCM tag, or payload + SHA-256 tag.

    Attributes
    ----------
    plan_id : bytes
        The plan's 16-byte id.
    epoch : int
        The shuffle's epoch.
    index : int
        The message's index in the plan.
    sender : int
        The silo that sends it, or :data:`~coded_fl.shuffling.plan.planner.CENTRAL`.
    nonce : bytes
        The 12-byte AES-GCM nonce; empty without a group key.
    body : bytes
        ``piece_size`` bytes of payload plus a 16-byte tag (GCM, or truncated SHA-256).
    """

    plan_id: bytes
    epoch: int
    index: int
    sender: int
    nonce: bytes
    body: bytes = field(repr=False)

    def header(self) -> bytes:
        """The associated data: everything but the body and nonce."""
        return _DOMAIN + self.plan_id + struct.pack(">qqq", self.epoch, self.index, self.sender)

    @property
    def wire_bytes(self) -> int:
        """Bytes on the wire, as :func:`~coded_fl.shuffling.transport.wire.encode_message` writes
        them: plan id, epoch, index and sender (8 bytes each), the nonce's length (1 byte), the
        nonce and the body."""
        return len(self.plan_id) + 24 + 1 + len(self.nonce) + len(self.body)


class _Sealer:
    """AES-256-GCM with the group key, or an integrity-only SHA-256 tag without one."""

    def __init__(self, key: bytes | None, entropy: Callable[[int], bytes]) -> None:
        if key is not None and (not isinstance(key, bytes) or len(key) != 32):
            raise InputError("group_key must be 32 bytes")
        self._aead = AESGCM(key) if key is not None else None
        self._entropy = entropy

    def __repr__(self) -> str:
        return f"_Sealer(encrypted={self._aead is not None})"

    def seal(
        self, plan: ShufflePlan, epoch: int, index: int, sender: int, payload: bytes
    ) -> ShuffleMessage:
        draft = ShuffleMessage(plan.plan_id, epoch, index, sender, b"", b"")
        if self._aead is None:
            tag = hashlib.sha256(draft.header() + payload).digest()[:_TAG]
            return ShuffleMessage(plan.plan_id, epoch, index, sender, b"", payload + tag)
        nonce = self._entropy(_NONCE)
        if len(nonce) != _NONCE:
            raise InputError("the entropy source must return the bytes asked for")
        body = self._aead.encrypt(nonce, payload, draft.header())
        return ShuffleMessage(plan.plan_id, epoch, index, sender, nonce, body)

    def open(self, msg: ShuffleMessage) -> bytes:
        if self._aead is None:
            payload, tag = msg.body[:-_TAG], msg.body[-_TAG:]
            if hashlib.sha256(msg.header() + payload).digest()[:_TAG] != tag:
                raise RemoteProtocolError(
                    f"message {msg.index} fails its integrity check (corrupted in transit)",
                    sender=msg.sender,
                )
            return payload
        try:
            return self._aead.decrypt(msg.nonce, msg.body, msg.header())
        except InvalidTag:
            raise RemoteProtocolError(
                f"message {msg.index} fails authentication (corrupted, replayed or re-routed)",
                sender=msg.sender,
            ) from None


def _check_header(plan: ShufflePlan, epoch: int, msg: ShuffleMessage) -> None:
    if not isinstance(msg, ShuffleMessage):
        raise RemoteProtocolError(f"expected a ShuffleMessage, got {type(msg).__name__}")
    if msg.plan_id != plan.plan_id or msg.epoch != epoch:
        raise RemoteProtocolError(
            f"message {msg.index} belongs to another shuffle (plan {msg.plan_id.hex()[:8]}, "
            f"epoch {msg.epoch}; this one is plan {plan.plan_id.hex()[:8]}, epoch {epoch})",
            sender=msg.sender,
        )
    if not 0 <= msg.index < plan.n_messages:
        raise RemoteProtocolError(f"no message {msg.index} in the plan", sender=msg.sender)
    expected = int(plan.msg_sender[msg.index])
    if msg.sender != expected:
        raise RemoteProtocolError(
            f"message {msg.index} is the plan's message of sender {expected}", sender=msg.sender
        )


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


@dataclass(frozen=True)
class DeliveryReport:
    """What one silo got out of a shuffle. ``complete`` iff nothing is missing or failed.

    Attributes
    ----------
    silo : int
        The silo.
    received : tuple
        The units it needed that arrived, decoded and verified.
    missing : tuple
        The units it needed that did not complete (messages lost, refused or late).
    failed : tuple
        The units that decoded but failed their SHA-256 check (never handed out).
    missing_messages : tuple of int
        The messages routed to it that it did not take.
    waiting_on : tuple of int
        The senders of those messages (silos, or :data:`~coded_fl.shuffling.plan.planner.CENTRAL`).
    """

    silo: int
    received: tuple[UnitId, ...]
    missing: tuple[UnitId, ...]
    failed: tuple[UnitId, ...]
    missing_messages: tuple[int, ...]
    waiting_on: tuple[int, ...]

    @property
    def complete(self) -> bool:
        """True iff no unit is missing or failed (only then may the silo drop old units)."""
        return not self.missing and not self.failed


class SiloSession:
    """One silo in one shuffle: sends its share (decentralized), decodes, verifies, reports.

    Parameters
    ----------
    plan
        The shuffle's plan.
    silo
        This silo's index, ``0..K-1``.
    data
        The silo's buffer: its units in full and its cached subfiles
        (:func:`~coded_fl.shuffling.storage.silo.load_silo`); decoded rows are written into it.
    epoch
        The shuffle's epoch (messages of another epoch are refused).
    group_key
        The 32-byte key the payloads are sealed under, or None for an integrity-only tag.
    entropy
        Source of the nonces of :meth:`outgoing` (the OS CSPRNG unless a test passes its own).

    Attributes
    ----------
    plan : ShufflePlan
        As given.
    silo : int
        As given.
    epoch : int
        As given.

    Raises
    ------
    LocalProtocolError
        If ``silo`` is not in ``0..K-1``.
    InputError
        If ``group_key`` is not 32 bytes.
    """

    def __init__(
        self,
        plan: ShufflePlan,
        silo: int,
        data: SegmentBuffer,
        *,
        epoch: int,
        group_key: bytes | None = None,
        entropy: Callable[[int], bytes] = os.urandom,
    ) -> None:
        if not 0 <= silo < plan.K:
            raise LocalProtocolError(f"silo {silo} is not in 0..{plan.K - 1}")
        self.plan, self.silo, self.epoch = plan, silo, epoch
        self._data = data
        self._sealer = _Sealer(group_key, entropy)
        self._expected = {int(i) for i in plan.messages_to(silo)}
        self._received: set[int] = set()
        self._verified: dict[int, bytes] = {}
        self._failed: set[int] = set()
        self._sent = False
        self._finished = False
        self._check_units(np.asarray(plan.needs[silo], dtype=np.int64))  # t = K: all cached

    def outgoing(self) -> list[ShuffleMessage]:
        """This silo's messages of a decentralized plan (once; empty for a centralized plan)."""
        if self._sent or self._finished:
            raise LocalProtocolError(f"silo {self.silo} already made its messages")
        self._sent = True
        idx = self.plan.messages_from(self.silo)
        payloads = encode(self.plan, self._data, idx)
        return [
            self._sealer.seal(self.plan, self.epoch, int(i), self.silo, p.tobytes())
            for i, p in zip(idx, payloads, strict=True)
        ]

    def receive(self, msg: ShuffleMessage) -> list[UnitId]:
        """Take one message; returns the units it completed (decoded and verified).

        Parameters
        ----------
        msg
            A relayed message of the epoch.

        Returns
        -------
        list[UnitId]
        """
        if self._finished:
            raise LocalProtocolError(f"silo {self.silo} finished this shuffle")
        _check_header(self.plan, self.epoch, msg)
        if msg.index not in self._expected:
            raise RemoteProtocolError(
                f"message {msg.index} carries nothing for silo {self.silo}", sender=msg.sender
            )
        if msg.index in self._received:
            raise RemoteProtocolError(f"message {msg.index} arrived twice", sender=msg.sender)
        payload = self._sealer.open(msg)
        if len(payload) != self.plan.layout.piece_size:
            raise RemoteProtocolError(f"message {msg.index} has the wrong size", sender=msg.sender)
        buf = np.frombuffer(payload, dtype=np.uint8)
        rows = decode(self.plan, self.silo, self._data, np.array([msg.index]), buf)
        self._received.add(msg.index)
        return self._check_units(self.plan.unit_of_row(rows))

    def _check_units(self, candidates: np.ndarray) -> list[UnitId]:
        done = []
        per = self.plan.layout.segments_per_unit
        for n in {int(c) for c in candidates}:
            if n in self._verified or n in self._failed:
                continue
            if not self._data.known[n * per : (n + 1) * per].all():
                continue
            spec = self.plan.manifest.specs[n]
            unit = self._data.data[n, : spec.length].tobytes()
            if spec.verify(unit):
                self._verified[n] = unit
                done.append(spec.unit_id)
            else:  # never handed out; the report names it
                self._failed.add(n)
        return done

    def units(self) -> dict[UnitId, bytes]:
        """The newly received units that are complete and verified (nothing else, ever)."""
        ids = self.plan.manifest.ids
        return {ids[n]: b for n, b in self._verified.items()}

    def report(self) -> DeliveryReport:
        """The delivery report so far, without closing the shuffle (:meth:`finish` closes it)."""
        ids = self.plan.manifest.ids
        need = self.plan.needs[self.silo]
        lost = sorted(self._expected - self._received)
        return DeliveryReport(
            silo=self.silo,
            received=tuple(ids[n] for n in need if n in self._verified),
            missing=tuple(
                ids[n] for n in need if n not in self._verified and n not in self._failed
            ),
            failed=tuple(ids[n] for n in sorted(self._failed)),
            missing_messages=tuple(lost),
            waiting_on=tuple(sorted({int(self.plan.msg_sender[i]) for i in lost})),
        )

    def finish(self) -> DeliveryReport:
        """Close the shuffle (no more messages) and report."""
        self._finished = True
        return self.report()


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
