"""Group-aligned masks (``coded_fl.secagg.aligned``): the mask graph's connectivity against a
brute-force oracle, cancellation in the repetition code's decode for every survivor set,
exact privacy by enumeration in a small field (and the leak of a graph of lower connectivity),
the sealing of dealt edge keys, and the binding of a mask to its round and model."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch

from coded_fl.codes import FractionalRepetitionCode
from coded_fl.crypto import KeyPair, pairwise_key
from coded_fl.errors import ConfigurationError, InputError, RemoteProtocolError
from coded_fl.field import PrimeField
from coded_fl.pipeline import encode_upload
from coded_fl.quantize import QuantizationConfig, RoundingKey
from coded_fl.secagg.aligned import (
    EDGE_KEY_BYTES,
    edge_dealer,
    group_mask,
    group_mask_streams,
    incident,
    mask_context,
    mask_graph,
    new_edge_key,
    open_edge_key,
    seal_edge_key,
)

P = 2**31 - 1
RUN = b"run-aligned"


def _connected(vertices: set[int], edges: tuple[tuple[int, int], ...]) -> bool:
    if len(vertices) <= 1:
        return True
    start = min(vertices)
    seen, todo = {start}, [start]
    while todo:
        v = todo.pop()
        for a, b in edges:
            for x, y in ((a, b), (b, a)):
                if x == v and y in vertices and y not in seen:
                    seen.add(y)
                    todo.append(y)
    return seen == vertices


@pytest.mark.parametrize("g", range(1, 10))
def test_mask_graph_survives_the_removal_of_any_t_groups_with_the_fewest_edges(g: int) -> None:
    for t in range(0, g + 1):
        edges = mask_graph(g, t)
        k = min(max(t + 1, 2), g - 1)
        assert all(0 <= a < b < g for a, b in edges) and len(set(edges)) == len(edges)
        degrees = [sum(v in e for e in edges) for v in range(g)]
        if g > 1:
            assert min(degrees) == k
            assert len(edges) == math.ceil(k * g / 2)  # Harary: the fewest edges for k
        # brute force: removing any k - 1 groups leaves the rest connected
        for removed in itertools.combinations(range(g), max(k - 1, 0)):
            rest = set(range(g)) - set(removed)
            assert _connected(rest, edges), (g, t, removed)


def test_mask_graph_rejects_bad_arguments() -> None:
    for g, t in ((0, 1), (3, -1), (True, 1), (2.0, 1)):
        with pytest.raises(InputError):
            mask_graph(g, t)  # type: ignore[arg-type]


def _masks(groups: int, t: int, length: int, field: PrimeField, context: bytes) -> list:
    edges = mask_graph(groups, t)
    keys = {e: new_edge_key() for e in edges}
    return [
        group_mask(
            keys, edges, q, length=length, field=field, run_id=RUN, round_=3, context=context
        )
        for q in range(groups)
    ]


@pytest.mark.parametrize(("groups", "t", "p"), [(1, 0, P), (2, 1, P), (5, 1, P), (7, 3, 65521)])
def test_group_masks_sum_to_zero(groups: int, t: int, p: int) -> None:
    field = PrimeField(p)
    masks = _masks(groups, t, 5000, field, mask_context(b"r", b"m"))
    total = np.zeros(5000, dtype=object)
    for z in masks:
        assert z.dtype == np.uint32 and int(z.max()) < p
        total = total + z.astype(object)  # Python ints: an independent oracle
    assert all(int(v) % p == 0 for v in total)
    if groups > 1:
        assert all(int(np.count_nonzero(z)) > 4900 for z in masks)  # uniform, not zero


@pytest.mark.parametrize(("n", "s"), [(7, 2), (10, 1), (9, 2)])
def test_masks_cancel_in_the_decode_of_every_survivor_set(n: int, s: int) -> None:
    field = PrimeField(P)
    code = FractionalRepetitionCode(n, s)
    groups = code.groups
    edges = mask_graph(len(groups), s)
    keys = {e: new_edge_key() for e in edges}
    d = 64
    rng = np.random.default_rng(0)
    partials = [torch.from_numpy(rng.integers(0, P, d, dtype=np.uint32)) for _ in range(code.K)]
    exact = field.lincomb([1] * code.K, partials)
    ctx = mask_context(b"request", b"model")
    uploads = {}
    for i in range(n):
        y = code.encode(i, [partials[j] for j in code.support(i)])
        z = group_mask(
            keys,
            edges,
            code.group_of(i),
            length=d,
            field=field,
            run_id=RUN,
            round_=1,
            context=ctx,
            scale=int(code.coefficients(i)[0]),  # the code scales each silo's reply
        )
        uploads[i] = field.lincomb([1, 1], [y, torch.from_numpy(z)])
    for survivors in itertools.combinations(range(n), n - s):
        got = code.decode({i: uploads[i] for i in survivors})
        assert torch.equal(got, exact), survivors


def test_the_streamed_group_mask_is_the_group_mask() -> None:
    # the client uploads through encode_upload(mask_streams=group_mask_streams(...)): the mask
    # it adds must be group_mask's, bit for bit, for every group and a scale of either sign
    field = PrimeField(P)
    edges = mask_graph(5, 2)
    keys = {e: new_edge_key() for e in edges}
    d = (1 << 18) + 3  # crosses a chunk boundary
    cfg = QuantizationConfig.for_summands(4, clip_range=1.0)
    zeros = [torch.zeros(d)]
    rk = [RoundingKey.for_partition(0, 1, 0)]
    for group, scale in ((0, 1), (2, 7), (4, P - 3)):
        kw = dict(field=field, run_id=RUN, round_=3, context=mask_context(b"q", b"m"), scale=scale)
        z = group_mask(keys, edges, group, length=d, **kw)  # type: ignore[arg-type]
        streams = group_mask_streams(keys, edges, group, **kw)  # type: ignore[arg-type]
        got = encode_upload(zeros, [1], rk, cfg, field, mask_streams=streams)
        assert np.array_equal(got.numpy(), z)


# ------------------------------------------------------------------ exact privacy, GF(q)
def _view_classes(
    groups: int, edges: tuple[tuple[int, int], ...], coalition: tuple[int, ...], q: int
) -> dict[tuple[int, ...], set[bytes]]:
    """For every input (one element of GF(q) per group), the exact joint distribution of the
    server's view (G_g + zeta_g for every g) and the coalition's knowledge (its streams), over
    uniform streams; grouped by what the ideal functionality reveals to the coalition (its
    groups' inputs and the total)."""
    signed = np.zeros((groups, len(edges)), dtype=np.int64)
    for g in range(groups):
        for e, sign in incident(edges, g):
            signed[g, edges.index(e)] = sign
    configs = np.array(list(itertools.product(range(q), repeat=len(edges))), dtype=np.int64)
    zeta = configs @ signed.T % q  # (configs, groups)
    known_cols = [k for k, e in enumerate(edges) if set(e) & set(coalition)]
    known = configs[:, known_cols]
    classes: dict[tuple[int, ...], set[bytes]] = {}
    for inputs in itertools.product(range(q), repeat=groups):
        view = (np.asarray(inputs) + zeta) % q
        joint = np.concatenate([view, known], axis=1)
        rows, counts = np.unique(joint, axis=0, return_counts=True)
        signature = rows.tobytes() + counts.tobytes()
        ideal = (*(inputs[c] for c in coalition), sum(inputs) % q)
        classes.setdefault(ideal, set()).add(signature)
    return classes


@pytest.mark.parametrize(
    ("groups", "t", "coalition"),
    [(4, 0, ()), (4, 1, (0,)), (4, 1, (1,)), (5, 2, (0, 2)), (5, 2, (1, 2)), (3, 2, (0, 1))],
)
def test_exact_view_reveals_only_the_sum_with_up_to_t_colluding_groups(
    groups: int, t: int, coalition: tuple[int, ...]
) -> None:
    q = 3
    classes = _view_classes(groups, mask_graph(groups, t), coalition, q)
    assert classes and all(len(sigs) == 1 for sigs in classes.values())


def test_exact_view_of_a_graph_below_the_connectivity_leaks() -> None:
    # the cycle withstands one colluding group, not two opposite ones: the two arcs between
    # them are revealed separately (the test above can fail)
    classes = _view_classes(4, mask_graph(4, 1), (0, 2), 3)
    assert any(len(sigs) > 1 for sigs in classes.values())
    # and a path (1-connected) leaks with a single colluding inner group
    classes = _view_classes(4, ((0, 1), (1, 2), (2, 3)), (1,), 3)
    assert any(len(sigs) > 1 for sigs in classes.values())


# ------------------------------------------------------------------ dealing and binding
def test_edge_dealer_is_the_smallest_member_with_keys_of_the_two_groups() -> None:
    groups = [(0, 1, 2), (3, 4), (5, 6)]
    assert edge_dealer((1, 2), groups, range(7)) == 3
    assert edge_dealer((1, 2), groups, [4, 5, 6]) == 4
    assert edge_dealer((0, 2), groups, [6]) == 6
    with pytest.raises(InputError, match="cannot be dealt"):
        edge_dealer((1, 2), groups, [0, 1])


def test_a_dealt_edge_key_opens_only_for_its_recipient_and_edge() -> None:
    a, b, c = KeyPair.generate(), KeyPair.generate(), KeyPair.generate()
    k_ab = pairwise_key(a, b.public_bytes, run_id=RUN, me=0, peer=3)
    k_ba = pairwise_key(b, a.public_bytes, run_id=RUN, me=3, peer=0)
    k_ca = pairwise_key(c, a.public_bytes, run_id=RUN, me=5, peer=0)
    secret = new_edge_key()
    box = seal_edge_key(k_ab, secret, run_id=RUN, dealer=0, recipient=3, edge=(0, 1))
    assert secret not in box
    got = open_edge_key(k_ba, box, run_id=RUN, dealer=0, recipient=3, edge=(0, 1))
    assert got == secret
    for kw in (
        {"key": k_ba, "edge": (0, 2), "recipient": 3},  # sealed for another edge
        {"key": k_ca, "edge": (0, 1), "recipient": 5},  # re-addressed
    ):
        with pytest.raises(RemoteProtocolError, match="failed authentication") as err:
            open_edge_key(
                kw["key"],  # type: ignore[arg-type]
                box,
                run_id=RUN,
                dealer=0,
                recipient=kw["recipient"],  # type: ignore[arg-type]
                edge=kw["edge"],  # type: ignore[arg-type]
            )
        assert err.value.sender == 0 and secret.hex() not in str(err.value)
    tampered = box[:-1] + bytes([box[-1] ^ 1])
    with pytest.raises(RemoteProtocolError):
        open_edge_key(k_ba, tampered, run_id=RUN, dealer=0, recipient=3, edge=(0, 1))
    with pytest.raises(InputError):
        seal_edge_key(k_ab, secret[:-1], run_id=RUN, dealer=0, recipient=3, edge=(0, 1))


def test_a_mask_is_bound_to_its_round_request_and_model_and_equal_at_every_replica() -> None:
    field = PrimeField(P)
    edges = mask_graph(3, 1)
    keys = {e: new_edge_key() for e in edges}
    copy = {e: bytes(k) for e, k in keys.items()}  # another member's copy of the dealt keys

    def mask(ks: dict, round_: int, ctx: bytes) -> np.ndarray:
        return group_mask(ks, edges, 1, length=256, field=field, run_id=RUN, round_=round_,
                          context=ctx)  # fmt: skip

    base = mask(keys, 2, mask_context(b"req", b"model"))
    assert np.array_equal(base, mask(copy, 2, mask_context(b"req", b"model")))
    for other in (
        mask(keys, 3, mask_context(b"req", b"model")),
        mask(keys, 2, mask_context(b"req", b"other model")),
        mask(keys, 2, mask_context(b"other req", b"model")),
    ):
        assert np.count_nonzero(other == base) < 5
    assert mask_context(b"ab", b"c") != mask_context(b"a", b"bc")  # unambiguous framing


def test_a_missing_edge_key_is_named_without_any_secret() -> None:
    field = PrimeField(P)
    edges = mask_graph(4, 1)
    keys = {e: new_edge_key() for e in edges if e != (0, 1)}
    with pytest.raises(ConfigurationError, match=r"\(0, 1\)") as err:
        group_mask(keys, edges, 0, length=8, field=field, run_id=RUN, round_=1, context=bytes(32))
    assert all(k.hex() not in str(err.value) for k in keys.values())
    # group 2 needs neither (0, 1) nor anything it lacks: it computes its mask
    z = group_mask(keys, edges, 2, length=8, field=field, run_id=RUN, round_=1, context=b"")
    assert z.shape == (8,)
    assert len(new_edge_key()) == EDGE_KEY_BYTES
