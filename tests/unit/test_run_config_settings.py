"""``CodedSecAgg.from_run_config``: one table maps a Flower run config to the wrapper's settings
objects (:mod:`strategies.run_config`, :class:`strategies.ProtocolSettings`,
:class:`strategies.Timeouts`), used by every server app of the project."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import tomllib
from flwr.serverapp.strategy import FedAvg

from coded_fl.errors import ConfigurationError
from strategies import CodedSecAgg, ProtocolSettings, Timeouts
from strategies.settings import KEYWORDS, RUN_CONFIG, coded_secagg_settings

OBJECTS = {"protocol": ProtocolSettings, "timeouts": Timeouts}

ROOT = Path(__file__).resolve().parents[2]


def _app_config(path: str) -> dict:
    with open(ROOT / path, "rb") as f:
        return tomllib.load(f)["tool"]["flwr"]["app"]["config"]


def test_every_key_names_a_field_of_one_object_and_a_keyword_with_its_spelling():
    for key, (owner, name, _) in RUN_CONFIG.items():
        assert name in {f.name for f in dataclasses.fields(OBJECTS[owner])}, key
        # run-config keys are the constructor's flat keywords, hyphenated
        assert KEYWORDS[key.replace("-", "_")] == (owner, name)
    # every field but dp (the dp-* keys) has its key
    fields = {(o, f.name) for o, cls in OBJECTS.items() for f in dataclasses.fields(cls)}
    assert fields - {(o, n) for o, n, _ in RUN_CONFIG.values()} == {("protocol", "dp")}


def _default(cls: type, name: str) -> object:
    return next(f.default for f in dataclasses.fields(cls) if f.name == name)


def test_the_main_job_config_gives_the_settings_it_documents():
    rc = _app_config("pyproject.toml")
    s = CodedSecAgg.from_run_config(FedAvg(), rc)
    p, t = s.protocol, s.timeouts
    assert (p.num_silos, p.num_stragglers, p.privacy_threshold) == (
        rc["num-silos"],
        rc["num-stragglers"],
        rc["privacy-threshold"],
    )
    # 0 stands for the default (automatic) where the config says so
    assert p.recovery_threshold is None and p.scale is None and s.spec.auto_weight
    assert (p.code, p.masking, t.round) == (rc["code"], rc["masking"], rc["round-timeout"])
    assert p.drift_tolerance == rc["drift-tolerance"]
    # a key the config lacks keeps the field's default
    assert "recovery-timeout" not in rc and t.recovery == _default(Timeouts, "recovery")


@pytest.mark.parametrize(
    "path", ["simulations/deploy/app/pyproject.toml", "simulations/placement/app/pyproject.toml"]
)
def test_the_other_apps_configs_are_read_by_the_same_table(path: str):
    rc = _app_config(path)
    settings = coded_secagg_settings(rc)
    assert settings and all(key.replace("-", "_") in settings for key in RUN_CONFIG if key in rc)
    CodedSecAgg.from_run_config(FedAvg(), rc)  # and construct


def test_overrides_and_command_line_strings():
    # flwr run -c "masking='shares'" gives a string; -c adaptive-clip=false a bool or a string
    s = CodedSecAgg.from_run_config(
        FedAvg(),
        {
            "num-stragglers": 1,
            "privacy-threshold": 1,
            "masking": "shares",
            "adaptive-clip": "false",
        },
        masking="aligned",
    )
    assert s.protocol.masking == "aligned" and s.protocol.adaptive_clip is False
    assert coded_secagg_settings({"extra-wait": "2.5", "headroom-bits": 6.0}) == {
        "extra_wait": 2.5,
        "headroom_bits": 6,
    }


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("num-stragglers", 1.5),
        ("num-stragglers", True),
        ("adaptive-clip", "yes"),
        ("adaptive-clip", 1),
        ("round-timeout", "soon"),
        ("round-timeout", float("inf")),
        ("masking", 3),
    ],
)
def test_a_value_of_the_wrong_type_names_its_key(key: str, value: object):
    with pytest.raises(ConfigurationError, match=f"run config {key}="):
        coded_secagg_settings({key: value})


def test_keys_of_the_apps_own_are_ignored():
    assert coded_secagg_settings({"local-epochs": 2, "learning-rate": "x"}) == {}
