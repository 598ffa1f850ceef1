"""Codes with the real upload path: quantize + encode (fused) on replicas, decode, FedAvg."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from coded_fl.codes import make_code, weighted_mean, weighted_partial
from coded_fl.errors import DecodingError, InputError
from coded_fl.pipeline import encode_upload
from coded_fl.quantize import QuantizationConfig, RoundingKey, dequantize, quantize


@pytest.mark.parametrize(
    ("n", "s", "kind"), [(5, 0, "auto"), (7, 2, "polynomial"), (8, 3, "repetition")]
)
def test_fused_uploads_decode_to_the_weighted_mean(n, s, kind):
    code = make_code(n, s, kind=kind, num_partitions=n + 1)
    F = code.field
    gen = torch.Generator().manual_seed(n)
    d = 33
    updates = [torch.randn(d, generator=gen) * 0.1 for _ in range(code.K)]
    examples = [int(x) for x in torch.randint(10, 100, (code.K,), generator=gen)]
    weights = [e / 100 for e in examples]  # normalised by a public bound
    partials = [weighted_partial(u, w) for u, w in zip(updates, weights, strict=True)]
    cfg = QuantizationConfig.for_summands(code.K, clip_range=1.0)
    keys = [RoundingKey.for_partition("run", 3, j) for j in range(code.K)]
    uploads = {
        i: encode_upload(
            [partials[j] for j in code.support(i)],
            code.coefficients(i),
            [keys[j] for j in code.support(i)],
            cfg,
            F,
        )
        for i in range(n)
    }
    survivors = sorted(np.random.default_rng(n).choice(n, n - s, replace=False).tolist())
    total = code.decode({i: uploads[i] for i in survivors})
    # exactly the sum of the partitions' quantized vectors, as if nobody had straggled
    expect = F.lincomb(
        [1] * code.K, [quantize(v, cfg, k) for v, k in zip(partials, keys, strict=True)]
    )
    assert total.tolist() == expect.tolist()
    mean, weight = weighted_mean(dequantize(total, cfg, F))
    exact = torch.stack(partials).double().sum(dim=0)  # the float FedAvg numerator and weight
    assert abs(weight - float(exact[-1])) <= code.K * cfg.step
    ref = exact[:-1] / exact[-1]
    assert torch.allclose(mean, ref, rtol=0, atol=4 * code.K * cfg.step / float(exact[-1]))


def test_weight_helpers_refuse_bad_values():
    with pytest.raises(InputError):
        weighted_partial(torch.tensor([1, 2]), 1.0)
    with pytest.raises(InputError):
        weighted_partial(torch.tensor([1.0]), float("nan"))
    with pytest.raises(DecodingError, match="total weight"):
        weighted_mean(torch.tensor([1.0, 0.0]))
