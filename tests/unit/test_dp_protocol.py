"""Distributed DP wired into the protocol (issue 33): the configuration, the keying rounds, the
noised rounds through the real machines, the silo's floor and the wrapper's settings.

Oracles: the clipped partitions' float sum computed here with NumPy (independent of the field,
the code and the masks) and the plan's noise spread (:meth:`DistributedDP.plan`).
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from flwr.serverapp.strategy import FedAvg

from coded_fl.dp import DistributedDP
from coded_fl.dp.pipeline import rotation_seed
from coded_fl.dp.transform import clip_l2, unrotate
from coded_fl.errors import ConfigurationError, RemoteProtocolError
from coded_fl.secagg import ProtocolConfig, RoundResult
from coded_fl.secagg.policy import ClientPolicy
from coded_fl.secagg.private import dp_partial
from simulations.runtime.secagg_harness import Harness, Silo
from strategies import CodedSecAgg
from strategies.settings import coded_secagg_settings

D, M = 2000, 1900  # vector length, model coordinates (the rest: the layout's extra slots)


def _config(**kw) -> ProtocolConfig:  # type: ignore[no-untyped-def]
    base = {
        "num_silos": 6,
        "num_stragglers": 1,
        "privacy_threshold": 1,
        "vector_length": D,
        "masking": "aligned",
        "dp": DistributedDP(noise_multiplier=0.5, clip=1.0),
    }
    base.update(kw)
    return ProtocolConfig(**base)


def _delta(r: int, k: int) -> np.ndarray:
    # partition k's update: norms from about 0.4 to 2.2, so some are clipped and some not
    return np.random.default_rng(1000 * r + k).normal(size=M) * 0.01 * (1 + k)


def _harness(cfg: ProtocolConfig, **kw) -> Harness:  # type: ignore[no-untyped-def]
    return Harness(
        cfg, partials=lambda r, k: dp_partial(torch.from_numpy(_delta(r, k)), cfg, r), **kw
    )


def _released(cfg: ProtocolConfig, res: RoundResult) -> np.ndarray:
    return unrotate(res.total.double().numpy(), seed=rotation_seed(cfg.seed_id, res.round))


def _clipped_sum(cfg: ProtocolConfig, r: int) -> np.ndarray:
    total = np.zeros(D)
    for k in range(cfg.gradient_code.K):
        total[:M] += clip_l2(_delta(r, k), cfg.dp.clip)[0]  # type: ignore[union-attr]
    return total


def test_the_configuration_carries_dp_and_runs_without_it_keep_their_digest():
    cfg = _config()
    back = ProtocolConfig.from_json(cfg.to_json())
    assert back.digest == cfg.digest and back.dp == cfg.dp
    assert back.dp_plan == cfg.dp_plan
    plain = _config(dp=None)
    assert "dp" not in json.loads(plain.to_json())
    assert plain.dp_plan is None and plain.digest != cfg.digest
    # DP sets the quantization: the L2 clip as range, resolution / clip as scale
    assert cfg.quantization.clip_range == 1.0
    assert cfg.quantization.scale == DistributedDP(noise_multiplier=0.5, clip=1.0).resolution(D)
    assert cfg.sum_bound > cfg.quantization.num_summands * cfg.quantization.max_abs
    assert "dp: noise_multiplier=0.5" in cfg.describe()
    other = _config(dp=DistributedDP(noise_multiplier=1.0, clip=1.0))
    assert other.digest != cfg.digest  # the silos agree on the noise through the digest


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"masking": "shares"}, "needs masking='aligned'"),
        ({"code": "polynomial", "masking": "shares"}, "needs masking='aligned'"),
        ({"num_stragglers": 2}, "privacy_threshold \\+ 2 silo groups"),
        ({"scale": 1024.0}, "leave scale=None"),
        ({"dp": DistributedDP(noise_multiplier=1.0, clip=1.0, beta=0.01)}, "leave beta=None"),
        ({"dp": {"noise_multiplier": 1.0}}, "coded_fl.dp.DistributedDP"),
    ],
)
def test_settings_that_cannot_carry_dp_are_refused_naming_the_fix(kw, match):
    with pytest.raises(ConfigurationError, match=match):
        _config(**kw)


def test_a_peer_configuration_with_malformed_dp_is_refused_as_the_senders_fault():
    raw = json.loads(_config().to_json())
    for bad in ({"noise_multiplier": -1, "clip": 1.0}, {"clip": 1.0}, [1, 2], {"z": 1}):
        raw["dp"] = bad
        with pytest.raises(RemoteProtocolError, match="unreadable protocol configuration"):
            ProtocolConfig.from_json(json.dumps(raw).encode())


def test_keying_rounds_release_zeros_then_every_round_carries_the_planned_noise():
    cfg = _config()
    h = _harness(cfg)
    h.setup()
    errors = []
    for r in range(1, 7):
        keying = not cfg.scheme.round_cancels(h.server)
        res = h.run_round(r).result
        assert isinstance(res, RoundResult), res
        got = _released(cfg, res)
        if keying:  # the edge keys are dealt: the silos send zeros, nothing else
            assert r <= 2 and not got.any()
            continue
        assert res.disagreeing == 0  # every member of a group drew the same noise
        errors.append(got - _clipped_sum(cfg, r))
    assert len(errors) == 4
    err = np.concatenate(errors)
    plan = cfg.dp_plan
    assert plan is not None
    assert abs(err.std() / plan.noise_std - 1) < 0.05, (err.std(), plan.noise_std)
    assert abs(err.mean()) < 5 * plan.noise_std / np.sqrt(err.size)


def test_a_straggler_leaves_every_partition_and_every_groups_noise_in_the_sum():
    cfg = _config()
    h = _harness(cfg)
    h.setup()
    for r in (1, 2):
        h.run_round(r)
    errors = []
    for r in range(3, 7):
        res = h.run_round(r, {r % 6: Silo(drop="train")}).result
        assert isinstance(res, RoundResult) and len(res.stragglers) == 1, res
        errors.append(_released(cfg, res) - _clipped_sum(cfg, r))
    plan = cfg.dp_plan
    assert plan is not None
    assert abs(np.concatenate(errors).std() / plan.noise_std - 1) < 0.05


def test_the_machine_clips_an_update_the_adapter_left_too_long():
    """The sensitivity does not rest on the adapter: a partial longer than the clip (an
    adapter that skipped dp_partial) is scaled to it by the machine before encoding."""
    cfg = _config(dp=DistributedDP(noise_multiplier=0.01, clip=1.0))
    long = {k: torch.from_numpy(np.full(D, 0.5)) for k in range(6)}  # norm 22 each
    h = Harness(cfg, partials=lambda r, k: long[k])
    h.setup()
    for r in (1, 2):
        h.run_round(r)
    res = h.run_round(3).result
    assert isinstance(res, RoundResult)
    total = res.total.double().numpy()
    clipped = 6 * np.full(D, 0.5) / np.linalg.norm(np.full(D, 0.5))
    assert np.linalg.norm(total) < 6 * 1.0 + 5 * cfg.dp_plan.noise_std * np.sqrt(D)  # type: ignore[union-attr]
    np.testing.assert_allclose(total, clipped, atol=6 * cfg.dp_plan.noise_std)  # type: ignore[union-attr]


def test_a_silo_refuses_a_run_below_its_noise_floor():
    floor = ClientPolicy(min_noise_multiplier=1.0)
    with pytest.raises(RemoteProtocolError, match="below this silo's minimum min_noise"):
        floor.check(_config(), 0)  # z = 0.5
    with pytest.raises(RemoteProtocolError, match="no distributed DP"):
        floor.check(_config(dp=None), 0)
    floor.check(_config(dp=DistributedDP(noise_multiplier=1.5, clip=1.0)), 0)
    with pytest.raises(RemoteProtocolError, match="min_noise_multiplier"):
        _harness(_config(), policy=floor).setup()
    # the node config raises the floor, never lowers it (not even the no-privacy opt-out)
    node = {"codedfl.min-noise-multiplier": "0.2", "codedfl.allow-no-privacy": True}
    assert floor.tightened(node).min_noise_multiplier == 1.0
    assert ClientPolicy().tightened(node).min_noise_multiplier == 0.2
    with pytest.raises(ConfigurationError, match="min_noise_multiplier"):
        ClientPolicy(min_noise_multiplier=-1.0)


def test_the_run_config_sets_dp_with_one_switch():
    base = {"num-stragglers": 2, "dp-clip": 0.5, "dp-delta": 1e-6}
    assert "dp" not in coded_secagg_settings({**base, "dp-noise-multiplier": 0.0})
    got = coded_secagg_settings({**base, "dp-noise-multiplier": "1.1"})
    assert got["dp"] == DistributedDP(noise_multiplier=1.1, clip=0.5, delta=1e-6)
    with pytest.raises(ConfigurationError, match="needs dp-clip"):
        coded_secagg_settings({"dp-noise-multiplier": 1.0})
    with pytest.raises(ConfigurationError, match="dp-clip"):
        coded_secagg_settings({"dp-noise-multiplier": 1.0, "dp-clip": "x"})


def test_the_wrapper_refuses_what_dp_cannot_keep_private():
    dp = DistributedDP(noise_multiplier=1.0, clip=1.0)
    kw = {"num_stragglers": 1, "privacy_threshold": 1}
    with pytest.raises(ConfigurationError, match="metric_keys with dp"):
        CodedSecAgg(FedAvg(), dp=dp, metric_keys=("loss",), **kw)
    with pytest.raises(ConfigurationError, match="scale with dp"):
        CodedSecAgg(FedAvg(), dp=dp, scale=1024.0, **kw)
    with pytest.raises(ConfigurationError, match="DistributedDP"):
        CodedSecAgg(FedAvg(), dp={"noise_multiplier": 1.0}, **kw)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="privacy_threshold \\+ 2"):
        CodedSecAgg(FedAvg(), dp=dp, num_silos=4, **kw)  # groups of 2: g = 2 < T + 2
    ok = CodedSecAgg(FedAvg(), dp=dp, num_silos=6, **kw)
    assert ok.spec.metric_slots == 0 and not ok.protocol.adapts_clip
