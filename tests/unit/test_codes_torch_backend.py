"""The codes on the torch backend (the path CUDA tensors take) give the CPU kernels' bits."""

from __future__ import annotations

import pytest
import torch

from coded_fl.codes import ApproximateCode, make_code
from coded_fl.errors import DecodingError, InputError
from coded_fl.field import PrimeField
from tests.codes_helpers import all_replies, partition_vectors, python_sum


@pytest.mark.parametrize("kind", ["polynomial", "repetition"])
def test_torch_backend_decodes_checks_and_validates(kind):
    field = PrimeField(backend="torch")
    code = make_code(8, 1, kind=kind, field=field)
    vectors = partition_vectors(code, d=7, seed=3)
    replies = all_replies(code, vectors)
    assert code.decode(replies).tolist() == python_sum(vectors, field.p)
    bad = dict(replies)
    bad[6] = (bad[6].to(torch.int64) + 1).remainder(field.p).to(torch.uint32)
    with pytest.raises(DecodingError):
        code.decode(bad)
    wrong = dict(replies)
    wrong[2] = wrong[2].clone()
    wrong[2][0] = field.p
    with pytest.raises(InputError, match="silo 2"):
        code.decode(wrong, check=False)  # (checked, a repetition code reports the disagreement)


def test_torch_backend_estimate():
    field = PrimeField(backend="torch")
    code = ApproximateCode(6, 3, replication=2, field=field)
    vectors = partition_vectors(code, d=4, seed=0)
    replies = all_replies(code, vectors)
    est = code.estimate({i: replies[i] for i in (0, 1, 4)})
    assert est.missing == (2, 3)
    assert est.total.tolist() == python_sum([vectors[j] for j in est.recovered], field.p)
