"""Silos and servers that misbehave (issue 14, remaining gaps): a silo whose sealed mask shares
are garbage, a forged TrainRequest for a future round, a configuration too large to build."""

from __future__ import annotations

import dataclasses
import json
import re
import tracemalloc

import pytest
import torch

from coded_fl.errors import ConfigurationError, ExceedsLimitsError, RemoteProtocolError
from coded_fl.secagg import AbortCode, ProtocolConfig
from coded_fl.secagg.client import MAX_UNVERIFIED_ROUNDS, ClientMachine, refusal_for
from coded_fl.secagg.messages import SERVER, KeyRequest, RefusalCode, Upload
from coded_fl.secagg.policy import ClientPolicy
from coded_fl.secagg.server import RoundAborted, RoundResult
from coded_fl.shuffling.plan.planner import MAX_PLAN_ENTRIES, check_plan_cost, plan_shuffle
from coded_fl.shuffling.plan.units import UnitManifest
from simulations.runtime.secagg_harness import Harness, Silo


def garble(upload: Upload) -> Upload:
    """Every sealed share and every other silo's confirmation tag of ``upload`` with its first
    byte flipped: no recipient opens or confirms the shares it sent or derived for others."""
    shares = tuple((j, bytes([box[0] ^ 0x5A]) + box[1:]) for j, box in upload.shares)
    tags = tuple(
        (j, t if j == upload.sender else bytes([t[0] ^ 0x5A]) + t[1:]) for j, t in upload.tags
    )
    return dataclasses.replace(upload, shares=shares, tags=tags)


# ---------------------------------------------------------------------- (a) accused silos
def _harness(extra: int) -> Harness:
    cfg = ProtocolConfig(
        num_silos=5,
        num_stragglers=2,
        privacy_threshold=1,
        recovery_threshold=3,
        extra_replies=extra,
        vector_length=12,
        run_id="accused",
        masking="shares",
    )
    h = Harness(cfg, seed=5)
    h.setup()
    return h


def test_a_silo_with_garbage_shares_is_dropped_and_the_round_completes_without_it() -> None:
    # S = {0, 1, 2, 3}; silo 0's shares open nowhere: silos 1, 2, 3 accuse it, the evidence
    # convicts it (it cannot reveal the keys of the entries it sent: their ephemeral keys are
    # garbled), the server asks them again over S' = {1, 2, 3} and the round is exact without
    # silo 0
    h = _harness(extra=1)
    out = h.run_round(1, behaviour={0: Silo(forge=garble), 4: Silo(delay=5.0)})
    res = out.result
    assert isinstance(res, RoundResult), res
    assert res.survivors == (1, 2, 3) and res.excluded == (0,)
    assert torch.equal(res.aggregate, h.config.field.element(h.expected_total(1)))
    assert 0 in res.offenders and {v.liar for v in res.verdicts} == {0}
    # a liar proven by evidence is an offender: left out of the session's later rounds
    out2 = h.run_round(2, behaviour={0: Silo(forge=garble)})
    assert isinstance(out2.result, RoundResult) and 0 not in out2.result.survivors
    assert any(s == 0 and "named an offender" in why for s, why in out2.refused)
    out3 = h.run_round(3)
    assert isinstance(out3.result, RoundResult) and 0 not in out3.result.survivors


def test_too_few_silos_without_the_accused_one_abort_naming_it_and_skip_it_next_round() -> None:
    # S = {0, 1, 2} is exactly max(n - s, U): without silo 0 no round can unmask, so the round
    # aborts naming silo 0, and round 2 runs without it
    h = _harness(extra=0)
    out = h.run_round(1, behaviour={0: Silo(forge=garble), 3: Silo(delay=5), 4: Silo(delay=5)})
    assert isinstance(out.result, RoundAborted), out.result
    assert out.result.suspects == (0,) and "silo(s) [0]" in out.result.reason
    assert out.result.code is AbortCode.CONVICTED
    out2 = h.run_round(2, behaviour={0: Silo(forge=garble)})
    assert isinstance(out2.result, RoundResult), out2.result
    assert 0 not in out2.result.survivors
    assert torch.equal(out2.result.aggregate, h.config.field.element(h.expected_total(2)))


def test_one_false_accuser_cannot_exclude_a_silo_and_is_named() -> None:
    # silo 1 falsely accuses silo 0: silo 0 reveals the share's key, the share confirms, and
    # silo 1 is named; the round aborts for want of replies (U = 3 of S = {0, 1, 2}), and the
    # next round leaves the liar out, not silo 0
    h = _harness(extra=0)
    out = h.run_round(1, behaviour={1: Silo(accuse=0), 3: Silo(delay=5), 4: Silo(delay=5)})
    assert isinstance(out.result, RoundAborted) and out.result.suspects == (1,)
    assert [(v.accuser, v.accused, v.liar) for v in out.result.verdicts] == [(1, 0, 1)]
    out2 = h.run_round(2, behaviour={3: Silo(delay=5), 4: Silo(delay=5)})
    assert isinstance(out2.result, RoundResult) and out2.result.survivors == (0, 2, 3)


def test_one_accuser_with_evidence_convicts_a_silo_that_sent_a_bad_share() -> None:
    # silo 0's share for silo 1 only is garbage: one accusation, but the evidence convicts
    # (before it, one accuser could not: T = 1 tolerates one liar, and nobody could tell which)
    h = _harness(extra=0)

    def one(upload: Upload) -> Upload:
        shares = tuple((j, bytes([b[0] ^ 1]) + b[1:] if j == 1 else b) for j, b in upload.shares)
        tags = tuple((j, bytes([t[0] ^ 1]) + t[1:] if j == 1 else t) for j, t in upload.tags)
        return dataclasses.replace(upload, shares=shares, tags=tags)

    out = h.run_round(1, behaviour={0: Silo(forge=one), 3: Silo(delay=5), 4: Silo(delay=5)})
    assert isinstance(out.result, RoundAborted) and out.result.suspects == (0,)
    out2 = h.run_round(2, behaviour={3: Silo(delay=5), 4: Silo(delay=5)})
    assert isinstance(out2.result, RoundResult) and out2.result.survivors == (1, 2, 3)


# ---------------------------------------------------------------------- (c) size limits
def _key_request(**sizes: int) -> KeyRequest:
    cfg = ProtocolConfig(
        num_silos=4, num_stragglers=1, vector_length=8, run_id="big", masking="shares"
    )
    fields = json.loads(cfg.to_json())
    fields.update(sizes)  # the raw JSON a server sends; never built here
    raw = json.dumps(fields, sort_keys=True, separators=(",", ":")).encode()
    return KeyRequest(digest=cfg.digest, round=0, sender=SERVER, recipient=1, config=raw)


@pytest.mark.parametrize(
    ("sizes", "setting"),
    [
        ({"num_silos": 1000, "num_partitions": 1000}, "codedfl.max-silos"),
        ({"num_partitions": 100_000}, "codedfl.max-partitions"),
        ({"vector_length": 1 << 40}, "codedfl.max-vector-length"),
    ],
)
def test_a_configuration_above_the_silo_limits_is_refused_before_it_is_built(
    sizes: dict[str, int], setting: str
) -> None:
    # n = 1000 used to build a 1000 x 1000 gradient code (3.1 s, 142 MiB) before any check
    machine = ClientMachine()
    req = _key_request(**sizes)
    before = machine.to_bytes()
    tracemalloc.start()
    try:
        with pytest.raises(ExceedsLimitsError, match=re.escape(setting)) as err:
            machine.receive(req)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20, peak
    assert machine.to_bytes() == before
    refusal = refusal_for(err.value, req)
    assert refusal is not None and refusal.code == RefusalCode.MISCONFIGURED
    assert setting in refusal.detail


def test_the_node_config_sets_the_limits() -> None:
    small = ClientPolicy().tightened({"codedfl.max-silos": "3"})
    with pytest.raises(ExceedsLimitsError, match=r"codedfl\.max-silos"):
        ClientMachine(policy=small).receive(_key_request())
    big = ClientPolicy(max_silos=3).tightened({"codedfl.max-silos": 4})
    req = _key_request()
    cfg = ProtocolConfig.from_json(req.config)
    ok = dataclasses.replace(req, digest=cfg.digest)
    assert ClientMachine(policy=big).receive(ok).sender == 1


def test_a_shuffle_plan_too_large_to_build_is_refused_first() -> None:
    # K = 18, t = 8, 400 units took 30 s and 3.3 GiB to plan; now a typed error, at once
    manifest = UnitManifest.from_data({i: bytes([i % 256]) * 8 for i in range(400)})
    now = {i: {i % 18} for i in range(400)}
    nxt = {i: {(i + 1) % 18} for i in range(400)}
    tracemalloc.start()
    try:
        with pytest.raises(ConfigurationError, match="smaller storage level t"):
            plan_shuffle(manifest, now, nxt, K=18, t=8, mode="decentralized")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 8 << 20, peak
    assert check_plan_cost(16, 7, 64, 4, 7) <= MAX_PLAN_ENTRIES  # a plan of this size passes


# ---------------------------------------------------------------------- (b) forged rounds
def test_a_forged_train_request_for_a_future_round_does_not_block_the_real_rounds() -> None:
    cfg = ProtocolConfig(
        num_silos=4, num_stragglers=1, vector_length=8, run_id="forged", masking="shares"
    )
    h = Harness(cfg, seed=9)
    h.setup()
    assert isinstance(h.run_round(1).result, RoundResult)
    # a buggy server (or a replay) sends silo 2 a TrainRequest for round 99: it trains it
    forged = dataclasses.replace(h.server.start_round(2)[2], round=99)
    h.server.abort("test: the real round 2 starts below")
    h.server.last_round = 1
    assert h.clients[2].receive(forged).round == 99
    for r in (2, 3):  # the real rounds go on with silo 2 (it used to refuse them as replays)
        res = h.run_round(r).result
        assert isinstance(res, RoundResult) and 2 in res.survivors, res
        assert torch.equal(res.aggregate, cfg.field.element(h.expected_total(r)))
    # a round is still never trained twice: the forged one, and a verified one, are refused
    before = h.clients[2].to_bytes()
    for again in (forged, dataclasses.replace(forged, round=3)):
        with pytest.raises(RemoteProtocolError, match="replays"):
            h.clients[2].receive(again)
    assert h.clients[2].to_bytes() == before
    restored = ClientMachine.from_bytes(before)
    assert restored.floor == 3 and restored.trained == (99,)


def test_unverified_rounds_are_bounded_and_never_trained_twice() -> None:
    cfg = ProtocolConfig(
        num_silos=4, num_stragglers=1, vector_length=8, run_id="bounded", masking="shares"
    )
    h = Harness(cfg, seed=9)
    h.setup()
    req = h.server.start_round(1)[0]
    c = h.clients[0]
    rounds = [1000 + 7 * i for i in range(MAX_UNVERIFIED_ROUNDS + 3)]
    for r in rounds:
        c.receive(dataclasses.replace(req, round=r))
    assert len(c.trained) == MAX_UNVERIFIED_ROUNDS and c.floor == rounds[2]
    for r in rounds:  # forgotten (below the floor) or remembered: refused either way
        with pytest.raises(RemoteProtocolError):
            c.receive(dataclasses.replace(req, round=r))
    assert c.receive(dataclasses.replace(req, round=rounds[2] + 1)).round == rounds[2] + 1
