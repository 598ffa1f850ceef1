"""Coded reshuffles over the gradient code's replicas (issue 31): pairs of units that trade
holder sets go as one XOR, the bounds beside them, and the permutation the coordinator draws.

Oracles: the delivered bytes against the units' own bytes (Python ``bytes``), the loads against
counting by hand (class sizes), the bounds against every scheme the planner builds.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coded_fl.codes import make_code
from coded_fl.errors import ConfigurationError
from coded_fl.shuffling import (
    SegmentBuffer,
    UnitManifest,
    acyclic_bound,
    decode,
    encode,
    fanout_load,
    holder_cut_bound,
    plan_shuffle,
    reshuffle_bounds,
    swap_fanout_load,
)
from coded_fl.shuffling.partitions import (
    code_assignment,
    mixed_partitions,
    own_partitions,
    swap_partners,
    swapped_partitions,
)


def _support(n: int, s: int, kind: str) -> np.ndarray:
    return make_code(n, s, kind=kind).matrix != 0  # type: ignore[arg-type]


def _deliver(current, nxt, K, data):
    """Plan, encode at every sender from its own units only, decode at every receiver from its
    own units only; returns the plan and what each silo ends with."""
    manifest = UnitManifest.from_data(data)
    plan = plan_shuffle(manifest, current, nxt, K=K, t=0, mode="decentralized")
    ids = plan.manifest.ids
    bufs = []
    for k in range(K):
        buf = SegmentBuffer.for_plan(plan)
        for n, u in enumerate(ids):
            if k in plan.holders[n]:
                buf.put_unit(n, plan.layout.pad(data[u]))
        bufs.append(buf)
    payload = np.zeros((plan.n_messages, plan.layout.piece_size), dtype=np.uint8)
    for k in range(K):
        idx = plan.messages_from(k)
        if idx.size:
            payload[idx] = encode(plan, bufs[k], idx)
    for k in range(K):
        idx = plan.messages_to(k)
        if idx.size:
            decode(plan, k, bufs[k], idx, payload[idx])
    got = {
        k: {
            u: bytes(bufs[k].unit(n).reshape(-1)[: len(data[u])])
            for n, u in enumerate(ids)
            if k in plan.target[n]
        }
        for k in range(K)
    }
    return plan, got


def _assignments(n, s, kind, parts, new):
    support = _support(n, s, kind)
    return code_assignment(support, parts), code_assignment(support, new)


@settings(max_examples=25, deadline=None)
@given(
    n=st.integers(3, 9),
    s=st.integers(1, 2),
    units=st.integers(1, 5),
    seed=st.integers(0, 2**31),
    swapped=st.booleans(),
)
def test_every_silo_decodes_exactly_its_new_units_from_pairs_and_singles(
    n, s, units, seed, swapped
):
    if s >= n:
        return
    rng = np.random.default_rng(seed)
    parts = own_partitions(n, units)
    support = _support(n, s, "polynomial")
    new = (
        swapped_partitions(parts, support, rng=rng)
        if swapped and any(swap_partners(support).values())  # n = s + 1: all hold all
        else mixed_partitions(parts, rng=rng)
    )
    current, nxt = code_assignment(support, parts), code_assignment(support, new)
    data = {u: rng.bytes(int(rng.integers(1, 40))) for u in current}
    plan, got = _deliver(current, nxt, n, data)
    for k in range(n):
        assert got[k] == {u: data[u] for u in nxt if k in nxt[u]}
    ids = list(plan.manifest.ids)
    by_hand: dict[tuple, int] = {}
    for u in ids:
        if not nxt[u] <= current[u]:
            key = (frozenset(current[u]), frozenset(nxt[u]))
            by_hand[key] = by_hand.get(key, 0) + 1
    pair_total = sum(
        max(c, by_hand.get((b, a), 0))
        for (a, b), c in by_hand.items()
        if a & b and by_hand.get((b, a), 0)
    )
    lone = sum(c for (a, b), c in by_hand.items() if not (a & b and by_hand.get((b, a), 0)))
    assert plan.load == plan.formula_load() == pair_total / 2 + lone
    assert swap_fanout_load(plan.holders, plan.target) == plan.load
    bounds = reshuffle_bounds(plan.holders, plan.target, n)
    assert bounds["converse"] <= plan.load <= bounds["fanout"] <= bounds["plain_copy"]


def test_a_pair_is_one_xor_from_a_silo_that_holds_both():
    A, B = frozenset({0, 1, 2}), frozenset({1, 2, 3})
    data = {"u": b"\x01" * 8, "v": b"\x10" * 8}
    plan, got = _deliver({"u": A, "v": B}, {"u": B, "v": A}, 4, data)
    assert plan.n_messages == 1 and int(plan.msg_sender[0]) in A & B
    assert plan.receivers(0) == {0, 3}  # silo 3 gains u, silo 0 gains v
    assert got[3]["u"] == data["u"] and got[0]["v"] == data["v"]


def test_the_repetition_codes_groups_admit_no_coded_reshuffle():
    support = _support(10, 2, "repetition")
    assert not any(swap_partners(support).values())
    with pytest.raises(ConfigurationError, match="mixed_partitions"):
        swapped_partitions(own_partitions(10, 2), support, rng=np.random.default_rng(0))
    rng = np.random.default_rng(4)
    parts = own_partitions(10, 8)
    for _ in range(5):
        new = mixed_partitions(parts, rng=rng)
        cur, nxt = code_assignment(support, parts), code_assignment(support, new)
        units = sorted(cur)
        h, t = [cur[u] for u in units], [nxt[u] for u in units]
        b = reshuffle_bounds(h, t, 10)
        # disjoint groups: the cut equals the fan-out, the scheme is the fan-out
        assert b["cut"] == b["fanout"] == b["swap_fanout"] == b["converse"] > 0
        parts = new


@pytest.mark.parametrize(("n", "s", "units"), [(10, 2, 8), (20, 2, 8), (6, 2, 4), (4, 1, 3)])
def test_coded_reshuffles_pair_every_unit_and_halve_the_fanout(n, s, units):
    support = _support(n, s, "polynomial")
    partners = swap_partners(support)
    assert all(len(p) == 2 * s for p in partners.values())  # cyclic distance 1..s
    rng = np.random.default_rng(0)
    parts = own_partitions(n, units)
    for _ in range(4):
        new = swapped_partitions(parts, support, rng=rng)
        assert [len(p) for p in new] == [len(p) for p in parts]
        assert sorted(itertools.chain(*new)) == sorted(itertools.chain(*parts))
        where = {u: p for p, us in enumerate(parts) for u in us}
        for q, us in enumerate(new):
            assert all(q in partners[where[u]] for u in us)  # every unit moved to a partner
        cur, nxt = code_assignment(support, parts), code_assignment(support, new)
        units_ = sorted(cur)
        h, t = [cur[u] for u in units_], [nxt[u] for u in units_]
        assert (
            swap_fanout_load(h, t)
            == fanout_load(
                [{u for u in units_ if k in nxt[u] and k not in cur[u]} for k in range(n)]
            )
            / 2
        )
        parts = new


def test_the_permutation_is_reproducible_from_its_seed():
    support = _support(10, 2, "polynomial")
    parts = own_partitions(10, 8)
    a = swapped_partitions(parts, support, rng=np.random.default_rng(5))
    b = swapped_partitions(parts, support, rng=np.random.default_rng(5))
    assert a == b != parts


def test_the_acyclic_bound_is_exact_on_small_cases_and_below_every_scheme():
    # one swap: one XOR is needed and enough
    assert acyclic_bound([{1}, {0}], [{0}, {1}]) == 1.0
    # every silo knows all but what it wants: one XOR of the three serves all
    assert acyclic_bound([{1}, {2}, {0}], [{0, 2}, {1, 0}, {2, 1}]) == 1.0
    # a 3-cycle, each silo knowing its own unit only: 2 are needed (and u0^u1, u1^u2 suffice)
    assert acyclic_bound([{1}, {2}, {0}], [{0}, {1}, {2}]) == 2.0
    rng = np.random.default_rng(2)
    for _ in range(30):
        K, N = 4, 6
        side = [set(np.flatnonzero(rng.random(N) < 0.4).tolist()) for _ in range(K)]
        needs = [set(np.flatnonzero(rng.random(N) < 0.4).tolist()) - side[k] for k in range(K)]
        every_order = max(
            _order_value(needs, side, order) for order in itertools.permutations(range(K))
        )
        got = acyclic_bound(needs, side, orders=200)
        assert got <= every_order  # never above the bound's own definition
        assert got <= len(set().union(*needs))  # below sending each needed unit once


def _order_value(needs, side, order):
    seen: set = set()
    total = 0
    for k in order:
        seen |= side[k]
        total += len(needs[k] - seen)
        seen |= needs[k]
    return total


def test_the_cut_bound_counts_units_that_must_leave_disjoint_holder_sets():
    g0, g1, g2 = frozenset({0, 1}), frozenset({2, 3}), frozenset({1, 2})
    # g2 meets both others: the families are {g0, g1} (one unit leaves each) and {g2}
    h = [g0, g0, g1, g2, g2, g2]
    t = [g1, g0, g0, g0, g0, g0]
    assert holder_cut_bound(h, t) == 3.0  # three units must leave g2 for silo 0
    assert holder_cut_bound(h[:3], t[:3]) == 2.0  # without them: g0 and g1 add up
    assert holder_cut_bound([g0], [g0]) == 0.0
