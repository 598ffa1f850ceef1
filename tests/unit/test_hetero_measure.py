"""simulations.hetero.measure's counting (the training runs are the benchmark's, not a test's)."""

from __future__ import annotations

import torch

from simulations.app.task import Net
from simulations.hetero.measure import HEADROOM, WideNet, _compare, table


def _replica(flat: torch.Tensor) -> dict[str, object]:
    return {"flat": flat, "loss": 0.5, "examples": 400}


def test_identical_replicas_agree_and_one_moved_coordinate_is_counted() -> None:
    init = torch.zeros(50)
    ref = _replica(init + 0.01)
    same = _compare(ref, _replica(init + 0.01), init, k=0, c=1.0, K=10, max_weight=1000.0)
    assert same["params_differ"] == same["update_differ"] == 0
    assert all(q["differ"] == 0 and q["expected"] == 0 for q in same["quantized"].values())
    moved = (init + 0.01).clone()
    moved[7] += 1e-3  # 4e-4 in the update (rho = 0.4): many quantization steps at h = 0
    diff = _compare(ref, _replica(moved), init, k=0, c=1.0, K=10, max_weight=1000.0)
    assert diff["params_differ"] == diff["update_differ"] == 1
    assert diff["vector_length"] == 50 + 5  # model, weight, 3 clip counts, train_loss
    assert diff["quantized"]["0"]["differ"] == 1 and diff["quantized"]["0"]["expected"] == 1.0
    scales = [diff["quantized"][str(h)]["scale"] for h in HEADROOM]
    assert scales == sorted(scales, reverse=True)  # more headroom, coarser scale
    doc = {
        "config": {"headroom_bits": list(HEADROOM), "partitions": [0], "K": 10},
        "settings": {"ref": {"capability": "X", "threads": 1}},
        "rows": [{"model": "net", "epochs": 1, "partition": 0, "setting": "s", **diff}],
    }
    assert "| net (50) | 1 | s | 1 |" in table(doc)


def test_wide_net_has_net_shape_at_width_1() -> None:
    shapes = [tuple(v.shape) for v in WideNet(width=1).state_dict().values()]
    assert shapes == [tuple(v.shape) for v in Net().state_dict().values()]
