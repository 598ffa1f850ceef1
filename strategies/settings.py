"""``CodedSecAgg``'s settings from a Flower run config, in one table.

A ServerApp reads its settings from ``context.run_config`` (``pyproject.toml``'s
``[tool.flwr.app.config]``, overridden with ``flwr run . -c "key=value"``). Every key of
:data:`RUN_CONFIG` maps to one :class:`strategies.CodedSecAgg` keyword; a key the run config
does not hold keeps the keyword's default (one default per setting: the constructor's). Keys
of the app's own (epochs, data, ...) are ignored.

>>> coded_secagg_settings({"num-stragglers": 2, "scale": 0.0, "masking": "shares", "lr": 0.1})
{'num_stragglers': 2, 'scale': None, 'masking': 'shares'}
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from coded_fl.errors import ConfigurationError

__all__ = ["DP_RUN_CONFIG", "RUN_CONFIG", "coded_secagg_settings"]


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


#: run-config key -> (``CodedSecAgg`` keyword, how its value is read). For the keys read
#: "or default", 0 stands for the keyword's default (None).
RUN_CONFIG: dict[str, tuple[str, Callable[[str, Any], Any]]] = {
    "num-silos": ("num_silos", _integer_or_default),
    "num-stragglers": ("num_stragglers", _integer),
    "privacy-threshold": ("privacy_threshold", _integer),
    "recovery-threshold": ("recovery_threshold", _integer_or_default),
    "clip-range": ("clip_range", _number),
    "adaptive-clip": ("adaptive_clip", _flag),
    "clip-quorum": ("clip_quorum", _integer_or_default),
    "max-clip-range": ("max_clip_range", _number_or_default),
    "scale": ("scale", _number_or_default),
    "max-weight": ("max_weight", _number_or_default),
    "code": ("code", _text),
    "masking": ("masking", _text),
    "extra-replies": ("extra_replies", _integer),
    "extra-wait": ("extra_wait", _number),
    "headroom-bits": ("headroom_bits", _integer),
    "max-erased-fraction": ("max_erased_fraction", _number),
    "drift-tolerance": ("drift_tolerance", _number),
    "max-aborted-rounds": ("max_aborted_rounds", _integer),
    "round-timeout": ("round_timeout", _number),
    "recovery-timeout": ("recovery_timeout", _number),
    "key-timeout": ("key_timeout", _number),
    "node-wait-timeout": ("node_wait_timeout", _number),
    "evaluate-timeout": ("evaluate_timeout", _number_or_default),
    "poll-interval": ("poll_interval", _number),
}


#: run-config keys of distributed DP -> ``DistributedDP`` keyword: one ``dp`` keyword, set
#: when ``dp-noise-multiplier`` is > 0 (0, the default: no DP; the other two keys are then
#: ignored).
DP_RUN_CONFIG: dict[str, str] = {
    "dp-noise-multiplier": "noise_multiplier",
    "dp-clip": "clip",
    "dp-delta": "delta",
}


def _dp(run_config: Mapping[str, Any]) -> Any:
    """``CodedSecAgg(dp=...)`` from the ``dp-*`` keys (None when the noise multiplier is 0)."""
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
    out: dict[str, Any] = {}
    for key, value in run_config.items():
        if key in RUN_CONFIG:
            name, read = RUN_CONFIG[key]
            out[name] = read(key, value)
    dp = _dp(run_config)
    if dp is not None:
        out["dp"] = dp
    return out
