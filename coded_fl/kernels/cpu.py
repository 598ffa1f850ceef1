"""Numba kernels for GF(p) arithmetic and fused quantization on the CPU.

Storage is ``uint32`` (elements in ``[0, p)``); every intermediate is ``uint64``/``int64`` and the
bounds that make it overflow-free are stated next to each kernel. ``p < 2^31`` is checked by
:func:`coded_fl.primes.check_modulus` before any kernel runs.

For the Mersenne prime :math:`p = 2^{31}-1` a product :math:`x < 2^{62}` is folded with
``(x & p) + (x >> 31)`` (no division); other primes use ``%``. Each kernel has both loops and picks
one once, outside the loop, so the hot loop stays branch-free and vectorises.

Loops over several input vectors are blocked (``_BLOCK`` elements) so that the accumulator stays
in L1 and each input is streamed once.

All kernels are single-threaded: one silo is one process, and determinism does not depend on a
thread count.

Length: the numba kernels stay in one module: they share private inline helpers, and stochastic
rounding and the fused quantize-encode must round bit for bit alike from one copy of the hash.
"""

from __future__ import annotations

import numpy as np
from numba import njit
from numba.core.registry import CPUDispatcher
from numba.typed import List

from coded_fl.kernels.cache import share_cache

_M31 = np.uint64(2**31 - 1)
_S31 = np.uint64(31)
_LOW32 = np.uint64(0xFFFFFFFF)
_S32 = np.uint64(32)
# Odd multipliers of the rounding hash (from MurmurHash3's finaliser and the golden ratio).
_C1 = np.uint32(0x9E3779B1)
_C2 = np.uint32(0x85EBCA77)
_C3 = np.uint32(0xC2B2AE3D)
_TWO_M32 = 2.0**-32
_M31_TIMES_2_32 = np.uint64((2**31 - 1) * 2**32)
_BLOCK = 2048


# --------------------------------------------------------------------------- reductions


@njit(inline="always", cache=True)
def _fold_m31(x):  # x: uint64 < 2^64 -> uint64 < 2^32 + 2^31, congruent mod 2^31-1
    return (x & _M31) + (x >> _S31)


@njit(inline="always", cache=True)
def _final_m31(x):  # x: any uint64 -> canonical in [0, p)
    x = (x & _M31) + (x >> _S31)
    x = (x & _M31) + (x >> _S31)
    return x - _M31 if x >= _M31 else x


# --------------------------------------------------------------------------- elementwise


@njit(cache=True)
def add(a, b, out, p):
    """out = a + b mod p, elementwise (uint32 field elements).

    Parameters
    ----------
    a
        Field elements (uint32).
    b
        Field elements (uint32), a's length.
    out
        Where the result is written (uint32, the inputs' length).
    p
        The prime (< 2^31).
    """
    pp = np.uint64(p)
    for i in range(a.size):
        s = np.uint64(a[i]) + np.uint64(b[i])
        out[i] = s - pp if s >= pp else s


@njit(cache=True)
def sub(a, b, out, p):
    """out = a - b mod p, elementwise.

    Parameters
    ----------
    a
        Field elements (uint32).
    b
        Field elements (uint32), a's length.
    out
        Where the result is written (uint32, the inputs' length).
    p
        The prime (< 2^31).
    """
    pp = np.uint64(p)
    for i in range(a.size):
        s = np.uint64(a[i]) + pp - np.uint64(b[i])
        out[i] = s - pp if s >= pp else s


@njit(cache=True)
def neg(a, out, p):
    """out = -a mod p, elementwise.

    Parameters
    ----------
    a
        Field elements (uint32).
    out
        Where the result is written (uint32, the inputs' length).
    p
        The prime (< 2^31).
    """
    pp = np.uint64(p)
    for i in range(a.size):
        x = np.uint64(a[i])
        out[i] = pp - x if x != 0 else x


@njit(cache=True)
def mul(a, b, out, p):
    """out = a * b mod p, elementwise (Mersenne-31 reduction without a division).

    Parameters
    ----------
    a
        Field elements (uint32).
    b
        Field elements (uint32), a's length.
    out
        Where the result is written (uint32, the inputs' length).
    p
        The prime (< 2^31).
    """
    if p == 2**31 - 1:
        for i in range(a.size):
            out[i] = _final_m31(np.uint64(a[i]) * np.uint64(b[i]))
    else:
        pp = np.uint64(p)
        for i in range(a.size):
            out[i] = (np.uint64(a[i]) * np.uint64(b[i])) % pp


@njit(cache=True)
def mul_scalar(a, c, out, p):
    """out = c * a mod p for one scalar c.

    Parameters
    ----------
    a
        Field elements (uint32).
    c
        The scalar (canonical).
    out
        Where the result is written (uint32, the inputs' length).
    p
        The prime (< 2^31).
    """
    cc = np.uint64(c)
    if p == 2**31 - 1:
        for i in range(a.size):
            out[i] = _final_m31(np.uint64(a[i]) * cc)
    else:
        pp = np.uint64(p)
        for i in range(a.size):
            out[i] = (np.uint64(a[i]) * cc) % pp


@njit(cache=True)
def power(a, e, out, p):
    """out = a**e elementwise, e >= 0 (square and multiply, every product < 2^62).

    Parameters
    ----------
    a
        Field elements (uint32).
    e
        The exponent (>= 0).
    out
        Where the result is written (uint32, the inputs' length).
    p
        The prime (< 2^31).
    """
    pp = np.uint64(p)
    for i in range(a.size):
        base = np.uint64(a[i])
        r = np.uint64(1) % pp
        k = e
        while k > 0:
            if k & 1:
                r = (r * base) % pp
            base = (base * base) % pp
            k >>= 1
        out[i] = r


@njit(cache=True)
def from_signed(x, out, p):
    """Signed int64 with |x| < 2^62 -> canonical field element.

    Parameters
    ----------
    x
        Signed integers (int64).
    out
        Where the result is written (uint32, the inputs' length).
    p
        The prime (< 2^31).
    """
    ip = np.int64(p)
    for i in range(x.size):
        r = x[i] % ip  # numba follows Python: result has the sign of ip
        out[i] = r


@njit(cache=True)
def to_signed(a, out, p):
    """Canonical element -> centred representative in (-p/2, p/2].

    Parameters
    ----------
    a
        Field elements (uint32).
    out
        Where the result is written (int64).
    p
        The prime (< 2^31).
    """
    half = np.int64(p // 2)
    ip = np.int64(p)
    for i in range(a.size):
        v = np.int64(a[i])
        out[i] = v - ip if v > half else v


@njit(cache=True)
def max_element(a):
    """The largest element of a (0 for an empty array).

    Parameters
    ----------
    a
        A uint32 array.
    """
    m = np.uint32(0)
    for i in range(a.size):
        if a[i] > m:
            m = a[i]
    return m


@njit(cache=True)
def weighted_delta(new, theta, out, rho, inv_scale, clip, wide):
    """out[i] = ((new[i] - theta[i]) * rho) * inv_scale in float32, in one pass.

    ``new`` may be any float dtype (it is rounded to float32 first), ``theta`` and ``out`` are
    float32; ``rho``, ``inv_scale`` (a power of two), ``clip`` and ``wide`` are float32
    scalars, so every operation rounds as torch's float32 ``(new - theta) * rho / g`` does.
    Returns (NaN/Inf count, count of |out| > clip, count of |out| > wide): the update's checks
    and clip counts, without a second read.

    Parameters
    ----------
    new
        The trained parameters (any float dtype).
    theta
        The model sent (float32).
    out
        float32, the inputs' length.
    rho
        The partition's weight fraction w / W.
    inv_scale
        1 / the round's delta scale.
    clip
        The clip range c.
    wide
        The threshold counted as wide (a quarter of c).
    """
    r = np.float32(rho)
    g = np.float32(inv_scale)
    c = np.float32(clip)
    h = np.float32(wide)
    nonfinite = 0
    beyond = 0
    above = 0
    for i in range(out.size):
        v = ((np.float32(new[i]) - theta[i]) * r) * g
        out[i] = v
        a = abs(v)
        nonfinite += np.int64(not a <= np.float32(3.4028234663852886e38))
        beyond += np.int64(a > c)
        above += np.int64(a > h)
    return nonfinite, beyond, above


# --------------------------------------------------------------------------- combinations


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


# --------------------------------------------------------------------------- quantization


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


@njit(inline="always", cache=True)
def _mum(x, c):
    """32-bit multiply-fold: low word XOR high word of the 64-bit product (one vpmuludq)."""
    prod = np.uint64(x) * np.uint64(c)
    return np.uint32(prod) ^ np.uint32(prod >> _S32)


@njit(inline="always", cache=True)
def _uniform(index, k0, k1):
    """A uniform float64 in [0, 1) with 32 random bits: a keyed hash of the element index.

    h = mum(mum(mum(i ^ k0, C1) ^ k1, C2) ^ k0, C3); all values uint32.
    """
    return _uniform_from_inner(_inner_hash(index, k0), k0, k1)


@njit(inline="always", cache=True)
def _inner_hash(index, k0):
    """First hash round; depends on k0 only, so partitions sharing k0 share it."""
    return _mum(np.uint32(index) ^ k0, _C1)


@njit(inline="always", cache=True)
def _uniform_from_inner(inner, k0, k1):
    return np.float64(_mum(_mum(inner ^ k1, _C2) ^ k0, _C3)) * _TWO_M32


@njit(inline="always", cache=True)
def _round_with(v, u, clip, scale):
    """Clip, scale and stochastically round one float64: floor(t) + (u < frac(t)), as float64.

    The result is an integer-valued float64 with |q| <= ceil(clip * scale) < 2^31 (exact).
    """
    v = min(max(v, -clip), clip)
    t = v * scale
    f = np.floor(t)
    return f + (1.0 if u < t - f else 0.0)


@njit(inline="always", cache=True)
def _round_one(v, i, clip, scale, k0, k1):
    return _round_with(v, _uniform(i, k0, k1), clip, scale)


@njit(cache=True)
def scan_values(x, clip):
    """(number of NaN/Inf, number of values with |x| > clip, Inf included) in one read pass.

    Parameters
    ----------
    x
        A float array.
    clip
        The clip range.
    """
    nonfinite = 0
    beyond = 0
    for i in range(x.size):
        nf, bc = _counts(np.float64(x[i]), clip)
        nonfinite += nf
        beyond += bc
    return nonfinite, beyond


@njit(cache=True)
def sanitize_nonfinite(x, clip):
    """In place: NaN -> 0, +Inf -> clip, -Inf -> -clip.

    Parameters
    ----------
    x
        A float array (changed in place).
    clip
        The clip range.
    """
    for i in range(x.size):
        v = x[i]
        if np.isnan(v):
            x[i] = 0.0
        elif np.isinf(v):
            x[i] = clip if v > 0 else -clip


_FMAX = np.finfo(np.float64).max


@njit(inline="always", cache=True)
def _counts(v, clip):
    """(1 if v is NaN or +-Inf, 1 if |v| > clip with Inf included): two compares, no branch."""
    a = abs(v)
    return np.int64(not a <= _FMAX), np.int64(a > clip)


@njit(cache=True)
def stochastic_round(x, out, clip, scale, k0, k1, offset, p):
    """out[i] = SR(clip(x[i]) * scale), the randomness keyed at index offset + i.

    With ``p == 0`` the signed integers are written (``out`` int64); otherwise they are lifted
    into GF(p) (``out`` uint32): the fused quantizer. Returns (NaN/Inf count, count of
    |x| > clip, Inf included); a NaN's output is meaningless.

    Parameters
    ----------
    x
        The values (float32 or float64).
    out
        int64 (p == 0) or uint32, x's length.
    clip
        The clip range.
    scale
        The quantization scale.
    k0, k1
        The rounding key's words.
    offset
        The global index of x[0].
    p
        The prime, or 0 for signed integers.
    """
    uk0 = np.uint32(k0)
    uk1 = np.uint32(k1)
    ip = np.int64(p)
    nonfinite = 0
    beyond = 0
    for i in range(x.size):
        v = np.float64(x[i])
        nf, bc = _counts(v, clip)
        nonfinite += nf
        beyond += bc
        q = np.int64(_round_one(v, offset + i, clip, scale, uk0, uk1))
        out[i] = q + ip if q < 0 else q
    return nonfinite, beyond


@njit(inline="always", cache=True)
def _term(v, inner, k0, k1, clip, scale):
    return _round_with(v, _uniform_from_inner(inner, k0, k1), clip, scale)


@njit(cache=True)
def quantize_encode(xs, coeffs, keys, mask, out, clip, scale, p, lo, hi):
    """out[i] = mask[i-lo] + sum_k coeffs[k] q_k[i] (mod p) for lo <= i < hi, where
    q_k = SR(clip(xs[k]) * scale) keyed by keys[k] at the global index i.

    The client's whole upload step in one pass over memory; called once for the whole vector or
    once per chunk (then ``mask`` holds the chunk's mask, generated while it is in cache).
    ``mask`` may be empty (no mask). Returns (NaN/Inf count, count of |x| > clip, Inf included).

    Exact float64 accumulation: each coefficient is split into 16-bit halves c = c_hi 2^16 + c_lo
    and two float64 accumulators take c_lo q and c_hi q. Every term is an integer below
    2^16 max|q| and the caller checks k max|q| < 2^30, so both sums stay below 2^53 (exact), with
    no 64-bit integer multiply in the loop. The combination c_hi 2^16 + c_lo is below 2^62.
    Partitions are taken two at a time so each accumulator is loaded and stored once per pair.

    Parameters
    ----------
    xs
        A typed list of the k partitions' float vectors.
    coeffs
        k canonical coefficients (int64).
    keys
        (k, 2) rounding keys (int64).
    mask
        The mask's elements for lo..hi (uint32).
    out
        uint32, hi - lo elements.
    clip
        The clip range.
    scale
        The quantization scale.
    p
        The prime (< 2^31).
    lo, hi
        The global index range written.
    """
    k = len(xs)
    ip = np.int64(p)
    mersenne = p == 2**31 - 1
    has_mask = mask.size > 0
    acc_lo = np.zeros(_BLOCK, dtype=np.float64)
    acc_hi = np.zeros(_BLOCK, dtype=np.float64)
    inner_buf = np.zeros(_BLOCK, dtype=np.uint32)
    shared_k0 = np.uint32(keys[0, 0])
    shared = True
    for j in range(k):
        shared = shared and np.uint32(keys[j, 0]) == shared_k0
    nonfinite = 0
    beyond = 0
    for start in range(lo, hi, _BLOCK):
        end = min(start + _BLOCK, hi)
        n = end - start
        a_lo = acc_lo[:n]
        a_hi = acc_hi[:n]
        inner = inner_buf[:n]
        a_hi[:] = 0.0
        if has_mask:
            mv = mask[start - lo : end - lo]
            for i in range(n):
                a_lo[i] = np.float64(mv[i])
        else:
            a_lo[:] = 0.0
        if shared:  # the first hash round is common to all k inputs: do it once
            for i in range(n):
                inner[i] = _inner_hash(start + i, shared_k0)
        j = 0
        while j < k:
            pair = j + 1 < k and (shared or np.uint32(keys[j + 1, 0]) == np.uint32(keys[j, 0]))
            k0 = np.uint32(keys[j, 0])
            if not shared:
                for i in range(n):
                    inner[i] = _inner_hash(start + i, k0)
            xa = xs[j][start:end]
            la = np.float64(coeffs[j] & 0xFFFF)
            ha = np.float64(coeffs[j] >> 16)
            ka = np.uint32(keys[j, 1])
            if pair:
                xb = xs[j + 1][start:end]
                lb = np.float64(coeffs[j + 1] & 0xFFFF)
                hb = np.float64(coeffs[j + 1] >> 16)
                kb = np.uint32(keys[j + 1, 1])
                for i in range(n):
                    va = np.float64(xa[i])
                    vb = np.float64(xb[i])
                    nfa, bca = _counts(va, clip)
                    nfb, bcb = _counts(vb, clip)
                    nonfinite += nfa + nfb
                    beyond += bca + bcb
                    qa = _term(va, inner[i], k0, ka, clip, scale)
                    qb = _term(vb, inner[i], k0, kb, clip, scale)
                    a_lo[i] += la * qa + lb * qb
                    a_hi[i] += ha * qa + hb * qb
                j += 2
            else:
                for i in range(n):
                    va = np.float64(xa[i])
                    nfa, bca = _counts(va, clip)
                    nonfinite += nfa
                    beyond += bca
                    qa = _term(va, inner[i], k0, ka, clip, scale)
                    a_lo[i] += la * qa
                    a_hi[i] += ha * qa
                j += 1
        ov = out[start:end]
        if mersenne:
            # s + p * 2^32 lies in [0, 2^64) and is congruent to s: fold without division.
            for i in range(n):
                s = np.int64(a_hi[i]) * 65536 + np.int64(a_lo[i])
                ov[i] = _final_m31(np.uint64(s) + _M31_TIMES_2_32)
        else:
            for i in range(n):
                ov[i] = (np.int64(a_hi[i]) * 65536 + np.int64(a_lo[i])) % ip
    return nonfinite, beyond


# --------------------------------------------------------------------------- masks


@njit(cache=True)
def mask_words(words, bits_mask, p):
    """In place: keep the low bits of each word; return how many are >= p (to be rejected).

    Parameters
    ----------
    words
        Keystream words (uint32, changed in place).
    bits_mask
        The low-bit mask (2^bits - 1).
    p
        The prime (< 2^31).
    """
    m = np.uint32(bits_mask)
    pp = np.uint32(p)
    rejected = 0
    for i in range(words.size):
        w = words[i] & m
        words[i] = w
        rejected += w >= pp
    return rejected


@njit(cache=True)
def accept_below(words, bits_mask, p, out, filled):
    """Rejection sampling: append each ``words[i] & bits_mask`` that is < p to ``out``.

    Starts at ``out[filled]``; returns the new fill level (stops when ``out`` is full).

    Parameters
    ----------
    words
        Keystream words (uint32).
    bits_mask
        The low-bit mask.
    p
        The prime (< 2^31).
    out
        The field elements so far (uint32).
    filled
        How many of out are filled.
    """
    m = np.uint32(bits_mask)
    pp = np.uint32(p)
    j = filled
    cap = out.size
    for i in range(words.size):
        if j >= cap:
            break
        w = words[i] & m
        if w < pp:
            out[j] = w
            j += 1
    return j


# --------------------------------------------------------------------------- typed lists


@njit(cache=True)
def list_of(first):
    """A typed list holding ``first`` (what the multi-input kernels take).

    Built here, in a cached kernel, rather than by ``numba.typed.List().append`` from Python:
    that compiles the list's methods for each item type in every fresh process (about 1 s per
    type, not cacheable), where this loads from numba's cache like the other kernels.

    Parameters
    ----------
    first
        A 1-D array.
    """
    out = List()
    out.append(first)
    return out


@njit(cache=True)
def list_append(items, item):
    """Append ``item`` to a typed list made by :func:`list_of` (in place).

    Parameters
    ----------
    items
        A typed list made by list_of.
    item
        A 1-D array of the same type.
    """
    items.append(item)


# every kernel above keeps its compiled code where coded_fl.kernels.cache says (one folder for
# every copy of this file when CODED_FL_KERNEL_CACHE is set)
share_cache(*(f for f in tuple(globals().values()) if isinstance(f, CPUDispatcher)))
