"""The warnings of a decoded round: replicas that disagree, and update entries clipped.

:class:`strategies.driver.RoundDriver` calls :func:`warn_disagreement` on every decoded sum and
:func:`warn_clipped` on every round it applies; each says what happened and what to change.
"""

from __future__ import annotations

import logging

from .report import RoundReport
from .run import RunSettings, RunState

__all__ = ["CLIP_WARNING", "DISAGREEMENT_WARNING", "warn_clipped", "warn_disagreement"]

LOG = logging.getLogger("flwr")
#: Above this weighted fraction of clipped update entries a round warns.
CLIP_WARNING = 1e-3

#: Erased or disagreeing coordinates (fraction of the round's) above which the causes are named.
DISAGREEMENT_WARNING = 1e-3


def warn_disagreement(report: RoundReport, length: int) -> None:
    """Name the silos overruled by their group, and the likely causes when replicas of
    partitions disagree beyond the drift tolerance at many coordinates (drift within it is
    the normal case across machines: the round line counts it).

    Parameters
    ----------
    report
        The round's report (its offenders, erased and disagreeing coordinates).
    length
        The coordinates of the round's update vector.
    """
    if report.offenders:
        LOG.warning(
            "[coded-fl] round %d: silo(s) %s sent replicas beyond the drift tolerance where the "
            "other members of their group agreed (at %s coordinate(s)): overruled, the sum is "
            "their groups' majority; a deviating or broken silo, left out of the next rounds",
            report.round,
            list(report.offenders),
            ", ".join(str(report.off_silos.get(s, 0)) for s in report.offenders),
        )
    beyond = max(report.erased, report.disagreeing - report.within_tolerance)
    if beyond <= DISAGREEMENT_WARNING * length:
        return
    top = sorted(report.off_silos.items(), key=lambda kv: (-kv[1], kv[0]))[:3]
    LOG.warning(
        "[coded-fl] round %d: replicas of a partition disagree beyond what the checks settle "
        "at %d of %d coordinates (%d corrected, %d erased%s). Silos that hold the same "
        "partition train it to different bits when their machines differ (torch thread "
        "counts, CPU instruction sets, GPU vs CPU, nondeterministic kernels), more so with "
        "longer local training. With the repetition code (code='auto'), raise drift_tolerance "
        "or wait for more replies per group (extra_replies); with the polynomial code, which "
        "mixes replicas, use code='repetition', run training under "
        "coded_fl.determinism.deterministic_torch() or raise headroom_bits",
        report.round,
        beyond,
        length,
        report.corrected,
        report.erased,
        f"; most off: {', '.join(f'silo {s} ({c})' for s, c in top)}" if top else "",
    )


def warn_clipped(
    report: RoundReport, state: RunState, settings: RunSettings, entries: int | None, K: int
) -> None:
    """Say that an applied round was clipped: with ``adaptive_clip`` whenever a partition
    clipped (fewer than the quorum, or the range at ``max_clip_range``), naming the count;
    without it above :data:`CLIP_WARNING` of the entries.

    Parameters
    ----------
    report
        The applied round's report.
    state
        The run's state.
    settings
        The run's settings.
    entries
        Update entries clipped (None: unknown, erased).
    K
        The partitions of the code.
    """
    if not settings.adaptive_clip:
        if report.clipped_fraction > CLIP_WARNING:
            LOG.warning(
                "[coded-fl] round %d: %.3g%% of the update entries were clipped to %g (the "
                "aggregate differs from plain FedAvg there): set adaptive_clip=True, raise "
                "clip_range or lower the learning rate",
                report.round,
                100 * report.clipped_fraction,
                report.clip_range,
            )
        return
    if report.clipped_partitions <= 0:
        return
    why = (
        f"the range is at max_clip_range={settings.max_delta_scale * state.config.clip_range:g}"
        if state.delta_scale >= settings.max_delta_scale
        else f"fewer than clip_quorum={settings.clip_quorum}: the range stays"
    )
    LOG.warning(
        "[coded-fl] round %d: %d of %d partitions had update entries beyond the clip range "
        "%g (%s entries, %.3g%%): %s; those entries were clipped (the aggregate differs "
        "from plain FedAvg there, as a clipping FedAvg would)",
        report.round,
        report.clipped_partitions,
        K,
        report.clip_range,
        "?" if entries is None else entries,
        100 * report.clipped_fraction,
        why,
    )
