"""The checks of :class:`strategies.CodedSecAgg`'s constructor settings.

:func:`check_settings` refuses a setting that cannot work with a
:class:`~coded_fl.errors.ConfigurationError` that names it, at construction, before any node is
contacted; what depends on the number of silos is checked against the protocol configuration
(:class:`strategies.secagg_config.ProtocolView`).
"""

from __future__ import annotations

import math

from flwr.serverapp.strategy import Strategy

from coded_fl.errors import ConfigurationError
from coded_fl.quantize import check_clip_range, check_positive_real
from coded_fl.secagg.masking import names as masking_names
from coded_fl.vocabulary import MAX_DELTA_SCALE

from .composable import check_composable, check_dp_sampling, legacy_advice

__all__ = ["check_dp", "check_settings", "is_real"]

#: The gradient codes a run may ask for (ProtocolConfig decides which fit n, s); the maskings
#: are the registered schemes (coded_fl.secagg.masking) and "auto"
_CODES = ("auto", "plain", "polynomial", "repetition")


def check_settings(
    strategy: Strategy,
    *,
    num_stragglers: int,
    privacy_threshold: int,
    recovery_threshold: int | None,
    num_silos: int | None,
    clip_range: float,
    clip_quorum: int | None,
    max_clip_range: float | None,
    scale: float | None,
    max_weight: float | None,
    code: str,
    masking: str,
    extra_replies: int,
    extra_wait: float,
    headroom_bits: int,
    max_erased_fraction: float,
    drift_tolerance: float,
    max_aborted_rounds: int,
    round_timeout: float,
    recovery_timeout: float,
    key_timeout: float,
    node_wait_timeout: float,
    evaluate_timeout: float | None,
    poll_interval: float,
) -> float:
    """Refuse the constructor's settings that cannot work at any number of silos.

    Parameters
    ----------
    strategy, num_stragglers, privacy_threshold, recovery_threshold, num_silos, clip_range
        As :class:`strategies.CodedSecAgg` takes them.
    clip_quorum, max_clip_range, scale, max_weight, code, masking, extra_replies, extra_wait
        As :class:`strategies.CodedSecAgg` takes them.
    headroom_bits, max_erased_fraction, drift_tolerance, max_aborted_rounds
        As :class:`strategies.CodedSecAgg` takes them.
    round_timeout, recovery_timeout, key_timeout, node_wait_timeout, evaluate_timeout
        As :class:`strategies.CodedSecAgg` takes them.
    poll_interval
        As :class:`strategies.CodedSecAgg` takes it.

    Returns
    -------
    float
        The largest delta scale g the clip range may reach (a power of two, at most 2^16, with
        ``clip_range`` x g <= ``max_clip_range``).

    Raises
    ------
    ConfigurationError
        Naming the first setting refused (the constructor's ``Raises`` says which are).
    """
    check_composable(strategy)
    check_dp_sampling(strategy)
    if not isinstance(strategy, Strategy):
        raise ConfigurationError(
            "strategy must be a flwr.serverapp.strategy.Strategy, got "
            f"{type(strategy).__name__}" + legacy_advice(strategy)
        )
    _check_counts(
        num_stragglers=num_stragglers,
        privacy_threshold=privacy_threshold,
        recovery_threshold=recovery_threshold,
        num_silos=num_silos,
        extra_replies=extra_replies,
        headroom_bits=headroom_bits,
    )
    for name, value in (
        ("round_timeout", round_timeout),
        ("recovery_timeout", recovery_timeout),
        ("key_timeout", key_timeout),
        ("node_wait_timeout", node_wait_timeout),
        ("poll_interval", poll_interval),
        ("evaluate_timeout", evaluate_timeout),
    ):
        if value is not None or name != "evaluate_timeout":
            _check_real(name, value, least=0.0, strict=True)
    _check_real("extra_wait", extra_wait, least=0.0, strict=False)
    if not is_real(drift_tolerance) or not 0 <= drift_tolerance <= 1:
        raise ConfigurationError(
            f"drift_tolerance must be a number in [0, 1] (a fraction of the clip range), "
            f"got {drift_tolerance!r}"
        )
    if isinstance(max_aborted_rounds, bool) or not isinstance(max_aborted_rounds, int):
        raise ConfigurationError(
            f"max_aborted_rounds must be an int >= 0, got {max_aborted_rounds!r}"
        )
    if max_aborted_rounds < 0:
        raise ConfigurationError(
            f"max_aborted_rounds must be an int >= 0 (0: never stop), got {max_aborted_rounds}"
        )
    if not is_real(max_erased_fraction) or not 0 <= max_erased_fraction < 1:
        raise ConfigurationError(
            f"max_erased_fraction must be a number in [0, 1), got {max_erased_fraction!r}"
        )
    if max_weight is not None and not (
        is_real(max_weight) and math.isfinite(max_weight) and max_weight > 0
    ):
        raise ConfigurationError(
            f"max_weight must be a finite number > 0 or None (automatic), got {max_weight!r}"
        )
    check_clip_range(clip_range)
    max_delta_scale = _max_delta_scale(clip_range, max_clip_range)
    if clip_quorum is not None and (
        isinstance(clip_quorum, bool) or not isinstance(clip_quorum, int) or clip_quorum < 1
    ):
        raise ConfigurationError(
            f"clip_quorum must be an int >= 1 (partitions) or None (automatic), got {clip_quorum!r}"
        )
    if scale is not None:
        check_positive_real("scale", scale)
    if code not in _CODES:
        raise ConfigurationError(f"code must be one of {', '.join(_CODES)}, got {code!r}")
    maskings = ("auto", *masking_names())
    if masking not in maskings:
        raise ConfigurationError(f"masking must be one of {', '.join(maskings)}, got {masking!r}")
    return max_delta_scale


def _max_delta_scale(clip_range: float, max_clip_range: object) -> float:
    """The largest delta scale g (a power of two, at most 2^16) with c g <= ``max_clip_range``.

    Raises
    ------
    ConfigurationError
        Naming ``max_clip_range`` unless it is None or a finite number in [c, c 2^16].
    """
    if max_clip_range is None:
        return MAX_DELTA_SCALE
    widest = clip_range * MAX_DELTA_SCALE
    if not (
        is_real(max_clip_range)
        and math.isfinite(max_clip_range)  # type: ignore[arg-type]
        and clip_range <= max_clip_range <= widest  # type: ignore[operator]
    ):
        raise ConfigurationError(
            f"max_clip_range must be a finite number in [clip_range, clip_range x 2^16] = "
            f"[{clip_range:g}, {widest:g}] (the widest range a silo accepts) or None, got "
            f"{max_clip_range!r}"
        )
    g = 1.0
    while g < MAX_DELTA_SCALE and clip_range * g * 2 <= max_clip_range:  # type: ignore[operator]
        g *= 2
    return g


def is_real(value: object) -> bool:
    """Whether ``value`` is an int or a float (not a bool).

    Parameters
    ----------
    value
        The setting to look at.
    """
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _check_real(name: str, value: object, *, least: float, strict: bool) -> None:
    """Refuse ``value`` unless it is a finite number above ``least`` (or equal, if not strict)."""
    if not (
        is_real(value)
        and math.isfinite(value)  # type: ignore[arg-type]
        and (value > least if strict else value >= least)  # type: ignore[operator]
    ):
        sign = ">" if strict else ">="
        raise ConfigurationError(f"{name} must be a finite number {sign} {least:g}, got {value!r}")


def _check_counts(**counts: int | None) -> None:
    """Refuse a count of the constructor that is not an int in range (``None`` where allowed).

    ``num_stragglers``, ``privacy_threshold``, ``extra_replies`` and ``headroom_bits`` are ints
    >= 0; ``num_silos`` and ``recovery_threshold`` are None or ints >= 1; T < U and
    ``extra_replies`` <= s, as :class:`~coded_fl.secagg.ProtocolConfig` needs at any n.
    """
    for name, value in counts.items():
        optional = name in ("num_silos", "recovery_threshold")
        if value is None and optional:
            continue
        least = 1 if optional else 0
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            extra = " or None" if optional else ""
            raise ConfigurationError(f"{name} must be an int >= {least}{extra}, got {value!r}")
    s, t, u = counts["num_stragglers"], counts["privacy_threshold"], counts["recovery_threshold"]
    if u is not None and t is not None and u <= t:
        raise ConfigurationError(
            f"recovery_threshold={u} must exceed privacy_threshold={t} (T < U <= n - s): raise "
            f"recovery_threshold to at least {t + 1}, or leave it unset (n - s)"
        )
    e = counts["extra_replies"]
    if e is not None and s is not None and e > s:
        raise ConfigurationError(
            f"extra_replies={e} must be in 0..num_stragglers={s}: lower extra_replies to at "
            f"most {s}"
        )


def check_dp(dp: object, *, metric_keys: object, scale: object) -> None:
    """Refuse a ``dp`` setting that is not a :class:`coded_fl.dp.DistributedDP`, or that
    comes with settings it cannot keep private (metrics travel beside the update, unclipped
    and unnoised) or that it sets itself (the quantization scale).

    Parameters
    ----------
    dp
        ``CodedSecAgg(dp=...)``.
    metric_keys, scale
        The constructor's settings of those names.

    Raises
    ------
    ConfigurationError
        Naming the setting to change.
    """
    if dp is None:
        return
    try:
        from coded_fl.dp import DistributedDP
    except ImportError as exc:
        raise ConfigurationError(str(exc)) from None
    if not isinstance(dp, DistributedDP):
        raise ConfigurationError(
            f"dp must be a coded_fl.dp.DistributedDP(noise_multiplier=..., clip=...), got "
            f"{type(dp).__name__}"
        )
    if metric_keys:
        raise ConfigurationError(
            "metric_keys with dp: train metrics would be summed without clipping or noise; "
            "leave metric_keys unset (with dp no train metric is aggregated)"
        )
    if scale is not None:
        raise ConfigurationError(
            "scale with dp: distributed DP sets the quantization scale (steps_per_clip / "
            "clip); leave scale=None"
        )
