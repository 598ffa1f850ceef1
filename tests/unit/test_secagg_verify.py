"""The weight rows of secure aggregation, against known answers (``tests/data/weight_rows.json``).

The server builds the rows (:func:`weight_rows`) and every survivor checks them
(:func:`check_weight_rows`) before unmasking with them. The rows come from the code's parity
checks; before, they came from the reduced left null space of :math:`B_S` (``rows_before``).
For the polynomial code both bases must give the same row 0 and the same row space (so
unmasking reveals the same things and locates the same silos), and a silo must accept either.
For the repetition code the rows after row 0 are its group comparisons, fixed by S: checked
here against a construction from the definition, and any other basis is refused.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

import numpy as np
import pytest

from coded_fl.errors import RemoteProtocolError
from coded_fl.linalg import rank
from coded_fl.secagg import ProtocolConfig
from coded_fl.secagg.verify import check_weight_rows, weight_rows

VECTORS = json.loads((Path(__file__).parents[1] / "data" / "weight_rows.json").read_text())


@functools.cache
def config(n: int, s: int, code: str, p: int) -> ProtocolConfig:
    return ProtocolConfig(
        num_silos=n, num_stragglers=s, privacy_threshold=0, vector_length=4, code=code, p=p
    )


def case_id(case: dict) -> str:
    return f"{case['code']}-n{case['n']}s{case['s']}-S{''.join(map(str, case['survivors']))}"


@pytest.mark.parametrize("case", VECTORS["cases"], ids=case_id)
def test_weight_rows_known_answers(case):
    cfg = config(case["n"], case["s"], case["code"], case["p"])
    rows = weight_rows(cfg, case["survivors"])
    assert rows.dtype == np.int64
    assert rows.tolist() == case["rows"]
    assert check_weight_rows(cfg, case["survivors"], case["rows"]).tolist() == case["rows"]


POLYNOMIAL = [c for c in VECTORS["cases"] if c["code"] == "polynomial"]
REPETITION = [c for c in VECTORS["cases"] if c["code"] == "repetition"]


@pytest.mark.parametrize("case", POLYNOMIAL, ids=case_id)
def test_weight_rows_span_what_they_spanned_before(case):
    cfg = config(case["n"], case["s"], case["code"], case["p"])
    new, old = np.array(case["rows"]), np.array(case["rows_before"])
    assert new.shape == old.shape
    assert new[0].tolist() == old[0].tolist()
    both = rank(np.concatenate([new[1:], old[1:]]), cfg.p)
    assert rank(new[1:], cfg.p) == rank(old[1:], cfg.p) == both == new.shape[0] - 1
    # a silo accepts rows from a server that builds them either way
    assert check_weight_rows(cfg, case["survivors"], case["rows_before"]).tolist() == old.tolist()


def test_weight_rows_are_a_new_array_each_time():
    cfg = config(5, 2, "polynomial", 2**31 - 1)
    rows = weight_rows(cfg, [0, 1, 2, 4])
    rows[1] = 0  # the server may do what it likes with its copy; the code's checks are untouched
    assert weight_rows(cfg, [0, 1, 2, 4])[1].any()


def test_check_weight_rows_refuses_a_non_check():
    cfg = config(5, 2, "polynomial", 2**31 - 1)
    rows = weight_rows(cfg, [0, 1, 2, 3, 4])
    rows[1, 0] = (rows[1, 0] + 1) % cfg.p
    with pytest.raises(RemoteProtocolError, match="not a parity check"):
        check_weight_rows(cfg, [0, 1, 2, 3, 4], rows.tolist())


@pytest.mark.parametrize("case", REPETITION, ids=case_id)
def test_repetition_rows_are_group_comparisons_from_the_definition(case):
    """Python ints: each check row is r_ref^-1 e_ref - r_j^-1 e_j for two survivors of one group,
    the reference the group's smallest survivor, second survivors of every group first, all of
    them when |S| > n - s and none at exactly n - s (shared masks); an old basis of the same
    space is refused."""
    cfg = config(case["n"], case["s"], case["code"], case["p"])
    code, p, surv = cfg.gradient_code, case["p"], case["survivors"]
    r = [int(code.matrix[i][code.support(i)[0]]) for i in range(case["n"])]
    by_group: dict[int, list[int]] = {}
    for pos, silo in enumerate(surv):
        by_group.setdefault(code.group_of(silo), []).append(pos)
    expected = []
    for rank_ in range(1, case["n"]):
        for q in sorted(by_group):
            members = by_group[q]
            if rank_ < len(members):
                row = [0] * len(surv)
                row[members[0]] = pow(r[surv[members[0]]], -1, p)
                row[members[rank_]] = (-pow(r[surv[members[rank_]]], -1, p)) % p
                expected.append(row)
    expected = expected if len(surv) > case["n"] - case["s"] else []
    assert case["rows"][1:] == expected
    if case["rows_before"] != case["rows"]:
        with pytest.raises(RemoteProtocolError, match="group comparisons"):
            check_weight_rows(cfg, surv, case["rows_before"])
