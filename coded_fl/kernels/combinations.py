"""Kernels over several vectors: linear combinations, matrix products and the repetition
code's group comparisons (:func:`disagreements`), each reading its inputs once, blocked.
"""

from __future__ import annotations

import numpy as np
from numba import njit
from numba.core.registry import CPUDispatcher

from coded_fl.kernels.cache import share_cache
from coded_fl.kernels.reduction import _BLOCK, _M31, _S31, _final_m31, _fold_m31

__all__ = ["disagreements", "lincomb", "matmul"]


@njit(inline="always", cache=True)
def _max4(a, b, c, d):
    return max(max(a, b), max(c, d))


@njit(cache=True)
def lincomb(coeffs, xs, out, p):
    """out = sum_k coeffs[k] * xs[k] (mod p); coeffs canonical (< p), xs a typed list of uint32.

    Returns the largest input element read, so that a caller can validate its inputs (all < p)
    in the same pass over memory.

    Inputs are taken four at a time, so each block of the accumulator is loaded and stored once
    per four inputs and the loop is memory bound (measured 1.1-1.4x of a plain read of the
    inputs for k = 5..100). Any uint32 input (even one >= p) gives the exact sum mod p.

    Mersenne :math:`p = 2^{31}-1`: a product :math:`c x < 2^{31} 2^{32} = 2^{63}`, so the sum
    t of two is below :math:`2^{64}`; each such pair is folded to ``(t & p) + (t >> 31) <
    2^{33}`` (congruent to t), a group of four adds < 2^34, so the ``uint64`` accumulator takes
    2^30 groups.

    Other primes: each coefficient is split into 16-bit halves :math:`c = c_h 2^{16} + c_l` and two
    ``uint64`` accumulators take :math:`c_l x < 2^{48}` and :math:`c_h x < 2^{47}` (no division in
    the loop); both are reduced mod p every 4096 inputs, so they stay below :math:`2^{60} + p`. The
    result is ``((h % p) * 2**16 + l % p) % p``.

    Parameters
    ----------
    coeffs
        k canonical coefficients (int64).
    xs
        A typed list of k uint32 vectors of one length.
    out
        Where the result is written (uint32, the inputs' length).
    p
        The prime (< 2^31).
    """
    d = out.size
    k = len(xs)
    top = np.uint32(0)
    if p == 2**31 - 1:
        acc = np.zeros(_BLOCK, dtype=np.uint64)
        for start in range(0, d, _BLOCK):
            end = min(start + _BLOCK, d)
            a = acc[: end - start]
            a[:] = 0
            j = 0
            while j + 4 <= k:
                x0 = xs[j][start:end]
                x1 = xs[j + 1][start:end]
                x2 = xs[j + 2][start:end]
                x3 = xs[j + 3][start:end]
                c0 = np.uint64(np.uint32(coeffs[j]))  # < 2^32: a 32x32->64 multiply
                c1 = np.uint64(np.uint32(coeffs[j + 1]))
                c2 = np.uint64(np.uint32(coeffs[j + 2]))
                c3 = np.uint64(np.uint32(coeffs[j + 3]))
                m = np.uint32(0)
                for i in range(a.size):
                    y0, y1, y2, y3 = x0[i], x1[i], x2[i], x3[i]
                    m = max(m, _max4(y0, y1, y2, y3))
                    a[i] += _fold_m31(c0 * np.uint64(y0) + c1 * np.uint64(y1)) + _fold_m31(
                        c2 * np.uint64(y2) + c3 * np.uint64(y3)
                    )
                top = max(top, m)
                j += 4
            while j < k:
                x0 = xs[j][start:end]
                c0 = np.uint64(np.uint32(coeffs[j]))
                m = np.uint32(0)
                for i in range(a.size):
                    y0 = x0[i]
                    m = max(m, y0)
                    a[i] += _fold_m31(c0 * np.uint64(y0))
                top = max(top, m)
                j += 1
            ov = out[start:end]
            for i in range(a.size):
                ov[i] = _final_m31(a[i])
        return top
    pp = np.uint64(p)
    lo_acc = np.zeros(_BLOCK, dtype=np.uint64)
    hi_acc = np.zeros(_BLOCK, dtype=np.uint64)
    for start in range(0, d, _BLOCK):
        end = min(start + _BLOCK, d)
        lo = lo_acc[: end - start]
        hi = hi_acc[: end - start]
        lo[:] = 0
        hi[:] = 0
        j = 0
        while j < k:
            g = min(4, k - j)
            if g == 4:
                x0 = xs[j][start:end]
                x1 = xs[j + 1][start:end]
                x2 = xs[j + 2][start:end]
                x3 = xs[j + 3][start:end]
                l0 = np.uint64(coeffs[j] & 0xFFFF)
                l1 = np.uint64(coeffs[j + 1] & 0xFFFF)
                l2 = np.uint64(coeffs[j + 2] & 0xFFFF)
                l3 = np.uint64(coeffs[j + 3] & 0xFFFF)
                h0 = np.uint64(coeffs[j] >> 16)
                h1 = np.uint64(coeffs[j + 1] >> 16)
                h2 = np.uint64(coeffs[j + 2] >> 16)
                h3 = np.uint64(coeffs[j + 3] >> 16)
                m = np.uint32(0)
                for i in range(lo.size):
                    z0, z1, z2, z3 = x0[i], x1[i], x2[i], x3[i]
                    m = max(m, _max4(z0, z1, z2, z3))
                    y0, y1 = np.uint64(z0), np.uint64(z1)
                    y2, y3 = np.uint64(z2), np.uint64(z3)
                    lo[i] += l0 * y0 + l1 * y1 + l2 * y2 + l3 * y3
                    hi[i] += h0 * y0 + h1 * y1 + h2 * y2 + h3 * y3
                top = max(top, m)
            else:
                for jj in range(j, j + g):
                    x0 = xs[jj][start:end]
                    l0 = np.uint64(coeffs[jj] & 0xFFFF)
                    h0 = np.uint64(coeffs[jj] >> 16)
                    m = np.uint32(0)
                    for i in range(lo.size):
                        z0 = x0[i]
                        m = max(m, z0)
                        lo[i] += l0 * np.uint64(z0)
                        hi[i] += h0 * np.uint64(z0)
                    top = max(top, m)
            j += g
            if j % 4096 == 0 and j < k:  # keep both sums far from 2^64
                for i in range(lo.size):
                    lo[i] = lo[i] % pp
                    hi[i] = hi[i] % pp
        ov = out[start:end]
        for i in range(lo.size):
            ov[i] = ((hi[i] % pp) * np.uint64(65536) + lo[i] % pp) % pp
    return top


@njit(cache=True)
def matmul(m, x, out, p):
    """out[r] = sum_l m[r, l] * x[l] (mod p); m (R, L) canonical int64, x (L, D) uint32 or a
    typed list of L uint32 vectors (read in place, no stacking copy).

    Blocked over D (the accumulators of all R rows stay within about 64 KiB): every block of
    the L inputs is read once from memory for all R outputs. Returns the largest input element
    read (a caller validates its inputs in the same pass).

    Parameters
    ----------
    m
        (R, L) canonical coefficients (int64).
    x
        (L, D) uint32, or a typed list of L uint32 vectors.
    out
        (R, D) uint32.
    p
        The prime (< 2^31).
    """
    rows, inner = m.shape
    d = out.shape[1]
    block = max(256, 8192 // max(rows, 1))
    acc = np.zeros((rows, block), dtype=np.uint64)
    pp = np.uint64(p)
    mersenne = p == 2**31 - 1
    top = np.uint32(0)
    for start in range(0, d, block):
        end = min(start + block, d)
        n = end - start
        acc[:, :n] = 0
        for ll in range(inner):
            xv = x[ll][start:end]
            mx = np.uint32(0)
            for i in range(n):
                mx = max(mx, xv[i])
            top = max(top, mx)
            for r in range(rows):
                if m[r, ll] == 0:  # sparse rows (group comparisons): skip, exactly
                    continue
                c = np.uint64(np.uint32(m[r, ll]))
                a = acc[r, :n]
                if mersenne:
                    for i in range(n):
                        a[i] += _fold_m31(c * np.uint64(xv[i]))
                else:
                    for i in range(n):
                        a[i] += (c * np.uint64(xv[i])) % pp
        for r in range(rows):
            a = acc[r, :n]
            ov = out[r, start:end]
            if mersenne:
                for i in range(n):
                    ov[i] = _final_m31(a[i])
            else:
                for i in range(n):
                    ov[i] = a[i] % pp
    return top


# --------------------------------------------------------------------------- comparisons


@njit(inline="always", cache=True)
def _differ_m31(a, b, c, out):  # out[t] |= b[t] != c a[t] mod 2^31 - 1; branch-free
    for t in range(out.shape[0]):
        v = c * np.uint64(a[t])
        v = (v & _M31) + (v >> _S31)
        v = (v & _M31) + (v >> _S31)  # <= p, where p stands for 0
        w = np.uint64(b[t])  # < p: equal to v, or 0 where v is p
        out[t] |= np.uint8((w != v) & ((w + _M31) != v))


@njit(inline="always", cache=True)
def _differ(a, b, c, out, pp):  # out[t] |= b[t] != c a[t] mod p
    for t in range(out.shape[0]):
        out[t] |= np.uint8(np.uint64(b[t]) != (c * np.uint64(a[t])) % pp)


@njit(cache=True)
def disagreements(x, refs, members, coeffs, out, p):
    """out[t] = 1 where some member's x[members[k]][t] != coeffs[k] * x[refs[k]][t] (mod p),
    else 0; x a typed list of uint32 vectors, coeffs canonical: the group comparisons of the
    repetition code without forming them (replies y_j = r_j (G + zeta) agree when
    y_j = (r_j / r_ref) y_ref). Returns the number of coordinates marked.

    Parameters
    ----------
    x
        A typed list of uint32 replies.
    refs
        Per comparison, the reference reply's index.
    members
        Per comparison, the compared reply's index.
    coeffs
        Per comparison, the coefficient of the reference (canonical).
    out
        uint8 flags, the replies' length.
    p
        The prime (< 2^31).
    """
    for t in range(out.shape[0]):
        out[t] = 0
    for k in range(refs.shape[0]):
        c = np.uint64(coeffs[k])
        if p == 2**31 - 1:
            _differ_m31(x[refs[k]], x[members[k]], c, out)
        else:
            _differ(x[refs[k]], x[members[k]], c, out, np.uint64(p))
    marked = 0
    for t in range(out.shape[0]):
        marked += out[t]
    return marked


# every kernel defined (or imported) above keeps its compiled code where coded_fl.kernels.cache
# says (one folder for every copy of this file when CODED_FL_KERNEL_CACHE is set)
share_cache(*(f for f in tuple(globals().values()) if isinstance(f, CPUDispatcher)))
