"""Coded data shuffling benchmark: loads against the formulas, planner time, codec throughput.

Run: ``python -m simulations.bench shuffling --out FILE.json [--quick]`` (also writes FILE.png,
load against storage for each K: uncoded, centralized and decentralized coded, lower bound).

1. Loads. For K in {4, 8, 16}, every storage level t in 0..K, q = 2 units per silo, both settings,
   a worst-case reassignment (every batch moves to the next silo) and random ones (a fresh random
   split): the measured load of the plan (messages x message size / unit size) next to the
   scheme's formula, the uncoded plan's load, the papers' closed forms and lower bounds
   (:mod:`coded_fl.shuffling.plan.theory`). Random rows also carry the acyclic index-coding bound
   of the
   cache placement for that demand (max over sampled silo orders): no scheme using the same cache
   sends less.
2. Planner time: median wall time of ``plan_shuffle`` at K = 16 for every t (goal: under 1 s).
3. Codec: encode (a sender's messages) and decode (one silo's messages) in GB/s of source bytes
   read, next to a memcpy of the same number of bytes timed in the same process; also AES-GCM
   sealing and SHA-256 unit checks, the session's per-byte costs on top of the XOR.
4. The relay at level t (``relay_level_t`` rows, issue 31): K = 10 silos send through a relay
   (decentralized), q = K - 1 and 2(K - 1) units each, t = 0..3. The coordinator picks a
   balanced reassignment (:func:`~coded_fl.shuffling.plan.sources.balanced_reassignment`) and
   the planner delivers it holder-sourced; the load over the relay's fan-out (each moved unit
   uploaded once) against 1/(t + 1), the formula (K - t)/((K - 1)(t + 1)), the acyclic converse
   of the same demand, and, for context, uniform random reassignments of the same sizes.
"""

from __future__ import annotations

import itertools
import os
from pathlib import Path
from typing import Any

import numpy as np
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from coded_fl.shuffling import (
    SegmentBuffer,
    ShufflePlan,
    UnitManifest,
    acyclic_bound,
    balanced_reassignment,
    batch_assignment,
    centralized_lower_bound,
    decode,
    encode,
    plan_shuffle,
    shifted_assignment,
    worst_case_loads,
)
from coded_fl.shuffling.plan.theory import held_units
from coded_fl.shuffling.plan.units import digest
from simulations.bench.common import Report, median_time
from simulations.runtime.shuffle_harness import silo_buffer

Q = 2
MODES = ("centralized", "decentralized")


def _placement_bound(plan: ShufflePlan, rng: np.random.Generator, samples: int) -> float:
    """Acyclic index-coding bound for the plan's cache placement and demand (max over orders)."""
    side = held_units(plan.holders, plan.K)
    return acyclic_bound(plan.needs, side, t=plan.t, orders=samples, seed=int(rng.integers(2**31)))


def _loads(report: Report, Ks: tuple[int, ...], random_trials: int) -> list[dict[str, Any]]:
    rows = []
    rng = np.random.default_rng(2024)
    for K in Ks:
        ids = list(range(K * Q))
        manifest = UnitManifest.from_data({u: b"\x00" for u in ids})
        now = {u: frozenset({u % K}) for u in ids}
        demands = [("worst", shifted_assignment(now, K))]
        demands += [(f"random{i}", batch_assignment(ids, K, rng=rng)) for i in range(random_trials)]
        for t in range(K + 1):
            w = worst_case_loads(K, t, Q)
            for mode in MODES:
                for demand, nxt in demands:
                    kwargs = {"K": K, "t": t, "mode": mode}
                    plan = plan_shuffle(manifest, now, nxt, storage=w["storage"], **kwargs)
                    uncoded = plan_shuffle(manifest, now, nxt, coded=False, **kwargs)
                    worst = demand == "worst"
                    bound = (
                        centralized_lower_bound(K, Q, w["storage"])
                        if worst
                        else _placement_bound(plan, rng, samples=30)
                    )
                    row = report.add(
                        part="load",
                        K=K,
                        t=t,
                        mode=mode,
                        demand=demand,
                        q=Q,
                        storage_units=w["storage"],
                        units_to_receive=sum(plan.need_counts()),
                        measured_load=plan.load,
                        formula_load=plan.formula_load(),
                        uncoded_load=uncoded.load,
                        paper_load=w[mode] if worst else None,
                        lower_bound=bound,
                        bound_kind="converse, all uncoded placements" if worst else "placement",
                        ratio_to_bound=plan.load / bound if bound > 0 else None,
                        gain_vs_uncoded=uncoded.load / plan.load if plan.load > 0 else None,
                    )
                    rows.append(row)
    return rows


def _planner_time(report: Report, K: int, repeats: int) -> float:
    ids = list(range(K * Q))
    manifest = UnitManifest.from_data({u: b"\x00" for u in ids})
    now = {u: frozenset({u % K}) for u in ids}
    nxt = shifted_assignment(now, K)
    worst = 0.0
    for t in range(K + 1):
        for mode in MODES:
            sec, runs = median_time(
                lambda t=t, mode=mode: plan_shuffle(manifest, now, nxt, K=K, t=t, mode=mode),
                repeats=repeats,
            )
            plan = plan_shuffle(manifest, now, nxt, K=K, t=t, mode=mode)
            report.add(
                part="planner",
                K=K,
                t=t,
                mode=mode,
                seconds=sec,
                messages=plan.n_messages,
                terms=int(plan.term_row.size),
                runs=runs,
            )
            worst = max(worst, sec)
    return worst


def _codec(report: Report, K: int, t: int, mode: str, unit_bytes: int, repeats: int) -> dict:
    rng = np.random.default_rng(K * 100 + t)
    data = {u: rng.bytes(unit_bytes) for u in range(K * Q)}
    now = {u: frozenset({u % K}) for u in data}
    plan = plan_shuffle(
        UnitManifest.from_data(data), now, shifted_assignment(now, K), K=K, t=t, mode=mode
    )
    piece = plan.layout.piece_size
    full = SegmentBuffer.for_plan(plan)  # the central sender: every unit
    for n, u in enumerate(plan.manifest.ids):
        full.put_unit(n, plan.layout.pad(data[u]))
    src, sender = (full, -1) if mode == "centralized" else (silo_buffer(plan, 0, data), 0)
    idx = plan.messages_from(sender)

    def terms(ix: np.ndarray) -> int:
        return int((plan.msg_ptr[ix + 1] - plan.msg_ptr[ix]).sum())

    out = np.empty((idx.size, piece), dtype=np.uint8)
    enc_bytes = terms(idx) * piece
    silo = silo_buffer(plan, 0, data)
    rx = plan.messages_to(0)
    payloads = encode(plan, full, rx)
    dec_bytes = terms(rx) * piece  # payload + every known term read once

    a = np.frombuffer(rng.bytes(max(enc_bytes, dec_bytes)), dtype=np.uint8)
    b = np.empty_like(a)
    t_mem_enc, _ = median_time(lambda: np.copyto(b[:enc_bytes], a[:enc_bytes]), repeats=repeats)
    t_enc, enc_runs = median_time(lambda: encode(plan, src, idx, out=out), repeats=repeats)
    t_mem_dec, _ = median_time(lambda: np.copyto(b[:dec_bytes], a[:dec_bytes]), repeats=repeats)
    t_dec, dec_runs = median_time(lambda: decode(plan, 0, silo, rx, payloads), repeats=repeats)
    for n in plan.needs[0]:  # the timed decodes were real: silo 0 now holds its new units
        if bytes(silo.data[n, : plan.manifest.specs[n].length]) != data[plan.manifest.ids[n]]:
            raise RuntimeError(f"decode produced wrong bytes for unit {n}")

    aead = AESGCM(os.urandom(32))
    nonce = bytes(12)
    flat = payloads.tobytes()
    t_gcm, _ = median_time(lambda: aead.encrypt(nonce, flat, b""), repeats=repeats)
    t_sha, _ = median_time(lambda: digest(flat), repeats=repeats)
    row = report.add(
        part="codec",
        K=K,
        t=t,
        mode=mode,
        unit_bytes=unit_bytes,
        message_bytes=piece,
        encode_messages=int(idx.size),
        encode_bytes_read=enc_bytes,
        encode_gb_per_s=enc_bytes / t_enc / 1e9,
        memcpy_gb_per_s_encode_size=enc_bytes / t_mem_enc / 1e9,
        encode_vs_memcpy=t_mem_enc / t_enc,
        decode_messages=int(rx.size),
        decode_bytes_read=dec_bytes,
        decode_gb_per_s=dec_bytes / t_dec / 1e9,
        memcpy_gb_per_s_decode_size=dec_bytes / t_mem_dec / 1e9,
        decode_vs_memcpy=t_mem_dec / t_dec,
        aes_gcm_gb_per_s=len(flat) / t_gcm / 1e9,
        sha256_gb_per_s=len(flat) / t_sha / 1e9,
        encode_runs=enc_runs,
        decode_runs=dec_runs,
    )
    return row


def _curve(ax: Any, Mf: np.ndarray, pts: list[dict[str, Any]], key: str, *args: Any, **kw: Any):
    """Piecewise-linear (memory sharing) between the measured points, sampled on ``Mf``."""
    M = [r["storage_units"] for r in pts]
    ax.plot(Mf, np.interp(Mf, M, [r[key] for r in pts]), *args, **kw)


def _plot(rows: list[dict[str, Any]], path: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    Ks = sorted({r["K"] for r in rows})
    fig, axes = plt.subplots(1, len(Ks), figsize=(5 * len(Ks), 4), squeeze=False)
    for ax, K in zip(axes[0], Ks, strict=True):
        sel = [r for r in rows if r["K"] == K and r["demand"] == "worst"]
        cen = [r for r in sel if r["mode"] == "centralized"]
        dec = [r for r in sel if r["mode"] == "decentralized"]
        Mf = np.linspace(Q, K * Q, 400)  # lines sampled densely: straight in data space

        _curve(ax, Mf, cen, "uncoded_load", "k--", label="uncoded q(K-t)")
        _curve(ax, Mf, cen, "measured_load", "-", label="centralized, measured", color="C0")
        ax.plot(
            [r["storage_units"] for r in cen], [r["measured_load"] for r in cen], "o", color="C0"
        )
        ax.plot(
            [r["storage_units"] for r in cen],
            [r["paper_load"] for r in cen],
            "x",
            color="k",
            label="q(K-t)/(t+1) (papers)",
        )
        _curve(ax, Mf, dec, "measured_load", "-", label="decentralized, measured", color="C1")
        ax.plot(
            [r["storage_units"] for r in dec], [r["measured_load"] for r in dec], "s", color="C1"
        )
        ax.plot(
            Mf,
            [centralized_lower_bound(K, Q, m) for m in Mf],
            ":",
            color="C2",
            lw=2,
            label="lower bound (uncoded storage)",
        )
        ax.set_yscale("symlog", linthresh=0.1)
        ax.set_title(f"K = {K}, q = {Q}, worst case")
        ax.set_xlabel("storage per silo M (units)")
        ax.set_ylabel("load (units sent)")
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def _relay_level_t(report: Report, K: int, draws: int) -> list[dict[str, Any]]:
    """Loads through the relay at t = 0..3, balanced and uniform reassignments (see 4. above)."""
    rows = []
    rng = np.random.default_rng(31)
    for q, draw in itertools.product((K - 1, 2 * (K - 1)), range(draws)):
        now = {u: u % K for u in range(K * q)}
        balanced = balanced_reassignment(now, K, rng)
        perm = rng.permutation(K * q)  # a uniform reassignment: a fresh random split
        uniform = {u: int(perm[u]) % K for u in now}
        manifest = UnitManifest.from_data({u: bytes(64) for u in now})
        for demand, nxt in (("balanced", balanced), ("uniform", uniform)):
            current = {u: {k} for u, k in now.items()}
            target = {u: {k} for u, k in nxt.items()}
            fanout = sum(1 for u in now if nxt[u] != now[u])
            for t in range(4):
                plan = plan_shuffle(manifest, current, target, K=K, t=t, mode="decentralized")
                side = held_units(plan.holders, K)
                converse = acyclic_bound(plan.needs, side, t=t, orders=16, seed=draw)
                rows.append(
                    report.add(
                        kind="relay_level_t",
                        K=K,
                        q=q,
                        draw=draw,
                        demand=demand,
                        t=t,
                        delivery=(
                            "fan-out"
                            if t == 0
                            else ("holder-sourced" if plan.sources is not None else "clique cover")
                        ),
                        measured_load=plan.load,
                        formula_load=plan.formula_load(),
                        fanout_load=fanout,
                        over_fanout=plan.load / fanout,
                        target_over_fanout=1 / (t + 1),
                        balanced_formula_over_fanout=(K - t) / ((K - 1) * (t + 1)) if t else 1.0,
                        converse_load=converse,
                        converse_over_fanout=converse / fanout,
                        measured_over_converse=plan.load / converse if converse else 1.0,
                    )
                )
    return rows


def run(report: Report, *, quick: bool) -> None:
    Ks = (4, 8, 16)
    report.config.update(
        {
            "relay_level_t": "K = 10, q in {9, 18}, t = 0..3, balanced and uniform reassignments",
            "q_units_per_silo": Q,
            "K": list(Ks),
            "storage": "M_t = q (1 + t (K-1)/K), t = 0..K",
            "random_trials": 1 if quick else 3,
            "throughput": "GB/s of source bytes read; memcpy of as many bytes, same process",
        }
    )
    rows = _loads(report, Ks, random_trials=1 if quick else 3)
    err = max(abs(r["measured_load"] - r["formula_load"]) for r in rows)
    report.goal("max |measured load - scheme formula| over all points (units)", err, 1e-9)
    worst = [r for r in rows if r["demand"] == "worst"]
    cen = [r for r in worst if r["mode"] == "centralized"]
    report.goal(
        "centralized worst case: max ratio to the uncoded-storage lower bound "
        "(Attia-Tandon's stated factor K/(K-1); 1 for t >= 1)",
        max((r["ratio_to_bound"] or 1.0) / (r["K"] / (r["K"] - 1)) for r in cen),
        1.0 + 1e-9,
    )
    dec = [r for r in worst if r["mode"] == "decentralized" and r["ratio_to_bound"]]
    report.goal(
        "decentralized worst case: max ratio to the centralized lower bound (<= (t+1)/t <= 2)",
        max(r["ratio_to_bound"] for r in dec),
        2.0 + 1e-9,
    )
    report.goal(
        "centralized worst case: min over t of (uncoded / coded) / (t + 1)",
        min(r["gain_vs_uncoded"] / (r["t"] + 1) for r in cen if r["gain_vs_uncoded"]),
        1.0 - 1e-9,
        lower_is_better=False,
    )
    relay = _relay_level_t(report, 10, draws=1 if quick else 3)
    for t in (1, 2, 3):
        worst = max(r["over_fanout"] for r in relay if r["demand"] == "balanced" and r["t"] == t)
        report.goal(
            f"relay, level t = {t}, K = 10 (balanced reassignment): upload / fan-out relay "
            f"<= 1.1 x 1/(t+1) = {1.1 / (t + 1):.3f}",
            worst,
            1.1 / (t + 1),
        )
    sec = _planner_time(report, 16, repeats=3 if quick else 5)
    report.goal("planner time at K = 16, slowest t and setting (s)", sec, 1.0)
    unit = (1 << 20) if quick else (8 << 20)
    worst_enc = worst_dec = float("inf")
    for K, t, mode in itertools.product((4, 8), (1, 2), MODES):
        r = _codec(report, K, t, mode, unit, repeats=3 if quick else 7)
        worst_enc = min(worst_enc, r["encode_vs_memcpy"])
        worst_dec = min(worst_dec, r["decode_vs_memcpy"])
    report.goal(
        "encode speed / memcpy speed, worst case",
        worst_enc,
        0.5,
        lower_is_better=False,
        applies=not quick,
    )
    report.goal(
        "decode speed / memcpy speed, worst case",
        worst_dec,
        0.5,
        lower_is_better=False,
        applies=not quick,
    )
    if report.out:
        png = Path(report.out).with_suffix(".png")
        png.parent.mkdir(parents=True, exist_ok=True)
        if _plot(rows, png):
            report.notes.append(f"plot: {png.name}")
            print(f"[{report.name}] wrote {png}", flush=True)
        else:
            report.notes.append("matplotlib is not installed: no plot (pip install matplotlib)")
