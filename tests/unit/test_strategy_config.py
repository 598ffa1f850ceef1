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
        ({"code": "repetition", "num_stragglers": 2}, "divide"),
        ({"code": "approximate"}, "approximate"),
        ({"clip_range": 0.0}, "clip_range"),
    ],
)
def test_misconfiguration_is_refused_at_construction(kw, words):
    base = {"num_silos": 5, "num_stragglers": 1, "privacy_threshold": 1}
    with pytest.raises(ConfigurationError, match=words):
        CodedSecAgg(FedAvg(), **{**base, **kw})


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
