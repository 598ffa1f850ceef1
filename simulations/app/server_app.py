"""ServerApp of the main job: coded secure aggregation around FedAvg, then plain FedAvg on the
same data and seeds for comparison, and a summary.

Every knob is a run-config key (``[tool.flwr.app.config]`` in pyproject.toml, README table).
"""

from __future__ import annotations

import logging
import time

import torch
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, MetricRecord, RecordDict
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import FedAvg

from simulations.app.task import Net, make_evaluator
from strategies import CodedSecAgg, RoundReport
from strategies.exchange import Exchange
from strategies.placement import ShuffledTraining
from strategies.shuffle import ShuffleRelay

LOG = logging.getLogger("flwr")
app = ServerApp()


def _plain_fedavg(  # type: ignore[no-untyped-def]
    grid: Grid,
    arrays: ArrayRecord,
    rounds: int,
    n: int,
    timeout: float,
    run_id: str,
    evaluate,
    log_round,
) -> tuple[ArrayRecord, float, list[float]]:
    """Plain FedAvg (Message API) that waits for every silo or the timeout, each round."""
    fedavg = FedAvg(fraction_evaluate=0.0, min_available_nodes=n, min_train_nodes=n)
    ex = Exchange(grid)
    times = []
    for r in range(1, rounds + 1):
        t0 = time.monotonic()
        msgs = [
            Message(
                content=m.content, dst_node_id=m.metadata.dst_node_id, message_type="train.plain"
            )
            for m in fedavg.configure_train(
                r, arrays, ConfigRecord({"codedfl-run-id": run_id}), grid
            )
        ]
        replies: list[Message] = []

        def keep(node: int, reply: Message, replies: list[Message] = replies) -> bool:
            replies.append(reply)
            return False  # wait for every silo (or the timeout)

        ex.collect(ex.push(msgs, stage="plain", round_=r), keep, deadline=t0 + timeout)
        ok = [m for m in replies if not m.has_error()]
        new, _ = fedavg.aggregate_train(r, ok) if ok else (None, None)
        if new is not None:
            arrays = new
        times.append(time.monotonic() - t0)
        acc = evaluate(r, arrays)["accuracy"]
        log_round(
            f"[plain FedAvg] round {r}: {len(ok)}/{n} replies (waited for all or "
            f"{timeout:.0f}s), round {times[-1]:.2f}s, accuracy={acc:.4f}"
        )
    return arrays, sum(times), times


def _warm_up(grid: Grid, n: int, timeout: float) -> tuple[int, float]:
    """Start every node's ClientApp once before anything is timed (simulation: the Ray actors,
    imports, torch and the data). Returns (nodes that answered, seconds)."""
    t0 = time.monotonic()
    nodes = list(grid.get_node_ids())
    while len(nodes) < n and time.monotonic() < t0 + timeout:  # nodes may still be connecting
        time.sleep(0.5)
        nodes = list(grid.get_node_ids())
    nodes = nodes[:n]
    ex = Exchange(grid)
    msgs = [
        Message(content=RecordDict(), dst_node_id=node, message_type="query.warmup")
        for node in nodes
    ]
    answered: list[Message] = []

    def keep(node: int, reply: Message) -> bool:
        answered.append(reply)
        return len(answered) >= len(nodes)

    ex.collect(ex.push(msgs, stage="warm-up", round_=0), keep, deadline=t0 + timeout)
    return sum(not m.has_error() for m in answered), time.monotonic() - t0


def _timed(evaluate, spent: list[float]):  # type: ignore[no-untyped-def]
    """``evaluate`` that adds the seconds it takes to ``spent``."""

    def timed(server_round: int, arrays: ArrayRecord) -> MetricRecord:
        t0 = time.monotonic()
        try:
            return evaluate(server_round, arrays)
        finally:
            spent.append(time.monotonic() - t0)

    return timed


def _replica_line(reports: list[RoundReport]) -> str:
    """How much replicas of partitions disagreed over the run (sites whose machines differ)."""
    done = [r for r in reports if r.ok]
    return (
        f"replicas: {sum(r.disagreeing for r in done)} checked coordinate(s) disagreed, "
        f"{sum(r.corrected for r in done)} corrected, {sum(r.erased for r in done)} erased "
        f"over {len(done)} completed round(s)"
    )


def _shuffle_lines(run: ShuffledTraining) -> list[str]:
    """Bytes the placement and the reshuffles moved (coded vs plain copying)."""
    coded = sum(e.coded_bytes for e in run.epochs)
    plain = sum(e.plain_bytes for e in run.epochs)
    shuffle_s = sum(e.seconds for e in run.epochs)
    return [
        f"coded shuffling: placement + {len(run.epochs) - 1} reshuffle(s), {coded:,} B coded vs "
        f"{plain:,} B plain copying (t={run.t}), {shuffle_s:.1f}s",
        *(f"  {e.line()}" for e in run.epochs),
    ]


@app.main()
def main(grid: Grid, context: Context) -> None:
    rc = context.run_config
    n = int(rc["num-silos"])
    rounds = int(rc["num-rounds"])
    seed = int(rc["seed"])
    torch.manual_seed(seed)
    initial = ArrayRecord(Net().state_dict())
    evaluate = make_evaluator(seed)

    def say(line: str) -> None:
        print(line, flush=True)

    def progress(rep: RoundReport) -> None:
        say(rep.line())

    strategy = CodedSecAgg(
        FedAvg(fraction_evaluate=0.0, min_available_nodes=n, min_train_nodes=n),
        num_silos=n,
        num_stragglers=int(rc["num-stragglers"]),
        privacy_threshold=int(rc["privacy-threshold"]),
        recovery_threshold=int(rc["recovery-threshold"]) or None,
        clip_range=float(rc["clip-range"]),
        adaptive_clip=bool(rc.get("adaptive-clip", True)),
        scale=float(rc["scale"]) or None,
        max_weight=float(rc["max-weight"]) or None,
        metric_keys=("train_loss",),
        extra_replies=int(rc["extra-replies"]),
        code=str(rc.get("code", "auto")),
        masking=str(rc.get("masking", "auto")),
        headroom_bits=int(rc.get("headroom-bits", 8)),
        max_erased_fraction=float(rc.get("max-erased-fraction", 0.01)),
        round_timeout=float(rc["round-timeout"]),
        progress=progress,
    )
    say(
        f"[coded-fl] {n} silos, {rounds} rounds, stragglers {rc['straggler-delays']!s} (site:s), "
        f"dropped site(s) {rc['dropout-sites']!s}"
    )
    warm, warm_s = _warm_up(grid, n, float(rc["round-timeout"]))
    say(f"[warm-up] {warm}/{n} nodes started in {warm_s:.1f}s (once, before both timed runs)")
    ours_eval: list[float] = []
    t0 = time.monotonic()
    shuffled = None
    if str(rc.get("placement", "shared")) == "shuffle":
        # silos start with their own data; coded shuffling places the code's replicas
        shuffled = ShuffledTraining(
            strategy,
            ShuffleRelay(
                grid, stage_timeout=float(rc.get("shuffle-timeout", 60.0)), progress=LOG.info
            ),
            units_per_silo=int(rc.get("units-per-silo", 8)),
            reshuffle_every=int(rc.get("reshuffle-every", 5)),
            seed=seed,
            progress=say,
        )
        result = shuffled.start(grid, initial, rounds, evaluate_fn=_timed(evaluate, ours_eval))
    else:
        result = strategy.start(
            grid=grid,
            initial_arrays=initial,
            num_rounds=rounds,
            evaluate_fn=_timed(evaluate, ours_eval),
        )
    ours_seconds = time.monotonic() - t0
    ours_acc = evaluate(rounds, result.arrays)["accuracy"]
    reports = strategy.reports
    completed = sum(r.ok for r in reports)
    ran, wait_all = strategy.waiting_estimate()
    # what coded-fl pays once per run: keys, the kernels' compilation on each silo (at the key
    # exchange), Flower's start of the strategy; not in the rounds, not in the evaluation
    once = ours_seconds - ran - sum(ours_eval)
    # (with placement="shuffle", the placement and the reshuffles are in it too)

    plain_mode = str(rc["compare-plain"])
    lines = [
        "",
        "==================== coded-fl summary ====================",
        f"coded secure aggregation: {completed}/{rounds} rounds completed, final accuracy "
        f"{ours_acc:.4f}, {ours_seconds:.1f}s in all = {ran:.1f}s in the rounds + "
        f"{sum(ours_eval):.1f}s server-side evaluation + {once:.1f}s once per run (keys, "
        + ("kernel compilation, coded shuffling)" if shuffled else "kernel compilation)"),
        _replica_line(reports),
    ]
    if shuffled is not None:
        lines += _shuffle_lines(shuffled)
    if plain_mode == "flower":
        plain_eval: list[float] = []
        t1 = time.monotonic()
        plain_arrays, plain_rounds_s, _ = _plain_fedavg(
            grid,
            initial,
            rounds,
            n,
            float(rc["plain-timeout"]),
            str(strategy.run_id),
            _timed(evaluate, plain_eval),
            say,
        )
        plain_seconds = time.monotonic() - t1
        plain_acc = evaluate(rounds, plain_arrays)["accuracy"]
        lines += [
            f"plain FedAvg (waits for every silo, {float(rc['plain-timeout']):.0f}s timeout): "
            f"final accuracy {plain_acc:.4f}, {plain_seconds:.1f}s in all = "
            f"{plain_rounds_s:.1f}s in the rounds + {sum(plain_eval):.1f}s server-side "
            "evaluation",
            f"accuracy difference: {100 * (ours_acc - plain_acc):+.2f} percentage points",
            f"time in the rounds: {ran:.1f}s (coded) vs {plain_rounds_s:.1f}s (plain, measured): "
            f"{plain_rounds_s - ran:+.1f}s saved by not waiting for stragglers; end to end "
            f"{ours_seconds:.1f}s vs {plain_seconds:.1f}s ({plain_seconds - ours_seconds:+.1f}s "
            f"saved, after the coded run's {once:.1f}s once per run)",
        ]
    else:
        lines.append(
            f"waiting for every silo would have taken about {wait_all:.1f}s instead of "
            f"{ran:.1f}s (late uploads time-stamped as they came; a silo that never answered "
            f"counts the {strategy.round_timeout:.0f}s round deadline)"
        )
    lines.append("==========================================================")
    for line in lines:
        say(line)
