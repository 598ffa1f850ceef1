"""Every setting is checked when it is made, with a typed error that names it (issue 27, item 5).

A bad value of a protocol configuration, a quantization, the ``CodedSecAgg`` constructor (with
or without ``num_silos``), ``CodedSecAgg.start`` or a silo's policy raises
:class:`~coded_fl.errors.ConfigurationError` naming the setting, never a bare ``ValueError`` or
``TypeError`` from deep inside, and never later than construction; ``start`` refuses a bad
``num_rounds`` before any message is sent. Good values are still accepted.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord
from flwr.serverapp.strategy import FedAvg
from hypothesis import given, settings
from hypothesis import strategies as st

from coded_fl.errors import ConfigurationError
from coded_fl.quantize import QuantizationConfig
from coded_fl.secagg import ProtocolConfig
from coded_fl.secagg.policy import ClientPolicy
from strategies import CodedSecAgg
from tests.unit.test_strategy_faults import FakeGrid

NAN, INF = math.nan, math.inf


@pytest.fixture(autouse=True)
def _task_identity(monkeypatch: pytest.MonkeyPatch) -> None:
    """Flower's Message() reads the process's task identity (set by its runtime)."""
    from flwr.supercore.task_identity import TaskIdentity

    monkeypatch.setattr(TaskIdentity, "_run_id", 7)
    monkeypatch.setattr(TaskIdentity, "_node_id", 1)
    monkeypatch.setattr(TaskIdentity, "_task_id", 1)


def _refused(name: str, make: Any) -> ConfigurationError:
    """``make()`` raises a ConfigurationError whose message names ``name``."""
    with pytest.raises(ConfigurationError) as info:
        make()
    assert name in str(info.value), str(info.value)
    return info.value


# ---------------------------------------------------------------------------- ProtocolConfig
BAD_PROTOCOL = [
    ("headroom_bits", -3),
    ("headroom_bits", -1),
    ("headroom_bits", 2.5),
    ("headroom_bits", True),
    ("headroom_bits", "8"),
    ("headroom_bits", 40),  # no scale >= 1 left
    ("headroom_bits", 10**30),
    ("clip_range", "1"),
    ("clip_range", True),
    ("clip_range", None),
    ("clip_range", NAN),
    ("clip_range", INF),
    ("clip_range", -1.0),
    ("clip_range", 0),
    ("clip_range", 1e308),  # the scale would be below 1
    ("scale", True),
    ("scale", "2"),
    ("scale", NAN),
    ("scale", INF),
    ("scale", 0.0),
    ("scale", -4.0),
    ("scale", 1e308),
]


@pytest.mark.parametrize(("name", "value"), BAD_PROTOCOL, ids=repr)
def test_protocol_config_refuses_a_bad_quantization_setting_by_name(name: str, value: Any) -> None:
    _refused(name, lambda: ProtocolConfig(num_silos=4, vector_length=3, **{name: value}))


def test_the_headroom_message_says_how_much_would_work() -> None:
    err = _refused(
        "headroom_bits", lambda: ProtocolConfig(num_silos=4, vector_length=3, headroom_bits=40)
    )
    assert "headroom_bits <= 27" in str(err)  # (2^31 - 2) / 2 / 4 < 2^28: 27 bits leave scale 1
    err = _refused(
        "headroom_bits", lambda: ProtocolConfig(num_silos=4, vector_length=3, headroom_bits=-3)
    )
    assert "headroom_bits=0" in str(err)


@pytest.mark.parametrize(
    "kw",
    [
        {},
        {"headroom_bits": 0},
        {"headroom_bits": 27},
        {"clip_range": 2},
        {"clip_range": np.float64(0.5)},
        {"scale": 2**20},
        {"scale": 3.5},
    ],
    ids=repr,
)
def test_protocol_config_still_accepts_good_settings(kw: dict[str, Any]) -> None:
    cfg = ProtocolConfig(num_silos=4, vector_length=3, **kw)
    assert cfg.quantization.scale >= 1
    assert ProtocolConfig.from_json(cfg.to_json()).digest == cfg.digest


@settings(max_examples=60, deadline=None)
@given(
    headroom=st.integers(-(2**40), 64),
    clip=st.floats(min_value=1e-6, max_value=1e12, allow_nan=False),
    n=st.integers(2, 12),
)
def test_a_quantization_setting_is_either_valid_or_a_configuration_error(
    headroom: int, clip: float, n: int
) -> None:
    try:
        cfg = ProtocolConfig(num_silos=n, vector_length=2, clip_range=clip, headroom_bits=headroom)
    except ConfigurationError as exc:
        assert "headroom_bits" in str(exc) or "clip_range" in str(exc)
        return
    assert headroom >= 0
    assert cfg.quantization.scale >= 1


# ---------------------------------------------------------------------------- QuantizationConfig
@pytest.mark.parametrize(
    ("name", "kw"),
    [
        ("headroom_bits", {"headroom_bits": -3}),
        ("headroom_bits", {"headroom_bits": 1.5}),
        ("headroom_bits", {"headroom_bits": False}),
        ("headroom_bits", {"headroom_bits": 64}),
        ("clip_range", {"clip_range": "1"}),
        ("clip_range", {"clip_range": True}),
        ("clip_range", {"clip_range": NAN}),
        ("clip_range", {"clip_range": 1e308}),
        ("num_summands", {"num_summands": True}),
        ("num_summands", {"num_summands": 0}),
    ],
    ids=repr,
)
def test_for_summands_and_max_scale_refuse_bad_settings_by_name(
    name: str, kw: dict[str, Any]
) -> None:
    args: dict[str, Any] = {"num_summands": 4, "clip_range": 1.0, **kw}
    n = args.pop("num_summands")
    _refused(name, lambda: QuantizationConfig.for_summands(n, **args))
    _refused(name, lambda: QuantizationConfig.max_scale(num_summands=n, **args))


@pytest.mark.parametrize(
    ("name", "kw"),
    [
        ("clip_range", {"clip_range": True}),
        ("clip_range", {"clip_range": "1"}),
        ("scale", {"scale": True}),
        ("scale", {"scale": "256"}),
        ("scale", {"scale": NAN}),
        ("scale", {"scale": -1.0}),
    ],
    ids=repr,
)
def test_quantization_config_refuses_bools_and_strings(name: str, kw: dict[str, Any]) -> None:
    args: dict[str, Any] = {"clip_range": 1.0, "scale": 256.0, "num_summands": 4, **kw}
    _refused(name, lambda: QuantizationConfig(**args))


# ---------------------------------------------------------------------------- CodedSecAgg()
BAD_STRATEGY = [
    ("num_stragglers", -1),
    ("num_stragglers", True),
    ("num_stragglers", 1.0),
    ("num_stragglers", "1"),
    ("privacy_threshold", -1),
    ("privacy_threshold", True),
    ("privacy_threshold", 0.5),
    ("recovery_threshold", 0),
    ("recovery_threshold", -1),
    ("recovery_threshold", True),
    ("recovery_threshold", 2.5),
    ("recovery_threshold", 1),  # not above T = 1
    ("num_silos", 0),
    ("num_silos", -2),
    ("num_silos", True),
    ("num_silos", 5.0),
    ("extra_replies", -1),
    ("extra_replies", True),
    ("extra_replies", 0.5),
    ("extra_replies", 2),  # above s = 1
    ("headroom_bits", -3),
    ("headroom_bits", True),
    ("headroom_bits", 2.5),
    ("headroom_bits", 40),
    ("clip_range", NAN),
    ("clip_range", INF),
    ("clip_range", -1.0),
    ("clip_range", 0.0),
    ("clip_range", True),
    ("clip_range", "1"),
    ("clip_range", 1e308),
    ("scale", NAN),
    ("scale", 0.0),
    ("scale", -2.0),
    ("scale", True),
    ("scale", "2"),
    ("scale", 1e308),
    *(
        (name, bad)
        for name in (
            "round_timeout",
            "recovery_timeout",
            "key_timeout",
            "node_wait_timeout",
            "evaluate_timeout",
            "poll_interval",
        )
        for bad in (0, -1.0, NAN, INF, True, "5")
    ),
    *(("extra_wait", bad) for bad in (-1.0, NAN, INF, True, "0")),
    *(("max_erased_fraction", bad) for bad in (-0.1, 1, NAN, True, "0.01")),
    *(("max_weight", bad) for bad in (0, -1.0, NAN, INF, True)),
    ("code", "approximate"),
    ("code", 3),
    ("masking", "none"),
]


def _strategy(**kw: Any) -> CodedSecAgg:
    args: dict[str, Any] = {"num_stragglers": 1, "privacy_threshold": 1, **kw}
    return CodedSecAgg(FedAvg(), **args)


@pytest.mark.parametrize("num_silos", [None, 5])
@pytest.mark.parametrize(("name", "value"), BAD_STRATEGY, ids=repr)
def test_coded_secagg_refuses_a_bad_setting_at_construction(
    name: str, value: Any, num_silos: int | None
) -> None:
    kw = {"num_silos": num_silos, name: value}
    _refused(name, lambda: _strategy(**kw))


@pytest.mark.parametrize(
    "kw",
    [
        {},
        {"num_silos": 5},
        {"num_stragglers": 0, "privacy_threshold": 0},
        {"recovery_threshold": 2},
        {"extra_replies": 1, "extra_wait": 0.0},
        {"headroom_bits": 0},
        {"clip_range": 2},
        {"clip_range": 1000.0},
        {"scale": 2**20},
        {"evaluate_timeout": None},
        {"evaluate_timeout": 3.0, "round_timeout": 1, "poll_interval": 0.001},
        {"max_weight": 100, "max_erased_fraction": 0.0},
        {"code": "polynomial", "masking": "shares"},
    ],
    ids=repr,
)
def test_coded_secagg_still_accepts_good_settings(kw: dict[str, Any]) -> None:
    s = _strategy(**kw)
    assert s.protocol.clip_range == kw.get("clip_range", 1.0)


def test_a_clip_range_too_wide_for_the_fewest_silos_is_refused_without_num_silos() -> None:
    # s = 1, T = 1: n >= 3, K >= 3; (p-1)/2/3 >> 8 = 1398101 is the widest range with scale 1
    _strategy(clip_range=1398101.0)
    err = _refused("clip_range", lambda: _strategy(clip_range=1398102.0))
    assert "clip_range <= 1398101" in str(err)


# ---------------------------------------------------------------------------- start()
def _init() -> ArrayRecord:
    return ArrayRecord({"w": Array(np.zeros(4, dtype=np.float32))})


def _runnable(n: int = 4, **kw: Any) -> CodedSecAgg:
    args: dict[str, Any] = {
        "num_silos": n,
        "num_stragglers": 1,
        "privacy_threshold": 1,
        "extra_wait": 0.0,
        "round_timeout": 5.0,
        "recovery_timeout": 5.0,
        "key_timeout": 5.0,
        "node_wait_timeout": 5.0,
        "poll_interval": 0.001,
        "progress": lambda r: None,
        **kw,
    }
    return CodedSecAgg(
        FedAvg(fraction_evaluate=0.0, min_available_nodes=n, min_train_nodes=n), **args
    )


@pytest.mark.parametrize("rounds", [0, -3, True, False, 2.0, "3", None])
def test_start_refuses_num_rounds_before_any_message_is_sent(rounds: Any) -> None:
    grid = FakeGrid(4)
    s = _runnable()
    _refused("num_rounds", lambda: s.start(grid=grid, initial_arrays=_init(), num_rounds=rounds))
    assert grid.pushed == []
    assert s.key_exchanges == [] and s.reports == []


@pytest.mark.parametrize("timeout", [0, -1.0, NAN, True, "60"])
def test_start_refuses_a_bad_timeout_before_any_message_is_sent(timeout: Any) -> None:
    grid = FakeGrid(4)
    _refused(
        "timeout",
        lambda: _runnable().start(grid=grid, initial_arrays=_init(), num_rounds=1, timeout=timeout),
    )
    assert grid.pushed == []


def test_start_with_one_round_still_runs() -> None:
    grid = FakeGrid(4)
    s = _runnable()
    s.start(grid=grid, initial_arrays=_init(), num_rounds=1)
    assert [r.ok for r in s.reports] == [True]


# ---------------------------------------------------------------------------- silo refusals
def test_silos_refuse_t_0_by_default_and_the_server_names_the_opt_out() -> None:
    grid = FakeGrid(4)
    s = _runnable(privacy_threshold=0)
    with pytest.raises(ConfigurationError, match=r"codedfl\.allow-no-privacy"):
        s.start(grid=grid, initial_arrays=_init(), num_rounds=1)
    assert s.reports == []


def test_silos_that_opt_out_of_privacy_take_part_with_t_0() -> None:
    grid = FakeGrid(4, node_config={"codedfl.allow-no-privacy": True})
    s = _runnable(privacy_threshold=0)
    s.start(grid=grid, initial_arrays=_init(), num_rounds=1)
    assert [r.ok for r in s.reports] == [True]


# ---------------------------------------------------------------------------- ClientPolicy
@pytest.mark.parametrize("bad", [-1.0, NAN, INF, True, "256", None])
def test_client_policy_refuses_a_bad_min_scale(bad: Any) -> None:
    _refused("min_scale", lambda: ClientPolicy(min_scale=bad))


@pytest.mark.parametrize(
    ("key", "bad"),
    [
        ("codedfl.min-scale", "abc"),
        ("codedfl.min-scale", -1),
        ("codedfl.min-scale", "nan"),
        ("codedfl.min-scale", "inf"),
        ("codedfl.min-scale", True),
        ("codedfl.allow-no-privacy", "maybe"),
        ("codedfl.allow-no-privacy", 2),
        ("codedfl.allow-no-privacy", ""),
        ("codedfl.min-privacy-threshold", "-1"),
    ],
    ids=repr,
)
def test_a_bad_node_config_value_is_refused_naming_the_key(key: str, bad: Any) -> None:
    _refused(key, lambda: ClientPolicy().tightened({key: bad}))
