"""ClientApp of the main job: an ordinary Flower client plus the coded-fl mod.

With ``placement = "shuffle"`` (run config) a silo starts with its own Dirichlet data only
(``own_data_mod`` puts it in the silo's store before the first shuffle), coded shuffling
places and reshuffles the partitions, and the train function reads partition k from the
store (:func:`clients.data.partition_tensors`). Otherwise every silo loads its partitions from
the shared dataset.
"""

from __future__ import annotations

import os
import time

import torch
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

from clients import coded_secagg_mod
from clients.data import partition_tensors, seed_own_data, silo_data_mod
from clients.mod import partition_seed
from clients.shuffle import register_shuffle, silo_store
from coded_fl.kernels import warm_up
from coded_fl.vocabulary import PARTITION_UNITS_ENTRY, SHUFFLE_ACTION
from simulations.app.faults import fault_injection_mod
from simulations.app.silo_torch import silo_torch_mod
from simulations.app.task import load_partition, make_net, own_examples, test, train

torch.set_num_threads(1)
# silo_torch_mod applies the run config's threads-per-silo / deterministic (see its module);
# it sits outside coded_secagg_mod, which is the one place that knows the silo's own index


def own_data_mod(msg: Message, context: Context, call_next):  # type: ignore[no-untyped-def]
    """Before this silo's first shuffle (``placement = "shuffle"``): fill its empty store with
    its own Dirichlet partition, the only data a silo has at the start."""
    cfg = context.run_config
    if (
        msg.metadata.message_type.endswith(SHUFFLE_ACTION)
        and cfg.get("placement") == "shuffle"
        and silo_store(context).epoch is None  # empty: the run starts
    ):
        site = int(context.node_config["partition-id"])
        seed_own_data(
            context,
            own_examples(
                site,
                int(context.node_config["num-partitions"]),
                seed=int(cfg.get("seed", 0)),
                alpha=float(cfg.get("dirichlet-alpha", 0.0)),
            ),
            units_per_silo=int(cfg.get("units-per-silo", 8)),
        )
    return call_next(msg, context)


app = ClientApp(
    mods=[own_data_mod, fault_injection_mod, silo_torch_mod, silo_data_mod, coded_secagg_mod]
)
register_shuffle(app)  # answers the coded shuffling of placement = "shuffle"


def _fit(msg: Message, context: Context, seed: int) -> Message:
    cfg = context.run_config
    net = make_net(int(cfg.get("model-width", 1)))
    net.load_state_dict(msg.content["arrays"].to_torch_state_dict())
    conf = msg.content.config_records.get("config")
    if conf is not None and PARTITION_UNITS_ENTRY in conf:  # placed by coded shuffling
        pixels, y = partition_tensors(msg, context)
        x = pixels.float().div(255.0)
    else:
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
    """Before both timed runs: start this node's ClientApp (imports, torch and its first
    training step, the data) once, so that neither coded-fl nor plain FedAvg pays for it in
    its timings. The reply says what
    this ClientApp process computes with (``site``: its partition-id, the CPU kernels torch
    chose, which ``ATEN_CPU_CAPABILITY`` in the SuperNode's environment sets, and its torch
    threads): the server's report shows which sites really differ.

    It also loads coded-fl's numba kernels into this process (``kernel-seconds`` in the reply:
    the server reports them as coded-fl's share of the warm-up): from numba's on-disk cache,
    which ``scripts/setup.sh`` fills, so nothing compiles here; the key exchange would
    otherwise pay for it (:func:`coded_fl.kernels.warm_up`)."""
    cfg = context.run_config
    x, y = load_partition(
        int(context.node_config["partition-id"]),
        int(context.node_config["num-partitions"]),
        seed=int(cfg.get("seed", 0)),
        alpha=float(cfg.get("dirichlet-alpha", 0.0)),
    )
    # torch's first training step in a process costs about 1 s (its CPU kernels' set-up): one
    # batch here, on a throwaway model, so that it falls in neither timed run (the second run,
    # plain FedAvg, would otherwise find it paid by the first)
    batch = int(cfg.get("batch-size", 32))
    train(
        make_net(int(cfg.get("model-width", 1))),
        x[:batch],
        y[:batch],
        epochs=1,
        lr=0.0,
        batch_size=batch,
        seed=0,
    )
    t0 = time.perf_counter()
    warm_up()
    kernel_seconds = time.perf_counter() - t0
    site = ConfigRecord(
        {
            "partition-id": int(context.node_config["partition-id"]),
            "cpu-capability": str(torch.backends.cpu.get_cpu_capability()),
            "torch-threads": torch.get_num_threads(),
            "aten-cpu-capability": os.environ.get("ATEN_CPU_CAPABILITY", ""),
            "pid": os.getpid(),
            "kernel-seconds": kernel_seconds,
        }
    )
    return Message(RecordDict({"metrics": MetricRecord({"ok": 1}), "site": site}), reply_to=msg)


@app.evaluate()
def evaluate(msg: Message, context: Context) -> Message:
    net = make_net(int(context.run_config.get("model-width", 1)))
    net.load_state_dict(msg.content["arrays"].to_torch_state_dict())
    x, y = load_partition(
        int(context.node_config["partition-id"]), int(context.node_config["num-partitions"])
    )
    loss, acc = test(net, x, y)
    metrics = MetricRecord({"eval_loss": loss, "eval_acc": acc, "num-examples": len(y)})
    return Message(RecordDict({"metrics": metrics}), reply_to=msg)
