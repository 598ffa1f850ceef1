"""The checks of :class:`strategies.CodedSecAgg`'s constructor settings.

:func:`check_protocol` and :func:`check_timeouts` refuse a setting that cannot work with a
:class:`~coded_fl.errors.ConfigurationError` that names it, when
:class:`strategies.ProtocolSettings` or :class:`strategies.Timeouts` is made, before any node
is contacted; :func:`check_strategy` and :func:`check_dp` (with ``metric_keys``) check what
needs the wrapped strategy when ``CodedSecAgg`` is made; what depends on the number of silos is
checked against the protocol configuration (:class:`strategies.secagg_config.ProtocolView`).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from flwr.serverapp.strategy import Strategy

from coded_fl.codes import code_names
from coded_fl.errors import ConfigurationError
from coded_fl.quantize import check_clip_range, check_positive_real
from coded_fl.secagg.masking import names as masking_names
from coded_fl.vocabulary import MAX_DELTA_SCALE

from .composable import check_composable, check_dp_sampling, legacy_advice

if TYPE_CHECKING:
    from .settings import ProtocolSettings, Timeouts

__all__ = [
    "check_dp",
    "check_protocol",
    "check_strategy",
    "check_timeouts",
    "is_real",
    "max_delta_scale",
]


def check_strategy(strategy: Strategy) -> None:
    """Refuse a wrapped strategy that coded secure aggregation cannot drive.

    Parameters
    ----------
    strategy
        As :class:`strategies.CodedSecAgg` takes it.

    Raises
    ------
    ConfigurationError
        Not a message-API ``Strategy`` (with advice for a legacy one), a strategy that needs
        individual results, or a DP wrapper that samples clients.
    """
    check_composable(strategy)
    check_dp_sampling(strategy)
    if not isinstance(strategy, Strategy):
        raise ConfigurationError(
            "strategy must be a flwr.serverapp.strategy.Strategy, got "
            f"{type(strategy).__name__}" + legacy_advice(strategy)
        )


def check_protocol(settings: ProtocolSettings) -> None:
    """Refuse protocol settings that cannot work at any number of silos.

    Parameters
    ----------
    settings
        The settings (:class:`strategies.ProtocolSettings` checks itself with this).

    Raises
    ------
    ConfigurationError
        Naming the first setting refused (:class:`strategies.ProtocolSettings` says which are).
    """
    p = settings
    _check_counts(
        num_stragglers=p.num_stragglers,
        privacy_threshold=p.privacy_threshold,
        recovery_threshold=p.recovery_threshold,
        num_silos=p.num_silos,
        extra_replies=p.extra_replies,
        headroom_bits=p.headroom_bits,
    )
    _check_real("extra_wait", p.extra_wait, least=0.0, strict=False)
    drift_tolerance = p.drift_tolerance
    if not is_real(drift_tolerance) or not 0 <= drift_tolerance <= 1:
        raise ConfigurationError(
            f"drift_tolerance must be a number in [0, 1] (a fraction of the clip range), "
            f"got {drift_tolerance!r}"
        )
    max_aborted_rounds = p.max_aborted_rounds
    if isinstance(max_aborted_rounds, bool) or not isinstance(max_aborted_rounds, int):
        raise ConfigurationError(
            f"max_aborted_rounds must be an int >= 0, got {max_aborted_rounds!r}"
        )
    if max_aborted_rounds < 0:
        raise ConfigurationError(
            f"max_aborted_rounds must be an int >= 0 (0: never stop), got {max_aborted_rounds}"
        )
    max_erased_fraction = p.max_erased_fraction
    if not is_real(max_erased_fraction) or not 0 <= max_erased_fraction < 1:
        raise ConfigurationError(
            f"max_erased_fraction must be a number in [0, 1), got {max_erased_fraction!r}"
        )
    max_weight = p.max_weight
    if max_weight is not None and not (
        is_real(max_weight) and math.isfinite(max_weight) and max_weight > 0
    ):
        raise ConfigurationError(
            f"max_weight must be a finite number > 0 or None (automatic), got {max_weight!r}"
        )
    check_clip_range(p.clip_range)
    max_delta_scale(p.clip_range, p.max_clip_range)
    clip_quorum = p.clip_quorum
    if clip_quorum is not None and (
        isinstance(clip_quorum, bool) or not isinstance(clip_quorum, int) or clip_quorum < 1
    ):
        raise ConfigurationError(
            f"clip_quorum must be an int >= 1 (partitions) or None (automatic), got {clip_quorum!r}"
        )
    if p.scale is not None:
        check_positive_real("scale", p.scale)
    codes = ("auto", *code_names(exact=True))  # ProtocolConfig decides which fit n, s
    if p.code not in codes:
        raise ConfigurationError(f"code must be one of {', '.join(codes)}, got {p.code!r}")
    maskings = ("auto", *masking_names())
    if p.masking not in maskings:
        raise ConfigurationError(f"masking must be one of {', '.join(maskings)}, got {p.masking!r}")
    check_dp(p.dp, metric_keys=None, scale=p.scale)


def check_timeouts(timeouts: Timeouts) -> None:
    """Refuse a deadline or poll interval that is not a finite number > 0.

    Parameters
    ----------
    timeouts
        The deadlines (:class:`strategies.Timeouts` checks itself with this).

    Raises
    ------
    ConfigurationError
        Naming the setting by its ``CodedSecAgg`` keyword (``round_timeout``, ...).
    """
    t = timeouts
    for name, value in (
        ("round_timeout", t.round),
        ("recovery_timeout", t.recovery),
        ("key_timeout", t.key),
        ("node_wait_timeout", t.node_wait),
        ("poll_interval", t.poll_interval),
        ("evaluate_timeout", t.evaluate),
    ):
        if value is not None or name != "evaluate_timeout":
            _check_real(name, value, least=0.0, strict=True)


def max_delta_scale(clip_range: float, max_clip_range: object) -> float:
    """The largest delta scale g (a power of two, at most 2^16) with c g <= ``max_clip_range``.

    Parameters
    ----------
    clip_range, max_clip_range
        c, and the widest range (None: c 2^16).

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
