"""``CodedSecAgg``'s settings from a Flower run config, in one table.

A ServerApp reads its settings from ``context.run_config`` (``pyproject.toml``'s
``[tool.flwr.app.config]``, overridden with ``flwr run . -c "key=value"``). Every key of
:data:`RUN_CONFIG` names one field of :class:`strategies.ProtocolSettings` or
:class:`strategies.Timeouts`; its hyphen-free spelling (``round-timeout`` -> ``round_timeout``)
is the :class:`strategies.CodedSecAgg` keyword that sets that field (:data:`KEYWORDS`). A key
the run config does not hold keeps the field's default (one default per setting: the
dataclass's). Keys of the app's own (epochs, data, ...) are ignored.

>>> coded_secagg_settings({"num-stragglers": 2, "scale": 0.0, "masking": "shares", "lr": 0.1})
{'num_stragglers': 2, 'scale': None, 'masking': 'shares'}
>>> KEYWORDS["round_timeout"], KEYWORDS["dp"]
(('timeouts', 'round'), ('protocol', 'dp'))
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, TypedDict

from coded_fl.errors import ConfigurationError, UnknownSettingError

if TYPE_CHECKING:
    from coded_fl.dp import DistributedDP

__all__ = [
    "DP_RUN_CONFIG",
    "KEYWORDS",
    "RUN_CONFIG",
    "FlatSettings",
    "coded_secagg_settings",
    "dp_from_run_config",
    "fields_from_run_config",
    "split_keywords",
]


def _real(key: str, value: Any, what: str) -> float:
    """``value`` (a number, or a string of one from ``-c key=value``) as a finite float."""
    try:
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            raise ValueError
        number = float(value)
        if not math.isfinite(number) or (what == "an integer" and not number.is_integer()):
            raise ValueError
    except ValueError:
        raise ConfigurationError(f"run config {key}={value!r}: {what} is needed") from None
    return number


def _integer(key: str, value: Any) -> int:
    return int(_real(key, value, "an integer"))


def _number(key: str, value: Any) -> float:
    return _real(key, value, "a finite number")


def _flag(key: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise ConfigurationError(f"run config {key}={value!r}: true or false is needed")


def _text(key: str, value: Any) -> str:
    if not isinstance(value, str):
        raise ConfigurationError(f"run config {key}={value!r}: a string is needed")
    return value


def _integer_or_default(key: str, value: Any) -> int | None:
    number = _integer(key, value)
    return number or None  # 0: the default (e.g. U = n - s, every connected node)


def _number_or_default(key: str, value: Any) -> float | None:
    number = _number(key, value)
    return number or None  # 0: the default (e.g. the finest safe scale, automatic W)


#: The two settings objects a key belongs to (:class:`strategies.ProtocolSettings`,
#: :class:`strategies.Timeouts`), as ``CodedSecAgg`` names them
PROTOCOL, TIMEOUTS = "protocol", "timeouts"

#: run-config key -> (the object it sets, its field there, how its value is read). For the
#: keys read "or default", 0 stands for the field's default (None). The ``CodedSecAgg``
#: keyword of a key is the key with underscores (:data:`KEYWORDS`).
RUN_CONFIG: dict[str, tuple[str, str, Callable[[str, Any], Any]]] = {
    "num-silos": (PROTOCOL, "num_silos", _integer_or_default),
    "num-stragglers": (PROTOCOL, "num_stragglers", _integer),
    "privacy-threshold": (PROTOCOL, "privacy_threshold", _integer),
    "recovery-threshold": (PROTOCOL, "recovery_threshold", _integer_or_default),
    "clip-range": (PROTOCOL, "clip_range", _number),
    "adaptive-clip": (PROTOCOL, "adaptive_clip", _flag),
    "clip-quorum": (PROTOCOL, "clip_quorum", _integer_or_default),
    "max-clip-range": (PROTOCOL, "max_clip_range", _number_or_default),
    "scale": (PROTOCOL, "scale", _number_or_default),
    "max-weight": (PROTOCOL, "max_weight", _number_or_default),
    "code": (PROTOCOL, "code", _text),
    "masking": (PROTOCOL, "masking", _text),
    "extra-replies": (PROTOCOL, "extra_replies", _integer),
    "extra-wait": (PROTOCOL, "extra_wait", _number),
    "headroom-bits": (PROTOCOL, "headroom_bits", _integer),
    "max-erased-fraction": (PROTOCOL, "max_erased_fraction", _number),
    "drift-tolerance": (PROTOCOL, "drift_tolerance", _number),
    "max-aborted-rounds": (PROTOCOL, "max_aborted_rounds", _integer),
    "round-timeout": (TIMEOUTS, "round", _number),
    "recovery-timeout": (TIMEOUTS, "recovery", _number),
    "key-timeout": (TIMEOUTS, "key", _number),
    "node-wait-timeout": (TIMEOUTS, "node_wait", _number),
    "evaluate-timeout": (TIMEOUTS, "evaluate", _number_or_default),
    "poll-interval": (TIMEOUTS, "poll_interval", _number),
}

#: ``CodedSecAgg`` keyword -> (the object, its field): every key of :data:`RUN_CONFIG` with
#: underscores, and ``dp`` (made from the :data:`DP_RUN_CONFIG` keys)
KEYWORDS: dict[str, tuple[str, str]] = {
    **{key.replace("-", "_"): (owner, name) for key, (owner, name, _) in RUN_CONFIG.items()},
    "dp": (PROTOCOL, "dp"),
}


#: run-config keys of distributed DP -> ``DistributedDP`` keyword: one ``dp`` field, set
#: when ``dp-noise-multiplier`` is > 0 (0, the default: no DP; the other two keys are then
#: ignored).
DP_RUN_CONFIG: dict[str, str] = {
    "dp-noise-multiplier": "noise_multiplier",
    "dp-clip": "clip",
    "dp-delta": "delta",
}


def dp_from_run_config(run_config: Mapping[str, Any]) -> Any:
    """``ProtocolSettings(dp=...)`` from the ``dp-*`` keys (None when the noise multiplier is 0).

    Parameters
    ----------
    run_config
        A Flower run config or any mapping of its keys.

    Returns
    -------
    coded_fl.dp.DistributedDP or None

    Raises
    ------
    ConfigurationError
        A value of the wrong type, ``dp-clip`` missing, or the ``dp`` extra not installed.
    """
    given = {
        kw: _number(key, run_config[key]) for key, kw in DP_RUN_CONFIG.items() if key in run_config
    }
    if not given.get("noise_multiplier"):
        return None
    try:
        from coded_fl.dp import DistributedDP
    except ImportError as exc:
        raise ConfigurationError(f"run config dp-noise-multiplier: {exc}") from None
    if "clip" not in given:
        raise ConfigurationError(
            "run config dp-noise-multiplier > 0 needs dp-clip (the L2 norm every "
            "partition's update is clipped to)"
        )
    return DistributedDP(**given)


def fields_from_run_config(run_config: Mapping[str, Any], owner: str) -> dict[str, Any]:
    """The fields of one settings object (``"protocol"`` or ``"timeouts"``) that
    ``run_config`` sets, read and typed (``dp`` included for the protocol, when set).

    Parameters
    ----------
    run_config
        A Flower run config or any mapping of its keys.
    owner
        Which object's fields.

    Returns
    -------
    dict[str, Any]
        Field name -> value, for the keys present.

    Raises
    ------
    ConfigurationError
        A value of the wrong type, naming the key.
    """
    out: dict[str, Any] = {}
    for key, value in run_config.items():
        if key in RUN_CONFIG and RUN_CONFIG[key][0] == owner:
            _, name, read = RUN_CONFIG[key]
            out[name] = read(key, value)
    if owner == PROTOCOL:
        dp = dp_from_run_config(run_config)
        if dp is not None:
            out["dp"] = dp
    return out


def coded_secagg_settings(run_config: Mapping[str, Any]) -> dict[str, Any]:
    """The ``CodedSecAgg`` keywords that ``run_config`` sets (see :data:`RUN_CONFIG`).

    Parameters
    ----------
    run_config
        A Flower run config (``context.run_config``) or any mapping of its keys.

    Returns
    -------
    dict[str, Any]
        Keyword -> value, for the keys present (``dp``: a ``DistributedDP`` from the
        :data:`DP_RUN_CONFIG` keys when ``dp-noise-multiplier`` > 0).

    Raises
    ------
    ConfigurationError
        A value of the wrong type, naming the key.
    """
    keyword = {field: kw for kw, field in KEYWORDS.items()}
    return {
        keyword[(owner, name)]: value
        for owner in (PROTOCOL, TIMEOUTS)
        for name, value in fields_from_run_config(run_config, owner).items()
    }


class FlatSettings(TypedDict, total=False):
    """``CodedSecAgg``'s flat keywords: each sets one field of
    :class:`strategies.ProtocolSettings` or :class:`strategies.Timeouts` (:data:`KEYWORDS`).

    Attributes
    ----------
    num_stragglers, privacy_threshold, recovery_threshold, num_silos, clip_range
        The :class:`strategies.ProtocolSettings` fields of those names.
    adaptive_clip, clip_quorum, max_clip_range, scale, max_weight, code, masking
        The :class:`strategies.ProtocolSettings` fields of those names.
    extra_replies, extra_wait, headroom_bits, max_erased_fraction, drift_tolerance
        The :class:`strategies.ProtocolSettings` fields of those names.
    max_aborted_rounds, dp
        The :class:`strategies.ProtocolSettings` fields of those names.
    round_timeout, recovery_timeout, key_timeout, node_wait_timeout, evaluate_timeout
        :class:`strategies.Timeouts`' ``round``, ``recovery``, ``key``, ``node_wait``,
        ``evaluate``.
    poll_interval
        :class:`strategies.Timeouts`' ``poll_interval``.
    """

    num_stragglers: int
    privacy_threshold: int
    recovery_threshold: int | None
    num_silos: int | None
    clip_range: float
    adaptive_clip: bool
    clip_quorum: int | None
    max_clip_range: float | None
    scale: float | None
    max_weight: float | None
    code: str
    masking: str
    extra_replies: int
    extra_wait: float
    headroom_bits: int
    max_erased_fraction: float
    drift_tolerance: float
    max_aborted_rounds: int
    dp: DistributedDP | None
    round_timeout: float
    recovery_timeout: float
    key_timeout: float
    node_wait_timeout: float
    evaluate_timeout: float | None
    poll_interval: float


def split_keywords(
    settings: Mapping[str, Any], *, allowed: tuple[str, ...] = ()
) -> tuple[dict[str, Any], dict[str, Any]]:
    """``CodedSecAgg``'s flat keywords as (protocol fields, timeout fields).

    Parameters
    ----------
    settings
        Flat keyword -> value.
    allowed
        The caller's own keywords, named in the error beside the settings'.

    Returns
    -------
    tuple[dict[str, Any], dict[str, Any]]
        Field -> value for :class:`strategies.ProtocolSettings` and for
        :class:`strategies.Timeouts`.

    Raises
    ------
    UnknownSettingError
        A keyword that is no setting (a ``TypeError`` and a ``ConfigurationError``), naming
        the valid ones.
    """
    unknown = sorted(set(settings) - set(KEYWORDS))
    if unknown:
        valid = ", ".join(sorted({*KEYWORDS, *allowed}))
        raise UnknownSettingError(
            f"unknown CodedSecAgg setting(s) {', '.join(unknown)}; the settings are: {valid}"
        )
    out: dict[str, dict[str, Any]] = {PROTOCOL: {}, TIMEOUTS: {}}
    for keyword, value in settings.items():
        owner, name = KEYWORDS[keyword]
        out[owner][name] = value
    return out[PROTOCOL], out[TIMEOUTS]
