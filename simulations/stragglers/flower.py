"""Straggler latency in a real Flower simulation: plain FedAvg vs coded-fl, injected delays.

``python -m simulations.stragglers.flower --out FILE.json --nodes 50 --ns 10,20,50 ...`` (the
``stragglers`` benchmark runs it as a child process and reads FILE.json).

One Flower simulation (Ray backend) with ``--nodes`` SuperNodes and one Ray actor per node
(Ray sees that many virtual CPUs; the engine's worker pool is raised to match, see
:mod:`simulations.runtime.flower_sim`), so every silo can wait at once. For each n, the silos
are the nodes with partition-id 0..n-1, silo i = partition i.

Silo times: a mod in front of the ClientApp sleeps :math:`X_i \\sim \\mathrm{Exp}(\\mu)` before
the silo trains (``SiloTimes.draw_round``, a pure function of (seed, n, round), so plain FedAvg
and every coded run see the very same draws round by round). The real work per silo is tiny
(a d-element vector), so the sleeps dominate; sleeping holds an actor but no CPU. Rounds follow
a schedule: ``calib`` rounds (i.i.d. draws of their own, from which the benchmark measures each
scheme's fixed per-round cost: round time minus the silo time the scheme waits for), then
``iid`` rounds, then ``heavy`` rounds (5 % of the silos 5-10x slower).

- plain FedAvg: Message API, pushes a ``train.plain`` message to the n silos and waits for
  every reply (as ``FedAvg.start`` does), then ``FedAvg.aggregate_train``;
- coded-fl: ``CodedSecAgg(FedAvg(), num_stragglers=s)`` with :func:`clients.coded_secagg_mod`,
  which closes at the (n-s)-th upload.

A silo whose upload a coded round did not need is told, when the round has ended, to stop
sleeping (a flag file; it then replies with an error that the server ignores as late), and the
next round starts once every silo has finished (marker files). So no silo is still busy with
round r when round r + 1 starts: the i.i.d. per-round model of seed 003.
"""

from __future__ import annotations

import argparse
import json
import os
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
from flwr.serverapp.strategy import FedAvg

from simulations.runtime.flower_sim import mem_available, memory, run_simulation
from simulations.stragglers.costs import privacy_for
from simulations.stragglers.model import silo_times
from strategies import CodedSecAgg, RoundReport
from strategies.exchange import Exchange
from strategies.roster import RosterGrid

torch.set_num_threads(1)  # one core per silo: the actors share two
PHASES = ("calib", "iid", "heavy")
POLL = 0.02  # how often a sleeping silo looks for the "round closed" flag
ACTOR_MIB = 300  # memory one Ray actor takes once torch and coded-fl are loaded (PSS, measured)


# ---------------------------------------------------------------------------- shared schedule
def _schedule(conf: Any) -> list[tuple[str, int]]:
    return [(p, int(conf[f"bench.{p}"])) for p in PHASES]


def phase_of(conf: Any, server_round: int) -> tuple[str, int]:
    """(phase, index of the draw within the phase) of ``server_round`` (1-based)."""
    r = server_round - 1
    for phase, count in _schedule(conf):
        if r < count:
            return phase, r
        r -= count
    raise ValueError(f"round {server_round} is past the schedule")


def round_draws(conf: Any, n: int, server_round: int) -> np.ndarray:
    """The n silo times of ``server_round``: i.i.d. draws in the ``calib`` and ``iid`` phases
    (separate seeds), the heavy tail in the ``heavy`` phase."""
    phase, j = phase_of(conf, server_round)
    mu, seed = float(conf["bench.mu"]), int(conf["bench.seed"])
    model = silo_times("iid" if phase == "calib" else phase, n, mu=mu, seed=seed)
    offset = {"iid": 0, "heavy": 1000, "calib": 2000}[phase]
    return model.draw_round(seed=seed + offset, round_=j)


def _flag(conf: Any, server_round: int) -> Path:
    """The file that tells the silos of ``server_round`` that the round is over."""
    return Path(str(conf["bench.flags"])) / f"{conf['bench.tag']}-{server_round}.stop"


def _done_dir(conf: Any, server_round: int) -> Path:
    """Where each silo marks its train message of ``server_round`` as finished."""
    return Path(str(conf["bench.flags"])) / f"{conf['bench.tag']}-{server_round}"


# ---------------------------------------------------------------------------- client side
def delay_mod(msg: Message, context: Context, call_next):  # type: ignore[no-untyped-def]
    """Sleep the silo's drawn time before a train request that carries a model; stop early
    (error reply) if the server flags the round as closed."""
    kind = msg.metadata.message_type
    if kind.split(".")[0] != MessageType.TRAIN or "arrays" not in msg.content:
        return call_next(msg, context)
    conf = msg.content["config"]
    if "bench.mu" not in conf:  # the warm-up message
        return call_next(msg, context)
    silo = int(context.node_config["partition-id"])
    r = int(conf["server-round"])
    delay = float(round_draws(conf, int(conf["bench.n"]), r)[silo])
    flag = _flag(conf, r)
    end = time.monotonic() + delay
    try:
        while (left := end - time.monotonic()) > 0:
            if flag.exists():
                return Message(
                    Error(code=0, reason="round closed: straggler stopped"), reply_to=msg
                )
            time.sleep(min(POLL, left))
        return call_next(msg, context)
    finally:  # the server starts the next round only once every silo is done with this one
        done = _done_dir(conf, r)
        done.mkdir(exist_ok=True)
        (done / str(silo)).touch()


def make_client_app() -> ClientApp:
    from clients import coded_secagg_mod

    app = ClientApp(mods=[delay_mod, coded_secagg_mod])

    def _train(msg: Message, context: Context) -> Message:
        conf = msg.content["config"]
        if "bench.warmup" in conf:
            info = ConfigRecord({"partition-id": int(context.node_config["partition-id"])})
            return Message(RecordDict({"info": info}), reply_to=msg)
        x = msg.content["arrays"]["w"].numpy()
        gen = np.random.default_rng([int(conf.get("codedfl.seed", 0)), int(conf["server-round"])])
        w = (x + 0.01 * gen.standard_normal(x.shape)).astype(np.float32)
        return Message(
            RecordDict(
                {
                    "arrays": ArrayRecord({"w": Array(w)}),
                    "metrics": MetricRecord({"num-examples": 100}),
                }
            ),
            reply_to=msg,
        )

    app.train()(_train)
    app.train("plain")(_train)
    return app


# ---------------------------------------------------------------------------- server side
def _say(line: str) -> None:
    print(line, flush=True)


def _warm_up(grid: Grid, nodes: list[int], timeout: float) -> dict[int, int]:
    """One no-op message per node (imports torch and the mod in every actor); node -> pid."""
    arrays = ArrayRecord({"w": Array(np.zeros(1, dtype=np.float32))})
    msgs = [
        Message(
            RecordDict({"arrays": arrays, "config": ConfigRecord({"bench.warmup": 1})}),
            dst_node_id=node,
            message_type="train.plain",
        )
        for node in nodes
    ]
    pid: dict[int, int] = {}
    for reply in grid.send_and_receive(msgs, timeout=timeout):
        if not reply.has_error():
            pid[reply.metadata.src_node_id] = int(reply.content["info"]["partition-id"])
    if len(pid) != len(nodes):
        raise RuntimeError(f"warm-up: {len(pid)} of {len(nodes)} nodes answered in {timeout}s")
    return pid


def _plain_rounds(
    grid: Grid, nodes: list[int], arrays: ArrayRecord, conf: ConfigRecord, total: int, n: int
) -> list[dict[str, Any]]:
    fedavg = FedAvg(fraction_evaluate=0.0, min_available_nodes=n, min_train_nodes=n)
    ex = Exchange(grid)
    rows = []
    for r in range(1, total + 1):
        t0 = time.monotonic()
        msgs = [
            Message(
                content=m.content, dst_node_id=m.metadata.dst_node_id, message_type="train.plain"
            )
            for m in fedavg.configure_train(r, arrays, ConfigRecord(dict(conf.items())), grid)
        ]
        replies: list[Message] = []

        def keep(node: int, reply: Message, replies: list[Message] = replies) -> bool:
            replies.append(reply)
            return False  # wait for every silo

        ex.collect(ex.push(msgs, stage="plain", round_=r), keep, deadline=t0 + 300.0)
        ok = [m for m in replies if not m.has_error()]
        new, _ = fedavg.aggregate_train(r, ok) if ok else (None, None)
        if new is not None:
            arrays = new
        sec = time.monotonic() - t0
        phase, j = phase_of(conf, r)
        x = round_draws(conf, n, r)
        rows.append(
            {
                "round": r,
                "phase": phase,
                "draw": j,
                "seconds": sec,
                "replies": len(ok),
                "wait_all": float(x.max()),
            }
        )
        _say(
            f"[stragglers/flower] n={n} plain  round {r:2d} ({phase}): {len(ok)}/{n} replies, "
            f"{sec:.2f}s (slowest silo drew {x.max():.2f}s)"
        )
    return rows


def _coded_rounds(
    grid: Grid, arrays: ArrayRecord, conf: ConfigRecord, total: int, n: int, s: int
) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []

    def progress(rep: RoundReport) -> None:
        _flag(conf, rep.round).touch()  # stragglers: stop, the round is over
        phase, j = phase_of(conf, rep.round)
        x = np.sort(round_draws(conf, n, rep.round))
        rows.append(
            {
                "round": rep.round,
                "phase": phase,
                "draw": j,
                "seconds": rep.seconds,
                "close_seconds": rep.close_seconds,
                "ok": rep.ok,
                "replies": rep.replies_used,
                "stragglers": len(rep.stragglers),
                "wait_all": float(x[-1]),
                "wait_coded": float(x[n - s - 1]),
            }
        )
        _say(
            f"[stragglers/flower] n={n} s={s:<2d} round {rep.round:2d} ({phase}): "
            f"{'ok' if rep.ok else 'ABORTED ' + rep.reason}, closed {rep.close_seconds:.2f}s, "
            f"round {rep.seconds:.2f}s ((n-s)-th silo drew {x[n - s - 1]:.2f}s)"
        )
        # A silo still busy with round r when round r + 1 reaches it would write its stale
        # state back over the new one (Flower stores a node's context after each message):
        # wait until every silo has finished this round's train message (bounded).
        done, deadline = _done_dir(conf, rep.round), time.monotonic() + 60.0
        while time.monotonic() < deadline and (not done.exists() or len(os.listdir(done)) < n):
            time.sleep(0.01)
        time.sleep(0.05)  # the engine stores the context right after the reply

    strategy = CodedSecAgg(
        FedAvg(fraction_evaluate=0.0, min_available_nodes=n, min_train_nodes=n),
        num_silos=n,
        num_stragglers=s,
        privacy_threshold=privacy_for(n, s),
        round_timeout=300.0,
        progress=progress,
    )
    strategy.start(grid=grid, initial_arrays=arrays, num_rounds=total, train_config=conf)
    return rows


def make_server_app(opts: argparse.Namespace, out: dict[str, Any]) -> ServerApp:
    app = ServerApp()

    @app.main()
    def main(grid: Grid, context: Context) -> None:
        deadline = time.monotonic() + 300
        while len(list(grid.get_node_ids())) < opts.nodes and time.monotonic() < deadline:
            time.sleep(0.2)
        nodes = sorted(grid.get_node_ids())
        t0 = time.monotonic()
        pid = _warm_up(grid, nodes, timeout=opts.warmup_timeout)
        out["warmup_seconds"] = time.monotonic() - t0
        out["memory_after_warmup"] = memory()
        _say(
            f"[stragglers/flower] {len(nodes)} nodes warm in {out['warmup_seconds']:.1f}s; "
            f"actors etc.: {out['memory_after_warmup']}"
        )
        flags = Path(opts.flags)
        arrays = ArrayRecord({"w": Array(np.zeros(opts.d, dtype=np.float32))})
        total = opts.calib + opts.iid + opts.heavy
        for n in opts.ns:
            subset = sorted(node for node, p in pid.items() if p < n)
            view = RosterGrid(grid, subset)
            base = {
                "bench.n": n,
                "bench.mu": opts.mu,
                "bench.seed": opts.seed,
                "bench.calib": opts.calib,
                "bench.iid": opts.iid,
                "bench.heavy": opts.heavy,
                "bench.flags": str(flags),
            }
            plain = _plain_rounds(
                view, subset, arrays, ConfigRecord({**base, "bench.tag": f"plain-{n}"}), total, n
            )
            out["runs"].append({"n": n, "scheme": "plain", "s": 0, "rounds": plain})
            for s in opts.s_for[n]:
                conf = ConfigRecord({**base, "bench.tag": f"coded-{n}-{s}"})
                rows = _coded_rounds(view, arrays, conf, total, n, s)
                out["runs"].append({"n": n, "scheme": "coded", "s": s, "rounds": rows})
            out["memory"] = memory()

    return app


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m simulations.stragglers.flower")
    ap.add_argument("--out", required=True)
    ap.add_argument("--ns", default="10,20,50")
    ap.add_argument("--s", default="10:1/2/5,20:2/5/10,50:5/10/25", help="n:s/s/...,...")
    ap.add_argument("--mu", type=float, default=1.0)
    ap.add_argument("--d", type=int, default=1000)
    ap.add_argument("--calib", type=int, default=4)
    ap.add_argument("--iid", type=int, default=14)
    ap.add_argument("--heavy", type=int, default=4)
    ap.add_argument("--seed", type=int, default=3)
    ap.add_argument("--warmup-timeout", type=float, default=600.0)
    opts = ap.parse_args(argv)
    opts.ns = [int(v) for v in opts.ns.split(",")]
    opts.s_for = {
        int(k): [int(v) for v in vs.split("/")]
        for k, vs in (item.split(":") for item in opts.s.split(","))
    }
    opts.nodes = max(opts.ns)
    need = opts.nodes * ACTOR_MIB + 2048
    if mem_available() < need:
        raise SystemExit(
            f"{opts.nodes} Ray actors need about {need / 1024:.0f} GiB (measured ~{ACTOR_MIB} MiB "
            f"PSS each with torch and coded-fl loaded); only {mem_available() / 1024:.0f} GiB "
            "are available: lower the largest n (--ns)"
        )
    out: dict[str, Any] = {
        "nodes": opts.nodes,
        "mu": opts.mu,
        "d": opts.d,
        "seed": opts.seed,
        "schedule": {"calib": opts.calib, "iid": opts.iid, "heavy": opts.heavy},
        "mem_available_mib_before": mem_available(),
        "runs": [],
    }
    import tempfile

    with tempfile.TemporaryDirectory(prefix="codedfl-flags-") as flags:
        opts.flags = flags
        t0 = time.monotonic()
        run_simulation(
            make_server_app(opts, out),
            make_client_app(),
            num_supernodes=opts.nodes,
            virtual_cpus=opts.nodes,
            concurrency=opts.nodes + 4,
        )
        out["seconds"] = time.monotonic() - t0
    Path(opts.out).write_text(json.dumps(out, indent=1) + "\n")
    return 0 if out["runs"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
