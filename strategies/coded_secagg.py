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

Length: about 300 lines of code; the rest documents the constructor's settings (the user's
reference, one public surface kept in one place) and ``start``/``prepare``.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import secrets
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord
from flwr.serverapp import Grid
from flwr.serverapp.strategy import Result, Strategy
from flwr.serverapp.strategy.strategy_utils import log_strategy_start_info

from coded_fl.codes import GradientCode
from coded_fl.errors import CodedFLError, ConfigurationError
from coded_fl.layout import UpdateLayout, element_count, flatten, integer_names
from coded_fl.quantize import QuantizationConfig, check_clip_range, check_positive_real
from coded_fl.secagg import ProtocolConfig, ServerMachine
from coded_fl.secagg.policy import MIN_SCALE
from coded_fl.secagg.server import DRIFT_TOLERANCE
from coded_fl.vocabulary import MAX_DELTA_SCALE, TrainSpec

from .composable import (
    calibrate_noise,
    chain_attr,
    check_composable,
    check_dp_sampling,
    legacy_advice,
    sampled_fraction,
)
from .driver import RoundDriver
from .report import RoundReport, waiting_estimate
from .run import RunSettings, RunState
from .settings import coded_secagg_settings

__all__ = ["CodedSecAgg", "RoundReport"]

LOG = logging.getLogger("flwr")

#: The automatic weight bound's first value (a power of two; raised as silos ask).
AUTO_WEIGHT_START = 1024.0
#: Metric slots with ``metric_keys=None`` (one vector coordinate each): room for the metrics a
#: train function usually returns (loss, accuracy, a few more).
AUTO_METRIC_SLOTS = 8

#: The gradient codes and maskings a run may ask for (ProtocolConfig decides which fit n, s).
_CODES = ("auto", "plain", "polynomial", "repetition")
_MASKINGS = ("auto", "shares", "aligned")


class CodedSecAgg(Strategy):
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
    ) -> None:
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
        if not _is_real(drift_tolerance) or not 0 <= drift_tolerance <= 1:
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
        if not _is_real(max_erased_fraction) or not 0 <= max_erased_fraction < 1:
            raise ConfigurationError(
                f"max_erased_fraction must be a number in [0, 1), got {max_erased_fraction!r}"
            )
        if max_weight is not None and not (
            _is_real(max_weight) and math.isfinite(max_weight) and max_weight > 0
        ):
            raise ConfigurationError(
                f"max_weight must be a finite number > 0 or None (automatic), got {max_weight!r}"
            )
        check_clip_range(clip_range)
        self.max_delta_scale = _max_delta_scale(clip_range, max_clip_range)
        if clip_quorum is not None and (
            isinstance(clip_quorum, bool) or not isinstance(clip_quorum, int) or clip_quorum < 1
        ):
            raise ConfigurationError(
                f"clip_quorum must be an int >= 1 (partitions) or None (automatic), got "
                f"{clip_quorum!r}"
            )
        if scale is not None:
            check_positive_real("scale", scale)
        if code not in _CODES:
            raise ConfigurationError(f"code must be one of {', '.join(_CODES)}, got {code!r}")
        if masking not in _MASKINGS:
            raise ConfigurationError(
                f"masking must be one of {', '.join(_MASKINGS)}, got {masking!r}"
            )
        if privacy_threshold == 0:
            LOG.warning(
                "[coded-fl] privacy_threshold=0: silos refuse it by default (their policy's "
                "minimum is T >= 1) unless their node config sets codedfl.allow-no-privacy = true"
            )
        self.strategy = strategy
        self.num_stragglers = num_stragglers
        self.privacy_threshold = privacy_threshold
        self.recovery_threshold = recovery_threshold
        self.num_silos = num_silos
        self.clip_range = clip_range
        self.adaptive_clip = bool(adaptive_clip)
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
            metric_slots=AUTO_METRIC_SLOTS if metric_keys is None else 0,
            auto_weight=max_weight is None,
        )
        #: the state of the latest run (made fresh by every start())
        self._run: RunState | None = None
        self._driver: RoundDriver | None = None
        if num_silos is not None:  # validate the settings now, before any node is contacted
            try:
                checked = self._config(num_silos, vector_length=1, run_id="check")
            except ConfigurationError as exc:
                raise self._too_few(num_silos) or exc from None
            quant = checked.quantization
            self._quorum(checked.gradient_code)
        else:  # the quantization at the fewest silos the settings allow (K = n; more is coarser)
            k = self.min_silos()
            if scale is None:
                quant = QuantizationConfig.for_summands(
                    k, clip_range=clip_range, headroom_bits=headroom_bits
                )
            else:
                quant = QuantizationConfig(clip_range=clip_range, scale=scale, num_summands=k)
        if quant.scale < MIN_SCALE:
            LOG.warning(
                "[coded-fl] the quantization scale is %g (clip_range=%s), below the %g that "
                "silos accept by default (node config codedfl.min-scale): lower clip_range "
                "or headroom_bits, or the silos must set codedfl.allow-no-privacy = true",
                quant.scale,
                clip_range,
                MIN_SCALE,
            )

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

    def summary(self) -> None:
        """Log the coded-fl settings, then the wrapped strategy's summary."""
        LOG.info(
            "\t├──> CodedSecAgg: s=%s T=%s U=%s n=%s clip_range=%s code=%s max_weight=%s",
            self.num_stragglers,
            self.privacy_threshold,
            self.recovery_threshold or "n-s",
            self.num_silos or "all",
            self.clip_range,
            self.code,
            "auto" if self.spec.auto_weight else self.spec.max_weight,
        )
        self.strategy.summary()

    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """The wrapped strategy's train messages (``start`` drives the rounds itself).

        Parameters
        ----------
        server_round
            The Flower round.
        arrays
            The current model.
        config
            The train config.
        grid
            The Flower grid.
        """
        raise CodedFLError(
            "CodedSecAgg runs its own round loop (it must act on the first replies): call "
            "strategy.start(grid=..., initial_arrays=..., num_rounds=...) instead of driving "
            "configure_train/aggregate_train yourself"
        )

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """The wrapped strategy's aggregate (``start`` hands it the decoded average).

        Parameters
        ----------
        server_round
            The Flower round.
        replies
            The replies.
        """
        return self.strategy.aggregate_train(server_round, replies)

    def configure_evaluate(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """The wrapped strategy's evaluation messages, passed through.

        Parameters
        ----------
        server_round
            The Flower round.
        arrays
            The current model.
        config
            The evaluate config.
        grid
            The Flower grid.
        """
        return self.strategy.configure_evaluate(server_round, arrays, config, grid)

    def aggregate_evaluate(
        self, server_round: int, replies: Iterable[Message]
    ) -> MetricRecord | None:
        """The wrapped strategy's evaluation aggregate, passed through.

        Parameters
        ----------
        server_round
            The Flower round.
        replies
            The evaluation replies.
        """
        return self.strategy.aggregate_evaluate(server_round, replies)

    # ------------------------------------------------------------------ configuration
    def _config(
        self, n: int, *, vector_length: int, run_id: str, session: str = ""
    ) -> ProtocolConfig:
        return ProtocolConfig(
            num_silos=n,
            num_stragglers=self.num_stragglers,
            privacy_threshold=self.privacy_threshold,
            recovery_threshold=self.recovery_threshold,
            vector_length=vector_length,
            clip_range=self.clip_range,
            scale=self.scale,
            code=self.code,
            masking=self.masking,
            extra_replies=self.extra_replies,
            headroom_bits=self.headroom_bits,
            run_id=run_id,
            session=session,
        )

    def _wait_for_nodes(self, grid: Grid) -> list[int]:
        want = self.num_silos or int(chain_attr(self.strategy, "min_available_nodes", 2))
        deadline = time.monotonic() + self.node_wait_timeout
        while True:
            nodes = sorted(grid.get_node_ids())
            if len(nodes) >= want:
                return nodes[: self.num_silos] if self.num_silos else nodes
            if time.monotonic() >= deadline:
                raise ConfigurationError(
                    f"only {len(nodes)} nodes connected after {self.node_wait_timeout:.0f}s, "
                    f"num_silos={want} are needed: start more SuperNodes (or simulation "
                    "nodes, options.num-supernodes) or lower num_silos"
                )
            LOG.info("[coded-fl] waiting for nodes: %d of %d connected", len(nodes), want)
            time.sleep(min(1.0, max(0.05, deadline - time.monotonic())))

    def gradient_code(self, n: int) -> GradientCode:
        """The gradient code the settings give for ``n`` silos (its support decides which
        partitions each silo must hold; a placement derives from it).

        Parameters
        ----------
        n
            The number of silos.

        Returns
        -------
        GradientCode
        """
        return self._config(n, vector_length=1, run_id="placement").gradient_code

    def min_silos(self) -> int:
        """The fewest silos the settings work with: T < U <= n - s, so n >= s + max(U, T + 1).

        Returns
        -------
        int
        """
        s, t = self.num_stragglers, self.privacy_threshold
        u = self.recovery_threshold
        return s + max(t + 1, u or 0)

    def _too_few(self, n: int) -> ConfigurationError | None:
        """The error for a run with fewer silos than the settings need (None if not the case)."""
        need = self.min_silos()
        if n >= need:
            return None
        u = f", recovery_threshold={self.recovery_threshold}" if self.recovery_threshold else ""
        return ConfigurationError(
            f"{n} silos (nodes) are connected, but num_stragglers={self.num_stragglers} and "
            f"privacy_threshold={self.privacy_threshold}{u} need at least {need} "
            "(n >= s + max(U, T + 1)): start more SuperNodes (in a simulation: "
            f'--federation-config "num_supernodes={need}"), or lower num_stragglers / '
            "privacy_threshold"
        )

    def _check_inner(self, n: int) -> None:
        inner = self.strategy
        for attr in ("min_available_nodes", "min_train_nodes"):
            v = chain_attr(inner, attr, None)
            if isinstance(v, int) and v > n:
                raise ConfigurationError(
                    f"the wrapped strategy's {attr}={v} exceeds the {n} silos: lower it to <= {n}"
                )
        sampled = sampled_fraction(inner)
        if sampled is not None:  # refused at construction under a DP wrapper
            LOG.warning(
                "[coded-fl] %s=%s is ignored: every silo trains its "
                "partitions in every round (gradient coding needs all of them)",
                *sampled,
            )

    # ------------------------------------------------------------------ the run
    def start(
        self,
        grid: Grid,
        initial_arrays: ArrayRecord,
        num_rounds: int = 3,
        timeout: float = 3600,
        train_config: ConfigRecord | None = None,
        evaluate_config: ConfigRecord | None = None,
        evaluate_fn: Callable[[int, ArrayRecord], MetricRecord | None] | None = None,
        silo_nodes: Sequence[int] | None = None,
        before_round: Callable[[int], ConfigRecord | None] | None = None,
    ) -> Result:
        """Run ``num_rounds`` rounds of coded secure aggregation (see the module docstring).

        Every call is a new run with its own state (keys, reports, estimates): a second
        ``start`` never mixes with the first.

        Parameters
        ----------
        grid
            The Flower grid.
        initial_arrays
            The initial model.
        num_rounds
            Rounds to run.
        timeout
            Caps every stage deadline (as ``Strategy.start``'s timeout caps each wait for
            replies); the stage deadlines themselves are the constructor's.
        train_config, evaluate_config
            Passed to the wrapped strategy's ``configure_train`` / ``configure_evaluate``.
        evaluate_fn
            Server-side evaluation, called with (round, arrays) after every round and before
            the first.
        silo_nodes
            The Flower node of each silo, silo i first at index i (default: the connected
            nodes in sorted order). A placement by coded shuffling
            (:class:`strategies.placement.ShuffledTraining`) passes the nodes its shuffle
            members answered from, so that silo i of the code is the member that holds
            silo i's partitions.
        before_round
            Called with r before round r's train requests (a reshuffle of the data between
            rounds); the entries it returns are added to that round's train config.

        Returns
        -------
        Result
            Flower's result of the run: the final arrays and the metrics of every round.

        Raises
        ------
        ConfigurationError
            ``num_rounds`` not an int >= 1 or ``timeout`` not > 0 (refused before any message
            is sent), too few nodes, settings that cannot work with them, or a key exchange
            that leaves too few silos with keys.
        """
        if isinstance(num_rounds, bool) or not isinstance(num_rounds, int) or num_rounds < 1:
            raise ConfigurationError(
                f"num_rounds must be an int >= 1, got {num_rounds!r}: pass the number of rounds "
                "to run, e.g. num_rounds=3 (nothing was sent to any silo)"
            )
        if not _is_real(timeout) or math.isnan(timeout) or timeout <= 0:
            raise ConfigurationError(f"timeout must be a number of seconds > 0, got {timeout!r}")
        LOG.info("Starting %s strategy:", type(self).__name__)
        log_strategy_start_info(num_rounds, initial_arrays, train_config, evaluate_config)
        self.summary()
        LOG.info("")
        train_config = ConfigRecord() if train_config is None else train_config
        evaluate_config = ConfigRecord() if evaluate_config is None else evaluate_config
        driver = self.prepare(grid, initial_arrays, timeout=timeout, silo_nodes=silo_nodes)
        return driver.run(
            initial_arrays, num_rounds, train_config, evaluate_config, evaluate_fn, before_round
        )

    def prepare(
        self,
        grid: Grid,
        initial_arrays: ArrayRecord,
        *,
        timeout: float,
        silo_nodes: Sequence[int] | None = None,
    ) -> RoundDriver:
        """A new run's state and its round driver, before any key exchange (what ``start``
        does before its first round; the legacy fit workflow drives the rounds itself).

        Parameters
        ----------
        grid
            The Flower grid.
        initial_arrays
            The initial model (its size sets the protocol's vector length).
        timeout
            Caps every stage deadline.
        silo_nodes
            The node of every silo, in silo order (default: the connected nodes).

        Returns
        -------
        RoundDriver

        Raises
        ------
        ConfigurationError
            Too few nodes, or settings that cannot work with them.
        """
        self._run = self._driver = None
        nodes = self._wait_for_nodes(grid) if silo_nodes is None else list(silo_nodes)
        if self.num_silos is not None and len(nodes) != self.num_silos:
            raise ConfigurationError(
                f"silo_nodes lists {len(nodes)} nodes but num_silos={self.num_silos}: give one "
                "node per silo"
            )
        n = len(nodes)
        self._check_inner(n)
        # integer arrays (BatchNorm counters) are summed exactly, apart from the float model
        ints = integer_names(initial_arrays)
        lay = UpdateLayout(
            model_size=flatten(initial_arrays, integers=ints).numel(),
            metric_keys=self.spec.packed_metrics,
            integer_names=ints,
            integer_size=element_count(initial_arrays, ints),
        )
        run_id = f"flwr-run-{getattr(grid.run, 'run_id', 0)}"
        # a fresh session per start(): silos make new keys and restart their round counter
        try:
            cfg = self._config(
                n, vector_length=lay.length, run_id=run_id, session=secrets.token_hex(8)
            )
        except ConfigurationError as exc:
            raise self._too_few(n) or exc from None
        # the clip counts travel as multiples of a unit fixed by the quantization scale
        lay = dataclasses.replace(lay, scale=cfg.quantization.scale)
        LOG.info("[coded-fl] %s", cfg.describe())
        LOG.info("[coded-fl] training seeds and rounding keys derive from %r", cfg.seed_id)
        LOG.info(
            "[coded-fl] partitions per silo: %s",
            {i: list(cfg.gradient_code.support(i)) for i in range(min(n, 12))},
        )
        state = RunState(
            config=cfg,
            layout=lay,
            run_id=cfg.seed_id,
            machine=ServerMachine(
                cfg,
                max_erased_fraction=self.max_erased_fraction,
                drift_tolerance=self.drift_tolerance,
                weight_coordinate=lay.weight_index,
            ),
            node_of=dict(enumerate(nodes)),
            limit=float(timeout),
            weight_bound=self.spec.max_weight,
        )
        self._run = state
        calibrate_noise(self.strategy, cfg.gradient_code.K)
        self._driver = RoundDriver(self._settings(cfg.gradient_code), grid, state)
        return self._driver

    def _quorum(self, code: GradientCode) -> int:
        """The clip quorum for ``code``: the setting, or one more than the most partitions
        one silo holds (at most K)."""
        K = code.K
        if self.clip_quorum is None:
            held = max(len(code.support(i)) for i in range(code.n))
            return min(K, held + 1)
        if self.clip_quorum > K:
            raise ConfigurationError(
                f"clip_quorum={self.clip_quorum} exceeds the K={K} partitions: the clip range "
                f"could never widen; set clip_quorum <= {K} (or None: automatic)"
            )
        return self.clip_quorum

    def _settings(self, code: GradientCode) -> RunSettings:
        return RunSettings(
            clip_quorum=self._quorum(code),
            max_delta_scale=self.max_delta_scale,
            strategy=self.strategy,
            spec=self.spec,
            extra_wait=self.extra_wait,
            round_timeout=self.round_timeout,
            recovery_timeout=self.recovery_timeout,
            key_timeout=self.key_timeout,
            evaluate_timeout=self.evaluate_timeout,
            poll_interval=self.poll_interval,
            progress=self.progress,
            adaptive_clip=self.adaptive_clip,
            max_aborted_rounds=self.max_aborted_rounds,
        )

    # ------------------------------------------------------------------ the latest run
    def settle(self, timeout: float) -> list[int]:
        """Wait, at most ``timeout`` seconds, for the replies the latest run still expects
        (stragglers' late uploads): afterwards no silo is still working on a message of this
        run, unless it is listed.

        A step between rounds that must not run beside a late message can call it first: in
        Flower's simulation engine two messages of one node may run at once, and the one that
        ends last writes the node's context back over the other's
        (``ShuffledTraining(settle_timeout=)`` does, when asked).

        Parameters
        ----------
        timeout
            The longest wait, in seconds.

        Returns
        -------
        list of int
            Nodes whose replies still had not come (empty before any run).
        """
        if self._driver is None:
            return []
        self._driver.exchange.drain(float(timeout))
        return self._driver.exchange.outstanding()

    @property
    def run_id(self) -> str | None:
        """The public id the latest run's training seeds and rounding keys derive from (Flower
        run and session; None before a run): a comparison run can reuse it."""
        return None if self._run is None else self._run.run_id

    @property
    def reports(self) -> list[RoundReport]:
        """The latest run's round reports."""
        return [] if self._run is None else self._run.reports

    @property
    def late_train(self) -> dict[int, list[float]]:
        """Round -> seconds at which the latest run's late uploads came (those in before the
        run ended: :meth:`settle` waits for the rest)."""
        return {} if self._run is None else self._run.late_train

    @property
    def key_seconds(self) -> float:
        """Seconds the latest run's first key exchange took (0.0 before a run)."""
        return 0.0 if self._run is None else self._run.key_seconds

    @property
    def key_exchanges(self) -> list[tuple[int, tuple[int, ...]]]:
        """(before round, silos asked) of every key exchange of the latest run: (1, all) once,
        then one entry per rekey of restarted or replaced silos."""
        return [] if self._run is None else self._run.key_exchanges

    def waiting_estimate(self) -> tuple[float, float]:
        """(seconds the latest run's rounds took, seconds they would have taken waiting for
        every silo); see :func:`strategies.report.waiting_estimate`. A run ends without
        waiting for its last round's stragglers: call :meth:`settle` first to time-stamp
        them, or each counts the round deadline."""
        return waiting_estimate(self.reports, self.late_train, round_timeout=self.round_timeout)


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
        _is_real(max_clip_range)
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


def _is_real(value: object) -> bool:
    """Whether ``value`` is an int or a float (not a bool)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _check_real(name: str, value: object, *, least: float, strict: bool) -> None:
    """Refuse ``value`` unless it is a finite number above ``least`` (or equal, if not strict)."""
    if not (
        _is_real(value)
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
