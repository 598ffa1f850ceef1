"""The protocol end to end in the in-memory harness: exact sums under dropouts at every stage,
clear aborts beyond the tolerance."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from coded_fl.errors import DecodingError
from coded_fl.secagg import AbortCode, ProtocolConfig, RoundAborted, RoundResult
from coded_fl.secagg.policy import ClientPolicy
from simulations.runtime.secagg_harness import Harness, Silo


@st.composite
def scenarios(draw):
    n = draw(st.integers(1, 30))
    s = draw(st.integers(0, n - 1))
    u = draw(st.integers(1, n - s))
    t = draw(st.integers(0, u - 1))
    d = draw(st.integers(1, 60))
    silos = {}
    for i in range(n):
        kind = draw(st.sampled_from([None, None, None, "keys", "train", "recovery", "slow"]))
        if kind == "slow":
            silos[i] = Silo(delay=draw(st.floats(0.5, 10.0)))
        elif kind is not None:
            silos[i] = Silo(drop=kind, delay=draw(st.floats(0.0, 1.0)))
        else:
            silos[i] = Silo(delay=draw(st.floats(0.0, 1.0)))
    return n, s, t, u, d, silos, draw(st.integers(0, 2**16))


@settings(max_examples=40)
@given(case=scenarios())
def test_exact_sum_or_a_clear_abort(case):
    n, s, t, u, d, silos, seed = case
    cfg = ProtocolConfig(
        num_silos=n,
        num_stragglers=s,
        privacy_threshold=t,
        recovery_threshold=u,
        vector_length=d,
        run_id=f"prop-{seed}",
        masking="shares",
    )
    h = Harness(cfg, seed=seed)
    if t == 0:  # T = 0 is a valid protocol setting; silos accept it only when told to
        for c in h.clients.values():
            c.policy = ClientPolicy(min_privacy_threshold=0)
    keyed = [i for i in range(n) if silos[i].drop != "keys"]
    if len(keyed) < cfg.min_uploads:
        with pytest.raises(DecodingError, match="have keys"):
            h.setup(silos)
        return
    assert set(h.setup(silos)) == {i for i in range(n) if silos[i].drop == "keys"}
    out = h.run_round(1, silos)
    uploaders = sorted((silos[i].delay, i) for i in keyed if silos[i].drop != "train")
    if len(uploaders) < cfg.min_uploads:
        assert isinstance(out.result, RoundAborted)
        assert "uploaded in time" in out.result.reason
        assert out.result.code is AbortCode.TOO_FEW_UPLOADS
        return
    survivors = tuple(sorted(i for _, i in uploaders[: cfg.min_uploads]))
    responders = [i for i in survivors if silos[i].drop != "recovery"]
    if len(responders) < cfg.U:
        assert isinstance(out.result, RoundAborted)
        assert "recovery" in out.result.reason and out.result.survivors == survivors
        assert out.result.code is AbortCode.TOO_FEW_RECOVERY_REPLIES
        return
    assert isinstance(out.result, RoundResult), getattr(out.result, "reason", "")
    assert out.result.survivors == survivors
    got = cfg.field.to_signed(out.result.aggregate)
    assert torch.equal(got, h.expected_total(1))
    # late uploads were refused, not used
    assert {i for i, _ in out.refused} <= {i for _, i in uploaders[cfg.min_uploads :]}


def test_several_rounds_with_changing_stragglers_and_a_rekey():
    cfg = ProtocolConfig(
        num_silos=6, num_stragglers=2, privacy_threshold=2, vector_length=50, masking="shares"
    )
    h = Harness(cfg, seed=3)
    h.setup()
    for r, slow in ((1, {0, 1}), (2, {4, 5}), (3, {2}), (5, set())):
        out = h.run_round(r, {i: Silo(delay=9.0) for i in slow})
        assert isinstance(out.result, RoundResult)
        assert torch.equal(cfg.field.to_signed(out.result.aggregate), h.expected_total(r))
        assert slow <= set(out.result.stragglers) and len(out.result.stragglers) == cfg.s
    # silo 3 restarts (new state, new key): rekey, and rounds go on
    from coded_fl.secagg.client import ClientMachine
    from simulations.runtime.secagg_harness import deterministic_entropy

    h.clients[3] = ClientMachine(entropy=deterministic_entropy(99))
    h.setup(silos=[3])
    out = h.run_round(6)
    assert isinstance(out.result, RoundResult)
    assert torch.equal(cfg.field.to_signed(out.result.aggregate), h.expected_total(6))


def test_dequantized_total_matches_the_float_sum_within_quantization():
    cfg = ProtocolConfig(
        num_silos=5, num_stragglers=1, privacy_threshold=1, vector_length=500, masking="shares"
    )
    h = Harness(cfg, seed=1)
    h.setup()
    out = h.run_round(1, {2: Silo(delay=5)})
    assert isinstance(out.result, RoundResult)
    exact = sum(h.partials(1, k).double().clamp(-1, 1) for k in range(cfg.gradient_code.K))
    err = (out.result.total - exact).abs().max().item()
    assert err <= cfg.gradient_code.K / cfg.quantization.scale
