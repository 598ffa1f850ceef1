"""One placement setting in a Flower simulation: silos start with their own data, coded shuffling
places the gradient code's partitions (and reshuffles them every E rounds), coded secure
aggregation trains on them.

``python -m simulations.placement.flower --out FILE.json --alpha 0.3 --every 5 ...`` (the
``placement`` benchmark runs one child per setting and reads FILE.json).

The apps are the main job's (:mod:`simulations.app.client_app`: ``own_data_mod`` fills each
silo's store with its own Dirichlet(alpha) partition, ``silo_data_mod`` + the train function
read partition k from the store); ``run_simulation`` passes no run config, so ``config_mod``
gives every ClientApp call this setting's run config.
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from pathlib import Path
from typing import Any

import torch
from flwr.app import ArrayRecord, Context, Error, Message
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import FedAvg

from clients import coded_secagg_mod
from clients.data import silo_data_mod
from clients.shuffle import register_shuffle
from coded_fl.shuffling.transport.wire import DeliverRequest, decode
from coded_fl.vocabulary import SHUFFLE_ACTION, SHUFFLE_KEY, read_frame
from simulations.app.client_app import _fit, own_data_mod
from simulations.app.task import Net, make_evaluator
from simulations.runtime.flower_sim import run_simulation
from strategies import CodedSecAgg
from strategies.placement import ShuffledTraining
from strategies.shuffle import ShuffleRelay

torch.set_num_threads(1)


def make_drop_mod(silo: int, epoch: int):  # type: ignore[no-untyped-def]
    """Silo ``silo`` fails its delivery in shuffle epoch ``epoch`` (a site that drops in the
    middle of a placement or reshuffle: it commits nothing of that epoch)."""

    def drop_mod(msg: Message, context: Context, call_next):  # type: ignore[no-untyped-def]
        raw = (
            read_frame(msg.content, SHUFFLE_KEY)
            if msg.metadata.message_type.endswith(SHUFFLE_ACTION)
            else None
        )
        if raw is not None and int(context.node_config["partition-id"]) == silo:
            packet = decode(raw)
            if isinstance(packet, DeliverRequest) and any(
                m.epoch == epoch for m in packet.messages
            ):
                return Message(
                    Error(code=0, reason=f"silo {silo} dropped (injected)"), reply_to=msg
                )
        return call_next(msg, context)

    return drop_mod


def make_client_app(run_config: dict[str, Any], mods: tuple[Any, ...] = ()) -> ClientApp:
    def config_mod(msg: Message, context: Context, call_next):  # type: ignore[no-untyped-def]
        ctx = Context(
            run_id=context.run_id,
            node_id=context.node_id,
            node_config=context.node_config,
            state=context.state,
            run_config=run_config,  # type: ignore[arg-type]
        )
        return call_next(msg, ctx)

    app = ClientApp(mods=[config_mod, *mods, own_data_mod, silo_data_mod, coded_secagg_mod])
    register_shuffle(app)

    @app.train()
    def fit(msg: Message, context: Context) -> Message:
        return _fit(msg, context, int(msg.content["config"]["codedfl.seed"]))

    return app


def make_server_app(opts: argparse.Namespace, out: dict[str, Any]) -> ServerApp:
    app = ServerApp()
    evaluate = make_evaluator(opts.seed)

    @app.main()
    def main(grid: Grid, context: Context) -> None:
        n = opts.silos
        torch.manual_seed(opts.seed)
        strategy = CodedSecAgg(
            FedAvg(fraction_evaluate=0.0, min_available_nodes=n, min_train_nodes=n),
            num_silos=n,
            num_stragglers=opts.s,
            privacy_threshold=opts.T,
            code=opts.code,
            metric_keys=("train_loss",),
            round_timeout=600.0,
            progress=lambda rep: print(rep.line(), flush=True),
        )
        run = ShuffledTraining(
            strategy,
            ShuffleRelay(grid, stage_timeout=120.0, reuse_keys=not opts.fresh_keys),
            units_per_silo=opts.units,
            reshuffle_every=opts.every,
            reshuffle=opts.reshuffle,
            seed=opts.seed,
            progress=lambda line: print(line, flush=True),
        )
        t0 = time.monotonic()
        result = run.start(grid, ArrayRecord(Net().state_dict()), opts.rounds, evaluate_fn=evaluate)
        out["wall_seconds"] = time.monotonic() - t0
        acc = result.evaluate_metrics_serverapp
        out["accuracy"] = [float(acc[r]["accuracy"]) for r in sorted(acc)]  # type: ignore[arg-type]
        out["rounds_ok"] = [bool(r.ok) for r in run.reports]
        out["stragglers"] = [list(r.stragglers) for r in run.reports]
        out["round_errors"] = [{str(k): v for k, v in r.errors.items()} for r in run.reports]
        out["shuffles"] = [
            {**e.__dict__, "complete": list(e.complete), "incomplete": list(e.incomplete)}
            for e in run.epochs
        ]
        out["shuffle_seconds"] = sum(e.seconds for e in run.epochs)
        out["reshuffle_seconds"] = sum(e.seconds for e in run.epochs[1:])
        out["round_seconds"] = sum(r.seconds for r in run.reports)
        job = run.results[0].job
        out["message_bytes"] = [res.message_bytes for res in run.results]
        out["transfers"] = [
            {
                "uplink_bytes": res.uplink_bytes,
                "downlink_bytes": res.downlink_bytes,
                "uncoded_uplink_bytes": res.uncoded_uplink_bytes,
                "uncoded_downlink_bytes": res.uncoded_downlink_bytes,
            }
            for res in run.results
        ]
        out["stage_seconds"] = [dict(res.seconds) for res in run.results]
        out["keys_reused"] = [res.keys_reused for res in run.results]
        out["support_partitions_per_silo"] = int(run.support.sum(axis=1).max())
        out["n_units"] = len(job.units)
        out["jobs"] = [res.job.to_json() for res in run.results]

    return app


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m simulations.placement.flower")
    ap.add_argument("--out", required=True)
    ap.add_argument("--silos", type=int, default=10)
    ap.add_argument("--s", type=int, default=2)
    ap.add_argument("--T", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--every", type=int, default=0, help="reshuffle every E rounds (0: never)")
    ap.add_argument("--alpha", type=float, default=0.3, help="0: IID own data")
    ap.add_argument("--code", default="auto", help="the gradient code (auto: repetition)")
    ap.add_argument("--reshuffle", default="auto", help="coded, uniform or auto")
    ap.add_argument("--units", type=int, default=8, help="units per silo")
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--lr", type=float, default=0.1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--actors", type=int, default=2)
    ap.add_argument("--drop-silo", type=int, default=-1, help="silo that fails a delivery")
    ap.add_argument("--drop-epoch", type=int, default=1, help="the shuffle epoch it fails")
    ap.add_argument(
        "--fresh-keys",
        action="store_true",
        help="agree a fresh group key every epoch (default: continue it where safe)",
    )
    opts = ap.parse_args(argv)
    run_config = {
        "placement": "shuffle",
        "dirichlet-alpha": opts.alpha,
        "units-per-silo": opts.units,
        "seed": opts.seed,
        "local-epochs": opts.epochs,
        "learning-rate": opts.lr,
        "batch-size": 32,
    }
    out: dict[str, Any] = {**vars(opts), "run_config": run_config}
    logging.getLogger("flwr").setLevel(logging.WARNING)
    t0 = time.monotonic()
    run_simulation(
        make_server_app(opts, out),
        make_client_app(
            run_config,
            (make_drop_mod(opts.drop_silo, opts.drop_epoch),) if opts.drop_silo >= 0 else (),
        ),
        num_supernodes=opts.silos,
        virtual_cpus=opts.actors,
    )
    out["seconds"] = time.monotonic() - t0
    Path(opts.out).write_text(json.dumps(out, indent=1) + "\n")
    return 0 if "accuracy" in out else 1


if __name__ == "__main__":
    raise SystemExit(main())
