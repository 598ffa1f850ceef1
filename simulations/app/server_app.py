"""ServerApp of the main job: coded secure aggregation around FedAvg, then plain FedAvg on the
same data and seeds for comparison, and a summary.

Every knob is a run-config key (``[tool.flwr.app.config]`` in pyproject.toml, README table).
``report-file`` (default ``""``: none) names a JSON file that is rewritten after every round
(so a run that fails still leaves one): per round ``ok``, ``seconds``, ``disagreeing``,
``within_tolerance``, ``erased``, ``offenders`` and the rest of
:class:`strategies.RoundReport`'s figures, the final accuracy, and what every site's ClientApp
computes with (its CPU kernels and torch threads, from the warm-up), so a test or benchmark
reads the outcome from a file, not from log lines.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, MetricRecord, RecordDict
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import FedAvg

from simulations.app.task import make_evaluator, make_net
from strategies import CodedSecAgg, RoundReport
from strategies.exchange import Exchange
from strategies.placement import ShuffledTraining
from strategies.settings import coded_secagg_settings
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
) -> tuple[ArrayRecord, float, list[float], list[int]]:
    """Plain FedAvg (Message API) that waits for every silo or the timeout, each round: the
    model, the seconds in the rounds, per round its seconds and the replies it aggregated."""
    fedavg = FedAvg(fraction_evaluate=0.0, min_available_nodes=n, min_train_nodes=n)
    ex = Exchange(grid)
    times = []
    counts = []
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
        counts.append(len(ok))
        acc = evaluate(r, arrays)["accuracy"]
        log_round(
            f"[plain FedAvg] round {r}: {len(ok)}/{n} replies (waited for all or "
            f"{timeout:.0f}s), round {times[-1]:.2f}s, accuracy={acc:.4f}"
        )
    return arrays, sum(times), times, counts


def _plain_lines(
    replies: list[int], n: int, timeout: float, acc: float, seconds: float
) -> list[str]:
    """The summary's plain FedAvg line when none of its rounds heard from any silo within its
    timeout (then nothing is compared: plain FedAvg was cut short by its own timeout, not
    outrun); empty otherwise, and the comparison stands (a straggler cut off by the timeout is
    what the baseline models)."""
    if any(replies):
        return []
    return [
        f"plain FedAvg (waits for every silo, {timeout:.0f}s timeout): no round heard from any "
        f"of the {n} silos in time (final accuracy {acc:.4f}, {seconds:.1f}s end to end): the "
        "timeout is too short for these nodes (in a deployment every message starts a "
        "ClientApp process), so no accuracy or time comparison is made; raise plain-timeout "
        "(run config) to compare",
    ]


def make_strategy(
    rc: dict[str, Any], n: int, progress: Callable[[RoundReport], None]
) -> CodedSecAgg:
    """The main job's strategy from its run config: FedAvg inside ``CodedSecAgg``, the
    ``train_loss`` metric aggregated securely, except with distributed DP
    (``dp-noise-multiplier`` > 0), where no train metric travels (it would be neither clipped
    nor noised).

    Parameters
    ----------
    rc
        The run config.
    n
        The silos.
    progress
        Called with each round's report.

    Returns
    -------
    CodedSecAgg
    """
    private = "dp" in coded_secagg_settings(rc)
    return CodedSecAgg.from_run_config(
        FedAvg(fraction_evaluate=0.0, min_available_nodes=n, min_train_nodes=n),
        rc,
        metric_keys=None if private else ("train_loss",),
        progress=progress,
    )


def _dp_line(strategy: CodedSecAgg, reports: list[RoundReport]) -> str:
    """The summary's line of distributed DP (empty without it)."""
    dp = strategy.protocol.dp
    if dp is None or not reports or reports[-1].epsilon is None:
        return ""
    keying = sum(r.keying_rounds for r in reports)
    return (
        f"distributed DP: noise_multiplier={dp.noise_multiplier:g}, clip={dp.clip:g}: "
        f"epsilon {reports[-1].epsilon:.3g} at delta={dp.delta:g} over the run (every partition "
        f"a privacy unit; the server and any privacy-threshold colluding silos cannot remove "
        f"the noise), after {keying} keying round(s) that released nothing"
    )


def _warm_up(grid: Grid, n: int, timeout: float) -> tuple[int, float, list[dict[str, Any]]]:
    """Start every node's ClientApp once before anything is timed (simulation: the Ray actors,
    imports, torch and the data). Returns (nodes that answered, seconds, what each answering
    ClientApp computes with: node, partition-id, cpu-capability, torch-threads, ...)."""
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
    sites: list[dict[str, Any]] = [
        {"node": int(m.metadata.src_node_id), **dict(m.content.config_records["site"].items())}
        for m in answered
        if not m.has_error() and "site" in m.content.config_records
    ]
    sites.sort(key=lambda row: (int(row.get("partition-id", -1)), row["node"]))
    return sum(not m.has_error() for m in answered), time.monotonic() - t0, sites


class _RunReport:
    """The run's JSON report (``report-file``), rewritten atomically after every round; a no-op
    when the path is empty."""

    def __init__(self, path: str, head: dict[str, Any]) -> None:
        self.path = path
        self.data: dict[str, Any] = {**head, "rounds": [], "completed": 0, "done": False}

    def round(self, rep: RoundReport) -> None:
        self.data["rounds"].append(_round_row(rep))
        self.data["completed"] = sum(bool(r["ok"]) for r in self.data["rounds"])
        self.write()

    def write(self) -> None:
        if not self.path:
            return
        p = Path(self.path)
        tmp = p.with_name(p.name + ".tmp")
        tmp.write_text(json.dumps(self.data, indent=1) + "\n")
        os.replace(tmp, p)


def _round_row(rep: RoundReport) -> dict[str, Any]:
    """One round of the report: :class:`RoundReport`'s figures (no arrays) and the accuracy."""
    return {
        "round": rep.round,
        "ok": rep.ok,
        "reason": rep.reason,
        "seconds": rep.seconds,
        "close_seconds": rep.close_seconds,
        "replies_used": rep.replies_used,
        "stragglers": list(rep.stragglers),
        "responders": rep.responders,
        "round_trips": rep.round_trips,
        "disagreeing": rep.disagreeing,
        "within_tolerance": rep.within_tolerance,
        "corrected": rep.corrected,
        "erased": rep.erased,
        "offenders": list(rep.offenders),
        "excluded": list(rep.excluded),
        "off_silos": {str(k): v for k, v in rep.off_silos.items()},
        "suspects": list(rep.suspects),
        "errors": {str(k): v for k, v in rep.errors.items()},
        "clipped_fraction": rep.clipped_fraction,
        "keying_rounds": rep.keying_rounds,
        "epsilon": rep.epsilon,
        "accuracy": rep.server_metrics.get("accuracy"),
        "loss": rep.server_metrics.get("loss"),
    }


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
    named = sorted({s for r in reports for s in r.offenders})
    return (
        f"replicas: {sum(r.disagreeing for r in done)} compared coordinate(s) differed, "
        f"{sum(r.within_tolerance for r in done)} within the drift tolerance, "
        f"{sum(r.corrected for r in done)} settled by their group, "
        f"{sum(r.erased for r in done)} erased over {len(done)} completed round(s)"
        + (f"; overruled and left out: silo(s) {named}" if named else "")
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
    t_main = time.time()
    rc = context.run_config
    n = int(rc["num-silos"])
    rounds = int(rc["num-rounds"])
    seed = int(rc["seed"])
    width = int(rc.get("model-width", 1))
    torch.manual_seed(seed)
    net = make_net(width)
    initial = ArrayRecord(net.state_dict())
    evaluate = make_evaluator(seed, width=width)
    report = _RunReport(
        str(rc.get("report-file", "")),
        {
            "num_silos": n,
            "num_rounds": rounds,
            "num_stragglers": int(rc["num-stragglers"]),
            "privacy_threshold": int(rc["privacy-threshold"]),
            "local_epochs": int(rc.get("local-epochs", 1)),
            "model_width": width,
            "model_parameters": sum(p.numel() for p in net.parameters()),
            "straggler_delays": str(rc["straggler-delays"]),
            "dropout_sites": str(rc["dropout-sites"]),
            "threads_per_silo": str(rc.get("threads-per-silo", "")),
        },
    )

    def say(line: str) -> None:
        print(line, flush=True)

    def progress(rep: RoundReport) -> None:
        say(rep.line())
        report.round(rep)

    strategy = make_strategy(rc, n, progress)
    say(
        f"[coded-fl] {n} silos, {rounds} rounds, stragglers {rc['straggler-delays']!s} (site:s), "
        f"dropped site(s) {rc['dropout-sites']!s}"
    )
    launch = float(rc.get("launch-time", 0.0)) or t_main  # when `flwr run` started
    # its own deadline: ten processes importing torch on two loaded cores took over 120 s (the
    # round deadline) in a fresh clone's first run, and a run that starts with cold nodes
    # spends the difference in its key exchange and round 1 instead
    warm, warm_s, sites = _warm_up(grid, n, float(rc.get("warmup-timeout", 600.0)))
    kernels_s = max((float(row.get("kernel-seconds", 0.0)) for row in sites), default=0.0)
    say(
        f"[warm-up] {warm}/{n} nodes started in {warm_s:.1f}s (once, before both timed runs; "
        f"coded-fl's kernels loaded in up to {kernels_s:.1f}s of it per silo)"
    )
    code = strategy.gradient_code(n)
    report.data.update(
        warm_up={"answered": warm, "seconds": warm_s, "kernel_seconds": kernels_s},
        # what each site's ClientApp computes with (its SuperNode's environment)
        sites=sites,
        # silo i is the i-th connected node by id (as CodedSecAgg assigns them)
        silo_nodes=sorted(grid.get_node_ids())[:n],
        code=type(code).__name__,
        groups=[list(g) for g in getattr(code, "groups", ())] or None,
    )
    report.write()
    ours_eval: list[float] = []
    t0 = time.monotonic()
    shuffled = None
    try:
        if str(rc.get("placement", "shared")) == "shuffle":
            # silos start with their own data; coded shuffling places the code's replicas
            shuffled = ShuffledTraining(
                strategy,
                ShuffleRelay(
                    grid,
                    stage_timeout=float(rc.get("shuffle-timeout", 60.0)),
                    progress=LOG.info,
                    reuse_keys=bool(rc.get("shuffle-reuse-keys", True)),
                ),
                units_per_silo=int(rc.get("units-per-silo", 8)),
                reshuffle_every=int(rc.get("reshuffle-every", 5)),
                reshuffle=str(rc.get("reshuffle", "auto")),
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
    except Exception as exc:  # the report says how the run ended, then Flower does
        report.data["error"] = f"{type(exc).__name__}: {exc}"
        report.write()
        raise
    ours_seconds = time.monotonic() - t0
    ours_acc = evaluate(rounds, result.arrays)["accuracy"]
    reports = strategy.reports
    completed = sum(r.ok for r in reports)
    report.data.update(
        final_accuracy=ours_acc, run_seconds=ours_seconds, completed=completed, done=True
    )
    dp = strategy.protocol.dp
    if dp is not None:  # distributed DP: the run's account, as the summary says it
        report.data["dp"] = {
            "epsilon": reports[-1].epsilon if reports else None,
            "delta": dp.delta,
            "noise_multiplier": dp.noise_multiplier,
            "clip": dp.clip,
            "keying_rounds": sum(r.keying_rounds for r in reports),
        }
    report.write()
    plain_mode = str(rc["compare-plain"])
    plain_seconds = 0.0
    if plain_mode != "flower":  # the estimate needs the last round's stragglers time-stamped
        strategy.settle(min(30.0, strategy.timeouts.round))
    ran, wait_all = strategy.waiting_estimate()
    # what coded-fl pays once per run: the key exchange, Flower's start of the strategy; not in
    # the rounds, not in the evaluation (with placement="shuffle", the placement and the
    # reshuffles too); the kernels load at the warm-up, from the cache scripts/setup.sh fills
    once = ours_seconds - ran - sum(ours_eval)
    keys_s = strategy.key_seconds
    lines = [
        "",
        "==================== coded-fl summary ====================",
        f"coded secure aggregation: {completed}/{rounds} rounds completed, final accuracy "
        f"{ours_acc:.4f}, {ours_seconds:.1f}s end to end = {ran:.1f}s in the rounds + "
        f"{sum(ours_eval):.1f}s server-side evaluation + {once:.1f}s once per run (key "
        f"exchange {keys_s:.1f}s, "
        + (
            f"coded shuffling and the strategy's start {once - keys_s:.1f}s)"
            if shuffled
            else f"the strategy's start {once - keys_s:.1f}s)"
        ),
        _replica_line(reports),
    ]
    dp_line = _dp_line(strategy, reports)
    if dp_line:
        lines.append(dp_line)
    if shuffled is not None:
        lines += _shuffle_lines(shuffled)
    if plain_mode == "flower":
        plain_eval: list[float] = []
        t1 = time.monotonic()
        plain_arrays, plain_rounds_s, _, plain_replies = _plain_fedavg(
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
        report.data["plain"] = {
            "final_accuracy": plain_acc,
            "rounds_seconds": plain_rounds_s,
            "replies": plain_replies,
        }
        report.write()
        lines += _plain_lines(
            plain_replies, n, float(rc["plain-timeout"]), plain_acc, plain_seconds
        ) or [
            f"plain FedAvg (waits for every silo, {float(rc['plain-timeout']):.0f}s timeout): "
            f"final accuracy {plain_acc:.4f}, {plain_seconds:.1f}s end to end = "
            f"{plain_rounds_s:.1f}s in the rounds + {sum(plain_eval):.1f}s server-side "
            "evaluation",
            f"accuracy difference: {100 * (ours_acc - plain_acc):+.2f} percentage points",
            f"time in the rounds: {ran:.1f}s (coded) vs {plain_rounds_s:.1f}s (plain, measured): "
            f"{plain_rounds_s - ran:+.1f}s saved by not waiting for stragglers; end to end "
            f"{ours_seconds:.1f}s vs {plain_seconds:.1f}s ({ours_seconds / plain_seconds:.2f}x, "
            f"{plain_seconds - ours_seconds:+.1f}s saved, after the coded run's {once:.1f}s once "
            "per run)",
        ]
    else:
        lines.append(
            f"waiting for every silo would have taken about {wait_all:.1f}s instead of "
            f"{ran:.1f}s (late uploads time-stamped as they came; a silo that never answered "
            f"counts the {strategy.timeouts.round:.0f}s round deadline)"
        )
    total = time.time() - launch
    start_s = t_main - launch + warm_s
    lines += [
        f"waited in all: {total:.1f}s from `flwr run` to this summary = {start_s:.1f}s until "
        f"every ClientApp was warm (Flower's start and the warm-up, shared by both runs) + "
        f"{ours_seconds:.1f}s coded"
        + (f" + {plain_seconds:.1f}s plain" if plain_mode == "flower" else "")
        + f" + {total - start_s - ours_seconds - plain_seconds:.1f}s between and after them "
        + (
            "(final evaluations)"
            if plain_mode == "flower"
            else "(final evaluation, the last round's stragglers awaited for the estimate)"
        )
        + ("" if rc.get("launch-time", 0.0) else " (`flwr run` here: the ServerApp's start)"),
        "==========================================================",
    ]
    for line in lines:
        say(line)
