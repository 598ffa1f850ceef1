"""Elementwise GF(p) kernels: add, sub, neg, mul, powers, signed lifts, the largest element,
and the silo's weighted model delta (with its checks) in one pass.
"""

from __future__ import annotations

import numpy as np
from numba import njit
from numba.core.registry import CPUDispatcher

from coded_fl.kernels.cache import share_cache
from coded_fl.kernels.reduction import _final_m31

__all__ = [
    "add",
    "from_signed",
    "max_element",
    "mul",
    "mul_scalar",
    "neg",
    "power",
    "sub",
    "to_signed",
    "weighted_delta",
]


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


# every kernel defined (or imported) above keeps its compiled code where coded_fl.kernels.cache
# says (one folder for every copy of this file when CODED_FL_KERNEL_CACHE is set)
share_cache(*(f for f in tuple(globals().values()) if isinstance(f, CPUDispatcher)))
