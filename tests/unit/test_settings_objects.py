"""``CodedSecAgg``'s settings as two objects (issue 28, Build item 6): :class:`ProtocolSettings`
and :class:`Timeouts` (:mod:`strategies.settings`).

The objects hold the one default of every setting and check every field when they are made; the
flat keywords are a shorthand that gives the same wrapper and overrides the objects' fields; an
unknown keyword is refused with a typed error naming the valid ones; ``from_run_config`` reads
every key of the one table; any valid settings give the protocol configuration a run uses.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from flwr.serverapp.strategy import FedAvg
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from coded_fl.errors import ConfigurationError, UnknownSettingError
from coded_fl.secagg import ProtocolConfig
from coded_fl.secagg.server import DRIFT_TOLERANCE
from coded_fl.vocabulary import MAX_DELTA_SCALE
from strategies import CodedSecAgg, ProtocolSettings, Timeouts
from strategies.run_config import KEYWORDS, RUN_CONFIG, FlatSettings

MIN = {"num_stragglers": 1, "privacy_threshold": 1}


def _say(report: object) -> None:
    """A progress callback shared by wrappers that are compared."""


def _run_settings(w: CodedSecAgg, n: int = 4) -> Any:
    """The settings one run of ``w`` takes at ``n`` silos (``strategies.run.RunSettings``)."""
    return w._settings(w.gradient_code(n))


# ---------------------------------------------------------------------------- defaults
def test_the_objects_defaults_are_what_the_constructor_did_with_no_keyword() -> None:
    p, t = ProtocolSettings(**MIN), Timeouts()
    assert dataclasses.astuple(p) == (
        1, 1, None, None, 1.0, True, None, None, None, None, "auto", "auto",
        0, 2.0, 8, 0.01, DRIFT_TOLERANCE, 3, None,
    )  # fmt: skip
    assert (t.round, t.recovery, t.key, t.node_wait, t.evaluate, t.poll_interval) == (
        600.0, 60.0, 120.0, 300.0, None, 0.05,
    )  # fmt: skip
    w = CodedSecAgg(FedAvg(), **MIN, progress=_say)  # type: ignore[arg-type]
    assert w.protocol == p and w.timeouts == t
    run = _run_settings(w)
    assert (run.extra_wait, run.round_timeout, run.recovery_timeout, run.key_timeout) == (
        2.0, 600.0, 60.0, 120.0,
    )  # fmt: skip
    assert run.evaluate_timeout == 600.0 and run.poll_interval == 0.05  # evaluate: the round's
    assert run.adaptive_clip and run.max_aborted_rounds == 3
    assert run.max_delta_scale == MAX_DELTA_SCALE and w.spec.auto_weight


def test_one_default_per_setting_and_one_keyword_per_field() -> None:
    # the flat keywords are exactly the table's, typed for mypy by FlatSettings
    assert set(FlatSettings.__annotations__) == set(KEYWORDS)
    objects = {"protocol": ProtocolSettings, "timeouts": Timeouts}
    fields = {(o, f.name) for o, cls in objects.items() for f in dataclasses.fields(cls)}
    assert set(KEYWORDS.values()) == fields
    # the constructor holds no default of a setting: only the objects do
    import inspect

    params = inspect.signature(CodedSecAgg.__init__).parameters
    assert not set(params) & set(KEYWORDS)


def test_evaluate_none_is_the_round_deadline_and_dp_stops_the_adaptation() -> None:
    assert Timeouts(round=30).evaluate_seconds == 30.0
    assert Timeouts(round=30, evaluate=5).evaluate_seconds == 5.0
    assert ProtocolSettings(**MIN).adapts_clip
    assert not ProtocolSettings(**MIN, adaptive_clip=False).adapts_clip
    assert ProtocolSettings(**MIN, max_clip_range=10.0).max_delta_scale == 8.0


# ---------------------------------------------------------------------------- validation
BAD_PROTOCOL = [
    ("num_stragglers", -1),
    ("num_stragglers", 1.5),
    ("privacy_threshold", True),
    ("recovery_threshold", 1),  # <= T
    ("num_silos", 0),
    ("clip_range", 0.0),
    ("clip_range", "1"),
    ("clip_quorum", 0),
    ("max_clip_range", 0.5),
    ("scale", -1.0),
    ("max_weight", float("inf")),
    ("code", "fountain"),
    ("masking", "xor"),
    ("extra_replies", 2),  # > s
    ("extra_wait", -1.0),
    ("headroom_bits", -1),
    ("max_erased_fraction", 1.0),
    ("drift_tolerance", 2.0),
    ("max_aborted_rounds", -1),
    ("dp", {"noise_multiplier": 1.0}),
]
BAD_TIMEOUTS = [
    ("round", 0.0),
    ("recovery", -1.0),
    ("key", float("nan")),
    ("node_wait", float("inf")),
    ("evaluate", 0),
    ("poll_interval", "0.1"),
]


@pytest.mark.parametrize(("name", "value"), BAD_PROTOCOL, ids=repr)
def test_a_bad_protocol_field_is_refused_naming_it(name: str, value: object) -> None:
    with pytest.raises(ConfigurationError, match=name):
        ProtocolSettings(**{**MIN, name: value})


@pytest.mark.parametrize(("name", "value"), BAD_TIMEOUTS, ids=repr)
def test_a_bad_deadline_is_refused_naming_it(name: str, value: object) -> None:
    # named by its flat keyword, which holds the field's name (round_timeout, poll_interval)
    keyword = next(k for k, (o, f) in KEYWORDS.items() if (o, f) == ("timeouts", name))
    with pytest.raises(ConfigurationError, match=keyword) as info:
        Timeouts(**{name: value})
    assert name in str(info.value)
    with pytest.raises(ConfigurationError, match=keyword):  # the same through the shorthand
        CodedSecAgg(FedAvg(), **MIN, **{keyword: value})  # type: ignore[arg-type]


def test_the_objects_are_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        ProtocolSettings(**MIN).masking = "shares"  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        Timeouts().round = 1.0  # type: ignore[misc]


# ---------------------------------------------------------------------------- flat keywords
FLAT: dict[str, Any] = {
    "num_stragglers": 2,
    "privacy_threshold": 1,
    "num_silos": 6,
    "clip_range": 2.0,
    "masking": "shares",
    "extra_replies": 1,
    "headroom_bits": 6,
    "round_timeout": 30,
    "recovery_timeout": 10.0,
    "evaluate_timeout": 7.0,
    "poll_interval": 0.01,
}


def test_flat_keywords_and_objects_give_the_same_wrapper() -> None:
    inner = FedAvg()
    flat = CodedSecAgg(inner, **FLAT, progress=_say)
    protocol = ProtocolSettings(
        num_stragglers=2,
        privacy_threshold=1,
        num_silos=6,
        clip_range=2.0,
        masking="shares",
        extra_replies=1,
        headroom_bits=6,
    )
    timeouts = Timeouts(round=30, recovery=10.0, evaluate=7.0, poll_interval=0.01)
    objects = CodedSecAgg(inner, protocol, timeouts, progress=_say)
    assert (flat.protocol, flat.timeouts, flat.spec) == (protocol, timeouts, objects.spec)
    assert _run_settings(flat, 6) == _run_settings(objects, 6)
    assert flat._config(6, vector_length=9, run_id="r") == objects._config(
        6, vector_length=9, run_id="r"
    )


def test_a_flat_keyword_overrides_the_field_of_the_object_given() -> None:
    protocol = ProtocolSettings(**MIN, masking="shares", clip_range=4.0)
    timeouts = Timeouts(round=10.0, recovery=5.0)
    w = CodedSecAgg(FedAvg(), protocol, timeouts, masking="aligned", round_timeout=20)
    assert w.protocol == dataclasses.replace(protocol, masking="aligned")
    assert w.timeouts == Timeouts(round=20.0, recovery=5.0)
    assert protocol.masking == "shares" and timeouts.round == 10.0  # the objects given stay
    # the override is checked as the object's field
    with pytest.raises(ConfigurationError, match="recovery_threshold"):
        CodedSecAgg(FedAvg(), ProtocolSettings(**MIN, recovery_threshold=2), privacy_threshold=2)


@pytest.mark.parametrize("keyword", ["bogus", "round", "timeout", "metric_key"])
def test_an_unknown_keyword_is_a_typed_error_naming_the_valid_ones(keyword: str) -> None:
    with pytest.raises(UnknownSettingError) as info:
        CodedSecAgg(FedAvg(), **MIN, **{keyword: 1})  # type: ignore[arg-type]
    assert isinstance(info.value, TypeError) and isinstance(info.value, ConfigurationError)
    message = str(info.value)
    assert keyword in message and "round_timeout" in message and "metric_keys" in message
    with pytest.raises(UnknownSettingError, match=keyword):
        CodedSecAgg.from_run_config(
            FedAvg(), {"num-stragglers": 1, "privacy-threshold": 1}, **{keyword: 1}
        )


def test_missing_counts_or_objects_of_the_wrong_type_are_refused() -> None:
    with pytest.raises(ConfigurationError, match="num_stragglers and privacy_threshold"):
        CodedSecAgg(FedAvg())
    with pytest.raises(ConfigurationError, match="privacy_threshold"):
        CodedSecAgg(FedAvg(), num_stragglers=1)
    with pytest.raises(ConfigurationError, match="protocol must be a ProtocolSettings"):
        CodedSecAgg(FedAvg(), MIN)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="timeouts must be a Timeouts"):
        CodedSecAgg(FedAvg(), ProtocolSettings(**MIN), 30.0)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------- run config
PROTOCOL = ProtocolSettings(
    num_stragglers=2,
    privacy_threshold=1,
    recovery_threshold=3,
    num_silos=7,
    clip_range=2.0,
    adaptive_clip=False,
    clip_quorum=2,
    max_clip_range=8.0,
    scale=2.0**20,
    max_weight=100.0,
    code="repetition",
    masking="shares",
    extra_replies=1,
    extra_wait=1.5,
    headroom_bits=6,
    max_erased_fraction=0.02,
    drift_tolerance=0.125,
    max_aborted_rounds=5,
)
TIMEOUTS = Timeouts(
    round=30.0, recovery=10.0, key=20.0, node_wait=40.0, evaluate=15.0, poll_interval=0.01
)


def _run_config(text: bool) -> dict[str, Any]:
    """Every key of RUN_CONFIG, from the objects' non-default fields (None as 0; as strings,
    what ``flwr run -c key=value`` can give)."""
    objects = {"protocol": PROTOCOL, "timeouts": TIMEOUTS}
    rc: dict[str, Any] = {}
    for key, (owner, name, _) in RUN_CONFIG.items():
        value = getattr(objects[owner], name)
        value = 0 if value is None else value
        rc[key] = (
            str(value).lower()
            if text and isinstance(value, bool)
            else (str(value) if text else value)
        )
    return rc


@pytest.mark.parametrize("text", [False, True], ids=["typed", "strings"])
def test_from_run_config_round_trips_every_key(text: bool) -> None:
    rc = _run_config(text)
    assert set(rc) == set(RUN_CONFIG)
    # every field differs from its default, so a key that is not read would show
    assert all(
        getattr(PROTOCOL, f.name) != f.default
        for f in dataclasses.fields(PROTOCOL)
        if f.name != "dp"
    )
    assert all(getattr(TIMEOUTS, f.name) != f.default for f in dataclasses.fields(TIMEOUTS))
    assert ProtocolSettings.from_run_config(rc) == PROTOCOL
    assert Timeouts.from_run_config(rc) == TIMEOUTS
    w = CodedSecAgg.from_run_config(FedAvg(), {**rc, "lr": 0.1}, progress=_say)
    assert (w.protocol, w.timeouts) == (PROTOCOL, TIMEOUTS)


def test_from_run_config_overrides_and_missing_counts() -> None:
    rc = {"num-stragglers": 1, "privacy-threshold": 1, "masking": "shares", "round-timeout": 9}
    w = CodedSecAgg.from_run_config(FedAvg(), rc, masking="aligned", poll_interval=0.5)
    assert w.protocol.masking == "aligned" and w.timeouts == Timeouts(round=9, poll_interval=0.5)
    assert Timeouts.from_run_config({}) == Timeouts()
    with pytest.raises(ConfigurationError, match="privacy-threshold must be set"):
        ProtocolSettings.from_run_config({"num-stragglers": 1})
    # the counts may come from the overrides
    assert CodedSecAgg.from_run_config(FedAvg(), {}, **MIN).protocol == ProtocolSettings(**MIN)


def test_to_dict_gives_every_field() -> None:
    assert ProtocolSettings(**PROTOCOL.to_dict()) == PROTOCOL
    assert Timeouts(**TIMEOUTS.to_dict()) == TIMEOUTS


# ---------------------------------------------------------------------------- property
@st.composite
def _settings(draw: st.DrawFn) -> tuple[ProtocolSettings, int]:
    s = draw(st.integers(0, 3))
    t = draw(st.integers(0, 2))
    n = draw(st.integers(s + t + 1, s + t + 5))
    u = draw(st.one_of(st.none(), st.integers(t + 1, max(t + 1, n - s))))
    fields = dict(
        num_stragglers=s,
        privacy_threshold=t,
        recovery_threshold=u,
        num_silos=draw(st.sampled_from([None, n])),
        clip_range=draw(st.sampled_from([0.5, 1.0, 3.0])),
        scale=draw(st.sampled_from([None, 2.0**16])),
        code=draw(st.sampled_from(["auto", "polynomial", "repetition"])),
        masking=draw(st.sampled_from(["auto", "aligned", "shares"])),
        extra_replies=draw(st.integers(0, s)),
        headroom_bits=draw(st.integers(0, 10)),
    )
    try:
        return ProtocolSettings(**fields), n
    except ConfigurationError:
        assume(False)
        raise


@settings(max_examples=60, deadline=None)
@given(_settings())
def test_any_valid_settings_give_the_protocol_configuration_they_say(
    drawn: tuple[ProtocolSettings, int],
) -> None:
    p, n = drawn
    try:
        w = CodedSecAgg(FedAvg(), p)
        got = w._config(n, vector_length=16, run_id="r", session="x")
    except ConfigurationError:
        assume(
            False
        )  # valid fields, but not at these n (e.g. aligned masks need the repetition code)
        return
    want = ProtocolConfig(
        num_silos=n,
        num_stragglers=p.num_stragglers,
        privacy_threshold=p.privacy_threshold,
        recovery_threshold=p.recovery_threshold,
        vector_length=16,
        clip_range=p.clip_range,
        scale=p.scale,
        code=p.code,
        masking=p.masking,
        extra_replies=p.extra_replies,
        headroom_bits=p.headroom_bits,
        run_id="r",
        session="x",
    )
    assert got == want
    flat = CodedSecAgg(FedAvg(), **p.to_dict())
    assert flat.protocol == p
    assert flat._config(n, vector_length=16, run_id="r", session="x") == want
