"""FedAvg weights through a gradient code: pre-multiply, carry the weight as one coordinate.

Each partition j has a weight :math:`w_j` (e.g. its number of examples, normalised by a public
bound so that it fits the quantization's clip range). Before quantizing, the holder forms
:math:`v_j = (w_j u_j, w_j)`: the weighted update plus one extra coordinate. Every replica of j
forms the same :math:`v_j`, the code is linear, so the decoded sum is
:math:`(\\sum_j w_j u_j, \\sum_j w_j)` and the weighted mean is its first part over its last
coordinate. The code itself never sees the weights.

>>> v0 = weighted_partial(torch.tensor([1.0, 2.0]), 0.25)
>>> v1 = weighted_partial(torch.tensor([3.0, 6.0]), 0.75)
>>> mean, total = weighted_mean(v0 + v1)
>>> mean.tolist(), total
([2.5, 5.0], 1.0)
"""

from __future__ import annotations

import math

import torch

from coded_fl.errors import DecodingError, InputError

__all__ = ["weighted_mean", "weighted_partial"]


def weighted_partial(update: torch.Tensor, weight: float) -> torch.Tensor:
    """:math:`(w u, w)`, flattened: the partition's vector to quantize and encode."""
    if not isinstance(update, torch.Tensor) or not update.is_floating_point():
        raise InputError("update must be a floating point tensor")
    if not math.isfinite(weight) or weight < 0:
        raise InputError(f"weight must be a finite number >= 0, got {weight!r}")
    flat = update.detach().reshape(-1)
    return torch.cat([flat * weight, flat.new_tensor([weight])])


def weighted_mean(total: torch.Tensor) -> tuple[torch.Tensor, float]:
    """Split a decoded, dequantized sum :math:`(\\sum w u, \\sum w)` into the weighted mean
    and the total weight; a total weight <= 0 raises :class:`DecodingError`."""
    if not isinstance(total, torch.Tensor) or not total.is_floating_point() or total.numel() < 2:
        raise InputError("total must be a floating point tensor with the weight as last element")
    flat = total.reshape(-1)
    weight = float(flat[-1])
    if not weight > 0:
        raise DecodingError(f"total weight is {weight}: no weighted mean can be formed")
    return flat[:-1] / weight, weight
