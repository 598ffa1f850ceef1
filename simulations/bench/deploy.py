"""Deployed round time: plain FedAvg vs Flower SecAgg+ vs coded-fl on a real deployment.

A real SuperLink (TLS, SuperNode authentication) and N SuperNodes, each site behind its own
delaying proxy (``simulations.deploy.testbed``: network namespaces where they can be made,
loopback otherwise), run the deployment app (``simulations/deploy/app``: a model of d float32
parameters, a cheap deterministic update plus ``train-seconds`` of emulated local compute per
partition) in three modes, one after the other on the same deployment:

- ``plain``: Flower's FedAvg (Message API ``Strategy.start``), waits for every reply; its
  ``send_and_receive`` sleeps 3 s between pulls;
- ``plain-fast``: the same FedAvg, pulled every 50 ms like coded-fl (the stricter baseline);
- ``secaggplus``: Flower's SecAgg+ (legacy ``SecAggPlusWorkflow``, full graph, threshold
  ceil(N/2)), four round trips per round, waits for every node in every stage;
- ``coded``: ``CodedSecAgg(FedAvg)`` with s = 1, T = 1, U = n - s: two round trips per round,
  keys once per run, never waits for the slowest site; each silo trains s + 1 partitions.

Per configuration: the median round time of rounds 2..R (round 1 is the warm-up; the key
exchange is reported separately as ``setup_seconds``). "One site 10x slower": its link
latency and its compute time are both 10x the others'.

Fixed cost vs bytes (full size only): at N = 3, plain FedAvg (50 ms pulls) and coded-fl run
again with a model of 1,000 parameters. What a round costs there is what it costs apart from
its bytes (messages, one ClientApp process per message, emulated compute, latency); the rest of
the d = 1e6 round is the bytes' share. The ``fixed_vs_bytes`` row and a note say which of the
two the gap between coded-fl and plain FedAvg comes from.

Full size: N = 3 and 6, d = 1e6, R = 4, with and without the slow site
(``python -m simulations.bench deploy --out docs/bench/deploy.json``; about an hour on 2
cores). ``--quick``: loopback, 3 nodes, d = 1000, 2 rounds, coded-fl only, no slow site (it
checks that a deployment runs; no ratio).
"""

from __future__ import annotations

import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from simulations.bench.common import Report
from simulations.deploy.launcher import DeploymentError
from simulations.deploy.testbed import Site, TestBed, namespaces_available

REPO = Path(__file__).resolve().parents[2]
APP = REPO / "simulations" / "deploy" / "app"

LATENCY = 0.02  # one-way, every site (s)
JITTER = 0.005
TRAIN_SECONDS = 0.5  # emulated local compute per partition (s)
SLOW = 10.0  # the slow site: 10x latency and 10x compute
TINY_DIM = 1000  # the model of the fixed-cost runs: a round's cost apart from its bytes


def _median_rounds(rows: list[dict[str, Any]]) -> float | None:
    times = [r["seconds"] for r in rows if r["round"] >= 2]
    return statistics.median(times) if times else None


def _one(
    bed: TestBed,
    report: Report,
    *,
    mode: str,
    n: int,
    dim: int,
    rounds: int,
    slow: bool,
    timeout: float,
) -> dict[str, Any] | None:
    tag = f"{mode}-n{n}-{'slow' if slow else 'even'}-{int(time.time())}"
    cfg: dict[str, Any] = {
        # "coded-aligned": coded-fl with masking="aligned" (one round trip from round 3)
        "mode": "coded" if mode == "coded-aligned" else mode,
        "masking": "aligned" if mode == "coded-aligned" else "shares",
        "num-silos": n,
        "num-rounds": rounds,
        "dim": dim,
        "num-stragglers": 1,
        "privacy-threshold": 1,
        "train-seconds": TRAIN_SECONDS,
        "slow-sites": str(n - 1) if slow else "",
        "slow-factor": SLOW,
        "round-timeout": timeout,
        "node-wait-timeout": 120.0,
        "report-file": str(bed.run_dir / f"{tag}.json"),
    }
    t0 = time.monotonic()
    load_before = os.getloadavg()[0]
    try:
        bed.run(APP, cfg, timeout=timeout * (rounds + 2), log_name=tag)
    except DeploymentError as exc:
        report.notes.append(f"{tag}: run failed: {str(exc)[:300]}")
        print(f"[deploy] {tag} FAILED: {exc}", flush=True)
        return None
    data = json.loads(Path(cfg["report-file"]).read_text())
    rows = data["rounds"]
    med = _median_rounds(rows)
    trips = sorted({r.get("round_trips", 0) for r in rows})
    return report.add(
        mode=mode,
        supernodes=n,
        dim=dim,
        slow_site=slow,
        median_round_s=med,
        round_s=[round(r["seconds"], 3) for r in rows],
        rounds_ok=sum(bool(r["ok"]) for r in rows),
        rounds=len(rows),
        round_trips_per_round=trips[0] if len(trips) == 1 else trips,
        key_exchanges=len(data.get("key_exchanges", [])) if mode.startswith("coded") else None,
        setup_s=data.get("setup_seconds"),
        stragglers=[r.get("straggler_sites", []) for r in rows]
        if mode.startswith("coded")
        else None,
        wall_s=time.monotonic() - t0,
        # the machine is shared: the 1-minute load average before and after the run
        load_avg=[round(load_before, 2), round(os.getloadavg()[0], 2)],
    )


MODES = ("plain", "plain-fast", "coded", "coded-aligned", "secaggplus")


def run(report: Report, *, quick: bool, parts: str | None = None) -> None:
    """The deployment benchmark (see the module docstring); ``parts``: a comma-separated
    subset of the modes (default all; e.g. ``plain,coded-aligned``)."""
    chosen = MODES if parts is None else tuple(p.strip() for p in parts.split(",") if p.strip())
    unknown = sorted(set(chosen) - set(MODES))
    if unknown or not chosen:
        raise ValueError(f"unknown parts {unknown}: choose modes from {', '.join(MODES)}")
    use_ns, why = (False, "quick mode runs on loopback") if quick else namespaces_available()
    sizes = [3] if quick else [3, 6]
    dim = 1000 if quick else 1_000_000
    rounds = 2 if quick else 4
    # quick (CI, < 2 min on 2 cores): one TLS + node-auth deployment, coded-fl only
    modes = ["coded"] if quick else [m for m in MODES if m in chosen]
    report.config["parts"] = list(modes)
    slows = [False] if quick else [False, True]
    timeout = 120.0 if quick else 600.0
    report.config.update(
        {
            "supernodes": sizes,
            "dim": dim,
            "rounds": rounds,
            "median_of_rounds": f"2..{rounds}",
            "modes": modes,
            "latency_s": LATENCY,
            "jitter_s": JITTER,
            "train_seconds_per_partition": TRAIN_SECONDS,
            "slow_site": f"the last site: {SLOW:g}x latency and {SLOW:g}x compute",
            "coded": "s=1, T=1, U=n-s, FedAvg inside",
            "coded-aligned": "the same with masking='aligned' (one round trip from round 3)",
            "secaggplus": "num_shares=N, reconstruction_threshold=max(2, ceil(N/2))",
            "tls": True,
            "supernode_auth": True,
        }
    )
    if not use_ns:
        report.notes.append(f"network: loopback with a delaying proxy per site ({why})")
    medians: dict[tuple[str, int, bool], float] = {}
    tiny: dict[str, float] = {}
    for n in sizes:
        sites = [Site(latency=LATENCY, jitter=JITTER) for _ in range(n)]
        with (
            tempfile.TemporaryDirectory(prefix="cfl-bench-deploy-") as tmp,
            TestBed(sites, run_dir=tmp, namespaces=use_ns, seed=0) as bed,
        ):
            report.config.setdefault("network", bed.describe()["network"])
            bed.up(timeout=180.0)
            for slow in slows:
                if slow:  # the last site's link becomes 10x slower too
                    bed.set_link(n - 1, latency=SLOW * LATENCY, jitter=SLOW * JITTER)
                for mode in modes:
                    row = _one(
                        bed,
                        report,
                        mode=mode,
                        n=n,
                        dim=dim,
                        rounds=rounds,
                        slow=slow,
                        timeout=timeout,
                    )
                    if row and row["median_round_s"] is not None:
                        medians[(mode, n, slow)] = row["median_round_s"]
                bed.set_link(n - 1, latency=LATENCY, jitter=JITTER)
            if not quick and n == sizes[0] and {"plain-fast", "coded"} <= set(modes):
                # the same rounds with a tiny model: what a round costs apart from its bytes
                for mode in ("plain-fast", "coded"):
                    row = _one(
                        bed,
                        report,
                        mode=mode,
                        n=n,
                        dim=TINY_DIM,
                        rounds=rounds,
                        slow=False,
                        timeout=timeout,
                    )
                    if row and row["median_round_s"] is not None:
                        tiny[mode] = row["median_round_s"]
    if len(tiny) == 2:
        _fixed_vs_bytes(report, medians, tiny, n=sizes[0])
    full = not quick
    for n in sizes:
        for slow in slows:
            ours = medians.get(("coded", n, slow))
            where = "one site 10x slower" if slow else "no slow site"
            for coded, name in (("coded", "coded-fl"), ("coded-aligned", "coded-fl aligned")):
                mine = medians.get((coded, n, slow))
                for base, label in (
                    ("plain", "Flower FedAvg"),
                    ("plain-fast", "FedAvg, 50 ms pulls"),
                ):
                    plain = medians.get((base, n, slow))
                    if plain and mine:
                        report.goal(
                            f"{name} / plain ({label}) round time, {n} SuperNodes, {where}",
                            mine / plain,
                            1.0 if slow else 1.6,
                            applies=full,
                        )
            sa = medians.get(("secaggplus", n, slow))
            if sa and ours:
                report.notes.append(
                    f"N={n}, {where}: SecAgg+ {sa:.1f} s/round, coded-fl {ours:.1f}, plain "
                    f"{medians.get(('plain', n, slow), float('nan')):.1f} (Flower FedAvg) / "
                    f"{medians.get(('plain-fast', n, slow), float('nan')):.1f} (50 ms pulls); "
                    f"SecAgg+/coded-fl = {sa / ours:.2f}x"
                )


def _fixed_vs_bytes(
    report: Report, medians: dict[tuple[str, int, bool], float], tiny: dict[str, float], *, n: int
) -> None:
    """Split each scheme's round time at d = 1e6 into what a round with a tiny model also
    costs (messages, ClientApp processes, emulated compute, latency) and what the bytes add,
    and say which of the two the gap between coded-fl and plain FedAvg comes from."""
    if any((m, n, False) not in medians for m in ("plain-fast", "coded")):
        return
    full = {m: medians[(m, n, False)] for m in ("plain-fast", "coded")}
    trips = {"plain-fast": 1, "coded": 2}
    parts = {
        m: {
            "round_s": full[m],
            "tiny_round_s": tiny[m],
            "bytes_s": full[m] - tiny[m],
            "fixed_per_round_trip_s": tiny[m] / trips[m],
        }
        for m in full
    }
    gap_fixed = tiny["coded"] - tiny["plain-fast"]
    gap_bytes = parts["coded"]["bytes_s"] - parts["plain-fast"]["bytes_s"]
    report.add(
        kind="fixed_vs_bytes",
        supernodes=n,
        dims=[TINY_DIM, report.config.get("dim")],
        schemes=parts,
        gap_from_fixed_s=gap_fixed,
        gap_from_bytes_s=gap_bytes,
    )
    report.notes.append(
        f"N={n}: coded-fl's round is {full['coded'] - full['plain-fast']:.1f} s longer than "
        f"plain FedAvg's (50 ms pulls); {gap_fixed:.1f} s of that is there with a "
        f"{TINY_DIM}-parameter model too (the second round trip: a second ClientApp process "
        f"per silo, and s + 1 = 2 partitions of emulated compute), {gap_bytes:.1f} s comes "
        "from the bytes"
    )
