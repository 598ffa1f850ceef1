"""The real-valued baseline's decoding error grows with n; the field decode has none."""

from __future__ import annotations

import numpy as np
import pytest

from coded_fl.codes import RealGradientCode, decoding_error
from coded_fl.errors import ConfigurationError, DecodingError, InputError


def test_gaussian_code_decodes_approximately_for_small_n():
    code = RealGradientCode(8, 3, rng=np.random.default_rng(0))
    g = np.random.default_rng(1).standard_normal((8, 16))
    survivors = [0, 2, 3, 6, 7]
    got = code.decode({i: code.matrix[i] @ g for i in survivors})
    assert np.allclose(got, g.sum(axis=0), rtol=1e-9, atol=1e-9)
    assert code.residual(survivors) < 1e-10


def test_error_grows_with_n():
    # median relative error of the decoded sum over random codes and survivor sets (float64):
    # measured about 4e-15 at n = 10, 2e-13 at n = 50, 2e-12 at n = 100 (s = n/10)
    errs = {
        n: decoding_error(n, max(1, n // 10), rng=np.random.default_rng(n), trials=8, d=200)
        for n in (10, 50, 100)
    }
    med = [errs[n]["median_relative_error"] for n in (10, 50, 100)]
    assert med[0] < med[1] < med[2]
    assert med[2] > 50 * med[0]
    cond = [errs[n]["median_condition_number"] for n in (10, 50, 100)]
    assert cond[0] < cond[2]
    # the field code's own formula over the reals breaks down completely
    poly = decoding_error(50, 5, rng=np.random.default_rng(0), trials=2, construction="polynomial")
    assert poly["median_relative_error"] > 0.1


def test_baseline_refusals():
    rng = np.random.default_rng(0)
    with pytest.raises(ConfigurationError, match="Generator"):
        RealGradientCode(5, 1, rng=0)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="construction"):
        RealGradientCode(5, 1, rng=rng, construction="other")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="s=5 must be < n=5"):
        RealGradientCode(5, 5, rng=rng)
    code = RealGradientCode(5, 1, rng=rng)
    with pytest.raises(DecodingError, match="need at least"):
        code.decoding_vector([0, 1, 2])
    with pytest.raises(InputError, match="distinct"):
        code.decoding_vector([0, 1, 2, 2])
