"""The per-round group masks of group-aligned masking, from the edge keys.

Each round, each edge key seeds an exactly uniform stream over GF(p) (:func:`edge_seed`, bound
to the round's :func:`mask_context`), and a group's mask is the signed sum of the streams of its
edges (:func:`group_mask`, or its seeds and coefficients: :func:`group_mask_streams`). Why the
masks cancel and what they hide: :mod:`coded_fl.secagg.aligned`.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Mapping, Sequence

import numpy as np
import torch
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from coded_fl.errors import ConfigurationError, InputError
from coded_fl.field import PrimeField
from coded_fl.prg import SEED_BYTES, MaskStream
from coded_fl.secagg.aligned_graph import Edge, incident
from coded_fl.secagg.edge_keys import EDGE_KEY_BYTES, _edge_counter

__all__ = ["edge_seed", "group_mask", "group_mask_streams", "mask_context"]
_SEED_INFO = b"coded-fl/v2/aligned-mask"
_CONTEXT_LABEL = b"coded-fl/v2/aligned-context"


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
