"""A Grid that shows the wrapped strategy only the run's silos.

The wrapped strategy's ``configure_train``/``configure_evaluate`` sample nodes through
``grid.get_node_ids()`` (and FedAvg's sampler waits, without a deadline, until enough nodes are
connected). Handing it this view makes it see exactly the silos of the run, so it can neither
block nor address a node that is not a silo. Messages are still pushed by the wrapper itself.
"""

from __future__ import annotations

from collections.abc import Iterable

from flwr.app import Message, RecordDict
from flwr.serverapp import Grid

__all__ = ["GridView", "RosterGrid"]


class GridView(Grid):
    """A Grid that delegates every call to ``grid``; subclasses override what they change.

    Parameters
    ----------
    grid
        The grid to delegate to.
    """

    def __init__(self, grid: Grid) -> None:
        self._grid = grid

    def set_run(self, run_id: int) -> None:  # type: ignore[override]
        """Delegate to the wrapped grid.

        Parameters
        ----------
        run_id
            The run.
        """
        self._grid.set_run(run_id)  # type: ignore[arg-type]

    @property
    def run(self):
        """The run of the delegate grid."""
        return self._grid.run

    def create_message(
        self,
        content: RecordDict,
        message_type: str,
        dst_node_id: int,
        group_id: str,
        ttl: float | None = None,
    ) -> Message:
        """Delegate to the wrapped grid.

        Parameters
        ----------
        content
            The message's records.
        message_type
            Its type.
        dst_node_id
            The destination node.
        group_id
            The message group.
        ttl
            Time to live, in seconds (None: the grid's default).

        Returns
        -------
        flwr.app.Message
        """
        return self._grid.create_message(content, message_type, dst_node_id, group_id, ttl)

    def get_node_ids(self) -> Iterable[int]:
        """Delegate to the wrapped grid."""
        return self._grid.get_node_ids()

    def get_nodes(self):
        """Delegate to the wrapped grid."""
        return self._grid.get_nodes()

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        """Delegate to the wrapped grid.

        Parameters
        ----------
        messages
            The messages to push.

        Returns
        -------
        Iterable[str]
            Their ids.
        """
        return self._grid.push_messages(messages)

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:
        """Delegate to the wrapped grid.

        Parameters
        ----------
        message_ids
            The ids of the messages whose replies to pull.

        Returns
        -------
        Iterable[flwr.app.Message]
            The replies in.
        """
        return self._grid.pull_messages(message_ids)

    def send_and_receive(
        self, messages: Iterable[Message], *, timeout: float | None = None
    ) -> Iterable[Message]:
        """Delegate to the wrapped grid.

        Parameters
        ----------
        messages
            The messages to push.
        timeout
            Seconds to wait for the replies (None: until every reply).

        Returns
        -------
        Iterable[flwr.app.Message]
            The replies.
        """
        return self._grid.send_and_receive(messages, timeout=timeout)


class RosterGrid(GridView):
    """Delegates to ``grid``; ``get_node_ids`` (and ``get_nodes``) return only ``nodes``.

    Parameters
    ----------
    grid
        The grid to delegate to.
    nodes
        The node ids the wrapped strategy may see (the run's silos).
    """

    def __init__(self, grid: Grid, nodes: Iterable[int]) -> None:
        super().__init__(grid)
        self._nodes = list(nodes)

    def get_node_ids(self) -> Iterable[int]:
        """The roster's nodes only (what the wrapped strategy may sample)."""
        return list(self._nodes)

    def get_nodes(self):
        """The roster's nodes only, with their metadata."""
        wanted = set(self._nodes)
        return [n for n in self._grid.get_nodes() if getattr(n, "node_id", None) in wanted]
