"""Exact privacy of group-aligned masks at member level (issue 29): every silo of every group,
each with its own scale r_i, its own replica and its upload whether it came in time or late.

``tests/unit/test_secagg_aligned.py`` enumerates one value per group (``G_q + zeta_q``). Here
the view is what the server really holds after a group-masked round in which every silo
uploaded, the ones that closed the round and the late ones alike (a late upload is refused
by the server machine, but its bytes have been seen):

.. math:: y_i = r_i (v_i + \\zeta_{q(i)}), \\qquad v_i = G_{q(i)} + \\delta_i,

with r_i the repetition code's public scale of silo i (``code.coefficients(i)[0]``),
:math:`\\delta_i` the offset of silo i's replica from its group's reference (the group's
smallest silo, the one the decoding vector reads; zero for identical replicas) and
:math:`\\zeta_q` the group mask of :mod:`coded_fl.secagg.aligned` (the real mask graph and its
edge signs; the edge streams idealised as uniform, one field element each: d = 1). The
coalition is T colluding silos: it knows the streams of every edge at its groups.

What ``docs/protocol.md`` says the server and the coalition learn is the *ideal* output:
the decoded sum :math:`\\sum_q v_{ref(q)}`, every replica difference :math:`\\delta_i` (a
second reply of a group shows it), and the coalition's own groups' inputs. For every input
the exact joint law of (all n uploads, the coalition's streams) is enumerated over all
:math:`p^{|E|}` stream values, and the tests check that inputs with the same ideal output
have the same law, and inputs with different ideal outputs different laws (the view shows
exactly the ideal, no less, so the comparison can fail). The cases are not vacuous: every
class holds inputs that split the honest groups' sum differently. Two negative controls show
that the enumeration catches member-level leaks: masks not multiplied by r_i, and a mask graph
below the connectivity.

Sizes and method. A law over :math:`p^{|E|}` equally likely stream values is a multiset; each
view is encoded as one integer (base p, one digit per upload and known stream) and the
multiset as its sorted keys. The key is a sum over silos of per-silo terms, precomputed for
each of the p values of :math:`r_i v_i`, so an input costs n vector additions and a sort.
g = 3 (n = 7, s = 1: groups of 3, 2, 2; T = 1: the triangle) in GF(5): 125 stream values,
every group sum and the replica offsets 0 or 1 of the four non-reference silos, 2,000 inputs.
g = 6 (n = 20, s = 2, the n = 20 structure: groups of 3 and 4; T = 2: the Harary graph
H_{3,6}, 9 edges) in GF(3), the smallest prime with a scale other than 1: 19,683 stream values;
every sum of the honest groups (81 or 243) with identical replicas, and 27 of them (three
honest groups free) with each of seven offset patterns: one offset at each group's second
silo, and an offset at every non-reference silo (432 or 270 inputs). The coalition's groups
are fixed there: another value t of a coalition group adds r_i t to its members' uploads,
whatever the rest, a shift of the view that the ideal output (which holds the coalition's
inputs) shows anyway, so it neither merges nor splits the classes of the honest inputs.
"""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Iterable, Sequence

import numpy as np
import pytest

from coded_fl.codes import FractionalRepetitionCode
from coded_fl.field import PrimeField
from coded_fl.secagg.aligned import Edge, incident, mask_graph

Ideal = tuple[int, ...]


class MemberViews:
    """The exact law of the view of a group-masked round, for any input.

    Parameters
    ----------
    code
        The repetition code over GF(p) (groups, scales r_i).
    edges
        The mask graph.
    coalition
        The groups the colluding silos sit in.
    scaled
        Members add :math:`r_i \\zeta_q` as the protocol does; False is the negative control
        in which they add :math:`\\zeta_q` unscaled.
    """

    def __init__(
        self,
        code: FractionalRepetitionCode,
        edges: Sequence[Edge],
        coalition: Sequence[int],
        *,
        scaled: bool = True,
    ) -> None:
        p, n = code.field.p, code.n
        self.p, self.code, self.coalition = p, code, tuple(coalition)
        self.r = np.array([int(code.coefficients(i)[0]) % p for i in range(n)], dtype=np.int64)
        self.group = np.array([code.group_of(i) for i in range(n)])
        self.refs = {q: min(members) for q, members in enumerate(code.groups)}
        g = len(code.groups)
        signed = np.zeros((g, len(edges)), dtype=np.int64)
        for q in range(g):
            for e, sign in incident(edges, q):
                signed[q, list(edges).index(e)] = sign
        streams = np.array(list(itertools.product(range(p), repeat=len(edges))), dtype=np.int64)
        zeta = streams @ signed.T % p  # (C, g)
        masks = zeta[:, self.group] * (self.r if scaled else 1) % p  # (C, n): what i adds
        known = [k for k, e in enumerate(edges) if set(e) & set(coalition)]
        digits = n + len(known)
        if p**digits >= 2**63:
            raise ValueError("the view does not fit one int64 key")
        place = p ** np.arange(digits, dtype=np.int64)
        self.base = streams[:, known] @ place[n:]  # (C,): the coalition's streams
        # term[i, u]: silo i's digit when r_i v_i = u, for every stream value
        self.term = np.stack([((u + masks) % p) * place[:n] for u in range(p)], axis=1).transpose(
            2, 1, 0
        )  # (n, p, C)

    def laws(self, values: np.ndarray) -> list[bytes]:
        """The law of the view for each row of ``values`` (B x n: v_i per silo), as a digest
        of its sorted keys."""
        idx = (values * self.r) % self.p  # (B, n): r_i v_i
        keys = np.broadcast_to(self.base, (values.shape[0], self.base.size)).copy()
        for i in range(values.shape[1]):
            keys += self.term[i, idx[:, i]]
        keys.sort(axis=1)
        return [hashlib.blake2b(row.tobytes(), digest_size=16).digest() for row in keys]

    def ideal(self, values: np.ndarray) -> Ideal:
        """What the view may reveal: the decoded sum, every replica offset, the coalition's
        groups' inputs."""
        p = self.p
        ref = {q: int(values[i]) for q, i in self.refs.items()}
        offsets = tuple((int(v) - ref[int(q)]) % p for v, q in zip(values, self.group, strict=True))
        return (sum(ref.values()) % p, *offsets, *(ref[q] for q in self.coalition))

    def values(self, sums: np.ndarray, offsets: np.ndarray) -> np.ndarray:
        """v_i = G_q(i) + delta_i for rows of group sums and of offsets (zero at references)."""
        return (sums[:, self.group] + offsets) % self.p


def classes(views: MemberViews, values: Iterable[np.ndarray]) -> dict[Ideal, set[bytes]]:
    """Ideal output -> the set of laws of the inputs that have it."""
    out: dict[Ideal, set[bytes]] = {}
    splits: dict[Ideal, set[tuple[int, ...]]] = {}
    for batch in values:
        for v, law in zip(batch, views.laws(batch), strict=True):
            key = views.ideal(v)
            out.setdefault(key, set()).add(law)
            splits.setdefault(key, set()).add(tuple(int(x) for x in v))
    # not vacuous: some class holds several inputs (different splits of the honest sum)
    assert max(len(s) for s in splits.values()) > 1
    return out


def _only_the_ideal(found: dict[Ideal, set[bytes]]) -> None:
    assert all(len(laws) == 1 for laws in found.values()), "inputs with one ideal output differ"
    # and different ideal outputs have different laws: the view shows exactly the ideal
    assert len({next(iter(laws)) for laws in found.values()}) == len(found)


def _g3_inputs(views: MemberViews) -> Iterable[np.ndarray]:
    p, n = views.p, views.code.n
    g = len(views.code.groups)
    sums = np.array(list(itertools.product(range(p), repeat=g)), dtype=np.int64)
    free = [i for i in range(n) if i not in views.refs.values()]
    for pattern in itertools.product((0, 1), repeat=len(free)):
        offsets = np.zeros((sums.shape[0], n), dtype=np.int64)
        offsets[:, free] = pattern
        yield views.values(sums, offsets)


def _g3(coalition: tuple[int, ...], **kw: object) -> MemberViews:
    code = FractionalRepetitionCode(7, 1, field=PrimeField(5))
    assert code.groups == ((0, 1, 2), (3, 4), (5, 6))
    return MemberViews(code, mask_graph(3, 1), coalition, **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize("coalition", [(0,), (1,)])
def test_member_view_of_three_groups_reveals_only_the_sum_and_the_replica_differences(
    coalition: tuple[int, ...],
) -> None:
    # T = 1: one colluding silo, in the group of 3 or in a group of 2; the two honest groups'
    # sums are hidden but for their total (5 splits per class: not vacuous)
    views = _g3(coalition)
    assert len(set(views.r.tolist())) > 1  # the scales differ: member level for real
    _only_the_ideal(classes(views, _g3_inputs(views)))


def test_member_view_catches_unscaled_masks_and_a_graph_below_the_connectivity() -> None:
    # the enumeration can fail at member level: members that add zeta_q without their scale
    # r_i show r_i v_i - r_j v_j, hence G_q; and a path (1-connected) leaks with its middle
    # group colluding
    unscaled = _g3((1,), scaled=False)  # honest group {0, 1, 2} has scales 3, 4, 4 in GF(5)
    assert len({int(unscaled.r[i]) for i in unscaled.code.groups[0]}) > 1
    found = classes(unscaled, _g3_inputs(unscaled))
    assert any(len(laws) > 1 for laws in found.values())
    code = FractionalRepetitionCode(7, 1, field=PrimeField(5))
    path = MemberViews(code, ((0, 1), (1, 2)), (1,))
    assert any(len(laws) > 1 for laws in classes(path, _g3_inputs(path)).values())
    # at n = 20, a cycle (2-connected, T = 1's graph) against two opposite colluding groups
    cycle = MemberViews(
        FractionalRepetitionCode(20, 2, field=PrimeField(3)), mask_graph(6, 1), (0, 3)
    )
    assert any(len(laws) > 1 for laws in classes(cycle, _g6_inputs(cycle)).values())


def _g6_inputs(views: MemberViews) -> Iterable[np.ndarray]:
    p, n, groups = views.p, views.code.n, views.code.groups
    honest = [q for q in range(len(groups)) if q not in views.coalition]
    grid = np.array(list(itertools.product(range(p), repeat=len(honest))), dtype=np.int64)
    sums = np.ones((grid.shape[0], len(groups)), dtype=np.int64)  # the coalition's: fixed
    sums[:, honest] = grid
    yield views.values(sums, np.zeros((sums.shape[0], n), dtype=np.int64))  # equal replicas
    # replicas that differ: three honest groups free (27 sums, 9 splits of each total)
    few = sums[(grid[:, 3:] == 0).all(axis=1)]
    patterns = []
    for members in groups:
        one = np.zeros(n, dtype=np.int64)
        one[members[1]] = 1
        patterns.append(one)
    every = np.ones(n, dtype=np.int64)
    every[list(views.refs.values())] = 0
    patterns.append(every)
    for pattern in patterns:
        yield views.values(few, np.broadcast_to(pattern, (few.shape[0], n)))


@pytest.mark.parametrize("coalition", [(0,), (0, 1), (0, 2), (0, 3)])
def test_member_view_of_six_groups_with_k3_reveals_only_the_sum_and_the_replica_differences(
    coalition: tuple[int, ...],
) -> None:
    # n = 20, s = 2, T = 2: two colluding silos in one group, in adjacent groups, two apart,
    # or opposite (a diagonal of H_{3,6}); the honest groups' sums are hidden but for their
    # total (27 or 81 splits per class)
    code = FractionalRepetitionCode(20, 2, field=PrimeField(3))
    edges = mask_graph(6, 2)
    assert len(code.groups) == 6 and len(edges) == 9
    assert {len(g) for g in code.groups} == {3, 4}
    views = MemberViews(code, edges, coalition)
    assert set(views.r.tolist()) == {1, 2}
    _only_the_ideal(classes(views, _g6_inputs(views)))
