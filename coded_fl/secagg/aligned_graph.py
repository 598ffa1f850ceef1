"""The mask graph of group-aligned masks: its edges, the edges at a group, an edge's silos.

The g silo groups are the vertices; :func:`mask_graph` is the Harary graph that withstands T
colluding silos with the fewest edges (the argument: :mod:`coded_fl.secagg.aligned`).
"""

from __future__ import annotations

from collections.abc import Sequence

from coded_fl.errors import InputError

__all__ = ["Edge", "edge_silos", "incident", "mask_graph"]
#: An edge of the mask graph: two group indices, the smaller first.
Edge = tuple[int, int]


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
