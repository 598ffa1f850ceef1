"""The ``dp`` benchmark (issue 33): distributed DP (ours) against Flower's central DP and local
DP at the same epsilon, on the main job's task and model.

Run: ``python -m simulations.bench dp --out docs/bench/dp.json [--quick]``.

Setting (full size, as the issue states it): n = 10 silos, s = 2, K = 10 partitions of the main
job's 4,000 digits (IID, 400 each), the main job's CNN (11,122 parameters), 2 local epochs of
SGD per round (lr 0.1, momentum 0.9, batch 32), 20 rounds, delta = 1e-5, epsilon in {1, 3, 8}
(the goals), 20 and 50 (beyond the goals: where this federation starts to learn), every partition's
update clipped to L2 norm C = :data:`CLIP`. The privacy unit is a partition (all its examples):
add or remove one, for every method. Every method runs in this process against real
ClientApps, one per node (:class:`simulations.runtime.inprocess_grid.InProcessGrid`), with the
same training, data and evaluation:

- **ours**: ``CodedSecAgg(FedAvg(), num_stragglers=2, privacy_threshold=1,
  dp=DistributedDP.for_epsilon(epsilon, clip=C, d=..., rounds=20))`` with ``coded_secagg_mod``:
  the real machines, aligned masks, keying rounds and Skellam shares; the noise survives T = 1
  colluding silo, so its total variance is g / (g - T) = 1.5 times what the guarantee needs.
  Its epsilon is the one the run reports;
- **central**: Flower's ``DifferentialPrivacyServerSideFixedClipping(FedAvg(), z, C, 10)``
  (the server clips and adds Gaussian noise of standard deviation z C / 10 to the mean: a
  trusted server) with Flower's own ``RdpAccountant`` (no amplification), z =
  :func:`coded_fl.dp.accounting.gaussian_multiplier` of the target; its epsilon is the one
  Flower's accountant reports;
- **local**: each client clips its update to C and adds N(0, (z C)^2) per coordinate itself
  (a mod after its train function), z sized so that each client's 20 releases meet the target
  with the same accountant; plain FedAvg;
- **ours-t0**: ours at T = 0 (masks against the server; no colluding silo assumed, so no
  noise is added for one: the same noise as central DP, without trusting the server);
- **no DP**: plain FedAvg (the accuracy without noise or clipping).

Per run: the final accuracy (server-side, the 1,000 held-out digits) and the noise each round
added to the released mean, measured as (model after) - (model before) - (mean of the
partitions' clipped updates, recomputed here from the trainings the run did). The round time
goal compares ours with and without DP at epsilon 8, in alternated runs (median round seconds
of the completed rounds 3..20: the rounds that deal the edge keys are left out on both
sides).
"""

from __future__ import annotations

import hashlib
import itertools
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np
import torch
from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from flwr.clientapp.typing import ClientAppCallable
from flwr.serverapp.strategy import DifferentialPrivacyServerSideFixedClipping, FedAvg

from clients import coded_secagg_mod
from coded_fl.dp import DistributedDP
from coded_fl.dp.accounting import gaussian_multiplier
from coded_fl.layout import UpdateLayout, flatten
from coded_fl.vocabulary import SEED_ENTRY
from simulations.app.task import Net, load_partition, make_evaluator, train
from simulations.bench.adversary import _arrays_like, _quiet_flower
from simulations.bench.common import Report
from simulations.runtime.inprocess_grid import InProcessGrid, task_identity
from strategies import CodedSecAgg

#: The L2 clip of every partition's update (round-1 updates of the main job have norms
#: 1.4-1.9: clipping at 0.5 keeps their direction and bounds the sensitivity)
CLIP = 0.5
DELTA = 1e-5
GOAL_EPSILONS = (1.0, 3.0, 8.0)
METHODS = ("ours", "central", "local", "ours-t0")


@dataclass(frozen=True)
class Size:
    """One benchmark size."""

    silos: int
    rounds: int
    epochs: int
    examples: int | None  # per partition (None: all 400)
    epsilons: tuple[float, ...]
    repeats: int  # runs per (method, epsilon), and alternated timing pairs


FULL = Size(
    silos=10, rounds=20, epochs=2, examples=None, epsilons=(1.0, 3.0, 8.0, 20.0, 50.0), repeats=2
)
QUICK = Size(silos=10, rounds=4, epochs=1, examples=60, epsilons=(3.0,), repeats=1)


# ---------------------------------------------------------------------------- training
@dataclass
class _Trainer:
    """The main job's train function, memoised per (partition, seed, model) so the s + 1
    replicas of a partition train once in this process; keeps every training for the noise
    measurement: model digest -> partition -> trained flat model."""

    epochs: int
    examples: int | None
    runs: dict[bytes, dict[int, torch.Tensor]] = field(default_factory=dict)
    _data: dict[int, tuple[torch.Tensor, torch.Tensor]] = field(default_factory=dict)

    def __call__(self, msg: Message, context: Context) -> Message:
        k = int(context.node_config["partition-id"])
        parts = int(context.node_config["num-partitions"])
        conf = msg.content["config"]
        model = msg.content.array_records["arrays"]
        theta = flatten(model)
        tag = _tag(theta)
        seed = int(conf.get(SEED_ENTRY, 7919 * int(conf.get("server-round", 0)) + k))  # type: ignore[arg-type]
        done = self.runs.setdefault(tag, {})
        if k not in done:
            if k not in self._data:
                x, y = load_partition(k, parts)
                self._data[k] = (x[: self.examples], y[: self.examples])
            net = Net()
            net.load_state_dict(model.to_torch_state_dict())
            train(net, *self._data[k], epochs=self.epochs, lr=0.1, batch_size=32, seed=seed)
            done[k] = flatten(ArrayRecord(net.state_dict()))
        arrays = _arrays_like(model, done[k])
        metrics = MetricRecord({"num-examples": len(self._data[k][1])})
        return Message(RecordDict({"arrays": arrays, "metrics": metrics}), reply_to=msg)


def _tag(theta: torch.Tensor) -> bytes:
    return hashlib.blake2b(theta.numpy().tobytes(), digest_size=16).digest()


def _clipped(delta: np.ndarray, clip: float) -> np.ndarray:
    norm = float(np.linalg.norm(delta))
    return delta if norm <= clip else delta * (clip / norm)


def _local_dp_mod(z: float, clip: float, seed: int) -> Callable[..., Message]:
    """Local DP: the client clips its update and adds N(0, (z clip)^2) per coordinate before
    it leaves (a mod after the train function)."""

    def mod(msg: Message, context: Context, call_next: ClientAppCallable) -> Message:
        reply = call_next(msg, context)
        model = msg.content.array_records["arrays"]
        theta = flatten(model).double().numpy()
        trained = flatten(reply.content.array_records["arrays"]).double().numpy()
        rnd = int(msg.content["config"].get("server-round", 0))  # type: ignore[arg-type]
        gen = np.random.default_rng([seed, int(context.node_id), rnd])
        noisy = theta + _clipped(trained - theta, clip) + gen.normal(0.0, z * clip, theta.size)
        reply.content["arrays"] = _arrays_like(model, torch.from_numpy(noisy).float())
        return reply

    return mod


def _app(trainer: _Trainer, mods: list[Any]) -> ClientApp:
    app = ClientApp(mods=mods)
    app.train()(trainer)
    return app


# ---------------------------------------------------------------------------- one run
@dataclass
class Run:
    """One run's outcome."""

    method: str
    epsilon: float | None
    accuracy: float
    noise_std: list[float]  # per round, per coordinate of the released mean
    round_seconds: list[float]  # completed rounds only
    reported_epsilon: float | None
    noise_multiplier: float | None
    keying_rounds: int = 0
    erased: int = 0
    seconds: float = 0.0
    aborted: int = 0


@contextmanager
def _session(token: str) -> Iterator[None]:
    """Ours: the session id of every run of one repeat (fresh keys all the same)."""
    with mock.patch("strategies.secagg_runs.secrets.token_hex", return_value=token):
        yield


def run_one(method: str, epsilon: float | None, size: Size, repeat: int) -> Run:
    """One run of ``method`` ("ours", "ours-nodp", "central", "local", "plain") at
    ``epsilon`` (None for the runs without DP).

    Parameters
    ----------
    method
        Which mechanism.
    epsilon
        The target over the run (delta = :data:`DELTA`).
    size
        The benchmark size.
    repeat
        The repeat index (seeds the noise of the baselines and the session of ours).

    Returns
    -------
    Run
    """
    n, rounds = size.silos, size.rounds
    trainer = _Trainer(size.epochs, size.examples)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        initial = ArrayRecord(Net().state_dict())
    d_model = flatten(initial).numel()
    evaluate = make_evaluator(0)
    models: list[np.ndarray] = []

    def observe(server_round: int, arrays: ArrayRecord) -> MetricRecord:
        models.append(flatten(arrays).double().numpy())
        return evaluate(server_round, arrays)

    fedavg = FedAvg(fraction_evaluate=0.0, min_available_nodes=n, min_train_nodes=n)
    z: float | None = None
    reported: float | None = None
    mods: list[Any] = []
    strategy: Any = fedavg
    if method in ("central", "local", "ours", "ours-t0") and epsilon is None:
        raise ValueError(f"{method} needs an epsilon")
    if method in ("central", "local"):
        z = gaussian_multiplier(epsilon=epsilon, delta=DELTA, rounds=rounds)  # type: ignore[arg-type]
    if method == "central":
        from flwr.supercore.privacy_accounting import (
            NeighboringRelation,
            PrivacyConfig,
            SamplingMethod,
        )
        from flwr.supercore.privacy_accounting.rdp_accountant import RdpAccountant

        accountant = RdpAccountant(
            PrivacyConfig(
                target_delta=DELTA,
                population_size=n,
                neighboring_relation=NeighboringRelation.ADD_OR_REMOVE_ONE,
                sampling_method=SamplingMethod.NO_AMPLIFICATION,
            )
        )
        strategy = DifferentialPrivacyServerSideFixedClipping(
            fedavg,
            noise_multiplier=z,
            clipping_norm=CLIP,
            num_sampled_clients=n,
            accountant=accountant,
        )
    elif method == "local":
        mods = [_local_dp_mod(z, CLIP, repeat)]  # type: ignore[arg-type]
    elif method in ("ours", "ours-t0", "ours-nodp"):
        dp = None
        if method != "ours-nodp":
            length = UpdateLayout(model_size=d_model).length
            dp = DistributedDP.for_epsilon(epsilon, clip=CLIP, d=length, rounds=rounds, delta=DELTA)
            z = dp.noise_multiplier
        strategy = CodedSecAgg(
            fedavg,
            num_silos=n,
            num_stragglers=2,
            privacy_threshold=0 if method == "ours-t0" else 1,
            metric_keys=() if dp is None else None,
            dp=dp,
            max_aborted_rounds=0,  # every round measured: a noisy model whose training
            # diverges (NaN updates, refused) leaves the model as it was, and the run goes on
            round_timeout=60.0,
            recovery_timeout=60.0,
            key_timeout=60.0,
            node_wait_timeout=10.0,
            poll_interval=0.005,
            progress=lambda rep: None,
        )
        mods = [coded_secagg_mod]
    elif method != "plain":
        raise ValueError(f"unknown method {method!r}")
    nodes: list[dict[str, Any]] = [{"partition-id": i, "num-partitions": n} for i in range(n)]
    if method == "ours-t0":  # silos refuse T = 0 unless their node config opts out
        nodes = [{**c, "codedfl.allow-no-privacy": True} for c in nodes]
    grid = InProcessGrid([_app(trainer, mods) for _ in range(n)], node_configs=nodes)
    np.random.seed(1000 + repeat)  # Flower's central noise draws from NumPy's global RNG
    stamps: list[float] = []

    def timed(server_round: int, arrays: ArrayRecord) -> MetricRecord:
        stamps.append(time.perf_counter())
        return observe(server_round, arrays)

    t0 = time.perf_counter()
    with task_identity(grid.run.run_id), _quiet_flower(), _session(f"dp-bench-{repeat:04d}"):
        result = strategy.start(
            grid=grid, initial_arrays=initial, num_rounds=rounds, evaluate_fn=timed
        )
    seconds = time.perf_counter() - t0
    accuracy = float(evaluate(rounds, result.arrays)["accuracy"])
    keying = erased = aborted = 0
    if isinstance(strategy, CodedSecAgg):
        reps = strategy.reports
        reported = reps[-1].epsilon if reps else None
        keying = sum(r.keying_rounds for r in reps)
        erased = sum(r.erased for r in reps)
        aborted = sum(not r.ok for r in reps)
        # rounds that released a sum (an aborted round, e.g. every silo's training diverged
        # on a noisy model, is not a round's time)
        round_seconds = [r.seconds for r in reps if r.ok]
    else:
        round_seconds = list(np.diff(stamps))  # evaluation included on every side alike
        if method == "central":
            reported = float(strategy.accountant.get_privacy_spent().epsilon)
    return Run(
        method=method,
        epsilon=epsilon,
        accuracy=accuracy,
        noise_std=_noise(models, trainer, n, d_model),
        round_seconds=round_seconds,
        reported_epsilon=reported,
        noise_multiplier=z,
        keying_rounds=keying,
        erased=erased,
        seconds=seconds,
        aborted=aborted,
    )


def _noise(models: list[np.ndarray], trainer: _Trainer, k: int, d: int) -> list[float]:
    """Per round, the standard deviation per coordinate of what the release added beyond the
    mean of the partitions' clipped updates (rounds that released nothing, and models that
    diverged to NaN, left out)."""
    out = []
    for before, after in itertools.pairwise(models):
        if np.array_equal(before, after) or not np.isfinite(after).all():
            continue  # an aborted round (nothing released) or a model already diverged
        done = trainer.runs.get(_tag(torch.from_numpy(before).float()), {})
        if len(done) < k:
            continue
        mean = np.mean([_clipped(done[p].double().numpy() - before, CLIP) for p in range(k)], 0)
        out.append(float(np.std(after - before - mean)))
    return out


# ---------------------------------------------------------------------------- the benchmark
def _row(report: Report, r: Run) -> dict[str, Any]:
    return report.add(
        method=r.method,
        epsilon=r.epsilon,
        final_accuracy=r.accuracy,
        noise_std_per_coordinate=statistics.median(r.noise_std) if r.noise_std else None,
        reported_epsilon=r.reported_epsilon,
        noise_multiplier=r.noise_multiplier,
        keying_rounds=r.keying_rounds,
        wrapped_coordinates=r.erased,
        aborted_rounds=r.aborted,
        median_round_seconds=statistics.median(r.round_seconds[2:] or r.round_seconds),
        seconds=r.seconds,
        per_round_noise_std=r.noise_std,
    )


def _plot(rows: list[dict[str, Any]], plain: float, path: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, ax = plt.subplots(figsize=(6, 4))
    for method, style in zip(METHODS, ("o-", "s--", "^:", "d-."), strict=True):
        pts = sorted((r["epsilon"], r["final_accuracy"]) for r in rows if r["method"] == method)
        ax.plot([p[0] for p in pts], [100 * p[1] for p in pts], style, label=method)
    ax.axhline(100 * plain, color="k", lw=0.8, label="no DP (plain FedAvg)")
    ax.set_xscale("log")
    ax.set_xlabel("epsilon over 20 rounds (delta = 1e-5)")
    ax.set_ylabel("final accuracy (%)")
    ax.set_title("n = 10, s = 2, K = 10 partitions, main job's CNN")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def run(report: Report, *, quick: bool) -> None:
    """The benchmark (module docstring).

    Parameters
    ----------
    report
        Where the rows and goals go.
    quick
        The small size (CI).
    """
    size = QUICK if quick else FULL
    report.config.update(
        silos=size.silos,
        stragglers=2,
        privacy_threshold=1,
        partitions=size.silos,
        rounds=size.rounds,
        epochs=size.epochs,
        examples=size.examples or 400,
        clip=CLIP,
        delta=DELTA,
        epsilons=list(size.epsilons),
        repeats=size.repeats,
    )
    runs: list[Run] = [run_one("plain", None, size, 0)]
    _row(report, runs[-1])
    for eps in size.epsilons:
        for method in METHODS:
            for rep in range(size.repeats):
                runs.append(run_one(method, eps, size, rep))
                _row(report, runs[-1])
    full = not quick
    med: dict[tuple[str, float | None], float] = {}
    for method in ("plain", *METHODS):
        for eps in (None, *size.epsilons):
            accs = [r.accuracy for r in runs if r.method == method and r.epsilon == eps]
            if accs:
                med[(method, eps)] = statistics.median(accs)
    summary = [
        {"method": m, "epsilon": e, "final_accuracy": a}
        for (m, e), a in sorted(med.items(), key=lambda kv: (kv[0][0], kv[0][1] or 0.0))
    ]
    report.config["median_accuracy"] = summary
    for eps in size.epsilons:
        ours, central, local, ours_t0 = (med[(m, eps)] for m in METHODS)
        if eps in GOAL_EPSILONS:  # 20 and 50: figures beyond the goals (summary rows only)
            report.goal(
                f"epsilon {eps:g}: |ours - central DP| final accuracy (pp)",
                round(100 * abs(ours - central), 6),
                1.0,
                applies=full,
            )
            report.goal(
                f"epsilon {eps:g}: ours - local DP final accuracy (pp, > 0)",
                round(100 * (ours - local), 6),
                1e-9,
                lower_is_better=False,
                applies=full,
            )
        report.add(
            method="summary",
            epsilon=eps,
            ours=ours,
            central=central,
            local=local,
            ours_t0=ours_t0,
            ours_minus_central_pp=100 * (ours - central),
            ours_t0_minus_central_pp=100 * (ours_t0 - central),
        )
    # the round time, with and without DP: alternated pairs at the same setting (epsilon 8, a
    # model that trains without diverging), so both sides see the same machine load
    timing = size.epsilons[-1] if quick else 8.0
    pairs = [
        (run_one("ours-nodp", None, size, rep), run_one("ours", timing, size, 100 + rep))
        for rep in range(size.repeats)
    ]
    base = statistics.median(x for off, _ in pairs for x in off.round_seconds[2:])
    with_dp = statistics.median(x for _, on in pairs for x in on.round_seconds[2:])
    report.add(method="round time", without_dp=base, with_dp=with_dp, ratio=with_dp / base)
    report.goal(
        "ours with DP / without: median round seconds (alternated runs)",
        with_dp / base,
        1.05,
        applies=full,
    )
    for eps in size.epsilons:
        per = {
            m: statistics.median(
                x for r in runs if r.method == m and r.epsilon == eps for x in r.noise_std
            )
            for m in METHODS
        }
        report.add(
            method="noise ratios",
            epsilon=eps,
            ours_over_central=per["ours"] / per["central"],
            ours_t0_over_central=per["ours-t0"] / per["central"],
            local_over_central=per["local"] / per["central"],
        )
    if report.out and not quick:
        png = Path(report.out).with_suffix(".png")
        png.parent.mkdir(parents=True, exist_ok=True)
        rows = [
            {"method": s["method"], "epsilon": s["epsilon"], "final_accuracy": s["final_accuracy"]}
            for s in summary
            if s["method"] in METHODS
        ]
        if _plot(rows, med[("plain", None)], png):
            report.notes.append(f"plot: {png.name} (final accuracy vs epsilon)")
    report.notes.append(
        "The privacy unit is a partition (add or remove one); K = 10 units. Ours calibrates "
        "the noise that survives T = 1 colluding silo: its total variance is g / (g - T) = 1.5 "
        "times the guarantee's (noise ratio ours / central: sqrt(1.5) = 1.22 expected); "
        "ours-t0 is the same protocol at T = 0 (masks against the server, no colluding silo "
        "assumed: still more than central DP's trusted server), whose noise equals central's "
        "(1.00 expected); local DP adds K = 10 times central's variance (3.16 expected). "
        "With 10 units and 20 rounds the noise that epsilon <= 8 needs (z = 2.85-18.1, "
        "i.e. 0.14-0.9 per coordinate of the mean each round) leaves every method at chance "
        "accuracy: the goals' comparisons at epsilon 1, 3 and 8 compare chance-level numbers; "
        "epsilon 20 and 50 show the methods apart."
    )
