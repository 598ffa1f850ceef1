"""Every K <= 5, every t, both settings, coded and uncoded: exact bytes, loads = formulas."""

from __future__ import annotations

import numpy as np
import pytest

from coded_fl.shuffling import (
    cyclic_assignment,
    decentralized_load,
    shifted_assignment,
    uncoded_load,
    worst_case_loads,
)
from simulations.runtime.shuffle_harness import simulate
from tests.shuffling_oracle import check_plan_symbolically

CASES = [(K, t) for K in range(1, 6) for t in range(K + 1)]


def _data(n: int, seed: int) -> dict[int, bytes]:
    rng = np.random.default_rng(seed)
    return {u: rng.bytes(int(rng.integers(1, 90))) for u in range(n)}  # unequal sizes


def _check(outcome, data) -> None:
    plan = outcome.plan
    for k, (rep, got) in enumerate(zip(outcome.reports, outcome.received, strict=True)):
        want = {plan.manifest.ids[n] for n in plan.needs[k]}
        assert rep.complete and set(rep.received) == want and set(got) == want
        for u, b in got.items():
            assert b == data[u]
    assert plan.load == pytest.approx(plan.formula_load())


@pytest.mark.parametrize(("K", "t"), CASES, ids=[f"K{K}-t{t}" for K, t in CASES])
@pytest.mark.parametrize("mode", ["centralized", "decentralized"])
@pytest.mark.parametrize("coded", [True, False], ids=["coded", "uncoded"])
def test_worst_case_every_silo_decodes_exactly_its_units(K, t, mode, coded):
    q = 2
    data = _data(K * q, seed=K * 10 + t)
    now = {u: {u % K} for u in data}
    nxt = shifted_assignment(now, K) if K > 1 else now
    out = simulate(data, now, nxt, K=K, t=t, mode=mode, coded=coded)
    _check(out, data)
    check_plan_symbolically(out.plan)
    if K > 1:
        w = worst_case_loads(K, t, q)
        expect = w[mode] if coded else w["uncoded"]
        assert out.plan.load == pytest.approx(expect)
        if coded and mode == "centralized":
            assert out.plan.load * (t + 1) <= w["uncoded"] + 1e-9
        assert out.payload_bytes == out.plan.bytes_moved


@pytest.mark.parametrize(("K", "t"), CASES, ids=[f"K{K}-t{t}" for K, t in CASES])
def test_gradient_code_placement_is_an_assignment_like_any_other(K, t):
    s = min(1, K - 1)
    data = _data(K, seed=t)
    now = cyclic_assignment(K, s)
    nxt = {u: frozenset((k + 2) % K for k in h) for u, h in now.items()}
    for mode in ("centralized", "decentralized"):
        out = simulate(data, now, nxt, K=K, t=t, mode=mode)
        _check(out, data)
        check_plan_symbolically(out.plan)
        m = out.plan.need_counts()
        if mode == "decentralized" and t == 0:
            # fan-out: every unit some silo lacks is sent once, whatever its receivers (plain sets)
            moved = {u for u in data if set(nxt[u]) - set(now[u])}
            assert out.plan.load == len(moved) == out.plan.formula_load()
            assert out.plan.n_messages == len(moved)
            if K >= 4:  # each unit goes to s + 1 = 2 new silos: half of sending it to each
                assert out.plan.load == pytest.approx(decentralized_load(K, t, m) / 2)
        elif mode == "decentralized":  # the clique cover, or the holder-sourced delivery
            # where it loads less (every unit here has holders)
            assert out.plan.load == pytest.approx(out.plan.formula_load())
            clique = decentralized_load(K, t, m)
            assert out.plan.load <= clique + 1e-9
            assert (out.plan.sources is not None) == (out.plan.load < clique - 1e-9)
        assert out.plan.load <= uncoded_load(K, t, m) + 1e-9
