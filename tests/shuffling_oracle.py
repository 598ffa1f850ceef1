"""Slow, obviously right checks of shuffle plans: plain Python sets and bytes, no numpy codec."""

from __future__ import annotations

import itertools
from math import comb

from coded_fl.shuffling import CENTRAL, ShufflePlan


def knows(plan: ShufflePlan, silo: int, row: int) -> bool:
    """Does ``silo`` hold segment ``row`` before the shuffle (its units, its cache)?"""
    P, n_sub = plan.layout.n_pieces, plan.layout.n_subfiles
    unit, sub = row // (P * n_sub), (row // P) % n_sub
    if silo in plan.holders[unit]:
        return True
    T = list(itertools.combinations(range(plan.K), plan.t))
    colex = sorted(T, key=lambda s: sum(comb(v, i + 1) for i, v in enumerate(s)))
    return silo in colex[sub]


def check_plan_symbolically(plan: ShufflePlan) -> None:
    """Every receiver knows all but its own term; senders know all terms; needs are covered."""
    P, n_sub = plan.layout.n_pieces, plan.layout.n_subfiles
    learned: dict[int, set[int]] = {k: set() for k in range(plan.K)}
    for i in range(plan.n_messages):
        rows, silos = plan.terms(i)
        sender = int(plan.msg_sender[i])
        for r in rows:
            assert sender == CENTRAL or knows(plan, sender, int(r)), (i, sender, int(r))
        for r, k in zip(rows.tolist(), silos.tolist(), strict=True):
            assert not knows(plan, k, r)
            others = [x for x in rows.tolist() if x != r]
            assert all(knows(plan, k, x) for x in others), (i, k)
            assert r not in learned[k], "a segment delivered twice"
            learned[k].add(r)
    for k in range(plan.K):
        want = {
            (n * n_sub + s) * P + p
            for n in plan.needs[k]
            for s in range(n_sub)
            for p in range(P)
            if not knows(plan, k, (n * n_sub + s) * P + p)
        }
        assert learned[k] == want, f"silo {k} learns {len(learned[k])} of {len(want)} segments"
