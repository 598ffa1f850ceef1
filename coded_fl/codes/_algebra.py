"""Small exact GF(p) helpers the codes need beyond :mod:`coded_fl.linalg` (numpy ``int64``).

Every entry is canonical (``0 <= x < p < 2^31``), so a product of two is below :math:`2^{62}`
and is reduced before anything is added to it.

>>> p = 101
>>> prod_mod(np.array([[2, 3, 4], [100, 100, 1]]), p).tolist()  # 24, (-1)(-1)
[24, 1]
"""

from __future__ import annotations

import numpy as np

__all__ = ["prod_mod"]


def prod_mod(a: np.ndarray, p: int) -> np.ndarray:
    """Product mod p along the last axis, by pairwise (tree) reduction: O(log L) numpy steps.

    Parameters
    ----------
    a
        Field elements (int64, canonical), any shape.
    p
        The modulus.

    Returns
    -------
    numpy.ndarray
        int64, the products over the last axis, mod p.
    """
    x = np.asarray(a, dtype=np.int64)
    if x.shape[-1] == 0:
        return np.ones(x.shape[:-1], dtype=np.int64)
    while x.shape[-1] > 1:
        if x.shape[-1] % 2:
            pad = np.ones((*x.shape[:-1], 1), dtype=np.int64)
            x = np.concatenate([x, pad], axis=-1)
        x = x[..., 0::2] * x[..., 1::2] % p
    return x[..., 0]
