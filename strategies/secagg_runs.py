"""The runs of :class:`strategies.CodedSecAgg`: starting one, and what the latest one left.

:class:`RunLifecycle` is the part of ``CodedSecAgg`` that starts a run (``start``, or
``prepare`` where the legacy fit workflow drives the rounds itself): a fresh
:class:`strategies.run.RunState` and :class:`strategies.driver.RoundDriver` per run, so two runs
never mix; and reads the latest run's state afterwards (its reports, late uploads, key
exchanges, ``settle`` for the replies still expected).
"""

from __future__ import annotations

import dataclasses
import logging
import math
import secrets
from collections.abc import Callable, Sequence

from flwr.app import ArrayRecord, ConfigRecord, MetricRecord
from flwr.serverapp import Grid
from flwr.serverapp.strategy import Result
from flwr.serverapp.strategy.strategy_utils import log_strategy_start_info

from coded_fl.errors import ConfigurationError
from coded_fl.layout import UpdateLayout, element_count, flatten, integer_names
from coded_fl.secagg import ServerMachine

from .composable import calibrate_noise
from .driver import RoundDriver
from .report import RoundReport, waiting_estimate
from .run import RunState
from .secagg_checks import is_real
from .secagg_config import ProtocolView

__all__ = ["RunLifecycle"]

LOG = logging.getLogger("flwr")


class RunLifecycle(ProtocolView):
    """Starting the runs of :class:`strategies.CodedSecAgg`, and the latest run's state (a part
    of it: its constructor sets the attributes below and the settings'
    :class:`strategies.secagg_config.ProtocolView` lists).

    Attributes
    ----------
    _run
        The state of the latest run (None before a run).
    _driver
        The latest run's round driver (None before a run).
    """

    _run: RunState | None
    _driver: RoundDriver | None

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
        if not is_real(timeout) or math.isnan(timeout) or timeout <= 0:
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
        num_silos = self.protocol.num_silos
        if num_silos is not None and len(nodes) != num_silos:
            raise ConfigurationError(
                f"silo_nodes lists {len(nodes)} nodes but num_silos={num_silos}: give one "
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
        if self.protocol.dp is not None and ints:
            raise ConfigurationError(
                f"dp with integer model arrays {list(ints)}: they are summed exactly, without "
                "clipping or noise; use a model without integer buffers (GroupNorm instead of "
                "BatchNorm's num_batches_tracked, or drop it from the ArrayRecord)"
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
                max_erased_fraction=self.protocol.max_erased_fraction,
                drift_tolerance=self.protocol.drift_tolerance,
                # with DP the weight coordinate holds no weight (every partition counts 1)
                weight_coordinate=lay.weight_index if cfg.dp is None else None,
            ),
            node_of=dict(enumerate(nodes)),
            limit=float(timeout),
            weight_bound=self.spec.max_weight,
        )
        self._run = state
        calibrate_noise(self.strategy, cfg.gradient_code.K)
        self._driver = RoundDriver(self._settings(cfg.gradient_code), grid, state)
        return self._driver

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
        return waiting_estimate(self.reports, self.late_train, round_timeout=self.timeouts.round)
