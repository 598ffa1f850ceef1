"""Assignments, the gradient-code placement, storage checks, bad input."""

from __future__ import annotations

import numpy as np
import pytest

from coded_fl.errors import ConfigurationError, InputError
from coded_fl.shuffling import (
    UnitManifest,
    assignment_from_support,
    batch_assignment,
    check_storage,
    cyclic_assignment,
    largest_level,
    plan_shuffle,
    storage_for_level,
)
from coded_fl.shuffling.plan.placement import colex_rank, subsets


def test_cyclic_assignment_matches_the_gradient_code_support():
    K, s = 5, 2
    a = cyclic_assignment(K, s)
    for i in range(K):  # silo i holds partitions i..i+s
        held = sorted(j for j, h in a.items() if i in h)
        assert held == sorted((i + d) % K for d in range(s + 1))
    assert all(len(h) == s + 1 for h in a.values())
    parts = [[f"p{j}a", f"p{j}b"] for j in range(K)]
    b = cyclic_assignment(K, s, parts)
    assert b["p3a"] == b["p3b"] == a[3]


def test_support_of_a_real_code_plugs_in():
    B = np.array([[3, 0, 1], [0, 2, 5], [7, 1, 0]])  # nonzero = holds
    a = assignment_from_support(B)
    assert a == {0: frozenset({0, 2}), 1: frozenset({1, 2}), 2: frozenset({0, 1})}
    with pytest.raises(InputError, match="partition 1 has no holder"):
        assignment_from_support(np.array([[1, 0], [1, 0]]))


def test_subsets_are_in_colex_order_and_ranked():
    for K in range(1, 7):
        for t in range(K + 1):
            rows = subsets(K, t)
            assert (colex_rank(rows) == np.arange(len(rows))).all()
    with pytest.raises(ConfigurationError, match="subfiles per unit"):
        subsets(40, 20)


def test_batch_assignment_is_a_balanced_partition():
    a = batch_assignment(list(range(10)), 4, rng=np.random.default_rng(0))
    sizes = [sum(1 for h in a.values() if k in h) for k in range(4)]
    assert sorted(sizes) == [2, 2, 3, 3]


def test_storage_too_small_says_what_to_change():
    K, q = 4, 2
    holders = [frozenset({u % K}) for u in range(K * q)]
    need = storage_for_level(K, 2, q, K * q)
    check_storage(K, 2, need, [("next", holders)])
    with pytest.raises(ConfigurationError, match=r"silo 0 .* t <= 1"):
        check_storage(K, 2, need - 0.1, [("next", holders)])
    with pytest.raises(ConfigurationError, match="its assigned units alone"):
        check_storage(K, 0, 1, [("next", holders)])
    assert largest_level(K, need, q, K * q) == 2


def test_plan_refuses_bad_input_with_clear_errors():
    m = UnitManifest.from_data({0: b"a", 1: b"b"})
    with pytest.raises(InputError, match=r"outside 0\.\.1"):
        plan_shuffle(m, {0: {0}, 1: {5}}, {0: {1}, 1: {0}}, K=2, t=0)
    with pytest.raises(InputError, match="not in the manifest"):
        plan_shuffle(m, {7: {0}}, {0: {1}}, K=2, t=0)
    with pytest.raises(InputError, match=r"units missing from every silo: \[1\]"):
        plan_shuffle(m, {0: {0}}, {0: {1}, 1: {0}}, K=2, t=0, mode="decentralized")
    with pytest.raises(ConfigurationError, match="storage too small"):
        plan_shuffle(m, {0: {0}, 1: {1}}, {0: {1}, 1: {0}}, K=2, t=2, storage=1.5)
    with pytest.raises(ConfigurationError, match="mode"):
        plan_shuffle(m, {}, {}, K=2, t=0, mode="p2p")  # type: ignore[arg-type]
    # a centralized sender holds everything, so unheld units are fine there
    p = plan_shuffle(m, {0: {0}}, {0: {1}, 1: {0}}, K=2, t=0)
    assert p.load == 2


def test_plans_are_deterministic_and_named_by_their_inputs():
    m = UnitManifest.from_data({u: bytes([u]) * 9 for u in range(6)})
    now = {u: {u % 3} for u in range(6)}
    nxt = {u: {(u + 1) % 3} for u in range(6)}
    a = plan_shuffle(m, now, nxt, K=3, t=1, mode="decentralized")
    b = plan_shuffle(m, now, nxt, K=3, t=1, mode="decentralized")
    c = plan_shuffle(m, now, nxt, K=3, t=2, mode="decentralized")
    assert a.plan_id == b.plan_id != c.plan_id
    assert (a.term_row == b.term_row).all() and (a.msg_sender == b.msg_sender).all()
    assert a.summary()["messages"] == a.n_messages
