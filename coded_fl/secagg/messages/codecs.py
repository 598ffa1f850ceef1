"""Every message type's body layout, its writer and its reader side by side (:data:`CODECS`).

A writer appends the body's pieces after the header; the reader of the same type, right below
it, checks every count and length against the bytes left and the receiver's :class:`Sizes`
before it builds anything. A TrainRequest and an Upload end with their masking scheme's
extension, if any (:mod:`~coded_fl.secagg.messages.extensions`)."""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from coded_fl.errors import InputError, RemoteProtocolError
from coded_fl.secagg.derive import CONTEXT_BYTES
from coded_fl.secagg.evidence import SIGNATURE_SIZES
from coded_fl.secagg.messages.extensions import read_extension, write_extension
from coded_fl.secagg.messages.framing import (
    Head,
    Parts,
    Reader,
    blob_bytes,
    credential_pairs,
    signed_or_empty,
    signed_sizes,
    vector_bytes,
)
from coded_fl.secagg.messages.records import (
    MAX_CONFIG_BYTES,
    MAX_DETAIL_BYTES,
    MAX_WEIGHT_BOUND,
    NO_SILO,
    TAG_ENTRY_BYTES,
    TOKEN_BYTES,
    KeyReply,
    KeyRequest,
    Limits,
    Message,
    RecoveryReply,
    RecoveryRequest,
    Refusal,
    RefusalCode,
    Reveal,
    RevealRequest,
    TrainRequest,
    Upload,
    ViewReply,
    ViewRequest,
)
from coded_fl.secagg.messages.stage_codecs import (
    VIEW_SIGNATURE_SIZES,
    _read_reveal,
    _read_reveal_request,
    _read_view_reply,
    _read_view_request,
    _write_reveal,
    _write_reveal_request,
    _write_view_reply,
    _write_view_request,
)


@dataclass(frozen=True)
class Sizes:
    """The sizes a receiver's :class:`Limits` fix for :func:`decode`'s readers (None: any
    size, for a receiver without limits)."""

    key_size: int | None = None
    share_sizes: tuple[int, ...] | None = None
    tag_sizes: tuple[int, ...] | None = None
    silos: int | None = None

    @classmethod
    def of(cls, lim: Limits | None) -> Sizes:
        """The sizes ``lim`` fixes (all None without limits).

        Parameters
        ----------
        lim
            The receiver's limits, if it knows its configuration.
        """
        if lim is None:
            return cls()
        return cls(
            key_size=lim.public_key_bytes,
            share_sizes=signed_sizes(lim.sealed_share_bytes),
            tag_sizes=signed_sizes(TAG_ENTRY_BYTES),
            silos=lim.silos,
        )


class Codec(NamedTuple):
    """One message type's layout: ``write`` appends its body to the parts after the header,
    ``read`` parses the body (the header already read into ``head``) and builds the message."""

    write: Callable[[Any, Parts], None]
    read: Callable[[Reader, Head, Limits | None, Sizes], Message]


# ----------------------------------------------------------------------------- KeyRequest
def _write_key_request(msg: KeyRequest, parts: Parts) -> None:
    parts.append(blob_bytes(msg.config))


def _read_key_request(r: Reader, head: Head, lim: Limits | None, sz: Sizes) -> Message:
    (size,) = r.unpack("<I")
    if size > MAX_CONFIG_BYTES:
        raise RemoteProtocolError(f"configuration of {size} bytes exceeds {MAX_CONFIG_BYTES} bytes")
    return KeyRequest(**head, config=bytes(r.take(size)))


# ----------------------------------------------------------------------------- KeyReply
def _write_key_reply(msg: KeyReply, parts: Parts) -> None:
    parts += [blob_bytes(msg.public_key), blob_bytes(msg.identity), blob_bytes(msg.signature)]


def _read_key_reply(r: Reader, head: Head, lim: Limits | None, sz: Sizes) -> Message:
    public_key = r.blob(sz.key_size, "public key")
    identity, signature = r.credential()
    return KeyReply(**head, public_key=public_key, identity=identity, signature=signature)


# ----------------------------------------------------------------------------- TrainRequest
def _write_train_request(msg: TrainRequest, parts: Parts) -> None:
    creds = credential_pairs(msg.credentials, len(msg.roster), "roster")
    parts.append(struct.pack("<I", len(msg.roster)))
    parts += [
        struct.pack("<i", s) + blob_bytes(k) + blob_bytes(i) + blob_bytes(g)
        for (s, k), (i, g) in zip(msg.roster, creds, strict=True)
    ]
    parts.append(struct.pack("<B", int(bool(msg.aligned))))
    write_extension(msg, parts)


def _read_train_request(r: Reader, head: Head, lim: Limits | None, sz: Sizes) -> Message:
    n = r.count(16, sz.silos, "roster")
    entries = [
        (r.unpack("<i")[0], r.blob(sz.key_size, "public key"), r.credential()) for _ in range(n)
    ]
    roster = tuple((s, k) for s, k, _ in entries)
    creds = signed_or_empty(tuple(c for _, _, c in entries))
    (flag,) = r.unpack("<B")
    if flag > 1:
        raise RemoteProtocolError(f"aligned flag {flag} is not 0 or 1")
    return TrainRequest(
        **head,
        roster=roster,
        credentials=creds,
        aligned=bool(flag),
        extension=read_extension(r, TrainRequest, lim),
    )


# ----------------------------------------------------------------------------- Upload
def _write_upload(msg: Upload, parts: Parts) -> None:
    masked = vector_bytes(msg.masked)
    parts += [struct.pack("<I", masked.nbytes), masked]
    parts.append(blob_bytes(msg.context))
    parts.append(struct.pack("<I", len(msg.tags)))
    parts += [struct.pack("<i", r) + blob_bytes(c) for r, c in msg.tags]
    parts.append(struct.pack("<I", len(msg.shares)))
    parts += [struct.pack("<i", r) + blob_bytes(c) for r, c in msg.shares]
    write_extension(msg, parts)


def _read_upload(r: Reader, head: Head, lim: Limits | None, sz: Sizes) -> Message:
    (nbytes,) = r.unpack("<I")
    if nbytes % 4:
        raise RemoteProtocolError("masked vector length is not a multiple of 4 bytes")
    if lim is not None and nbytes != 4 * lim.vector_length:
        raise RemoteProtocolError(
            f"masked vector has {nbytes // 4} elements, expected {lim.vector_length}"
        )
    masked = r.vector(nbytes // 4)
    context = r.blob(None, "share context")
    if lim is not None and len(context) not in (0, CONTEXT_BYTES):  # 0: a group-masked round
        raise RemoteProtocolError(
            f"share context has {len(context)} bytes, expected {CONTEXT_BYTES} (or none)"
        )
    n = r.count(8, sz.silos, "tags")
    tags = tuple((r.unpack("<i")[0], r.blob_in(sz.tag_sizes, "tag entry")) for _ in range(n))
    n = r.count(8, sz.silos, "shares")
    shares = tuple((r.unpack("<i")[0], r.blob_in(sz.share_sizes, "sealed share")) for _ in range(n))
    return Upload(
        **head,
        masked=masked,
        shares=shares,
        context=context,
        tags=tags,
        extension=read_extension(r, Upload, lim),
    )


# ----------------------------------------------------------------------------- RecoveryRequest
def _write_recovery_request(msg: RecoveryRequest, parts: Parts) -> None:
    n = len(msg.survivors)
    tokens = msg.tokens or (b"",) * n
    if (
        any(len(w) != n for w in msg.weights)
        or len(msg.shares) != n
        or len(msg.keys) != n
        or len(tokens) != n
    ):
        raise InputError("RecoveryRequest: weights, shares, tokens, keys must match the survivors")
    parts.append(struct.pack("<II", n, len(msg.weights)))
    parts.append(np.asarray(msg.survivors, dtype="<i4").tobytes())
    parts.append(np.asarray(msg.weights, dtype="<u4").reshape(-1).tobytes())
    parts += [blob_bytes(c) for c in msg.shares]
    parts += [blob_bytes(t) for t in tokens]
    creds = credential_pairs(msg.credentials, n, "survivors")
    parts += [
        blob_bytes(k) + blob_bytes(i) + blob_bytes(g)
        for k, (i, g) in zip(msg.keys, creds, strict=True)
    ]
    if msg.views and len(msg.views) != n:
        raise InputError("RecoveryRequest: one view signature per survivor, or none")
    parts.append(struct.pack("<I", len(msg.views)))
    parts += [blob_bytes(v) for v in msg.views]


def _read_recovery_request(r: Reader, head: Head, lim: Limits | None, sz: Sizes) -> Message:
    n, rows = r.unpack("<II")
    # every weight row has one entry per survivor and n - s >= 1, so rows <= |S|
    most = n if lim is None else min(lim.max_rows, n - lim.min_survivors + 1)
    if lim is not None and lim.comparisons and n > lim.min_survivors:
        most = min(lim.max_rows, 1 + lim.comparisons)
    if lim is not None and not lim.min_survivors <= n <= lim.silos:
        raise RemoteProtocolError(
            f"{n} survivors; the configuration needs {lim.min_survivors}..{lim.silos}"
        )
    if rows > most:
        raise RemoteProtocolError(f"{rows} weight rows for {n} survivors (at most {most})")
    if 4 * n * (6 + rows) > r.left():  # survivors, weights, five length fields each
        raise RemoteProtocolError("message is truncated or has a bad length field")
    survivors = tuple(int(v) for v in np.frombuffer(r.take(4 * n), dtype="<i4"))
    w = np.frombuffer(r.take(4 * n * rows), dtype="<u4").reshape(rows, n)
    weights = tuple(tuple(int(v) for v in row) for row in w)
    boxes = tuple(r.blob(None, "sealed share") for _ in range(n))
    tokens = tuple(r.blob(None, "share token") for _ in range(n))
    signed = [(r.blob(sz.key_size, "public key"), r.credential()) for _ in range(n)]
    keys = tuple(k for k, _ in signed)
    for box, token in zip(boxes, tokens, strict=True):  # exactly one of the two
        if lim is not None and not (
            (len(box) in (sz.share_sizes or ()) and not token)
            or (not box and len(token) in signed_sizes(TOKEN_BYTES))
        ):
            raise RemoteProtocolError(
                f"a survivor's entry has a sealed share of {len(box)} bytes and a token of "
                f"{len(token)} bytes; expected exactly one ({list(sz.share_sizes or ())} or "
                f"{list(signed_sizes(TOKEN_BYTES))})"
            )
    count = r.count(4 + min(VIEW_SIGNATURE_SIZES), n, "view signatures")
    if count not in (0, n):
        raise RemoteProtocolError(f"{count} view signatures for {n} survivors (expected 0 or {n})")
    views = tuple(r.blob_in(VIEW_SIGNATURE_SIZES, "view signature") for _ in range(count))
    return RecoveryRequest(
        **head,
        survivors=survivors,
        weights=weights,
        shares=boxes,
        keys=keys,
        tokens=tokens,
        credentials=signed_or_empty(tuple(c for _, c in signed)),
        views=views,
    )


# ----------------------------------------------------------------------------- RecoveryReply
def _write_recovery_reply(msg: RecoveryReply, parts: Parts) -> None:
    rows = msg.rows
    if rows.dim() != 2:
        raise InputError("RecoveryReply rows must be a 2-D tensor")
    parts.append(struct.pack("<II", rows.shape[0], rows.shape[1]))
    parts.append(vector_bytes(rows.reshape(-1)))


def _read_recovery_reply(r: Reader, head: Head, lim: Limits | None, sz: Sizes) -> Message:
    rows, cols = r.unpack("<II")
    if lim is not None and (rows > lim.max_rows or cols != lim.piece_length):
        raise RemoteProtocolError(
            f"recovery reply of {rows} x {cols}; the configuration allows at most "
            f"{lim.max_rows} rows of {lim.piece_length}"
        )
    if rows * cols * 4 > r.left():
        raise RemoteProtocolError("message is truncated or has a bad length field")
    return RecoveryReply(**head, rows=r.vector(rows * cols).reshape(rows, cols))


# ----------------------------------------------------------------------------- Refusal
def _write_refusal(msg: Refusal, parts: Parts) -> None:
    accused = NO_SILO if msg.accused is None else int(msg.accused)
    detail = msg.detail.encode("utf-8")[:MAX_DETAIL_BYTES]
    if not 0 <= int(msg.bound) <= MAX_WEIGHT_BOUND:
        raise InputError(f"refusal bound must be in [0, 2^62], got {msg.bound}")
    parts.append(struct.pack("<BiQ", int(msg.code), accused, int(msg.bound)))
    parts.append(blob_bytes(detail.decode("utf-8", "ignore").encode("utf-8")))
    parts.append(blob_bytes(msg.evidence))


def _read_refusal(r: Reader, head: Head, lim: Limits | None, sz: Sizes) -> Message:
    code, accused, bound = r.unpack("<BiQ")
    try:
        reason = RefusalCode(code)
    except ValueError:
        raise RemoteProtocolError(f"unknown refusal code {code}") from None
    if bound > MAX_WEIGHT_BOUND or (bound != 0) != (reason == RefusalCode.WEIGHT_BOUND):
        raise RemoteProtocolError(
            f"refusal bound {bound} does not fit code {reason.label} (a power of two "
            "<= 2^62 for a weight-bound refusal, 0 otherwise)"
        )
    if bound and bound & (bound - 1):
        raise RemoteProtocolError(f"refusal bound {bound} is not a power of two")
    (size,) = r.unpack("<I")
    if size > MAX_DETAIL_BYTES:
        raise RemoteProtocolError(f"refusal detail exceeds {MAX_DETAIL_BYTES} bytes")
    detail = bytes(r.take(size)).decode("utf-8", "replace")
    evidence = r.blob_in(SIGNATURE_SIZES, "accusation signature")
    if evidence and reason != RefusalCode.ACCUSES:
        raise RemoteProtocolError(f"a {reason.label} refusal carries an accusation signature")
    return Refusal(
        **head,
        code=reason,
        accused=None if accused == NO_SILO else accused,
        detail=detail,
        bound=bound,
        evidence=evidence,
    )


#: Every message type's writer and reader, by class.
CODECS: dict[type[Message], Codec] = {
    KeyRequest: Codec(_write_key_request, _read_key_request),
    KeyReply: Codec(_write_key_reply, _read_key_reply),
    TrainRequest: Codec(_write_train_request, _read_train_request),
    Upload: Codec(_write_upload, _read_upload),
    RecoveryRequest: Codec(_write_recovery_request, _read_recovery_request),
    RecoveryReply: Codec(_write_recovery_reply, _read_recovery_reply),
    Refusal: Codec(_write_refusal, _read_refusal),
    RevealRequest: Codec(_write_reveal_request, _read_reveal_request),
    Reveal: Codec(_write_reveal, _read_reveal),
    ViewRequest: Codec(_write_view_request, _read_view_request),
    ViewReply: Codec(_write_view_reply, _read_view_reply),
}

#: The message class of each wire type byte (what a header names), from the same registry.
TYPES: dict[int, type[Message]] = {cls.TYPE: cls for cls in CODECS}
