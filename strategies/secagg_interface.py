"""The Flower ``Strategy`` interface of :class:`strategies.CodedSecAgg`, around its wrapped one.

``CodedSecAgg.start`` drives the rounds itself (it must act on the first replies), so
``configure_train`` refuses to be driven from outside and ``aggregate_train`` is the wrapped
strategy's (the round driver hands it the decoded average); evaluation is the wrapped
strategy's, passed through.
"""

from __future__ import annotations

from collections.abc import Iterable

from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord
from flwr.serverapp import Grid
from flwr.serverapp.strategy import Strategy

from coded_fl.errors import CodedFLError

__all__ = ["WrapperInterface"]


class WrapperInterface(Strategy):
    """Flower's train and evaluate calls of a wrapper around ``strategy`` (a part of
    :class:`strategies.CodedSecAgg`, whose constructor sets the attribute).

    Attributes
    ----------
    strategy
        The wrapped Flower strategy.
    """

    strategy: Strategy

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
