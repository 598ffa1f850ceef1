"""An in-process Flower grid: a server strategy against real ClientApps, no Ray, no SuperLink.

:class:`InProcessGrid` holds one node per ClientApp it is given, each with its own
``flwr.app.Context`` (node config, and a state that persists from one message to the next, as a
SuperNode keeps it). Pushing a message runs its destination's ClientApp on it at once, in this
process and thread; the reply waits until it is pulled. Every stage of a round therefore
answers together, as a deployment without stragglers does, and a run of many rounds costs the
ClientApps' own work and nothing else (benchmarks of what a strategy *decides*, not of timing).

Behaviours: a node runs whatever ClientApp it is given, so a misbehaving silo is the honest
app built with more mods (``ClientApp(mods=[...])``): a mod outside the protocol mod changes or
withholds the silo's replies, a mod inside it changes what the train function returns. A mod
that raises :class:`NoReplyError` drops the message: no reply ever comes (a silent node). Any other
exception becomes an error reply, as Flower's runtime sends one.

Flower's ``Message(...)`` reads the process's task identity, which Flower's runtime sets;
:func:`task_identity` sets it around a run and restores it afterwards.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Iterable, Iterator, Mapping, Sequence

from flwr.app import Context, Error, Message, RecordDict
from flwr.clientapp import ClientApp
from flwr.proto.node_pb2 import NodeInfo  # pylint: disable=no-name-in-module
from flwr.serverapp import Grid
from flwr.supercore.run import Run

__all__ = ["InProcessGrid", "NoReplyError", "task_identity"]

#: The node config values a Context takes.
NodeValue = int | float | str | bool


class NoReplyError(Exception):
    """Raised by a node's ClientApp (one of its mods) to drop the message it was given."""


@contextlib.contextmanager
def task_identity(run_id: int, *, node_id: int = 0, task_id: int = 1) -> Iterator[None]:
    """Set Flower's process-wide task identity (what ``Message(...)`` stamps on a new
    message) for the ``with`` block, and put the previous one back after it.

    Parameters
    ----------
    run_id, node_id, task_id
        The identity: the run, the sending node (0: the server) and the task.
    """
    from flwr.supercore.task_identity import TaskIdentity

    names = ("_run_id", "_node_id", "_task_id")
    before = {name: getattr(TaskIdentity, name) for name in names}
    for name, value in zip(names, (run_id, node_id, task_id), strict=True):
        setattr(TaskIdentity, name, value)
    try:
        yield
    finally:
        for name, value in before.items():
            setattr(TaskIdentity, name, value)


class InProcessGrid(Grid):
    """A grid whose nodes are ClientApps called in this process when a message is pushed.

    Parameters
    ----------
    apps
        Node i's ClientApp at index i (the same object may serve several nodes: each node
        has its own Context all the same).
    node_configs
        Node i's node config (default: ``partition-id`` i and ``num-partitions`` the number
        of nodes, what Flower's simulation gives).
    run_config
        The run config every node's Context carries.
    run_id
        The run's id (``grid.run.run_id``, every Context's ``run_id``).
    first_node_id
        Node i's id is ``first_node_id + i``.

    Attributes
    ----------
    contexts
        Node id -> its Context (its ``state`` lives as long as the grid).
    dropped
        (node id, message type) of every message a node dropped (:class:`NoReplyError`).
    """

    def __init__(
        self,
        apps: Sequence[ClientApp],
        *,
        node_configs: Sequence[Mapping[str, NodeValue]] | None = None,
        run_config: Mapping[str, NodeValue] | None = None,
        run_id: int = 1,
        first_node_id: int = 1,
    ) -> None:
        if not apps:
            raise ValueError("an in-process grid needs at least one node (one ClientApp)")
        n = len(apps)
        configs: list[dict[str, NodeValue]] = (
            [{"partition-id": i, "num-partitions": n} for i in range(n)]
            if node_configs is None
            else [dict(c) for c in node_configs]
        )
        if len(configs) != n:
            raise ValueError(f"{n} ClientApps but {len(configs)} node configs: give one per node")
        self._run = Run.create_empty(run_id)
        shared: dict[str, NodeValue] = dict(run_config) if run_config is not None else {}
        ids = [first_node_id + i for i in range(n)]
        self._apps = dict(zip(ids, apps, strict=True))
        self.contexts = {
            node: Context(
                run_id=run_id,
                node_id=node,
                node_config=config,
                state=RecordDict(),
                run_config=dict(shared),
            )
            for node, config in zip(ids, configs, strict=True)
        }
        self.dropped: list[tuple[int, str]] = []
        self._waiting: dict[str, Message] = {}  # message id -> reply, in push order
        self._serial = itertools.count(1)

    # ------------------------------------------------------------------ Grid interface
    @property
    def run(self) -> Run:
        return self._run

    def set_run(self, run: Run) -> None:
        if run.run_id != self._run.run_id:
            raise ValueError(f"this grid serves run {self._run.run_id} only, not {run.run_id}")

    def create_message(self, *args: object, **kwargs: object) -> Message:
        raise NotImplementedError("build Message(content, dst_node_id=..., message_type=...)")

    def get_node_ids(self) -> list[int]:
        return list(self.contexts)

    def get_nodes(self) -> list[NodeInfo]:
        # one activation per node: none of them ever restarts
        return [NodeInfo(node_id=node, last_activated_at="start") for node in self.contexts]

    def push_messages(self, messages: Iterable[Message]) -> list[str]:
        """Run each message's destination ClientApp now; returns the messages' ids."""
        out = []
        for msg in messages:
            node = msg.metadata.dst_node_id
            if node not in self._apps:
                raise ValueError(f"no node {node} in this grid (nodes: {list(self._apps)})")
            mid = f"{node}:{next(self._serial)}"
            msg.metadata.__dict__["_message_id"] = mid  # what the SuperLink would assign
            reply = self._deliver(node, msg)
            if reply is not None:
                self._waiting[mid] = reply
            out.append(mid)
        return out

    def pull_messages(self, message_ids: Iterable[str]) -> list[Message]:
        """The replies that are in for ``message_ids`` (each handed out once), in push order."""
        wanted = set(message_ids)
        ready = [mid for mid in self._waiting if mid in wanted]
        return [self._waiting.pop(mid) for mid in ready]

    def send_and_receive(
        self, messages: Iterable[Message], *, timeout: float | None = None
    ) -> list[Message]:
        return self.pull_messages(self.push_messages(messages))

    # ------------------------------------------------------------------ internals
    def _deliver(self, node: int, msg: Message) -> Message | None:
        """Node ``node``'s reply to ``msg``, None when it drops it."""
        try:
            return self._apps[node](msg, self.contexts[node])
        except NoReplyError:
            self.dropped.append((node, msg.metadata.message_type))
            return None
        except Exception as exc:  # as Flower's runtime answers for a ClientApp that raised
            return Message(Error(code=0, reason=f"{type(exc).__name__}: {exc}"), reply_to=msg)
