"""The aligned scheme's message extensions (:class:`~coded_fl.secagg.masking.aligned.AlignedMasks`
declares them; registering the scheme registers their codecs).

- :class:`EdgeKeyRequest` on a TrainRequest: the edge keys other silos sealed for this one,
  relayed, and the deal instructions (which of its edge keys this silo seals, for whom);
- :class:`EdgeKeyUpload` on an Upload: the edge keys sealed as asked, and one confirmation tag
  per edge key the silo holds.

Layouts (little endian), after the message's shared fields and the extension id byte::

    EdgeKeyRequest: count u32 | (dealer i32, q u32, h u32, box) * count
                    | count u32 | (q u32, h u32, recipient i32) * count
    EdgeKeyUpload:  count u32 | (recipient i32, q u32, h u32, box) * count
                    | count u32 | (q u32, h u32, tag) * count

A receiver with :class:`~coded_fl.secagg.messages.Limits` accepts at most ``edges`` relayed keys
and confirmations, at most ``edges`` * n deals, boxes of exactly the sealed edge key's size and
tags of the confirmation's.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import ClassVar

from coded_fl.crypto import SEAL_OVERHEAD
from coded_fl.secagg.derive import CONFIRM_BYTES
from coded_fl.secagg.edge_keys import EDGE_KEY_BYTES
from coded_fl.secagg.messages import Limits, Message, TrainRequest, Upload
from coded_fl.secagg.messages.extensions import ExtensionCodec, MessageExtension
from coded_fl.secagg.messages.framing import Parts, Reader, blob_bytes

__all__ = [
    "EDGE_KEY_REQUEST",
    "EDGE_KEY_UPLOAD",
    "EdgeKeyRequest",
    "EdgeKeyUpload",
    "request_edges",
    "upload_edges",
]

#: The size of a sealed edge key.
BOX_BYTES = EDGE_KEY_BYTES + SEAL_OVERHEAD


@dataclass(frozen=True)
class EdgeKeyRequest(MessageExtension):
    """Server -> silo, on a TrainRequest: ``edge_keys`` relays the edge keys other silos sealed
    for this one, as (dealer, q, h, box); ``deal`` asks this silo to seal its key of edge
    (q, h) for ``recipient`` in its upload, as (q, h, recipient) (a dealer without the key
    makes it first)."""

    WIRE_ID: ClassVar[int] = 1
    MESSAGE: ClassVar[type[Message] | None] = TrainRequest
    edge_keys: tuple[tuple[int, int, int, bytes], ...] = ()
    deal: tuple[tuple[int, int, int], ...] = ()


@dataclass(frozen=True)
class EdgeKeyUpload(MessageExtension):
    """Silo -> server, on an Upload: ``dealt``, the edge keys sealed as the request's ``deal``
    asked, as (recipient, q, h, box); ``confirms``, one key-confirmation tag per edge key the
    silo holds, as (q, h, tag)."""

    WIRE_ID: ClassVar[int] = 2
    MESSAGE: ClassVar[type[Message] | None] = Upload
    dealt: tuple[tuple[int, int, int, bytes], ...] = ()
    confirms: tuple[tuple[int, int, bytes], ...] = ()


def request_edges(
    msg: TrainRequest,
) -> tuple[tuple[tuple[int, int, int, bytes], ...], tuple[tuple[int, int, int], ...]]:
    """A request's relayed edge keys and deal instructions (both empty without them).

    Parameters
    ----------
    msg
        The request (its extension, if any, already checked against the run's scheme).
    """
    ext = msg.extension
    return (ext.edge_keys, ext.deal) if isinstance(ext, EdgeKeyRequest) else ((), ())


def upload_edges(
    msg: Upload,
) -> tuple[tuple[tuple[int, int, int, bytes], ...], tuple[tuple[int, int, bytes], ...]]:
    """An upload's dealt edge keys and confirmations (both empty without them).

    Parameters
    ----------
    msg
        The upload (its extension, if any, already checked against the run's scheme).
    """
    ext = msg.extension
    return (ext.dealt, ext.confirms) if isinstance(ext, EdgeKeyUpload) else ((), ())


def _deals_most(lim: Limits | None) -> int | None:
    return None if lim is None else lim.edges * lim.silos


# ----------------------------------------------------------------------------- EdgeKeyRequest
def _write_request(ext: EdgeKeyRequest, parts: Parts) -> None:
    parts.append(struct.pack("<I", len(ext.edge_keys)))
    parts += [struct.pack("<iII", d, q, h) + blob_bytes(b) for d, q, h, b in ext.edge_keys]
    parts.append(struct.pack("<I", len(ext.deal)))
    parts += [struct.pack("<IIi", q, h, r) for q, h, r in ext.deal]


def _read_request(r: Reader, lim: Limits | None) -> EdgeKeyRequest:
    box = None if lim is None else BOX_BYTES
    n = r.count(16, None if lim is None else lim.edges, "relayed edge keys")
    edge_keys = tuple((*r.unpack("<iII"), r.blob(box, "sealed edge key")) for _ in range(n))
    n = r.count(12, _deals_most(lim), "deal")
    deal = tuple(r.unpack("<IIi") for _ in range(n))
    return EdgeKeyRequest(edge_keys=edge_keys, deal=deal)  # type: ignore[arg-type]


# ----------------------------------------------------------------------------- EdgeKeyUpload
def _write_upload(ext: EdgeKeyUpload, parts: Parts) -> None:
    parts.append(struct.pack("<I", len(ext.dealt)))
    parts += [struct.pack("<iII", r, q, h) + blob_bytes(b) for r, q, h, b in ext.dealt]
    parts.append(struct.pack("<I", len(ext.confirms)))
    parts += [struct.pack("<II", q, h) + blob_bytes(t) for q, h, t in ext.confirms]


def _read_upload(r: Reader, lim: Limits | None) -> EdgeKeyUpload:
    box, tag = (None, None) if lim is None else (BOX_BYTES, CONFIRM_BYTES)
    n = r.count(16, _deals_most(lim), "dealt edge keys")
    dealt = tuple((*r.unpack("<iII"), r.blob(box, "sealed edge key")) for _ in range(n))
    n = r.count(12, None if lim is None else lim.edges, "edge confirmations")
    confirms = tuple((*r.unpack("<II"), r.blob(tag, "edge tag")) for _ in range(n))
    return EdgeKeyUpload(dealt=dealt, confirms=confirms)  # type: ignore[arg-type]


#: The aligned scheme's extension codecs (its request's and its upload's).
EDGE_KEY_REQUEST = ExtensionCodec(EdgeKeyRequest, _write_request, _read_request)
EDGE_KEY_UPLOAD = ExtensionCodec(EdgeKeyUpload, _write_upload, _read_upload)
