"""Stochastic rounding on the CPU: the keyed rounding hash, the value checks, the quantizer
(:func:`stochastic_round`) and the client's fused quantize-encode (:func:`quantize_encode`).

Both quantizers round with the one copy of the hash in this module, so they round bit for bit
alike.
"""

from __future__ import annotations

import numpy as np
from numba import njit
from numba.core.registry import CPUDispatcher

from coded_fl.kernels.cache import share_cache
from coded_fl.kernels.reduction import _BLOCK, _final_m31

__all__ = ["quantize_encode", "sanitize_nonfinite", "scan_values", "stochastic_round"]

_LOW32 = np.uint64(0xFFFFFFFF)
_S32 = np.uint64(32)
# Odd multipliers of the rounding hash (from MurmurHash3's finaliser and the golden ratio).
_C1 = np.uint32(0x9E3779B1)
_C2 = np.uint32(0x85EBCA77)
_C3 = np.uint32(0xC2B2AE3D)
_TWO_M32 = 2.0**-32
_M31_TIMES_2_32 = np.uint64((2**31 - 1) * 2**32)


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


# every kernel defined (or imported) above keeps its compiled code where coded_fl.kernels.cache
# says (one folder for every copy of this file when CODED_FL_KERNEL_CACHE is set)
share_cache(*(f for f in tuple(globals().values()) if isinstance(f, CPUDispatcher)))
