"""Coded data shuffling through a real Flower simulation (Ray backend), K silos and a sender.

:func:`run_flower_shuffle` fills each member's store for epoch 0 (silo k: its units in full and
its level-t cache; member K, the central sender: every unit), then runs the Flower simulation
engine in this process with K + 1 SuperNodes: the ServerApp runs the listed epochs with
:class:`strategies.shuffle.ShuffleRelay` (the server relays, it never sees a key or a unit),
each ClientApp answers with :func:`clients.shuffle.register_shuffle`, storing its units under
``store_root/member-<k>``. What the server pushed and pulled is recorded
(:class:`RecordingGrid`) so a caller can check that it only ever saw ciphertext.

Used by ``python -m simulations.shuffle --flower`` and ``tests/integration/test_shuffle_flower.py``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from flwr.app import ArrayRecord, ConfigRecord, Context, Error, Message, MetricRecord
from flwr.clientapp.typing import ClientAppCallable, Mod
from flwr.serverapp import Grid, ServerApp
from flwr.simulation import run_simulation

from clients.shuffle import shuffle_client_app
from coded_fl.shuffling import (
    Mode,
    ShuffleResult,
    UnitManifest,
    UnitStore,
    install_silo,
    plan_shuffle,
)
from coded_fl.shuffling.plan.units import UnitId
from coded_fl.shuffling.transport.wire import (
    DeliverRequest,
    GroupKeyRequest,
    Hello,
    JoinRequest,
    Packet,
    PlanRequest,
    ShuffleJob,
)
from coded_fl_flower.records import packet_from
from simulations.runtime.flower_sim import offline_environment
from strategies.roster import GridView
from strategies.shuffle import ShuffleRelay

__all__ = ["Epoch", "FlowerShuffle", "RecordingGrid", "drop_mod", "leaked", "run_flower_shuffle"]

_STAGES: dict[type, str] = {
    Hello: "hello",
    GroupKeyRequest: "key",
    JoinRequest: "join",
    PlanRequest: "plan",
    DeliverRequest: "deliver",
}


@dataclass(frozen=True)
class Epoch:
    """One epoch to run: the move from ``current`` to ``nxt`` in ``mode`` (coded unless said)."""

    mode: Mode
    current: Mapping[UnitId, Iterable[int]]
    nxt: Mapping[UnitId, Iterable[int]]
    coded: bool = True


@dataclass
class FlowerShuffle:
    """What :func:`run_flower_shuffle` returns: one result per epoch, and the bytes the server
    handled (every message content it pushed or pulled, as raw record bytes)."""

    results: list[ShuffleResult]
    relayed_bytes: list[bytes] = field(repr=False)
    seconds: float
    stores: list[UnitStore]


class RecordingGrid(GridView):
    """Delegates to ``grid`` and keeps the bytes of every message content pushed or pulled."""

    def __init__(self, grid: Grid) -> None:
        super().__init__(grid)
        self.seen: list[bytes] = []
        self._lock = threading.Lock()

    def _record(self, msgs: Iterable[Message]) -> None:
        with self._lock:
            for m in msgs:
                if m.has_error():
                    self.seen.append(str(m.error.reason).encode())
                    continue
                for rec in m.content.values():
                    if isinstance(rec, ArrayRecord):
                        self.seen += [a.data for a in rec.values()]
                    elif isinstance(rec, (ConfigRecord, MetricRecord)):
                        self.seen.append(repr(dict(rec.items())).encode())

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        msgs = list(messages)
        self._record(msgs)
        return self._grid.push_messages(msgs)

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:
        replies = list(self._grid.pull_messages(message_ids))
        self._record(replies)
        return replies

    def send_and_receive(
        self, messages: Iterable[Message], *, timeout: float | None = None
    ) -> Iterable[Message]:
        msgs = list(messages)
        self._record(msgs)
        replies = list(self._grid.send_and_receive(msgs, timeout=timeout))
        self._record(replies)
        return replies


_DROP_EPOCH = "codedfl.test.drop-epoch"


def drop_mod(drops: Mapping[int, tuple[str, int]]) -> Mod:
    """A ClientApp mod that makes member k vanish at ``drops[k] = (stage, epoch)``: it answers
    that request with an error (a node that died) and does nothing (stores untouched)."""

    def mod(msg: Message, context: Context, call_next: ClientAppCallable) -> Message:
        packet: Packet | None = packet_from(msg.content)
        cfg = context.node_config
        member = int(str(cfg.get("codedfl.silo", cfg["partition-id"])))
        if packet is not None and member in drops:
            if isinstance(packet, Hello) and packet.job is not None:
                epoch = packet.job.epoch  # remembered for the epoch's later stages
                context.state[_DROP_EPOCH] = ConfigRecord({"epoch": epoch})
            else:
                rec = context.state.get(_DROP_EPOCH)
                epoch = int(rec["epoch"]) if isinstance(rec, ConfigRecord) else -1  # type: ignore[arg-type]
            if drops[member] == (_STAGES.get(type(packet)), epoch):
                return Message(
                    Error(code=0, reason=f"member {member} dropped (injected fault)"), reply_to=msg
                )
        return call_next(msg, context)

    return mod


def _install(
    data: Mapping[UnitId, bytes], first: Epoch, K: int, t: int, root: Path
) -> list[UnitStore]:
    manifest = UnitManifest.from_data(data)
    plan = plan_shuffle(manifest, first.current, first.nxt, K=K, t=t, mode=first.mode)
    stores = [UnitStore(root / f"member-{k}") for k in range(K + 1)]
    for k in range(K):
        install_silo(plan, k, data, stores[k], epoch=0)
    stores[K].commit(add={manifest.spec(u): data[u] for u in manifest.ids}, epoch=0)
    return stores


def run_flower_shuffle(
    data: Mapping[UnitId, bytes],
    epochs: Sequence[Epoch],
    *,
    K: int,
    t: int,
    store_root: str | Path,
    storage: float | None = None,
    drops: Mapping[int, tuple[str, int]] | None = None,
    actors: int = 2,
    hello_timeout: float = 180.0,
    stage_timeout: float = 60.0,
    verbose: bool = False,
    after_epoch: Callable[[ShuffleResult], None] | None = None,
) -> FlowerShuffle:
    """Install epoch 0 into fresh stores under ``store_root`` and run ``epochs`` (numbered
    1, 2, ...) in one Flower simulation with K + 1 SuperNodes on ``actors`` Ray actors.

    ``after_epoch`` is called in the ServerApp after each epoch (a test can look at the stores
    then: in a simulation they are local directories).
    """
    root = Path(store_root)
    stores = _install(data, epochs[0], K, t, root)
    results: list[ShuffleResult] = []
    recorder: list[RecordingGrid] = []
    failures: list[BaseException] = []
    server = ServerApp()

    @server.main()
    def main(grid: Grid, context: Context) -> None:
        rec = RecordingGrid(grid)
        recorder.append(rec)
        relay = ShuffleRelay(
            rec,
            min_nodes=K + 1,
            hello_timeout=hello_timeout,
            stage_timeout=stage_timeout,
            progress=print if verbose else (lambda line: None),
        )
        run_id = f"flwr-run-{context.run_id}"
        try:
            for e, spec in enumerate(epochs, start=1):
                job = ShuffleJob.make(
                    run_id=run_id,
                    epoch=e,
                    current=spec.current,
                    nxt=spec.nxt,
                    K=K,
                    t=t,
                    mode=spec.mode,
                    coded=spec.coded,
                    storage=storage,
                )
                results.append(relay.run(job))
                if after_epoch is not None:
                    after_epoch(results[-1])
        except BaseException as exc:  # surfaced to the caller below
            failures.append(exc)
            raise

    mods = [drop_mod(dict(drops))] if drops else []
    client = shuffle_client_app(store_root=root, mods=mods)
    offline_environment()
    t0 = time.monotonic()
    run_simulation(
        server_app=server,
        client_app=client,
        num_supernodes=K + 1,
        backend_config={
            "client_resources": {"num_cpus": 1, "num_gpus": 0.0},
            "init_args": {"num_cpus": actors, "address": "local", "include_dashboard": False},
        },
        verbose_logging=False,
    )
    seconds = time.monotonic() - t0
    if failures:
        raise failures[0]
    if len(results) != len(epochs):
        raise RuntimeError(f"the ServerApp ran {len(results)} of {len(epochs)} epochs")
    seen = recorder[0].seen if recorder else []
    return FlowerShuffle(results, seen, seconds, stores)


def leaked(seen: Sequence[bytes], secrets: Mapping[str, bytes], *, window: int = 24) -> list[str]:
    """Names of the ``secrets`` of which some ``window``-byte piece occurs in ``seen``.

    Each secret is probed at up to 16 places, each a window with at least 8 distinct byte
    values (so that runs of zeros, common in images and padding, do not match by chance); a
    secret shorter than the window is probed whole.
    """
    found = []
    for name, secret in secrets.items():
        probes = []
        if len(secret) <= window:
            probes = [secret] if secret else []
        else:
            step = max(1, (len(secret) - window) // 16)
            for off in range(0, len(secret) - window + 1, step):
                w = secret[off : off + window]
                if len(set(w)) >= 8:
                    probes.append(w)
        if any(p in blob for p in probes for blob in seen):
            found.append(name)
    return found
