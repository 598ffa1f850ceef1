"""``LegacyStrategy``: a legacy ``flwr.server.strategy`` strategy as a Message-API strategy.

Its rounds' records in Flower's legacy form (``fitins.*`` out, ``fitres.*`` and the evaluate
results back) and the conversions between legacy ``Parameters`` (``.npy`` bytes without names)
and ArrayRecords. The workflow that runs it under ``CodedSecAgg`` is :mod:`strategies.legacy`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any, cast

from flwr.app import (
    Array,
    ArrayRecord,
    ConfigRecord,
    Message,
    MessageType,
    MetricRecord,
    RecordDict,
)
from flwr.common import Code, FitRes, Status
from flwr.common.constant import SType
from flwr.compat.common import recorddict_compat as compat
from flwr.server import strategy as legacy
from flwr.server.client_manager import SimpleClientManager
from flwr.server.client_proxy import ClientProxy
from flwr.server.compat.grid_client_proxy import GridClientProxy
from flwr.serverapp import Grid
from flwr.serverapp.strategy import Strategy

from coded_fl.errors import ConfigurationError, InputError
from coded_fl.layout import npy_header
from coded_fl.vocabulary import LEGACY_FIT_ARRAYS, LEGACY_FIT_CONFIG, LEGACY_WEIGHT_KEY

from .composable import chain_attr, check_composable, check_dp_sampling

__all__ = ["LegacyStrategy"]

LOG = logging.getLogger("flwr")


def _manager(grid: Grid) -> SimpleClientManager:
    """A client manager holding a proxy for every node of ``grid`` (the run's silos)."""
    manager = SimpleClientManager()
    for node in sorted(grid.get_node_ids()):
        manager.register(GridClientProxy(node, grid, 0))
    return manager


def _scalars(record: Any) -> dict[str, Any]:
    return {k: v for k, v in record.items() if isinstance(v, (int, float, str, bytes, bool))}


class LegacyStrategy(Strategy):
    """A legacy ``flwr.server.strategy`` strategy as a Message-API strategy.

    Training messages carry the model and config under Flower's legacy names
    (``fitins.parameters``, ``fitins.config``), so an unchanged ``NumPyClient`` app reads them;
    ``aggregate_train`` hands the legacy ``aggregate_fit`` one ``FitRes`` per reply (under
    ``CodedSecAgg``: one, the decoded average carrying the sum's weight).

    Parameters
    ----------
    strategy
        A ``flwr.server.strategy.Strategy`` whose aggregation works on a weighted average.

    Raises
    ------
    NotComposableError
        For a strategy that needs individual results (Krum, FedMedian, server-side clipping...).
    ConfigurationError
        For anything that is not a legacy strategy.
    """

    arrayrecord_key = LEGACY_FIT_ARRAYS
    configrecord_key = LEGACY_FIT_CONFIG
    weighted_by_key = LEGACY_WEIGHT_KEY

    def __init__(self, strategy: legacy.Strategy) -> None:
        check_composable(strategy)
        check_dp_sampling(strategy)
        if not isinstance(strategy, legacy.Strategy):
            raise ConfigurationError(
                "LegacyStrategy wraps a flwr.server.strategy.Strategy, got "
                f"{type(strategy).__name__} (a Message-API strategy goes into CodedSecAgg as is)"
            )
        self.strategy = strategy
        # the inner strategy's settings, also through wrappers (Flower's DP wrappers)
        self.min_available_nodes = int(chain_attr(strategy, "min_available_clients", 2))
        self.min_train_nodes = int(chain_attr(strategy, "min_fit_clients", 2))
        self.fraction_train = float(chain_attr(strategy, "fraction_fit", 1.0))
        self._proxies: dict[int, ClientProxy] = {}

    def summary(self) -> None:
        """Log the wrapped legacy strategy."""
        LOG.info("\t└──> legacy strategy: %r", self.strategy)

    def _proxy(self, node: int, grid: Grid | None = None) -> ClientProxy:
        if node not in self._proxies:
            self._proxies[node] = GridClientProxy(node, cast(Grid, grid), 0)
        return self._proxies[node]

    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """The legacy strategy's ``configure_fit`` as Message-API train messages (the model
        and its config as Flower's ``fitins.*`` records, which a ``NumPyClient`` reads).

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
        params = compat.arrayrecord_to_parameters(arrays, keep_input=True)
        out = []
        for proxy, ins in self.strategy.configure_fit(server_round, params, _manager(grid)):
            node = cast(GridClientProxy, proxy).node_id
            self._proxies[node] = proxy
            # the named, shaped arrays: their bytes are what a legacy client deserialises
            fit_config = ConfigRecord({**_scalars(config), **ins.config})
            content = RecordDict({LEGACY_FIT_ARRAYS: arrays, LEGACY_FIT_CONFIG: fit_config})
            out.append(Message(content, dst_node_id=node, message_type=MessageType.TRAIN))
        return out

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """The legacy strategy's ``aggregate_fit`` over the replies (read back from
        ``fitres.*`` records).

        Parameters
        ----------
        server_round
            The Flower round.
        replies
            The replies (one: the decoded sum standing for all K partitions).
        """
        results: list[tuple[ClientProxy, FitRes]] = []
        failures: list[tuple[ClientProxy, FitRes] | BaseException] = []
        names: list[str] = []
        for reply in replies:
            if reply.has_error():
                failures.append(Exception(reply.error.reason))
                continue
            arrays = reply.content.array_records[LEGACY_FIT_ARRAYS]
            names = list(arrays.keys())
            record = next(iter(reply.content.metric_records.values()), MetricRecord())
            weight = float(record.get(LEGACY_WEIGHT_KEY, 1.0))  # type: ignore[arg-type]
            metrics = {k: v for k, v in record.items() if k != LEGACY_WEIGHT_KEY}
            res = FitRes(
                status=Status(Code.OK, ""),
                parameters=compat.arrayrecord_to_parameters(arrays, keep_input=True),
                num_examples=max(1, round(weight)),
                metrics=metrics,  # type: ignore[arg-type]
            )
            results.append((self._proxy(reply.metadata.src_node_id), res))
        params, metrics_out = self.strategy.aggregate_fit(server_round, results, failures)
        numbers = MetricRecord(_numbers(metrics_out))
        if params is None:
            return None, numbers
        return _labelled(
            params.tensors, names, who=f"{type(self.strategy).__name__}.aggregate_fit"
        ), numbers

    def configure_evaluate(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """The legacy strategy's ``configure_evaluate`` as Message-API evaluate messages.

        Parameters
        ----------
        server_round
            The Flower round.
        arrays
            The model to evaluate.
        config
            The evaluate config.
        grid
            The Flower grid.
        """
        params = compat.arrayrecord_to_parameters(arrays, keep_input=True)
        out = []
        for proxy, ins in self.strategy.configure_evaluate(server_round, params, _manager(grid)):
            node = cast(GridClientProxy, proxy).node_id
            self._proxies[node] = proxy
            content = compat.evaluateins_to_recorddict(ins, keep_input=True)
            out.append(Message(content, dst_node_id=node, message_type=MessageType.EVALUATE))
        return out

    def aggregate_evaluate(
        self, server_round: int, replies: Iterable[Message]
    ) -> MetricRecord | None:
        """The legacy strategy's ``aggregate_evaluate`` (the loss under ``loss``, with its
        numeric metrics).

        Parameters
        ----------
        server_round
            The Flower round.
        replies
            The evaluation replies.
        """
        results: list[Any] = []
        failures: list[Any] = []
        for reply in replies:
            if reply.has_error():
                failures.append(Exception(reply.error.reason))
                continue
            res = compat.recorddict_to_evaluateres(reply.content)
            target = results if res.status.code == Code.OK else failures
            target.append((self._proxy(reply.metadata.src_node_id), res))
        loss, metrics = self.strategy.aggregate_evaluate(server_round, results, failures)
        if loss is None:
            return None
        return MetricRecord({"loss": float(loss), **_numbers(metrics)})


def _numbers(metrics: dict[str, Any] | None) -> dict[str, int | float | list[int] | list[float]]:
    return {
        k: float(v)
        for k, v in (metrics or {}).items()
        if isinstance(v, (int, float)) and not isinstance(v, bool)
    }


def _labelled(tensors: list[bytes], names: list[str], *, who: str) -> ArrayRecord:
    """Legacy ``Parameters`` tensors (``.npy`` bytes) as an ArrayRecord under ``names``, shape
    and dtype read from the headers: the bytes are used as they are, not copied."""
    if len(tensors) != len(names):
        raise ConfigurationError(f"{who}: {len(tensors)} arrays for a model of {len(names)}")
    out = ArrayRecord()
    for name, data in zip(names, tensors, strict=True):
        try:
            shape, dtype = npy_header(data)
        except InputError as exc:
            raise ConfigurationError(f"{who}: parameters that are not NumPy: {exc}") from None
        out[name] = Array(dtype=str(dtype), shape=shape, stype=SType.NUMPY, data=data)
    return out


def _named(record: ArrayRecord) -> ArrayRecord:
    """The legacy model record (serialised NumPy arrays without shape or dtype metadata) as an
    ArrayRecord of NumPy arrays; records already holding them are returned as they are."""
    if all(arr.dtype for arr in record.values()):
        return record
    names = list(record.keys())
    return _labelled([arr.data for arr in record.values()], names, who="the initial model")
