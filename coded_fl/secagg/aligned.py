"""Group-aligned masks: the masking of a one-round-trip coded round (``masking="aligned"``).

The machines use it when the run's configuration says ``masking="aligned"``
(``docs/protocol.md``, "One round trip with group-aligned masks"): the edge keys are dealt
through the first rounds' messages (the scheme's message extensions,
:mod:`coded_fl.secagg.masking.aligned_wire`), then every round is group-masked.

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

The parts: the mask graph in :mod:`coded_fl.secagg.aligned_graph`, the edge keys' dealing in
:mod:`coded_fl.secagg.edge_keys`, the per-round masks in :mod:`coded_fl.secagg.group_masks`;
all are re-exported here.
"""

from __future__ import annotations

from coded_fl.secagg.aligned_graph import Edge, edge_silos, incident, mask_graph
from coded_fl.secagg.edge_keys import (
    EDGE_KEY_BYTES,
    EDGE_PURPOSE,
    EDGE_TAG_BYTES,
    edge_dealer,
    edge_tag,
    new_edge_key,
    open_edge_key,
    seal_edge_key,
)
from coded_fl.secagg.group_masks import edge_seed, group_mask, group_mask_streams, mask_context

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
