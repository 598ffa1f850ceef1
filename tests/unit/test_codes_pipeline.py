"""Codes with the real upload path: quantize + encode (fused) on replicas, decode, FedAvg."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from coded_fl.codes import make_code
from coded_fl.errors import DecodingError, InputError
from coded_fl.layout import UpdateLayout
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
    lay = UpdateLayout(model_size=d)
    partials = [
        lay.pack(u * w, rho=w, clip_range=1.0) for u, w in zip(updates, weights, strict=True)
    ]
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
    out = lay.unpack(dequantize(total, cfg, F), clip_range=1.0)
    mean, weight = out.mean_delta, out.total_rho
    exact = torch.stack(partials).double().sum(dim=0)  # the float FedAvg numerator and weight
    assert abs(weight - float(exact[d])) <= code.K * cfg.step
    ref = exact[:d] / exact[d]
    assert torch.allclose(mean, ref, rtol=0, atol=4 * code.K * cfg.step / float(exact[d]))


def test_weight_helpers_refuse_bad_values():
    lay = UpdateLayout(model_size=1)
    with pytest.raises(InputError):
        UpdateLayout(model_size=2).pack(torch.tensor([1.0]), rho=1.0, clip_range=1.0)
    with pytest.raises(InputError):
        lay.pack(torch.tensor([1.0]), rho=float("nan"), clip_range=1.0)
    with pytest.raises(InputError, match="NaN/Inf"):
        lay.pack(torch.tensor([float("inf")]), rho=1.0, clip_range=1.0)
    with pytest.raises(InputError, match="metric 'loss' is nan"):
        UpdateLayout(model_size=1, metric_keys=("loss",)).pack(
            torch.tensor([0.5]), rho=1.0, clip_range=1.0, metrics={"loss": float("nan")}
        )
    with pytest.raises(DecodingError, match="total weight"):
        lay.unpack(torch.tensor([1.0, 0.0, 0.0, 0.0, 0.0]), clip_range=1.0)


@pytest.mark.parametrize("g", [1.0, 4.0, 64.0])
def test_a_delta_scale_widens_the_clip_range_and_unpacks_to_the_same_mean(g):
    # entries up to 0.9 g fit the clip range g c with c = 1; the decoded mean is the float
    # FedAvg mean within the quantization step of the scale, which grows with g
    gen = torch.Generator().manual_seed(int(g))
    d = 50
    lay = UpdateLayout(model_size=d)
    deltas = [(torch.rand(d, generator=gen) * 2 - 1) * 0.9 * g for _ in range(3)]
    rhos = [0.5, 0.75, 1.0]
    packed = [
        lay.pack(x * r, rho=r, clip_range=1.0, delta_scale=g)
        for x, r in zip(deltas, rhos, strict=True)
    ]
    assert all(float(p[:d].abs().max()) <= 1.0 for p in packed)  # nothing clipped
    cfg = QuantizationConfig.for_summands(3, clip_range=1.0)
    F = make_code(3, 0).field
    keys = [RoundingKey.for_partition("run", 1, j) for j in range(3)]
    total = F.lincomb([1, 1, 1], [quantize(p, cfg, k) for p, k in zip(packed, keys, strict=True)])
    out = lay.unpack(dequantize(total, cfg, F), clip_range=1.0, delta_scale=g)
    for p, x, r in zip(packed, deltas, rhos, strict=True):  # dividing by a power of two is exact
        assert torch.equal(p[:d] * g, (x * r).float())
    ref = torch.stack([(x * r).double() for x, r in zip(deltas, rhos, strict=True)]).sum(0) / sum(
        rhos
    )
    assert out.clipped_fraction == 0.0
    assert torch.allclose(out.mean_delta, ref, rtol=0, atol=3 * g * cfg.step / sum(rhos))
