"""What the shuffle transport sends: the public job, the packets between relay and members, and
their encoding (sans-IO; the Flower adapters only move these bytes).

A :class:`ShuffleJob` is what the relay knows about one epoch and may tell everyone: the run and
epoch, K, t, the mode, the unit ids and the current and next assignments. Unit contents, their
lengths and SHA-256 hashes (the manifest) never appear in it: members exchange those sealed under
the epoch's group key (:mod:`~coded_fl.shuffling.transport.member`).

Members: silos ``0..K-1``, and in the centralized setting the central sender, member ``K``.

Packets (relay -> member requests, member -> relay replies), in protocol order::

    Hello(job)                   -> HelloReply(public key, tag, store epoch[, continuation])
    GroupKeyRequest(roster)      -> GroupKeyReply(sealed boxes, sealed manifest share)   leader only
    JoinRequest(roster, box)     -> JoinReply(sealed manifest share)                     the others
    PlanRequest(shares, roster)  -> PlanReply(plan id, coded messages)
    DeliverRequest(messages)     -> DeliverReply(delivery report, store epoch)          silos only

Encoding: ``"CFLS" | version u8 | kind u8 | JSON length u32 | JSON | blob count u32 |
(blob length u64 | blob)*``. Control fields travel in the JSON, byte strings as blobs referenced
by index (version 2: the key continuation of :mod:`~coded_fl.shuffling.transport.keyreuse` in
HelloReply and the roster in PlanRequest). :func:`decode` checks every length and type and raises
:class:`~coded_fl.errors.RemoteProtocolError` for anything malformed.

Where the parts live: the job in :mod:`~coded_fl.shuffling.transport.job`, the packet classes in
:mod:`~coded_fl.shuffling.transport.packets`, the codecs of rosters, delivery reports and coded
messages in :mod:`~coded_fl.shuffling.transport.payloads`; this module frames a packet and
re-exports them.

>>> job = ShuffleJob.make(run_id="r", epoch=1, current={0: {0}, 1: {1}}, nxt={0: {1}, 1: {0}},
...                       K=2, t=1)
>>> decode(encode(Hello(job.digest(), -1, job))).job == job
True
"""

from __future__ import annotations

import json
import struct
from typing import Any

from coded_fl.errors import InputError, RemoteProtocolError
from coded_fl.shuffling.transport.fields import _int_list, _opt_int, _typed, _unit_list
from coded_fl.shuffling.transport.job import ShuffleJob
from coded_fl.shuffling.transport.packets import (
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
)
from coded_fl.shuffling.transport.payloads import (
    _report,
    _report_json,
    decode_message,
    encode_message,
    roster_from_json,
    roster_to_json,
)

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
VERSION = 2
_HEAD = struct.Struct("<4sBBI")


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
        d["resume"] = p.resume.hex()
        d["resume_members"] = list(p.resume_members)
        d["resume_share"] = blobs.add(p.resume_share)
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
        d["roster"] = None if p.roster is None else roster_to_json(p.roster)
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
                resume=bytes.fromhex(_typed(d, "resume", str)),
                resume_members=tuple(_int_list(_typed(d, "resume_members", list))),
                resume_share=blob(d["resume_share"]),
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
            roster = d["roster"]
            return PlanRequest(
                **head,
                shares=pairs(d["shares"]),
                roster=None if roster is None else roster_from_json(roster),
            )
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
