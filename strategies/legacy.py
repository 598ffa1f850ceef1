"""Coded secure aggregation for legacy Flower projects (``flwr.server.strategy``, NumPyClient).

A thin adapter, not a second protocol: :class:`LegacyStrategy` presents a legacy strategy
(FedAvg, FedProx, FedAdam, ... from ``flwr.server.strategy``) as a Message-API strategy, and
``CodedSecAgg`` drives it with its one round driver. Two ways in, as for Flower's SecAgg+:

``DefaultWorkflow`` with a ``LegacyContext`` (where ``SecAggPlusWorkflow`` plugs in)::

    workflow = DefaultWorkflow(
        fit_workflow=CodedSecAggWorkflow(num_stragglers=1, privacy_threshold=1)
    )
    workflow(grid, LegacyContext(context, config=ServerConfig(3), strategy=FedAvg()))

``ServerApp(server_fn=...)``: the same workflow around the project's own ``server_fn``::

    app = coded_server_app(server_fn, num_stragglers=1, privacy_threshold=1)

Per round the workflow runs the coded round (first n - s uploads, never the stragglers) and the
legacy strategy's ``aggregate_fit`` receives one ``FitRes``: the decoded weighted average with
``num_examples`` = the sum's weight, so weighted averaging returns the exact average and
server-side optimisers (FedAdam, FedYogi, FedAvgM) step from it. Initial parameters,
centralized evaluation (``strategy.evaluate``) and federated evaluation stay Flower's
``DefaultWorkflow`` steps. On the silos the same ``coded_secagg_mod`` runs (``ClientApp(
client_fn=..., mods=[coded_secagg_mod])``); it reads the ``fitins.*``/``fitres.*`` records.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, cast

from flwr.app import ConfigRecord, Context
from flwr.server import LegacyContext, ServerAppComponents
from flwr.server import strategy as legacy
from flwr.server.workflow import DefaultWorkflow
from flwr.server.workflow.constant import MAIN_CONFIGS_RECORD, MAIN_PARAMS_RECORD, Key
from flwr.serverapp import Grid, ServerApp

from coded_fl.errors import ConfigurationError

from .coded_secagg import CodedSecAgg
from .driver import RoundDriver
from .legacy_strategy import LegacyStrategy, _named
from .settings import ProtocolSettings, Timeouts

__all__ = ["CodedSecAggWorkflow", "LegacyStrategy", "coded_server_app"]

LOG = logging.getLogger("flwr")


class CodedSecAggWorkflow:
    """Fit workflow for Flower's ``DefaultWorkflow``: coded secure aggregation per round.

    ``DefaultWorkflow(fit_workflow=CodedSecAggWorkflow(num_stragglers=1, privacy_threshold=1))``
    replaces the default fit round (which waits for every client) by a coded round on the
    ``LegacyContext``'s strategy, which must be a legacy ``flwr.server.strategy`` strategy that
    averages. Keys are agreed in round 1; the global model in the context is replaced by the
    strategy's aggregate of each completed round (a round that cannot complete keeps it).

    Parameters
    ----------
    protocol, timeouts
        The settings objects, as for :class:`CodedSecAgg` (:class:`strategies.ProtocolSettings`,
        :class:`strategies.Timeouts`).
    timeout
        Caps every stage deadline of the run (seconds).
    **settings
        Any other :class:`CodedSecAgg` keyword: the flat settings (``num_stragglers``,
        ``privacy_threshold``, ``num_silos``, ``clip_range``, ``max_weight``, ``code``,
        ``round_timeout``, ...; they override the objects' fields), ``metric_keys``,
        ``progress``.

    Raises
    ------
    ConfigurationError
        Settings that no run can use (checked now), and at the first round a strategy that
        needs individual results (:class:`strategies.composable.NotComposableError`).
    """

    def __init__(
        self,
        *,
        protocol: ProtocolSettings | None = None,
        timeouts: Timeouts | None = None,
        timeout: float = 3600.0,
        **settings: Any,
    ) -> None:
        # settings checked now, and kept as the two objects they give
        checked = CodedSecAgg(LegacyStrategy(legacy.FedAvg()), protocol, timeouts, **settings)
        self.protocol, self.timeouts = checked.protocol, checked.timeouts
        self.options: dict[str, Any] = {
            k: settings[k] for k in ("metric_keys", "progress") if k in settings
        }
        self.timeout = float(timeout)
        self.coded: CodedSecAgg | None = None
        self._driver: RoundDriver | None = None
        self._context: Context | None = None

    def __call__(self, grid: Grid, context: Context) -> None:
        """Run one fit round (the round number is in the context, as Flower's workflows read
        it).

        Parameters
        ----------
        grid
            The Flower grid.
        context
            The ``LegacyContext`` of ``DefaultWorkflow``: its strategy, global model (replaced
            by the round's aggregate) and history.

        Raises
        ------
        TypeError
            If ``context`` is not a ``LegacyContext``.
        """
        if not isinstance(context, LegacyContext):
            raise TypeError(f"Expect a LegacyContext, but get {type(context).__name__}.")
        cfg = context.state.config_records[MAIN_CONFIGS_RECORD]
        r = int(cast(int, cfg[Key.CURRENT_ROUND]))
        arrays = _named(context.state.array_records[MAIN_PARAMS_RECORD])
        if self._driver is None or self._context is not context or r == 1:
            self.coded = CodedSecAgg(
                LegacyStrategy(context.strategy), self.protocol, self.timeouts, **self.options
            )
            LOG.info("Starting %s (legacy workflow):", type(self.coded).__name__)
            self.coded.summary()
            self._driver = self.coded.prepare(grid, arrays, timeout=self.timeout)
            self._context = context
            self._driver.membership.key_exchange(before_round=r)
        driver, st = self._driver, self._driver.state
        report, _ = driver.fit_round(r, arrays, ConfigRecord())
        if report.ok and report.arrays is not None:
            context.state.array_records[MAIN_PARAMS_RECORD] = report.arrays
            context.history.add_metrics_distributed_fit(
                server_round=r,
                metrics=dict(report.train_metrics or {}),  # type: ignore[arg-type]
            )
        report.errors.update(st.late_errors.pop(r, {}))
        st.reports.append(report)
        driver.settings.progress(report)
        if r >= context.config.num_rounds:
            driver.exchange.drain(min(30.0, driver.settings.round_timeout))


def coded_server_app(
    server_fn: Callable[[Context], ServerAppComponents],
    *,
    protocol: ProtocolSettings | None = None,
    timeouts: Timeouts | None = None,
    **settings: Any,
) -> ServerApp:
    """``ServerApp(server_fn=server_fn)`` with coded secure aggregation in every fit round.

    ::

        app = coded_server_app(server_fn, num_stragglers=1, privacy_threshold=1)

    ``server_fn`` is the project's own, unchanged: its ``ServerAppComponents`` give the legacy
    strategy, the ``ServerConfig`` (rounds) and the client manager; the rounds run as
    ``DefaultWorkflow(fit_workflow=CodedSecAggWorkflow(...))``.

    Parameters
    ----------
    server_fn
        The project's ``server_fn``.
    protocol, timeouts, **settings
        As for :class:`CodedSecAggWorkflow` (``num_stragglers=``, ``privacy_threshold=``, ...
        as flat keywords, or ``protocol=ProtocolSettings(...)``).

    Returns
    -------
    ServerApp

    Raises
    ------
    ConfigurationError
        When the app runs: ``server_fn`` returned a custom ``Server`` (its own round loop
        cannot be driven), or the strategy cannot compose.
    """
    checked = CodedSecAggWorkflow(protocol=protocol, timeouts=timeouts, **settings)
    workflow_settings: dict[str, Any] = dict(  # settings checked when the app is made
        protocol=checked.protocol,
        timeouts=checked.timeouts,
        timeout=checked.timeout,
        **checked.options,
    )
    app = ServerApp()

    @app.main()
    def main(grid: Grid, context: Context) -> None:
        components = server_fn(context)
        if components.server is not None:
            raise ConfigurationError(
                "server_fn returned a custom Server, whose own round loop waits for every "
                "client: return ServerAppComponents(strategy=..., config=...) instead"
            )
        legacy_context = LegacyContext(
            context=context,
            config=components.config,
            strategy=components.strategy,
            client_manager=components.client_manager,
        )
        fit = CodedSecAggWorkflow(**workflow_settings)
        DefaultWorkflow(fit_workflow=fit)(grid, legacy_context)

    return app
