"""``CodedSecAgg``: coded secure aggregation around any Flower strategy.

::

    strategy = CodedSecAgg(FedAvg(), num_stragglers=2, privacy_threshold=2)
    result = strategy.start(grid=grid, initial_arrays=arrays, num_rounds=10)

The wrapper runs the round loop itself (``Strategy.start`` waits for every reply; this one never
waits for the slowest s silos): keys once per run, then per round a train request to every
silo, the first max(n-s, U) uploads, a recovery request to those silos, the exact sum. The
decoded weighted average is handed to the wrapped strategy's ``aggregate_train`` as if one silo
had sent it, so server-side optimisers (FedAdam, FedYogi, FedAvgM, ...) work unchanged; its
``configure_train`` still makes the train config (FedProx's ``proximal-mu`` etc.) and evaluation
is the wrapped strategy's, passed through. A round that cannot complete leaves the model as it
was and says why.

The class is put together from its parts: the checks of the constructor's settings
(:mod:`strategies.secagg_checks`), the settings as a protocol configuration
(:mod:`strategies.secagg_config`), starting a run and the latest run's state
(:mod:`strategies.secagg_runs`), and Flower's train and evaluate calls
(:mod:`strategies.secagg_interface`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from flwr.serverapp.strategy import Strategy

from coded_fl.secagg.server import DRIFT_TOLERANCE
from coded_fl.vocabulary import TrainSpec

from .composable import chain_attr
from .driver import RoundDriver
from .report import RoundReport
from .run import RunState
from .secagg_checks import check_dp, check_settings
from .secagg_interface import WrapperInterface
from .secagg_runs import RunLifecycle
from .settings import coded_secagg_settings

if TYPE_CHECKING:
    from coded_fl.dp import DistributedDP

__all__ = ["CodedSecAgg", "RoundReport"]

LOG = logging.getLogger("flwr")

#: The automatic weight bound's first value (a power of two; raised as silos ask).
AUTO_WEIGHT_START = 1024.0
#: Metric slots with ``metric_keys=None`` (one vector coordinate each): room for the metrics a
#: train function usually returns (loss, accuracy, a few more).
AUTO_METRIC_SLOTS = 8


class CodedSecAgg(RunLifecycle, WrapperInterface):
    """Straggler-tolerant secure aggregation wrapped around ``strategy``.

    Parameters
    ----------
    strategy
        Any ``flwr.serverapp.strategy.Strategy`` (FedAvg, FedProx, FedAdam, FedYogi, ...).
    num_stragglers
        s: every round completes from the first n - s uploads.
    privacy_threshold
        T: up to T silos colluding with the server learn nothing beyond the sum. Silos refuse
        T = 0 unless their node config sets ``codedfl.allow-no-privacy = true``
        (:class:`coded_fl.secagg.policy.ClientPolicy`).
    recovery_threshold
        U (T < U <= n - s): recovery replies needed to unmask; default n - s.
    num_silos
        n; default: all nodes connected once the wrapped strategy's ``min_available_nodes``
        are there.
    clip_range
        c: each entry of :math:`(w_k/W)(\\theta_k - \\theta)` is clipped to this range (times
        the round's delta scale g with ``adaptive_clip``).
    adaptive_clip
        Default True: after a round whose decoded sum says that at least ``clip_quorum``
        partitions had an entry beyond the clip range, the round is discarded and rerun at
        once with the range g c four times wider (g a power of two sent with the train
        request, up to ``max_clip_range``), at the cost of one more local training in such a
        round and a quantization step g times coarser. Fewer partitions: the round is applied
        clipped, with a warning that names the count. After a completed round in which fewer
        than ``clip_quorum`` partitions had an entry beyond a quarter of the range, the next
        round uses a range four times narrower (never below ``clip_range``). The silos report
        exact counts (``docs/protocol.md``, "Adaptive clip range"): the server learns how
        many partitions clipped, how many exceeded a quarter of the range, and how many
        entries clipped. False: clip, and warn when more than 0.1 % of entries clip.
    clip_quorum
        Partitions that must report an entry beyond the clip range before it widens (an int
        >= 1, at most K). Default: one more than the most partitions one silo holds (s + 2
        with the default codes), at most K. A silo holds s + 1 partitions and reports for each
        of them; where its group's vote does not compare it (a group of two, or a round that
        closes on exactly n - s uploads) nothing overrules those reports, so with a smaller
        quorum one silo whose training returns huge values could widen the range for every
        silo (each widening makes every later round's step four times coarser). Honest
        clipping after a large learning rate reaches most partitions and still widens. With
        T colluding silos to resist, set it above T (s + 1).
    max_clip_range
        The widest range the adaptation may reach (default ``clip_range`` x 2^16, the widest
        a silo accepts); the range used is ``clip_range`` times the largest power of two g
        with ``clip_range`` x g <= ``max_clip_range``. A finite number >= ``clip_range``.
    scale
        Quantization scale; default the finest that cannot wrap around (with headroom).
    max_weight
        W, the largest sample weight (``num-examples``) a partition may report. Default
        (None): automatic. W starts at 1,024 and a silo whose partition holds more asks for
        the power of two it needs (a typed refusal that reveals that bound, not the weight):
        the round is rerun at once with W raised, and W stays there (the server learns
        nothing else; the rerun costs one more local training in that round only).
    metric_keys
        Train metrics to aggregate securely (weighted by the sample weights). Default (None):
        every number the train function returns in its metric record (but the weight), as
        plain FedAvg aggregates them, in up to :data:`AUTO_METRIC_SLOTS` slots (the first by
        name; the round line says which were left out): each silo names the metrics it
        packed in its reply (names, never values) and the server labels the decoded sums
        with them where every silo of the sum named the same ones. A tuple of names: exactly
        those (a missing one counts 0). ``()``: none.
    code
        ``"auto"``, ``"polynomial"`` or ``"repetition"``.
    masking
        ``"auto"`` (default): ``"aligned"`` where the code is the repetition code (what
        ``code="auto"`` picks for s > 0), else ``"shares"``.
        ``"aligned"``: group-aligned masks (the repetition code only): once the silos' edge
        keys are dealt (through the first two rounds' uploads) a round takes one round trip,
        like plain FedAvg, and the server needs no recovery stage whoever straggles
        (``docs/protocol.md``, "One round trip with group-aligned masks").
        ``"shares"``: secret-shared masks, two round trips per round (any exact code).
    extra_replies, extra_wait
        Wait up to ``extra_wait`` seconds for ``extra_replies`` uploads beyond n - s, to check
        that replicas agree (1 detects, 2 names the silo).
    headroom_bits
        Bits left free above the largest true sum when ``scale`` is unset. Without extra
        replies the range check is what catches a coordinate where replicas of a partition
        disagree (different CPUs, thread counts, GPU vs CPU) when the code mixes replicas
        (``code="polynomial"``); it misses one with probability about 2^-headroom_bits, and
        more headroom also makes replicas disagree less often (a coarser quantization step,
        less precision). The default code never mixes replicas.
    max_erased_fraction
        Coordinates where replicas disagree beyond what the group vote (or the parity checks)
        settles are erased (no update there this round); a round that would erase more than
        this fraction is aborted, naming the silos located as off.
    drift_tolerance
        How far (a fraction of the clip range, per partition of a silo group) a replica may lie
        from its group's per-coordinate median and still count as agreeing: replicas drift
        apart across machines with training, and that never stops a round. A silo beyond it
        where its group's majority agrees is overruled, named and left out of the later
        rounds (``docs/protocol.md``, "Replicas that disagree"). Default 1/16; 0 asks for
        bit-identical replicas.
    dp
        Distributed differential privacy (``coded_fl.dp.DistributedDP(noise_multiplier=z,
        clip=C, delta=...)``; the ``dp`` extra), or None (default). Every partition's update
        theta_k - theta is clipped to L2 norm C (unweighted: a partition's weight would reveal
        its size), rotated and rounded at random; every silo group adds a share of Skellam
        noise inside the field, so the decoded sum carries noise of standard deviation at
        least z C that the server and any ``privacy_threshold`` colluding silos cannot
        remove, and the model moves by the noisy mean over the K partitions. Rounds that deal
        the edge keys first upload zeros (keying rounds, in the round line); the round line
        and the summary give epsilon at delta (``docs/privacy.md``). Needs the repetition
        code with aligned masks, at least T + 2 silo groups, no ``metric_keys`` and no
        ``scale`` (DP sets it); the clip range does not adapt.
    max_aborted_rounds
        Stop the run with :class:`coded_fl.errors.RunAbortedError` after this many rounds in a
        row aborted (the Flower run then ends as failed); 0: never stop.
    round_timeout, recovery_timeout, key_timeout, node_wait_timeout, evaluate_timeout
        Deadlines (seconds, finite and > 0) of the stages; nothing waits longer.
        ``evaluate_timeout=None`` (default) takes ``round_timeout``.
    poll_interval
        Seconds (finite, > 0) between two looks for replies.
    progress
        Called with a :class:`RoundReport` after every round (default: log the line).

    Raises
    ------
    ConfigurationError
        At construction, before any node is contacted, naming the setting: a count that is
        not an int in range (s, T, ``extra_replies``, ``headroom_bits`` >= 0; n, U >= 1 or
        None; T < U; ``extra_replies`` <= s), a ``clip_range`` or ``scale`` that is not a
        finite number > 0 or that leaves no quantization scale >= 1 even at the fewest silos
        the settings allow, a deadline that is not a finite number > 0, an unknown ``code``
        or ``masking``; with ``num_silos`` given, anything the protocol configuration refuses.
    """

    def __init__(
        self,
        strategy: Strategy,
        *,
        num_stragglers: int,
        privacy_threshold: int,
        recovery_threshold: int | None = None,
        num_silos: int | None = None,
        clip_range: float = 1.0,
        adaptive_clip: bool = True,
        clip_quorum: int | None = None,
        max_clip_range: float | None = None,
        scale: float | None = None,
        max_weight: float | None = None,
        metric_keys: Iterable[str] | None = None,
        code: str = "auto",
        masking: str = "auto",
        extra_replies: int = 0,
        extra_wait: float = 2.0,
        headroom_bits: int = 8,
        max_erased_fraction: float = 0.01,
        drift_tolerance: float = DRIFT_TOLERANCE,
        max_aborted_rounds: int = 3,
        round_timeout: float = 600.0,
        recovery_timeout: float = 60.0,
        key_timeout: float = 120.0,
        node_wait_timeout: float = 300.0,
        evaluate_timeout: float | None = None,
        poll_interval: float = 0.05,
        progress: Callable[[RoundReport], None] | None = None,
        dp: DistributedDP | None = None,
    ) -> None:
        self.max_delta_scale = check_settings(
            strategy,
            num_stragglers=num_stragglers,
            privacy_threshold=privacy_threshold,
            recovery_threshold=recovery_threshold,
            num_silos=num_silos,
            clip_range=clip_range,
            clip_quorum=clip_quorum,
            max_clip_range=max_clip_range,
            scale=scale,
            max_weight=max_weight,
            code=code,
            masking=masking,
            extra_replies=extra_replies,
            extra_wait=extra_wait,
            headroom_bits=headroom_bits,
            max_erased_fraction=max_erased_fraction,
            drift_tolerance=drift_tolerance,
            max_aborted_rounds=max_aborted_rounds,
            round_timeout=round_timeout,
            recovery_timeout=recovery_timeout,
            key_timeout=key_timeout,
            node_wait_timeout=node_wait_timeout,
            evaluate_timeout=evaluate_timeout,
            poll_interval=poll_interval,
        )
        if privacy_threshold == 0:
            LOG.warning(
                "[coded-fl] privacy_threshold=0: silos refuse it by default (their policy's "
                "minimum is T >= 1) unless their node config sets codedfl.allow-no-privacy = true"
            )
        check_dp(dp, metric_keys=metric_keys, scale=scale)
        self.dp = dp
        self.strategy = strategy
        self.num_stragglers = num_stragglers
        self.privacy_threshold = privacy_threshold
        self.recovery_threshold = recovery_threshold
        self.num_silos = num_silos
        self.clip_range = clip_range
        self.adaptive_clip = bool(adaptive_clip) and dp is None  # DP clips in L2
        self.clip_quorum = clip_quorum
        self.max_clip_range = clip_range * self.max_delta_scale
        self.scale = scale
        self.code = code
        self.masking = masking
        self.extra_replies = extra_replies
        self.extra_wait = float(extra_wait)
        self.headroom_bits = headroom_bits
        self.max_erased_fraction = float(max_erased_fraction)
        self.drift_tolerance = float(drift_tolerance)
        self.max_aborted_rounds = max_aborted_rounds
        self.round_timeout = float(round_timeout)
        self.recovery_timeout = float(recovery_timeout)
        self.key_timeout = float(key_timeout)
        self.node_wait_timeout = float(node_wait_timeout)
        self.evaluate_timeout = float(
            round_timeout if evaluate_timeout is None else evaluate_timeout
        )
        self.poll_interval = float(poll_interval)
        self.progress = progress or (lambda r: LOG.info(r.line()))
        self.spec = TrainSpec(
            arrays_key=chain_attr(strategy, "arrayrecord_key", "arrays"),
            config_key=chain_attr(strategy, "configrecord_key", "config"),
            weight_key=chain_attr(strategy, "weighted_by_key", "num-examples"),
            max_weight=AUTO_WEIGHT_START if max_weight is None else float(max_weight),
            metric_keys=() if metric_keys is None else tuple(metric_keys),
            metric_slots=AUTO_METRIC_SLOTS if metric_keys is None and dp is None else 0,
            auto_weight=max_weight is None,
        )
        #: the state of the latest run (made fresh by every start())
        self._run: RunState | None = None
        self._driver: RoundDriver | None = None
        self._check_protocol()

    # ------------------------------------------------------------------ Strategy interface
    @classmethod
    def from_run_config(
        cls, strategy: Strategy, run_config: Mapping[str, Any], **overrides: Any
    ) -> CodedSecAgg:
        """The wrapper with the settings a Flower run config holds (its keys in
        :data:`strategies.settings.RUN_CONFIG`: ``num-stragglers``, ``privacy-threshold``,
        ``masking``, ``round-timeout``, ...; a key it lacks keeps the default).

        ::

            strategy = CodedSecAgg.from_run_config(FedAvg(), context.run_config, progress=say)

        Parameters
        ----------
        strategy
            The wrapped Flower strategy.
        run_config
            ``context.run_config`` (or any mapping of its keys); keys of the app's own are
            ignored.
        **overrides
            Keywords of the constructor that take precedence (e.g. ``progress``).

        Returns
        -------
        CodedSecAgg

        Raises
        ------
        ConfigurationError
            A run-config value of the wrong type (naming its key), or any setting the
            constructor refuses.
        """
        return cls(strategy, **{**coded_secagg_settings(run_config), **overrides})
