"""The codecs of what packets carry besides the job: a roster and a delivery report as JSON,
and one coded message as bytes (:func:`encode_message`, :func:`decode_message`)."""

from __future__ import annotations

import struct
from typing import Any

from coded_fl.errors import InputError, RemoteProtocolError
from coded_fl.shuffling.storage.delivery import DeliveryReport
from coded_fl.shuffling.storage.sealing import ShuffleMessage
from coded_fl.shuffling.transport.fields import _int_list, _typed, _unit_list
from coded_fl.shuffling.transport.roster import Roster, RosterEntry

__all__ = ["decode_message", "encode_message", "roster_from_json", "roster_to_json"]

_MSG = struct.Struct("<16sqqqB")


def roster_to_json(r: Roster) -> dict[str, Any]:
    """A roster as a JSON-ready dict (public keys and tags in hex).

    Parameters
    ----------
    r
        The roster.

    Returns
    -------
    dict
        ``{"run": ..., "epoch": ..., "entries": [[member, public key, tag], ...]}``.
    """
    return {
        "run": r.run_id,
        "epoch": r.epoch,
        "entries": [[e.member, e.public_key.hex(), e.tag.hex()] for e in r.entries],
    }


def roster_from_json(d: Any) -> Roster:
    """Parse a roster made by :func:`roster_to_json`, as received from the relay.

    Parameters
    ----------
    d
        The decoded JSON value.

    Returns
    -------
    Roster
        The roster; its keys and tags are not checked here
        (:func:`~coded_fl.shuffling.transport.groupkey.check_roster` does).

    Raises
    ------
    RemoteProtocolError
        If ``d`` is malformed (not an object, a missing or mistyped field, bad hex) or fails
        the roster's own checks (no member, members not distinct and sorted, an id outside
        [0, 2**32), an epoch outside [0, 2**63)).
    """
    if not isinstance(d, dict):
        raise RemoteProtocolError("roster must be an object")
    try:
        entries = []
        for item in _typed(d, "entries", list):
            if not isinstance(item, list) or len(item) != 3:
                raise RemoteProtocolError("roster entries are [member, public key, tag]")
            m, pub, tag = item
            if isinstance(m, bool) or not isinstance(m, int):
                raise RemoteProtocolError("roster member ids are integers")
            entries.append(RosterEntry(m, bytes.fromhex(pub), bytes.fromhex(tag)))
        return Roster(_typed(d, "run", str), _typed(d, "epoch", int), tuple(entries))
    except (ValueError, TypeError, KeyError) as exc:
        raise RemoteProtocolError(f"malformed roster: {exc}") from None


def _report_json(r: DeliveryReport) -> dict[str, Any]:
    return {
        "silo": r.silo,
        "received": list(r.received),
        "missing": list(r.missing),
        "failed": list(r.failed),
        "missing_messages": list(r.missing_messages),
        "waiting_on": list(r.waiting_on),
    }


def _report(d: Any) -> DeliveryReport:
    if not isinstance(d, dict):
        raise RemoteProtocolError("report must be an object")
    return DeliveryReport(
        silo=_typed(d, "silo", int),
        received=tuple(_unit_list(d, "received")),
        missing=tuple(_unit_list(d, "missing")),
        failed=tuple(_unit_list(d, "failed")),
        missing_messages=tuple(_int_list(d["missing_messages"])),
        waiting_on=tuple(_int_list(d["waiting_on"])),
    )


def encode_message(m: ShuffleMessage) -> bytes:
    """One coded message as bytes (fixed header, nonce, body).

    Layout: plan id (16 bytes), epoch, index, sender (int64 each), nonce length (u8), nonce,
    body.

    Parameters
    ----------
    m
        The message.

    Returns
    -------
    bytes
        41 bytes of header, then the nonce and the body.

    Raises
    ------
    InputError
        If the plan id is not 16 bytes or the nonce is longer than 255 bytes.
    """
    if len(m.plan_id) != 16 or len(m.nonce) > 255:
        raise InputError("a shuffle message has a 16-byte plan id and a short nonce")
    if not all(-(2**63) <= v < 2**63 for v in (m.epoch, m.index, m.sender)):
        raise InputError("a shuffle message's epoch, index and sender must fit 64 bits")
    return _MSG.pack(m.plan_id, m.epoch, m.index, m.sender, len(m.nonce)) + m.nonce + m.body


def decode_message(raw: bytes) -> ShuffleMessage:
    """Parse one coded message made by :func:`encode_message`.

    Only the framing is checked here; whether the message belongs to the plan and epoch, and
    its authentication, are checked by the sessions that take it.

    Parameters
    ----------
    raw
        The bytes.

    Returns
    -------
    ShuffleMessage
        The message; everything after the nonce is its body.

    Raises
    ------
    RemoteProtocolError
        If ``raw`` is shorter than its header and nonce.
    """
    if len(raw) < _MSG.size:
        raise RemoteProtocolError("shuffle message is truncated")
    plan_id, epoch, index, sender, n = _MSG.unpack_from(raw)
    if len(raw) < _MSG.size + n:
        raise RemoteProtocolError("shuffle message is truncated")
    nonce = bytes(raw[_MSG.size : _MSG.size + n])
    return ShuffleMessage(plan_id, epoch, index, sender, nonce, bytes(raw[_MSG.size + n :]))
