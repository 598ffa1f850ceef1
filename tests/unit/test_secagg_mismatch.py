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
