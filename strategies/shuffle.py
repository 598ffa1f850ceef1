"""``ShuffleRelay``: coded data shuffling through Flower, the server relaying between silos.

::

    relay = ShuffleRelay(grid)
    job = ShuffleJob.make(run_id=f"flwr-run-{grid.run.run_id}", epoch=1, current=now, nxt=nxt,
                          K=4, t=2, mode="decentralized")
    result = relay.run(job)           # a coded_fl.shuffling.ShuffleResult
    print("\\n".join(result.lines()))

One epoch is five push/pull stages (:mod:`strategies.exchange`), each with a deadline: hello
(every node; members answer with a fresh public key), group key (the leader seals the epoch's
group key for the others), join (the others open it), plan (members agree on the plan and make
their coded messages), deliver (each silo gets the messages the plan routes to it, decodes,
verifies, commits its store). The protocol logic is the sans-IO
:class:`~coded_fl.shuffling.transport.coordinator.RelayCoordinator`; this module only moves packets
(:mod:`coded_fl_flower.records`) and enforces the deadlines. The server never holds a key, a
unit, a hash or a length; everything it forwards is AES-256-GCM ciphertext under the group key.

The ClientApp side is :func:`clients.shuffle.register_shuffle`.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Sequence

from flwr.app import Message
from flwr.serverapp import Grid

from coded_fl.errors import CodedFLError, ConfigurationError, RemoteProtocolError
from coded_fl.shuffling.transport.coordinator import RelayCoordinator, ShuffleResult
from coded_fl.shuffling.transport.wire import Packet, ShuffleJob
from coded_fl_flower.records import SHUFFLE_MESSAGE_TYPE, packet_content, packet_from

from .exchange import Exchange

__all__ = ["ShuffleRelay"]

LOG = logging.getLogger("flwr")


class ShuffleRelay:
    """Runs shuffle epochs over a Flower ``Grid``.

    Parameters
    ----------
    grid
        The ServerApp's grid.
    nodes
        The nodes to contact (default: every connected node, once ``min_nodes`` are).
    min_nodes
        Nodes to wait for before the hello (default: the job's members, K or K + 1).
    hello_timeout
        Deadline of the hello (it covers the nodes starting their ClientApps).
    stage_timeout
        Deadline of each later stage.
    node_wait_timeout
        How long to wait for ``min_nodes``; the epoch then goes on with the nodes there are.
    poll_interval
        The longest wait between pulls when nothing arrived (the wait starts at 5 ms and
        doubles up to it). A stage's replies come within a fraction of a second of each
        other, so a short cap keeps the stages from idling.
    progress
        Called with a line per stage (default: the ``flwr`` logger).
    reuse_keys
        Continue the previous epoch's group key when every member offers to for the same
        members, skipping two of the five stages (the default;
        :mod:`coded_fl.shuffling.transport.keyreuse`); False agrees a fresh key every epoch.
    """

    def __init__(
        self,
        grid: Grid,
        *,
        nodes: Sequence[int] | None = None,
        min_nodes: int | None = None,
        hello_timeout: float = 120.0,
        stage_timeout: float = 60.0,
        node_wait_timeout: float = 120.0,
        poll_interval: float = 0.01,
        progress: Callable[[str], None] | None = None,
        reuse_keys: bool = True,
    ) -> None:
        for name, value in (
            ("hello_timeout", hello_timeout),
            ("stage_timeout", stage_timeout),
            ("node_wait_timeout", node_wait_timeout),
            ("poll_interval", poll_interval),
        ):
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
                raise ConfigurationError(f"{name} must be a finite number >= 0, got {value!r}")
        self.grid = grid
        self.nodes = None if nodes is None else list(nodes)
        self.min_nodes = min_nodes
        self.hello_timeout = float(hello_timeout)
        self.stage_timeout = float(stage_timeout)
        self.node_wait_timeout = float(node_wait_timeout)
        self.progress = progress or (lambda line: LOG.info(line))
        self.reuse_keys = bool(reuse_keys)
        self._ex = Exchange(grid, poll_interval=float(poll_interval))
        #: member -> the node it answered the latest hello from
        self.nodes_of_members: dict[int, int] = {}

    # ------------------------------------------------------------------ helpers
    def _wait_for_nodes(self, want: int) -> list[int]:
        if self.nodes is not None:
            return list(self.nodes)
        deadline = time.monotonic() + self.node_wait_timeout
        while True:
            nodes = sorted(self.grid.get_node_ids())
            if len(nodes) >= want or time.monotonic() >= deadline:
                if len(nodes) < want:
                    self.progress(
                        f"[coded-fl shuffle] only {len(nodes)} of {want} nodes connected after "
                        f"{self.node_wait_timeout:g}s; going on with them"
                    )
                return nodes
            time.sleep(0.1)

    def _message(self, node: int, packet: Packet) -> Message:
        return Message(
            content=packet_content(packet), dst_node_id=node, message_type=SHUFFLE_MESSAGE_TYPE
        )

    @staticmethod
    def _packet(reply: Message) -> Packet:
        if reply.has_error():
            raise RemoteProtocolError(str(reply.error.reason))
        packet = packet_from(reply.content)
        if packet is None:
            raise RemoteProtocolError(
                "replied without coded-fl shuffle content: register the shuffle handler in its "
                "ClientApp (coded_fl_flower.register_shuffle(app))"
            )
        return packet

    def _stage(
        self,
        relay: RelayCoordinator,
        name: str,
        requests: list[tuple[int, Packet]],
        handle: Callable[[int, Packet], None],
    ) -> None:
        """Push one request per member, feed the replies, fail the members still silent at
        the deadline."""
        if not requests:
            return
        msgs = [self._message(relay.node_of(m), p) for m, p in requests]
        ids = self._ex.push(msgs, stage=f"shuffle-{name}", round_=relay.job.epoch)
        member_of = {relay.node_of(m): m for m, _ in requests}
        pending = {member_of[node] for node in ids.values()}
        for m, _ in requests:
            if m not in pending:
                relay.fail(m, "the grid could not push its message")

        def on_reply(node: int, reply: Message) -> bool:
            m = member_of[node]
            pending.discard(m)
            try:
                handle(m, self._packet(reply))
            except CodedFLError as exc:
                relay.fail(m, str(exc))
            return not pending

        self._ex.collect(ids, on_reply, deadline=time.monotonic() + self.stage_timeout)
        for m in sorted(pending):
            relay.fail(m, f"no reply within {self.stage_timeout:g}s")

    # ------------------------------------------------------------------ one epoch
    def run(self, job: ShuffleJob) -> ShuffleResult:
        """Run one epoch; never waits longer than the deadlines. A job that cannot work
        (storage too small, units missing from every silo) raises before any node is asked.

        Parameters
        ----------
        job
            The epoch's public job.

        Returns
        -------
        ShuffleResult
        """
        relay = RelayCoordinator(job, reuse_keys=self.reuse_keys)
        seconds: dict[str, float] = {}
        t0 = time.monotonic()
        nodes = self._wait_for_nodes(self.min_nodes or len(job.members))
        self._hello(relay, nodes)
        seconds["hello"] = time.monotonic() - t0
        ok = relay.close_hello()
        self.nodes_of_members.update({m: relay.node_of(m) for m in relay.members})
        self.progress(
            f"[coded-fl shuffle] {job.describe()}: members {list(relay.members)} answered"
            + ("" if ok else f"; aborted: {relay.aborted}")
        )
        for name, requests, handle, close in relay.steps() if ok else []:
            t = time.monotonic()
            self._stage(relay, name, list(requests()), handle)
            seconds[name] = time.monotonic() - t
            if not close():
                break
        seconds["total"] = time.monotonic() - t0
        result = relay.finish(seconds=seconds)
        for line in result.lines():
            self.progress(line)
        return result

    def _hello(self, relay: RelayCoordinator, nodes: list[int]) -> None:
        hello = relay.hello()
        ids = self._ex.push(
            [self._message(n, hello) for n in nodes], stage="shuffle-hello", round_=relay.job.epoch
        )

        def on_reply(node: int, reply: Message) -> bool:
            try:
                relay.receive(node, self._packet(reply))
            except CodedFLError as exc:
                relay.note(f"node {node}: {exc}")
            return relay.hello_complete()

        self._ex.collect(ids, on_reply, deadline=time.monotonic() + self.hello_timeout)
