"""Small exact GF(p) helpers the codes need beyond :mod:`coded_fl.linalg` (numpy ``int64``).

Every entry is canonical (``0 <= x < p < 2^31``), so a product of two is below :math:`2^{62}`
and is reduced before anything is added to it.

>>> p = 101
>>> prod_mod(np.array([[2, 3, 4], [100, 100, 1]]), p).tolist()  # 24, (-1)(-1)
[24, 1]
>>> A = np.array([[1, 1], [1, 1], [0, 1]])  # rows 0 and 1 are equal
>>> left_nullspace(A, p).tolist()
[[100, 1, 0]]
>>> rank(A, p)
2
"""

from __future__ import annotations

import numpy as np

from coded_fl.linalg import mat_mul

__all__ = ["left_nullspace", "prod_mod", "rank", "rref"]


def prod_mod(a: np.ndarray, p: int) -> np.ndarray:
    """Product mod p along the last axis, by pairwise (tree) reduction: O(log L) numpy steps."""
    x = np.asarray(a, dtype=np.int64)
    if x.shape[-1] == 0:
        return np.ones(x.shape[:-1], dtype=np.int64)
    while x.shape[-1] > 1:
        if x.shape[-1] % 2:
            pad = np.ones((*x.shape[:-1], 1), dtype=np.int64)
            x = np.concatenate([x, pad], axis=-1)
        x = x[..., 0::2] * x[..., 1::2] % p
    return x[..., 0]


def rref(a: np.ndarray, p: int) -> tuple[np.ndarray, list[int]]:
    """Reduced row echelon form over GF(p) and the pivot columns (Gauss-Jordan)."""
    m = np.remainder(np.array(a, dtype=np.int64), p)
    rows, cols = m.shape
    pivots: list[int] = []
    r = 0
    for c in range(cols):
        if r == rows:
            break
        nz = np.flatnonzero(m[r:, c])
        if nz.size == 0:
            continue
        piv = r + int(nz[0])
        if piv != r:
            m[[r, piv]] = m[[piv, r]]
        m[r] = m[r] * pow(int(m[r, c]), -1, p) % p
        factors = m[:, c].copy()
        factors[r] = 0
        m = (m - factors[:, None] * m[r][None, :] % p) % p
        pivots.append(c)
        r += 1
    return m, pivots


def rank(a: np.ndarray, p: int) -> int:
    """Rank over GF(p)."""
    arr = np.asarray(a)
    if arr.size == 0:
        return 0
    return len(rref(arr, p)[1])


def left_nullspace(a: np.ndarray, p: int) -> np.ndarray:
    """A basis (as rows) of :math:`\\{h : h^T A = 0\\}` over GF(p); shape (m - rank, m)."""
    arr = np.remainder(np.asarray(a, dtype=np.int64), p)
    m = arr.shape[0]
    if arr.ndim != 2 or arr.shape[1] == 0:
        return np.eye(m, dtype=np.int64)
    r, pivots = rref(arr.T, p)  # null space of A^T: solutions of A^T h = 0
    free = [c for c in range(m) if c not in set(pivots)]
    basis = np.zeros((len(free), m), dtype=np.int64)
    for row, f in enumerate(free):
        basis[row, f] = 1
        for i, pc in enumerate(pivots):
            basis[row, pc] = (-r[i, f]) % p
    if basis.size:
        check = mat_mul(basis, arr, p)
        if np.any(check):  # cannot happen; kept as a guard against a silent wrong basis
            raise ArithmeticError("left_nullspace produced a vector outside the null space")
    return basis
