"""The README's legacy plug-in guide and its DP lines, proven with ``flwr run``.

``tests/integration/legacy_quickstart`` is an ordinary project in Flower's legacy style
(``client_fn`` returning a ``NumPyClient``, ``ServerApp(server_fn=...)`` with
``flwr.server.strategy.FedAvg``). Its local training is full-batch gradient descent, the same
update wherever and however often it runs, so plain FedAvg is computed here exactly (the
oracle) and the coded run's round-1 model must match it within the quantization error. The
DP subsection's blocks are applied on top of the guides (legacy and Message API) and must run;
the figures (accuracy with DP against plain FedAvg) are printed.
"""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from coded_fl.quantize import QuantizationConfig
from tests.integration.test_plugin_guide import apply_guide, guide_blocks

PROJECT = Path(__file__).with_name("legacy_quickstart")
QUICKSTART = Path(__file__).with_name("quickstart")
LEGACY = "Legacy Flower projects"
DP = "Strategies that cannot compose, and differential privacy"
N, PARTITION, STEPS, LR = 4, 1000, 5, 0.5


def _blocks(subsection: str, prefix: str) -> list[tuple[str, list[str], list[str]]]:
    return [b for b in guide_blocks(subsection) if b[0].startswith(prefix)]


def _task(dst: Path):  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("legacyapp_task", dst / "legacyapp" / "task.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _plain_fedavg(task, initial: list[np.ndarray], rounds: int) -> list[list[np.ndarray]]:  # type: ignore[no-untyped-def]
    """Plain FedAvg's global model after each round (equal partitions: equal weights)."""
    import torch

    torch.set_num_threads(1)
    out, w = [], initial
    for _ in range(rounds):
        states = []
        for k in range(N):
            net = task.Net()
            task.set_weights(net, w)
            task.train(net, task.load_data(k, N)[0], STEPS, LR)
            states.append(task.get_weights(net))
        w = [sum(s[i] for s in states) / N for i in range(len(w))]
        out.append(w)
    return out


def _accuracy(task, weights: list[np.ndarray]) -> float:  # type: ignore[no-untyped-def]
    net = task.Net()
    task.set_weights(net, [np.asarray(a, dtype=np.float32) for a in weights])
    return task.test(net, task.load_data(0, 1)[1])[1]


def _load(path: Path) -> list[np.ndarray]:
    with np.load(path) as z:
        return [z[f"arr_{i}"] for i in range(len(z.files))]


def test_the_legacy_guide_has_both_sides_and_the_project_is_ordinary() -> None:
    files = {p for p, _, _ in guide_blocks(LEGACY)}
    assert files == {"legacyapp/server_app.py", "legacyapp/client_app.py"}
    for path in files:
        assert "coded" not in (PROJECT / path).read_text().lower()  # plain Flower before
    dp = {p for p, _, _ in guide_blocks(DP)}
    assert dp == files | {"quickstart/server_app.py", "quickstart/client_app.py"}


def test_applying_the_guides_changes_only_those_lines(tmp_path: Path) -> None:
    dst = tmp_path / "legacy"
    shutil.copytree(PROJECT, dst, ignore=shutil.ignore_patterns("__pycache__"))
    apply_guide(dst, guide_blocks(LEGACY))
    apply_guide(dst, _blocks(DP, "legacyapp/"))
    server = (dst / "legacyapp/server_app.py").read_text()
    assert "coded_server_app(server_fn" in server and "DifferentialPrivacyClientSide" in server
    client = (dst / "legacyapp/client_app.py").read_text()
    assert "mods=[coded_secagg_mod, fixedclipping_mod]" in client
    assert (dst / "legacyapp/task.py").read_text() == (PROJECT / "legacyapp/task.py").read_text()
    quick = tmp_path / "quickstart"
    shutil.copytree(QUICKSTART, quick, ignore=shutil.ignore_patterns("__pycache__"))
    apply_guide(quick)
    apply_guide(quick, _blocks(DP, "quickstart/"))
    quick_client = (quick / "quickstart/client_app.py").read_text()
    # Message API: the clipping mod on the train function, so evaluate messages never meet it
    assert "@app.train(mods=[fixedclipping_mod])" in quick_client
    assert "app = ClientApp(mods=[coded_secagg_mod])" in quick_client


def _run(dst: Path, tmp_path: Path, config: str) -> str:
    from simulations.runtime.local_superlink import LocalSuperLink

    with LocalSuperLink(tmp_path / "flwr-home") as link:
        return link.run(dst, num_supernodes=N, run_config=config, timeout=600)


@pytest.mark.integration
@pytest.mark.slow
def test_the_patched_legacy_project_matches_plain_fedavg(tmp_path: Path) -> None:
    dst = tmp_path / "legacy"
    shutil.copytree(PROJECT, dst, ignore=shutil.ignore_patterns("__pycache__"))
    apply_guide(dst, guide_blocks(LEGACY))
    models = tmp_path / "models"
    models.mkdir()
    out = _run(dst, tmp_path, f'model-dir="{models}"')
    assert "[coded-fl] round 1: used" in out and "[coded-fl] round 2: used" in out, out[-3000:]
    assert "ABORTED" not in out
    task = _task(dst)
    initial = _load(models / "round_0.npz")
    plain = _plain_fedavg(task, initial, rounds=1)[0]
    got = _load(models / "round_1.npz")
    # K stochastic roundings of step 1/scale, divided by sum_k w_k / W (W = 1,024)
    scale = QuantizationConfig.for_summands(N, clip_range=1.0, headroom_bits=8).scale
    bound = N / scale / (N * PARTITION / 1024)
    worst = max(float(np.abs(a - b).max()) for a, b in zip(got, plain, strict=True))
    moved = max(float(np.abs(a - b).max()) for a, b in zip(plain, initial, strict=True))
    print(
        f"legacy: max |coded - plain FedAvg| = {worst:.3g} (bound {bound:.3g}), moved {moved:.3g}"
    )
    assert moved > 100 * bound
    assert worst <= bound + 1e-6  # + float32 noise of a different thread count


def _clipped_fedavg_step(task, w: list[np.ndarray], clip: float):  # type: ignore[no-untyped-def]
    """One round of FedAvg from ``w`` with every partition's update clipped to L2 norm
    ``clip`` (as ``fixedclipping_mod`` clips it), and without: (clipped, unclipped) flat."""
    import torch

    torch.set_num_threads(1)
    flat_w = np.concatenate([a.ravel() for a in w]).astype(np.float64)
    ups = []
    for k in range(N):
        net = task.Net()
        task.set_weights(net, w)
        task.train(net, task.load_data(k, N)[0], STEPS, LR)
        ups.append(np.concatenate([a.ravel() for a in task.get_weights(net)]) - flat_w)
    clipped = [u * min(1.0, clip / float(np.linalg.norm(u))) for u in ups]
    return flat_w + np.mean(clipped, axis=0), flat_w + np.mean(ups, axis=0)


def _assert_clipped_and_noised(task, models: Path, rounds: int, *, noise: float) -> None:  # type: ignore[no-untyped-def]
    """From the models the run wrote (not from the silos' log lines, which a loaded machine's
    Ray workers may lose): every round's model is the clipped FedAvg step from the previous
    one plus Gaussian noise of stdev ``noise`` per coordinate. The noise's norm is sqrt(d)
    ``noise`` within a few per cent (d = 7,850); along the direction in which clipping moved
    the mean it is one coordinate's worth (``noise``), where an unclipped run would be off by
    the whole difference (about 0.8 in round 1, i.e. 30 ``noise``)."""
    bit = 0
    for r in range(1, rounds + 1):
        prev = _load(models / f"round_{r - 1}.npz")
        got = np.concatenate([a.ravel() for a in _load(models / f"round_{r}.npz")])
        clipped, unclipped = _clipped_fedavg_step(task, prev, clip=1.0)
        residual = got - clipped
        ratio = float(np.linalg.norm(residual)) / (noise * np.sqrt(got.size))
        assert 0.9 < ratio < 1.1, (r, ratio)  # DP noise of the stated size, nothing else
        gap = unclipped - clipped
        if np.linalg.norm(gap) > 10 * noise:  # clipping moved this round's mean
            along = float(residual @ gap) / float(np.linalg.norm(gap))
            assert abs(along) < 6 * noise, (r, along, float(np.linalg.norm(gap)))
            bit += 1
    assert bit >= 1  # the check has teeth: clipping changed at least round 1


@pytest.mark.integration
@pytest.mark.slow
def test_legacy_dp_guide_runs_and_its_accuracy_is_reported(tmp_path: Path) -> None:
    rounds = 5
    dst = tmp_path / "legacy"
    shutil.copytree(PROJECT, dst, ignore=shutil.ignore_patterns("__pycache__"))
    apply_guide(dst, guide_blocks(LEGACY))
    apply_guide(dst, _blocks(DP, "legacyapp/"))
    models = tmp_path / "models"
    models.mkdir()
    out = _run(dst, tmp_path, f'model-dir="{models}" num-server-rounds={rounds}')
    for r in range(1, rounds + 1):
        assert f"[coded-fl] round {r}: used" in out, out[-3000:]
    # the noise is calibrated to the K = 4 partitions summed: z C / K = 0.1 * 1.0 / 4
    assert re.search(r"central DP noise with 0\.0250 stdev added", out), out[-3000:]
    task = _task(dst)
    _assert_clipped_and_noised(task, models, rounds, noise=0.1 * 1.0 / N)
    initial = _load(models / "round_0.npz")
    dp_acc = _accuracy(task, _load(models / f"round_{rounds}.npz"))
    plain_acc = _accuracy(task, _plain_fedavg(task, initial, rounds)[-1])
    print(
        f"legacy DP (z=0.1, C=1.0, K=4, {rounds} rounds): accuracy {dp_acc:.4f}; plain FedAvg "
        f"{plain_acc:.4f}"
    )
    assert dp_acc > 0.5  # learns despite the noise (chance is 0.1)


@pytest.mark.integration
@pytest.mark.slow
def test_message_api_dp_guide_runs(tmp_path: Path) -> None:
    dst = tmp_path / "quickstart"
    shutil.copytree(QUICKSTART, dst, ignore=shutil.ignore_patterns("__pycache__"))
    apply_guide(dst)
    apply_guide(dst, _blocks(DP, "quickstart/"))
    models = tmp_path / "models"
    models.mkdir()
    out = _run(dst, tmp_path, f'model-dir="{models}"')
    assert "[coded-fl] round 2: used" in out, out[-3000:]
    assert re.search(r"central DP noise with 0\.0250 stdev added", out), out[-3000:]
    assert "ABORTED" not in out
    # federated evaluation still works: every node's evaluate reply came back (with the
    # clipping mod on the whole ClientApp every one failed: 0 results and 4 failures)
    evaluations = re.findall(r"aggregate_evaluate: Received (\d+) results and (\d+) failures", out)
    assert evaluations and set(evaluations) == {("4", "0")}, evaluations
    # the train metrics plain FedAvg shows, with no metric_keys set: Flower's fl-dp-sa example
    # crashed after round 1 on a missing train_loss when they were dropped
    saved = json.loads((models / "train_metrics.json").read_text())
    assert set(saved) == {"1", "2"}, saved
    assert all(set(m) == {"train_loss"} and m["train_loss"] > 0 for m in saved.values()), saved
