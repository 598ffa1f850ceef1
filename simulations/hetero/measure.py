"""How many coordinates two replicas of one partition disagree on, by cause and by setting.

``python -m simulations.hetero.measure --out FILE.json [--quick]``

One partition of the main job (``simulations/app/task.py``: its data, ``train``, ``Net`` and
``WideNet`` at its default width 4) is trained from the same initial model and the same seed,
the way the coded-fl mod has every replica train it, under different settings, each in its own
process:

- ``ref``: the machine's best CPU kernels (``ATEN_CPU_CAPABILITY`` unset), 1 torch thread;
- ``repeat``: ``ref`` again in another process (the control: it must give 0 everywhere);
- ``threads-2``: 2 torch threads;
- ``avx2`` / ``isa-default``: ``ATEN_CPU_CAPABILITY=avx2`` / ``default`` (no vector kernels).

Each replica's result is turned into what the mod quantizes (``clients/mod.py``): the update
vector of ``coded_fl.layout.UpdateLayout`` -- :math:`\\rho_k (\\theta_k - \\theta)`, the weight,
the clip rate and the ``train_loss`` metric, with :math:`\\rho_k = w_k / W` -- then quantized with
the protocol's rounding key for (run, round, partition) at the scale
``QuantizationConfig.for_summands(K, clip_range=c, headroom_bits=h)`` for several h. Counted
against ``ref``: float32 model parameters that differ, update-vector floats that differ, and
quantized coordinates that differ (with the expected count :math:`\\sum_i \\min(1, |\\Delta_i| s)`,
since stochastic rounding with a shared uniform moves a coordinate exactly when the threshold
falls between the two replicas' scaled values).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from torch import nn

from clients.mod import partition_seed
from coded_fl.layout import UpdateLayout
from coded_fl.quantize import QuantizationConfig, RoundingKey, quantize
from simulations.app.task import Net, WideNet, load_partition, train

__all__ = ["SETTINGS", "WideNet", "main", "measure"]

RUN_ID = "hetero-measure"
#: the protocol's seed id (``ProtocolConfig.seed_id``: run id / session)
SEED_ID = f"{RUN_ID}/"
ROUND = 1
#: name -> (ATEN_CPU_CAPABILITY or None for the machine's best, torch threads)
SETTINGS: dict[str, tuple[str | None, int]] = {
    "ref": (None, 1),
    "repeat": (None, 1),
    "threads-2": (None, 2),
    "avx2": ("avx2", 1),
    "isa-default": ("default", 1),
}
HEADROOM = (0, 4, 8, 12, 16)


MODELS = {"net": Net, "wide": WideNet}


def _flat(net: nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in net.state_dict().values()]).float()


# ----------------------------------------------------------------------------- worker
def _worker(args: argparse.Namespace) -> None:
    """Train every (model, epochs, partition) once under this process's settings."""
    torch.set_num_threads(args.threads)
    tmp = Path(args.tmp)
    info = {
        "capability": torch.backends.cpu.get_cpu_capability(),
        "threads": torch.get_num_threads(),
        "env": os.environ.get("ATEN_CPU_CAPABILITY"),
    }
    for model in args.models.split(","):
        init = torch.load(tmp / f"init-{model}.pt")
        for k in (int(v) for v in args.partitions.split(",")):
            x, y = load_partition(k, args.num_partitions, seed=0)
            for epochs in (int(v) for v in args.epochs.split(",")):
                net = MODELS[model]()
                net.load_state_dict(init)
                seed = partition_seed(SEED_ID, ROUND, k)
                torch.manual_seed(seed)  # what the mod does before calling the train function
                t0 = time.perf_counter()
                loss = train(net, x, y, epochs=epochs, lr=args.lr, batch_size=32, seed=seed)
                info[f"seconds-{model}-{epochs}-{k}"] = time.perf_counter() - t0
                out = {"flat": _flat(net), "loss": loss, "examples": len(y)}
                torch.save(out, tmp / f"{args.name}-{model}-{epochs}-{k}.pt")
    (tmp / f"{args.name}.json").write_text(json.dumps(info))


def _run_setting(name: str, tmp: Path, ns: argparse.Namespace, timeout: float) -> dict[str, Any]:
    cap, threads = SETTINGS[name]
    env = dict(os.environ)
    env.pop("ATEN_CPU_CAPABILITY", None)
    if cap is not None:
        env["ATEN_CPU_CAPABILITY"] = cap
    env["OMP_NUM_THREADS"] = str(threads)
    cmd = [
        sys.executable,
        "-m",
        "simulations.hetero.measure",
        "--worker",
        "--name",
        name,
        "--tmp",
        str(tmp),
        "--threads",
        str(threads),
        "--models",
        ",".join(ns.models),
        "--epochs",
        ",".join(map(str, ns.epochs)),
        "--partitions",
        ",".join(map(str, ns.partitions)),
        "--num-partitions",
        str(ns.num_partitions),
        "--lr",
        str(ns.lr),
    ]
    subprocess.run(cmd, env=env, check=True, timeout=timeout)
    info: dict[str, Any] = json.loads((tmp / f"{name}.json").read_text())
    return info


# ----------------------------------------------------------------------------- analysis
def _packed(
    result: dict[str, Any], init: torch.Tensor, c: float, max_weight: float
) -> torch.Tensor:
    """The update vector the mod quantizes for this replica (``clients/training.py``)."""
    rho = float(result["examples"]) / max_weight
    lay = UpdateLayout(model_size=init.numel(), metric_keys=("train_loss",))
    delta = (result["flat"] - init) * rho
    return lay.pack(delta, rho=rho, clip_range=c, metrics={"train_loss": float(result["loss"])})


def _compare(
    ref: dict[str, Any],
    other: dict[str, Any],
    init: torch.Tensor,
    *,
    k: int,
    c: float,
    K: int,
    max_weight: float,
) -> dict[str, Any]:
    a, b = ref["flat"], other["flat"]
    va, vb = _packed(ref, init, c, max_weight), _packed(other, init, c, max_weight)
    key = RoundingKey.for_partition(SEED_ID, ROUND, k)
    quant: dict[str, Any] = {}
    for h in HEADROOM:
        cfg = QuantizationConfig.for_summands(K, clip_range=c, headroom_bits=h)
        qa, qb = quantize(va, cfg, key), quantize(vb, cfg, key)
        diff = (va.double() - vb.double()).abs().clamp(max=2 * c)
        quant[str(h)] = {
            "scale": cfg.scale,
            "differ": int((qa != qb).sum()),
            "expected": float((diff * cfg.scale).clamp(max=1.0).sum()),
        }
    return {
        "params": int(a.numel()),
        "params_differ": int((a != b).sum()),
        "max_abs_diff": float((a - b).abs().max()),
        "update_differ": int((va != vb).sum()),
        "vector_length": int(va.numel()),
        "loss_differs": bool(ref["loss"] != other["loss"]),
        "quantized": quant,
    }


def measure(
    *,
    quick: bool = False,
    models: tuple[str, ...] | None = None,
    epochs: tuple[int, ...] | None = None,
    partitions: tuple[int, ...] = (0,),
    num_partitions: int = 10,
    clip_range: float = 1.0,
    max_weight: float = 1000.0,
    lr: float = 0.1,
    seed: int = 0,
    timeout: float = 1800.0,
) -> dict[str, Any]:
    """Train under every setting of :data:`SETTINGS` and count the disagreements with ``ref``.

    Returns the JSON document (``rows``: one per model, epochs, partition and setting).
    """
    ns = argparse.Namespace(
        models=models or (("net",) if quick else ("net", "wide")),
        epochs=epochs or ((1, 2) if quick else (1, 2, 5)),
        partitions=partitions,
        num_partitions=num_partitions,
        lr=lr,
    )
    t_start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="cfl-hetero-") as d:
        tmp = Path(d)
        inits = {}
        for model in ns.models:
            torch.manual_seed(seed)  # the server's initial model: the same for every replica
            net = MODELS[model]()
            torch.save(net.state_dict(), tmp / f"init-{model}.pt")
            inits[model] = _flat(net)
        settings = {name: _run_setting(name, tmp, ns, timeout) for name in SETTINGS}
        rows = []
        pairwise: dict[str, dict[str, int]] = {}
        for model in ns.models:
            for ep in ns.epochs:
                for k in ns.partitions:
                    flats = {
                        n: torch.load(tmp / f"{n}-{model}-{ep}-{k}.pt")["flat"] for n in SETTINGS
                    }
                    pairwise[f"{model}/{ep}/{k}"] = {
                        f"{a}|{b}": int((flats[a] != flats[b]).sum())
                        for i, a in enumerate(SETTINGS)
                        for b in list(SETTINGS)[i + 1 :]
                    }
                    ref = torch.load(tmp / f"ref-{model}-{ep}-{k}.pt")
                    for name in SETTINGS:
                        if name == "ref":
                            continue
                        other = torch.load(tmp / f"{name}-{model}-{ep}-{k}.pt")
                        row = _compare(
                            ref,
                            other,
                            inits[model],
                            k=k,
                            c=clip_range,
                            K=num_partitions,
                            max_weight=max_weight,
                        )
                        rows.append(
                            {"model": model, "epochs": ep, "partition": k, "setting": name, **row}
                        )
    return {
        "what": "replica disagreement against 'ref' (same data, seed and initial model)",
        "machine": {
            "cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "torch": torch.__version__,
            "cpus": os.cpu_count(),
            "processor": platform.processor() or platform.machine(),
        },
        "config": {
            "quick": quick,
            "K": num_partitions,
            "clip_range": clip_range,
            "max_weight": max_weight,
            "lr": lr,
            "batch_size": 32,
            "seed": seed,
            "headroom_bits": list(HEADROOM),
            "models": list(ns.models),
            "epochs": list(ns.epochs),
            "partitions": list(ns.partitions),
        },
        "settings": {
            name: {"ATEN_CPU_CAPABILITY": SETTINGS[name][0], "threads": SETTINGS[name][1], **info}
            for name, info in settings.items()
        },
        "rows": rows,
        #: float32 parameters that differ between every two settings ("model/epochs/partition")
        "pairwise_params_differ": pairwise,
        "seconds": time.perf_counter() - t_start,
    }


def table(doc: dict[str, Any]) -> str:
    """The measurement as a markdown table (quantized differences per headroom h)."""
    hs = doc["config"]["headroom_bits"]
    head = (
        "| model (params) | epochs | replica vs ref | float32 params differ | max abs diff | "
        + " | ".join(f"q differ h={h}" for h in hs)
        + " |"
    )
    lines = [head, "|" + "---|" * (5 + len(hs))]
    for r in doc["rows"]:
        q = r["quantized"]
        cells = " | ".join(f"{q[str(h)]['differ']} ({q[str(h)]['expected']:.1f})" for h in hs)
        part = f" p{r['partition']}" if len(doc["config"]["partitions"]) > 1 else ""
        lines.append(
            f"| {r['model']} ({r['params']:,}) | {r['epochs']}{part} | {r['setting']} | "
            f"{r['params_differ']:,} | {r['max_abs_diff']:.1e} | {cells} |"
        )
    caps = ", ".join(f"{n}: {s['capability']}/{s['threads']}t" for n, s in doc["settings"].items())
    return (
        "\n".join(lines)
        + f"\n\nq differ: quantized coordinates (of {doc['rows'][0]['vector_length']:,} for net) "
        "that differ, (expected from the float differences); h = headroom_bits, "
        f"K = {doc['config']['K']}. Settings (capability/threads): {caps}."
    )


def main(argv: list[str] | None = None) -> int:
    """Command line: see the module docstring."""
    p = argparse.ArgumentParser(prog="python -m simulations.hetero.measure", description=__doc__)
    p.add_argument("--out", help="write the JSON here")
    p.add_argument("--quick", action="store_true", help="Net only, 1 and 2 epochs (~1 min)")
    p.add_argument("--partitions", default="0", help="partitions to train, e.g. 0,1,2")
    # the worker side (one setting per process: ATEN_CPU_CAPABILITY is read at import)
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--name", help=argparse.SUPPRESS)
    p.add_argument("--tmp", help=argparse.SUPPRESS)
    p.add_argument("--threads", type=int, default=1, help=argparse.SUPPRESS)
    p.add_argument("--models", default="net", help=argparse.SUPPRESS)
    p.add_argument("--epochs", default="1", help=argparse.SUPPRESS)
    p.add_argument("--num-partitions", type=int, default=10, help=argparse.SUPPRESS)
    p.add_argument("--lr", type=float, default=0.1, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        _worker(args)
        return 0
    doc = measure(quick=args.quick, partitions=tuple(int(v) for v in args.partitions.split(",")))
    print(table(doc))
    print(f"\n{doc['seconds']:.0f} s")
    if args.out:
        Path(args.out).write_text(json.dumps(doc, indent=1) + "\n")
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
