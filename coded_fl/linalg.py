"""Small dense linear algebra over GF(p) on numpy ``int64`` arrays.

These are the matrices of the codes (n x K encoding matrices, U x U recovery matrices): a few
hundred rows at most, held on the host. Every entry is canonical (``0 <= x < p``, ``p < 2^31``);
a product of two entries is below :math:`2^{62}` and is reduced before anything is added to it.

>>> p = 2**31 - 1
>>> A = np.array([[2, 1], [1, 3]])
>>> Ainv = inverse(A, p)
>>> mat_mul(A, Ainv, p).tolist()
[[1, 0], [0, 1]]
>>> lagrange_basis([1, 2, 3], [0], p) @ np.array([1, 4, 9]) % p  # x^2 at 0
array([0])
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from coded_fl.errors import InputError

__all__ = [
    "SingularMatrixError",
    "batch_inverse",
    "inverse",
    "lagrange_basis",
    "left_null_space",
    "mat_mul",
    "solve",
    "vandermonde",
]


class SingularMatrixError(InputError):
    """The matrix has no inverse over GF(p)."""


def _canon(a: Sequence[object] | np.ndarray, p: int) -> np.ndarray:
    arr = np.asarray(a)
    if arr.dtype == object or arr.dtype.kind not in "iu":
        arr = np.array([int(v) % p for v in arr.ravel()], dtype=np.int64).reshape(arr.shape)
    return np.remainder(arr.astype(np.int64), p)


def mat_mul(a: np.ndarray, b: np.ndarray, p: int) -> np.ndarray:
    """:math:`AB` mod p, exact: B is split into 16-bit halves so no int64 sum can overflow."""
    a = _canon(a, p)
    b = _canon(b, p)
    if a.shape[-1] >= 2**16:
        raise InputError("inner dimension too large for mat_mul (must be < 65536)")
    lo = (a @ (b & 0xFFFF)) % p  # terms < 2^47, at most 2^16 of them
    hi = (a @ (b >> 16)) % p  # terms < 2^46
    return (lo + (hi << 16) % p) % p


def batch_inverse(x: Sequence[int] | np.ndarray, p: int) -> np.ndarray:
    """Elementwise inverses (Fermat, vectorised square-and-multiply). Zero raises InputError."""
    base = _canon(x, p)
    if np.any(base == 0):
        raise InputError("0 has no inverse in GF(p)")
    result = np.ones_like(base)
    e = p - 2
    while e:
        if e & 1:
            result = result * base % p
        base = base * base % p
        e >>= 1
    return result


def vandermonde(points: Sequence[int] | np.ndarray, ncols: int, p: int) -> np.ndarray:
    """:math:`V_{ij} = x_i^j` for ``j < ncols``."""
    x = _canon(points, p)
    v = np.ones((x.size, ncols), dtype=np.int64)
    for j in range(1, ncols):
        v[:, j] = v[:, j - 1] * x % p
    return v


def inverse(a: np.ndarray, p: int) -> np.ndarray:
    """Inverse of a square matrix by Gauss-Jordan elimination; raises SingularMatrixError."""
    a = _canon(a, p)
    n = a.shape[0]
    if a.ndim != 2 or a.shape[1] != n:
        raise InputError(f"inverse needs a square matrix, got shape {a.shape}")
    return solve(a, np.eye(n, dtype=np.int64), p)


def solve(a: np.ndarray, b: np.ndarray, p: int) -> np.ndarray:
    """Solve :math:`AX = B` for square A (B a vector or a matrix); raises SingularMatrixError."""
    a = _canon(a, p)
    b = _canon(b, p)
    n = a.shape[0]
    if a.ndim != 2 or a.shape[1] != n or b.shape[0] != n:
        raise InputError(f"solve needs A (n x n) and B (n x ...), got {a.shape} and {b.shape}")
    vec = b.ndim == 1
    m = np.concatenate([a, b.reshape(n, -1)], axis=1)
    for col in range(n):
        nz = np.flatnonzero(m[col:, col])
        if nz.size == 0:
            raise SingularMatrixError(f"matrix is singular over GF({p}) (column {col})")
        piv = col + int(nz[0])
        if piv != col:
            m[[col, piv]] = m[[piv, col]]
        m[col] = m[col] * pow(int(m[col, col]), -1, p) % p
        factors = m[:, col].copy()
        factors[col] = 0
        m = (m - (factors[:, None] * m[col][None, :]) % p) % p
    x = m[:, n:]
    return x.reshape(n) if vec else x


def lagrange_basis(
    nodes: Sequence[int] | np.ndarray, targets: Sequence[int] | np.ndarray, p: int
) -> np.ndarray:
    """:math:`L_{ri} = \\ell_i(t_r)`: evaluating at ``targets`` the polynomial (of degree
    ``< len(nodes)``) that takes values :math:`f_i` at ``nodes`` is ``L @ f``.

    Barycentric form: :math:`\\ell_i(t) = \\ell(t)\\, w_i / (t - x_i)` with
    :math:`w_i = 1/\\prod_{j \\ne i} (x_i - x_j)`; O(R k + k^2) products. Nodes must be distinct.
    """
    x = _canon(nodes, p)
    t = _canon(targets, p)
    k = x.size
    if np.unique(x).size != k:
        raise InputError("interpolation nodes must be distinct")
    diff = (x[:, None] - x[None, :]) % p
    np.fill_diagonal(diff, 1)
    denom = np.ones(k, dtype=np.int64)
    for j in range(k):
        denom = denom * diff[:, j] % p
    w = batch_inverse(denom, p)
    out = np.zeros((t.size, k), dtype=np.int64)
    hit = t[:, None] == x[None, :]
    exact = hit.any(axis=1)
    rows = np.flatnonzero(~exact)
    if rows.size:
        tr = (t[rows, None] - x[None, :]) % p
        ell = np.ones(rows.size, dtype=np.int64)
        for j in range(k):
            ell = ell * tr[:, j] % p
        inv_tr = batch_inverse(tr.ravel(), p).reshape(tr.shape)
        out[rows] = (ell[:, None] * w[None, :] % p) * inv_tr % p
    out[exact] = hit[exact].astype(np.int64)
    return out


def left_null_space(a: np.ndarray, p: int) -> np.ndarray:
    """A basis (rows) of :math:`\\{h : h^T A = 0\\}` over GF(p), for an (r x c) matrix A.

    Returns an (r - rank A) x r matrix in reduced form (Gauss-Jordan on :math:`A^T`).

    >>> left_null_space(np.array([[1, 0], [0, 1], [1, 1]]), 101).tolist()
    [[100, 100, 1]]
    """
    a = _canon(a, p)
    at = a.T.copy()  # solve A^T h = 0
    rows, cols = at.shape
    pivots: list[int] = []
    r = 0
    for col in range(cols):
        if r == rows:
            break
        nz = np.flatnonzero(at[r:, col])
        if nz.size == 0:
            continue
        piv = r + int(nz[0])
        if piv != r:
            at[[r, piv]] = at[[piv, r]]
        at[r] = at[r] * pow(int(at[r, col]), -1, p) % p
        factors = at[:, col].copy()
        factors[r] = 0
        at = (at - (factors[:, None] * at[r][None, :]) % p) % p
        pivots.append(col)
        r += 1
    free = [c for c in range(cols) if c not in pivots]
    basis = np.zeros((len(free), cols), dtype=np.int64)
    for k, f in enumerate(free):
        basis[k, f] = 1
        for i, pc in enumerate(pivots):
            basis[k, pc] = (-at[i, f]) % p
    return basis
