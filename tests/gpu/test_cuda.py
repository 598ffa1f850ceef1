"""CUDA path: the same bits as the CPU kernels. Skipped cleanly where there is no GPU."""

from __future__ import annotations

import pytest
import torch

from coded_fl.field import PrimeField
from coded_fl.pipeline import encode_upload
from coded_fl.prg import expand_field_elements
from coded_fl.quantize import QuantizationConfig, RoundingKey, quantize

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device on this machine"),
]

P = [2**31 - 1, 2**31 - 19]


@pytest.mark.parametrize("p", P)
def test_field_ops_on_cuda_equal_cpu(p):
    F = PrimeField(p)
    g = torch.Generator().manual_seed(0)
    a = F.element(torch.randint(0, p, (100_003,), generator=g))
    b = F.element(torch.randint(0, p, (100_003,), generator=g))
    ca, cb = a.cuda(), b.cuda()
    for name in ("add", "sub", "mul"):
        assert torch.equal(getattr(F, name)(ca, cb).cpu(), getattr(F, name)(a, b)), name
    assert torch.equal(F.neg(ca).cpu(), F.neg(a))
    assert torch.equal(F.pow(ca, 12345).cpu(), F.pow(a, 12345))
    assert torch.equal(
        F.lincomb([3, p - 1, 7], [ca, cb, ca]).cpu(), F.lincomb([3, p - 1, 7], [a, b, a])
    )
    assert torch.equal(
        F.matmul([[1, 2], [p - 1, 5]], [ca, cb]).cpu(), F.matmul([[1, 2], [p - 1, 5]], [a, b])
    )


@pytest.mark.parametrize("p", P)
def test_quantize_and_pipeline_on_cuda_equal_cpu(p):
    F = PrimeField(p)
    c = QuantizationConfig.for_summands(10, clip_range=1.0, p=p)
    g = torch.Generator().manual_seed(1)
    xs = [torch.randn(200_001, generator=g) * 0.3 for _ in range(3)]
    keys = [RoundingKey.for_partition(1, 2, j) for j in range(3)]
    mask = expand_field_elements(bytes(32), 200_001, p)
    assert torch.equal(quantize(xs[0].cuda(), c, keys[0]).cpu(), quantize(xs[0], c, keys[0]))
    cpu = encode_upload(xs, [1, 5, p - 1], keys, c, F, mask=mask)
    gpu = encode_upload([x.cuda() for x in xs], [1, 5, p - 1], keys, c, F, mask=mask.cuda())
    assert gpu.device.type == "cuda"
    assert torch.equal(gpu.cpu(), cpu)
    assert expand_field_elements(bytes(32), 10, p, device="cuda").device.type == "cuda"
