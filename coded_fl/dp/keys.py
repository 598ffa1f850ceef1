"""The key a silo group draws its noise from: derived from the aligned masks' edge keys.

Under ``masking="aligned"`` every edge (q, h) of the mask graph has a 32-byte key known to the
members of groups q and h only (:mod:`coded_fl.secagg.aligned`). Group q's noise key is HKDF of
the keys of *all* edges at q, in edge order (:func:`noise_key`): q's members hold each of them.

Who else can compute it: a coalition must hold every edge key at q. Outside q, it needs a
member in each of q's neighbour groups. The mask graph is the Harary graph H_{k,g} with
k = min(max(T + 1, 2), g - 1), so every group has at least k neighbours. T colluding silos sit
in at most T groups; when k >= T + 1 (that is, g >= T + 2) they cannot cover all of q's
neighbours, so the noise of every group without a colluder stays secret from them and from the
server (which holds no edge key). With g = T + 1 the coalition can sit in all of a group's
neighbours: :func:`check_noise_keys` refuses that setting.
``tests/unit/test_dp_core.py`` checks the claim over every coalition of small graphs.

>>> from coded_fl.secagg.aligned import mask_graph
>>> edges = mask_graph(4, 1)
>>> keys = {e: bytes([i]) * 32 for i, e in enumerate(edges)}
>>> len(noise_key(keys, 0, run_id=b"r"))
32
"""

from __future__ import annotations

import struct
from collections.abc import Mapping

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from coded_fl.errors import ConfigurationError, InputError
from coded_fl.secagg.aligned_graph import Edge

__all__ = ["check_noise_keys", "noise_key"]

_INFO = b"codedfl-dp-group-noise-key-v1"


def check_noise_keys(groups: int, threshold: int) -> None:
    """Refuse a run whose groups' noise keys a coalition of ``threshold`` silos could compute.

    Parameters
    ----------
    groups
        g, the silo groups of the repetition code.
    threshold
        T, the colluding silos tolerated.

    Raises
    ------
    ConfigurationError
        If g < T + 2, naming the settings.
    """
    if groups < threshold + 2:
        raise ConfigurationError(
            f"distributed DP needs at least privacy_threshold + 2 silo groups: {groups} "
            f"group(s) with privacy_threshold={threshold} let T colluders hold every edge key "
            "at the other groups, and so their noise; use more silos, fewer stragglers "
            "(num_stragglers sets the group size) or a lower privacy_threshold"
        )


def noise_key(edge_keys: Mapping[Edge, bytes], group: int, *, run_id: bytes) -> bytes:
    """Group ``group``'s 32-byte noise key: HKDF-SHA256 of the keys of all its edges.

    Parameters
    ----------
    edge_keys
        Edge -> its 32-byte key, for (at least) every mask-graph edge at ``group``.
    group
        The group index.
    run_id
        The run (keys of two runs are independent).

    Returns
    -------
    bytes
        The key :func:`coded_fl.dp.noise.skellam` draws the group's noise from.

    Raises
    ------
    InputError
        If no edge is at ``group`` (a single group needs no masks, and so has no key) or a key
        is not 32 bytes.
    """
    mine = sorted(e for e in edge_keys if group in e)
    if not mine:
        raise InputError(f"group {group} has no edge key to derive its noise key from")
    material = []
    for e in mine:
        k = edge_keys[e]
        if not isinstance(k, bytes) or len(k) != 32:
            raise InputError(f"the key of edge {e} is not 32 bytes")
        material.append(struct.pack("<II", *e) + k)
    hkdf = HKDF(
        algorithm=hashes.SHA256(),
        length=32,
        salt=struct.pack("<II", group, len(run_id)) + run_id,
        info=_INFO,
    )
    return hkdf.derive(b"".join(material))
