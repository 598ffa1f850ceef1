"""What the protocol driver does with one silo's reply: hand it to the server machine, act on
a typed refusal (:func:`take`), or, for a reply that came after its stage closed, keep what it
still tells (:func:`take_late`). Refusals are noted in :class:`SiloNotes` for the caller.

Every failure (a transport error, bytes that do not decode, a message of another type or from
another silo, one the machine refuses) is that silo's failure for the stage; it never stops a
round.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from coded_fl.errors import CodedFLError, RemoteProtocolError
from coded_fl.secagg.messages import Message, Refusal, RefusalCode, Upload
from coded_fl.secagg.server import ServerMachine, ServerStage
from coded_fl.secagg.transport import Reply

__all__ = ["SiloNotes", "take", "take_late"]

LOG = logging.getLogger("coded_fl")


@dataclass
class SiloNotes:
    """What the silos' refusals said, for the caller to act on between rounds.

    Attributes
    ----------
    needs_keys
        Silos that refused with ``NEEDS_KEYS``: rekey them before the next round.
    misconfigured
        Silo -> detail, for silos that refused because of a setting (the caller clears it
        before each round it starts).
    weight_refused
        Silo -> the weight bound it asked for in the current round (``WEIGHT_BOUND``).
    """

    needs_keys: set[int] = field(default_factory=set)
    misconfigured: dict[int, str] = field(default_factory=dict)
    weight_refused: dict[int, int] = field(default_factory=dict)


def take(
    machine: ServerMachine,
    notes: SiloNotes,
    reply: Reply,
    expect: type[Message],
    errors: dict[int, str],
    accused: dict[int, str] | None = None,
    *,
    log: logging.Logger = LOG,
) -> bool:
    """Hand one in-time reply to the machine, act on a typed refusal, or record why not.

    Every failure (a transport error, bytes that do not decode, a message of another type or
    from another silo, one the machine refuses) is that silo's failure for the stage, recorded
    in ``errors``; it never stops the round.

    Parameters
    ----------
    machine
        The server machine.
    notes
        Where refusals are noted.
    reply
        The reply, as the transport read it.
    expect
        The message type the stage takes (:data:`EXPECT`).
    errors
        Silo -> why, filled on failure.
    accused
        Accused silo -> accusation, filled from ``ACCUSES`` refusals (recovery stage).
    log
        Where refused replies and accusations are logged.

    Returns
    -------
    bool
        True when the machine took the message.
    """
    silo, msg = reply.silo, reply.message
    if msg is None:
        errors[silo] = reply.error or "no readable reply"
        if reply.unreadable:
            log.warning("[coded-fl] refused a reply from silo %d: %s", silo, errors[silo])
        return False
    try:
        if not isinstance(msg, (expect, Refusal)):
            raise RemoteProtocolError(
                f"sent {type(msg).__name__} where {expect.__name__} was expected", sender=silo
            )
        if msg.sender != silo:
            raise RemoteProtocolError(
                f"sent {type(msg).__name__} as silo {msg.sender}", sender=silo
            )
        if isinstance(msg, Refusal):
            _refused(machine, notes, msg, errors, accused, log)
            return False
        machine.receive(msg)
        return True
    except CodedFLError as exc:
        errors[silo] = str(exc)
        log.warning("[coded-fl] refused a reply from silo %d: %s", silo, exc)
        return False


def _refused(
    machine: ServerMachine,
    notes: SiloNotes,
    msg: Refusal,
    errors: dict[int, str],
    accused: dict[int, str] | None,
    log: logging.Logger,
) -> None:
    """Act on a typed refusal: rekey a silo without keys, note a setting or a weight bound
    that stops the round, note an accusation."""
    silo = msg.sender
    if msg.digest != machine.config.digest:
        raise RemoteProtocolError("refusal of a message of another session", sender=silo)
    errors[silo] = msg.detail or msg.code.label
    if msg.code == RefusalCode.NEEDS_KEYS:
        notes.needs_keys.add(silo)
    elif msg.code in (RefusalCode.MISCONFIGURED, RefusalCode.UNTRUSTED_KEY):
        # an untrusted key is a setting too (the trusted keys or an identity): it cannot
        # succeed later, and a round that too many silos refuse so stops the run
        notes.misconfigured[silo] = errors[silo]
        if msg.code == RefusalCode.UNTRUSTED_KEY:
            log.warning("[coded-fl] silo %d refuses a relayed key: %s", silo, errors[silo])
    elif msg.code == RefusalCode.WEIGHT_BOUND:
        notes.weight_refused[silo] = int(msg.bound)
    elif (
        msg.code == RefusalCode.ACCUSES
        and accused is not None
        and msg.accused is not None
        and msg.accused != silo
        and 0 <= msg.accused < machine.config.n
    ):
        accused[msg.accused] = (
            f"silo {silo} reports that the mask share silo {msg.accused} sent for it failed "
            "authentication or key confirmation (altered in transit or by its sender, or a "
            "false accusation: the evidence decides)"
        )
        log.warning("[coded-fl] silo %d accuses silo %d", silo, msg.accused)
    if accused is not None and machine.stage == ServerStage.RECOVERING:
        # the machine counts the refusal (it cannot answer) and opens a dispute over the
        # accused share, judged on the evidence (ServerMachine.reveal_requests); a silo proven
        # lying, or accused by max(T + 1, 2) survivors, is dropped from S (retry_recovery)
        try:
            machine.receive(msg)
        except RemoteProtocolError as exc:
            log.warning("[coded-fl] ignored a refusal from silo %d: %s", silo, exc)


def take_late(machine: ServerMachine, notes: SiloNotes, reply: Reply) -> str | None:
    """A reply that came after its stage closed. A late upload still goes to the machine (with
    group-aligned masks it confirms and deals edge keys; the machine refuses its masked vector),
    a late ``NEEDS_KEYS`` refusal marks its silo for a rekey; anything else changes nothing.

    Parameters
    ----------
    machine
        The server machine.
    notes
        Where a late ``NEEDS_KEYS`` is noted.
    reply
        The late reply.

    Returns
    -------
    str | None
        Why the machine refused a late upload (None: taken, or not an upload).
    """
    msg = reply.message
    if isinstance(msg, Upload) and msg.sender == reply.silo:
        try:
            machine.receive(msg)
        except CodedFLError as exc:
            return str(exc)
        return None
    if (
        isinstance(msg, Refusal)
        and msg.sender == reply.silo
        and msg.code == RefusalCode.NEEDS_KEYS
        and msg.digest == machine.config.digest
    ):
        notes.needs_keys.add(reply.silo)
    return None
