"""Real-valued gradient codes, kept only as the baseline that shows why we decode over GF(p).

Construction (after Tandon et al., ICML 2017, written from the paper's description): a
Gaussian :math:`H \\in \\mathbb{R}^{s \\times n}` with rows summing to zero (so
:math:`H 1 = 0`), the cyclic support :math:`\\{i, \\dots, i+s\\} \\bmod n` for row i of B,
:math:`B_{ii} = 1` and the other s entries solving :math:`H_{:,\\text{supp}} b = 0`. Every row of B
then lies in :math:`\\ker H \\ni 1`, and the master solves :math:`B_S^T a = 1` by least squares
for the survivors. Over the reals these systems are ill-conditioned (the condition number of
:math:`B_S` grows quickly with n), so the decoded sum carries an error that grows with n; over
GF(p) (:class:`coded_fl.codes.PolynomialCode`) decoding is exact.

``construction="polynomial"`` evaluates the field code's own formula over the reals (points
spread over [-1, 1]); its products span many orders of magnitude and the error is far worse.

Randomness only from the explicit ``rng``.

>>> code = RealGradientCode(6, 2, rng=np.random.default_rng(0))
>>> bool(code.residual([0, 1, 3, 5]) < 1e-9)
True
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Literal

import numpy as np

from coded_fl.codes.base import check_count
from coded_fl.errors import ConfigurationError, DecodingError, InputError

__all__ = ["RealGradientCode", "decoding_error"]

Construction = Literal["gaussian", "polynomial"]


class RealGradientCode:
    r"""A real-valued gradient code (float64) for n silos, K = n partitions, s stragglers.

    Parameters
    ----------
    n
        Silos (K = n partitions).
    s
        Stragglers tolerated.
    rng
        The generator of the random construction.
    construction
        ``"gaussian"`` (Tandon et al.'s random code) or another construction of this module.

    Raises
    ------
    ConfigurationError
        If :math:`0 \le s < n` does not hold or the construction is unknown.
    """

    def __init__(
        self,
        n: int,
        s: int,
        *,
        rng: np.random.Generator,
        construction: Construction = "gaussian",
    ) -> None:
        self.n = check_count("n", n, minimum=1)
        self.s = check_count("s", s, minimum=0)
        if self.s >= self.n:
            raise ConfigurationError(f"s={self.s} must be < n={self.n}")
        if not isinstance(rng, np.random.Generator):
            raise ConfigurationError("rng must be a numpy Generator (no global random state)")
        if construction == "gaussian":
            self.matrix = self._gaussian(rng)
        elif construction == "polynomial":
            self.matrix = self._polynomial()
        else:
            raise ConfigurationError(
                f"construction={construction!r} is unknown; use 'gaussian' or 'polynomial'"
            )
        self.construction = construction

    def _support(self, i: int) -> list[int]:
        return [(i + t) % self.n for t in range(self.s + 1)]

    def _gaussian(self, rng: np.random.Generator) -> np.ndarray:
        n, s = self.n, self.s
        b = np.zeros((n, n))
        if s == 0:
            return np.eye(n)
        h = rng.standard_normal((s, n))
        h[:, -1] = -h[:, :-1].sum(axis=1)
        for i in range(n):
            sup = self._support(i)
            b[i, i] = 1.0
            b[i, sup[1:]] = -np.linalg.solve(h[:, sup[1:]], h[:, i])
        return b

    def _polynomial(self) -> np.ndarray:
        n, s = self.n, self.s
        alpha = np.linspace(-1.0, 1.0, n) if n > 1 else np.zeros(1)
        b = np.zeros((n, n))
        for j in range(n):
            holders = [(j - t) % n for t in range(s + 1)]
            others = [k for k in range(n) if k not in holders]
            for i in holders:
                b[i, j] = np.prod(alpha[i] - alpha[others])
        return b

    def decoding_vector(self, survivors: Sequence[int]) -> np.ndarray:
        """Least-squares a with :math:`B_S^T a \\approx 1` (all given survivors).

        Parameters
        ----------
        survivors
            The silos whose replies came.

        Returns
        -------
        np.ndarray
        """
        ids = [int(i) for i in survivors]
        if len(set(ids)) != len(ids) or any(not 0 <= i < self.n for i in ids):
            raise InputError(f"survivors must be distinct ids in 0..{self.n - 1}, got {ids}")
        if len(ids) < self.n - self.s:
            raise DecodingError(f"need at least n-s = {self.n - self.s} replies, got {len(ids)}")
        a, *_ = np.linalg.lstsq(self.matrix[ids].T, np.ones(self.n), rcond=None)
        return np.asarray(a)

    def residual(self, survivors: Sequence[int]) -> float:
        """:math:`\\| B_S^T a - 1 \\|_\\infty` for the decoding vector of ``survivors``.

        Parameters
        ----------
        survivors
            The silos whose replies came.

        Returns
        -------
        float
        """
        a = self.decoding_vector(survivors)
        return float(np.abs(self.matrix[list(survivors)].T @ a - 1.0).max())

    def decode(self, replies: Mapping[int, np.ndarray], *, dtype: type = np.float64) -> np.ndarray:
        """:math:`\\sum_i a_i y_i` computed in ``dtype`` (float64 or float32).

        Parameters
        ----------
        replies
            Silo -> its real-valued reply.
        dtype
            float64 or float32.

        Returns
        -------
        np.ndarray
        """
        ids = list(replies)
        a: np.ndarray = self.decoding_vector(ids).astype(dtype)
        ys: np.ndarray = np.stack([np.asarray(replies[i], dtype=dtype) for i in ids])
        return np.asarray(a @ ys)


def decoding_error(
    n: int,
    s: int,
    *,
    rng: np.random.Generator,
    trials: int = 20,
    d: int = 1000,
    construction: Construction = "gaussian",
    dtype: type = np.float64,
) -> dict[str, float]:
    """Relative error :math:`\\|\\hat g - g\\|_2 / \\|g\\|_2` of the decoded sum over ``trials``
    random codes, survivor sets of size n - s and Gaussian partial vectors of length d.

    The replies are encoded exactly in float64 and then rounded to ``dtype`` (float32 is what a
    client would send); the reference sum is float64. Returns the median and the maximum
    relative error, the median residual :math:`\\|B_S^T a - 1\\|_\\infty` and the median
    condition number of :math:`B_S`.

    Parameters
    ----------
    n, s
        Silos and stragglers.
    rng
        The generator of the codes, survivor sets and vectors.
    trials
        Random codes tried.
    d
        Length of the partial vectors.
    construction
        As for :class:`RealGradientCode`.
    dtype
        What the replies are rounded to before decoding.

    Returns
    -------
    dict[str, float]
        The error statistics named above.
    """
    errors, residuals, conds = [], [], []
    for _ in range(trials):
        code = RealGradientCode(n, s, rng=rng, construction=construction)
        survivors = sorted(rng.choice(n, n - s, replace=False).tolist())
        g = rng.standard_normal((n, d))
        replies = {i: (code.matrix[i] @ g).astype(dtype) for i in survivors}
        got = code.decode(replies, dtype=dtype).astype(np.float64)
        true = g.sum(axis=0)
        errors.append(float(np.linalg.norm(got - true) / np.linalg.norm(true)))
        residuals.append(code.residual(survivors))
        conds.append(float(np.linalg.cond(code.matrix[survivors])))
    return {
        "median_relative_error": float(np.median(errors)),
        "max_relative_error": float(np.max(errors)),
        "median_residual": float(np.median(residuals)),
        "median_condition_number": float(np.median(conds)),
    }
