"""Straggler benchmark: per-round latency of waiting for all n vs the fastest n - s.

Run: ``python -m simulations.bench stragglers --out FILE.json [--quick] [--parts costs,des]``
(``--parts``: a subset of costs, des, flower; the default runs all three, the Flower part takes
the longest).

Silo times are i.i.d. Exp(mu) (and a heavy tail: 5 % of the silos 5-10x slower), against the
order-statistic theory of seed 003: E[T_all] = H_n/mu, E[T_coded] = (H_n - H_s)/mu
(:mod:`simulations.stragglers.model`; the heavy tail's expectations integrated numerically).

1. Costs: every protocol step timed in memory (thread CPU, one thread) at a grid of (n, s, d),
   fitted to work counts (:mod:`simulations.stragglers.costs`); message sizes from the codec.
   Both maskings are measured and fitted, each on its own: the default secret-shared masks
   (two round trips) and ``masking="aligned"`` (one round trip once the edge keys are dealt);
   the virtual clock runs for each, and its goals are reported for each (labelled with the
   masking). The Flower part runs ``CodedSecAgg``'s default masking.
2. Virtual clock (:mod:`simulations.stragglers.des`): plain FedAvg vs coded-fl over the same
   draws, n up to 1000, d = 1e6, mean silo time 10 s, 1 Gbit/s silos and a 10 Gbit/s server,
   thousands of rounds per point; measured speedup against theory. Also: the mean silo time
   swept at n = 100 (where fixed costs start to matter) and the compute redundancy of gradient
   coding when the silo time is all compute (each silo trains s + 1 partitions). The coded
   *fixed cost* (time beyond the (n-s)-th silo, defined in :func:`_des`) is reported per
   (n, s) and judged: at most 0.5 s at n = 100, at most linear growth to n = 1000, and the
   straggler part (round time minus the calibrated fixed cost) within 10 % of theory at every
   n <= 100 and s; a profile says what each part of the round adds to it at n = 100 and 1000.
3. Real Flower simulation (:mod:`simulations.stragglers.flower`, a child process): injected
   Exp(mu) sleeps, n up to 50, plain FedAvg (Message API, waits for all) and coded-fl in the same
   run over the same draws. Reported per (n, s) (:func:`flower_rows`): the raw speedup (mean
   round times), the fixed per-round cost of each scheme (from calibration rounds: round time
   minus the silo time waited for), the speedup of the straggler-dependent part (mean round
   time minus that fixed cost), the same corrected for the sampling noise of the few rounds
   (the draws' own order statistics as a control variate), the theory with and without the
   fixed costs, and that coded-fl closes right after the (n-s)-th silo instead of waiting.
   The 20 % goal is judged on the corrected straggler-dependent part against the theory.

Length: about 500 lines, the three parts of one benchmark with their goals; they share the
grid (:func:`s_grid`), the cost model and the report, and each is short on its own.
"""

from __future__ import annotations

import json
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from simulations.bench.common import Report
from simulations.runtime.flower_sim import run_child
from simulations.stragglers.costs import (
    MASKINGS,
    fit_costs,
    measure_step_costs,
    privacy_for,
)
from simulations.stragglers.des import CODED_STEPS, Network, StepSeconds, simulate
from simulations.stragglers.model import SiloTimes, silo_times

MEAN_SILO_SECONDS = 10.0
D_MODEL = 1_000_000


def s_grid(n: int) -> list[int]:
    """s in {1, 5 %, 10 %, 20 %, 50 %} of n, where a privacy threshold fits (T < U = n - s)."""
    cand = {1, round(0.05 * n), round(0.1 * n), round(0.2 * n), round(0.5 * n)}
    return sorted(s for s in cand if 1 <= s < n and privacy_for(n, s) < n - s)


def _costs(report: Report, quick: bool, masking: str = "shares") -> Any:
    """Measure the step costs at a grid of (n, s, d) with ``masking``, check the message-size
    formulas against the codec, and return the fitted :class:`CostModel`."""
    if quick:
        grid = [(10, 1, 10_000), (10, 2, 100_000), (20, 2, 10_000), (20, 5, 100_000)]
    else:
        grid = [
            (n, s, d)
            for n in (10, 20, 40, 80)
            for s in (max(1, n // 10), n // 4)
            for d in (100_000, 1_000_000)
            if not (n == 80 and d == 1_000_000 and s == 20)
        ]
        # anchors for the n^2 steps (close_collection builds n - s requests of n - s entries)
        # before the virtual clock extrapolates them to n = 1000: small d, large n
        grid += [(200, 20, 10_000), (400, 40, 10_000)]
    points = []
    for i, (n, s, d) in enumerate(grid, 1):
        t0 = time.perf_counter()
        p = measure_step_costs(n, s, d, rounds=2 if quick else 3, masking=masking)
        points.append(p)
        row = {k: v for k, v in p.__dict__.items()}
        report.add(kind="cost_point", **row)
        print(
            f"[stragglers] {masking} cost point {i}/{len(grid)} in {time.perf_counter() - t0:.1f}s",
            flush=True,
        )
    model = fit_costs(points)
    report.add(kind="cost_fit", **model.to_json())
    bad = [
        (p.n, p.s, p.d, w)
        for p in points
        for w in (
            "train_request",
            "upload",
            "recovery_request",
            "recovery_request_mean",
            "recovery_reply",
        )
        if abs(model.bytes(w, n=p.n, s=p.s, d=p.d) - getattr(p, f"{w}_bytes")) > 1e-6
    ]
    if bad:
        raise RuntimeError(
            f"message-size formulas ({masking}) disagree with the codec at {bad[:3]}"
        )
    return model


#: s as a fraction of n (None: s = 1), to compare the fixed cost across n
S_FRACTIONS: tuple[float | None, ...] = (None, 0.05, 0.1, 0.2, 0.5)


def _s_of(n: int, frac: float | None) -> int:
    return 1 if frac is None else round(frac * n)


def _masked(label: str, masking: str) -> str:
    """A goal's label for ``masking`` (``"aligned"`` is what ``CodedSecAgg``'s default,
    ``masking="auto"``, uses with the repetition code of these runs)."""
    return f"{label}, masking='{masking}'" + (" (the default)" if masking == "aligned" else "")


def _des(report: Report, model: Any, quick: bool) -> None:
    """Virtual clock: speedups, fixed costs and the straggler part per (tail, n, s), for the
    masking ``model`` was measured with (``model.masking``: with ``"aligned"`` the round has
    no recovery stage, so its fixed cost has none of the recovery parts below).

    The *fixed cost* of a coded round is its time beyond waiting for the (n-s)-th silo: the
    mean over rounds of (round time - X_(n-s)), X_(n-s) the (n-s)-th smallest silo time of the
    round. It is everything but the wait: the model's download (one copy after another on the
    server's link), the silo's upload step (quantise, encode s + 1 partitions, mask, derive
    and seal the mask shares), the upload transfers and the server's per-upload checks (FIFO,
    the ones after the (n-s)-th upload's arrival are on the path), ``close_collection``, the
    n - s recovery requests with their relayed sealed shares on the server's link, the
    survivors' share sums, their replies and the server's checks of them, and ``finish``
    (unmask and decode). Plain FedAvg's fixed cost is the same beyond X_(n) (download,
    serialise, transfer, parse and add). Both are measured on calibration rounds (their own
    draws), and the *straggler part* of a scheme is its mean round time over the measured
    rounds minus that fixed cost: the goal compares the straggler-part speedup with the
    order-statistic theory (a fixed cost that depended on the draws would show there).
    """
    masking = model.masking
    ns = (10, 20, 50, 100) if quick else (10, 20, 50, 100, 200, 500, 1000)
    rounds = 300 if quick else 3000
    net = Network()
    rng = np.random.default_rng(2024)
    mu = 1.0 / MEAN_SILO_SECONDS
    worst: dict[str, float] = {}
    worst_wait: dict[str, float] = {}
    fixed: dict[tuple[str, int, int], float] = {}
    for kind in ("iid", "heavy"):
        for n in ns:
            times = silo_times(kind, n, mu=mu, seed=1)
            for s in s_grid(n):
                steps = StepSeconds.from_model(model, n=n, s=s, d=D_MODEL)
                rt = simulate(times, s, steps=steps, net=net, rounds=rounds, rng=rng)
                cal = simulate(times, s, steps=steps, net=net, rounds=rounds, rng=rng)
                fixed_c = float((cal.coded - cal.wait_coded).mean())
                fixed_p = float((cal.plain - cal.wait_all).mean())
                fixed[kind, n, s] = fixed_c
                theory = times.theoretical_speedup(s)
                err = rt.speedup / theory - 1
                wait_speedup = (float(rt.plain.mean()) - fixed_p) / (
                    float(rt.coded.mean()) - fixed_c
                )
                wait_err = wait_speedup / theory - 1
                report.add(
                    kind="des",
                    masking=masking,
                    model=kind,
                    n=n,
                    s=s,
                    slow_silos=len(times.slow),
                    d=D_MODEL,
                    mean_silo_seconds=MEAN_SILO_SECONDS,
                    rounds=rounds,
                    theory_wait_all=times.expected_wait_all(),
                    theory_wait_coded=times.expected_wait_coded(s),
                    theory_speedup=theory,
                    plain_seconds=float(rt.plain.mean()),
                    coded_seconds=float(rt.coded.mean()),
                    close_seconds=float(rt.close.mean()),
                    measured_speedup=rt.speedup,
                    order_statistic_speedup=rt.order_statistic_speedup,
                    relative_error=err,
                    fixed_costs_coded=float((rt.coded - rt.wait_coded).mean()),
                    fixed_costs_plain=float((rt.plain - rt.wait_all).mean()),
                    calibrated_fixed_coded=fixed_c,
                    calibrated_fixed_plain=fixed_p,
                    straggler_part_speedup=wait_speedup,
                    straggler_part_error=wait_err,
                )
                if 20 <= n <= 100:
                    worst[kind] = max(worst.get(kind, 0.0), abs(err))
                if n <= 100:
                    worst_wait[kind] = max(worst_wait.get(kind, 0.0), abs(wait_err))
    for kind, label in (("iid", "i.i.d. Exp"), ("heavy", "heavy tail")):
        if kind in worst:
            report.goal(
                _masked(
                    f"virtual clock, {label}: max |measured / theoretical speedup - 1| over "
                    f"n = 20..100, every s (d = 1e6, mean silo time {MEAN_SILO_SECONDS:g} s)",
                    masking,
                ),
                worst[kind],
                0.10,
                applies=not quick,
            )
    for kind, label in (("iid", "i.i.d. Exp"), ("heavy", "heavy tail")):
        if kind in worst_wait:
            at100 = max(v for (k, n, _), v in fixed.items() if k == kind and n == 100)
            report.goal(
                _masked(
                    f"virtual clock, {label}: max |straggler-part speedup (round time minus "
                    f"the calibrated fixed cost) / theory - 1| over n <= 100, every s (fixed "
                    f"cost beside it: up to {at100:.3g} s per coded round at n = 100)",
                    masking,
                ),
                worst_wait[kind],
                0.10,
                applies=not quick,
            )
    _fixed_goals(report, fixed, quick, masking)
    _fixed_profile(report, model, net, ns=(100, 1000) if not quick else (20, 100))
    # where fixed costs start to matter: the mean silo time swept at n = 100
    for mean in (0.1, 1.0, 10.0, 100.0):
        times = SiloTimes.iid(100, mu=1.0 / mean)
        for s in (10, 50):
            steps = StepSeconds.from_model(model, n=100, s=s, d=D_MODEL)
            rt = simulate(times, s, steps=steps, net=net, rounds=rounds, rng=rng)
            report.add(
                kind="des_sweep",
                masking=masking,
                n=100,
                s=s,
                d=D_MODEL,
                mean_silo_seconds=mean,
                theory_speedup=times.theoretical_speedup(s),
                measured_speedup=rt.speedup,
                plain_seconds=float(rt.plain.mean()),
                coded_seconds=float(rt.coded.mean()),
            )
    # the price of redundancy when the silo time is all compute: a coded silo trains s + 1
    for n in (20, 100):
        times = SiloTimes.iid(n, mu=mu)
        for s in s_grid(n):
            steps = StepSeconds.from_model(model, n=n, s=s, d=D_MODEL)
            rt = simulate(times, s, steps=steps, net=net, rounds=rounds, rng=rng, work_scaling=True)
            h = times.expected_wait_all() / ((s + 1) * times.expected_wait_coded(s))
            report.add(
                kind="des_work",
                masking=masking,
                n=n,
                s=s,
                d=D_MODEL,
                mean_silo_seconds=MEAN_SILO_SECONDS,
                theory_speedup=h,
                measured_speedup=rt.speedup,
            )


def _fixed_goals(
    report: Report, fixed: dict[tuple[str, int, int], float], quick: bool, masking: str
) -> None:
    """The fixed cost at n = 100 and its growth to n = 1000 (both tails, s a fraction of n)."""
    small, large = (20, 100) if quick else (100, 1000)
    at = [v for (_, n, _), v in fixed.items() if n == small]
    if not at:
        return
    report.goal(
        _masked(
            f"virtual clock: coded fixed cost per round at n = {small}, every s and tail "
            f"(d = 1e6, mean silo time {MEAN_SILO_SECONDS:g} s), seconds",
            masking,
        ),
        max(at),
        0.5,
        applies=not quick,
    )
    ratios = []
    for kind in ("iid", "heavy"):
        for frac in S_FRACTIONS:
            series = {n: v for (k, n, s), v in fixed.items() if k == kind and s == _s_of(n, frac)}
            if small not in series or large not in series:
                continue
            ns = sorted(n for n in series if n >= small)
            slope = float(np.polyfit(np.log(ns), np.log([series[n] for n in ns]), 1)[0])
            ratio = series[large] / series[small]
            ratios.append(ratio)
            report.add(
                kind="des_fixed_growth",
                masking=masking,
                model=kind,
                s_fraction=frac if frac is not None else "s = 1",
                ns=ns,
                fixed_seconds=[series[n] for n in ns],
                ratio=ratio,
                exponent=slope,
            )
    if ratios:
        report.goal(
            _masked(
                f"virtual clock: coded fixed cost at n = {large} / at n = {small}, worst s (as "
                f"a fraction of n) and tail: at most linear growth",
                masking,
            ),
            max(ratios),
            large / small,
            applies=not quick,
        )


#: the parts of a coded round's fixed cost, each removed in turn (:func:`_fixed_profile`)
_PARTS: dict[str, dict[str, Any]] = {
    "model download": {"model_bytes": 0},
    "silo upload step": {"client_upload": 0.0},
    "upload transfer": {"upload_bytes": 0},
    "server upload checks": {"server_upload": 0.0},
    "close_collection": {"server_close": 0.0},
    "summing the uploads (overlaps the recovery round trip, if any)": {"server_sum": 0.0},
    "recovery requests (relayed shares)": {
        "recovery_request_bytes": 0,
        "recovery_request_mean_bytes": 0.0,
    },
    "survivor share sums": {"client_recovery": 0.0},
    "replies and their checks": {"recovery_reply_bytes": 0, "server_recovery": 0.0},
    "finish (unmask, decode)": {"server_finish": 0.0},
}
#: the parts a one-round-trip round (masking="aligned") does not have
_RECOVERY_PARTS = frozenset(
    {
        "recovery requests (relayed shares)",
        "survivor share sums",
        "replies and their checks",
    }
)


def _fixed_profile(report: Report, model: Any, net: Network, *, ns: tuple[int, ...]) -> None:
    """What each part adds to the coded fixed cost: the fixed cost with the part removed
    (same draws), subtracted from the whole; the parts overlap a little, so they need not add
    up exactly."""
    mu = 1.0 / MEAN_SILO_SECONDS
    for n in ns:
        times = SiloTimes.iid(n, mu=mu)
        for s in s_grid(n):
            steps = StepSeconds.from_model(model, n=n, s=s, d=D_MODEL)

            def fixed_of(
                st: StepSeconds, nw: Network = net, s: int = s, times: SiloTimes = times
            ) -> float:
                rng = np.random.default_rng(7)  # the same draws for every variant
                rt = simulate(times, s, steps=st, net=nw, rounds=500, rng=rng)
                return float((rt.coded - rt.wait_coded).mean())

            whole = fixed_of(steps)
            parts = {
                k: whole - fixed_of(replace(steps, **v))
                for k, v in _PARTS.items()
                if steps.round_trips == 2 or k not in _RECOVERY_PARTS
            }
            parts["latency"] = whole - fixed_of(steps, replace(net, latency=0.0))
            report.add(
                kind="des_fixed_profile",
                masking=model.masking,
                n=n,
                s=s,
                d=D_MODEL,
                fixed_seconds=whole,
                parts=parts,
                step_seconds={k: getattr(steps, k) for k in CODED_STEPS},
                bytes={
                    k: getattr(steps, k)
                    for k in ("upload_bytes", "recovery_request_mean_bytes", "recovery_reply_bytes")
                },
            )
            top = sorted(parts.items(), key=lambda kv: -kv[1])[:3]
            print(
                f"[stragglers] {model.masking} fixed cost n={n} s={s}: {whole:.3f} s; largest "
                "parts: " + ", ".join(f"{k} {v:.3f} s" for k, v in top),
                flush=True,
            )


# ---------------------------------------------------------------------------- Flower
def _fixed_cost(rounds: list[dict[str, Any]], key: str) -> float:
    """Mean over the calibration rounds but the first (imports, JIT) of round time minus the
    silo time the scheme waits for (``wait_all``: the slowest; ``wait_coded``: the (n-s)-th)."""
    cal = [r["seconds"] - r[key] for r in rounds if r["phase"] == "calib"]
    return float(np.mean(cal[1:] if len(cal) > 1 else cal))


def flower_rows(raw: dict[str, Any]) -> list[dict[str, Any]]:
    """Per (n, s, tail) figures from the child's JSON.

    - ``raw_speedup``: mean plain round time / mean coded round time (same draws);
    - ``fixed_plain``/``fixed_coded``: per-round cost beyond the silo time waited for, from the
      calibration rounds; ``theory_with_fixed_costs`` adds them to the expectations;
    - ``straggler_speedup``: (mean round time - fixed cost), plain over coded;
    - ``sample_speedup``: the same ratio for the order statistics of the very draws used (what
      a zero-cost system would have measured in these rounds);
    - ``corrected_speedup``: ``straggler_speedup * theory / sample_speedup``, the draws used as
      a control variate (their expectation is known exactly), which removes the sampling noise
      of the few rounds; ``relative_error`` compares it with theory (the 20 % goal);
    - ``close_after_draw``: mean time from the (n-s)-th silo's drawn time to the close of
      collection, next to ``waiting_would_add`` = mean(X_(n) - X_(n-s)): coded-fl must close
      after the former, not the latter (it does not wait for the stragglers).
    """
    out = []
    mu, seed = float(raw["mu"]), int(raw["seed"])
    plain = {r["n"]: r["rounds"] for r in raw["runs"] if r["scheme"] == "plain"}
    for run in raw["runs"]:
        if run["scheme"] != "coded":
            continue
        n, s = run["n"], run["s"]
        coded = {r["round"]: r for r in run["rounds"]}
        base = {r["round"]: r for r in plain[n]}
        o_p = _fixed_cost(list(base.values()), "wait_all")
        o_c = _fixed_cost([r for r in coded.values() if r["ok"]], "wait_coded")
        for phase in ("iid", "heavy"):
            rounds = [k for k, r in coded.items() if r["phase"] == phase and r["ok"] and k in base]
            if not rounds:
                continue
            times = silo_times(phase, n, mu=mu, seed=seed)
            t_p = float(np.mean([base[k]["seconds"] for k in rounds]))
            t_c = float(np.mean([coded[k]["seconds"] for k in rounds]))
            x_all = float(np.mean([coded[k]["wait_all"] for k in rounds]))
            x_cod = float(np.mean([coded[k]["wait_coded"] for k in rounds]))
            e_all, e_cod = times.expected_wait_all(), times.expected_wait_coded(s)
            theory = e_all / e_cod
            strag = (t_p - o_p) / (t_c - o_c) if t_c > o_c else float("inf")
            corrected = strag * theory / (x_all / x_cod)
            out.append(
                {
                    "kind": "flower",
                    "model": phase,
                    "n": n,
                    "s": s,
                    "slow_silos": len(times.slow),
                    "rounds": len(rounds),
                    "aborted": sum(1 for r in coded.values() if not r["ok"]),
                    "mean_silo_seconds": 1.0 / mu,
                    "plain_seconds": t_p,
                    "coded_seconds": t_c,
                    "fixed_plain": o_p,
                    "fixed_coded": o_c,
                    "close_after_draw": float(
                        np.mean(
                            [coded[k]["close_seconds"] - coded[k]["wait_coded"] for k in rounds]
                        )
                    ),
                    "waiting_would_add": x_all - x_cod,
                    "theory_speedup": theory,
                    "sample_speedup": x_all / x_cod,
                    "raw_speedup": t_p / t_c,
                    "theory_with_fixed_costs": (e_all + o_p) / (e_cod + o_c),
                    "straggler_speedup": strag,
                    "uncorrected_error": strag / theory - 1,
                    "corrected_speedup": corrected,
                    "relative_error": corrected / theory - 1,
                    "raw_relative_error": (t_p / t_c) / ((e_all + o_p) / (e_cod + o_c)) - 1,
                }
            )
    return out


def _flower(report: Report, quick: bool) -> None:
    if quick:
        args = [
            "--ns",
            "5",
            "--s",
            "5:1/2",
            "--mu",
            "2.0",
            "--calib",
            "2",
            "--iid",
            "3",
            "--heavy",
            "1",
        ]
        limit = 240.0
    else:
        args = ["--ns", "10,20,50", "--s", "10:1/2/5,20:2/5/10,50:5/10/25", "--mu", "1.0"]
        args += ["--calib", "4", "--iid", "14", "--heavy", "4"]
        limit = 2400.0
    with tempfile.TemporaryDirectory(prefix="codedfl-stragglers-") as tmp:
        out = Path(tmp) / "flower.json"
        t0 = time.perf_counter()
        rc = run_child("simulations.stragglers.flower", [*args, "--out", str(out)], timeout=limit)
        if rc != 0 or not out.exists():
            raise RuntimeError(f"the Flower straggler simulation failed (exit status {rc})")
        raw = json.loads(out.read_text())
    report.add(
        kind="flower_run",
        nodes=raw["nodes"],
        actors=raw["nodes"],
        seconds=time.perf_counter() - t0,
        warmup_seconds=raw["warmup_seconds"],
        memory_after_warmup=raw["memory_after_warmup"],
        mem_available_mib_before=raw["mem_available_mib_before"],
        schedule=raw["schedule"],
        d=raw["d"],
    )
    report.config["flower_runs"] = raw["runs"]
    rows = [report.add(**r) for r in flower_rows(raw)]
    ns = f"n = {min(r['n'] for r in rows)}..{raw['nodes']}" if rows else ""
    for tail, label in (("iid", "i.i.d. Exp"), ("heavy", "heavy tail")):
        errs = [abs(r["relative_error"]) for r in rows if r["model"] == tail]
        if errs:
            report.goal(
                f"Flower simulation, {label}: max |straggler-part speedup (sampling-corrected) / "
                f"theory - 1| over every (n, s), {ns}, default masking",
                max(errs),
                0.20,
                applies=not quick,
            )


PARTS = ("costs", "des", "flower")


def run(report: Report, *, quick: bool, parts: str | None = None) -> None:
    """Run the benchmark; ``parts``: a comma-separated subset of costs, des, flower (default
    all; des needs costs)."""
    chosen = PARTS if parts is None else tuple(p.strip() for p in parts.split(",") if p.strip())
    unknown = [p for p in chosen if p not in PARTS]
    if unknown or not chosen:
        raise ValueError(f"unknown parts {unknown}: choose from {', '.join(PARTS)}")
    if "des" in chosen and "costs" not in chosen:
        raise ValueError("the des part needs the costs part: pass --parts costs,des")
    torch.set_num_threads(1)
    report.config = {
        "mean_silo_seconds_des": MEAN_SILO_SECONDS,
        "d_des": D_MODEL,
        "network": Network().__dict__,
        "heavy_tail": "max(1, round(0.05 n)) silos, mean time 5-10x (spread evenly)",
        "privacy_threshold": "T = max(1, min(s, (n - s) // 2)), U = n - s",
    }
    report.config["parts"] = list(chosen)
    if "costs" in chosen:
        for masking in MASKINGS:
            model = _costs(report, quick, masking)
            if "des" in chosen:
                _des(report, model, quick)
    if "flower" in chosen:
        _flower(report, quick)
