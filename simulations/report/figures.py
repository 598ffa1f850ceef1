"""The report's figures, one function per figure, each drawn from a benchmark's JSON.

Every function takes the loaded JSON (``None`` where that benchmark was not run) and a PNG path,
writes the figure with a footer naming the machine, the versions and the date that produced
the figures, and returns the footer text; or returns ``None`` (nothing to draw).
"""

from __future__ import annotations

import textwrap
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from simulations.stragglers.model import SiloTimes

__all__ = ["FIGURES", "provenance"]

Bench = dict[str, Any]


def provenance(bench: Bench) -> str:
    """``cpu, cores, versions, date`` of the machine block of a benchmark JSON."""
    m = bench.get("machine", {})
    versions = ", ".join(
        f"{k} {m[k]}" for k in ("python", "torch", "numpy", "numba", "flwr") if m.get(k)
    )
    gpu = f", GPU {m['gpu']}" if m.get("gpu") else ", no GPU"
    quick = " — QUICK run (small sizes)" if bench.get("quick") else ""
    return (
        f"{bench.get('benchmark', '?')}: {m.get('cpu', '?')}, {m.get('cores', '?')} cores{gpu}; "
        f"{versions}; {m.get('date', '?')}{quick}"
    )


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig: Any, path: Path, benches: list[Bench]) -> str:
    text = "\n".join(provenance(b) for b in benches)
    width = max(40, int(fig.get_figwidth() * 17))  # characters of 7-pt text across the figure
    lines = [w for line in text.splitlines() for w in textwrap.wrap(line, width)]
    fig.text(0.01, 0.005, "\n".join(lines), fontsize=7, color="0.35", va="bottom", ha="left")
    bottom = (0.1 + 0.12 * len(lines)) / fig.get_figheight()  # inches of footer, as a fraction
    with warnings.catch_warnings():  # image-only axes (shuffling) are not layout-aware
        warnings.simplefilter("ignore", UserWarning)
        fig.tight_layout(rect=(0, bottom, 1, 1))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    _plt().close(fig)
    return text


def _plain_log_ticks(ax: Any) -> None:
    """Log axes labelled 2, 3, 5 instead of 2x10^0."""
    from matplotlib.ticker import NullFormatter, ScalarFormatter

    for axis in (ax.xaxis, ax.yaxis):
        if axis.get_scale() == "log":
            axis.set_major_formatter(ScalarFormatter())
            axis.set_minor_formatter(NullFormatter())


def _rows(bench: Bench | None, **match: Any) -> list[dict[str, Any]]:
    if not bench:
        return []
    return [r for r in bench["results"] if all(r.get(k) == v for k, v in match.items())]


# ---------------------------------------------------------------------------- stragglers
def stragglers_speedup(benches: dict[str, Bench], path: Path) -> str | None:
    """Speedup vs s against theory: virtual clock (top) and Flower (bottom), i.i.d. and tail."""
    b = benches.get("stragglers")
    if not b or not _rows(b, kind="des"):
        return None
    plt = _plt()
    fig, axes = plt.subplots(2, 2, figsize=(12, 8.5))
    for col, model in enumerate(("iid", "heavy")):
        ax = axes[0][col]
        rows = _rows(b, kind="des", model=model)
        ns = sorted({r["n"] for r in rows})
        for i, n in enumerate(ns):
            sel = sorted((r for r in rows if r["n"] == n), key=lambda r: r["s"])
            frac = [r["s"] / n for r in sel]
            ax.plot(frac, [r["theory_speedup"] for r in sel], "-", color=f"C{i}", alpha=0.6)
            ax.plot(frac, [r["measured_speedup"] for r in sel], "o", color=f"C{i}", label=f"n={n}")
        if model == "iid":  # the closed form, dense in s, for the largest n
            n = ns[-1]
            s = np.arange(1, n // 2 + 1)
            m = SiloTimes.iid(n, mu=1.0)
            ax.plot(
                s / n,
                [m.theoretical_speedup(int(k)) for k in s],
                ":",
                color="0.4",
                label=f"H_n/(H_n-H_s), n={n}",
            )
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("s / n (stragglers tolerated)")
        ax.set_ylabel("speedup E[T_all] / E[T_coded]")
        tail = "i.i.d. Exp" if model == "iid" else "heavy tail (5 % of silos 5-10x slower)"
        ax.set_title(f"virtual clock, {tail}\nlines: theory, dots: measured", fontsize=10)
        _plain_log_ticks(ax)
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=7, ncol=2)
        ax = axes[1][col]
        rows = _rows(b, kind="flower", model=model)
        for i, n in enumerate(sorted({r["n"] for r in rows})):
            sel = sorted((r for r in rows if r["n"] == n), key=lambda r: r["s"])
            s = [r["s"] for r in sel]
            ax.plot(
                s,
                [r["theory_speedup"] for r in sel],
                "-",
                color=f"C{i}",
                alpha=0.6,
                label=f"n={n} theory",
            )
            ax.plot(
                s,
                [r.get("corrected_speedup", r["straggler_speedup"]) for r in sel],
                "o",
                color=f"C{i}",
                label=f"n={n} straggler part, corrected",
            )
            ax.plot(
                s,
                [r["straggler_speedup"] for r in sel],
                "o",
                mfc="none",
                color=f"C{i}",
                label=f"n={n} straggler part",
            )
            ax.plot(
                s, [r["raw_speedup"] for r in sel], "x", color=f"C{i}", label=f"n={n} measured, raw"
            )
            ax.plot(s, [r["sample_speedup"] for r in sel], "_", ms=14, color=f"C{i}")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("s")
        ax.set_ylabel("speedup (plain FedAvg / coded-fl round time)")
        ax.set_title(
            f"real Flower simulation, {'i.i.d. Exp' if model == 'iid' else 'heavy tail'}\n"
            "lines: theory; dashes: order statistics of the very draws used",
            fontsize=10,
        )
        _plain_log_ticks(ax)
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=6, ncol=3, loc="upper left")
    return _save(fig, path, [b])


def stragglers_round_time(benches: dict[str, Bench], path: Path) -> str | None:
    """Round time vs n: Flower simulation (rounds benchmark: plain, SecAgg+, ours) where
    measured, and the virtual clock's plain vs coded rounds with stragglers."""
    r = benches.get("rounds")
    b = benches.get("stragglers")
    rrows = [x for x in (r or {}).get("results", []) if "variant" in x]
    drows = _rows(b, kind="des", model="iid")
    if not rrows and not drows:
        return None
    plt = _plt()
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.6))
    ax = axes[0]
    if rrows:
        for i, v in enumerate(sorted({x["variant"] for x in rrows})):
            sel = sorted((x for x in rrows if x["variant"] == v), key=lambda x: x["n"])
            ax.plot(
                [x["n"] for x in sel],
                [x["seconds_per_round"] for x in sel],
                "o-",
                color=f"C{i}",
                label=v,
            )
        ax.set_title(f"Flower simulation, d={rrows[0].get('d', 0):.0e}, no injected delays")
        ax.legend(fontsize=8)
    else:
        ax.text(0.5, 0.5, "rounds benchmark: not measured", ha="center", va="center")
        ax.set_title("Flower simulation: plain FedAvg vs SecAgg+ vs ours")
    ax.set_xlabel("n (silos)")
    ax.set_ylabel("seconds per round")
    ax.grid(alpha=0.3)
    ax = axes[1]
    if drows:
        ns = sorted({x["n"] for x in drows})
        plain = [next(x["plain_seconds"] for x in drows if x["n"] == n) for n in ns]
        ax.plot(ns, plain, "ks-", label="plain FedAvg (waits for all)")
        for j, frac in enumerate((0.05, 0.1, 0.2)):
            pts = [
                (n, x["coded_seconds"])
                for n in ns
                for x in drows
                if x["n"] == n and x["s"] == max(1, round(frac * n))
            ]
            ax.plot(
                *zip(*pts, strict=True),
                "o-",
                color=f"C{j}",
                label=f"coded-fl, s = {int(100 * frac)} % of n",
            )
        ax.set_xscale("log")
        ax.set_title(
            f"virtual clock, i.i.d. Exp, mean silo time "
            f"{drows[0]['mean_silo_seconds']:g} s, d={drows[0]['d']:.0e}"
        )
        ax.set_xlabel("n (silos)")
        ax.set_ylabel("mean seconds per round")
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=8)
    return _save(fig, path, [x for x in (r, b) if x])


# ---------------------------------------------------------------------------- accuracy
def accuracy_curves(benches: dict[str, Bench], path: Path) -> str | None:
    b = benches.get("accuracy")
    rows = _rows(b, kind="accuracy")
    if not rows or b is None:
        return None
    plt = _plt()
    cols = min(3, len(rows))
    nrow = (len(rows) + cols - 1) // cols
    fig, axes = plt.subplots(nrow, cols, figsize=(4.6 * cols, 3.4 * nrow), squeeze=False)
    for ax, r in zip(axes.flat, rows, strict=False):
        x = np.arange(0, len(r["ours_accuracy"]) + 1)
        ref = next(
            (
                q
                for q in rows
                if r.get("drop")
                and q.get("drop") == 0
                and q.get("partition") == r.get("partition")
                and q.get("strategy") == r.get("strategy")
            ),
            None,
        )
        if ref is not None:
            ax.plot(
                x,
                [ref["initial_accuracy"], *ref["plain_accuracy"]],
                ":",
                color="0.5",
                label="plain FedAvg, no dropouts",
            )
        ax.plot(x, [r["initial_accuracy"], *r["plain_accuracy"]], "k-", label="plain FedAvg")
        ax.plot(x, [r["initial_accuracy"], *r["ours_accuracy"]], "--", color="C1", label="coded-fl")
        ax.set_title(f"{r['setting']}: {r['difference_pp']:+.2f} pp", fontsize=9)
        ax.set_xlabel("round")
        ax.set_ylabel("held-out accuracy")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="lower right")
    for ax in list(axes.flat)[len(rows) :]:
        ax.axis("off")
    return _save(fig, path, [b])


def quantization_error(benches: dict[str, Bench], path: Path) -> str | None:
    b = benches.get("accuracy")
    rows = sorted(_rows(b, kind="quantization"), key=lambda r: r["scale"])
    if not rows or b is None:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6.5, 4.4))
    sc = [r["scale"] for r in rows]
    ax.loglog(sc, [r["bound_sum"] for r in rows], "k-", label="bound K/scale")
    ax.loglog(
        sc,
        [r["max_abs_error_sum"] for r in rows],
        "o",
        color="C0",
        label="max |decoded - float| (sum)",
    )
    ax.loglog(
        sc,
        [r["rms_expected_sum"] for r in rows],
        ":",
        color="C1",
        label="rms expected sqrt(K/6)/scale",
    )
    ax.loglog(sc, [r["rms_error_sum"] for r in rows], "s", color="C1", label="rms measured")
    for r in rows:
        if r.get("default_scale"):
            ax.axvline(r["scale"], color="0.6", ls="--", lw=1)
            ax.text(r["scale"], r["bound_sum"], " default scale", fontsize=7, color="0.4")
    ax.set_xlabel("scale")
    ax.set_ylabel("error of the decoded sum")
    ax.set_title(f"quantization error, K={rows[0]['K']} partitions, d={rows[0]['d']:.0e}")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    return _save(fig, path, [b])


# ---------------------------------------------------------------------------- other issues
def shuffling_load(benches: dict[str, Bench], path: Path) -> str | None:
    b = benches.get("shuffling")
    rows = [r for r in (b or {}).get("results", []) if "storage_units" in r]
    if not rows or b is None:
        return None
    from simulations.bench.shuffling import _plot

    fig_path = path.with_name(path.stem + ".raw.png")
    if not _plot(rows, fig_path):
        return None
    plt = _plt()
    img = plt.imread(fig_path)
    fig_path.unlink()
    h, w = img.shape[:2]
    fig = plt.figure(figsize=(w / 110, h / 110 + 0.4))
    ax = fig.add_axes((0, 0.06, 1, 0.94))
    ax.imshow(img)
    ax.axis("off")
    return _save(fig, path, [b])


def kernel_ratios(benches: dict[str, Bench], path: Path) -> str | None:
    """Kernel time / memcpy (kernels), decode / read pass (codes), protocol / plain CPU."""
    k, c, p = benches.get("kernels"), benches.get("codes"), benches.get("protocol")
    krows = [r for r in (k or {}).get("results", []) if "ratio_to_memcpy" in r and "kernel" in r]
    crows = _rows(c, op="decode", code="polynomial")
    prows = _rows(p, kind="coded_vs_plain")
    if not (krows or crows or prows):
        return None
    plt = _plt()
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.6))
    ax = axes[0]
    if krows:
        d = max(r["d"] for r in krows)
        sel = [r for r in krows if r["d"] == d]
        names = [
            r["kernel"] + (f" ({r['implementation']})" if r.get("implementation") else "")
            for r in sel
        ]
        ax.barh(range(len(sel)), [r["ratio_to_memcpy"] for r in sel], color="C0")
        ax.set_yticks(range(len(sel)), names, fontsize=6)
        ax.set_xscale("log")
        ax.set_xlabel("time / float32 memcpy of d elements")
        ax.set_title(f"kernels, one core, d={d:.0e}")
    else:
        ax.text(0.5, 0.5, "kernels benchmark: not measured", ha="center", va="center")
    ax = axes[1]
    if crows:
        ns = sorted({r["n"] for r in crows})
        for j, d in enumerate(sorted({r["d"] for r in crows})):
            worst = [
                max(r["ratio_to_read"] for r in crows if r["n"] == n and r["d"] == d)
                for n in ns
                if any(r["n"] == n and r["d"] == d for r in crows)
            ]
            ax.plot(ns[: len(worst)], worst, "o-", color=f"C{j}", label=f"d={d:.0e}, worst s")
        ax.set_xlabel("n")
        ax.set_ylabel("decode / one read pass of the n-s replies")
        ax.set_title("gradient-code decode (polynomial)")
        ax.legend(fontsize=8)
    else:
        ax.text(0.5, 0.5, "codes benchmark: not measured", ha="center", va="center")
    ax.grid(alpha=0.3)
    ax = axes[2]
    if prows:
        for j, priv in enumerate(sorted({r["privacy"] for r in prows})):
            sel = sorted((r for r in prows if r["privacy"] == priv), key=lambda r: r["n"])
            ax.plot(
                [r["n"] for r in sel],
                [r["overhead_ratio_one_silo_plus_server"] for r in sel],
                "o-",
                color=f"C{j}",
                label=f"one silo + server, {priv}",
            )
            ax.plot(
                [r["n"] for r in sel],
                [r["upload_ratio"] for r in sel],
                "s:",
                color=f"C{j}",
                label=f"upload bytes, {priv}",
            )
        ax.set_xlabel("n")
        ax.set_ylabel("coded / plain summation")
        ax.set_title("protocol CPU and bytes per round (in memory)")
        ax.legend(fontsize=7)
    else:
        ax.text(0.5, 0.5, "protocol benchmark: not measured", ha="center", va="center")
    ax.grid(alpha=0.3)
    return _save(fig, path, [x for x in (k, c, p) if x])


#: file name -> (title, function)
FIGURES: dict[str, tuple[str, Callable[[dict[str, Bench], Path], str | None]]] = {
    "stragglers_speedup.png": ("Straggler speedup against theory", stragglers_speedup),
    "round_time.png": ("Round time against n", stragglers_round_time),
    "accuracy.png": ("Accuracy per round, plain FedAvg vs coded-fl", accuracy_curves),
    "quantization.png": (
        "Quantization error of the aggregate against the scale",
        quantization_error,
    ),
    "shuffling.png": ("Coded shuffling: load against storage", shuffling_load),
    "kernels.png": ("Kernel, decode and protocol cost ratios", kernel_ratios),
}
