"""Flower apps for the integration tests: a deterministic linear model on seeded data.

Everything a scenario needs is in the messages (no run config: ``run_simulation`` has none), so
one simulation can run several scenarios in a row. A site (``node_config["partition-id"]``) listed
in the train config's ``test-fail-sites`` raises; one in ``test-nan-sites`` returns NaN weights.
"""

from __future__ import annotations

import os
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp

from clients import coded_secagg_mod

D_IN, D_OUT = 12, 3


def initial_arrays() -> ArrayRecord:
    g = torch.Generator().manual_seed(123)
    return ArrayRecord(
        {"w": torch.randn(D_OUT, D_IN, generator=g) * 0.1, "b": torch.zeros(D_OUT)}  # type: ignore[dict-item]
    )


def partition_data(k: int) -> tuple[torch.Tensor, torch.Tensor, int]:
    g = torch.Generator().manual_seed(1000 + k)
    n = 40 + 7 * k  # unequal sizes: weights matter
    x = torch.randn(n, D_IN, generator=g)
    target = torch.randn(D_OUT, D_IN, generator=g) * 0.3
    y = x @ target.T + 0.01 * torch.randn(n, D_OUT, generator=g)
    return x, y, n


def local_update(
    state: dict[str, torch.Tensor], k: int, lr: float = 0.1, steps: int = 3
) -> tuple[dict[str, torch.Tensor], int, float]:
    """Full-batch gradient descent on partition k: deterministic, no RNG at all."""
    w = state["w"].clone().requires_grad_(True)
    b = state["b"].clone().requires_grad_(True)
    x, y, n = partition_data(k)
    loss = torch.tensor(0.0)
    for _ in range(steps):
        loss = ((x @ w.T + b - y) ** 2).mean()
        gw, gb = torch.autograd.grad(loss, [w, b])
        with torch.no_grad():
            w -= lr * gw
            b -= lr * gb
    return {"w": w.detach(), "b": b.detach()}, n, loss.item()


def fedavg_reference(
    state: dict[str, torch.Tensor], partitions: list[int]
) -> dict[str, torch.Tensor]:
    """Exact (float64) FedAvg of the partitions' local models."""
    ups = [local_update(state, k) for k in partitions]
    total = sum(n for _, n, _ in ups)
    return {
        name: sum(u[name].double() * n for u, n, _ in ups) / total  # type: ignore[misc]
        for name in state
    }


def _csv(config: Any, key: str) -> set[int]:
    raw = str(config.get(key, "")) if config is not None else ""
    return {int(v) for v in raw.split(",") if v.strip()}


def fault_mod(msg: Message, context: Context, call_next):  # type: ignore[no-untyped-def]
    """Test faults, keyed by site (the node's own partition-id, before coded_secagg_mod):
    ``test-fail-sites`` raise; ``test-reset-sites`` lose their node state in round
    ``test-reset-round`` (a restarted node)."""
    if msg.metadata.message_type.startswith("train") and "config" in msg.content:
        site = int(context.node_config["partition-id"])
        conf = msg.content["config"]
        if site in _csv(conf, "test-fail-sites"):
            raise RuntimeError(f"site {site} failed (test fault)")
        if site in _csv(conf, "test-reset-sites") and int(conf["server-round"]) == int(
            conf.get("test-reset-round", -1)
        ):
            for key in list(context.state.keys()):  # the node restarted: its state is gone
                del context.state[key]
    return call_next(msg, context)


def _train(msg: Message, context: Context) -> Message:
    arrays = msg.content["arrays"]
    state = {k: torch.from_numpy(np.array(v.numpy())) for k, v in arrays.items()}
    k = int(context.node_config["partition-id"])
    new, n, loss = local_update(state, k)
    if k in _csv(msg.content["config"], "test-nan-sites"):
        new["w"][0, 0] = float("nan")
    metrics = MetricRecord({"num-examples": n, "train_loss": loss})
    return Message(
        RecordDict({"arrays": ArrayRecord(new), "metrics": metrics}),  # type: ignore[arg-type]
        reply_to=msg,
    )


def client_app(*, with_mod: bool = True) -> ClientApp:
    app = ClientApp(mods=[fault_mod, coded_secagg_mod] if with_mod else [fault_mod])

    @app.train()
    def train(msg: Message, context: Context) -> Message:
        return _train(msg, context)

    @app.evaluate()
    def evaluate(msg: Message, context: Context) -> Message:
        return Message(
            RecordDict({"metrics": MetricRecord({"num-examples": 1, "eval_ok": 1.0})}), reply_to=msg
        )

    return app


@dataclass
class Outcome:
    """What one scenario produced (or the exception it raised), for the test to assert on."""

    value: Any = None
    error: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def server_app(scenarios: dict[str, Callable[[Grid], Any]], results: Path) -> ServerApp:
    """Run every scenario in order; pickle the outcomes to ``results`` (the ServerApp may run in
    another thread or process than the test)."""
    import pickle

    app = ServerApp()

    @app.main()
    def main(grid: Grid, context: Context) -> None:
        out: dict[str, Outcome] = {}
        for name, fn in scenarios.items():
            try:
                out[name] = Outcome(value=fn(grid))
            except Exception as exc:  # the test asserts on the message
                out[name] = Outcome(
                    error=f"{type(exc).__name__}: {exc}", extra={"trace": traceback.format_exc()}
                )
        results.write_bytes(pickle.dumps(out))

    return app


def as_numpy(arrays: ArrayRecord) -> dict[str, np.ndarray]:
    return {k: np.array(v.numpy()) for k, v in arrays.items()}


def train_config(**kv: Any) -> ConfigRecord:
    return ConfigRecord({k: v for k, v in kv.items()})


def pythonpath_for_workers() -> None:
    """Ray workers must import this package and the project: put the repo on PYTHONPATH."""
    root = str(Path(__file__).resolve().parents[2])
    parts = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if root not in parts:
        os.environ["PYTHONPATH"] = os.pathsep.join([root, *parts])
