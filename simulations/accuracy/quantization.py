"""Quantization error of the decoded aggregate against the scale (in-memory harness).

For each scale, one protocol round among in-memory machines (:class:`Harness`: real keys,
masks, gradient code and decoding; the last s silos never upload): the decoded sum over the K
partitions against the float64 sum of the same (clipped) partial updates. Stochastic rounding
errs by less than 1/scale per summand and element, so

.. math:: |\\text{decoded sum} - \\text{float sum}| < K / \\text{scale}, \\qquad
          |\\text{decoded average} - \\text{float average}| < K / (\\text{scale} \\cdot W)

with W the total weight (here every partition weighs 1, W = K). Unbiased rounding makes the
root-mean-square error about :math:`\\sqrt{K/6}/\\text{scale}` (fractions uniform).
"""

from __future__ import annotations

import math
from typing import Any

import torch

from coded_fl.quantize import QuantizationConfig
from coded_fl.secagg import ProtocolConfig, RoundResult
from coded_fl.secagg.policy import ClientPolicy
from simulations.runtime.secagg_harness import Harness, Silo, gaussian_partials
from simulations.stragglers.costs import privacy_for

__all__ = ["quantization_sweep"]


def quantization_sweep(
    *, n: int, s: int, d: int, clip_range: float = 1.0, seed: int = 0, spread: float = 0.1
) -> list[dict[str, Any]]:
    """Rows (one per scale, coarse to the finest that cannot wrap around) of the error of the
    decoded aggregate; partial updates are N(0, ``spread``^2) per element."""
    T = privacy_for(n, s)
    finest = QuantizationConfig.max_scale(clip_range=clip_range, num_summands=n)
    default = QuantizationConfig.max_scale(clip_range=clip_range, num_summands=n, headroom_bits=8)
    scales = sorted({2.0**k for k in range(4, int(math.log2(finest)) + 1, 4)} | {default, finest})
    partials = gaussian_partials(d, seed=seed, scale=spread)
    rows = []
    for scale in scales:
        cfg = ProtocolConfig(
            num_silos=n,
            num_stragglers=s,
            privacy_threshold=T,
            vector_length=d,
            clip_range=clip_range,
            scale=scale,
            run_id=f"quant-{scale:g}",
        )
        K = cfg.gradient_code.K
        h = Harness(cfg, partials=partials, seed=seed)
        for c in h.clients.values():  # the sweep goes below the scale floor silos keep by default
            c.policy = ClientPolicy(min_scale=0)
        h.setup()
        out = h.run_round(1, behaviour={i: Silo(drop="train") for i in range(n - s, n)})
        if not isinstance(out.result, RoundResult):
            raise RuntimeError(f"quantization round aborted: {out.result.reason}")
        exact = torch.zeros(d, dtype=torch.float64)
        for k in range(K):
            exact += partials(1, k).double().clamp(-clip_range, clip_range)
        err = (out.result.total - exact).abs()
        rows.append(
            {
                "scale": scale,
                "log2_scale": math.log2(scale),
                "default_scale": scale == default,
                "n": n,
                "s": s,
                "K": K,
                "d": d,
                "clip_range": clip_range,
                "max_abs_error_sum": float(err.max()),
                "bound_sum": K / scale,
                "rms_error_sum": float(err.pow(2).mean().sqrt()),
                "rms_expected_sum": math.sqrt(K / 6) / scale,
                "max_abs_error_average": float(err.max()) / K,
                "bound_average": 1.0 / scale,
                "within_bound": bool(float(err.max()) < K / scale),
            }
        )
    return rows
