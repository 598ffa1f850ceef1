"""Rounds benchmark: seconds per round in the Flower simulation engine, d = 1e6.

Run: ``python -m simulations.bench rounds --out rounds.json [--quick]``.

For n in {10, 20} with 10 % of the silos dropping (they fail at once in every round, as a
crashed node does), one run of this benchmark times, one after the other in the same process
and the same Ray simulation engine:

- plain FedAvg with the Message API (``FedAvg.start``: waits for every reply);
- Flower's SecAgg+ (legacy ``SecAggPlusWorkflow``; full graph with threshold n/2, and
  ``num_shares=5`` with threshold 3, as in ANCHORS.md);
- gradient coding's training work without its protocol (the goals' reference): plain FedAvg
  whose silos each run the train function s + 1 times (partitions i..i+s, the least any
  gradient code asks: Tandon et al.) and upload the mean (summed in place, no extra copy of
  the model), with no coding, quantization or masking. The simulation runs every silo on the
  same two cores, so the s + 1 trainings add to the round instead of running side by side as
  they do across sites: against plain FedAvg ours pays for the redundancy, against this
  reference only for its protocol (and gains by closing a round as the replies come, where
  FedAvg pulls every 0.1 s and aggregates after the last);
- ours: ``CodedSecAgg(FedAvg(), num_stragglers = n/10, privacy_threshold = n/10)``, with its
  default masking (``"auto"``: ``"aligned"`` with the repetition code, one round trip once the
  edge keys are dealt through rounds 1 and 2; the median below includes round 2) and with
  ``masking="shares"`` (secret-shared masks, two round trips).

Every silo's "training" is the same cheap deterministic update of a 1e6-element float32 model,
so the figures are the cost of aggregation, messaging and the protocols. The figure is the
median wall time between consecutive round ends over rounds 2..R (round 1 pays imports and JIT).

Goals (full size only): ours with its default masking <= 0.9x the reference above, at n = 10
and n = 20. Ours over plain FedAvg and SecAgg+ over ours (both maskings) are context rows.
"""

from __future__ import annotations

import itertools
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import FedAvg

from clients import coded_secagg_mod
from simulations.bench.common import Report
from simulations.runtime.flower_sim import offline_environment
from strategies import CodedSecAgg

QUIET_LOGS = {"RAY_DEDUP_LOGS": "1"}
ALIGNED = "ours (CodedSecAgg, masking='aligned')"
SHARES = "ours (CodedSecAgg, masking='shares')"
FLOOR = "plain FedAvg, s+1 trainings per silo (gradient coding's compute, no protocol)"


def _dropped(n: int) -> set[int]:
    return set(range(n - max(1, n // 10), n))


def _update(w: np.ndarray, site: int, round_: int) -> np.ndarray:
    """A cheap, deterministic local update (the same for every replica of a partition)."""
    g = np.random.default_rng(site * 1000 + round_)
    return w + (g.standard_normal(16).astype(np.float32) * 1e-3).repeat(w.size // 16 + 1)[: w.size]


def _train_fn(msg: Message, context: Context) -> Message:
    site = int(context.node_config["partition-id"])
    w = msg.content["arrays"]["w"].numpy() if "w" in msg.content["arrays"] else None
    if w is None:
        w = next(iter(msg.content["arrays"].values())).numpy()
    new = _update(w, site, int(msg.content["config"]["server-round"]))
    content = RecordDict(
        {
            "arrays": ArrayRecord([new]),  # type: ignore[list-item]
            "metrics": MetricRecord({"num-examples": 1}),
        }
    )
    return Message(content, reply_to=msg)


def _drop_mod(n: int):  # type: ignore[no-untyped-def]
    """The silo (the node's own partition-id) fails every message that carries a model: a
    crashed node. Placed first, before coded_secagg_mod rewrites partition-id."""
    dropped = _dropped(n)

    def mod(msg: Message, context: Context, call_next):  # type: ignore[no-untyped-def]
        site = int(context.node_config["partition-id"])
        if site in dropped and ("arrays" in msg.content or "fitins.parameters" in msg.content):
            raise RuntimeError("dropped (benchmark fault)")
        return call_next(msg, context)

    return mod


def _floor_mod(n: int):  # type: ignore[no-untyped-def]
    """Gradient coding's compute without its protocol: silo i runs the train function for
    partitions i, ..., i + s (mod n), each through Flower's records as ``coded_secagg_mod``
    calls it, and uploads the mean of the s + 1 models."""
    s = max(1, n // 10)

    def mod(msg: Message, context: Context, call_next):  # type: ignore[no-untyped-def]
        if "arrays" not in msg.content:
            return call_next(msg, context)
        site = int(context.node_config["partition-id"])
        models = []
        for j in range(s + 1):
            sub = Context(
                run_id=context.run_id,
                node_id=context.node_id,
                node_config={**context.node_config, "partition-id": (site + j) % n},
                state=RecordDict(),
                run_config=context.run_config,
            )
            models.append(next(iter(call_next(msg, sub).content["arrays"].values())).numpy())
        total = models[0]  # a float32 array of its own (the train function's new model)
        for other in models[1:]:
            np.add(total, other, out=total)
        np.divide(total, np.float32(s + 1), out=total)  # the mean, in place: no 4 MB copy
        content = RecordDict(
            {
                "arrays": ArrayRecord([total]),  # type: ignore[list-item]
                "metrics": MetricRecord({"num-examples": 1}),
            }
        )
        return Message(content, reply_to=msg)

    return mod


def _client(n: int, *, coded: bool, floor: bool = False) -> ClientApp:
    if coded:
        mods = [_drop_mod(n), coded_secagg_mod]
    elif floor:
        mods = [_drop_mod(n), _floor_mod(n)]
    else:
        mods = [_drop_mod(n)]
    app = ClientApp(mods=mods)
    app.train()(_train_fn)
    return app


class _TimedFedAvg(FedAvg):
    def __init__(self, stamps: list[float], **kw: object) -> None:
        super().__init__(**kw)  # type: ignore[arg-type]
        self.stamps = stamps

    def aggregate_train(self, server_round, replies):  # type: ignore[no-untyped-def]
        out = super().aggregate_train(server_round, replies)
        self.stamps.append(time.monotonic())
        return out


def _initial(d: int) -> ArrayRecord:
    return ArrayRecord([np.zeros(d, dtype=np.float32)])  # type: ignore[list-item]


def _plain_server(n: int, d: int, rounds: int, stamps: list[float]) -> ServerApp:
    app = ServerApp()

    @app.main()
    def main(grid: Grid, context: Context) -> None:
        stamps.append(time.monotonic())
        strategy = _TimedFedAvg(
            stamps, fraction_evaluate=0.0, min_available_nodes=n, min_train_nodes=n
        )
        strategy.start(grid=grid, initial_arrays=_initial(d), num_rounds=rounds, timeout=300)

    return app


def _coded_server(
    n: int, d: int, rounds: int, stamps: list[float], masking: str = "auto"
) -> ServerApp:
    app = ServerApp()
    s = max(1, n // 10)

    @app.main()
    def main(grid: Grid, context: Context) -> None:
        strategy = CodedSecAgg(
            FedAvg(fraction_evaluate=0.0, min_available_nodes=n, min_train_nodes=n),
            num_silos=n,
            num_stragglers=s,
            privacy_threshold=s,
            max_weight=1.0,
            masking=masking,
            round_timeout=300.0,
            progress=lambda r: stamps.append(time.monotonic()),
        )
        stamps.append(time.monotonic())
        strategy.start(grid=grid, initial_arrays=_initial(d), num_rounds=rounds)
        bad = [r.reason for r in strategy.reports if not r.ok]
        if bad:
            raise RuntimeError(f"coded rounds aborted: {bad}")

    return app


def _secaggplus(
    n: int, d: int, rounds: int, stamps: list[float], *, shares: int, threshold: int
) -> tuple[ServerApp, ClientApp]:
    from flwr.client import NumPyClient
    from flwr.client.mod import secaggplus_mod
    from flwr.common import ndarrays_to_parameters
    from flwr.server import LegacyContext, ServerConfig
    from flwr.server.strategy import FedAvg as LegacyFedAvg
    from flwr.server.workflow import DefaultWorkflow, SecAggPlusWorkflow

    dropped = _dropped(n)

    class Timed(LegacyFedAvg):
        def aggregate_fit(self, server_round, results, failures):  # type: ignore[no-untyped-def]
            out = super().aggregate_fit(server_round, results, failures)
            stamps.append(time.monotonic())
            return out

    server = ServerApp()

    @server.main()
    def main(grid: Grid, context: Context) -> None:
        strategy = Timed(
            fraction_fit=1.0,
            fraction_evaluate=0.0,
            min_fit_clients=n,
            min_available_clients=n,
            initial_parameters=ndarrays_to_parameters([np.zeros(d, np.float32)]),
        )
        legacy = LegacyContext(
            context=context, config=ServerConfig(num_rounds=rounds), strategy=strategy
        )
        workflow = DefaultWorkflow(
            fit_workflow=SecAggPlusWorkflow(
                num_shares=shares, reconstruction_threshold=threshold, timeout=120
            )
        )
        stamps.append(time.monotonic())
        workflow(grid, legacy)

    class Client(NumPyClient):
        def __init__(self, site: int) -> None:
            self.site = site

        def fit(self, parameters, config):  # type: ignore[no-untyped-def]
            if self.site in dropped:
                raise RuntimeError("dropped (benchmark fault)")
            return [_update(parameters[0], self.site, 0)], 1, {}

    client = ClientApp(
        client_fn=lambda ctx: Client(int(ctx.node_config["partition-id"])).to_client(),
        mods=[secaggplus_mod],
    )
    return server, client


def ray_actors(n: int, *, quick: bool) -> int:
    """Ray actors (ClientApp processes) for ``n`` silos: one per silo at full size; a quick run
    (a check that it runs, no goal) puts them on 2, since each actor is a process that imports
    torch, Flower and coded-fl (about 6 CPU seconds on 2 cores), more than its rounds cost."""
    return min(n, 2) if quick else n


def _simulate(server: ServerApp, client: ClientApp, n: int, *, actors: int) -> None:
    """``n`` silos on ``actors`` Ray actors (ClientApp processes)."""
    from flwr.simulation import run_simulation

    root = str(Path(__file__).resolve().parents[2])
    if root not in os.environ.get("PYTHONPATH", "").split(os.pathsep):
        os.environ["PYTHONPATH"] = os.pathsep.join(
            p for p in (root, os.environ.get("PYTHONPATH")) if p
        )
    os.environ.update(QUIET_LOGS)
    offline_environment()
    run_simulation(
        server_app=server,
        client_app=client,
        num_supernodes=n,
        backend_config={
            "client_resources": {"num_cpus": 1},
            "init_args": {"num_cpus": actors, "logging_level": "ERROR"},
        },
    )


def _per_round(stamps: list[float]) -> list[float]:
    return [b - a for a, b in itertools.pairwise(stamps)]


def run(report: Report, *, quick: bool) -> None:
    sizes = [4] if quick else [10, 20]
    d = 10_000 if quick else 1_000_000
    rounds = 3 if quick else 10  # full size: the median of 9 rounds (plain FedAvg pulls every
    # 0.1 s in simulation, so its round times fall on a 0.1 s grid: a few rounds are noisy)
    report.config = {
        "d": d,
        "silos": sizes,
        "rounds": rounds,
        "dropout": "10% (at least 1)",
        "ray_actors": [ray_actors(n, quick=quick) for n in sizes],
        "figure": "median wall seconds per round over rounds 2..R",
    }
    for n in sizes:
        actors = ray_actors(n, quick=quick)
        variants: dict[str, Callable[[list[float]], tuple[ServerApp, ClientApp]]] = {
            "plain FedAvg (Message API)": lambda st, n=n: (
                _plain_server(n, d, rounds, st),
                _client(n, coded=False),
            ),
            FLOOR: lambda st, n=n: (
                _plain_server(n, d, rounds, st),
                _client(n, coded=False, floor=True),
            ),
            SHARES: lambda st, n=n: (
                _coded_server(n, d, rounds, st, masking="shares"),
                _client(n, coded=True),
            ),
            ALIGNED: lambda st, n=n: (
                _coded_server(n, d, rounds, st),  # the default: aligned here
                _client(n, coded=True),
            ),
            "SecAgg+ full graph": lambda st, n=n: _secaggplus(
                n, d, rounds, st, shares=n, threshold=max(2, n // 2)
            ),
        }
        if not quick:
            variants["SecAgg+ num_shares=5"] = lambda st, n=n: _secaggplus(
                n, d, rounds, st, shares=5, threshold=3
            )
        medians: dict[str, float] = {}
        for name, build in variants.items():
            stamps: list[float] = []
            t0 = time.monotonic()
            server, client = build(stamps)
            _simulate(server, client, n, actors=actors)
            per = _per_round(stamps)
            if len(per) < rounds:
                report.notes.append(f"n={n} {name}: only {len(per)} of {rounds} rounds finished")
            later = per[1:] if len(per) > 1 else per
            medians[name] = statistics.median(later) if later else float("nan")
            report.add(
                n=n,
                d=d,
                variant=name,
                seconds_per_round=medians[name],
                rounds=per,
                run_seconds=time.monotonic() - t0,
            )
        ours = medians[ALIGNED]  # the default masking
        plain = medians["plain FedAvg (Message API)"]
        full = medians["SecAgg+ full graph"]
        five = medians.get("SecAgg+ num_shares=5")
        floor = medians[FLOOR]
        # context (not goals): the reference against plain FedAvg, and SecAgg+ against it
        floor_ratios = {
            "floor_over_plain": floor / plain,
            "secaggplus_full_over_floor": full / floor,
        }
        if five is not None:
            floor_ratios["secaggplus_5_over_floor"] = five / floor
        report.add(n=n, kind="floor", **floor_ratios)
        # context (not goals), for both maskings: ours against plain FedAvg and SecAgg+ against
        # ours; masking="aligned" takes one round trip once the edge keys are dealt (rounds
        # 3..R here; round 2 is in its median)
        for tag, value in (("ours", medians[SHARES]), ("aligned", ours)):
            ratios = {
                f"{tag}_over_floor": value / floor,
                f"{tag}_over_plain": value / plain,
                f"secaggplus_full_over_{tag}": full / value,
            }
            if five is not None:
                ratios[f"secaggplus_5_over_{tag}"] = five / value
            report.add(n=n, kind="ratios", **ratios)
        # the goal: what ours adds to the s + 1 trainings of any gradient code, and gains by
        # not waiting for the dropped silos, against FedAvg doing the same trainings
        report.goal(
            f"ours (default masking) <= 0.9x plain FedAvg with s+1 trainings per silo, "
            f"s/round at n={n}",
            ours / floor,
            0.9,
            applies=not quick,
        )
