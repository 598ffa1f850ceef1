"""Public entry points of GF(p) and quantization refuse bad input with typed errors.

Before: values >= p in a uint32 tensor went through (numba returned non-canonical results,
torch's inverse was wrong even mod p), non-integer floats were truncated (``element([2.7])``,
a coefficient 2.5, ``matmul([[0.5]])`` gave 0), NaN / inf / None raised ValueError, TypeError or
OverflowError, ``dequantize`` lifted a value >= p, and a huge clip_range x scale raised a bare
OverflowError.
"""

from __future__ import annotations

import pytest
import torch

from coded_fl.errors import ConfigurationError, InputError
from coded_fl.field import PrimeField
from coded_fl.quantize import QuantizationConfig, dequantize

F = PrimeField()
BIG = torch.tensor([F.p, 2**32 - 1], dtype=torch.uint32)
OK = F.element([1, 2])


@pytest.mark.parametrize("backend", ["numba", "torch"])
@pytest.mark.parametrize(
    "call",
    [
        lambda F: F.add(BIG, OK),
        lambda F: F.sub(OK, BIG),
        lambda F: F.mul(BIG, OK),
        lambda F: F.mul(BIG, 3),
        lambda F: F.neg(BIG),
        lambda F: F.pow(BIG, 3),
        lambda F: F.inv(BIG),
        lambda F: F.to_signed(BIG),
        lambda F: F.lincomb([1, 1], [OK, BIG]),
        lambda F: F.matmul([[1, 1]], [OK, BIG]),
    ],
)
def test_a_value_at_or_above_p_is_refused(backend, call) -> None:
    with pytest.raises(InputError, match="not an element"):
        call(PrimeField(backend=backend))


@pytest.mark.parametrize(
    "values", [[2.7], [2.0], [float("nan")], [float("inf")], [None], [True], "12", [[0.5]]]
)
def test_non_integers_are_refused_not_truncated(values) -> None:
    with pytest.raises(InputError, match="integers"):
        F.element(values)


def test_non_integer_coefficients_are_refused() -> None:
    with pytest.raises(InputError, match="integers"):
        F.lincomb([2.5, 1], [OK, OK])
    with pytest.raises(InputError, match="integers"):
        F.matmul([[0.5]], [OK])
    with pytest.raises(InputError, match="integers"):
        F.mul(OK, 2.5)  # type: ignore[arg-type]
    with pytest.raises(InputError, match="exponent"):
        F.pow(OK, 2.5)  # type: ignore[arg-type]


def test_dequantize_refuses_a_value_at_or_above_p() -> None:
    cfg = QuantizationConfig.for_summands(2, clip_range=1.0)
    with pytest.raises(InputError, match="not an element"):
        dequantize(BIG, cfg, F)


def test_a_huge_clip_range_times_scale_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError, match="exceeds what GF"):
        QuantizationConfig(clip_range=1e200, scale=1e200, num_summands=2)
