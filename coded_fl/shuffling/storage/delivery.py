"""A silo's side of one shuffle (:class:`SiloSession`): its messages in the decentralized
setting, what it receives, decodes and verifies, and its :class:`DeliveryReport`."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from coded_fl.errors import LocalProtocolError, RemoteProtocolError
from coded_fl.shuffling.codec import SegmentBuffer, decode, encode
from coded_fl.shuffling.plan.planner import ShufflePlan
from coded_fl.shuffling.plan.units import UnitId
from coded_fl.shuffling.storage.sealing import ShuffleMessage, _check_header, _Sealer

__all__ = ["DeliveryReport", "SiloSession"]


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
