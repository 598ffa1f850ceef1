"""Survivor views: the consistency check of SecAgg's active variant, for rounds that recover.

A recovery request asks each survivor for sums that depend on the survivor set S. A server
that deviates could tell different survivors different sets. Where the silos hold identity keys
and trust rosters (:mod:`coded_fl.secagg.identity`), no silo releases anything that depends
on S before it holds a *view* of S signed by every member of S:

1. After the close, the server sends each member of S a ``ViewRequest`` naming S. The member
   checks it (it uploaded the round, S holds it, S is a set of at least max(n - s, U) roster
   silos, and S is the set it signed for the round before or a subset of it) and answers with
   its identity's signature of :func:`view_statement` (``ViewReply``).
2. The recovery request carries one such signature per survivor (``views``). A silo with a
   trust roster answers it only if S is the last set it signed for the round and every other
   survivor's signature verifies under the identity endorsed for that survivor's key.

A silo signs a set for a round only if it is the set it signed before or a subset of it (a
survivor that does not sign is dropped, and the rest sign the smaller set; an accused silo
convicted during the recovery is dropped the same way), and it answers one recovery request
per round, for the last set it signed. So the sets that reach a recovery form one chain
S_1 ⊃ S_2 ⊃ ..., each signed by all its members: a server cannot split the survivors into
two sets that are not nested (each would need the signature of every member, and an honest
member signs one chain). What the server can still obtain is stated in ``docs/protocol.md``
(Consistency).

>>> s = view_statement(digest=b"8 bytes!", run_id=b"run", round_=3, survivors=(0, 2, 3))
>>> s.startswith(DOMAIN) and s != view_statement(
...     digest=b"8 bytes!", run_id=b"run", round_=3, survivors=(0, 2))
True
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

from coded_fl.secagg.share_keys import _fields

__all__ = ["DOMAIN", "view_statement"]

#: The domain separator every view signature starts with.
DOMAIN = b"coded-fl 2026-11-27 survivor view v1\x00"


def view_statement(*, digest: bytes, run_id: bytes, round_: int, survivors: Sequence[int]) -> bytes:
    """What a survivor signs: the survivor set of one round of one run and configuration.

    Parameters
    ----------
    digest, run_id
        The configuration's digest and the run (and session) id.
    round_
        The protocol round.
    survivors
        The survivor set, ascending.

    Returns
    -------
    bytes
        ``DOMAIN | round (u64) | count (u32) | survivors (i32 each) | len digest | digest |
        len run | run``.
    """
    body = struct.pack(f"<QI{len(survivors)}i", round_, len(survivors), *survivors)
    return DOMAIN + body + _fields(digest, run_id)
