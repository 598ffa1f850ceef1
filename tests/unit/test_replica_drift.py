"""Replicas that disagree (issue: drift between sites vs a deviating silo), through the vote.

Drift (replicas a little apart almost everywhere: other CPU kernels, thread counts, GPUs) never
stops a round; a silo whose replica lies beyond the tolerance where the rest of its group
agrees is overruled, named and left out of the later rounds; a group of two that disagrees
beyond the tolerance erases those coordinates (no wrong value, both named). Checked against an
independent oracle in Python ints, through the in-memory protocol harness (both maskings, every
reply arriving together), and with the attacks of the issue re-enacted.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from coded_fl.codes.vote import vote_rows
from coded_fl.errors import InputError
from coded_fl.field import PrimeField
from coded_fl.quantize import RoundingKey, stochastic_round
from coded_fl.secagg import AbortCode, ProtocolConfig, RoundAborted, RoundResult
from simulations.runtime.secagg_harness import Harness, Silo


# ------------------------------------------------------------------ the vote against an oracle
def oracle(groups: list[list[list[int]]], tol: list[int], bound: int, exact: set[int]):
    """Python ints: per coordinate, each group's median (floor mean of the two middles), settled
    by a strict majority within the tolerance; located/unresolved per (group, member); and the
    largest |sum| before the bound check (the field holds it only below p / 2)."""
    d = len(groups[0][0])
    value, erased, widest = [], [], 0
    located: dict[tuple[int, int], int] = {}
    unresolved: dict[tuple[int, int], int] = {}
    for t in range(d):
        total, ok = 0, True
        offs = []
        for q, members in enumerate(groups):
            rel = [m[t] - members[0][t] for m in members]
            srt = sorted(rel)
            k = len(srt)
            med = srt[k // 2] if k % 2 else srt[k // 2 - 1] + (srt[k // 2] - srt[k // 2 - 1]) // 2
            lim = 0 if t in exact else tol[q]
            off = [abs(v - med) > lim for v in rel]
            settled = k - sum(off) >= k // 2 + 1
            total += members[0][t] + med
            offs.append((q, off, settled))
            ok &= settled
        widest = max(widest, abs(total))
        for q, off, settled in offs:
            for j, o in enumerate(off):
                if o:
                    book = located if settled else unresolved
                    book[(q, j)] = book.get((q, j), 0) + 1
        if not ok or abs(total) > bound:
            value.append(0)
            erased.append(t)
        else:
            value.append(total)
    return value, erased, located, unresolved, widest


@st.composite
def vote_cases(draw):
    p = draw(st.sampled_from([101, 2**31 - 1]))
    d = draw(st.integers(1, 12))
    sizes = draw(st.lists(st.integers(1, 5), min_size=1, max_size=4))
    small = 12 if p == 101 else 10**6
    groups = []
    for size in sizes:
        base = draw(st.lists(st.integers(-small, small), min_size=d, max_size=d))
        members = [base]
        for _ in range(size - 1):
            drift = draw(st.lists(st.integers(-3, 3), min_size=d, max_size=d))
            big = draw(st.lists(st.sampled_from([0, 0, 0, 9, -40]), min_size=d, max_size=d))
            members.append([b + x + y for b, x, y in zip(base, drift, big, strict=True)])
        groups.append(members)
    tol = [draw(st.integers(0, 4)) for _ in sizes]
    exact = set(draw(st.lists(st.integers(0, d - 1), max_size=2)))
    bound = draw(st.integers(0, 4 * small))
    return p, groups, tol, exact, bound


@settings(max_examples=150, deadline=None)
@given(vote_cases())
def test_the_vote_matches_a_python_int_oracle(case):
    p, groups, tol, exact, bound = case
    value, erased, located, unresolved, widest = oracle(groups, tol, bound, exact)
    # a sum the field cannot hold is outside the protocol's precondition (p leaves headroom over
    # every true sum, `ProtocolConfig`): at p = 101, two groups' medians of -40 sum to -80, which
    # wraps to 21 and passes a bound of 21 (found by Hypothesis)
    assume(widest <= p // 2)
    # lay the groups out as a survivor set: positions in group order, references first
    pos, pairs, where = 0, [], {}
    rows = [[sum(m[0][t] for m in groups) % p for t in range(len(groups[0][0]))]]
    for q, members in enumerate(groups):
        ref = pos
        where[(q, 0)] = ref
        for j, m in enumerate(members[1:], start=1):
            pairs.append((ref, pos + j))
            where[(q, j)] = pos + j
            rows.append([(members[0][t] - m[t]) % p for t in range(len(m))])
        pos += len(members)
    sums = torch.tensor(rows, dtype=torch.int64).to(torch.uint32)
    groups_with_pairs = [q for q, m in enumerate(groups) if len(m) > 1]
    out = vote_rows(
        PrimeField(p),
        sums,
        pairs,
        tolerance=[tol[q] for q in groups_with_pairs],
        bound=bound,
        exact=sorted(exact),
    )
    signed = [v - p if v > p // 2 else v for v in out.value.tolist()]
    assert signed == value
    assert out.erased.tolist() == erased
    assert out.located == {where[k]: c for k, c in located.items()}
    assert out.unresolved == {where[k]: c for k, c in unresolved.items()}


def test_the_vote_refuses_malformed_inputs():
    F = PrimeField(101)
    sums = torch.zeros((2, 3), dtype=torch.uint32)
    with pytest.raises(InputError, match="rows"):
        vote_rows(F, sums, [], tolerance=[], bound=5)
    with pytest.raises(InputError, match="tolerance"):
        vote_rows(F, sums, [(0, 1)], tolerance=[-1], bound=5)
    with pytest.raises(InputError, match="overlaps"):
        vote_rows(
            F, torch.zeros((3, 3), dtype=torch.uint32), [(0, 1), (1, 2)], tolerance=[1], bound=5
        )


@settings(max_examples=40, deadline=None)
@given(
    st.sampled_from([(6, 2), (7, 2), (5, 1), (9, 2)]),
    st.sampled_from([101, 2**31 - 1]),
    st.data(),
)
def test_group_differences_match_the_comparison_rows_in_python_ints(ns, p, data):
    """The one-pass comparison (GroupCode.differences) against the full comparison rows applied
    to the replies with Python ints, at both fast-path and generic primes."""
    from coded_fl.codes import FractionalRepetitionCode

    n, s = ns
    code = FractionalRepetitionCode(n, s, field=PrimeField(p))
    survivors = sorted(data.draw(st.sets(st.integers(0, n - 1), min_size=n - s, max_size=n)))
    pairs = code.comparisons(survivors)
    d = 40
    base = {q: data.draw(st.lists(st.integers(0, p - 1), min_size=d, max_size=d)) for q in range(n)}
    replies = []
    for i in survivors:  # member i replies r_i (G_q + noise): mostly equal within a group
        q = code.group_of(i)
        noise = data.draw(st.lists(st.sampled_from([0, 0, 0, 1, p - 3]), min_size=d, max_size=d))
        r = int(code.matrix[i][code.support(i)[0]])
        replies.append([r * ((b + e) % p) % p for b, e in zip(base[q], noise, strict=True)])
    tensors = [torch.tensor(v, dtype=torch.int64).to(torch.uint32) for v in replies]
    diffs, cols = code.differences(survivors, pairs, tensors)
    rows = code.comparison_rows(survivors, pairs)
    full = [
        [sum(int(w) * y[t] for w, y in zip(row, replies, strict=True)) % p for t in range(d)]
        for row in rows
    ]
    expect_cols = [t for t in range(d) if any(f[t] for f in full)]
    assert cols.tolist() == expect_cols
    assert diffs.tolist() == [[f[t] for t in expect_cols] for f in full]


# ------------------------------------------------------------------ through the protocol
def _config(
    masking: str, *, n: int = 6, s: int = 2, d: int = 4000, extra: int = 0
) -> ProtocolConfig:
    return ProtocolConfig(
        num_silos=n,
        num_stragglers=s,
        privacy_threshold=1,
        vector_length=d,
        masking=masking,
        code="repetition",
        extra_replies=extra,
    )


def drift(seed: int, fraction: float = 0.3, steps: float = 40.0):
    """Another CPU's replica: a few quantization steps off at ``fraction`` of the coordinates."""

    def tamper(partition: int, g: torch.Tensor) -> torch.Tensor:
        gen = torch.Generator().manual_seed(seed * 1000 + partition)
        hit = torch.rand(g.shape, generator=gen) < fraction
        noise = (torch.rand(g.shape, generator=gen) - 0.5) * 2 * steps / 2**20
        return g + hit * noise

    return tamper


def replica_sums(h: Harness, number: int, behaviour: dict[int, Silo]) -> dict[int, list[int]]:
    """Oracle: every silo's group sum as it quantizes it (Python ints), tamper applied."""
    cfg = h.config
    code = cfg.gradient_code
    out = {}
    for i in range(cfg.n):
        total = torch.zeros(cfg.vector_length, dtype=torch.int64)
        for k in code.support(i):
            g = h.partials(number, k)
            if i in behaviour and behaviour[i].tamper is not None:
                g = behaviour[i].tamper(k, g)
            key = RoundingKey.for_partition(cfg.seed_id, number, k)
            total += stochastic_round(g, cfg.quantization, key)
        out[i] = total.tolist()
    return out


def median_total(h: Harness, number: int, behaviour: dict[int, Silo], survivors) -> list[int]:
    """The vote's expected sum when every difference is within the tolerance and every
    survivor is compared (aligned masks)."""
    code = h.config.gradient_code
    sums = replica_sums(h, number, behaviour)
    total = np.zeros(h.config.vector_length, dtype=np.int64)
    for grp in code.groups:
        voters = [i for i in grp if i in survivors]
        vals = np.array([sums[i] for i in voters]) - np.array(sums[voters[0]])
        srt = np.sort(vals, axis=0)
        k = len(voters)
        med = srt[k // 2] if k % 2 else srt[k // 2 - 1] + (srt[k // 2] - srt[k // 2 - 1]) // 2
        total += np.array(sums[voters[0]]) + med
    return total.tolist()


def _round3(masking: str, behaviour: dict[int, Silo], **kw):
    cfg = _config(masking, **kw)
    h = Harness(cfg, seed=7)
    h.setup()
    for r in (1, 2):  # aligned: the edge keys are dealt in rounds 1 and 2
        assert isinstance(h.run_round(r).result, RoundResult)
    return cfg, h, h.run_round(3, behaviour)


def test_drift_on_every_other_site_never_stops_an_aligned_round():
    # the deployment that aborted every round: even sites one CPU, odd sites another, every
    # reply arriving together (no straggler), replicas apart at 30 % of the coordinates
    behaviour = {i: Silo(tamper=drift(i)) for i in (1, 3, 5)}
    cfg, h, out = _round3("aligned", behaviour)
    res = out.result
    assert isinstance(res, RoundResult), res.reason
    assert not res.responders  # one round trip: group-masked
    assert res.disagreeing > 0.2 * cfg.vector_length
    assert res.within_tolerance == res.disagreeing == res.corrected
    assert res.erased.numel() == 0 and res.offenders == () and res.located == {}
    signed = cfg.field.to_signed(res.aggregate).tolist()
    assert signed == median_total(h, 3, behaviour, res.survivors)
    # the next rounds go on with every silo
    assert isinstance(h.run_round(4, behaviour).result, RoundResult)


def test_drift_with_shared_masks_completes_and_reads_the_median():
    behaviour = {i: Silo(tamper=drift(i)) for i in (1, 3, 5)}
    cfg = _config("shares", extra=2)  # all six replies: every group comparison is made
    h = Harness(cfg, seed=7)
    h.setup()
    res = h.run_round(1, behaviour).result
    assert isinstance(res, RoundResult), res.reason
    # 6 survivors in groups {0, 1, 2} and {3, 4, 5}: 4 comparisons, each group's median
    assert res.checks == 4 and res.disagreeing > 0 and res.offenders == ()
    assert res.within_tolerance == res.disagreeing and res.erased.numel() == 0
    signed = cfg.field.to_signed(res.aggregate).tolist()
    assert signed == median_total(h, 1, behaviour, res.survivors)


def test_a_silo_off_where_its_group_agrees_is_overruled_named_and_left_out():
    def poison(partition: int, g: torch.Tensor) -> torch.Tensor:
        g = g.clone()
        g[[3, 17, 2000]] += 0.5  # far beyond drift: a deviating silo, targeted coordinates
        return g

    cfg, h, out = _round3("aligned", {1: Silo(tamper=poison)})
    res = out.result
    assert isinstance(res, RoundResult), res.reason
    # the group {0, 1, 2}: 0 and 2 agree, so the sum is exactly the honest one
    assert torch.equal(cfg.field.to_signed(res.aggregate), h.expected_total(3))
    assert res.offenders == (1,) and res.located == {1: 3} and res.erased.numel() == 0
    # left out of the next rounds: its upload is refused, the rounds complete without it
    nxt = h.run_round(4)
    assert isinstance(nxt.result, RoundResult) and 1 not in nxt.result.survivors
    assert any(silo == 1 and "left out" in why for silo, why in nxt.refused)
    assert torch.equal(cfg.field.to_signed(nxt.result.aggregate), h.expected_total(4))


def _five_silos(seed: int = 2) -> tuple[ProtocolConfig, Harness]:
    # n = 5, s = 1: groups {0, 1, 2} and {3, 4}; extra_replies=1 waits for all five uploads
    cfg = _config("aligned", n=5, s=1, d=500, extra=1)
    h = Harness(cfg, seed=seed)
    h.setup()
    for r in (1, 2):
        assert isinstance(h.run_round(r).result, RoundResult)
    return cfg, h


def _shift(amount: float, where: list[int]):
    def poison(partition: int, g: torch.Tensor) -> torch.Tensor:
        g = g.clone()
        g[where] += amount
        return g

    return poison


@pytest.mark.parametrize("bad", range(5))
def test_a_bad_replica_is_caught_at_every_silo_position(bad):
    # issue 27, attack 1: n = 5, s = 1, every upload in; the old parity rows compared only
    # silos 0 and 1 and missed a bad replica elsewhere (sum off by 0.5, nothing flagged)
    cfg, h = _five_silos()
    res = h.run_round(3, {bad: Silo(tamper=_shift(0.9, [5, 6]))}).result
    assert isinstance(res, RoundResult), res.reason
    expect = h.expected_total(3)
    got = cfg.field.to_signed(res.aggregate)
    kept = torch.ones(cfg.vector_length, dtype=torch.bool)
    kept[res.erased] = False
    assert torch.equal(got[kept], expect[kept])  # never a wrong value
    group = next(g for g in cfg.gradient_code.groups if bad in g)
    if len(group) >= 3:  # a majority overrules it: exact, named, left out from now on
        assert res.offenders == (bad,) and res.erased.numel() == 0
        assert res.located == {bad: 2}
    else:  # two that disagree: erased there, both named, nobody excluded on one's word
        assert res.erased.tolist() == [5, 6]
        assert res.unresolved == {i: 2 for i in group} and res.offenders == ()


def test_within_the_tolerance_a_pair_moves_a_coordinate_by_half_the_difference_at_most():
    # the bounded influence of a deviating member of a group of two survivors
    cfg, h = _five_silos()
    res = h.run_round(3, {4: Silo(tamper=_shift(0.05, [9]))}).result
    assert isinstance(res, RoundResult), res.reason
    got = cfg.field.to_signed(res.aggregate)
    expect = h.expected_total(3)
    off = (got - expect).abs()
    step = cfg.quantization.scale
    held = len(cfg.gradient_code.support(4))  # each partition it holds moved by 0.05
    assert off[9] <= held * 0.05 / 2 * step + 1 and int(off.sum()) == int(off[9])
    assert res.within_tolerance == res.disagreeing == 1 and res.offenders == ()


# ------------------------------------------------------------------ recovery replies (shares)
def _crafted(silo_rows: int = 0, element: int = 3):
    """Issue 27, attack 2: a silo adds a computed amount to one element of its recovery reply."""

    def forge(reply):  # type: ignore[no-untyped-def]
        rows = reply.rows.clone()
        rows[silo_rows, element] = (int(rows[silo_rows, element]) + 12345) % (2**31 - 1)
        return dataclasses.replace(reply, rows=rows)

    return forge


@pytest.mark.parametrize("bad", [0, 2, 7])
def test_a_crafted_recovery_reply_is_located_left_out_and_the_sum_stays_exact(bad):
    # shared masks, every survivor answers: 8 replies for U = 5, three checks locate one wrong
    cfg = _config("shares", n=8, s=3, d=300, extra=3)
    h = Harness(cfg, seed=4)
    h.setup()
    res = h.run_round(1, {bad: Silo(forge_recovery=_crafted())}).result
    assert isinstance(res, RoundResult), res.reason
    assert torch.equal(cfg.field.to_signed(res.aggregate), h.expected_total(1))
    assert bad in res.offenders and res.erased.numel() == 0
    nxt = h.run_round(2)  # left out from now on
    assert isinstance(nxt.result, RoundResult) and bad not in nxt.result.survivors


def test_a_crafted_recovery_reply_with_one_check_aborts_and_never_applies_a_wrong_sum():
    cfg = _config(
        "shares", n=6, s=1, d=300, extra=1
    )  # U = n - s = 5, all 6 answer: one check detects, cannot locate
    h = Harness(cfg, seed=4)
    h.setup()
    res = h.run_round(1, {3: Silo(forge_recovery=_crafted())}).result
    assert isinstance(res, RoundAborted)
    assert "recovery replies are inconsistent" in res.reason
    assert res.code is AbortCode.RECOVERY_INCONSISTENT


def test_a_copied_public_key_is_refused_and_changes_nothing():
    # issue 27, item 7: the server accepted a copy of another silo's public key
    from coded_fl.errors import RemoteProtocolError
    from coded_fl.secagg.messages import KeyReply

    cfg = _config("shares")
    h = Harness(cfg, seed=1)
    server = h.server
    replies = [h.clients[r.recipient].on_key_request(r) for r in server.start_key_exchange()]
    server.receive(replies[0])
    copy = dataclasses.replace(replies[1], public_key=replies[0].public_key)
    assert isinstance(copy, KeyReply)
    with pytest.raises(RemoteProtocolError, match="already another silo's") as err:
        server.receive(copy)
    assert err.value.sender == 1
    for reply in replies[1:]:  # its own key is still welcome
        server.receive(reply)
    assert server.close_key_exchange() == ()


@pytest.mark.parametrize("bad", range(10))
def test_with_shared_masks_every_group_is_compared_when_extra_uploads_came(bad):
    # found by the adversary benchmark: comparing only |S| - (n - s) pairs left the third
    # group's reference (silo 7) unchecked, and its wrong replica moved the sum unseen
    cfg = _config("shares", n=10, s=2, d=300, extra=2)
    h = Harness(cfg, seed=3)
    h.setup()
    res = h.run_round(1, {bad: Silo(tamper=_shift(0.5, [5, 6, 7]))}).result
    assert isinstance(res, RoundResult), res.reason
    assert torch.equal(cfg.field.to_signed(res.aggregate), h.expected_total(1))
    assert res.offenders == (bad,) and res.erased.numel() == 0
