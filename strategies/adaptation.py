"""What a run adapts between the attempts and rounds: the automatic weight bound, the clip range.

:class:`strategies.driver.RoundDriver` reruns a round at once with the weight bound raised
(:func:`raise_weight_bound`) or the clip range widened (:func:`widen_clip_range`) when the
silos or the decoded sum say so, and narrows the range for the next round after a round that
did not need it (:func:`narrow_clip_range`). Each changes the run's
:class:`strategies.run.RunState` and says so in the log.
"""

from __future__ import annotations

import logging

from coded_fl.vocabulary import CLIP_WIDENING

from .report import RoundReport
from .run import RunSettings, RunState

__all__ = ["narrow_clip_range", "raise_weight_bound", "widen_clip_range"]

LOG = logging.getLogger("flwr")


def raise_weight_bound(state: RunState, settings: RunSettings, r: int) -> bool:
    """After a round that more silos refused for the automatic weight bound than a round
    can spare: raise it and say so; False when there is nothing to raise (or the bound is
    fixed). The new bound is the (spare + 1)-th largest asked for: every partition's s + 1
    or more holders ask for its bound, and no set of silos that a round could do without
    (a few misbehaving ones) can push W up (a huge W would cost every silo precision).

    Parameters
    ----------
    state
        The run's state (its weight bound and protocol round offset rise).
    settings
        The run's settings.
    r
        The Flower round.

    Returns
    -------
    bool
        Whether the bound rose (the round is then rerun).
    """
    asked = sorted(state.weight_refused.values(), reverse=True)  # train_round resets it
    spare = state.config.n - state.config.min_uploads
    if not settings.spec.auto_weight or len(asked) <= spare:
        return False
    needed = asked[spare]
    if needed <= state.weight_bound:
        return False
    LOG.info(
        "[coded-fl] round %d: a partition holds more examples than the weight bound %g: "
        "bound raised to %d, round rerun (protocol round %d)",
        r,
        state.weight_bound,
        needed,
        r + state.round_offset + 1,
    )
    state.weight_bound = float(needed)
    state.round_offset += 1
    return True


def widen_clip_range(state: RunState, settings: RunSettings, r: int, report: RoundReport) -> bool:
    """After an attempt whose decoded sum says that at least ``clip_quorum`` partitions
    had an entry beyond the clip range (with ``adaptive_clip``; :meth:`RoundDriver.apply` then
    discarded it before the wrapped strategy saw it, so the model is unchanged): widen the
    clip range four times (the delta scale g, at most ``max_clip_range``) and say so;
    False otherwise.

    Parameters
    ----------
    state
        The run's state (its delta scale and protocol round offset rise).
    settings
        The run's settings.
    r
        The Flower round.
    report
        The attempt's report.

    Returns
    -------
    bool
        Whether the range widened (the round is then rerun).
    """
    if not (
        settings.adaptive_clip
        and report.clipped_partitions >= settings.clip_quorum
        and state.delta_scale < settings.max_delta_scale
    ):
        return False
    state.delta_scale = min(settings.max_delta_scale, state.delta_scale * CLIP_WIDENING)
    LOG.info(
        "[coded-fl] round %d: %d of %d partitions had update entries beyond the clip "
        "range (%d entries, clip_quorum=%d): clip range widened to %g, round rerun "
        "(protocol round %d)",
        r,
        report.clipped_partitions,
        state.config.gradient_code.K,
        round(report.clipped_fraction * state.config.gradient_code.K * state.layout.model_size),
        settings.clip_quorum,
        state.config.clip_range * state.delta_scale,
        r + state.round_offset + 1,
    )
    state.round_offset += 1
    return True


def narrow_clip_range(
    state: RunState, settings: RunSettings, report: RoundReport, wide: int | None
) -> None:
    """After a completed round in which fewer than ``clip_quorum`` partitions had an entry
    beyond a quarter of the clip range (``wide``; None: erased, unknown): the next round
    uses a range four times narrower, never below ``clip_range``. No rerun.

    Parameters
    ----------
    state
        The run's state (its delta scale falls).
    settings
        The run's settings.
    report
        The completed round's report (its ``next_clip_range`` is set).
    wide
        Partitions that had an entry beyond a quarter of the clip range.
    """
    if not settings.adaptive_clip or state.delta_scale <= 1 or wide is None:
        return
    if wide >= settings.clip_quorum:
        return
    state.delta_scale = max(1.0, state.delta_scale / CLIP_WIDENING)
    report.next_clip_range = state.config.clip_range * state.delta_scale
    LOG.info(
        "[coded-fl] round %d: %d of %d partitions had update entries beyond a quarter of "
        "the clip range %g (clip_quorum=%d): clip range narrowed to %g for the next round",
        report.round,
        wide,
        state.config.gradient_code.K,
        report.clip_range,
        settings.clip_quorum,
        report.next_clip_range,
    )
