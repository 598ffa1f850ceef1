"""The edge keys of group-aligned masks: who deals each, sealing and opening it, its tag.

Each mask-graph edge (q, h) has a 32-byte key, dealt once per run by one silo of its two
groups (:func:`edge_dealer`) and sealed to the others (:func:`seal_edge_key`,
:func:`open_edge_key`); the members confirm it to the server with :func:`edge_tag`. The
masking it serves: :mod:`coded_fl.secagg.aligned`.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import struct
from collections.abc import Sequence

from coded_fl.crypto import open_sealed, seal
from coded_fl.errors import InputError, RemoteProtocolError
from coded_fl.secagg.aligned_graph import Edge, edge_silos

__all__ = [
    "EDGE_KEY_BYTES",
    "EDGE_PURPOSE",
    "EDGE_TAG_BYTES",
    "edge_dealer",
    "edge_tag",
    "new_edge_key",
    "open_edge_key",
    "seal_edge_key",
]
#: Bytes of an edge key.
EDGE_KEY_BYTES = 32
#: The sealing purpose of a dealt edge key (never the purpose of a mask share).
EDGE_PURPOSE = b"group-edge-key"
_TAG_LABEL = b"coded-fl/v2/edge-confirm"
#: Bytes of an edge key's confirmation tag.
EDGE_TAG_BYTES = 8


def edge_dealer(edge: Edge, groups: Sequence[Sequence[int]], members: Sequence[int]) -> int:
    """The silo that deals ``edge``'s key: the smallest silo of the edge's two groups that is a
    member this run (has keys). The others of the two groups receive it sealed.

    Parameters
    ----------
    edge
        (q, h).
    groups
        The repetition code's silo groups.
    members
        The silos with keys.

    Returns
    -------
    int

    Raises
    ------
    InputError
        If neither group has a member (nobody can deal the key).
    """
    q, h = edge
    present = set(members)
    holders = sorted(edge_silos(groups, edge) & present)
    if not holders:
        raise InputError(f"no silo of groups {q} and {h} has keys: edge {edge} cannot be dealt")
    return holders[0]


def new_edge_key() -> bytes:
    """A fresh edge key from the OS CSPRNG (secret: never log it)."""
    return os.urandom(EDGE_KEY_BYTES)


def _edge_counter(edge: Edge) -> int:
    q, h = edge
    if not 0 <= q < h < 2**31:
        raise InputError(f"an edge is (q, h) with 0 <= q < h < 2**31, got {edge!r}")
    return (q << 32) | h


def _box_context(run_id: bytes, dealer: int, recipient: int, edge: Edge) -> dict:
    """The associated data of a dealt edge key (round 0: keys are dealt once per run)."""
    return {
        "run_id": run_id,
        "round_": 0,
        "sender": dealer,
        "recipient": recipient,
        "purpose": EDGE_PURPOSE,
        "counter": _edge_counter(edge),
    }


def seal_edge_key(
    key: bytes, edge_key: bytes, *, run_id: bytes, dealer: int, recipient: int, edge: Edge
) -> bytes:
    """``edge_key`` sealed from ``dealer`` to ``recipient`` (:func:`~coded_fl.crypto.seal`).

    Parameters
    ----------
    key
        The pairwise key of ``dealer`` and ``recipient``.
    edge_key
        The :data:`EDGE_KEY_BYTES`-byte edge key (:func:`new_edge_key`).
    run_id, dealer, recipient, edge
        The associated data: the box opens only for this run, pair and edge.

    Returns
    -------
    bytes
        The box: the key plus :data:`~coded_fl.crypto.SEAL_OVERHEAD` bytes.

    Raises
    ------
    InputError
        If ``edge_key`` is not :data:`EDGE_KEY_BYTES` bytes or the edge is malformed.
    """
    if not isinstance(edge_key, bytes) or len(edge_key) != EDGE_KEY_BYTES:
        raise InputError(f"an edge key is {EDGE_KEY_BYTES} bytes")
    return seal(key, edge_key, **_box_context(run_id, dealer, recipient, edge))


def open_edge_key(
    key: bytes, box: bytes, *, run_id: bytes, dealer: int, recipient: int, edge: Edge
) -> bytes:
    """The edge key ``dealer`` sealed for ``recipient``.

    Parameters
    ----------
    key
        The pairwise key of ``dealer`` and ``recipient``.
    box
        What :func:`seal_edge_key` returned.
    run_id, dealer, recipient, edge
        The associated data it was sealed with.

    Returns
    -------
    bytes
        The edge key (secret: never log it).

    Raises
    ------
    RemoteProtocolError
        Naming the dealer, if the box was altered, re-addressed or sealed for another edge.
    """
    raw = open_sealed(key, box, **_box_context(run_id, dealer, recipient, edge))
    if len(raw) != EDGE_KEY_BYTES:  # authenticated, so the dealer itself sent a wrong length
        raise RemoteProtocolError(
            f"edge key {edge} has {len(raw)} bytes, expected {EDGE_KEY_BYTES}", sender=dealer
        )
    return raw


def edge_tag(edge_key: bytes, *, run_id: bytes, edge: Edge) -> bytes:
    """A short key-confirmation tag of an edge key: the members of the edge's groups send it
    with their uploads, and the server starts group-masked rounds only when every member
    reports the same tag for every edge at its group (it learns nothing about the key).

    Parameters
    ----------
    edge_key
        The edge's key.
    run_id, edge
        What the tag is bound to.

    Returns
    -------
    bytes
        :data:`EDGE_TAG_BYTES` bytes of HMAC-SHA256.
    """
    msg = _TAG_LABEL + struct.pack("<QI", _edge_counter(edge), len(run_id)) + run_id
    return hmac.new(edge_key, msg, hashlib.sha256).digest()[:EDGE_TAG_BYTES]
