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
    "rank",
    "rref",
    "solve",
    "vandermonde",
]


class SingularMatrixError(InputError):
    """The matrix has no inverse over GF(p)."""


def _canon(a: Sequence[object] | np.ndarray, p: int) -> np.ndarray:
    arr = a if isinstance(a, np.ndarray) else np.asarray(a, dtype=object)
    if arr.dtype.kind in "fcbmMSUV":
        raise InputError(f"field elements must be integers, got dtype {arr.dtype}")
    if arr.dtype == object:
        for v in arr.ravel():
            if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
                raise InputError(f"field elements must be integers, got {v!r}")
        arr = np.array([int(v) % p for v in arr.ravel()], dtype=np.int64).reshape(arr.shape)
    return np.remainder(arr.astype(np.int64), p)


def mat_mul(a: np.ndarray, b: np.ndarray, p: int) -> np.ndarray:
    """:math:`AB` mod p, exact: B is split into 16-bit halves so no int64 sum can overflow.

    Parameters
    ----------
    a, b
        Matrices of canonical field elements with matching inner size.
    p
        The modulus.

    Returns
    -------
    numpy.ndarray
        int64, :math:`AB` mod p.
    """
    a = _canon(a, p)
    b = _canon(b, p)
    if a.shape[-1] >= 2**16:
        raise InputError("inner dimension too large for mat_mul (must be < 65536)")
    lo = (a @ (b & 0xFFFF)) % p  # terms < 2^47, at most 2^16 of them
    hi = (a @ (b >> 16)) % p  # terms < 2^46
    return (lo + (hi << 16) % p) % p


def batch_inverse(x: Sequence[int] | np.ndarray, p: int) -> np.ndarray:
    """Elementwise inverses (Fermat, vectorised square-and-multiply). Zero raises InputError.

    Parameters
    ----------
    x
        Nonzero field elements.
    p
        The modulus.

    Returns
    -------
    numpy.ndarray
        int64, the inverses.

    Raises
    ------
    InputError
        If an element is 0.
    """
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
    """:math:`V_{ij} = x_i^j` for ``j < ncols``.

    Parameters
    ----------
    points
        Field elements :math:`x_i`.
    ncols
        Columns.
    p
        The modulus.

    Returns
    -------
    numpy.ndarray
        int64, len(points) x ncols.
    """
    x = _canon(points, p)
    v = np.ones((x.size, ncols), dtype=np.int64)
    for j in range(1, ncols):
        v[:, j] = v[:, j - 1] * x % p
    return v


def inverse(a: np.ndarray, p: int) -> np.ndarray:
    """Inverse of a square matrix by Gauss-Jordan elimination; raises SingularMatrixError.

    Parameters
    ----------
    a
        A square matrix of field elements.
    p
        The modulus.

    Returns
    -------
    numpy.ndarray
        int64, :math:`A^{-1}` mod p.

    Raises
    ------
    SingularMatrixError
        If A is singular mod p.
    """
    a = _canon(a, p)
    if a.ndim != 2 or a.shape[1] != a.shape[0]:
        raise InputError(f"inverse needs a square matrix, got shape {a.shape}")
    n = a.shape[0]
    return solve(a, np.eye(n, dtype=np.int64), p)


def solve(a: np.ndarray, b: np.ndarray, p: int) -> np.ndarray:
    """Solve :math:`AX = B` for square A (B a vector or a matrix); raises SingularMatrixError.

    Parameters
    ----------
    a
        A square matrix of field elements.
    b
        A vector or a matrix with as many rows as A.
    p
        The modulus.

    Returns
    -------
    numpy.ndarray
        int64, X with the shape of B.

    Raises
    ------
    SingularMatrixError
        If A is singular mod p.
    """
    a = _canon(a, p)
    b = _canon(b, p)
    if a.ndim != 2 or b.ndim == 0:
        raise InputError(f"need a square matrix and a vector or matrix, got {a.shape}, {b.shape}")
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

    Parameters
    ----------
    nodes
        k distinct field elements.
    targets
        R field elements to evaluate at.
    p
        The modulus.

    Returns
    -------
    numpy.ndarray
        int64, R x k.

    Raises
    ------
    InputError
        If two nodes coincide.
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


def rref(a: np.ndarray, p: int) -> tuple[np.ndarray, list[int]]:
    """Reduced row echelon form over GF(p) and its pivot columns (Gauss-Jordan).

    The pivot of each column is its first nonzero entry at or below the current row; the form
    is unique, so this is the same matrix any correct elimination gives.

    Parameters
    ----------
    a
        An (r x c) matrix of integers (reduced mod p first).
    p
        The prime modulus.

    Returns
    -------
    tuple[numpy.ndarray, list[int]]
        The (r x c) ``int64`` matrix in reduced row echelon form (canonical entries) and the
        pivot columns in increasing order; ``len(pivots)`` is the rank.

    >>> m, pivots = rref(np.array([[2, 4, 1], [1, 2, 3]]), 101)
    >>> m.tolist(), pivots
    ([[1, 2, 0], [0, 0, 1]], [0, 2])
    """
    m = _canon(a, p)
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
    """Rank over GF(p).

    Parameters
    ----------
    a
        A matrix of integers (an empty one has rank 0).
    p
        The prime modulus.

    Returns
    -------
    int
        The number of pivots of :func:`rref`.

    >>> rank(np.array([[1, 1], [1, 1], [0, 1]]), 101)
    2
    """
    arr = np.asarray(a)
    if arr.size == 0:
        return 0
    return len(rref(arr, p)[1])


def left_null_space(a: np.ndarray, p: int) -> np.ndarray:
    """A basis (rows) of :math:`\\{h : h^T A = 0\\}` over GF(p), for an (r x c) matrix A.

    Solves :math:`A^T h = 0` from the reduced row echelon form of :math:`A^T`: one basis vector
    per free column f (in increasing order), with a 1 at f, :math:`-R_{if}` at the i-th pivot
    column and 0 at the other free columns. The basis is a deterministic function of A (the
    secure-aggregation weight rows and the parity checks of the codes rely on that: server and
    silos compute the same rows independently).

    Parameters
    ----------
    a
        An (r x c) matrix of integers (reduced mod p first); c may be 0.
    p
        The prime modulus.

    Returns
    -------
    numpy.ndarray
        An ((r - rank A) x r) ``int64`` matrix of canonical entries whose rows are
        independent; the identity when A has no columns, (0 x r) when A has full row rank.

    Raises
    ------
    InputError
        If ``a`` is not a matrix.

    >>> left_null_space(np.array([[1, 0], [0, 1], [1, 1]]), 101).tolist()
    [[100, 100, 1]]
    >>> left_null_space(np.array([[1, 1], [1, 1], [0, 1]]), 101).tolist()  # rows 0, 1 equal
    [[100, 1, 0]]
    """
    arr = np.asarray(a)
    if arr.ndim != 2:
        raise InputError(f"left_null_space needs a matrix, got shape {arr.shape}")
    m = arr.shape[0]
    r, pivots = rref(arr.T, p)  # solutions of A^T h = 0
    pivot_set = set(pivots)
    free = [c for c in range(m) if c not in pivot_set]
    basis = np.zeros((len(free), m), dtype=np.int64)
    for row, f in enumerate(free):
        basis[row, f] = 1
        for i, pc in enumerate(pivots):
            basis[row, pc] = (-r[i, f]) % p
    return basis
