"""Per-coordinate decoding (coded_fl.codes.resolve) against Python-int oracles.

Silos hold replicas of their partitions that differ at a few coordinates (float noise on
different machines). The oracle computes every reply and every weighted sum with Python
integers mod p, and knows per coordinate how many silos' replicas are off. With e parity checks
and radius r = e // 2 (MDS: any e columns of H independent):

* at most r off replies at a coordinate: the value is the exact sum of the majority replicas
  (corrected if the checks failed), never erased;
* r < off <= e - r: no explanation within the radius exists, so the coordinate is erased;
* without checks a mixed coordinate is kept only if it lies in the range of a true sum.
"""

from __future__ import annotations

import numpy as np
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from coded_fl.codes import make_code
from coded_fl.codes.resolve import resolve
from coded_fl.field import PrimeField

F = PrimeField()
P = F.p
D = 8
BOUND = 10_000  # |partition value| <= 100, K <= 8 partitions: true sums are far inside


@st.composite
def rounds(draw: st.DrawFn) -> dict:
    n = draw(st.integers(4, 8))
    s = draw(st.integers(1, n - 2))
    e = draw(st.integers(0, s))
    code = make_code(n, s, kind="polynomial")
    survivors = sorted(draw(st.permutations(range(n)))[: n - s + e])
    base = [[draw(st.integers(-100, 100)) for _ in range(D)] for _ in range(n)]  # K = n
    off = draw(  # coordinate -> silos whose replicas differ there (only silos in S matter)
        st.dictionaries(
            st.integers(0, D - 1),
            st.sets(st.sampled_from(survivors), min_size=1, max_size=e + 1),
            max_size=D,
        )
    )
    noise = draw(st.integers(1, 3))
    return {"code": code, "S": survivors, "e": e, "base": base, "off": off, "noise": noise}


def _replies(case: dict) -> list[list[int]]:
    """Every survivor's reply, Python ints: sum_k B_ik r_ik with its own replicas r_i."""
    code, base, off = case["code"], case["base"], case["off"]
    out = []
    for i in case["S"]:
        row = []
        for t in range(D):
            total = 0
            for k in code.support(i):
                v = base[k][t]
                if i in off.get(t, ()):  # this silo's replica of its first partition differs
                    v += case["noise"] if k == code.support(i)[0] else 0
                total += int(code.matrix[i, k]) * v
            row.append(total % P)
        out.append(row)
    return out


def _sums(rows: np.ndarray, replies: list[list[int]]) -> torch.Tensor:
    return torch.tensor(
        [
            [sum(int(w) * y[t] for w, y in zip(row, replies, strict=True)) % P for t in range(D)]
            for row in rows
        ],
        dtype=torch.int64,
    ).to(torch.uint32)


@settings(max_examples=60, deadline=None)
@given(rounds())
def test_each_coordinate_is_exact_corrected_or_erased_as_the_error_count_says(case: dict) -> None:
    code, S, e = case["code"], case["S"], case["e"]
    rows = np.vstack([code.decoding_vector(S)[None, :], code.parity_checks(S)])
    radius = e // 2
    out = resolve(F, rows, _sums(rows, _replies(case)), bound=BOUND, radius=radius)
    value = [v if v <= P // 2 else v - P for v in out.value.tolist()]
    erased = set(out.erased.tolist())
    truth = [sum(case["base"][k][t] for k in range(code.n)) for t in range(D)]
    for t in range(D):
        k_off = len(case["off"].get(t, ()))
        if k_off <= radius:
            assert t not in erased and value[t] == truth[t], (t, k_off, radius)
        elif e > 0 and k_off <= e - radius:
            assert t in erased, (t, k_off, radius)
        elif t not in erased:  # beyond what the checks guarantee: at least never out of range
            assert abs(value[t]) <= BOUND
        if t in erased:
            assert value[t] == 0
    if e > 0:
        # up to e off replies are always detected; e + 1 may cancel out in the syndromes
        detected = sum(1 for t in range(D) if 1 <= len(case["off"].get(t, ())) <= e)
        assert detected <= out.disagreeing <= sum(1 for t in range(D) if case["off"].get(t))
        fixed = [t for t in range(D) if 0 < len(case["off"].get(t, ())) <= radius]
        assert out.corrected >= len(fixed)
    else:
        assert out.disagreeing == 0 and out.corrected == 0


@settings(max_examples=40, deadline=None)
@given(rounds())
def test_a_located_reply_is_one_whose_replica_differs(case: dict) -> None:
    code, S, e = case["code"], case["S"], case["e"]
    # within what the checks guarantee (at most e - e // 2 off replies per coordinate); beyond
    # it a smaller wrong explanation can exist (miscorrection, as for any bounded decoder)
    case["off"] = {t: v for t, v in case["off"].items() if len(v) <= e - e // 2}
    rows = np.vstack([code.decoding_vector(S)[None, :], code.parity_checks(S)])
    out = resolve(F, rows, _sums(rows, _replies(case)), bound=BOUND, radius=e // 2)
    for pos, count in out.located.items():
        coords = [t for t, silos in case["off"].items() if S[pos] in silos]
        assert 0 < count <= len(coords)


def test_without_checks_a_mixed_coordinate_out_of_range_is_erased_and_counted():
    code = make_code(5, 2, kind="polynomial")
    S = [0, 1, 2]
    case = {
        "code": code,
        "S": S,
        "e": 0,
        "noise": 1,
        "off": {3: {1}},
        "base": [[t + k for t in range(D)] for k in range(5)],
    }
    rows = code.decoding_vector(S)[None, :]
    out = resolve(F, rows, _sums(rows, _replies(case)), bound=BOUND, radius=0)
    # a mixed coordinate is a field element far from any true sum (it lands inside with
    # probability about (2 BOUND + 1) / p): erased, and counted as out of range
    assert out.erased.tolist() == [3] and out.out_of_range == 1 and out.disagreeing == 0
    exact = [sum(r[t] for r in case["base"]) for t in range(D)]
    assert [v for t, v in enumerate(out.value.tolist()) if t != 3] == exact[:3] + exact[4:]


def test_repetition_group_of_two_that_disagrees_is_erased_and_a_majority_of_three_corrects():
    code = make_code(6, 2, kind="repetition")  # groups {0,1,2}, {3,4,5}
    S = [0, 1, 2, 3, 4]  # e = 3: group 0 has three replies, group 1 two
    base = [[10 * k + t for t in range(D)] for k in range(6)]
    case = {"code": code, "S": S, "e": 3, "noise": 2, "base": base, "off": {1: {0}, 5: {4}}}
    rows = np.vstack([code.decoding_vector(S)[None, :], code.parity_checks(S)])
    out = resolve(F, rows, _sums(rows, _replies(case)), bound=BOUND, radius=1)
    truth = [sum(r[t] for r in base) for t in range(D)]
    value = out.value.tolist()
    # coordinate 1: silo 0 (the decoded reply) is outvoted by silos 1 and 2: corrected
    assert value[1] == truth[1] and 1 not in out.erased.tolist()
    # coordinate 5: silos 3 and 4 disagree and nothing tells which is right: erased
    assert out.erased.tolist() == [5] and value[5] == 0
    assert out.disagreeing == 2 and out.corrected == 1 and out.located == {0: 1}
