"""The README's plug-in guide on a project at a real dataset size (issue 15, item 7).

`tests/integration/quickstart_large` is an ordinary Flower project in the PyTorch quickstart
style: 20,000 examples per partition (far above the old fixed weight bound of 1,000), shuffles
from torch's global RNG that the project never seeds, and a server-side ``evaluate_fn``. The
README's lines are applied and nothing else (no ``max_weight``, no ``clip_range``). The run must
complete its round, and its model must be plain FedAvg's round-1 model within quantization
error: the test retrains every partition here with the seeds the mod used (the session's seed
id and the protocol round are in the server's log) and averages them.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch

from coded_fl.layout import METRIC_BOUND
from coded_fl.quantize import QuantizationConfig
from tests.integration.test_plugin_guide import project_task, run_guided, seed_as_the_mod

PROJECT = Path(__file__).with_name("quickstart_large")
N, PARTITION = 4, 20_000


#: The default quantization scale at N summands (clip_range 1, 8 bits of headroom).
SCALE = QuantizationConfig.for_summands(N, clip_range=1.0, headroom_bits=8).scale


def _plain_round_one(task, initial, seed_id: str, protocol_round: int, *, rows, examples, lr):
    """Plain FedAvg's round 1, retrained here with the seeds every replica of each partition
    used: the partitions' trained states, their losses and the average (equal partition
    sizes: FedAvg's weights are equal)."""
    torch.set_num_threads(1)
    states, losses = [], []
    for k in range(N):
        seed_as_the_mod(seed_id, protocol_round, k)
        net = task.Net(rows)
        net.load_state_dict(initial)
        trainset, _ = task.load_data(k, N, examples)
        losses.append(task.train(net, trainset, 1, lr))
        states.append(net.state_dict())
    ref = {name: sum(st[name] for st in states) / N for name in states[0]}
    return states, losses, ref


def _check_train_metrics(models, losses: list[float], *, examples: int, weight_bound: int) -> None:
    """The run's aggregated train metrics (Flower's Result, saved by the project) are plain
    FedAvg's: the example-weighted mean of the partitions' ``train_loss`` (equal sizes: the
    mean), with no metric_keys set (the README's lines only)."""
    saved = json.loads((models / "train_metrics.json").read_text())
    assert set(saved) == {"1"}, saved
    got = saved["1"]
    assert set(got) == {"train_loss"}, got  # what plain FedAvg shows (the weight left out)
    want = sum(losses) / len(losses)
    # quantization error: a metric travels as rho_k m c / METRIC_BOUND (c = 1), K roundings of
    # step 1 / scale, read back times METRIC_BOUND / (c sum_k rho_k)
    bound = N / SCALE * METRIC_BOUND / (N * examples / weight_bound)
    assert abs(got["train_loss"] - want) <= bound + 1e-6, (got, want, bound)


@pytest.mark.integration
@pytest.mark.slow
def test_the_guide_at_a_real_dataset_size_matches_plain_fedavg_round_one(tmp_path):
    out, models = run_guided(PROJECT, tmp_path, num_supernodes=N)
    assert "[coded-fl] round 1: used" in out, out[-3000:]
    assert "ABORTED" not in out, out[-3000:]
    assert "Global evaluation" in out  # Flower's own output stays
    seed_id = re.search(r"derive from '([^']+)'", out)
    assert seed_id is not None, out[-3000:]
    # the weight bound rose by itself from 1,024 to 32,768 (20,000 examples), so round 1 ran
    # as protocol round 2
    rerun = re.search(r"bound raised to (\d+), round rerun \(protocol round (\d+)\)", out)
    assert rerun is not None and int(rerun.group(1)) == 32_768, out[-3000:]
    protocol_round = int(rerun.group(2))

    task = project_task(tmp_path / "quickstart", "quickstart_large_task")
    initial = torch.load(models / "initial_model.pt")
    final = torch.load(models / "final_model.pt")
    _, losses, ref = _plain_round_one(
        task, initial, seed_id.group(1), protocol_round, rows=0, examples=PARTITION, lr=0.05
    )
    _check_train_metrics(models, losses, examples=PARTITION, weight_bound=32_768)
    # quantization error: K stochastic roundings of step 1/scale, divided by the total weight
    # sum_k w_k / W (clip_range 1, the default scale: 8 bits of headroom)
    bound = N / SCALE / (N * PARTITION / 32_768)
    worst = max(float((final[name] - ref[name]).abs().max()) for name in ref)
    moved = max(float((ref[name] - initial[name]).abs().max()) for name in ref)
    print(
        f"max |coded - plain FedAvg| = {worst:.3g} (bound {bound:.3g}); round 1 moved {moved:.3g}"
    )
    assert moved > 100 * bound  # round 1 changed the model far more than the tolerance
    assert worst <= bound + 1e-6, (worst, bound)  # + float32 noise of a different thread count


#: The large model (issue 32): an embedding table of ROWS x 10 beside the linear layer, 25.0 M
#: parameters; SMALL examples per partition keep the training short; at learning rate 2 some
#: entries of the linear layer move by more than the default clip range 1.0 in round 1 in every
#: partition (as 20 entries of a 24 M model did in the report), most entries of the table not
#: at all.
ROWS, SMALL, LR = 2_500_000, 1_000, 2.0


@pytest.mark.integration
@pytest.mark.slow
def test_a_25_million_parameter_model_is_never_silently_clipped(tmp_path):
    # one run: the clip signal is integer counts that quantization keeps exactly under every
    # rounding key (tests/unit/test_layout_clip.py draws the sessions and keys; the rate sent
    # before, which rounded to zero in one run of two in the report, is no longer sent), so a
    # repeat of this run with a fresh session tests nothing more
    conf = f"embedding-rows={ROWS} examples-per-partition={SMALL} learning-rate={LR}"
    out, models = run_guided(PROJECT, tmp_path, num_supernodes=N, run_config=conf)
    assert "[coded-fl] round 1: used" in out, out[-3000:]
    assert "ABORTED" not in out, out[-3000:]
    seed_id = re.search(r"derive from '([^']+)'", out)
    assert seed_id is not None, out[-3000:]
    # the attempt that was applied: after every rerun (wider clip range, higher weight bound)
    rerun = r", round rerun \(protocol round (\d+)\)"
    widened = re.findall(r"clip range widened to ([0-9.e+]+)" + rerun, out)
    raised = re.findall(r"bound raised to (\d+)" + rerun, out)
    protocol_round = max([1] + [int(p) for _, p in widened + raised])
    clip = float(widened[-1][0]) if widened else 1.0
    weight_bound = int(raised[-1][0]) if raised else 1024

    task = project_task(tmp_path / "quickstart", "quickstart_25m")
    initial = torch.load(models / "initial_model.pt")
    final = torch.load(models / "final_model.pt")
    assert sum(v.numel() for v in initial.values()) >= 25_000_000
    states, losses, ref = _plain_round_one(
        task, initial, seed_id.group(1), protocol_round, rows=ROWS, examples=SMALL, lr=LR
    )
    _check_train_metrics(models, losses, examples=SMALL, weight_bound=weight_bound)
    # every partition's update has entries beyond the default clip range: the test bites
    beyond = [sum(int(((s[n] - initial[n]).abs() > 1.0).sum()) for n in s) for s in states]
    assert min(beyond) > 0, beyond
    assert widened, out[-3000:]  # so the clip signal saw them and the round was rerun wider
    # quantization error at the clip range applied: K roundings of step clip / scale, divided
    # by the total weight sum_k w_k / W
    bound = N * clip / SCALE / (N * SMALL / weight_bound)
    worst = max(float((final[name] - ref[name]).abs().max()) for name in ref)
    print(f"entries beyond 1.0: {beyond}; max |coded - plain| = {worst:.3g} (bound {bound:.3g})")
    assert worst <= bound + 1e-6, (worst, bound)
