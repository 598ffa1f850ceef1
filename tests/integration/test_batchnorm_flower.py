"""A BatchNorm ResNet through the README's plug-in guide, in a real Flower simulation (issue
32, item 7): the model's ``num_batches_tracked`` buffers (int64) need no edit.

`tests/integration/quickstart_bn` is an ordinary Flower project (plain FedAvg, Message API)
whose model is a small ResNet (conv, BatchNorm2d, a residual block) trained on uneven partitions
(600 to 1,200 examples: different weights and batch counts); its ``evaluate_fn`` keeps every
round's global model with its dtypes. The README's lines are applied and nothing else. The
round-1 model must be plain FedAvg's: the test retrains every partition here with the seeds the
mod used and aggregates the four models with Flower's own ``aggregate_arrayrecords``. Float
arrays agree within the quantization bound; the integer buffers come back as Flower gives them
(float64) and equal the exact weighted mean (Python ints).
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import torch
from flwr.app import ArrayRecord, MetricRecord, RecordDict
from flwr.serverapp.strategy.strategy_utils import aggregate_arrayrecords

from coded_fl.quantize import QuantizationConfig
from tests.integration.test_plugin_guide import project_task, run_guided, seed_as_the_mod

PROJECT = Path(__file__).with_name("quickstart_bn")
N = 4


def _round_one(out: str) -> tuple[int, float, float]:
    """(protocol round, weight bound W, delta scale g) that round 1's applied attempt used."""
    lines = [ln for ln in out.splitlines() if "[coded-fl] round 1:" in ln]
    protocol, bound, g = 1, 1024.0, 1.0
    for line in lines:
        if m := re.search(r"bound raised to (\d+), round rerun \(protocol round (\d+)\)", line):
            bound, protocol = float(m.group(1)), int(m.group(2))
        if m := re.search(
            r"clip range widened to ([0-9.e+]+), round rerun \(protocol round (\d+)", line
        ):
            g, protocol = float(m.group(1)), int(m.group(2))
    return protocol, bound, g


@pytest.mark.integration
@pytest.mark.slow
def test_a_batchnorm_resnet_runs_unedited_and_round_one_is_plain_fedavg(tmp_path: Path) -> None:
    out, models = run_guided(PROJECT, tmp_path, num_supernodes=N)
    assert "[coded-fl] round 1: used" in out, out[-3000:]
    assert "[coded-fl] round 2: used" in out, out[-3000:]  # the float64 counters went back out
    assert "ABORTED" not in out and "clipped" not in out, out[-3000:]
    seed_id = re.search(r"derive from '([^']+)'", out)
    assert seed_id is not None, out[-3000:]
    protocol, weight_bound, g = _round_one(out)

    task = project_task(tmp_path / "quickstart", "quickstart_bn_task")
    initial = dict(np.load(models / "round_0.npz"))
    ours = dict(np.load(models / "round_1.npz"))
    torch.set_num_threads(1)
    replies, weights = [], []
    for k in range(N):  # plain FedAvg's round 1 with the seeds every replica of k used
        seed_as_the_mod(seed_id.group(1), protocol, k)
        net = task.Net()
        net.load_state_dict({n: torch.from_numpy(a) for n, a in initial.items()})
        trainset, _ = task.load_data(k, N)
        task.train(net, trainset, 1, 0.1)
        weights.append(len(trainset[1]))
        replies.append(
            RecordDict(
                {
                    "arrays": ArrayRecord(net.state_dict()),
                    "metrics": MetricRecord({"num-examples": weights[-1]}),
                }
            )
        )
    plain = aggregate_arrayrecords(replies, "num-examples")  # Flower's FedAvg
    counters = [n for n in plain if n.endswith("num_batches_tracked")]
    assert len(counters) == 3
    assert list(ours) == list(plain.keys())
    for name in counters:
        assert initial[name].dtype == np.int64
        want = plain[name].numpy()
        assert ours[name].dtype == want.dtype == np.float64 and ours[name].shape == want.shape
        values = [int(r["arrays"][name].numpy()) for r in replies]
        exact = sum(v * w for v, w in zip(values, weights, strict=True)) / sum(weights)
        assert float(ours[name]) == exact, (name, values)
        assert len(set(values)) > 1 and not exact.is_integer()  # uneven: a real weighted mean
        # Flower's float sum can differ from the exact mean by a few ulps in general (the unit
        # and property tests allow K); for these counters and weights it is the same float64
        assert float(ours[name]) == float(want), (ours[name], want)
        print(f"{name}: coded {float(ours[name])!r}, FedAvg {float(want)!r}, exact {exact!r}")
    # float arrays: K stochastic roundings of step g / scale, over the total weight sum w / W
    scale = QuantizationConfig.for_summands(N, clip_range=1.0, headroom_bits=8).scale
    bound = N * g / scale / (sum(weights) / weight_bound)
    floats = [n for n in plain if n not in counters]
    worst = max(float(np.abs(ours[n] - plain[n].numpy()).max()) for n in floats)
    moved = max(float(np.abs(plain[n].numpy() - initial[n]).max()) for n in floats)
    print(f"max |coded - FedAvg| = {worst:.3g} (bound {bound:.3g}); round 1 moved {moved:.3g}")
    assert moved > 100 * bound
    assert worst <= bound + 1e-6, (worst, bound)  # + float32 noise of a different thread count
    # round 2 started from the float64 counters (torch truncates them into its int64 buffers)
    second = dict(np.load(models / "round_2.npz"))
    for name in counters:
        assert second[name].dtype == np.float64 and second[name] > ours[name]
