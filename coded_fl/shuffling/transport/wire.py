"""What the shuffle transport sends: the public job, the packets between relay and members, and
their encoding (sans-IO; the Flower adapters only move these bytes).

A :class:`ShuffleJob` is what the relay knows about one epoch and may tell everyone: the run and
epoch, K, t, the mode, the unit ids and the current and next assignments. Unit contents, their
lengths and SHA-256 hashes (the manifest) never appear in it: members exchange those sealed under
the epoch's group key (:mod:`~coded_fl.shuffling.transport.member`).

Members: silos ``0..K-1``, and in the centralized setting the central sender, member ``K``.

Packets (relay -> member requests, member -> relay replies), in protocol order::

    Hello(job)                   -> HelloReply(public key, tag, store epoch)
    GroupKeyRequest(roster)      -> GroupKeyReply(sealed boxes, sealed manifest share)   leader only
    JoinRequest(roster, box)     -> JoinReply(sealed manifest share)                     the others
    PlanRequest(manifest shares) -> PlanReply(plan id, coded messages)
    DeliverRequest(messages)     -> DeliverReply(delivery report, store epoch)          silos only

Encoding: ``"CFLS" | version u8 | kind u8 | JSON length u32 | JSON | blob count u32 |
(blob length u64 | blob)*``. Control fields travel in the JSON, byte strings as blobs referenced
by index. :func:`decode` checks every length and type and raises
:class:`~coded_fl.errors.RemoteProtocolError` for anything malformed.

This module is longer than the others on purpose: it is one wire format, so the job, every
packet type's layout and the bounds checks that decode it stay in one place, where a change to the
format is made and reviewed at once.

>>> job = ShuffleJob.make(run_id="r", epoch=1, current={0: {0}, 1: {1}}, nxt={0: {1}, 1: {0}},
...                       K=2, t=1)
>>> decode(encode(Hello(job.digest(), -1, job))).job == job
True
"""

from __future__ import annotations

import hashlib
import json
import math
import struct
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from coded_fl.errors import CodedFLError, ConfigurationError, InputError, RemoteProtocolError
from coded_fl.shuffling.plan.placement import check_storage
from coded_fl.shuffling.plan.planner import Mode
from coded_fl.shuffling.plan.units import UnitId
from coded_fl.shuffling.storage.session import DeliveryReport, ShuffleMessage
from coded_fl.shuffling.transport.groupkey import Roster, RosterEntry

__all__ = [
    "DeliverReply",
    "DeliverRequest",
    "GroupKeyReply",
    "GroupKeyRequest",
    "Hello",
    "HelloReply",
    "JoinReply",
    "JoinRequest",
    "Packet",
    "PlanReply",
    "PlanRequest",
    "ShuffleJob",
    "decode",
    "decode_message",
    "encode",
    "encode_message",
    "roster_from_json",
    "roster_to_json",
]

MAGIC = b"CFLS"
VERSION = 1
_HEAD = struct.Struct("<4sBBI")
_MSG = struct.Struct("<16sqqqB")
_MODES = ("centralized", "decentralized")


def _unit_key(u: UnitId) -> tuple[str, str | int]:
    return (type(u).__name__, u)


def _check_unit_id(u: object) -> UnitId:
    if isinstance(u, bool) or not isinstance(u, (str, int)):
        raise InputError(f"unit ids must be str or int, got {u!r}")
    return u


@dataclass(frozen=True)
class ShuffleJob:
    """The public description of one shuffle epoch (units in canonical order).

    Made with :meth:`make`; a storage ``storage`` (units per silo) is checked against both
    assignments plus the level-t cache when given (ConfigurationError naming the silo).

    Attributes
    ----------
    run_id : str
        The run (non-empty).
    epoch : int
        The epoch, in [0, 2**63).
    K, t : int
        Silos and storage level (``0..K``).
    mode : Mode
        ``"centralized"`` or ``"decentralized"``.
    units : tuple
        The N unit ids in canonical order.
    current, target : tuple of frozenset of int
        The current and next holders of each unit, in the order of ``units``.
    coded : bool
        False for the uncoded baseline.
    storage : float or None
        Storage per silo in units (M), checked when given.
    """

    run_id: str
    epoch: int
    K: int
    t: int
    mode: Mode
    units: tuple[UnitId, ...]
    current: tuple[frozenset[int], ...]
    target: tuple[frozenset[int], ...]
    coded: bool = True
    storage: float | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.run_id, str) or not self.run_id:
            raise ConfigurationError("run_id must be a non-empty string")
        if isinstance(self.epoch, bool) or not isinstance(self.epoch, int):
            raise ConfigurationError(f"epoch must be an integer, got {self.epoch!r}")
        if not 0 <= self.epoch < 2**63:
            raise ConfigurationError(f"epoch must be in [0, 2**63), got {self.epoch}")
        if isinstance(self.K, bool) or not isinstance(self.K, int) or self.K < 1:
            raise ConfigurationError(f"K (silos) must be >= 1, got {self.K!r}")
        if isinstance(self.t, bool) or not isinstance(self.t, int) or not 0 <= self.t <= self.K:
            raise ConfigurationError(f"storage level t must be in 0..K = 0..{self.K}, got {self.t}")
        if self.mode not in _MODES:
            raise ConfigurationError(f"mode must be one of {_MODES}, got {self.mode!r}")
        units = [_check_unit_id(u) for u in self.units]
        if not units:
            raise InputError("the job has no units")
        if len(set(units)) != len(units) or units != sorted(units, key=_unit_key):
            raise InputError("job units must be distinct and in canonical order (use make)")
        if len(self.current) != len(units) or len(self.target) != len(units):
            raise InputError("current and target must list the holders of every unit")
        for label, group in (("current", self.current), ("next", self.target)):
            for u, holders in zip(units, group, strict=True):
                bad = sorted(k for k in holders if not 0 <= k < self.K)
                if bad:
                    raise InputError(
                        f"{label} assignment: unit {u!r} is given to silos {bad}, "
                        f"outside 0..{self.K - 1}"
                    )
        if self.storage is not None and not (
            isinstance(self.storage, (int, float))
            and not isinstance(self.storage, bool)
            and math.isfinite(self.storage)
        ):
            raise ConfigurationError(f"storage must be a finite number, got {self.storage!r}")
        if self.storage is not None:
            check_storage(
                self.K,
                self.t,
                float(self.storage),
                [("current", self.current), ("next", self.target)],
            )

    @classmethod
    def make(
        cls,
        *,
        run_id: str,
        epoch: int,
        current: Mapping[UnitId, Any],
        nxt: Mapping[UnitId, Any],
        K: int,
        t: int,
        mode: Mode = "centralized",
        coded: bool = True,
        storage: float | None = None,
    ) -> ShuffleJob:
        """A job from unit -> holders mappings (units absent from one mapping hold nobody).

        Parameters
        ----------
        run_id
            The run (non-empty).
        epoch
            The epoch, in [0, 2**63).
        current
            Unit id -> the silos that hold it in full now.
        nxt
            Unit id -> the silos that must hold it after the epoch.
        K
            The number of silos.
        t
            The storage level, ``0..K``.
        mode
            ``"centralized"`` (a central sender, member K, holds every unit) or
            ``"decentralized"``.
        coded
            False for the uncoded baseline.
        storage
            Storage per silo in units (M); when given, every silo of both assignments must fit
            its level-t cache plus its units.

        Returns
        -------
        ShuffleJob
            The job, units in canonical order.

        Raises
        ------
        ConfigurationError
            If ``run_id``, ``epoch``, ``K``, ``t`` or ``mode`` is invalid, or a silo's storage is
            too small (naming the silo).
        InputError
            If a unit id is not a str or int, there are no units, or a unit is given to a silo
            outside ``0..K-1``.
        """
        units = tuple(sorted({*current, *nxt}, key=_unit_key))
        for u in units:
            _check_unit_id(u)
        return cls(
            run_id=run_id,
            epoch=epoch,
            K=K,
            t=t,
            mode=mode,
            units=units,
            current=tuple(frozenset(int(k) for k in current.get(u, ())) for u in units),
            target=tuple(frozenset(int(k) for k in nxt.get(u, ())) for u in units),
            coded=coded,
            storage=storage,
        )

    # -- who takes part ----------------------------------------------------------------------
    @property
    def sender(self) -> int | None:
        """The central sender's member id (K) in the centralized setting, else None."""
        return self.K if self.mode == "centralized" else None

    @property
    def members(self) -> range:
        """Member ids: silos 0..K-1, and K (the sender) in the centralized setting. A range,
        not a list: K comes from the relay's Hello and must cost nothing to hold."""
        return range(self.K + (1 if self.mode == "centralized" else 0))

    def assignments(self) -> tuple[dict[UnitId, frozenset[int]], dict[UnitId, frozenset[int]]]:
        """(current, next) as unit -> holders mappings."""
        return dict(zip(self.units, self.current, strict=True)), dict(
            zip(self.units, self.target, strict=True)
        )

    def unvouched(self) -> tuple[UnitId, ...]:
        """Units some silo must receive that no member can send: in the decentralized setting
        at t = 0 (no caches), units missing from every silo. (The central sender holds every
        unit; at t >= 1 silos send a unit from their caches and vouch for it with the spec
        their stores know, checked when the members plan.)"""
        if self.mode == "centralized" or self.t >= 1:
            return ()
        return tuple(
            u
            for u, now, nxt in zip(self.units, self.current, self.target, strict=True)
            if not now and nxt - now
        )

    # -- identity ----------------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        """The job as a JSON-ready dict (what a Hello carries; :meth:`digest` hashes it)."""
        return {
            "run": self.run_id,
            "epoch": self.epoch,
            "K": self.K,
            "t": self.t,
            "mode": self.mode,
            "coded": self.coded,
            "storage": self.storage,
            "units": list(self.units),
            "current": [sorted(h) for h in self.current],
            "next": [sorted(h) for h in self.target],
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> ShuffleJob:
        """Parse a job (RemoteProtocolError if malformed or invalid).

        Parameters
        ----------
        d
            The job as JSON (a mapping).

        Returns
        -------
        ShuffleJob
        """
        try:
            storage = d["storage"]
            if storage is not None and not isinstance(storage, (int, float)):
                raise InputError("storage must be a number or null")
            return cls(
                run_id=_typed(d, "run", str),
                epoch=_typed(d, "epoch", int),
                K=_typed(d, "K", int),
                t=_typed(d, "t", int),
                mode=_typed(d, "mode", str),
                units=tuple(_unit_list(d, "units")),
                current=tuple(frozenset(_int_list(h)) for h in _typed(d, "current", list)),
                target=tuple(frozenset(_int_list(h)) for h in _typed(d, "next", list)),
                coded=_typed(d, "coded", bool),
                storage=storage,
            )
        except (KeyError, TypeError) as exc:
            raise RemoteProtocolError(f"malformed shuffle job: {exc!r}") from None
        except CodedFLError as exc:
            if isinstance(exc, RemoteProtocolError):
                raise
            raise RemoteProtocolError(f"invalid shuffle job: {exc}") from None

    def digest(self) -> bytes:
        """16 bytes naming this job: every packet of the epoch carries it."""
        raw = json.dumps(self.to_json(), sort_keys=True, separators=(",", ":")).encode()
        return hashlib.sha256(b"codedfl-shuffle-job-v1" + raw).digest()[:16]

    def describe(self) -> str:
        """One line for logs: epoch, K, the number of units, t and the mode."""
        return (
            f"epoch {self.epoch}: K={self.K} silos, {len(self.units)} units, t={self.t}, "
            f"{self.mode}{'' if self.coded else ' (uncoded)'}"
        )


# ----------------------------------------------------------------------------- packets


@dataclass(frozen=True)
class Packet:
    """Common header: the job's digest and the member the packet is from (replies) or for
    (requests; -1: every node, the Hello)."""

    KIND: ClassVar[int] = 0
    digest: bytes
    member: int


@dataclass(frozen=True)
class Hello(Packet):
    """Relay -> every node: the job; asks for a fresh public key for the epoch."""

    KIND: ClassVar[int] = 1
    job: ShuffleJob | None = None


@dataclass(frozen=True)
class HelloReply(Packet):
    """Member -> relay: its public key for the epoch (empty: not a member of this job), the
    organisation tag (empty without an organisation key), its store's epoch, and (a silo) the
    units of the job its store holds in full: the relay checks the job's current assignment
    against them before anything else is done (a reply lost after a commit leaves the server's
    view of a store behind; public unit ids only, as in a delivery report)."""

    KIND: ClassVar[int] = 2
    public_key: bytes = b""
    tag: bytes = b""
    store_epoch: int | None = None
    holdings: tuple[UnitId, ...] | None = None


@dataclass(frozen=True)
class GroupKeyRequest(Packet):
    """Relay -> leader: the roster; asks for the group key's boxes."""

    KIND: ClassVar[int] = 3
    roster: Roster | None = None


@dataclass(frozen=True)
class GroupKeyReply(Packet):
    """Leader -> relay: the group key sealed for each other member, and the leader's share
    of the manifest (sealed under the epoch's manifest key)."""

    KIND: ClassVar[int] = 4
    boxes: tuple[tuple[int, bytes], ...] = field(default=(), repr=False)
    share: bytes = field(default=b"", repr=False)


@dataclass(frozen=True)
class JoinRequest(Packet):
    """Relay -> member: the roster and the member's sealed group key."""

    KIND: ClassVar[int] = 5
    roster: Roster | None = None
    box: bytes = field(default=b"", repr=False)


@dataclass(frozen=True)
class JoinReply(Packet):
    """Member -> relay: its sealed share of the manifest."""

    KIND: ClassVar[int] = 6
    share: bytes = field(default=b"", repr=False)


@dataclass(frozen=True)
class PlanRequest(Packet):
    """Relay -> member: every member's sealed manifest share."""

    KIND: ClassVar[int] = 7
    shares: tuple[tuple[int, bytes], ...] = field(default=(), repr=False)


@dataclass(frozen=True)
class PlanReply(Packet):
    """Member -> relay: the id of the plan it made, and its coded messages (sealed)."""

    KIND: ClassVar[int] = 8
    plan_id: bytes = b""
    messages: tuple[ShuffleMessage, ...] = field(default=(), repr=False)


@dataclass(frozen=True)
class DeliverRequest(Packet):
    """Relay -> silo: the messages the plan routes to it."""

    KIND: ClassVar[int] = 9
    messages: tuple[ShuffleMessage, ...] = field(default=(), repr=False)


@dataclass(frozen=True)
class DeliverReply(Packet):
    """Silo -> relay: what it received and committed (unit ids only), the messages it refused
    (and why), its store's epoch after the commit."""

    KIND: ClassVar[int] = 10
    report: DeliveryReport | None = None
    refused: tuple[str, ...] = ()
    store_epoch: int | None = None


_KINDS: dict[int, type[Packet]] = {
    cls.KIND: cls
    for cls in (
        Hello,
        HelloReply,
        GroupKeyRequest,
        GroupKeyReply,
        JoinRequest,
        JoinReply,
        PlanRequest,
        PlanReply,
        DeliverRequest,
        DeliverReply,
    )
}


# ----------------------------------------------------------------------------- encoding


def _typed(d: Mapping[str, Any], key: str, kind: type) -> Any:
    v = d[key]
    if kind is int and isinstance(v, bool):
        raise RemoteProtocolError(f"field {key!r} must be an integer")
    if not isinstance(v, kind):
        raise RemoteProtocolError(f"field {key!r} must be {kind.__name__}")
    return v


def _int_list(v: Any) -> list[int]:
    if not isinstance(v, list) or any(isinstance(x, bool) or not isinstance(x, int) for x in v):
        raise RemoteProtocolError("expected a list of integers")
    return list(v)


def _unit_list(d: Mapping[str, Any], key: str) -> list[UnitId]:
    v = _typed(d, key, list)
    try:
        return [_check_unit_id(u) for u in v]
    except InputError as exc:
        raise RemoteProtocolError(str(exc)) from None


def _opt_int(d: Mapping[str, Any], key: str) -> int | None:
    return None if d.get(key) is None else _typed(d, key, int)


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


class _Blobs:
    def __init__(self) -> None:
        self.items: list[bytes] = []

    def add(self, b: bytes) -> int:
        self.items.append(bytes(b))
        return len(self.items) - 1


def _parts(p: Packet, blobs: _Blobs) -> dict[str, Any]:
    d: dict[str, Any] = {}
    if isinstance(p, Hello):
        if p.job is None:
            raise InputError("Hello needs a job")
        d["job"] = p.job.to_json()
    elif isinstance(p, HelloReply):
        d.update(public_key=p.public_key.hex(), tag=p.tag.hex(), store_epoch=p.store_epoch)
        d["holdings"] = None if p.holdings is None else list(p.holdings)
    elif isinstance(p, (GroupKeyRequest, JoinRequest)):
        if p.roster is None:
            raise InputError(f"{type(p).__name__} needs a roster")
        d["roster"] = roster_to_json(p.roster)
        if isinstance(p, JoinRequest):
            d["box"] = blobs.add(p.box)
    elif isinstance(p, GroupKeyReply):
        d["boxes"] = [[m, blobs.add(b)] for m, b in p.boxes]
        d["share"] = blobs.add(p.share)
    elif isinstance(p, JoinReply):
        d["share"] = blobs.add(p.share)
    elif isinstance(p, PlanRequest):
        d["shares"] = [[m, blobs.add(b)] for m, b in p.shares]
    elif isinstance(p, (PlanReply, DeliverRequest)):
        d["messages"] = [blobs.add(encode_message(m)) for m in p.messages]
        if isinstance(p, PlanReply):
            d["plan_id"] = p.plan_id.hex()
    elif isinstance(p, DeliverReply):
        if p.report is None:
            raise InputError("DeliverReply needs a report")
        d.update(report=_report_json(p.report), refused=list(p.refused), store_epoch=p.store_epoch)
    return d


def encode(p: Packet) -> bytes:
    """Serialise a packet (layout in the module docstring).

    Parameters
    ----------
    p
        A packet of one of the ten kinds (exactly those classes, not subclasses).

    Returns
    -------
    bytes
        The encoded packet.

    Raises
    ------
    InputError
        If ``p`` is not one of the ten packet classes, lacks a field its kind needs (a Hello's
        job, a GroupKeyRequest's or JoinRequest's roster, a DeliverReply's report), or carries
        a coded message :func:`encode_message` refuses.
    """
    if type(p) not in _KINDS.values():
        raise InputError(f"cannot encode {type(p).__name__}")
    blobs = _Blobs()
    body = {"digest": p.digest.hex(), "member": p.member, **_parts(p, blobs)}
    raw = json.dumps(body, separators=(",", ":")).encode()
    out = [_HEAD.pack(MAGIC, VERSION, p.KIND, len(raw)), raw, struct.pack("<I", len(blobs.items))]
    for b in blobs.items:
        out += [struct.pack("<Q", len(b)), b]
    return b"".join(out)


def _read(buf: memoryview) -> tuple[int, dict[str, Any], list[bytes]]:
    if len(buf) < _HEAD.size:
        raise RemoteProtocolError("shuffle packet is truncated")
    magic, version, kind, n = _HEAD.unpack_from(buf)
    if magic != MAGIC:
        raise RemoteProtocolError("not a coded-fl shuffle packet (bad magic)")
    if version != VERSION:
        raise RemoteProtocolError(
            f"shuffle packet version {version} is not supported (this side speaks {VERSION})"
        )
    pos = _HEAD.size
    if pos + n + 4 > len(buf):
        raise RemoteProtocolError("shuffle packet is truncated or has a bad length field")
    try:
        d = json.loads(bytes(buf[pos : pos + n]))
    except (ValueError, RecursionError):  # RecursionError: nested past the parser's depth
        raise RemoteProtocolError("shuffle packet header is not valid JSON") from None
    if not isinstance(d, dict):
        raise RemoteProtocolError("shuffle packet header must be a JSON object")
    pos += n
    (count,) = struct.unpack_from("<I", buf, pos)
    pos += 4
    if count * 8 > len(buf) - pos:
        raise RemoteProtocolError("shuffle packet is truncated or has a bad length field")
    blobs = []
    for _ in range(count):
        if pos + 8 > len(buf):
            raise RemoteProtocolError("shuffle packet is truncated")
        (size,) = struct.unpack_from("<Q", buf, pos)
        pos += 8
        if size > len(buf) - pos:
            raise RemoteProtocolError("shuffle packet is truncated or has a bad length field")
        blobs.append(bytes(buf[pos : pos + size]))
        pos += size
    if pos != len(buf):
        raise RemoteProtocolError(f"{len(buf) - pos} unexpected trailing bytes in shuffle packet")
    return kind, d, blobs


def decode(raw: bytes | bytearray | memoryview) -> Packet:
    """Parse a packet; anything malformed raises :class:`RemoteProtocolError`.

    Parameters
    ----------
    raw
        The bytes as received.

    Returns
    -------
    Packet
        The packet of the kind its header names. Its envelope (digest, member) and its place in
        the protocol are for the state machines to check.

    Raises
    ------
    RemoteProtocolError
        If the packet is truncated, has bad magic, another version, an unknown kind, a bad
        length field, trailing bytes, a header that is not a JSON object, a missing or mistyped
        field, a reference to a blob it does not carry, or a job or roster that fails its
        checks.
    """
    kind, d, blobs = _read(memoryview(raw))
    cls = _KINDS.get(kind)
    if cls is None:
        raise RemoteProtocolError(f"unknown shuffle packet kind {kind}")

    used: set[int] = set()

    def blob(v: Any) -> bytes:
        if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < len(blobs):
            raise RemoteProtocolError("shuffle packet refers to a blob it does not carry")
        if v in used:  # a blob read many times would be built many times
            raise RemoteProtocolError("shuffle packet refers to a blob more than once")
        used.add(v)
        return blobs[v]

    def pairs(v: Any) -> tuple[tuple[int, bytes], ...]:
        if not isinstance(v, list):
            raise RemoteProtocolError("expected a list of [member, blob] pairs")
        out = []
        for item in v:
            if not isinstance(item, list) or len(item) != 2:
                raise RemoteProtocolError("expected [member, blob] pairs")
            out.append((_int_list([item[0]])[0], blob(item[1])))
        return tuple(out)

    def build() -> Packet:
        head = {
            "digest": bytes.fromhex(_typed(d, "digest", str)),
            "member": _typed(d, "member", int),
        }
        if cls is Hello:
            job = d["job"]
            if not isinstance(job, dict):
                raise RemoteProtocolError("Hello carries no job")
            return Hello(**head, job=ShuffleJob.from_json(job))
        if cls is HelloReply:
            return HelloReply(
                **head,
                public_key=bytes.fromhex(_typed(d, "public_key", str)),
                tag=bytes.fromhex(_typed(d, "tag", str)),
                store_epoch=_opt_int(d, "store_epoch"),
                holdings=None if d.get("holdings") is None else tuple(_unit_list(d, "holdings")),
            )
        if cls is GroupKeyRequest:
            return GroupKeyRequest(**head, roster=roster_from_json(d["roster"]))
        if cls is JoinRequest:
            return JoinRequest(**head, roster=roster_from_json(d["roster"]), box=blob(d["box"]))
        if cls is GroupKeyReply:
            return GroupKeyReply(**head, boxes=pairs(d["boxes"]), share=blob(d["share"]))
        if cls is JoinReply:
            return JoinReply(**head, share=blob(d["share"]))
        if cls is PlanRequest:
            return PlanRequest(**head, shares=pairs(d["shares"]))
        if cls in (PlanReply, DeliverRequest):
            msgs = tuple(decode_message(blob(i)) for i in _typed(d, "messages", list))
            if cls is DeliverRequest:
                return DeliverRequest(**head, messages=msgs)
            return PlanReply(
                **head, plan_id=bytes.fromhex(_typed(d, "plan_id", str)), messages=msgs
            )
        refused = _typed(d, "refused", list)
        if not all(isinstance(r, str) for r in refused):
            raise RemoteProtocolError("refused must be a list of strings")
        return DeliverReply(
            **head,
            report=_report(d["report"]),
            refused=tuple(refused),
            store_epoch=_opt_int(d, "store_epoch"),
        )

    try:
        packet = build()
    except (KeyError, TypeError, ValueError) as exc:
        raise RemoteProtocolError(f"malformed {cls.__name__}: {exc!r}") from None
    if len(used) != len(blobs):
        raise RemoteProtocolError(
            f"shuffle packet carries {len(blobs) - len(used)} blobs it does not refer to "
            "(every blob is referred to exactly once)"
        )
    return packet
