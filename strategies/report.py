"""What a run of :class:`strategies.CodedSecAgg` reports: one :class:`RoundReport` per round, and
the estimate of how long the rounds would have taken waiting for every silo."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from flwr.app import ArrayRecord, MetricRecord

from coded_fl.secagg import AbortCode

__all__ = ["RoundReport", "waiting_estimate"]


@dataclass
class RoundReport:
    """What happened in one round (also printed as the progress line, :meth:`line`).

    Attributes
    ----------
    round, ok, reason
        The round number, whether it completed, and why not if it did not.
    abort_code
        Why not, as a value to branch on (:class:`coded_fl.secagg.AbortCode`); None when the
        round completed.
    silos, replies_used, stragglers, responders
        n, the uploads decoded, the silos skipped, the silos that answered the recovery.
    close_seconds, seconds
        When the upload collection closed and when the round ended (from its start).
    total_weight, clipped_fraction, metrics
        The decoded total sample weight, the fraction of clipped update entries (exact
        counts over K d entries; each partition's count saturates at
        :meth:`coded_fl.layout.UpdateLayout.count_cap`), and the securely aggregated train
        metrics.
    clipped_partitions
        Partitions with at least one entry beyond the clip range (an exact count; -1 where
        replicas disagreed on it and it was erased).
    clip_range
        The clip range the round used: ``clip_range`` times the round's delta scale (it widens
        after a round that clipped at ``clip_quorum`` partitions, with ``adaptive_clip``).
    next_clip_range
        The clip range of the next round when this round narrowed it (no partition, or fewer
        than ``clip_quorum``, had an entry beyond a quarter of it); 0 when unchanged.
    evaluate_metrics, server_metrics
        The wrapped strategy's aggregated client-side evaluation, and ``evaluate_fn``'s
        server-side evaluation, as they are named (no prefix added).
    errors
        Silo -> why its reply was refused or what it refused.
    suspects
        Silos whose replies are inconsistent, when the protocol can tell (in a completed round:
        silos dropped from S after accusations, and silos beyond the drift tolerance where
        their group had no majority: their coordinates were erased).
    accused
        Silo -> what another silo reported about it (a share that failed authentication) and,
        once judged on the evidence (the accused silo reveals that share's key), which of the
        two lied; the liar is among ``offenders``.
    disagreeing, corrected, erased
        Coordinates where replicas of a partition disagreed (failed parity checks or group
        comparisons), those corrected (settled by the group's vote), and those erased (no
        update there this round): sites whose machines differ make replicas drift apart
        (``docs/protocol.md``, "Replicas that disagree").
    within_tolerance
        Of the disagreeing coordinates, those where every replica lay within the drift
        tolerance of its group's median: float drift, the normal case across machines.
    off_silos
        Silo -> coordinates where its reply was located as off (beyond the drift tolerance
        where its group's majority agreed, or beyond the parity checks' correction).
    offenders
        Silos overruled by their group at some coordinate beyond the drift tolerance (a
        deviating or broken silo), or whose recovery reply or accusation (as accuser or
        accused) was proven wrong: left out of the session's later rounds.
    excluded
        Silos left out of this round: overruled in an earlier round of the session.
    tolerance, keyless
        s, the stragglers a round can do without, and the silos that hold no keys this round
        (a node without ``coded_secagg_mod``, or one that never answered the key exchange):
        they never upload, so they use up the tolerance in every round; the line shows what is
        left (``tolerance left 0 of s=1: silo 3 has no key``).
    silent
        Silos the server heard nothing from (no reply in time, late or an error) since the
        previous round started: gone or hanging. A silo that is silent in one round only is a
        straggler (it may answer late); two rounds without a word name it here, and the next
        round does not wait for it (:attr:`unawaited`). It is still sent every request, so it
        rejoins with its next reply.
    unawaited
        Silos this round did not wait for: silent through the two rounds before it. With
        ``extra_replies`` the round closes once every other silo has answered instead of
        waiting ``extra_wait`` for them.
    round_trips
        Protocol round trips in this round: a rekey (if any) + train/upload + recovery.
    rekeyed
        Silos that got new keys before this round (restarted or replaced nodes).
    keying_rounds
        With distributed DP: protocol rounds before this one that only dealt the edge keys
        (the silos uploaded zeros; nothing was released).
    epsilon
        With distributed DP: the run's epsilon at the configured delta after this round,
        counting every noised sum the server could have decoded so far (attempts included);
        None without DP.
    arrays, train_metrics
        The wrapped strategy's aggregate of this round (None if the round was aborted).
    """

    round: int
    ok: bool
    reason: str = ""
    abort_code: AbortCode | None = None
    silos: int = 0
    replies_used: int = 0
    stragglers: tuple[int, ...] = ()
    responders: int = 0
    close_seconds: float = 0.0
    seconds: float = 0.0
    total_weight: float = 0.0
    clipped_fraction: float = 0.0
    clip_range: float = 0.0
    clipped_partitions: int = 0
    next_clip_range: float = 0.0
    metrics: dict[str, float] = field(default_factory=dict)
    evaluate_metrics: dict[str, float] = field(default_factory=dict)
    server_metrics: dict[str, float] = field(default_factory=dict)
    errors: dict[int, str] = field(default_factory=dict)
    suspects: tuple[int, ...] = ()
    accused: dict[int, str] = field(default_factory=dict)
    disagreeing: int = 0
    corrected: int = 0
    erased: int = 0
    within_tolerance: int = 0
    off_silos: dict[int, int] = field(default_factory=dict)
    offenders: tuple[int, ...] = ()
    excluded: tuple[int, ...] = ()
    silent: tuple[int, ...] = ()
    unawaited: tuple[int, ...] = ()
    tolerance: int = 0
    keyless: tuple[int, ...] = ()
    round_trips: int = 0
    rekeyed: tuple[int, ...] = ()
    keying_rounds: int = 0
    epsilon: float | None = None
    arrays: ArrayRecord | None = field(default=None, repr=False)
    train_metrics: MetricRecord | None = field(default=None, repr=False)

    def line(self) -> str:
        """The round as one progress line (the accuracy shown is the server-side evaluation's
        when there is one, else the clients' evaluation's, else a train metric's)."""
        acc = next(
            (
                f"{k}={v:.4f}"
                for found in (self.server_metrics, self.evaluate_metrics, self.metrics)
                for k, v in found.items()
                if "acc" in k
            ),
            "",
        )
        named = "".join(f"; silo {s} accused: {why}" for s, why in sorted(self.accused.items()))
        rekeyed = f" (rekeyed silo(s) {list(self.rekeyed)})" if self.rekeyed else ""
        if not self.ok:
            return (
                f"[coded-fl] round {self.round}: ABORTED after {self.seconds:.2f}s, model "
                f"unchanged: {self.reason}{named}{rekeyed}{self._privacy()}"
            )
        return (
            f"[coded-fl] round {self.round}: used {self.replies_used}/{self.silos} replies, "
            f"skipped {len(self.stragglers)} straggler(s) {list(self.stragglers)}"
            + self._tolerance()
            + f", closed at {self.close_seconds:.2f}s, round {self.seconds:.2f}s"
            + (f", {acc}" if acc else "")
            + (
                f", clipped {100 * self.clipped_fraction:.3g}% of entries"
                + (
                    f" in {self.clipped_partitions} partition(s)"
                    if self.clipped_partitions > 0
                    else ""
                )
                if self.clipped_fraction > 0
                else ""
            )
            + (
                f", clip range narrowed to {self.next_clip_range:g} for the next round"
                if self.next_clip_range
                else ""
            )
            + self._replicas()
            + f", {self.round_trips} round trip{'' if self.round_trips == 1 else 's'}"
            + self._privacy()
            + f"{rekeyed}{named}"
        )

    def _privacy(self) -> str:
        """Distributed DP's account (only with DP)."""
        if self.epsilon is None:
            return ""
        keying = f" after {self.keying_rounds} keying round(s)" if self.keying_rounds else ""
        return f", epsilon {self.epsilon:.3g} so far{keying}"

    def _tolerance(self) -> str:
        """The straggler tolerance this round left (only when some of it was used)."""
        missing = self.silos - self.replies_used
        if not self.tolerance or missing <= 0:
            return ""
        out = f" (tolerance left {max(0, self.tolerance - missing)} of s={self.tolerance}"
        if self.keyless:
            out += f": silo(s) {list(self.keyless)} hold no key"
        return out + ")"

    def _replicas(self) -> str:
        out = ""
        if self.disagreeing or self.erased:
            beyond = self.disagreeing - self.within_tolerance
            top = sorted(self.off_silos.items(), key=lambda kv: (-kv[1], kv[0]))[:3]
            most = f" (most off: {', '.join(f'silo {s}: {c}' for s, c in top)})" if top else ""
            out = (
                f", replicas differ at {self.disagreeing} coordinate(s) "
                f"({self.within_tolerance} within the drift tolerance, {beyond} beyond: "
                f"{self.corrected} settled by the group, {self.erased} erased{most})"
            )
        if self.offenders:
            liars = [s for s in self.offenders if s not in self.off_silos]
            overruled = [s for s in self.offenders if s in self.off_silos]
            if overruled:
                out += (
                    f"; silo(s) {overruled} overruled beyond the drift tolerance: left out of "
                    "the next rounds"
                )
            if liars:
                out += f"; silo(s) {liars} named offenders: left out of the next rounds"
        unsettled = [s for s in self.suspects if s not in self.offenders]
        if unsettled and self.erased:
            out += f"; beyond the drift tolerance with no majority: silo(s) {unsettled}"
        if self.excluded:
            out += f"; left out: silo(s) {list(self.excluded)}"
        if self.silent:
            out += (
                f"; silent for two rounds: silo(s) {list(self.silent)} (the next round does "
                "not wait for them)"
            )
        return out


def waiting_estimate(
    reports: Sequence[RoundReport],
    late_train: Mapping[int, Sequence[float]],
    *,
    round_timeout: float,
) -> tuple[float, float]:
    """(seconds the rounds took, seconds they would have taken waiting for every silo).

    Parameters
    ----------
    reports
        The run's round reports.
    late_train
        Round -> seconds (from the round's start) at which each late upload or late error
        reply came.
    round_timeout
        What a straggler that never answered before the run ended counts, as it would for a
        strategy that waits for everyone.

    Returns
    -------
    tuple[float, float]
    """
    ours = sum(r.seconds for r in reports)
    wait_all = 0.0
    for r in reports:
        late = late_train.get(r.round, [])
        slowest = max([r.close_seconds, *late])
        if len(late) < len(r.stragglers):
            slowest = max(slowest, round_timeout)
        wait_all += slowest + (r.seconds - r.close_seconds)
    return ours, wait_all
