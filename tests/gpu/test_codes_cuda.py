"""Gradient codes on CUDA tensors: the same bits as on the CPU. Skipped without a GPU."""

from __future__ import annotations

import pytest
import torch

from coded_fl.codes import make_code
from coded_fl.errors import DecodingError
from tests.codes_helpers import all_replies, partition_vectors

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device on this machine"),
]


@pytest.mark.parametrize("kind", ["polynomial", "repetition", "plain"])
def test_decode_and_check_on_cuda_equal_cpu(kind):
    code = make_code(12, 0 if kind == "plain" else 2, kind=kind)
    replies = all_replies(code, partition_vectors(code, d=1000, seed=0))
    on_gpu = {i: v.cuda() for i, v in replies.items()}
    survivors = [0, 2, 3, 5, 6, 7, 8, 9, 10, 11] if kind != "plain" else list(range(12))
    cpu = code.decode({i: replies[i] for i in survivors})
    gpu = code.decode({i: on_gpu[i] for i in survivors})
    assert gpu.device.type == "cuda" and torch.equal(gpu.cpu(), cpu)
    if kind != "plain":
        bad = dict(on_gpu)
        bad[5] = (bad[5].to(torch.int64) + 1).remainder(code.field.p).to(torch.uint32)
        with pytest.raises(DecodingError):
            code.decode(bad)
