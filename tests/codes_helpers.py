"""Oracles and fixtures shared by the gradient-code tests (Python integers only)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from coded_fl.codes import GradientCode


def satisfies_decoding(a: Sequence[int], b_s: np.ndarray, p: int) -> bool:
    """:math:`a^T B_S = 1^T` over GF(p), computed with Python ints."""
    rows = [[int(v) for v in row] for row in b_s]
    for j in range(b_s.shape[1]):
        if sum(int(ai) * row[j] for ai, row in zip(a, rows, strict=True)) % p != 1:
            return False
    return True


def partition_vectors(code: GradientCode, d: int, seed: int) -> list[list[int]]:
    """K random field vectors of length d (Python ints), the largest element included."""
    rng = np.random.default_rng(seed)
    p = code.field.p
    vecs = rng.integers(0, p, size=(code.K, d), dtype=np.int64)
    vecs[:, 0] = p - 1
    return [[int(v) for v in row] for row in vecs]


def as_tensor(values: Sequence[int]) -> torch.Tensor:
    return torch.tensor(np.array(values, dtype=np.uint32))


def all_replies(code: GradientCode, vectors: Sequence[Sequence[int]]) -> dict[int, torch.Tensor]:
    """Every silo's honest reply, via the code's encoder."""
    tensors = [as_tensor(v) for v in vectors]
    return {i: code.encode(i, [tensors[j] for j in code.support(i)]) for i in range(code.n)}


def python_sum(vectors: Sequence[Sequence[int]], p: int) -> list[int]:
    return [sum(col) % p for col in zip(*vectors, strict=True)]
