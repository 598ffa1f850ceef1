"""Group-aligned masks: the masking of a one-round-trip coded round (``masking="aligned"``).

The machines use it when the run's configuration says ``masking="aligned"``
(``docs/protocol.md``, "One round trip with group-aligned masks"): the edge keys are dealt
through the first rounds' messages, then every round is group-masked.

**Idea.** With the repetition code the server decodes from one reply per silo group, and every
member i of group q sends the same combination :math:`G_q` (the sum of the group's partition
updates), scaled by its own :math:`r_i`. If every member also adds the same group mask
:math:`\\zeta_q` (scaled likewise), and the group masks sum to zero, the masks cancel in the
decoded sum for *every* survivor set that keeps a silo per group: the server needs no recovery
round trip, whoever straggles.

The masks: the g groups are the vertices of a mask graph (:func:`mask_graph`, a Harary graph,
:math:`\\min(\\max(T+1, 2), g-1)`-connected with the fewest edges). Each edge (q, h), q < h,
has a 32-byte *edge key* known to the members of q and h only (dealt once per run by one of
them, sealed to the others: :func:`edge_dealer`, :func:`seal_edge_key`). Per round, each edge
key gives an exactly uniform stream :math:`e_{qh}` over GF(p) (AES-CTR with rejection sampling,
:class:`~coded_fl.prg.MaskStream`, seeded by :func:`edge_seed`), and

.. math:: \\zeta_q = \\sum_{h > q} e_{qh} - \\sum_{h < q} e_{hq}, \\qquad \\sum_q \\zeta_q = 0.

**Privacy** (the argument of Bonawitz et al.'s pairwise masks, on groups): T colluding silos
sit in at most T groups and know the edge keys of those groups' edges only. Removing at most T
vertices from a (T+1)-connected graph leaves it connected, and every edge among the remaining
groups carries a stream the coalition cannot compute, so their masks are uniform subject to
summing to minus the coalition's (known) masks: the server's view, the masked group updates
:math:`G_q + \\zeta_q`, reveals the sum of the other groups' updates and nothing else. What a
colluding member reveals of its own group is :math:`G_q`, which it computes itself from the
partitions it holds (replicas of a partition hold the same data). ``tests/unit/
test_secagg_aligned.py`` checks this by exact enumeration in a small field, and shows that a
graph of lower connectivity leaks.

**One mask per (run, round, request, training inputs).** :func:`mask_context` binds the
streams to the request and to a digest of everything the silo's training consumes, as it was
sent (the model, the train spec with ``max-weight`` and ``delta-scale``, and the user's config
record: ``clients.mod._model_digest``), and to nothing silo-specific: every member of a group
must derive the same mask. A server that sends replicas different inputs (to subtract their
uploads: a member sent ``max-weight`` 2^100 uploads a zero update, and the difference would be
the group's partition sum) gets uploads under independent masks
(``tests/unit/test_server_inputs_bound.py``); a second upload of the same round for the same
request and inputs is the same upload.

>>> mask_graph(5, 1)  # T = 1: a cycle (2-connected)
((0, 1), (0, 4), (1, 2), (2, 3), (3, 4))
>>> mask_graph(4, 5)  # T >= g - 1: the complete graph
((0, 1), (0, 2), (0, 3), (1, 2), (1, 3), (2, 3))
"""

from __future__ import annotations

import hashlib
import hmac
import os
import struct
from collections.abc import Mapping, Sequence

import numpy as np
import torch
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from coded_fl.crypto import open_sealed, seal
from coded_fl.errors import ConfigurationError, InputError, RemoteProtocolError
from coded_fl.field import PrimeField
from coded_fl.prg import SEED_BYTES, MaskStream

__all__ = [
    "EDGE_KEY_BYTES",
    "EDGE_PURPOSE",
    "EDGE_TAG_BYTES",
    "Edge",
    "edge_dealer",
    "edge_seed",
    "edge_silos",
    "edge_tag",
    "group_mask",
    "group_mask_streams",
    "incident",
    "mask_context",
    "mask_graph",
    "new_edge_key",
    "open_edge_key",
    "seal_edge_key",
]

#: An edge of the mask graph: two group indices, the smaller first.
Edge = tuple[int, int]
#: Bytes of an edge key.
EDGE_KEY_BYTES = 32
#: The sealing purpose of a dealt edge key (never the purpose of a mask share).
EDGE_PURPOSE = b"group-edge-key"
_SEED_INFO = b"coded-fl/v2/aligned-mask"
_TAG_LABEL = b"coded-fl/v2/edge-confirm"
#: Bytes of an edge key's confirmation tag.
EDGE_TAG_BYTES = 8
_CONTEXT_LABEL = b"coded-fl/v2/aligned-context"


def mask_graph(groups: int, threshold: int) -> tuple[Edge, ...]:
    """The mask graph on ``groups`` vertices: the Harary graph :math:`H_{k,g}` with
    :math:`k = \\min(\\max(T + 1, 2), g - 1)`, which is k-connected with the fewest edges,
    :math:`\\lceil k g / 2 \\rceil` (Harary 1962): at least a cycle (even with T = 0 the
    graph must be connected, and a cycle costs each group two streams), the complete graph
    when :math:`T + 1 \\ge g - 1`, no edges for a single group.

    Parameters
    ----------
    groups
        g, the number of silo groups of the repetition code.
    threshold
        T, the number of colluding silos the masks must withstand.

    Returns
    -------
    tuple[Edge, ...]
        Sorted (q, h) pairs, q < h.

    Raises
    ------
    InputError
        If ``groups`` < 1 or ``threshold`` < 0.
    """
    if isinstance(groups, bool) or not isinstance(groups, int) or groups < 1:
        raise InputError(f"groups must be an int >= 1, got {groups!r}")
    if isinstance(threshold, bool) or not isinstance(threshold, int) or threshold < 0:
        raise InputError(f"threshold must be an int >= 0, got {threshold!r}")
    g, k = groups, min(max(threshold + 1, 2), groups - 1)
    edges: set[Edge] = set()

    def add(a: int, b: int) -> None:
        a, b = a % g, b % g
        if a != b:
            edges.add((min(a, b), max(a, b)))

    for i in range(g):
        for j in range(1, k // 2 + 1):
            add(i, i + j)
    if k % 2:
        if g % 2 == 0:
            for i in range(g // 2):
                add(i, i + g // 2)
        else:
            for i in range((g + 1) // 2):
                add(i, i + (g + 1) // 2)
    return tuple(sorted(edges))


def incident(edges: Sequence[Edge], group: int) -> tuple[tuple[Edge, int], ...]:
    """The edges at ``group`` with the sign its mask gives each: +1 where ``group`` is the
    smaller end, -1 where it is the larger.

    Parameters
    ----------
    edges
        The mask graph (:func:`mask_graph`).
    group
        A group index.

    Returns
    -------
    tuple[tuple[Edge, int], ...]
    """
    return tuple((e, 1 if e[0] == group else -1) for e in edges if group in e)


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


def edge_silos(groups: Sequence[Sequence[int]], edge: Edge) -> frozenset[int]:
    """The silos an edge's key belongs to: the members of its two groups.

    Parameters
    ----------
    groups
        The repetition code's silo groups.
    edge
        (q, h), a mask-graph edge.

    Returns
    -------
    frozenset of int
    """
    q, h = edge
    return frozenset((*groups[q], *groups[h]))


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


def mask_context(request: bytes, model: bytes) -> bytes:
    """32 bytes binding a round's group masks to the request and the model the silos were
    sent; the same for every silo of the round (no nonce: replicas must agree).

    Parameters
    ----------
    request
        :func:`~coded_fl.secagg.derive.request_digest` of the TrainRequest.
    model
        A digest of the model (the same bytes at every silo).

    Returns
    -------
    bytes
    """
    h = hashlib.sha256(_CONTEXT_LABEL)
    for part in (request, model):
        h.update(struct.pack("<I", len(part)) + part)
    return h.digest()


def edge_seed(edge_key: bytes, *, run_id: bytes, round_: int, edge: Edge, context: bytes) -> bytes:
    """The 32-byte seed of edge ``edge``'s stream in ``round_``.

    Parameters
    ----------
    edge_key
        The edge's key.
    run_id, round_, edge, context
        What the seed is bound to (``context``: :func:`mask_context`).

    Returns
    -------
    bytes
        HKDF-SHA256 of the edge key (secret: never log it).

    Raises
    ------
    InputError
        If the edge key is not :data:`EDGE_KEY_BYTES` bytes or the round is out of range.
    """
    if not isinstance(edge_key, bytes) or len(edge_key) != EDGE_KEY_BYTES:
        raise InputError(f"an edge key is {EDGE_KEY_BYTES} bytes")
    if not 0 <= round_ < 2**63:
        raise InputError("rounds are in [0, 2**63)")
    info = (
        _SEED_INFO
        + struct.pack("<QQI", round_, _edge_counter(edge), len(run_id))
        + run_id
        + context
    )
    return HKDF(algorithm=hashes.SHA256(), length=SEED_BYTES, salt=None, info=info).derive(edge_key)


def group_mask(
    edge_keys: Mapping[Edge, bytes],
    edges: Sequence[Edge],
    group: int,
    *,
    length: int,
    field: PrimeField,
    run_id: bytes,
    round_: int,
    context: bytes,
    scale: int = 1,
) -> np.ndarray:
    """:math:`r \\zeta_q`: the group's mask of ``length`` elements of GF(p) (``uint32``), times
    the silo's scale r.

    Parameters
    ----------
    edge_keys
        The keys of the edges at ``group`` (at least); extra keys are ignored.
    edges
        The mask graph.
    group
        q.
    length
        The update vector's length.
    field
        GF(p).
    run_id, round_, context
        What the streams are bound to (:func:`mask_context`).
    scale
        r: the nonzero coefficient of the silo's row in the code
        (``code.coefficients(silo)[0]``). The repetition code scales each silo's reply by its
        own r and the decoder divides by it, so silo i adds :math:`r_i \\zeta_q`.

    Returns
    -------
    numpy.ndarray
        Zero for a graph without edges at ``group`` (a single group).

    Raises
    ------
    ConfigurationError
        If the key of an edge at ``group`` is missing (the silo needs its keys dealt).
    """
    streams = group_mask_streams(
        edge_keys,
        edges,
        group,
        field=field,
        run_id=run_id,
        round_=round_,
        context=context,
        scale=scale,
    )
    if not streams:
        return np.zeros(length, dtype=np.uint32)
    p = field.p
    parts = [MaskStream(seed, p).fill(np.empty(length, dtype=np.uint32)) for seed, _ in streams]
    out = field.lincomb(
        [c for _, c in streams], [torch.from_numpy(s) for s in parts], validate=False
    )
    return out.numpy()


def group_mask_streams(
    edge_keys: Mapping[Edge, bytes],
    edges: Sequence[Edge],
    group: int,
    *,
    field: PrimeField,
    run_id: bytes,
    round_: int,
    context: bytes,
    scale: int = 1,
) -> list[tuple[bytes, int]]:
    """:func:`group_mask` as the seeds and coefficients of its edge streams:
    :math:`r \\zeta_q = \\sum_e (\\pm r)\\, PRG(seed_e)`, for
    :func:`coded_fl.pipeline.encode_upload`'s ``mask_streams`` (which makes and combines the
    streams chunk by chunk, never writing a d-long stream). Empty for a graph without edges at
    ``group``. Parameters and errors as :func:`group_mask`; the seeds are secrets."""
    at = incident(edges, group)
    missing = [e for e, _ in at if e not in edge_keys]
    if missing:
        raise ConfigurationError(
            f"group {group} lacks the key of mask-graph edge(s) {missing}: deal them first"
        )
    p = field.p
    r = int(scale) % p
    if r == 0:
        raise InputError("scale must be nonzero mod p")
    return [
        (
            edge_seed(edge_keys[e], run_id=run_id, round_=round_, edge=e, context=context),
            r if sign > 0 else p - r,
        )
        for e, sign in at
    ]
