"""Replicas that disagree never produce a wrong sum: detected, and named with >= 2 extra replies."""

from __future__ import annotations

import torch

from coded_fl.secagg import ProtocolConfig, RoundAborted, RoundResult
from coded_fl.secagg.harness import Harness, Silo


def tamper(partition: int, g: torch.Tensor) -> torch.Tensor:
    return g + 1e-3 * (partition + 1)  # this silo's replicas differ slightly (another GPU, say)


def run(extra: int, bad: int = 2):
    cfg = ProtocolConfig(
        num_silos=8,
        num_stragglers=3,
        privacy_threshold=1,
        recovery_threshold=5,
        vector_length=64,
        extra_replies=extra,
    )
    h = Harness(cfg, seed=11)
    h.setup()
    return cfg, h, h.run_round(1, {bad: Silo(tamper=tamper)})


def test_without_extra_replies_the_corrupt_sum_is_refused_by_the_range_check():
    _cfg, _h, out = run(extra=0)
    assert isinstance(out.result, RoundAborted)
    assert "corrupt" in out.result.reason


def test_one_extra_reply_detects_but_cannot_name():
    _cfg, _h, out = run(extra=1)
    assert isinstance(out.result, RoundAborted)
    assert "disagree" in out.result.reason and out.result.suspects == ()


def test_two_extra_replies_name_the_silo():
    for bad in (0, 2, 5):
        _cfg, _h, out = run(extra=2, bad=bad)
        assert isinstance(out.result, RoundAborted)
        assert out.result.suspects == (bad,), out.result.reason


def test_consistent_replicas_pass_the_checks():
    cfg = ProtocolConfig(
        num_silos=8,
        num_stragglers=3,
        privacy_threshold=1,
        recovery_threshold=5,
        vector_length=64,
        extra_replies=3,
    )
    h = Harness(cfg, seed=11)
    h.setup()
    out = h.run_round(1)
    assert isinstance(out.result, RoundResult) and out.result.checks == 3
    assert torch.equal(cfg.field.to_signed(out.result.aggregate), h.expected_total(1))


def test_without_extra_replies_a_one_step_disagreement_can_pass_the_range_check():
    # A documented limitation (docs/protocol.md, "Replicas that disagree"): with exactly n - s
    # uploads the range check is the only guard, and it is deterministic. If silo l's replica of
    # partition k is one quantization step off, the decoded sum moves by gamma = a_l(S) B_lk on
    # every such coordinate: one public field element for all of them, so they pass or fail
    # together. For the default field and n = 20, s = 2 this gamma is small for S = all silos
    # but 13 and 15, k = l = 7: the round succeeds with a wrong sum.
    cfg = ProtocolConfig(num_silos=20, num_stragglers=2, vector_length=64)
    p, code, scale = cfg.p, cfg.gradient_code, cfg.quantization.scale
    survivors = [i for i in range(20) if i not in (13, 15)]
    gamma = int(code.decoding_vector(survivors)[survivors.index(7)]) * int(code.matrix[7, 7]) % p
    gamma = gamma - p if gamma > p // 2 else gamma
    bound = code.K * cfg.quantization.max_abs  # the range check's limit R
    assert abs(gamma) < bound // 100  # far inside the range: passes whatever the true sum

    def one_step(partition: int, g: torch.Tensor) -> torch.Tensor:
        if partition != 7:
            return g
        g = g.clone()
        g[[3, 17, 40]] += 1.0 / scale  # exactly one quantization step (scale is a power of 2)
        return g

    h = Harness(cfg, seed=3)
    h.setup()
    out = h.run_round(1, {13: Silo(delay=1.0), 15: Silo(delay=1.0), 7: Silo(tamper=one_step)})
    assert isinstance(out.result, RoundResult)  # not refused ...
    assert list(out.result.survivors) == survivors and out.result.checks == 0
    got = torch.round(out.result.total.double() * scale).to(torch.int64)
    error = got - h.expected_total(1)
    assert error.nonzero().flatten().tolist() == [3, 17, 40]  # ... and wrong there,
    assert error[[3, 17, 40]].tolist() == [gamma] * 3  # by the same gamma on each coordinate
