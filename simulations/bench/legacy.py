"""Legacy benchmark: the legacy path's round time against the Message-API path's.

Run: ``python -m simulations.bench legacy --out legacy.json [--quick]``.

At the rounds benchmark's setting (n = 10, d = 1e6, 10 % of the silos dropping, s = T = n/10,
the same cheap deterministic update; :mod:`simulations.bench.rounds`), one run times, in the
same process and Ray simulation engine, alternately ``repeats`` times each:

- the Message-API path: ``CodedSecAgg(FedAvg())`` with ``coded_secagg_mod`` on a ``@app.train``
  ClientApp (the rounds benchmark's "ours");
- the legacy path: ``DefaultWorkflow(fit_workflow=CodedSecAggWorkflow(...))`` around
  ``flwr.server.strategy.FedAvg`` with ``coded_secagg_mod`` on a ``NumPyClient`` app.

The figure is the median wall time between consecutive round ends over rounds 2..R of every
repeat. On a shared machine that figure moves by tens of percent between runs; the benchmark
also times both paths in this process without Ray (every silo's ClientApp called in turn by
an in-process grid): the CPU cost of the rounds alone, reported beside it (not a goal).
Goal: legacy <= 1.1x Message API on the Flower simulation (the adapter adds no round trip and
no copy of the model: legacy arrays are labelled from their ``.npy`` headers).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from types import SimpleNamespace

import numpy as np
from flwr.app import Context, Error, Message, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp

from clients import coded_secagg_mod
from simulations.bench.common import Report
from simulations.bench.rounds import (
    _client,
    _coded_server,
    _drop_mod,
    _per_round,
    _simulate,
    _update,
    ray_actors,
)
from strategies import CodedSecAggWorkflow


def _legacy(n: int, d: int, rounds: int, stamps: list[float]) -> tuple[ServerApp, ClientApp]:
    from flwr.client import NumPyClient
    from flwr.common import ndarrays_to_parameters
    from flwr.server import LegacyContext, ServerConfig
    from flwr.server.strategy import FedAvg as LegacyFedAvg
    from flwr.server.workflow import DefaultWorkflow

    s = max(1, n // 10)
    server = ServerApp()

    @server.main()
    def main(grid: Grid, context: Context) -> None:
        strategy = LegacyFedAvg(
            fraction_fit=1.0,
            fraction_evaluate=0.0,
            min_fit_clients=n,
            min_available_clients=n,
            initial_parameters=ndarrays_to_parameters([np.zeros(d, np.float32)]),
        )
        fit = CodedSecAggWorkflow(
            num_silos=n,
            num_stragglers=s,
            privacy_threshold=s,
            max_weight=1.0,
            round_timeout=300.0,
            progress=lambda r: stamps.append(time.monotonic()),
        )
        legacy = LegacyContext(
            context=context, config=ServerConfig(num_rounds=rounds), strategy=strategy
        )
        stamps.append(time.monotonic())
        DefaultWorkflow(fit_workflow=fit)(grid, legacy)
        bad = [r.reason for r in (fit.coded.reports if fit.coded else []) if not r.ok]
        if bad:
            raise RuntimeError(f"legacy coded rounds aborted: {bad}")

    class Client(NumPyClient):
        def __init__(self, site: int) -> None:
            self.site = site

        def fit(self, parameters, config):  # type: ignore[no-untyped-def]
            return [_update(parameters[0], self.site, 0)], 1, {}

    client = ClientApp(
        client_fn=lambda ctx: Client(int(ctx.node_config["partition-id"])).to_client(),
        mods=[_drop_mod(n), coded_secagg_mod],
    )
    return server, client


def run(report: Report, *, quick: bool) -> None:
    n = 4 if quick else 10
    d = 10_000 if quick else 1_000_000
    rounds = 3 if quick else 6
    repeats = 1 if quick else 3
    report.config = {
        "d": d,
        "silos": n,
        "rounds": rounds,
        "repeats": repeats,
        "dropout": "10% (at least 1)",
        "ray_actors": ray_actors(n, quick=quick),
        "figure": "median wall seconds per round over rounds 2..R of every repeat",
    }
    variants: dict[str, Callable[[list[float]], tuple[ServerApp, ClientApp]]] = {
        "Message API (CodedSecAgg + @app.train)": lambda st: (
            _coded_server(n, d, rounds, st),
            _client(n, coded=True),
        ),
        "legacy (CodedSecAggWorkflow + NumPyClient)": lambda st: _legacy(n, d, rounds, st),
    }
    later: dict[str, list[float]] = {name: [] for name in variants}
    for rep in range(repeats):
        for name, build in variants.items():
            stamps: list[float] = []
            t0 = time.monotonic()
            server, client = build(stamps)
            _simulate(server, client, n, actors=ray_actors(n, quick=quick))
            per = _per_round(stamps)
            if len(per) < rounds:
                report.notes.append(f"{name} repeat {rep}: only {len(per)} of {rounds} rounds")
            later[name] += per[1:] if len(per) > 1 else per
            report.add(
                n=n, d=d, variant=name, repeat=rep, rounds=per, run_seconds=time.monotonic() - t0
            )
    cpu: dict[bool, list[float]] = {False: [], True: []}
    for rep in range(repeats):  # the CPU cost alone, without Ray, alternately
        for legacy in (False, True):
            name = f"in process, {'legacy' if legacy else 'Message API'}"
            per = in_process(n, d, rounds, legacy=legacy)
            cpu[legacy] += per[1:]
            report.add(n=n, d=d, variant=name, repeat=rep, rounds=per)
    inproc = {k: statistics.median(v) for k, v in cpu.items()}
    for legacy, m in inproc.items():
        name = f"in process, {'legacy' if legacy else 'Message API'}"
        report.add(n=n, d=d, variant=name, kind="median", seconds_per_round=m)
    report.add(n=n, kind="ratios", in_process_legacy_over_message_api=inproc[True] / inproc[False])
    medians = {name: statistics.median(v) if v else float("nan") for name, v in later.items()}
    msg, leg = medians.values()
    for name, m in medians.items():
        report.add(n=n, d=d, variant=name, kind="median", seconds_per_round=m)
    report.add(n=n, kind="ratios", legacy_over_message_api=leg / msg)
    report.goal(
        f"legacy path <= 1.1x Message-API path s/round at n={n}", leg / msg, 1.1, applies=not quick
    )


class _InProcessGrid(Grid):
    """Every silo's ClientApp called in turn when a message is pushed (no Ray, no threads):
    the rounds' CPU cost alone, without the shared machine's scheduling noise."""

    def __init__(self, n: int, app: ClientApp) -> None:
        self.app = app
        self.contexts = {
            100 + i: Context(
                run_id=7,
                node_id=100 + i,
                node_config={"partition-id": i, "num-partitions": n},
                state=RecordDict(),
                run_config={},
            )
            for i in range(n)
        }
        self.replies: dict[str, Message] = {}
        self._next = 0

    @property
    def run(self):  # type: ignore[no-untyped-def]
        return SimpleNamespace(run_id=7)

    def set_run(self, run_id: int) -> None:  # pragma: no cover - Grid interface
        pass

    def create_message(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        # Flower's workflows build Message(...) themselves; nothing here calls this
        raise TypeError("this in-process grid takes Message objects: build Message(...)")

    def get_node_ids(self) -> list[int]:
        return sorted(self.contexts)

    def get_nodes(self):  # type: ignore[no-untyped-def]
        return [SimpleNamespace(node_id=n, last_activated_at="t0") for n in sorted(self.contexts)]

    def push_messages(self, messages):  # type: ignore[no-untyped-def]
        ids = []
        for msg in messages:
            mid = f"m{self._next}"
            self._next += 1
            msg.metadata.__dict__["_message_id"] = mid
            try:
                reply = self.app(msg, self.contexts[msg.metadata.dst_node_id])
            except Exception as exc:  # a dropped silo: Flower's error reply
                reply = Message(Error(code=0, reason=str(exc)), reply_to=msg)
            reply.metadata.__dict__["_reply_to_message_id"] = mid
            self.replies[mid] = reply
            ids.append(mid)
        return ids

    def pull_messages(self, message_ids):  # type: ignore[no-untyped-def]
        found = sorted((m for m in set(message_ids) if m in self.replies), key=lambda m: int(m[1:]))
        return [self.replies.pop(m) for m in found]

    def send_and_receive(self, messages, *, timeout=None):  # type: ignore[no-untyped-def]
        return self.pull_messages(self.push_messages(messages))


def in_process(n: int, d: int, rounds: int, *, legacy: bool) -> list[float]:
    """Seconds per round of one run with every ClientApp called in this process."""
    from flwr.supercore.task_identity import TaskIdentity

    # Flower's Message() reads the process's task identity, which its runtime sets
    saved = {k: getattr(TaskIdentity, k) for k in ("_run_id", "_node_id", "_task_id")}
    for k in saved:
        setattr(TaskIdentity, k, 1)
    try:
        stamps: list[float] = []
        server, client = (
            _legacy(n, d, rounds, stamps)
            if legacy
            else (_coded_server(n, d, rounds, stamps), _client(n, coded=True))
        )
        grid = _InProcessGrid(n, client)
        context = Context(run_id=7, node_id=0, node_config={}, state=RecordDict(), run_config={})
        server(grid, context)
        return _per_round(stamps)
    finally:
        for k, v in saved.items():
            setattr(TaskIdentity, k, v)
