"""ClientApp of the main job: an ordinary Flower client plus the coded-fl mod."""

from __future__ import annotations

import torch
from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

from clients import coded_secagg_mod
from clients.mod import partition_seed
from simulations.app.faults import fault_injection_mod
from simulations.app.silo_torch import silo_torch_mod
from simulations.app.task import Net, load_partition, test, train

torch.set_num_threads(1)
# silo_torch_mod applies the run config's threads-per-silo / deterministic (see its module);
# it sits outside coded_secagg_mod, which is the one place that knows the silo's own index
app = ClientApp(mods=[fault_injection_mod, silo_torch_mod, coded_secagg_mod])


def _fit(msg: Message, context: Context, seed: int) -> Message:
    net = Net()
    net.load_state_dict(msg.content["arrays"].to_torch_state_dict())
    cfg = context.run_config
    x, y = load_partition(
        int(context.node_config["partition-id"]),
        int(context.node_config["num-partitions"]),
        seed=int(cfg.get("seed", 0)),
        alpha=float(cfg.get("dirichlet-alpha", 0.0)),
    )
    loss = train(
        net,
        x,
        y,
        epochs=int(cfg.get("local-epochs", 1)),
        lr=float(cfg.get("learning-rate", 0.05)),
        batch_size=int(cfg.get("batch-size", 32)),
        seed=seed,
    )
    metrics = MetricRecord({"train_loss": loss, "num-examples": len(y)})
    return Message(
        RecordDict({"arrays": ArrayRecord(net.state_dict()), "metrics": metrics}), reply_to=msg
    )


@app.train()
def fit(msg: Message, context: Context) -> Message:
    # coded_secagg_mod sets a seed per (run, round, partition); any train function may use it
    return _fit(msg, context, int(msg.content["config"]["codedfl.seed"]))


@app.train("plain")
def fit_plain(msg: Message, context: Context) -> Message:
    """The plain FedAvg comparison run: the same training with the same seeds, no coded-fl."""
    seed = partition_seed(
        str(msg.content["config"]["codedfl-run-id"]),
        int(msg.content["config"]["server-round"]),
        int(context.node_config["partition-id"]),
    )
    return _fit(msg, context, seed)


@app.query("warmup")
def warmup(msg: Message, context: Context) -> Message:
    """Before both timed runs: start this node's ClientApp (imports, torch, the data) once, so
    that neither coded-fl nor plain FedAvg pays for it in its timings."""
    cfg = context.run_config
    load_partition(
        int(context.node_config["partition-id"]),
        int(context.node_config["num-partitions"]),
        seed=int(cfg.get("seed", 0)),
        alpha=float(cfg.get("dirichlet-alpha", 0.0)),
    )
    return Message(RecordDict({"metrics": MetricRecord({"ok": 1})}), reply_to=msg)


@app.evaluate()
def evaluate(msg: Message, context: Context) -> Message:
    net = Net()
    net.load_state_dict(msg.content["arrays"].to_torch_state_dict())
    x, y = load_partition(
        int(context.node_config["partition-id"]), int(context.node_config["num-partitions"])
    )
    loss, acc = test(net, x, y)
    metrics = MetricRecord({"eval_loss": loss, "eval_acc": acc, "num-examples": len(y)})
    return Message(RecordDict({"metrics": metrics}), reply_to=msg)
