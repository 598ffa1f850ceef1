"""Hypothesis: random placements and assignments decode byte for byte at the formula's load."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from simulations.runtime.shuffle_harness import simulate
from tests.shuffling_oracle import check_plan_symbolically


@st.composite
def shuffles(draw):
    K = draw(st.integers(1, 5))
    t = draw(st.integers(0, K))
    n_units = draw(st.integers(1, 8))
    silo_sets = st.frozensets(st.integers(0, K - 1), min_size=1, max_size=K)
    now = {u: draw(silo_sets) for u in range(n_units)}
    nxt = {u: draw(st.frozensets(st.integers(0, K - 1), max_size=K)) for u in range(n_units)}
    sizes = draw(st.lists(st.integers(0, 70), min_size=n_units, max_size=n_units))
    mode = draw(st.sampled_from(["centralized", "decentralized"]))
    coded = draw(st.booleans())
    seed = draw(st.integers(0, 2**32 - 1))
    return K, t, now, nxt, sizes, mode, coded, seed


@given(shuffles())
def test_random_shuffles_decode_exactly_at_the_formula_load(case):
    K, t, now, nxt, sizes, mode, coded, seed = case
    rng = np.random.default_rng(seed)
    data = {u: rng.bytes(n) for u, n in enumerate(sizes)}
    out = simulate(data, now, nxt, K=K, t=t, mode=mode, coded=coded)
    plan = out.plan
    for k, rep in enumerate(out.reports):
        want = {u for u in data if k in nxt[u] and k not in now[u]}
        assert rep.complete and set(rep.received) == want
        assert out.received[k] == {u: data[u] for u in want}
    assert plan.load == pytest.approx(plan.formula_load())
    check_plan_symbolically(plan)
