"""Fractional repetition for any n > s (groups of unequal size): placement, storage optimality
against brute force, the old placement kept where (s+1) | n, the auto choice, and consumers of
the placement (shuffling assignment, a protocol round in the harness)."""

from __future__ import annotations

import math

import pytest
import torch

from coded_fl.codes import (
    FractionalRepetitionCode,
    PlainAggregation,
    PolynomialCode,
    balanced_groups,
    make_code,
    prefer_repetition,
    spread_partitions,
)
from coded_fl.errors import ConfigurationError
from coded_fl.quantize import RoundingKey, stochastic_round
from coded_fl.secagg import ProtocolConfig, RoundResult
from coded_fl.shuffling import assignment_from_support
from simulations.runtime.secagg_harness import Harness, Silo


def compositions(total: int, parts: int, low: int = 1):
    """Every way to write ``total`` as ``parts`` ordered counts >= ``low``."""
    if parts == 1:
        if total >= low:
            yield (total,)
        return
    for first in range(low, total - low * (parts - 1) + 1):
        for rest in compositions(total - first, parts - 1, low):
            yield (first, *rest)


def set_partitions(items: list[int]):
    if not items:
        yield []
        return
    first, rest = items[0], items[1:]
    for part in set_partitions(rest):
        for k in range(len(part)):
            yield [*part[:k], [first, *part[k]], *part[k + 1 :]]
        yield [[first], *part]


@pytest.mark.parametrize(("n", "s"), [(n, s) for n in range(2, 13) for s in range(1, n)])
def test_spread_is_the_least_storage_then_the_least_copies(n, s):
    sizes = [len(g) for g in balanced_groups(n, n // (s + 1))]
    g = len(sizes)
    for k in range(g, min(2 * n, g + 9) + 1):
        counts = spread_partitions(sizes, k)
        assert sum(counts) == k and min(counts) >= 1
        # brute force over every split (empty groups allowed for the maximum)
        best_max = min(max(c) for c in compositions(k, g, low=0))
        assert max(counts) == best_max == math.ceil(k / g)
        copies = min(
            sum(m * c for m, c in zip(sizes, cs, strict=True))
            for cs in compositions(k, g)
            if max(cs) == best_max
        )
        assert sum(m * c for m, c in zip(sizes, counts, strict=True)) == copies
        code = FractionalRepetitionCode(n, s, num_partitions=k)
        assert code.storage == best_max
        per_silo = [len(code.support(i)) for i in range(n)]
        assert sum(per_silo) == copies


@pytest.mark.parametrize("n", range(2, 8))
def test_no_group_code_on_any_grouping_stores_less(n):
    # any split of the silos into groups; a group holding data needs >= s + 1 members
    groupings = list(set_partitions(list(range(n))))
    for s in range(1, n):
        usable = max(sum(1 for grp in gs if len(grp) >= s + 1) for gs in groupings)
        assert usable == n // (s + 1)
        for k in range(n // (s + 1), 2 * n + 1):
            assert FractionalRepetitionCode(n, s, num_partitions=k).storage == math.ceil(k / usable)


def test_unequal_groups_example():
    code = FractionalRepetitionCode(7, 2)
    assert code.groups == ((0, 1, 2, 3), (4, 5, 6))
    assert [code.support(i) for i in range(7)] == [(0, 1, 2)] * 4 + [(3, 4, 5, 6)] * 3
    assert code.storage == 4 and code.replication == 3
    a = code.decoding_vector([1, 2, 3, 5, 6])
    assert (a != 0).tolist() == [True, False, False, True, False]
    # silo i's reply is scaled by a public pseudo-random r_i, read back with r_i^-1
    r1, r5 = int(code.matrix[1, 0]), int(code.matrix[5, 3])
    p = code.field.p
    assert r1 not in (0, 1) and (int(a[0]) * r1 % p, int(a[3]) * r5 % p) == (1, 1)
    assert set(code.coefficients(1).tolist()) == {r1}  # one scale per silo
    code = FractionalRepetitionCode(10, 2)  # groups of 4, 3, 3
    assert [len(g) for g in code.groups] == [4, 3, 3]
    assert [len(code.support(g[0])) for g in code.groups] == [2, 4, 4]


@pytest.mark.parametrize(("n", "s"), [(n, s) for n in range(1, 25) for s in range(n)])
def test_equal_groups_keep_the_original_placement(n, s):
    if n % (s + 1):
        return
    g = n // (s + 1)
    for k in range(g, 2 * n + 1):
        code = FractionalRepetitionCode(n, s, num_partitions=k)
        for j in range(k):
            q = (j * g) // k
            assert code.holders(j) == tuple(range(q * (s + 1), (q + 1) * (s + 1)))


def test_every_s_straggler_set_leaves_a_survivor_per_group():
    for n in range(2, 16):
        for s in range(1, n):
            code = FractionalRepetitionCode(n, s)
            assert min(len(g) for g in code.groups) >= s + 1
            assert code.replication >= s + 1


def test_refusals_name_the_setting():
    with pytest.raises(ConfigurationError, match=r"num_partitions=2 is fewer than the 3"):
        FractionalRepetitionCode(10, 2, num_partitions=2)
    with pytest.raises(ConfigurationError, match=r"num_partitions=1 is fewer than the 2"):
        spread_partitions([3, 2], 1)
    with pytest.raises(ConfigurationError, match="at least one group"):
        spread_partitions([], 3)
    with pytest.raises(ConfigurationError, match="group size=0"):
        spread_partitions([2, 0], 3)


def test_storage_is_below_twice_s_plus_one():
    for n in range(2, 101):
        for s in range(1, n):
            sizes = [len(g) for g in balanced_groups(n, n // (s + 1))]
            most = max(spread_partitions(sizes, n))
            assert most <= 2 * s + 1
            assert (most == s + 1) == (n % (s + 1) == 0)


def test_prefer_repetition_whenever_the_repetition_code_exists():
    for n in range(1, 40):
        for s in range(n):
            for k in (1, 2, n, 2 * n):
                exists = s >= 1 and k >= n // (s + 1)
                assert prefer_repetition(n, s, k) == exists, (n, s, k)


def test_repetition_storage_is_the_lower_bound_exactly_when_s_plus_1_divides_n():
    for n in range(2, 20):
        for s in range(1, n):
            code = FractionalRepetitionCode(n, s)
            assert (code.storage == s + 1) == (n % (s + 1) == 0), (n, s)
            assert code.storage <= 2 * s + 1
    # a setting the polynomial code refuses (silos without data) but repetition serves
    with pytest.raises(ConfigurationError, match="leaves silos without data"):
        PolynomialCode(11, 1, num_partitions=5)
    assert prefer_repetition(11, 1, 5)
    assert make_code(11, 1, kind="repetition", num_partitions=5).storage == 1


def test_auto_picks_repetition_and_polynomial_stays_available():
    assert type(make_code(6, 2)) is FractionalRepetitionCode
    assert type(make_code(7, 2)) is FractionalRepetitionCode
    assert type(make_code(7, 2, kind="polynomial")) is PolynomialCode
    assert type(make_code(7, 0)) is PlainAggregation


def test_shuffling_assignment_follows_the_unequal_placement():
    code = FractionalRepetitionCode(11, 2, num_partitions=13)
    a = assignment_from_support(code.matrix)
    assert a == {j: frozenset(code.holders(j)) for j in range(13)}


def _config(**kw) -> ProtocolConfig:
    base = {"num_silos": 7, "num_stragglers": 2, "privacy_threshold": 1, "vector_length": 40}
    return ProtocolConfig(code="repetition", run_id="rep-7-2", **{**base, **kw})


def test_a_protocol_round_with_unequal_groups_decodes_the_exact_sum():
    cfg = _config()
    assert cfg.gradient_code.groups == ((0, 1, 2, 3), (4, 5, 6))
    h = Harness(cfg, seed=5)
    h.setup()
    for number, slow in ((1, {0, 4}), (2, {5, 6}), (3, set())):
        out = h.run_round(number, {i: Silo(delay=9.0) for i in slow})
        assert isinstance(out.result, RoundResult), getattr(out.result, "reason", "")
        assert torch.equal(cfg.field.to_signed(out.result.aggregate), h.expected_total(number))


def test_disagreeing_replicas_give_one_replicas_sum():
    cfg = _config()
    code = cfg.gradient_code

    def shifted(k: int, g: torch.Tensor) -> torch.Tensor:
        return g + 0.01

    def expected(h: Harness, moved: set[int]) -> torch.Tensor:
        total = torch.zeros(cfg.vector_length, dtype=torch.int64)
        for k in range(code.K):
            g = h.partials(1, k)
            g = shifted(k, g) if k in moved else g
            total += stochastic_round(
                g, cfg.quantization, RoundingKey.for_partition(cfg.seed_id, 1, k)
            )
        return total

    slow = {0: Silo(delay=9.0), 4: Silo(delay=9.0)}  # survivors 1, 2, 3, 5, 6
    # silo 2's replica differs but silo 1 is read for group 0: the sum is silo 1's
    h = Harness(cfg, seed=5)
    h.setup()
    out = h.run_round(1, {**slow, 2: Silo(tamper=shifted)})
    assert isinstance(out.result, RoundResult)
    got = cfg.field.to_signed(out.result.aggregate)
    assert torch.equal(got, expected(h, set()))
    # the replica read differs from the others: the sum is still a replica's, not garbage
    h = Harness(cfg, seed=5)
    h.setup()
    out = h.run_round(1, {**slow, 1: Silo(tamper=shifted)})
    assert isinstance(out.result, RoundResult)
    got = cfg.field.to_signed(out.result.aggregate)
    assert torch.equal(got, expected(h, set(code.support(1))))
    assert not torch.equal(got, expected(h, set()))
