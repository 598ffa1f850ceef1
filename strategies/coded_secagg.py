"""``CodedSecAgg``: coded secure aggregation around any Flower strategy.

::

    protocol = ProtocolSettings(num_stragglers=2, privacy_threshold=2)
    strategy = CodedSecAgg(FedAvg(), protocol, Timeouts(round=120.0))
    # or the flat shorthand, one keyword per field:
    strategy = CodedSecAgg(FedAvg(), num_stragglers=2, privacy_threshold=2, round_timeout=120)
    result = strategy.start(grid=grid, initial_arrays=arrays, num_rounds=10)

The wrapper runs the round loop itself (``Strategy.start`` waits for every reply; this one never
waits for the slowest s silos): keys once per run, then per round a train request to every
silo, the first max(n-s, U) uploads, a recovery request to those silos, the exact sum. The
decoded weighted average is handed to the wrapped strategy's ``aggregate_train`` as if one silo
had sent it, so server-side optimisers (FedAdam, FedYogi, FedAvgM, ...) work unchanged; its
``configure_train`` still makes the train config (FedProx's ``proximal-mu`` etc.) and evaluation
is the wrapped strategy's, passed through. A round that cannot complete leaves the model as it
was and says why.

The settings are two objects, :class:`strategies.ProtocolSettings` and
:class:`strategies.Timeouts` (:mod:`strategies.settings`), which check themselves when made.
The class is put together from its parts: the checks of the wrapped strategy
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

from coded_fl.vocabulary import TrainSpec

from .composable import chain_attr
from .driver import RoundDriver
from .report import RoundReport
from .run import RunState
from .secagg_checks import check_dp, check_strategy
from .secagg_interface import WrapperInterface
from .secagg_runs import RunLifecycle
from .settings import FlatSettings, ProtocolSettings, Timeouts, resolve, split_keywords

if TYPE_CHECKING:
    from typing_extensions import Unpack

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
    protocol
        The protocol and aggregation settings (:class:`strategies.ProtocolSettings`: s, T,
        clip range, code, masking, DP, ...; every field and its default is described there).
        None: made from the flat keywords, which must then give ``num_stragglers`` and
        ``privacy_threshold``.
    timeouts
        The stages' deadlines (:class:`strategies.Timeouts`); None: the defaults.
    metric_keys
        Train metrics to aggregate securely (weighted by the sample weights). Default (None):
        every number the train function returns in its metric record (but the weight), as
        plain FedAvg aggregates them, in up to :data:`AUTO_METRIC_SLOTS` slots (the first by
        name; the round line says which were left out): each silo names the metrics it
        packed in its reply (names, never values) and the server labels the decoded sums
        with them where every silo of the sum named the same ones. A tuple of names: exactly
        those (a missing one counts 0). ``()``: none. None with ``dp``.
    progress
        Called with a :class:`RoundReport` after every round (default: log the line).
    **settings
        The flat shorthand: any field of :class:`strategies.ProtocolSettings` by its name, and
        of :class:`strategies.Timeouts` as ``round_timeout``, ``recovery_timeout``,
        ``key_timeout``, ``node_wait_timeout``, ``evaluate_timeout``, ``poll_interval``
        (:data:`strategies.settings.KEYWORDS`). Each overrides that field of the object given:
        ``CodedSecAgg(FedAvg(), num_stragglers=1, privacy_threshold=1, round_timeout=30)``.

    Attributes
    ----------
    protocol, timeouts
        The settings objects in force (frozen: the flat keywords are applied to them here,
        and a run reads them when it starts).

    Raises
    ------
    ConfigurationError
        At construction, before any node is contacted, naming the setting: anything
        :class:`strategies.ProtocolSettings` or :class:`strategies.Timeouts` refuses, a
        strategy that cannot be wrapped, ``metric_keys`` with ``dp``, a ``clip_range`` that
        leaves no quantization scale >= 1 even at the fewest silos the settings allow; with
        ``num_silos`` given, anything the protocol configuration refuses.
        :class:`coded_fl.errors.UnknownSettingError` (also a ``TypeError``): a keyword that
        is no setting.
    """

    def __init__(
        self,
        strategy: Strategy,
        protocol: ProtocolSettings | None = None,
        timeouts: Timeouts | None = None,
        *,
        metric_keys: Iterable[str] | None = None,
        progress: Callable[[RoundReport], None] | None = None,
        **settings: Unpack[FlatSettings],
    ) -> None:
        check_strategy(strategy)
        self.protocol, self.timeouts = resolve(protocol, timeouts, settings)
        p = self.protocol
        if p.privacy_threshold == 0:
            LOG.warning(
                "[coded-fl] privacy_threshold=0: silos refuse it by default (their policy's "
                "minimum is T >= 1) unless their node config sets codedfl.allow-no-privacy = true"
            )
        check_dp(p.dp, metric_keys=metric_keys, scale=p.scale)
        self.strategy = strategy
        self.progress = progress or (lambda r: LOG.info(r.line()))
        self.spec = TrainSpec(
            arrays_key=chain_attr(strategy, "arrayrecord_key", "arrays"),
            config_key=chain_attr(strategy, "configrecord_key", "config"),
            weight_key=chain_attr(strategy, "weighted_by_key", "num-examples"),
            max_weight=AUTO_WEIGHT_START if p.max_weight is None else float(p.max_weight),
            metric_keys=() if metric_keys is None else tuple(metric_keys),
            metric_slots=AUTO_METRIC_SLOTS if metric_keys is None and p.dp is None else 0,
            auto_weight=p.max_weight is None,
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
        ``masking``, ``round-timeout``, ...; a key it lacks keeps the default), read by
        :meth:`ProtocolSettings.from_run_config <strategies.ProtocolSettings.from_run_config>`
        and :meth:`Timeouts.from_run_config <strategies.Timeouts.from_run_config>`.

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
            Keywords of the constructor that take precedence (``progress``, ``metric_keys``,
            or a flat setting such as ``masking``).

        Returns
        -------
        CodedSecAgg

        Raises
        ------
        ConfigurationError
            A run-config value of the wrong type (naming its key), or any setting the
            constructor refuses.
        """
        own = {k: overrides.pop(k) for k in ("metric_keys", "progress") if k in overrides}
        fields, deadlines = split_keywords(overrides, allowed=("metric_keys", "progress"))
        return cls(
            strategy,
            ProtocolSettings.from_run_config(run_config, **fields),
            Timeouts.from_run_config(run_config, **deadlines),
            **own,
        )
