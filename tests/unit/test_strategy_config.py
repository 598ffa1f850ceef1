"""CodedSecAgg refuses bad settings when it is made, naming the setting (no node contacted)."""

from __future__ import annotations

import pytest
from flwr.app import ArrayRecord, ConfigRecord
from flwr.serverapp.strategy import FedAvg

from coded_fl.errors import CodedFLError, ConfigurationError
from strategies import CodedSecAgg


@pytest.mark.parametrize(
    ("kw", "words"),
    [
        ({"num_stragglers": 5}, "num_stragglers=5"),
        ({"num_stragglers": 1, "recovery_threshold": 5}, "recovery_threshold"),
        ({"privacy_threshold": 4}, "privacy_threshold"),
        ({"round_timeout": -1.0}, "round_timeout"),
        ({"max_weight": 0.0}, "max_weight"),
        ({"code": "approximate"}, "approximate"),
        ({"clip_range": 0.0}, "clip_range"),
    ],
)
def test_misconfiguration_is_refused_at_construction(kw, words):
    base = {"num_silos": 5, "num_stragglers": 1, "privacy_threshold": 1}
    with pytest.raises(ConfigurationError, match=words):
        CodedSecAgg(FedAvg(), **{**base, **kw})


def test_repetition_needs_no_divisibility():
    # s + 1 = 3 does not divide n = 5 (refused before the code took any n): one group of 5
    s = CodedSecAgg(FedAvg(), num_silos=5, num_stragglers=2, privacy_threshold=1, code="repetition")
    cfg = s._config(5, vector_length=4, run_id="r")
    assert cfg.gradient_code.groups == ((0, 1, 2, 3, 4),)


def test_wrapped_object_must_be_a_strategy():
    with pytest.raises(ConfigurationError, match="Strategy"):
        CodedSecAgg(object(), num_stragglers=0, privacy_threshold=0)  # type: ignore[arg-type]


def test_driving_configure_train_directly_is_refused_with_advice():
    s = CodedSecAgg(FedAvg(), num_stragglers=0, privacy_threshold=0)
    with pytest.raises(CodedFLError, match=r"strategy\.start"):
        s.configure_train(1, ArrayRecord(), ConfigRecord(), None)  # type: ignore[arg-type]


def test_reads_the_wrapped_strategys_record_keys():
    inner = FedAvg(arrayrecord_key="model", weighted_by_key="n", configrecord_key="cfg")
    s = CodedSecAgg(inner, num_stragglers=0, privacy_threshold=0, metric_keys=["loss"])
    assert (s.spec.arrays_key, s.spec.weight_key, s.spec.config_key) == ("model", "n", "cfg")
    assert s.spec.metric_keys == ("loss",)
