"""Holder-sourced delivery at level t >= 1 (:mod:`coded_fl.shuffling.plan.sources`): every
needed unit comes from a silo holding it in full, which sends the centralized XORs for the
units it sources. Checked on real bytes and symbolically (every receiver knows all but its own
term), its load against its formula and against a brute-force count over plain sets, and the
balanced reassignment against the 1/(t+1) of the relay's fan-out it is built to reach."""

from __future__ import annotations

import itertools
from collections import Counter
from math import comb

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coded_fl.errors import ConfigurationError
from coded_fl.shuffling import (
    UnitManifest,
    balanced_reassignment,
    decentralized_load,
    plan_shuffle,
    sourced_load,
)
from simulations.runtime.shuffle_harness import simulate
from tests.shuffling_oracle import check_plan_symbolically


def _one_holder(assign: dict[int, int]) -> dict[int, set[int]]:
    return {u: {k} for u, k in assign.items()}


def _brute_load(K: int, t: int, needs, sources) -> float:
    """Messages counted over plain sets: per source and round, the (t+1)-sets of silos with a
    member receiving a unit from that source in that round; one subfile each."""
    total = 0
    for j in range(K):
        rows = [
            [n for n, src in zip(nk, sk, strict=True) if src == j]
            for nk, sk in zip(needs, sources, strict=True)
        ]
        for i in range(max((len(r) for r in rows), default=0)):
            demanders = {k for k, r in enumerate(rows) if len(r) > i}
            total += sum(1 for S in itertools.combinations(range(K), t + 1) if demanders & set(S))
    return total / comb(K, t)


@pytest.mark.parametrize("K", [3, 4, 5])
@pytest.mark.parametrize("q_rounds", [1, 2])
def test_a_balanced_reshuffle_delivers_every_byte_at_every_level(K: int, q_rounds: int):
    q = q_rounds * (K - 1)
    rng = np.random.default_rng(K * 7 + q)
    data = {u: rng.bytes(int(rng.integers(1, 70))) for u in range(K * q)}  # unequal sizes
    now = {u: u % K for u in data}
    nxt = balanced_reassignment(now, K, np.random.default_rng(q))
    assert Counter(nxt.values()) == Counter(now.values())  # each silo keeps q units
    assert all(nxt[u] != now[u] for u in data)  # every unit moves
    for t in range(1, K):
        out = simulate(data, _one_holder(now), _one_holder(nxt), K=K, t=t, mode="decentralized")
        plan = out.plan
        # at t = K - 1 the clique cover loads as much (q/(K-1)): the planner keeps it then
        assert (plan.sources is not None) == (t < K - 1), (K, t)
        check_plan_symbolically(plan)
        for k, got in enumerate(out.received):
            assert got == {u: data[u] for u in data if nxt[u] == k}
        # the load: its formula, a count over plain sets, and (K-t)/((K-1)(t+1)) of the fan-out
        assert plan.load == pytest.approx(plan.formula_load())
        if plan.sources is not None:
            assert plan.load == pytest.approx(_brute_load(K, t, plan.needs, plan.sources))
        fanout = len(data)  # each moved unit uploaded once by the relay's fan-out
        assert plan.load / fanout == pytest.approx((K - t) / ((K - 1) * (t + 1)))
        assert plan.load / fanout <= 1 / (t + 1) + 1e-12


@settings(max_examples=40, deadline=None)
@given(
    K=st.integers(2, 6),
    t=st.integers(1, 5),
    q=st.integers(1, 4),
    seed=st.integers(0, 2**16),
    extra_holders=st.booleans(),
)
def test_any_reassignment_plans_the_cheaper_of_the_two_deliveries(K, t, q, seed, extra_holders):
    t = min(t, K - 1)
    rng = np.random.default_rng(seed)
    units = range(K * q)
    now = {u: {u % K} for u in units}
    if extra_holders:  # replicated units: any holder may source them
        for u in units:
            now[u].add(int(rng.integers(K)))
    nxt = {u: {int(rng.integers(K))} for u in units}
    manifest = UnitManifest.from_data({u: bytes([u % 251]) * 24 for u in units})
    plan = plan_shuffle(manifest, now, nxt, K=K, t=t, mode="decentralized")
    check_plan_symbolically(plan)
    clique = decentralized_load(K, t, plan.need_counts())
    assert plan.load == pytest.approx(plan.formula_load())
    assert plan.load <= clique + 1e-9
    if plan.sources is not None:
        assert plan.load < clique
        assert plan.load == pytest.approx(_brute_load(K, t, plan.needs, plan.sources))
        for k, (nk, sk) in enumerate(zip(plan.needs, plan.sources, strict=True)):
            assert all(j in plan.holders[n] and j != k for n, j in zip(nk, sk, strict=True))


def test_the_formula_and_its_refusals():
    # K = 4, t = 1, every source sends one unit to each other silo: 1.5 units per source
    row = [[0 if j == k else 1 for k in range(4)] for j in range(4)]
    assert sourced_load(4, 1, row) == 6.0
    assert sourced_load(4, 4, row) == 0.0  # t = K: everything is cached
    with pytest.raises(ConfigurationError, match=r"t in 1\.\.K"):
        sourced_load(4, 0, row)
    with pytest.raises(ConfigurationError, match="K = 4 counts"):
        sourced_load(4, 1, [[1, 1, 1]])
    with pytest.raises(ConfigurationError, match="same number of units"):
        balanced_reassignment({0: 0, 1: 0, 2: 1}, 2, np.random.default_rng(0))
    with pytest.raises(ConfigurationError, match="K >= 2"):
        balanced_reassignment({0: 0}, 1, np.random.default_rng(0))


def test_a_unit_in_no_silo_leaves_the_clique_cover_to_deliver_it_from_the_caches():
    K, t = 4, 2
    manifest = UnitManifest.from_data({u: bytes(16) for u in range(8)})
    now = {u: ({u % K} if u else set()) for u in range(8)}  # unit 0 is held by no silo
    nxt = {u: {(u + 1) % K} for u in range(8)}
    plan = plan_shuffle(manifest, now, nxt, K=K, t=t, mode="decentralized")
    assert plan.sources is None and plan.layout.n_pieces == t
    check_plan_symbolically(plan)


def test_the_balanced_reassignment_moves_a_unit_to_a_uniform_other_silo():
    K, q, draws = 5, 4, 400
    now = {u: u % K for u in range(K * q)}
    seen = Counter()
    for d in range(draws):
        seen[balanced_reassignment(now, K, np.random.default_rng(d))[0]] += 1
    assert seen[now[0]] == 0 and len(seen) == K - 1
    assert all(abs(c / draws - 1 / (K - 1)) < 0.08 for c in seen.values()), seen


@pytest.mark.parametrize("t", [1, 2])
def test_through_the_relay_a_holder_sourced_epoch_completes_and_a_tampered_message_is_refused(
    tmp_path, t: int
):
    """The real members and relay (loopback): every silo stores exactly its new units; a relay
    that flips a byte of one message gets it refused at its receiver (sealed payloads), the
    other silos complete, and no store takes an unverified unit."""
    import dataclasses

    from coded_fl.shuffling import run_loopback
    from tests.unit.test_shuffling_transport import K, _check_stores, _job, _world

    rng = np.random.default_rng(t)
    data = {u: rng.bytes(int(rng.integers(8, 60))) for u in range(K * (K - 1))}
    own = {u: u % K for u in data}
    now = {u: {k} for u, k in own.items()}
    nxt = {u: {k} for u, k in balanced_reassignment(own, K, rng).items()}
    manifest = UnitManifest.from_data(data)
    assert plan_shuffle(manifest, now, nxt, K=K, t=t, mode="decentralized").sources is not None

    stores, members = _world(tmp_path / "clean", data, now, t=t)
    res = run_loopback(_job(now, nxt, "decentralized", t=t), members, stores)
    assert res.ok, res.lines()
    _check_stores(res, stores, data, now, nxt)

    def tamper(stage, m, p):
        if stage == "deliver" and m == 1 and p.messages:
            msgs = list(p.messages)
            body = bytearray(msgs[0].body)
            body[5] ^= 0xFF
            msgs[0] = dataclasses.replace(msgs[0], body=bytes(body))
            return dataclasses.replace(p, messages=tuple(msgs))
        return p

    stores, members = _world(tmp_path / "tampered", data, now, t=t)
    res = run_loopback(_job(now, nxt, "decentralized", t=t), members, stores, tamper=tamper)
    assert res.silos[1].status == "incomplete" and res.silos[1].refused
    assert "fails authentication" in res.silos[1].refused[0]
    assert all(res.silos[k].status == "complete" for k in (0, 2, 3))
    _check_stores(res, stores, data, now, nxt)
