"""The codecs of the stages after the recovery request's rows: the evidence stage
(``RevealRequest``, ``Reveal``) and the survivor views (``ViewRequest``, ``ViewReply``); the
registry that names them is :data:`coded_fl.secagg.messages.codecs.CODECS`."""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING

import numpy as np

from coded_fl.errors import RemoteProtocolError
from coded_fl.secagg.derive import CONTEXT_BYTES
from coded_fl.secagg.evidence import EPHEMERAL_BYTES, SIGNATURE_SIZES
from coded_fl.secagg.messages.framing import Head, Parts, Reader, blob_bytes, signed_sizes
from coded_fl.secagg.messages.records import (
    TOKEN_BYTES,
    Limits,
    Message,
    Reveal,
    RevealRequest,
    ViewReply,
    ViewRequest,
)

if TYPE_CHECKING:
    from coded_fl.secagg.messages.codecs import Sizes

__all__ = ["VIEW_SIGNATURE_SIZES"]


#: The sizes a view signature may have (P-256 or P-384; a view is never unsigned).
VIEW_SIGNATURE_SIZES = tuple(s for s in SIGNATURE_SIZES if s)


# ----------------------------------------------------------------------------- RevealRequest
def _write_reveal_request(msg: RevealRequest, parts: Parts) -> None:
    identity, endorsement = msg.accuser_credential
    parts.append(struct.pack("<iB", msg.accuser, int(bool(msg.derived))))
    parts += [blob_bytes(b) for b in (msg.context, msg.item, msg.accuser_key)]
    parts += [blob_bytes(identity), blob_bytes(endorsement), blob_bytes(msg.accusation)]


def _read_reveal_request(r: Reader, head: Head, lim: Limits | None, sz: Sizes) -> Message:
    accuser, flag = r.unpack("<iB")
    if flag > 1:
        raise RemoteProtocolError(f"derived flag {flag} is not 0 or 1")
    context = r.blob(CONTEXT_BYTES, "share context")
    if lim is None:
        item = r.blob(None, "disputed item")
    elif flag:
        item = r.blob_in(signed_sizes(TOKEN_BYTES), "disputed token")
    else:
        item = r.blob_in(sz.share_sizes, "disputed sealed share")
    accuser_key = r.blob(sz.key_size, "public key")
    credential = r.credential()
    accusation = r.blob_in(SIGNATURE_SIZES, "accusation signature")
    return RevealRequest(
        **head,
        accuser=accuser,
        derived=bool(flag),
        context=context,
        item=item,
        accuser_key=accuser_key,
        accuser_credential=credential,
        accusation=accusation,
    )


# ----------------------------------------------------------------------------- Reveal
def _write_reveal(msg: Reveal, parts: Parts) -> None:
    parts.append(struct.pack("<i", msg.accuser) + blob_bytes(msg.secret))


def _read_reveal(r: Reader, head: Head, lim: Limits | None, sz: Sizes) -> Message:
    (accuser,) = r.unpack("<i")
    return Reveal(**head, accuser=accuser, secret=r.blob(EPHEMERAL_BYTES, "revealed scalar"))


# ----------------------------------------------------------------------------- ViewRequest
def _write_view_request(msg: ViewRequest, parts: Parts) -> None:
    parts.append(struct.pack("<I", len(msg.survivors)))
    parts.append(np.asarray(msg.survivors, dtype="<i4").tobytes())


def _read_view_request(r: Reader, head: Head, lim: Limits | None, sz: Sizes) -> Message:
    n = r.count(4, None if lim is None else lim.silos, "survivors")
    if lim is not None and n < lim.min_survivors:
        raise RemoteProtocolError(
            f"{n} survivors; the configuration needs {lim.min_survivors}..{lim.silos}"
        )
    survivors = tuple(int(v) for v in np.frombuffer(r.take(4 * n), dtype="<i4"))
    return ViewRequest(**head, survivors=survivors)


# ----------------------------------------------------------------------------- ViewReply
def _write_view_reply(msg: ViewReply, parts: Parts) -> None:
    parts.append(blob_bytes(msg.signature))


def _read_view_reply(r: Reader, head: Head, lim: Limits | None, sz: Sizes) -> Message:
    return ViewReply(**head, signature=r.blob_in(VIEW_SIGNATURE_SIZES, "view signature"))
