"""ServerApp of the deployment app: plain FedAvg, Flower SecAgg+ or coded-fl, timed per round.

Round time, the same for every mode: from the moment the round's train requests are made to
the moment the new model is aggregated (for coded-fl: :attr:`RoundReport.seconds`; for the
others: from the strategy's ``configure_*`` to the end of its ``aggregate_*``). The report
(``report-file``) is rewritten after every round, so a run that is stopped still leaves one.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message
from flwr.common import ndarrays_to_parameters
from flwr.server import LegacyContext, ServerConfig
from flwr.server.strategy import FedAvg as LegacyFedAvg
from flwr.server.workflow import DefaultWorkflow, SecAggPlusWorkflow
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import FedAvg

from strategies import CodedSecAgg, RoundReport
from strategies.exchange import Exchange

app = ServerApp()


class _Report:
    """The run's JSON report, rewritten (atomically) after every round."""

    def __init__(self, path: str, head: dict[str, Any]) -> None:
        self.path = path
        self.data: dict[str, Any] = {**head, "rounds": [], "done": False}

    def round(self, row: dict[str, Any]) -> None:
        self.data["rounds"].append(row)
        self.write()
        print(f"[deploy] {json.dumps(row)}", flush=True)

    def write(self) -> None:
        if not self.path:
            return
        p = Path(self.path)
        tmp = p.with_name(p.name + ".tmp")
        tmp.write_text(json.dumps(self.data, indent=1))
        os.replace(tmp, p)


def _wait_for_nodes(grid: Grid, n: int, timeout: float) -> list[int]:
    """Bounded wait for n connected nodes (Flower's samplers would wait forever)."""
    deadline = time.monotonic() + timeout
    while True:
        nodes = sorted(grid.get_node_ids())
        if len(nodes) >= n:
            return nodes
        if time.monotonic() >= deadline:
            raise RuntimeError(f"only {len(nodes)} of {n} SuperNodes connected in {timeout:.0f}s")
        time.sleep(0.5)


def _node_names(grid: Grid) -> dict[int, str]:
    try:
        return {int(i.node_id): str(getattr(i, "name", "")) for i in grid.get_nodes()}
    except Exception:
        return {}


class _TimedFedAvg(FedAvg):
    """Message-API FedAvg that time-stamps its rounds."""

    def __init__(self, report: _Report, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._report = report
        self._t0 = 0.0

    def configure_train(self, server_round, arrays, config, grid):  # type: ignore[no-untyped-def]
        self._t0 = time.monotonic()
        return super().configure_train(server_round, arrays, config, grid)

    def aggregate_train(self, server_round, replies):  # type: ignore[no-untyped-def]
        replies = list(replies)
        out = super().aggregate_train(server_round, replies)
        ok = sum(not m.has_error() for m in replies)
        self._report.round(
            {
                "round": server_round,
                "seconds": time.monotonic() - self._t0,
                "ok": out[0] is not None,
                "replies": ok,
                "round_trips": 1,
            }
        )
        return out


class _TimedLegacyFedAvg(LegacyFedAvg):
    """Legacy FedAvg (under SecAgg+) that time-stamps its rounds."""

    def __init__(self, report: _Report, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._report = report
        self._t0 = 0.0

    def configure_fit(self, server_round, parameters, client_manager):  # type: ignore[no-untyped-def]
        self._t0 = time.monotonic()
        return super().configure_fit(server_round, parameters, client_manager)

    def aggregate_fit(self, server_round, results, failures):  # type: ignore[no-untyped-def]
        out = super().aggregate_fit(server_round, results, failures)
        self._report.round(
            {
                "round": server_round,
                "seconds": time.monotonic() - self._t0,
                "ok": out[0] is not None,
                "replies": len(results),
                "round_trips": 4,
            }
        )
        return out


def _plain_fast(
    grid: Grid, report: _Report, w0: np.ndarray, *, n: int, rounds: int, timeout: float
) -> None:
    """Plain FedAvg whose server pulls every 50 ms (the pull loop coded-fl uses) instead of
    Flower's ``send_and_receive``, which sleeps 3 s between pulls; waits for every reply."""
    fedavg = FedAvg(fraction_evaluate=0.0, min_available_nodes=n, min_train_nodes=n)
    ex = Exchange(grid)
    arrays = ArrayRecord({"w": Array(w0)})
    for r in range(1, rounds + 1):
        t0 = time.monotonic()
        msgs = list(fedavg.configure_train(r, arrays, ConfigRecord(), grid))
        replies: list = []

        def keep(node: int, reply: Message, replies: list = replies) -> bool:
            replies.append(reply)
            return False  # wait for every silo (or the deadline)

        ex.collect(ex.push(msgs, stage="plain", round_=r), keep, deadline=t0 + timeout)
        ok = [m for m in replies if not m.has_error()]
        new, _ = fedavg.aggregate_train(r, ok) if ok else (None, None)
        if new is not None:
            arrays = new
        row = {"round": r, "seconds": time.monotonic() - t0, "ok": new is not None}
        report.round({**row, "replies": len(ok), "round_trips": 1})


def _coded_row(rep: RoundReport, names: dict[int, str], node_of: dict[int, int]) -> dict:
    def site(silo: int) -> str:
        return names.get(node_of.get(silo, -1), "")

    return {
        "round": rep.round,
        "seconds": rep.seconds,
        "close_seconds": rep.close_seconds,
        "ok": rep.ok,
        "reason": rep.reason,
        "replies": rep.replies_used,
        "responders": rep.responders,
        "stragglers": list(rep.stragglers),
        "straggler_sites": [site(s) for s in rep.stragglers],
        "errors": {str(k): v for k, v in rep.errors.items()},
        "accused": {str(k): v for k, v in rep.accused.items()},
        "accused_sites": [site(s) for s in rep.accused],
        "suspects": list(rep.suspects),
        "offender_sites": [site(s) for s in rep.offenders],
        "excluded_sites": [site(s) for s in rep.excluded],
        "round_trips": rep.round_trips,
        "rekeyed": list(rep.rekeyed),
        "rekeyed_sites": [site(s) for s in rep.rekeyed],
    }


@app.main()
def main(grid: Grid, context: Context) -> None:
    rc = context.run_config
    mode = str(rc["mode"])
    n = int(rc["num-silos"])
    rounds = int(rc["num-rounds"])
    dim = int(rc["dim"])
    timeout = float(rc["round-timeout"])
    report = _Report(
        str(rc.get("report-file", "")),
        {"mode": mode, "num_silos": n, "dim": dim, "num_rounds": rounds},
    )
    nodes = _wait_for_nodes(grid, n, float(rc["node-wait-timeout"]))
    names = _node_names(grid)
    report.data["nodes"] = {str(k): names.get(k, "") for k in nodes}
    report.write()
    w0 = np.zeros(dim, dtype=np.float32)
    t_run = time.monotonic()
    if mode == "plain":
        strategy = _TimedFedAvg(
            report, fraction_evaluate=0.0, min_available_nodes=n, min_train_nodes=n
        )
        strategy.start(
            grid=grid,
            initial_arrays=ArrayRecord({"w": Array(w0)}),
            num_rounds=rounds,
            timeout=timeout,
            train_config=ConfigRecord(),
        )
    elif mode == "plain-fast":
        _plain_fast(grid, report, w0, n=n, rounds=rounds, timeout=timeout)
    elif mode == "secaggplus":
        legacy = _TimedLegacyFedAvg(
            report,
            fraction_fit=1.0,
            fraction_evaluate=0.0,
            min_fit_clients=n,
            min_available_clients=n,
            initial_parameters=ndarrays_to_parameters([w0]),
        )
        ctx = LegacyContext(
            context, config=ServerConfig(num_rounds=rounds, round_timeout=timeout), strategy=legacy
        )
        workflow = DefaultWorkflow(
            fit_workflow=SecAggPlusWorkflow(
                num_shares=n, reconstruction_threshold=max(2, (n + 1) // 2), timeout=timeout
            )
        )
        workflow(grid, ctx)
    elif mode == "coded":
        node_of = dict(enumerate(nodes[:n]))

        def progress(rep: RoundReport) -> None:
            print(rep.line(), flush=True)
            if rep.round == 1:  # node wait + key exchange: once per run
                report.data["setup_seconds"] = time.monotonic() - t_run - rep.seconds
            report.data["key_exchanges"] = [[r, list(s)] for r, s in strategy.key_exchanges]
            report.round(_coded_row(rep, names, node_of))

        strategy = CodedSecAgg.from_run_config(
            FedAvg(fraction_evaluate=0.0, min_available_nodes=n, min_train_nodes=n),
            rc,
            round_timeout=timeout,
            progress=progress,
        )
        strategy.start(grid=grid, initial_arrays=ArrayRecord({"w": Array(w0)}), num_rounds=rounds)
        report.data["key_exchanges"] = [[r, list(s)] for r, s in strategy.key_exchanges]
        report.data["silos"] = {str(s): names.get(node, "") for s, node in node_of.items()}
        # uploads that came after their round had closed: seconds after the round started
        report.data["late_uploads"] = {str(r): v for r, v in strategy.late_train.items()}
    else:
        raise ValueError(f"mode must be plain, plain-fast, secaggplus or coded, got {mode!r}")
    report.data["run_seconds"] = time.monotonic() - t_run
    report.data["done"] = True
    report.write()
    print(
        f"[deploy] done: {mode}, {rounds} rounds in {report.data['run_seconds']:.1f}s", flush=True
    )
